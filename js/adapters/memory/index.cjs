'use strict';
// An in-memory store: all-or-nothing transactions serialised within one
// process. For tests, examples and single-process tools; it is not durable.
// It also implements the outbox store interface (docs/outbox.md) the
// consumer drives: every outbox method runs alone, like one SQL statement.

const { checkOptionKeys } = require('../../core/options.cjs');
const { IdemflowError } = require('../../core/errors.cjs');
const { invalidArgument } = require('../../store/errors.cjs');
const { resolveClock, resolveTimeouts } = require('../../store/options.cjs');
const { Serializer, checkTimeLeft, transactionOptions, withDeadline } = require('../../store/bounds.cjs');
const { StoreBase } = require('../../store/base.cjs');
const { StoreTransaction } = require('../../store/transaction.cjs');
const { operationMatches } = require('../../store/queries.cjs');
const { putOptionsOf, workflowToStore } = require('../../store/records.cjs');
const { copy, readReceiptRecord, operationRecord, RECORD_OF, HELD_OF, claimable, byId, DELETED, draftRecord } = require('./rows.cjs');

/**
 * One table of a transaction's draft view: a Map over the same pending
 * writes as the handle's methods, so a row set here is seen by getWorkflow,
 * insertOperation's uniqueness check and the rest, and is kept or discarded
 * with the transaction. get() and iteration return copies: change a row by
 * set()ting it back (an in-place change would otherwise skip the checks).
 */
class DraftTable extends Map {
  #table;
  #tx;

  constructor(table, tx) {
    super();
    this.#table = table;
    this.#tx = tx;
  }

  get size() {
    let count = 0;
    for (const _ of this.keys()) count += 1;
    return count;
  }

  has(key) {
    return this.#tx._draftRead(this.#table, key) !== undefined;
  }

  get(key) {
    const record = this.#tx._draftRead(this.#table, key);
    return record === undefined ? undefined : structuredClone(record);
  }

  set(key, value) {
    this.#tx._draftWrite(this.#table, key, draftRecord(this.#table, key, value, this.#tx._now()));
    return this;
  }

  delete(key) {
    if (!this.has(key)) return false;
    this.#tx._draftWrite(this.#table, key, DELETED);
    return true;
  }

  clear() {
    for (const key of [...this.keys()]) this.delete(key);
  }

  *keys() {
    for (const key of this.#tx._draftKeys(this.#table)) yield key;
  }

  *entries() {
    for (const key of this.keys()) yield [key, this.get(key)];
  }

  *values() {
    for (const key of this.keys()) yield this.get(key);
  }

  [Symbol.iterator]() {
    return this.entries();
  }

  forEach(callback, thisArg) {
    for (const [key, value] of this.entries()) callback.call(thisArg, value, key, this);
  }
}

/**
 * Reads see the transaction's own writes; nothing reaches the store until
 * commit. Besides its methods, the handle carries the draft view
 * `{ workflows, inbox, outbox }` (Maps over the same pending writes) for
 * tests and code written against a draft-of-Maps model.
 */
class MemoryTransaction extends StoreTransaction {
  #data;
  #clock;
  #writes = { workflows: new Map(), inbox: new Map(), outbox: new Map() };
  /** The host's tables this transaction touched: name → a working copy, kept or dropped with the rest. */
  #hostTables = new Map();

  constructor(store, data, clock) {
    super(store);
    this.#data = data;
    this.#clock = clock;
    for (const table of ['workflows', 'inbox', 'outbox']) {
      Object.defineProperty(this, table, { value: new DraftTable(table, this), enumerable: true });
    }
  }

  #read(table, key) {
    const own = this.#writes[table];
    const value = own.has(key) ? own.get(key) : this.#data[table].get(key);
    return value === DELETED ? undefined : value;
  }

  /** @internal the draft view's access to the pending writes */
  _draftRead(table, key) {
    return this.#read(table, key);
  }

  /** @internal */
  _draftWrite(table, key, record) {
    this.#writes[table].set(key, record);
  }

  /** @internal the keys a read sees: held ones in order, then new ones */
  *_draftKeys(table) {
    const own = this.#writes[table];
    for (const key of this.#data[table].keys()) if (this.#read(table, key) !== undefined) yield key;
    for (const [key, value] of own) if (value !== DELETED && !this.#data[table].has(key)) yield key;
  }

  /** @internal */
  _now() {
    return this.#clock();
  }

  // Held records are read like a durable store's rows (StoreTransaction reads
  // them): checked, and copied by own keys (a snapshot from a file may hold anything).
  async _read(table, key) {
    return RECORD_OF[table](this.#read(table, key));
  }

  async _insert(table, record) {
    const key = table === 'inbox' ? record.eventId : record.id;
    if (this.#read(table, key) !== undefined) return false;
    this.#writes[table].set(key, HELD_OF[table](record));
    return true;
  }

  async _updateWorkflow({ id, status, revision, patch, expect }) {
    const current = this.#read('workflows', id);
    if (current === undefined || current.status !== expect.status || current.revision !== expect.revision) return false;
    const next = { ...current, status, revision };
    for (const [field, value] of Object.entries(patch)) {
      if (value === null) delete next[field];
      else next[field] = value;
    }
    this.#writes.workflows.set(id, next);
    return true;
  }

  /**
   * A table of the host's own, by name (a Map of whatever the host keeps:
   * shipments by id, say): what the host writes in it commits or rolls back
   * with the receipt, the workflow and the operations. A copy: the store's
   * table changes only when the transaction commits. snapshot().tables shows
   * them.
   */
  table(name) {
    if (typeof name !== 'string' || name.length === 0)
      throw invalidArgument('a table name is a non-empty string', { field: 'name', reason: 'not a name' });
    let table = this.#hostTables.get(name);
    if (table === undefined) {
      table = structuredClone(this.#data.tables.get(name) ?? new Map());
      this.#hostTables.set(name, table);
    }
    return table;
  }

  /** @internal tx.putWorkflow: the record held as the store holds workflows (flat) */
  async _putWorkflow({ id, status, revision, data }) {
    this.#writes.workflows.set(id, { ...structuredClone(data), id, status, revision });
  }

  /** @internal */
  commitTo(data) {
    for (const table of ['workflows', 'inbox', 'outbox']) {
      for (const [key, value] of this.#writes[table]) {
        if (value === DELETED) data[table].delete(key);
        else data[table].set(key, value);
      }
    }
    for (const [name, table] of this.#hostTables) data.tables.set(name, table);
  }
}

class InMemoryStore extends StoreBase {
  /** What telemetry calls this store (the `idemflow.store` attribute). */
  static kind = 'memory';

  static holdsNumbers = true;

  #data = { workflows: new Map(), inbox: new Map(), outbox: new Map(), tables: new Map() };
  #serializer = new Serializer();
  #clock;

  /**
   * @param {Iterable<object>} workflows the workflows that exist at the start
   * @param {{ now?: () => number, timeoutMs?: number }} [options] `now`: the clock for recordedAt,
   *   createdAt and updatedAt (ms since the epoch; default Date.now); `timeoutMs`
   *   (default 30 s): how long a transaction waits for its callback before it is abandoned
   */
  constructor(workflows = [], options = {}) {
    checkOptionKeys(options ?? {}, ['now', 'timeoutMs'], 'InMemoryStore');
    const clock = resolveClock(options?.now);
    super({ now: clock, timeoutMs: resolveTimeouts({ timeoutMs: options?.timeoutMs }).timeoutMs });
    this.#clock = clock;
    for (const workflow of workflows) {
      const id = workflow !== null && typeof workflow === 'object' ? workflow.id : undefined;
      if (typeof id !== 'string' || id.length === 0) {
        throw new IdemflowError('INVALID_ARGUMENT', 'every workflow needs a non-empty string id', {
          details: { reason: 'workflow without id' },
        });
      }
      if (this.#data.workflows.has(id)) {
        throw new IdemflowError('INVALID_ARGUMENT', `duplicate workflow id ${id}`, {
          details: { workflowId: id, reason: 'duplicate workflow id' },
        });
      }
      this.#data.workflows.set(id, structuredClone(workflow));
    }
  }

  /**
   * A store holding copies of a snapshot's tables (Maps, or arrays of
   * [key, value] entries): what snapshot() returned, perhaps from another process.
   */
  static fromSnapshot(snapshot, options = {}) {
    const store = new InMemoryStore([], options);
    if (snapshot === null || typeof snapshot !== 'object') {
      throw invalidArgument('fromSnapshot takes what snapshot() returned', { reason: 'not an object' });
    }
    const tables = snapshot;
    for (const table of ['workflows', 'inbox', 'outbox']) {
      for (const [key, value] of new Map(tables[table] ?? [])) store.#data[table].set(key, structuredClone(value));
    }
    for (const [name, table] of new Map(tables.tables ?? [])) store.#data.tables.set(name, structuredClone(new Map(table)));
    return store;
  }

  /**
   * Runs fn(tx) alone (calls queue behind each other in this process). If fn
   * throws, none of its writes are kept; nor if it is still running after
   * timeoutMs (or the call's deadline, when sooner): the call fails with
   * STORE_UNAVAILABLE reason 'timeout' and the next one goes on.
   */
  async transaction(fn, options) {
    const { deadlineAt } = transactionOptions(options);
    return this.#alone(async () => {
      checkTimeLeft(deadlineAt, 'transaction');
      const tx = new MemoryTransaction(this, this.#data, this.#clock);
      const result = await withDeadline(this.timeoutMs, 'transaction', () => fn(tx), deadlineAt);
      tx.commitTo(this.#data);
      return result;
    });
  }

  #alone(fn) {
    return this.#serializer.run(fn);
  }

  /** Copies of every table, as Maps keyed by id. */
  snapshot() {
    return structuredClone(this.#data);
  }

  /**
   * Stores a workflow as given (a copy), for hosts that create workflows and
   * for tests; its facts map is checked first under `options.ruleSet`
   * (default deposit-swap), as the other stores' putWorkflow checks it.
   */
  async putWorkflow(workflow, options) {
    workflowToStore(workflow, putOptionsOf(options));
    await this.#alone(async () => {
      this.#data.workflows.set(workflow.id, structuredClone(workflow));
    });
  }

  /** @internal a held record, read by StoreBase */
  async _read(table, key) {
    return RECORD_OF[table](this.#data[table].get(key));
  }

  _receiptOf(record) {
    return readReceiptRecord(record);
  }

  // ---- The outbox store interface (docs/outbox.md) --------------------------
  // StoreBase checks the arguments and gives every method its meaning;
  // these four carry the requests out on the maps, each alone, like one SQL
  // statement.

  async _claim({ owner, now, leaseExpiresAt, limit, types }) {
    const wanted = types === null ? null : new Set(types);
    return this.#alone(async () => {
      const due = [...this.#data.outbox.values()]
        .filter((operation) => (wanted === null || wanted.has(operation.type)) && claimable(operation, now))
        .sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || byId(a, b))
        .slice(0, limit);
      return due.map((operation) => {
        Object.assign(operation, {
          status: 'claimed',
          leaseOwner: owner,
          leaseExpiresAt,
          fencingToken: operation.fencingToken + 1,
          attempts: operation.attempts + 1,
          updatedAt: now,
        });
        return operationRecord(copy(operation));
      });
    });
  }

  async _update({ id, status, fencingToken, set, giveBackAttempt }) {
    return this.#alone(async () => {
      const operation = this.#data.outbox.get(id);
      if (operation === undefined || operation.status !== status) return false;
      if (fencingToken !== undefined && operation.fencingToken !== fencingToken) return false;
      Object.assign(operation, set);
      if (giveBackAttempt) operation.attempts = Math.max(0, operation.attempts - 1);
      return true;
    });
  }

  async _list(request) {
    return this.#alone(async () =>
      [...this.#data.outbox.values()]
        .filter((op) => operationMatches(request, op))
        .sort(byId)
        .slice(0, request.limit)
        .map((op) => operationRecord(copy(op))),
    );
  }

  async _stats({ now }) {
    return this.#alone(async () => {
      const counts = new Map();
      let oldestDueAt = null;
      for (const op of this.#data.outbox.values()) {
        const key = JSON.stringify([op.type, op.status]);
        counts.set(key, (counts.get(key) ?? 0) + 1);
        if (claimable(op, now)) {
          const since = op.status === 'pending' ? op.nextAttemptAt : op.leaseExpiresAt;
          if (oldestDueAt === null || since < oldestDueAt) oldestDueAt = since;
        }
      }
      return {
        counts: [...counts].map(([key, count]) => {
          const [type, status] = JSON.parse(key);
          return { type, status, count };
        }),
        oldestDueAt,
      };
    });
  }

  async _purgeBatch(target, { olderThan, batchSize, status }) {
    const [table, old] =
      target === 'receipts'
        ? ['inbox', (receipt) => typeof receipt.recordedAt === 'number' && receipt.recordedAt < olderThan]
        : ['outbox', (op) => op.status === status && op.updatedAt < olderThan];
    return this.#alone(async () => {
      const keys = [];
      for (const [key, row] of this.#data[table]) {
        if (keys.length >= batchSize) break;
        if (old(row)) keys.push(key);
      }
      for (const key of keys) this.#data[table].delete(key);
      return keys.length;
    });
  }
}

module.exports = { InMemoryStore };
