// @ts-check
'use strict';
// MongoDB over the official driver: one session per transaction, run by
// session.withTransaction with snapshot reads and majority writes. Receipts
// and operations are keyed by `_id`, which is unique by itself; a workflow
// changes only by a compare-and-set on (_id, status, revision). Transactions
// need a replica set or a sharded cluster. The outbox claim is one
// findOneAndUpdate per operation: a single-document update is atomic.

const { randomUUID } = require('node:crypto');
const { checkOptionKeys, checkHandle } = require('../../core/options.cjs');
const { STORE_UNAVAILABLE, lostRace, isStoreUnavailable: isUnavailable } = require('../../store/errors.cjs');
const {
  DEFAULT_TABLES,
  STORE_OPTIONS,
  TIMEOUT_OPTIONS,
  resolveClock,
  resolveRaceRetries,
  resolveTables,
  resolveTimeouts,
} = require('../../store/options.cjs');
const { transactionOptions, watchClient, withDeadline } = require('../../store/bounds.cjs');
const { StoreBase } = require('../../store/base.cjs');
const { StoreTransaction } = require('../../store/transaction.cjs');
const {
  NAMESPACE_EXISTS,
  DUPLICATE_KEY,
  mapError,
  run,
  operationRecord,
  inserted,
  RECORD_OF,
  READ_CALL,
  documentOf,
  keyExists,
  operationFilter,
} = require('./documents.cjs');

/**
 * @typedef {import('mongodb').MongoClient} MongoClient
 * @typedef {import('mongodb').Db} Db
 * @typedef {import('mongodb').ClientSession} ClientSession
 * @typedef {import('mongodb').TransactionOptions} TransactionOptions
 * @typedef {{ _id: string, status: string, revision: number, data: Record<string, string>, createdAt: number, updatedAt: number }} WorkflowDocument
 * @typedef {{ _id: string, fingerprint: string, workflowId: string, eventType: string, outcome: string,
 *   ruleSetId: string | null, ruleSetVersion: number | null, ruleSetHash: string | null, recordedAt: number,
 *   result?: { operationIds: string[], status: string | null, revision: number | null } | null }} ReceiptDocument
 * @typedef {{ _id: string, type: string, workflowId: string, eventId: string, payload: Record<string, unknown>, status: string,
 *   attempts: number, nextAttemptAt: number, leaseOwner: string | null, leaseExpiresAt: number | null, fencingToken: number,
 *   lastError: string | null, createdAt: number, updatedAt: number, metadata?: Record<string, unknown> | null,
 *   traceContext?: string | null }} OperationDocument
 */

/** @type {TransactionOptions} */
const TRANSACTION_OPTIONS = {
  readConcern: { level: 'snapshot' },
  writeConcern: { w: 'majority' },
  readPreference: 'primary',
};

/**
 * Outbox writes outside a transaction: a claim or a result a failover could
 * roll back is not reported as recorded.
 * @type {{ writeConcern: import('mongodb').WriteConcernSettings }}
 */
const MAJORITY = { writeConcern: { w: 'majority' } };

class MongoTransaction extends StoreTransaction {
  /** @type {ClientSession} */
  #session;
  /** @type {{ check(): void }} */
  #deadline;

  /**
   * @param {MongoStore} store
   * @param {ClientSession} session
   * @param {{ check(): void }} deadline
   */
  constructor(store, session, deadline) {
    super(store);
    this.#session = session;
    this.#deadline = deadline;
  }

  /** @returns {MongoStore} */
  get #store() {
    return /** @type {MongoStore} */ (this._store);
  }

  /** The MongoClient: the host's own operations pass `{ session: tx.session }` to commit with idemflow's. */
  get client() {
    return this.#store.client;
  }

  /** The transaction's ClientSession: every operation of the host's in this transaction passes it. */
  get session() {
    return this.#session;
  }

  /**
   * A MongoDB driver error (a Mongo… error) classified as the store's own are.
   * @param {unknown} thrown
   */
  driverErrorOf(thrown) {
    return thrown instanceof Error && /^Mongo|^PoolCl/.test(thrown.name) ? mapError(thrown) : null;
  }

  /**
   * @internal inserts or replaces a workflow inside the transaction (tx.putWorkflow)
   * @param {{ id: string, status: string, revision: number, data: Record<string, string> }} record
   * @param {number} now
   */
  async _putWorkflow({ id, status, revision, data }, now) {
    await this.#run((options) =>
      this.#store
        ._workflows()
        .updateOne(
          { _id: id },
          { $set: { status, revision, data, updatedAt: now }, $setOnInsert: { createdAt: now } },
          { upsert: true, ...options },
        ),
    );
  }

  /**
   * One driver call of this transaction, within the transaction's deadline.
   * @template T
   * @param {(options: { session: ClientSession, maxTimeMS?: number }) => Promise<T>} call
   * @param {(error: unknown) => Error} [onUnique]
   * @returns {Promise<T>}
   */
  #run(call, onUnique) {
    const options = { session: this.#session, ...this.#store._serverBound() };
    return run(() => call(options), onUnique, this.#deadline);
  }

  /**
   * @param {'workflows' | 'inbox' | 'outbox'} table
   * @param {string} key
   */
  async _read(table, key) {
    return RECORD_OF[table](await this.#run((options) => this.#store._collection(table).findOne({ _id: key }, options)));
  }

  /**
   * @param {'workflows' | 'inbox' | 'outbox'} table
   * @param {any} record
   */
  _insert(table, record) {
    const doc = documentOf(table, record);
    return inserted(() => this.#run((options) => this.#store._collection(table).insertOne(doc, options), keyExists));
  }

  /**
   * An operation written only if its id is absent, read first: a duplicate
   * key error inside a MongoDB transaction aborts the whole transaction.
   * @param {any} record
   */
  async _insertIfAbsent(record) {
    if ((await this._read('outbox', record.id)) !== null) return false;
    return this._insert('outbox', record);
  }

  /** @param {{ id: string, status: string, revision: number, kept: Record<string, string>, removed: string[], expect: { status: string, revision: number }, now: number }} change */
  async _updateWorkflow(change) {
    /** @type {Record<string, unknown>} */
    const set = { status: change.status, revision: change.revision, updatedAt: change.now };
    for (const [field, value] of Object.entries(change.kept)) set[`data.${field}`] = value;
    /** @type {Record<string, ''>} */
    const unset = {};
    for (const field of change.removed) unset[`data.${field}`] = '';
    const update = change.removed.length > 0 ? { $set: set, $unset: unset } : { $set: set };
    const { expect } = change;
    const result = await this.#run((options) =>
      this.#store._workflows().updateOne({ _id: change.id, status: expect.status, revision: expect.revision }, update, options),
    );
    return result.matchedCount === 1;
  }
}

/**
 * A store over a MongoClient. Collections live in `options.db` (a Db or a
 * database name; default: the connection string's database). It is also an
 * outbox store (docs/outbox.md).
 */
class MongoStore extends StoreBase {
  /** What telemetry calls this store (the `idemflow.store` attribute). */
  static kind = 'mongodb';

  static holdsNumbers = true;

  /** @type {{ timeoutMs: number, statementTimeoutMs: number }} */
  #timeouts;

  /**
   * @param {MongoClient} client
   * @param {{ db?: Db | string, tables?: { workflows?: string, inbox?: string, outbox?: string }, raceRetries?: number, maxAttempts?: number,
   *   now?: () => number, timeoutMs?: number, statementTimeoutMs?: number }} [options]
   */
  constructor(client, options = {}) {
    checkHandle(
      client,
      'mongodb',
      (/** @type {any} */ value) =>
        value !== null && typeof value === 'object' && typeof value.withSession === 'function' && typeof value.db === 'function',
      'MongoStore needs a MongoClient',
    );
    checkOptionKeys(options, ['db', ...STORE_OPTIONS, ...TIMEOUT_OPTIONS], 'MongoStore');
    const opts = options ?? {};
    const timeouts = resolveTimeouts(opts);
    super({ now: resolveClock(opts.now), raceRetries: resolveRaceRetries(opts), timeoutMs: timeouts.timeoutMs });
    /** The MongoClient this store works through. */
    this.client = client;
    /** @type {Db} */
    this.db = typeof opts.db === 'object' && opts.db !== null ? opts.db : client.db(opts.db);
    /** @type {{ workflows: string, inbox: string, outbox: string }} */
    this.tables = /** @type {{ workflows: string, inbox: string, outbox: string }} */ (resolveTables(opts.tables));
    this.#timeouts = timeouts;
    // The client re-emits its topology's 'error'; with no listener Node would end the process.
    watchClient(client);
  }

  /**
   * @internal body(deadline), failed with STORE_UNAVAILABLE (reason 'timeout') after options.timeoutMs (or at `deadlineAt`, when sooner).
   * @template T
   * @param {string} operation
   * @param {(deadline: { check(): void }) => Promise<T>} body
   * @param {number | null} [deadlineAt] performance.now() time the whole call must end by
   * @returns {Promise<T>}
   */
  _within(operation, body, deadlineAt = null) {
    return withDeadline(this.#timeouts.timeoutMs, operation, body, deadlineAt);
  }

  /**
   * @internal one driver call outside a transaction, within options.timeoutMs
   * @template T
   * @param {string} operation
   * @param {() => Promise<T>} call
   * @returns {Promise<T>}
   */
  _call(operation, call) {
    return this._within(operation, (deadline) => run(call, undefined, deadline));
  }

  /** @internal the server-side bound of one operation: `{ maxTimeMS }`, or nothing when statementTimeoutMs is 0 */
  _serverBound() {
    const { statementTimeoutMs } = this.#timeouts;
    return statementTimeoutMs > 0 ? { maxTimeMS: statementTimeoutMs } : {};
  }

  /** @internal @returns {import('mongodb').Collection<WorkflowDocument>} */
  _workflows() {
    return this.db.collection(this.tables.workflows);
  }

  /** @internal @returns {import('mongodb').Collection<ReceiptDocument>} */
  _inbox() {
    return this.db.collection(this.tables.inbox);
  }

  /** @internal @returns {import('mongodb').Collection<OperationDocument>} */
  _outbox() {
    return this.db.collection(this.tables.outbox);
  }

  /**
   * @internal the collection of one table, untyped (the records' hooks are generic)
   * @param {'workflows' | 'inbox' | 'outbox'} table
   * @returns {import('mongodb').Collection<any>}
   */
  _collection(table) {
    return this.db.collection(this.tables[table]);
  }

  /**
   * Creates the collections (transactions cannot create them on older
   * servers) and the indexes on recordedAt, (status, nextAttemptAt),
   * (status, leaseExpiresAt) and (status, updatedAt).
   */
  async migrate() {
    return this._within('migrate', (deadline) => this.#migrate(deadline));
  }

  /** @param {{ check(): void }} deadline */
  async #migrate(deadline) {
    for (const name of Object.values(this.tables)) {
      await run(
        async () => {
          try {
            await this.db.createCollection(name);
          } catch (error) {
            if (!(error && typeof error === 'object' && 'code' in error && error.code === NAMESPACE_EXISTS)) throw error;
          }
        },
        undefined,
        deadline,
      );
    }
    await run(() => this._inbox().createIndex({ recordedAt: 1 }), undefined, deadline);
    await run(() => this._outbox().createIndex({ status: 1, nextAttemptAt: 1 }), undefined, deadline);
    await run(() => this._outbox().createIndex({ status: 1, leaseExpiresAt: 1 }), undefined, deadline);
    await run(() => this._outbox().createIndex({ status: 1, updatedAt: 1 }), undefined, deadline);
  }

  /**
   * @internal withExclusiveLock's lock: a lease document `{_id: name, owner,
   * expiresAt}` in `<inbox>_locks`, inserted when absent (an expired one is
   * removed first); the unique _id makes one insert win. Given back by its owner.
   * @param {string} name
   * @param {number} leaseMs
   */
  async _tryLock(name, leaseMs) {
    /** @type {import('mongodb').Collection<{ _id: string, owner: string, expiresAt: number }>} */
    const locks = this.db.collection(`${this.tables.inbox}_locks`);
    const owner = randomUUID();
    const now = this.now();
    await this._call('lock', () => locks.deleteMany({ _id: name, expiresAt: { $lte: now } }, MAJORITY));
    const acquired = await this._call('lock', async () => {
      try {
        await locks.insertOne({ _id: name, owner, expiresAt: now + leaseMs }, MAJORITY);
        return true;
      } catch (error) {
        if (error && typeof error === 'object' && 'code' in error && error.code === DUPLICATE_KEY) return false;
        throw error;
      }
    });
    if (!acquired) return null;
    return async () => {
      try {
        await this._call('lock', () => locks.deleteMany({ _id: name, owner }, MAJORITY));
      } catch {
        // The lease runs out by itself.
      }
    };
  }

  /**
   * Runs fn(tx) in a session transaction (snapshot reads, majority writes).
   * If fn throws, the transaction aborts and the error is rethrown as it was.
   * A write conflict surfaces as CONCURRENT_UPDATE, so processEvent's bounded
   * retry, not the driver's, runs the cycle again.
   * @template T
   * @param {(tx: MongoTransaction) => Promise<T>} fn
   * @param {{ batch?: boolean, deadlineAt?: number }} [options] see store/bounds.cjs transactionOptions
   * @returns {Promise<T>}
   */
  transaction(fn, options) {
    const { deadlineAt } = transactionOptions(options);
    return this._within('transaction', (deadline) => this.#transactionWithin(deadline, fn), deadlineAt);
  }

  /**
   * @template T
   * @param {{ check(): void }} deadline
   * @param {(tx: MongoTransaction) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  async #transactionWithin(deadline, fn) {
    /** @type {{ value: T } | null} */
    let outcome = null;
    /** @type {unknown} */
    let fnError = null;
    const { maxTimeMS } = this._serverBound();
    const commitBound = maxTimeMS === undefined ? {} : { maxCommitTimeMS: maxTimeMS };
    try {
      await this.client.withSession(async (session) => {
        await session.withTransaction(
          async () => {
            outcome = null;
            try {
              // A retry of the driver's after the time ran out throws here, which ends its retries.
              deadline.check();
              outcome = { value: await fn(new MongoTransaction(this, session, deadline)) };
            } catch (error) {
              fnError = error;
              throw error;
            }
          },
          { ...TRANSACTION_OPTIONS, ...commitBound },
        );
      });
    } catch (error) {
      if (error === fnError) throw error;
      throw mapError(error);
    }
    if (outcome === null) throw lostRace(new Error('the transaction ended without running'), 'transaction-aborted');
    return /** @type {{ value: T }} */ (outcome).value;
  }

  /**
   * @internal Inserts or replaces a workflow record.
   * @param {{ id: string, status: string, revision: number, data: Record<string, string> }} record
   */
  async _putWorkflow({ id, status, revision, data }) {
    const now = this.now();
    await this._call('putWorkflow', () =>
      this._workflows().updateOne(
        { _id: id },
        { $set: { status, revision, data, updatedAt: now }, $setOnInsert: { createdAt: now } },
        { upsert: true, writeConcern: { w: 'majority' }, ...this._serverBound() },
      ),
    );
  }

  /**
   * @internal the stored record, or null
   * @param {'workflows' | 'inbox' | 'outbox'} table
   * @param {string} key
   */
  async _read(table, key) {
    return RECORD_OF[table](await this._call(READ_CALL[table], () => this._collection(table).findOne({ _id: key }, this._serverBound())));
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is StoreBase)

  /**
   * @internal Claims one due document per findOneAndUpdate, up to `limit`,
   * oldest due first. If the database fails after some claims, those are
   * returned (to be run, not left to expire); the next claim meets the failure.
   * @param {{ owner: string, now: number, leaseExpiresAt: number, limit: number, types: string[] | null }} request
   */
  _claim(request) {
    return this._within('claimOperations', (deadline) => this.#claim(request, deadline));
  }

  /**
   * @param {{ owner: string, now: number, leaseExpiresAt: number, limit: number, types: string[] | null }} request
   * @param {{ check(): void }} deadline
   */
  async #claim(request, deadline) {
    const { owner, now, leaseExpiresAt, limit, types } = request;
    /** @type {import('mongodb').Filter<OperationDocument>} */
    const due = {
      ...(types === null ? {} : { type: { $in: types } }),
      $or: [
        { status: 'pending', nextAttemptAt: { $lte: now } },
        { status: 'claimed', leaseExpiresAt: { $lte: now } },
      ],
    };
    const update = {
      $set: { status: 'claimed', leaseOwner: owner, leaseExpiresAt, updatedAt: now },
      $inc: { fencingToken: 1, attempts: 1 },
    };
    const claimed = [];
    // The ids this call claimed already: a lease that expires at `now` would make them due again.
    const taken = [];
    while (claimed.length < limit) {
      let doc;
      /** @type {import('mongodb').Filter<OperationDocument>} */
      const filter = taken.length === 0 ? due : { ...due, _id: { $nin: taken } };
      try {
        doc = await run(
          () =>
            this._outbox().findOneAndUpdate(filter, update, {
              sort: { nextAttemptAt: 1, _id: 1 },
              returnDocument: 'after',
              ...MAJORITY,
              ...this._serverBound(),
            }),
          undefined,
          deadline,
        );
      } catch (error) {
        if (claimed.length === 0) throw error;
        break;
      }
      if (doc === null) break;
      taken.push(doc._id);
      claimed.push(operationRecord(doc));
    }
    return claimed;
  }

  /**
   * @internal A guarded change as updateOne: filter on _id, status and the token, `$set` the fields.
   * @param {{ id: string, status: string, fencingToken: number | undefined, set: Record<string, unknown>, giveBackAttempt: boolean }} change
   */
  async _update(change) {
    /** @type {import('mongodb').Filter<OperationDocument>} */
    const filter = {
      _id: change.id,
      status: change.status,
      ...(change.fencingToken === undefined ? {} : { fencingToken: change.fencingToken }),
    };
    const { set } = change;
    const result = await this._call('update', () =>
      this._outbox().updateOne(filter, change.giveBackAttempt ? { $set: set, $inc: { attempts: -1 } } : { $set: set }, {
        ...MAJORITY,
        ...this._serverBound(),
      }),
    );
    return result.matchedCount === 1;
  }

  /**
   * @internal
   * @param {import('../../store/queries.cjs').ListRequest} request
   */
  async _list(request) {
    const filter = operationFilter(request);
    const docs = await this._call('listOperations', () =>
      this._outbox()
        .find(filter, { sort: { _id: 1 }, limit: request.limit, ...this._serverBound() })
        .toArray(),
    );
    return docs.map(operationRecord);
  }

  /**
   * @internal stats(): counts by type and status (one $group), and the oldest due time (two index reads)
   * @param {{ now: number }} request
   */
  async _stats({ now }) {
    const groups = /** @type {{ _id: { type: unknown, status: unknown }, n: number }[]} */ (
      await this._call('stats', () =>
        this._outbox()
          .aggregate([{ $group: { _id: { type: '$type', status: '$status' }, n: { $sum: 1 } } }], this._serverBound())
          .toArray(),
      )
    );
    /** @param {import('mongodb').Filter<OperationDocument>} filter @param {'nextAttemptAt' | 'leaseExpiresAt'} field */
    const first = async (filter, field) => {
      const [doc] = await this._call('stats', () =>
        this._outbox()
          .find(filter, { sort: { [field]: 1 }, limit: 1, projection: { [field]: 1 }, ...this._serverBound() })
          .toArray(),
      );
      return doc === undefined ? null : doc[field];
    };
    const since = [
      await first({ status: 'pending', nextAttemptAt: { $lte: now } }, 'nextAttemptAt'),
      await first({ status: 'claimed', leaseExpiresAt: { $lte: now } }, 'leaseExpiresAt'),
    ].filter((value) => typeof value === 'number');
    return {
      counts: groups.map((group) => ({ type: group._id.type, status: group._id.status, count: group.n })),
      oldestDueAt: since.length === 0 ? null : Math.min(...since),
    };
  }

  /**
   * @internal One purge batch: the ids of the oldest matching documents, then deleteMany
   * of those still matching. Returns how many were deleted.
   * @param {'receipts' | 'operations'} target
   * @param {{ olderThan: number, batchSize: number, status: string | null }} request
   */
  async _purgeBatch(target, { olderThan, batchSize, status }) {
    /**
     * @template {{ _id: string }} T
     * @param {import('mongodb').Collection<T>} collection
     * @param {import('mongodb').Filter<T>} filter
     * @param {import('mongodb').Sort} sort
     */
    const batch = async (collection, filter, sort) => {
      const ids = (
        await this._call('purge', () =>
          collection.find(filter, { projection: { _id: 1 }, sort, limit: batchSize, ...this._serverBound() }).toArray(),
        )
      ).map((doc) => doc._id);
      if (ids.length === 0) return 0;
      return (
        await this._call('purge', () => collection.deleteMany({ ...filter, _id: { $in: ids } }, { ...MAJORITY, ...this._serverBound() }))
      ).deletedCount;
    };
    return target === 'receipts'
      ? batch(this._inbox(), { recordedAt: { $lt: olderThan } }, { recordedAt: 1 })
      : batch(this._outbox(), { status: String(status), updatedAt: { $lt: olderThan } }, { updatedAt: 1 });
  }
}

/** @type {(error: unknown) => boolean} */
const isStoreUnavailable = isUnavailable;

module.exports = {
  MongoStore,
  MongoTransaction,
  DEFAULT_TABLES,
  STORE_UNAVAILABLE,
  isStoreUnavailable,
};
