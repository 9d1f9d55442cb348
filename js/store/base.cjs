'use strict';
// What every store shares, written once: processEvent as store.process(),
// the workflow and receipt reads and writes through a store's hooks, and the
// outbox store interface (docs/outbox.md): its arguments checked here and
// turned into requests, and the fencing rules stated in field names. Times
// come from the caller (the core computed them): a store compares and records
// them and does no clock arithmetic of its own.
//
// A store subclasses StoreBase and implements, on its own database:
//   transaction(fn)                    fn(tx) all or nothing, tx a StoreTransaction
//   _read(table, key)                  the stored record of 'workflows', 'inbox' or 'outbox', or null
//   _putWorkflow(record)               insert or replace {id, status, revision, data}
//   _claim(request)                    claim due operations, return their records
//   _update(change)                    one guarded change (guardedChange) → matched
//   _list(request)                     records of listOperations (queries.cjs listRequest)
//   _stats(request)                    { counts: [{ type, status, count }], oldestDueAt } (stats)
//   _purgeBatch(target, request)       delete one batch, return how many
// and its transaction subclasses StoreTransaction (store/transaction.cjs). docs/adapters.md,
// "Writing a store", says what each must guarantee.

const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys, wholeNumber } = require('../core/options.cjs');
const { processEvent } = require('../host/event.cjs');
const { processBatch } = require('../host/batch.cjs');
const telemetry = require('../core/telemetry.cjs');
const { invalidArgument } = require('./errors.cjs');
const {
  checkText,
  putOptionsOf,
  workflowToStore,
  workflowFromStore,
  receiptFromStore,
  operationFromStore,
  operationView,
} = require('./records.cjs');
const { PAGE_SIZE, listRequest, requeueRequest, nowRequest, statsOf } = require('./queries.cjs');

const DEFAULT_BATCH_SIZE = 1000;
const MAX_BATCH_SIZE = 100000;

/** `args` when it is an object (with only the `known` keys, when given). */
function namedArgs(args, method, known) {
  if (args === null || typeof args !== 'object') {
    throw invalidArgument(`${method} takes an object of named arguments`, { reason: 'not an object' });
  }
  if (known !== undefined) checkOptionKeys(args, known, method);
  return args;
}

/** A time in ms since the epoch, from a number or a Date. */
function instant(value, field) {
  return wholeNumber(value instanceof Date ? value.getTime() : value, field);
}

/** `{ owner, now, leaseExpiresAt, limit, types }` of claimOperations; `types` null for every type. */
function claimRequest(args) {
  const { owner, now, leaseExpiresAt, limit, types = null } = namedArgs(args, 'claimOperations');
  if (types !== null && !(Array.isArray(types) && types.every((type) => typeof type === 'string'))) {
    throw invalidArgument('types must be an array of operation types', { field: 'types', reason: 'not an array of strings' });
  }
  return {
    owner: checkText(owner, 'owner'),
    now: instant(now, 'now'),
    leaseExpiresAt: instant(leaseExpiresAt, 'leaseExpiresAt'),
    limit: wholeNumber(limit, 'limit', 1),
    types: types === null ? null : [...new Set(types)],
  };
}

/**
 * One guarded write to one operation: `set` (fields to values; null clears)
 * where the row still has `id`, `status` and, for a claim's own writes,
 * `fencingToken`. `giveBackAttempt` takes one off attempts.
 */
function guardedChange(id, status, fencingToken, set, giveBackAttempt = false) {
  return { id, status, fencingToken, set, giveBackAttempt };
}

const LEASE_CLEARED = Object.freeze({ leaseOwner: null, leaseExpiresAt: null });

/** The claim's own write: fenced on status 'claimed' and the claim's token. */
function fencedChange(args, method, changes, giveBackAttempt = false) {
  const { id, fencingToken, now } = namedArgs(args, method);
  checkText(id, 'id');
  wholeNumber(fencingToken, 'fencingToken', 1);
  instant(now, 'now');
  return guardedChange(id, 'claimed', fencingToken, { ...changes(args), updatedAt: now }, giveBackAttempt);
}

function failure({ status, nextAttemptAt, lastError, attemptCounted }) {
  if (attemptCounted !== undefined && (typeof attemptCounted !== 'boolean' || (attemptCounted === false && status !== 'pending'))) {
    throw invalidArgument('attemptCounted must be a boolean, and false only on a retry', {
      field: 'attemptCounted',
      reason: 'not allowed',
    });
  }
  if (status !== 'pending' && status !== 'dead') {
    throw invalidArgument("failOperation status must be 'pending' (retry) or 'dead'", { field: 'status', reason: 'unknown status' });
  }
  if (typeof lastError !== 'string') throw invalidArgument('lastError must be a string', { field: 'lastError', reason: 'not a string' });
  const retry = status === 'pending' ? { nextAttemptAt: instant(nextAttemptAt, 'nextAttemptAt') } : {};
  return { status, ...retry, lastError: lastError, ...LEASE_CLEARED };
}

/** What each fenced method of the store interface writes (docs/outbox.md, "The store interface"). */
const FENCED = {
  renewLease: (args) =>
    fencedChange(args, 'renewLease', ({ leaseExpiresAt }) => ({ leaseExpiresAt: instant(leaseExpiresAt, 'leaseExpiresAt') })),
  completeOperation: (args) => fencedChange(args, 'completeOperation', () => ({ status: 'done', ...LEASE_CLEARED })),
  // An outage retry (attemptCounted: false) gives the claim's attempt back: maxAttempts does not count it.
  failOperation: (args) => fencedChange(args, 'failOperation', failure, args?.attemptCounted === false),
  releaseOperation: (args) =>
    fencedChange(args, 'releaseOperation', ({ now }) => ({ status: 'pending', nextAttemptAt: now, ...LEASE_CLEARED }), true),
};

/** An operator's requeue: a dead operation back to pending, due now, attempts 0 (lastError kept). */
function requeueChange(operationId, options, clock) {
  const now = instant(namedArgs(options ?? {}, 'requeue', ['now']).now ?? clock(), 'now');
  return guardedChange(checkText(operationId, 'operationId'), 'dead', undefined, {
    status: 'pending',
    attempts: 0,
    nextAttemptAt: now,
    ...LEASE_CLEARED,
    updatedAt: now,
  });
}

/** `{ olderThan, batchSize, status, onBatch }` of purgeReceipts (status null) and purgeOperations (done or dead). */
function purgeRequest(args, method) {
  const {
    olderThan,
    batchSize = DEFAULT_BATCH_SIZE,
    status = 'done',
    onBatch,
  } = namedArgs(
    args,
    method,
    method === 'purgeOperations' ? ['olderThan', 'batchSize', 'status', 'onBatch'] : ['olderThan', 'batchSize', 'onBatch'],
  );
  if (onBatch !== undefined && typeof onBatch !== 'function') {
    throw invalidArgument('onBatch must be a function', { field: 'onBatch', reason: 'not a function' });
  }
  if (!Number.isSafeInteger(batchSize) || batchSize < 1 || batchSize > MAX_BATCH_SIZE) {
    throw invalidArgument(`batchSize must be a whole number from 1 to ${MAX_BATCH_SIZE}`, { field: 'batchSize', reason: 'out of range' });
  }
  if (method === 'purgeOperations' && status !== 'done' && status !== 'dead') {
    throw invalidArgument("purgeOperations status must be 'done' or 'dead'", { field: 'status', reason: 'not a finished status' });
  }
  return { olderThan: instant(olderThan, 'olderThan'), batchSize, status: method === 'purgeOperations' ? status : null, onBatch };
}

function byId(a, b) {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

// The exclusive locks this process holds, by scope (a store, or the database
// session it shares with other stores: _lockScope) and name. A session lock
// (PostgreSQL, MySQL) is re-entrant on its session, so two runners sharing one
// must be told apart here.
const HELD_LOCKS = new WeakMap();
const DEFAULT_LOCK_LEASE_MS = 10 * 60 * 1000;

/** The lease of withExclusiveLock: how long a lock outlives a holder that died (lease-based stores). */
function lockLease(options) {
  const { leaseMs = DEFAULT_LOCK_LEASE_MS } = namedArgs(options ?? {}, 'withExclusiveLock', ['leaseMs']);
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 1) {
    throw invalidArgument('leaseMs must be a whole number of milliseconds of at least 1', {
      field: 'leaseMs',
      reason: 'not a positive integer',
    });
  }
  return leaseMs;
}

class StoreBase {
  /** True for a store that holds numbers as numbers (MongoDB, memory): a revision held as text is damage there. */
  static holdsNumbers = false;

  #clock;

  /**
   * @param {{ now?: () => number, raceRetries?: number, timeoutMs?: number }} [options] resolved by
   *   store/options.cjs: the clock, how often a lost race runs again, and how long a call may take
   */
  constructor({ now = Date.now, raceRetries, timeoutMs } = {}) {
    this.#clock = now;
    /** How many times processEvent runs a transaction again after a lost race (undefined: its default). */
    this.raceRetries = raceRetries;
    /**
     * How long one call may take (a server store's options.timeoutMs):
     * processEvent and processBatch end within it, their re-runs and
     * fallbacks included; undefined where calls wait on no server.
     */
    Object.defineProperty(this, 'timeoutMs', { value: timeoutMs, enumerable: true });
  }

  /** The store's clock: ms since the epoch. */
  now() {
    return this.#clock();
  }

  /** processEvent(this, event, options). */
  process(event, options) {
    return processEvent(this, event, options);
  }

  /** processBatch(this, events, options): one transaction, one result per event. */
  processBatch(events, options) {
    return processBatch(this, events, options);
  }

  /**
   * Inserts or replaces a workflow, for hosts that create workflows and for
   * tests. `options.ruleSet`: the rule set the workflow runs under (default
   * deposit-swap, as processEvent's), whose facts map (if it has one) is
   * checked as a decision reads it.
   */
  async putWorkflow(workflow, options) {
    await this._putWorkflow(workflowToStore(workflow, putOptionsOf(options)));
  }

  async getWorkflow(id) {
    return this._workflowOf(await this._read('workflows', id));
  }

  /** The inbox receipt stored for an event id, or null. */
  async getReceipt(eventId) {
    return this._receiptOf(await this._read('inbox', eventId));
  }

  /** @internal a stored workflow record, read */
  _workflowOf(record) {
    return workflowFromStore(record, { numbers: this.constructor.holdsNumbers });
  }

  /** @internal a stored receipt record, read */
  _receiptOf(record) {
    return receiptFromStore(record);
  }

  /**
   * Claims up to `limit` due operations for `owner`, returned oldest due
   * first. A claimed row that cannot be read is quarantined instead of
   * returned (see #quarantine); `onQuarantine(report)`, when given, hears of each.
   */
  async claimOperations(args) {
    const request = claimRequest(args);
    const { onQuarantine } = args;
    if (onQuarantine !== undefined && typeof onQuarantine !== 'function') {
      throw invalidArgument('onQuarantine must be a function', { field: 'onQuarantine', reason: 'not a function' });
    }
    if (request.types !== null && request.types.length === 0) return [];
    // The claim has committed when the rows are read: an unreadable row is set
    // aside on its own, and the rest of the batch runs.
    const rows = await this._claim(request);
    const claimed = [];
    for (const row of rows) {
      let operation;
      try {
        operation = operationFromStore(row);
      } catch (error) {
        if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
        const report = await this.#quarantine(row, error, request);
        if (onQuarantine) {
          try {
            onQuarantine(report);
          } catch {
            // A listener's failure must not cost the claims that were read.
          }
        }
        continue;
      }
      claimed.push(operation);
    }
    return claimed.sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || byId(a, b));
  }

  /**
   * Marks a claimed row that cannot be read dead, its reason as last error,
   * in a statement of its own (so it holds whatever happens to the rest),
   * fenced on the token of this claim. If that write fails too, the claim is
   * left to expire and the row is tried again later.
   * `{ operationId, error, lastError, recorded, storeError? }`.
   */
  async #quarantine(row, error, request) {
    const operationId = typeof row.id === 'string' ? row.id : null;
    const lastError = `${error.code}: ${error.message}`;
    const token = row.fencingToken;
    const fenced = typeof token === 'number' || typeof token === 'bigint' || typeof token === 'string' ? token : undefined;
    const change = guardedChange(row.id, 'claimed', fenced, { status: 'dead', lastError, ...LEASE_CLEARED, updatedAt: request.now });
    try {
      return { operationId, error, lastError, recorded: row.id !== null && row.id !== undefined && (await this._update(change)) };
    } catch (storeError) {
      return { operationId, error, lastError, recorded: false, storeError };
    }
  }

  /** The operation with this id as an operator sees it (see operationView), or null. */
  async getOperation(id) {
    return operationView(await this._read('outbox', id));
  }

  /** Extends a claim to `leaseExpiresAt`; false when the claim is no longer this token's. */
  async renewLease(args) {
    return this._update(FENCED.renewLease(args));
  }

  /** Marks the operation done; false (nothing recorded) when the token is stale. */
  async completeOperation(args) {
    return this._update(FENCED.completeOperation(args));
  }

  /** A retry (`status: 'pending'`, `nextAttemptAt`) or a dead letter; false (nothing recorded) when the token is stale. */
  async failOperation(args) {
    return this._update(FENCED.failOperation(args));
  }

  /** Gives a claim back unfinished: pending and due now, the attempt not counted. */
  async releaseOperation(args) {
    return this._update(FENCED.releaseOperation(args));
  }

  /**
   * A dead operation back to pending, due now, attempts 0; false unless it
   * was dead (requeueOperations says which of done, pending or missing).
   */
  async requeue(operationId, options) {
    return this._update(requeueChange(operationId, options, () => this.now()));
  }

  /**
   * Requeues `{ ids }`, or the dead operations a filter selects (`status:
   * 'dead'` and any filter of listOperations, at most `limit`). Answers per id
   * `{ id, result }`: 'requeued', 'not-dead' or 'not-found'.
   */
  async requeueOperations(args) {
    const request = requeueRequest(args, () => this.now());
    const { now } = request;
    const results = [];
    const requeueOne = async (id) => {
      if (await this._update(requeueChange(id, { now }, () => now))) return 'requeued';
      return (await this._read('outbox', id)) === null ? 'not-found' : 'not-dead';
    };
    if (request.ids !== undefined) {
      for (const id of request.ids) results.push({ id, result: await requeueOne(id) });
      return results;
    }
    for await (const record of this.#pages(request.filter)) {
      if (request.limit !== null && results.length >= request.limit) break;
      const id = record.id;
      if (typeof id !== 'string') continue;
      results.push({ id, result: await requeueOne(id) });
    }
    return results;
  }

  /** Operations matching every given filter, ordered by id, at most `limit` (100), after `afterId` when given. */
  async listOperations(args) {
    return (await this._list(listRequest(args))).map(operationView);
  }

  /** Every record a filter selects, a page at a time (ordered by id). */
  async *#pages(filter) {
    let afterId = null;
    for (;;) {
      const page = await this._list({ ...filter, limit: PAGE_SIZE, afterId });
      yield* page;
      if (page.length < PAGE_SIZE) return;
      afterId = page.at(-1).id;
    }
  }

  /**
   * Counts of operations by status and by type and status, and how long the
   * oldest due operation (pending and due, or claimed with its lease expired)
   * has waited at `now`: `{ byStatus, byType, oldestDueAgeMs }` (null when
   * nothing is due). Two aggregate queries.
   */
  async stats(args) {
    const { now } = nowRequest(args, 'stats', () => this.now());
    const { counts, oldestDueAt } = await this._stats({ now });
    return statsOf(counts, oldestDueAt, now);
  }

  /**
   * Gives back every claim `owner` holds (a worker known to be dead) without
   * waiting for its lease: pending, due at `now`, the lease cleared and the
   * fencing token raised, so a late completeOperation or failOperation under
   * the old token is refused. The attempt stays counted, as when a lease
   * expires. Resolves to the released ids.
   */
  async releaseOwner(owner, args) {
    checkText(owner, 'owner');
    const { now } = nowRequest(args, 'releaseOwner', () => this.now());
    const released = [];
    const filter = listRequest({ status: 'claimed', owner });
    for await (const record of this.#pages(filter)) {
      const operation = operationView(record);
      if (operation.id === null || operation.fencingToken === null) continue; // unreadable: its lease expires as before
      const change = guardedChange(operation.id, 'claimed', operation.fencingToken, {
        status: 'pending',
        nextAttemptAt: now,
        ...LEASE_CLEARED,
        fencingToken: operation.fencingToken + 1,
        updatedAt: now,
      });
      if (await this._update(change)) released.push(operation.id);
    }
    return released;
  }

  /**
   * Deletes receipts recorded before `olderThan`, `batchSize` per statement;
   * `{ deleted, batches }`. `onBatch({ deleted, batches })`, when given, hears
   * the running totals after each batch that deleted something.
   */
  async purgeReceipts(args) {
    const result = await this.#purge('receipts', purgeRequest(args, 'purgeReceipts'));
    telemetry.purged('receipts', result);
    return result;
  }

  /** Deletes `done` (or `dead`) operations last updated before `olderThan`, in batches; `{ deleted, batches }` (`onBatch` as purgeReceipts). */
  async purgeOperations(args) {
    const request = purgeRequest(args, 'purgeOperations');
    const result = await this.#purge('operations', request);
    telemetry.purged('operations', result, request.status);
    return result;
  }

  /**
   * Runs `fn()` while this process holds the lock `name` across every
   * process on the same database, and answers `{ acquired: true, value }`;
   * when someone holds it already, runs nothing and answers
   * `{ acquired: false }` (it never waits). The lock is the database's own
   * where it has one (subclasses: `_tryLock(name, leaseMs)` returns a release
   * function, or null when the lock is held); `leaseMs` bounds how long a
   * lease-based lock (SQLite, MongoDB) outlives a holder that died.
   */
  async withExclusiveLock(name, fn, options) {
    checkText(name, 'name');
    if (typeof fn !== 'function')
      throw invalidArgument('withExclusiveLock needs a function to run', { field: 'fn', reason: 'not a function' });
    const leaseMs = lockLease(options);
    const scope = this._lockScope();
    if (!HELD_LOCKS.has(scope)) HELD_LOCKS.set(scope, new Set());
    const held = HELD_LOCKS.get(scope);
    if (held.has(name)) return { acquired: false };
    held.add(name);
    try {
      const release = await this._tryLock(name, leaseMs);
      if (release === null) return { acquired: false };
      try {
        return { acquired: true, value: await fn() };
      } finally {
        await release();
      }
    } finally {
      held.delete(name);
    }
  }

  /** @internal what in-process holders of a lock are told apart by: the store, or a session it shares */
  _lockScope() {
    return this;
  }

  /**
   * @internal the cross-process part of withExclusiveLock; a store in one process only needs none
   * @param {string} name
   * @param {number} leaseMs
   * @returns {Promise<(() => Promise<void>) | null>}
   */
  async _tryLock(_name, _leaseMs) {
    // eslint-disable-line no-unused-vars
    return async () => {};
  }

  async #purge(target, request) {
    let deleted = 0;
    let batches = 0;
    for (;;) {
      const removed = await this._purgeBatch(target, request);
      deleted += removed;
      if (removed > 0) {
        batches += 1;
        request.onBatch?.({ deleted, batches });
      }
      if (removed < request.batchSize) return { deleted, batches };
    }
  }
}

module.exports = { StoreBase };
