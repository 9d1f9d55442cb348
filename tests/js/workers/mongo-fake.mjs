// An in-process stand-in for the few calls of the official mongodb driver that
// MongoStore makes (withSession, withTransaction, insertOne, findOne, find,
// updateOne, findOneAndUpdate, deleteMany, createCollection, createIndex) and
// of the query and update operators it uses ($or, $in, $nin, $lt, $lte, $gt; $set,
// $unset, $inc, $setOnInsert). It is NOT MongoDB: transactions simply run one
// at a time on copies that replace the collections on commit, and a write
// outside a transaction waits for the running one, like a lock. An operator
// it does not know throws, so the adapter cannot rely on one by accident.
// It lets the conformance suite execute the adapter's own code (document
// shapes, update operators, duplicate-key mapping, sessions) on machines with
// no MongoDB server; the real driver and server run when IDEMFLOW_MONGODB_URL is set.

class FakeServerError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'MongoServerError';
    this.code = code;
  }

  hasErrorLabel() {
    return false;
  }
}

const DUPLICATE_KEY = 11000;
const NAMESPACE_EXISTS = 48;

const present = (value) => value !== null && value !== undefined;
const COMPARISONS = {
  $in: (value, list) => list.includes(value),
  $nin: (value, list) => !list.includes(value),
  $lt: (value, bound) => present(value) && value < bound,
  $lte: (value, bound) => present(value) && value <= bound,
  $gt: (value, bound) => present(value) && value > bound,
  $gte: (value, bound) => present(value) && value >= bound,
  $regex: (value, pattern) => typeof value === 'string' && pattern.test(value),
};

function isOperatorObject(condition) {
  return condition !== null && typeof condition === 'object' && Object.keys(condition).some((key) => key.startsWith('$'));
}

function matches(doc, filter) {
  return Object.entries(filter).every(([key, condition]) => {
    if (key === '$or') return condition.some((branch) => matches(doc, branch));
    if (key.startsWith('$')) throw new Error(`mongo-fake: no query operator ${key}`);
    if (!isOperatorObject(condition)) return doc[key] === condition;
    return Object.entries(condition).every(([operator, operand]) => {
      if (!COMPARISONS[operator]) throw new Error(`mongo-fake: no query operator ${operator}`);
      return COMPARISONS[operator](doc[key], operand);
    });
  });
}

function sorted(docs, sort = {}) {
  const keys = Object.entries(sort);
  return [...docs].sort((a, b) => {
    for (const [key, direction] of keys) {
      if (a[key] < b[key]) return -direction;
      if (a[key] > b[key]) return direction;
    }
    return 0;
  });
}

function applyUpdate(doc, update) {
  const unknown = Object.keys(update).filter((operator) => !['$set', '$unset', '$inc', '$setOnInsert'].includes(operator));
  if (unknown.length > 0) throw new Error(`mongo-fake: no update operator ${unknown.join(', ')}`);
  for (const [path, value] of Object.entries(update.$set ?? {})) setPath(doc, path, value);
  for (const path of Object.keys(update.$unset ?? {})) unsetPath(doc, path);
  for (const [key, by] of Object.entries(update.$inc ?? {})) doc[key] = (doc[key] ?? 0) + by;
  // $setOnInsert applies only when an upsert inserts (updateOne does that itself).
}

function setPath(doc, dotted, value) {
  const keys = dotted.split('.');
  let target = doc;
  for (const key of keys.slice(0, -1)) {
    if (target[key] === null || typeof target[key] !== 'object') target[key] = {};
    target = target[key];
  }
  target[keys.at(-1)] = structuredClone(value);
}

function unsetPath(doc, dotted) {
  const keys = dotted.split('.');
  let target = doc;
  for (const key of keys.slice(0, -1)) {
    target = target?.[key];
    if (target === null || typeof target !== 'object') return;
  }
  delete target[keys.at(-1)];
}

class FakeCollection {
  #db;
  #name;

  constructor(db, name) {
    this.#db = db;
    this.#name = name;
  }

  #docs(session) {
    return this.#db._docs(this.#name, session);
  }

  async insertOne(doc, { session } = {}) {
    return this.#db._write(session, () => {
      const docs = this.#docs(session);
      if (docs.has(doc._id))
        throw new FakeServerError(
          `E11000 duplicate key error collection: ${this.#name} dup key: { _id: ${JSON.stringify(doc._id)} }`,
          DUPLICATE_KEY,
        );
      docs.set(doc._id, structuredClone(doc));
      return { acknowledged: true, insertedId: doc._id };
    });
  }

  async findOne(filter, { session } = {}) {
    for (const doc of this.#docs(session).values()) if (matches(doc, filter)) return structuredClone(doc);
    return null;
  }

  async updateOne(filter, update, { session, upsert = false } = {}) {
    return this.#db._write(session, () => {
      const docs = this.#docs(session);
      let doc = [...docs.values()].find((candidate) => matches(candidate, filter));
      let upserted = false;
      if (!doc) {
        if (!upsert) return { acknowledged: true, matchedCount: 0, modifiedCount: 0, upsertedCount: 0 };
        doc = structuredClone(filter);
        for (const [path, value] of Object.entries(update.$setOnInsert ?? {})) setPath(doc, path, value);
        docs.set(doc._id, doc);
        upserted = true;
      }
      applyUpdate(doc, update); // $setOnInsert was applied above, on insert only
      return { acknowledged: true, matchedCount: upserted ? 0 : 1, modifiedCount: upserted ? 0 : 1, upsertedCount: upserted ? 1 : 0 };
    });
  }

  /** Driver 6+: resolves the document (after the update with returnDocument: 'after') or null. */
  async findOneAndUpdate(filter, update, { session, sort, returnDocument = 'before' } = {}) {
    return this.#db._write(session, () => {
      const [doc] = sorted(
        [...this.#docs(session).values()].filter((candidate) => matches(candidate, filter)),
        sort,
      );
      if (!doc) return null;
      const before = structuredClone(doc);
      applyUpdate(doc, update);
      return returnDocument === 'after' ? structuredClone(doc) : before;
    });
  }

  find(filter, { session, sort, limit = 0, projection } = {}) {
    const docs = sorted(
      [...this.#docs(session).values()].filter((doc) => matches(doc, filter)),
      sort,
    );
    const kept = (limit > 0 ? docs.slice(0, limit) : docs).map((doc) => structuredClone(doc));
    const fields = projection ? Object.keys(projection) : null;
    return { toArray: async () => (fields ? kept.map((doc) => Object.fromEntries(fields.map((key) => [key, doc[key]]))) : kept) };
  }

  /** Only what stats() asks: one $group stage by field references, counting with { $sum: 1 }. */
  aggregate(pipeline, { session } = {}) {
    const [stage, ...rest] = pipeline;
    if (rest.length > 0 || !stage.$group) throw new Error('mongo-fake: aggregate takes one $group stage');
    const { _id: key, ...accumulators } = stage.$group;
    if (Object.values(accumulators).some((acc) => acc.$sum !== 1)) throw new Error('mongo-fake: $group counts with { $sum: 1 } only');
    const groups = new Map();
    for (const doc of this.#docs(session).values()) {
      const id = Object.fromEntries(Object.entries(key).map(([name, ref]) => [name, doc[ref.slice(1)]]));
      const held = groups.get(JSON.stringify(id)) ?? { _id: id, ...Object.fromEntries(Object.keys(accumulators).map((name) => [name, 0])) };
      for (const name of Object.keys(accumulators)) held[name] += 1;
      groups.set(JSON.stringify(id), held);
    }
    return { toArray: async () => [...groups.values()] };
  }

  async deleteMany(filter, { session } = {}) {
    return this.#db._write(session, () => {
      const docs = this.#docs(session);
      let deletedCount = 0;
      for (const [id, doc] of docs) {
        if (matches(doc, filter)) {
          docs.delete(id);
          deletedCount += 1;
        }
      }
      return { acknowledged: true, deletedCount };
    });
  }

  async countDocuments() {
    return this.#docs(undefined).size;
  }

  async createIndex() {
    return 'index';
  }

  async drop() {
    this.#db._drop(this.#name);
    return true;
  }
}

class FakeDb {
  #client;
  #collections = new Map();

  constructor(client) {
    this.#client = client;
  }

  collection(name) {
    return new FakeCollection(this, name);
  }

  async createCollection(name) {
    if (this.#collections.has(name)) throw new FakeServerError(`Collection ${name} already exists`, NAMESPACE_EXISTS);
    this.#collections.set(name, new Map());
    return this.collection(name);
  }

  /** @internal the documents a session sees: its transaction's copy, or the committed ones */
  _docs(name, session) {
    if (!this.#collections.has(name)) this.#collections.set(name, new Map());
    const transaction = session?._transaction;
    if (!transaction) return this.#collections.get(name);
    const key = `${name}`;
    if (!transaction.copies.has(key)) transaction.copies.set(key, { db: this, name, docs: structuredClone(this.#collections.get(name)) });
    return transaction.copies.get(key).docs;
  }

  /** @internal writes outside a transaction wait for the running one, like a lock */
  _write(session, write) {
    if (session?._transaction) return write();
    return this.#client._exclusive(async () => write());
  }

  /** @internal */
  _commit(name, docs) {
    this.#collections.set(name, docs);
  }

  /** @internal */
  _drop(name) {
    this.#collections.delete(name);
  }
}

class FakeSession {
  #client;
  _transaction = null;

  constructor(client) {
    this.#client = client;
  }

  async withTransaction(callback) {
    return this.#client._exclusive(async () => {
      this._transaction = { copies: new Map() };
      try {
        const result = await callback(this);
        for (const { db, name, docs } of this._transaction.copies.values()) db._commit(name, docs);
        return result;
      } finally {
        this._transaction = null;
      }
    });
  }
}

export class FakeMongoClient {
  #dbs = new Map();
  #tail = Promise.resolve();

  db(name = 'test') {
    if (!this.#dbs.has(name)) this.#dbs.set(name, new FakeDb(this));
    return this.#dbs.get(name);
  }

  async withSession(executor) {
    return executor(new FakeSession(this));
  }

  async close() {}

  /** @internal one transaction (or write) at a time */
  async _exclusive(fn) {
    const turn = this.#tail.then(() => fn());
    this.#tail = turn.catch(() => {});
    return turn;
  }
}
