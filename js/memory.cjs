'use strict';
// An in-memory store: all-or-nothing transactions serialised within one
// process. For tests, examples and single-process tools; it is not durable.
// It also implements the outbox store interface (docs/outbox.md) the
// consumer drives: every outbox method runs alone, like one SQL statement.

const { checkOptionKeys } = require('./options.cjs');
const { IdemflowError } = require('./errors.cjs');
const { processEvent } = require('./host.cjs');
const { isClaimable } = require('./outbox.cjs');
const {
  OutboxStoreBase, Serializer, fieldOf, invalidArgument, operationRecord, operationRowFromRecord, operationView, receiptFromRecord,
  resolveClock, workflowFromRecord,
} = require('./adapter-common.cjs');

function copy(value) {
  return value === undefined ? null : structuredClone(value);
}

function applySet(base, set) {
  const next = { ...base };
  for (const [key, value] of Object.entries(set)) {
    if (value === null) delete next[key];
    else next[key] = value;
  }
  return next;
}

/**
 * The core's claim condition; a held operation whose status or times cannot
 * be read is not due (as a SQL comparison with a malformed value is false),
 * so it cannot stop the others being claimed.
 */
function claimable(operation, now) {
  try {
    return isClaimable(operation, now);
  } catch (error) {
    if (error instanceof IdemflowError && error.code === 'INVALID_RECORD') return false;
    throw error;
  }
}

function byId(a, b) {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

// A key the transaction deleted through its draft view: reads see nothing,
// and commit removes the row.
const DELETED = Symbol('deleted');

const RECORD_KEYS = { workflows: 'id', inbox: 'eventId', outbox: 'id' };

/**
 * A row written through the draft view, checked now by the same reader the
 * store uses to read it back, so a row the handle's methods or the outbox
 * consumer could not read is refused at set() and never committed.
 * Bookkeeping fields the handle's own insert methods stamp (recordedAt; an
 * operation's status, attempts, times, lease and fencing token) are filled
 * as those methods fill them when left out; what the row means is not guessed.
 */
function draftRecord(table, key, value, now) {
  if (typeof key !== 'string' || key.length === 0) {
    throw invalidArgument(`draft ${table} keys are non-empty strings`, { table, reason: 'key not a non-empty string' });
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalidArgument(`draft ${table} row ${key} must be an object`, { table, key, reason: 'not an object' });
  }
  let record;
  try {
    record = structuredClone(value);
  } catch (cause) {
    throw new IdemflowError('INVALID_ARGUMENT', `draft ${table} row ${key} cannot be copied: ${cause.message}`, {
      details: { table, key, reason: 'not cloneable' }, cause,
    });
  }
  const keyField = RECORD_KEYS[table];
  if (record[keyField] === undefined) record[keyField] = key;
  if (record[keyField] !== key) {
    throw invalidArgument(`draft ${table} row stored under ${key} has ${keyField} ${JSON.stringify(record[keyField])}`, {
      table, key, field: keyField, reason: 'key mismatch',
    });
  }
  try {
    if (table === 'workflows') {
      workflowFromRecord(record);
    } else if (table === 'inbox') {
      record.recordedAt ??= now;
      receiptFromRecord(record);
    } else {
      const defaults = {
        payload: {}, status: 'pending', attempts: 0, nextAttemptAt: now, leaseOwner: null, leaseExpiresAt: null,
        fencingToken: 0, lastError: null, createdAt: now, updatedAt: now,
      };
      for (const [field, fill] of Object.entries(defaults)) if (record[field] === undefined) record[field] = fill;
      const view = operationView(operationRowFromRecord(record));
      if (view.unreadable) {
        throw new IdemflowError('INVALID_RECORD', `${view.unreadable.join(', ')} cannot be read`, {
          details: { field: view.unreadable[0], reason: 'unreadable' },
        });
      }
    }
  } catch (error) {
    if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
    // The readers name columns (event_id); the draft's rows have fields (eventId).
    const field = typeof error.details.field === 'string' ? fieldOf(error.details.field) : undefined;
    throw new IdemflowError('INVALID_ARGUMENT', `draft ${table} row ${key} is not a row the store can read: ${error.message}`, {
      details: { table, key, field, reason: error.details.reason }, cause: error,
    });
  }
  return record;
}

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

  * keys() {
    for (const key of this.#tx._draftKeys(this.#table)) yield key;
  }

  * entries() {
    for (const key of this.keys()) yield [key, this.get(key)];
  }

  * values() {
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
class MemoryTransaction {
  #data;
  #clock;
  #writes = { workflows: new Map(), inbox: new Map(), outbox: new Map() };

  constructor(data, clock = Date.now) {
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
  * _draftKeys(table) {
    const own = this.#writes[table];
    for (const key of this.#data[table].keys()) if (this.#read(table, key) !== undefined) yield key;
    for (const [key, value] of own) if (value !== DELETED && !this.#data[table].has(key)) yield key;
  }

  /** @internal */
  _now() {
    return this.#clock();
  }

  // Held records are read like a durable store's rows: checked, and copied by
  // own keys (a snapshot from a file may hold anything).
  async getReceipt(eventId) {
    return receiptFromRecord(this.#read('inbox', eventId));
  }

  async getWorkflow(id) {
    return workflowFromRecord(this.#read('workflows', id));
  }

  async getOperation(id) {
    return operationView(operationRowFromRecord(this.#read('outbox', id)));
  }

  async insertReceipt(receipt) {
    if (this.#read('inbox', receipt.eventId) !== undefined) {
      throw new IdemflowError('CONCURRENT_UPDATE', `a receipt for event ${receipt.eventId} was recorded concurrently`, {
        details: { eventId: receipt.eventId, workflowId: receipt.workflowId, reason: 'receipt-exists' },
      });
    }
    this.#writes.inbox.set(receipt.eventId, { ...structuredClone(receipt), recordedAt: this.#clock() });
  }

  async writeWorkflow(write) {
    const current = this.#read('workflows', write.id);
    const expect = write.expect;
    const matches = expect === null
      ? current === undefined
      : current !== undefined && current.status === expect.status && current.revision === expect.revision;
    if (!matches) {
      throw new IdemflowError('CONCURRENT_UPDATE', `workflow ${write.id} changed since it was read`, {
        details: {
          workflowId: write.id,
          expectedStatus: expect ? expect.status : null,
          expectedRevision: expect ? expect.revision : null,
        },
      });
    }
    this.#writes.workflows.set(write.id, applySet(current ?? { id: write.id }, write.set));
  }

  async insertOperation(operation) {
    if (this.#read('outbox', operation.id) !== undefined) {
      throw new IdemflowError('OUTBOX_CONFLICT', `outbox operation ${operation.id} already exists`, {
        details: { operationId: operation.id, workflowId: operation.workflowId, eventId: operation.eventId },
      });
    }
    this.#writes.outbox.set(operation.id, operationRecord(operation, this.#clock()));
  }

  /** @internal */
  commitTo(data) {
    for (const table of ['workflows', 'inbox', 'outbox']) {
      for (const [key, value] of this.#writes[table]) {
        if (value === DELETED) data[table].delete(key);
        else data[table].set(key, value);
      }
    }
  }
}

class InMemoryStore extends OutboxStoreBase {
  #data = { workflows: new Map(), inbox: new Map(), outbox: new Map() };
  #serializer = new Serializer();
  #clock;

  /**
   * @param {Iterable<object>} workflows the workflows that exist at the start
   * @param {{ now?: () => number }} [options] `now`: the clock for recordedAt,
   *   createdAt and updatedAt (ms since the epoch; default Date.now)
   */
  constructor(workflows = [], options = {}) {
    super();
    checkOptionKeys(options ?? {}, ['now'], 'InMemoryStore');
    this.#clock = resolveClock((options ?? {}).now);
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
    return store;
  }

  /** The store's clock: ms since the epoch. */
  now() {
    return this.#clock();
  }

  /**
   * Runs fn(tx) alone (calls queue behind each other in this process). If fn
   * throws, none of its writes are kept.
   */
  async transaction(fn) {
    return this.#alone(async () => {
      const tx = new MemoryTransaction(this.#data, this.#clock);
      const result = await fn(tx);
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

  /** processEvent(this, event, options). */
  process(event, options) {
    return processEvent(this, event, options);
  }

  async getWorkflow(id) {
    return workflowFromRecord(this.#data.workflows.get(id));
  }

  async putWorkflow(workflow) {
    await this.#alone(async () => {
      this.#data.workflows.set(workflow.id, structuredClone(workflow));
    });
  }

  async getReceipt(eventId) {
    return receiptFromRecord(this.#data.inbox.get(eventId));
  }

  /** @internal the held operation as a row of the outbox table (OutboxStoreBase reads it) */
  async _row(id) {
    return operationRowFromRecord(this.#data.outbox.get(id));
  }

  // ---- The outbox store interface (docs/outbox.md) --------------------------
  // OutboxStoreBase checks the arguments and gives every method its meaning;
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
        return operationRowFromRecord(copy(operation));
      });
    });
  }

  async _update({ id, status, fencingToken, set, giveBackAttempt }) {
    return this.#alone(async () => {
      const operation = this.#data.outbox.get(id);
      if (operation === undefined || operation.status !== status) return false;
      if (fencingToken !== undefined && operation.fencingToken !== fencingToken) return false;
      for (const [column, value] of Object.entries(set)) operation[fieldOf(column)] = value;
      if (giveBackAttempt) operation.attempts = Math.max(0, operation.attempts - 1);
      return true;
    });
  }

  async _list({ status, limit, afterId }) {
    return this.#alone(async () => [...this.#data.outbox.values()]
      .filter((op) => (status === null || op.status === status) && (afterId === null || op.id > afterId))
      .sort(byId)
      .slice(0, limit)
      .map((op) => operationRowFromRecord(copy(op))));
  }

  async _purgeBatch(target, { olderThan, batchSize, status }) {
    const [table, old] = target === 'receipts'
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

module.exports = { InMemoryStore, MemoryTransaction };
