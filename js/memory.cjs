'use strict';
// An in-memory store: all-or-nothing transactions serialised within one
// process. For tests, examples and single-process tools; it is not durable.
// It also implements the outbox store interface (docs/outbox.md) the
// consumer drives: every outbox method runs alone, like one SQL statement.

const { IdemflowError } = require('./errors.cjs');
const { processEvent } = require('./host.cjs');
const { isClaimable } = require('./outbox.cjs');

const DEFAULT_BATCH_SIZE = 1000;
const MAX_BATCH_SIZE = 100000;
const OPERATION_STATUSES = new Set(['pending', 'claimed', 'done', 'dead']);

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

function invalidArgument(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { details });
}

function resolveClock(now) {
  if (now === undefined) return Date.now;
  if (typeof now !== 'function') {
    throw invalidArgument('options.now must be a function returning milliseconds since the epoch', { field: 'now', reason: 'not a function' });
  }
  return now;
}

function argsObject(args, method) {
  if (args === null || typeof args !== 'object') {
    throw invalidArgument(`${method} takes an object of named arguments`, { reason: 'not an object' });
  }
  return args;
}

function wholeNumber(value, field, min = 0) {
  if (!Number.isSafeInteger(value) || value < min) {
    throw invalidArgument(`${field} must be a whole number from ${min} to 2^53 - 1`, { field, reason: 'not a safe integer' });
  }
  return value;
}

function text(value, field) {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidArgument(`${field} must be a non-empty string`, { field, reason: 'not a non-empty string' });
  }
  return value;
}

/** A time (ms since the epoch) from a number or a Date. */
function instant(value, field) {
  const ms = value instanceof Date ? value.getTime() : value;
  return wholeNumber(ms, field);
}

function batchSize(value) {
  if (value === undefined) return DEFAULT_BATCH_SIZE;
  if (!Number.isSafeInteger(value) || value < 1 || value > MAX_BATCH_SIZE) {
    throw invalidArgument(`batchSize must be a whole number from 1 to ${MAX_BATCH_SIZE}`, { field: 'batchSize', reason: 'out of range' });
  }
  return value;
}

/** The outbox row for a new operation: pending and due now. */
function newOperation(operation, now) {
  return {
    id: operation.id,
    type: operation.type,
    workflowId: operation.workflowId,
    eventId: operation.eventId,
    payload: structuredClone(operation.payload ?? {}),
    status: 'pending',
    attempts: 0,
    nextAttemptAt: now,
    leaseOwner: null,
    leaseExpiresAt: null,
    fencingToken: 0,
    lastError: null,
    createdAt: now,
    updatedAt: now,
  };
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

  async getReceipt(eventId) {
    return copy(this.#read('inbox', eventId));
  }

  async getWorkflow(id) {
    return copy(this.#read('workflows', id));
  }

  async getOperation(id) {
    return copy(this.#read('outbox', id));
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
    this.#writes.outbox.set(operation.id, newOperation(operation, this.#clock()));
  }

  /** @internal */
  commitTo(data) {
    for (const table of ['workflows', 'inbox', 'outbox']) {
      for (const [key, value] of this.#writes[table]) data[table].set(key, value);
    }
  }
}

class InMemoryStore {
  #data = { workflows: new Map(), inbox: new Map(), outbox: new Map() };
  #tail = Promise.resolve();
  #clock;

  /**
   * @param {Iterable<object>} workflows the workflows that exist at the start
   * @param {{ now?: () => number }} [options] `now`: the clock for recordedAt,
   *   createdAt and updatedAt (ms since the epoch; default Date.now)
   */
  constructor(workflows = [], options = {}) {
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
    const tables = argsObject(snapshot, 'fromSnapshot');
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

  async #alone(fn) {
    const previous = this.#tail;
    let release;
    this.#tail = new Promise((resolve) => { release = resolve; });
    await previous;
    try {
      return await fn();
    } finally {
      release();
    }
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
    return copy(this.#data.workflows.get(id));
  }

  async putWorkflow(workflow) {
    await this.#alone(async () => {
      this.#data.workflows.set(workflow.id, structuredClone(workflow));
    });
  }

  async getReceipt(eventId) {
    return copy(this.#data.inbox.get(eventId));
  }

  async getOperation(id) {
    return copy(this.#data.outbox.get(id));
  }

  // ---- The outbox store interface (docs/outbox.md) --------------------------

  /**
   * Claims up to `limit` due operations for `owner`, oldest due first: a
   * pending one whose next attempt is due, or a claimed one whose lease has
   * expired (the core's claim condition). Each claim sets the lease, adds one
   * to attempts and one to the fencing token.
   */
  async claimOperations(args) {
    const { owner, now, leaseExpiresAt, limit, types } = argsObject(args, 'claimOperations');
    text(owner, 'owner');
    instant(now, 'now');
    instant(leaseExpiresAt, 'leaseExpiresAt');
    wholeNumber(limit, 'limit', 1);
    if (types !== undefined && types !== null && !(Array.isArray(types) && types.every((t) => typeof t === 'string'))) {
      throw invalidArgument('types must be an array of operation types', { field: 'types', reason: 'not an array of strings' });
    }
    const wanted = types === undefined || types === null ? null : new Set(types);
    return this.#alone(async () => {
      const due = [];
      for (const operation of this.#data.outbox.values()) {
        if (wanted !== null && !wanted.has(operation.type)) continue;
        if (isClaimable(operation, now)) due.push(operation);
      }
      due.sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      return due.slice(0, limit).map((operation) => {
        Object.assign(operation, {
          status: 'claimed',
          leaseOwner: owner,
          leaseExpiresAt,
          fencingToken: operation.fencingToken + 1,
          attempts: operation.attempts + 1,
          updatedAt: now,
        });
        return copy(operation);
      });
    });
  }

  /** Applies `change` when the operation is still claimed under `fencingToken`; false otherwise. */
  #fenced(args, method, change) {
    const { id, fencingToken, now } = argsObject(args, method);
    text(id, 'id');
    wholeNumber(fencingToken, 'fencingToken', 1);
    instant(now, 'now');
    return this.#alone(async () => {
      const operation = this.#data.outbox.get(id);
      if (operation === undefined || operation.status !== 'claimed' || operation.fencingToken !== fencingToken) return false;
      Object.assign(operation, change(operation), { updatedAt: now });
      return true;
    });
  }

  /** Extends a claim to `leaseExpiresAt`; false when the claim is no longer this token's. */
  async renewLease(args) {
    const leaseExpiresAt = instant(argsObject(args, 'renewLease').leaseExpiresAt, 'leaseExpiresAt');
    return this.#fenced(args, 'renewLease', () => ({ leaseExpiresAt }));
  }

  /** Marks the operation done; false (nothing recorded) when the token is stale. */
  async completeOperation(args) {
    return this.#fenced(args, 'completeOperation', () => ({ status: 'done', leaseOwner: null, leaseExpiresAt: null }));
  }

  /**
   * Records a failed attempt: `status: 'pending'` with `nextAttemptAt` (a
   * retry), or `status: 'dead'`. False (nothing recorded) when the token is stale.
   */
  async failOperation(args) {
    const { status, nextAttemptAt, lastError } = argsObject(args, 'failOperation');
    if (status !== 'pending' && status !== 'dead') {
      throw invalidArgument("failOperation status must be 'pending' (retry) or 'dead'", { field: 'status', reason: 'unknown status' });
    }
    if (status === 'pending') instant(nextAttemptAt, 'nextAttemptAt');
    if (typeof lastError !== 'string') {
      throw invalidArgument('lastError must be a string', { field: 'lastError', reason: 'not a string' });
    }
    return this.#fenced(args, 'failOperation', (operation) => ({
      status,
      nextAttemptAt: status === 'pending' ? nextAttemptAt : operation.nextAttemptAt,
      lastError,
      leaseOwner: null,
      leaseExpiresAt: null,
    }));
  }

  /** Gives a claim back unfinished: pending and due now, the attempt not counted. */
  async releaseOperation(args) {
    const { now } = argsObject(args, 'releaseOperation');
    return this.#fenced(args, 'releaseOperation', (operation) => ({
      status: 'pending',
      nextAttemptAt: now,
      attempts: Math.max(0, operation.attempts - 1),
      leaseOwner: null,
      leaseExpiresAt: null,
    }));
  }

  /**
   * An operator's retry of a dead operation: pending, due now, attempts back
   * to 0 (lastError is kept until the next attempt). False unless it was dead.
   */
  async requeue(operationId, options = {}) {
    text(operationId, 'operationId');
    const now = instant((options ?? {}).now ?? this.#clock(), 'now');
    return this.#alone(async () => {
      const operation = this.#data.outbox.get(operationId);
      if (operation === undefined || operation.status !== 'dead') return false;
      Object.assign(operation, { status: 'pending', attempts: 0, nextAttemptAt: now, leaseOwner: null, leaseExpiresAt: null, updatedAt: now });
      return true;
    });
  }

  /** Operations with `status` (all when absent), by id, at most `limit`, after `afterId` when given. */
  async listOperations(args = {}) {
    const { status, limit = 100, afterId } = argsObject(args ?? {}, 'listOperations');
    if (status !== undefined && !OPERATION_STATUSES.has(status)) {
      throw invalidArgument('status must be pending, claimed, done or dead', { field: 'status', reason: 'unknown status' });
    }
    wholeNumber(limit, 'limit', 1);
    if (afterId !== undefined) text(afterId, 'afterId');
    return this.#alone(async () => [...this.#data.outbox.values()]
      .filter((op) => (status === undefined || op.status === status) && (afterId === undefined || op.id > afterId))
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .slice(0, limit)
      .map(copy));
  }

  /**
   * Deletes receipts recorded before `olderThan`, `batchSize` per
   * transaction, so no transaction holds the store for long. Receipts without
   * recordedAt are kept. Returns `{ deleted, batches }`.
   */
  async purgeReceipts(args) {
    const { olderThan, batchSize: size } = argsObject(args, 'purgeReceipts');
    const cutoff = instant(olderThan, 'olderThan');
    return this.#purge('inbox', batchSize(size), (receipt) => typeof receipt.recordedAt === 'number' && receipt.recordedAt < cutoff);
  }

  /**
   * Deletes `done` (or, when asked, `dead`) operations last updated before
   * `olderThan`, in batches like purgeReceipts. Pending and claimed
   * operations are never purged.
   */
  async purgeOperations(args) {
    const { olderThan, batchSize: size, status = 'done' } = argsObject(args, 'purgeOperations');
    const cutoff = instant(olderThan, 'olderThan');
    if (status !== 'done' && status !== 'dead') {
      throw invalidArgument("purgeOperations status must be 'done' or 'dead'", { field: 'status', reason: 'not a finished status' });
    }
    return this.#purge('outbox', batchSize(size), (op) => op.status === status && op.updatedAt < cutoff);
  }

  async #purge(table, size, old) {
    let deleted = 0;
    let batches = 0;
    for (;;) {
      const removed = await this.#alone(async () => {
        const keys = [];
        for (const [key, row] of this.#data[table]) {
          if (keys.length >= size) break;
          if (old(row)) keys.push(key);
        }
        for (const key of keys) this.#data[table].delete(key);
        return keys.length;
      });
      deleted += removed;
      if (removed > 0) batches += 1;
      if (removed < size) return { deleted, batches };
    }
  }
}

module.exports = { InMemoryStore, MemoryTransaction };
