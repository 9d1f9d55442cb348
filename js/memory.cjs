'use strict';
// An in-memory store: all-or-nothing transactions serialised within one
// process. For tests, examples and single-process tools; it is not durable.
// It also implements the outbox store interface (docs/outbox.md) the
// consumer drives: every outbox method runs alone, like one SQL statement.

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

/** Reads see the transaction's own writes; nothing reaches the store until commit. */
class MemoryTransaction {
  #data;
  #clock;
  #writes = { workflows: new Map(), inbox: new Map(), outbox: new Map() };

  constructor(data, clock = Date.now) {
    this.#data = data;
    this.#clock = clock;
  }

  #read(table, key) {
    const own = this.#writes[table];
    return own.has(key) ? own.get(key) : this.#data[table].get(key);
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
      for (const [key, value] of this.#writes[table]) data[table].set(key, value);
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
