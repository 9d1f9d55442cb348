'use strict';
// Retention that runs itself: purges old receipts and finished operations on
// a schedule, in any worker, one runner at a time across processes (the
// store's withExclusiveLock). Each batch is one short statement of the
// store's purge; no transaction spans a run. Dead operations are never
// purged here: they wait for an operator to requeue or purge them.

const { EventEmitter } = require('node:events');
const { checkOptionKeys } = require('../core/options.cjs');
const { invalidArgument } = require('./errors.cjs');

const DEFAULT_BATCH_SIZE = 1000;

function duration(value, field, { optional }) {
  if (value === undefined || value === null) {
    if (optional) return null;
    throw invalidArgument(`${field} is required (milliseconds)`, { field, reason: 'missing' });
  }
  if (!Number.isSafeInteger(value) || value < 1) {
    throw invalidArgument(`${field} must be a whole number of milliseconds of at least 1`, { field, reason: 'not a positive integer' });
  }
  return value;
}

/**
 * The schedule of one store's purges. Events: 'run' `{ receipts, operations,
 * startedAt, endedAt }` after each purge this runner did (counts as
 * `{ deleted, batches }`, null for what it does not purge); 'skipped'
 * `{ reason: 'locked', at }` when another runner held the lock; 'error' when
 * a run failed (only when someone listens: an unheard failure is retried at
 * the next tick, never a crash).
 */
class Retention extends EventEmitter {
  #store;
  #settings;
  #timer = null;
  #running = null;
  #stopped = false;

  constructor(store, settings) {
    super();
    this.#store = store;
    this.#settings = settings;
  }

  /** What this runner purges and how often, resolved. */
  get settings() {
    return { ...this.#settings };
  }

  /** Starts the schedule: a run now, then one every `every` ms after the last ended. */
  start() {
    if (this.#stopped) throw invalidArgument('this retention was stopped; create another', { reason: 'stopped' });
    if (this.#timer === null && this.#running === null) this.#schedule(0);
    return this;
  }

  /**
   * One run now (unless one is running: its result is awaited instead):
   * the run's report, or null when another runner held the lock.
   */
  runOnce() {
    if (this.#running === null) {
      this.#running = this.#run().finally(() => {
        this.#running = null;
      });
    }
    return this.#running;
  }

  /** Stops the schedule and waits for a running purge to end (it ends at its batch boundary of the store's purge). */
  async stop() {
    this.#stopped = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#running !== null) await this.#running.catch(() => {});
  }

  #schedule(delay) {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.runOnce()
        .catch((error) => {
          if (this.listenerCount('error') > 0) this.emit('error', error);
        })
        .finally(() => this.#schedule(this.#settings.every));
    }, delay);
    this.#timer.unref?.();
  }

  async #run() {
    const { receiptsOlderThan, operationsOlderThan, batchSize, lockName, leaseMs } = this.#settings;
    const store = this.#store;
    const locked = await store.withExclusiveLock(
      lockName,
      async () => {
        const startedAt = Date.now();
        const now = typeof store.now === 'function' ? store.now() : Date.now();
        const receipts = receiptsOlderThan === null ? null : await store.purgeReceipts({ olderThan: now - receiptsOlderThan, batchSize });
        const operations =
          operationsOlderThan === null
            ? null
            : await store.purgeOperations({ olderThan: now - operationsOlderThan, batchSize, status: 'done' });
        return { receipts, operations, startedAt, endedAt: Date.now() };
      },
      { leaseMs },
    );
    if (!locked.acquired) {
      this.emit('skipped', { reason: 'locked', at: Date.now() });
      return null;
    }
    this.emit('run', locked.value);
    return locked.value;
  }
}

/**
 * Purges on a schedule: receipts recorded more than `receiptsOlderThan` ms
 * ago and `done` operations last updated more than `operationsOlderThan` ms
 * ago (either may be left out; not both), `batchSize` rows a statement,
 * every `every` ms. Only one runner purges at a time across all processes
 * on the store's database (the lock `lockName`, by default named after the
 * inbox table). Started at once unless `start: false`; `stop()` ends it.
 */
function createRetention(store, options) {
  if (
    store === null ||
    typeof store !== 'object' ||
    typeof store.withExclusiveLock !== 'function' ||
    typeof store.purgeReceipts !== 'function' ||
    typeof store.purgeOperations !== 'function'
  ) {
    throw invalidArgument('createRetention needs a store with withExclusiveLock, purgeReceipts and purgeOperations', {
      field: 'store',
      reason: 'not a store',
    });
  }
  checkOptionKeys(
    options,
    ['receiptsOlderThan', 'operationsOlderThan', 'every', 'batchSize', 'lockName', 'leaseMs', 'start'],
    'createRetention',
  );
  const opts = options ?? {};
  const receiptsOlderThan = duration(opts.receiptsOlderThan, 'receiptsOlderThan', { optional: true });
  const operationsOlderThan = duration(opts.operationsOlderThan, 'operationsOlderThan', { optional: true });
  if (receiptsOlderThan === null && operationsOlderThan === null) {
    throw invalidArgument('createRetention needs receiptsOlderThan, operationsOlderThan or both', {
      field: 'receiptsOlderThan',
      reason: 'nothing to purge',
    });
  }
  const every = duration(opts.every, 'every', { optional: false });
  const batchSize = opts.batchSize ?? DEFAULT_BATCH_SIZE;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw invalidArgument('batchSize must be a whole number of at least 1', { field: 'batchSize', reason: 'not a positive integer' });
  }
  const lockName = opts.lockName ?? `idemflow.retention:${store.tables?.inbox ?? 'inbox'}`;
  if (typeof lockName !== 'string' || lockName.length === 0) {
    throw invalidArgument('lockName must be a non-empty string', { field: 'lockName', reason: 'not a non-empty string' });
  }
  const leaseMs = duration(opts.leaseMs ?? 10 * 60 * 1000, 'leaseMs', { optional: false });
  const retention = new Retention(store, { receiptsOlderThan, operationsOlderThan, every, batchSize, lockName, leaseMs });
  if (opts.start !== false) retention.start();
  return retention;
}

module.exports = { createRetention };
