'use strict';
// Groups a broker's deliveries into batches for handle.batch (one transaction
// each). A full batch (`size` items) goes at once. A partial one adapts to the
// load: it goes `lingerMs` after its first item while no batch is running (a
// quiet stream waits little); while batches run it keeps filling and goes when
// they have settled, or `maxLingerMs` after its first item, whichever comes
// first. Under load batches therefore fill with what arrives during one run
// instead of going out a few items at a time.
// `window` (default twice `size`, so one batch fills while another runs) bounds
// how many items are held or in batches that have not settled: push() waits
// for room, so a consumer that awaits it takes no more than the window from its
// broker (set the broker's prefetch to the window).
// drain() is a graceful stop: what is held goes now, and it resolves once
// every batch has settled, so the worker can acknowledge them and exit.

const { IdemflowError } = require('../core/errors.cjs');
const { optionsOf, wholeNumber } = require('../core/options.cjs');

function misconfigured(field, message) {
  return new IdemflowError('INVALID_ARGUMENT', `createBatcher: ${message}`, { disposition: 'fatal', details: { field, reason: message } });
}

/**
 * `run(items)` is the worker's batch: it settles its items (acks, retries, …).
 * A run that throws is handed to `onError(error, items)`; without one, the
 * error is thrown where nothing catches it, and the process ends, as for any
 * uncaught error: a worker that cannot settle its messages must stop.
 * @param {{ size: number, lingerMs?: number, maxLingerMs?: number, window?: number, run: (items: unknown[]) => unknown, onError?: (error: unknown, items: unknown[]) => void }} options
 */
function createBatcher(options) {
  const given = optionsOf(options, ['size', 'lingerMs', 'maxLingerMs', 'window', 'run', 'onError'], 'createBatcher');
  const size = wholeNumber(given.size, 'size', 1);
  const lingerMs = wholeNumber(given.lingerMs ?? 5, 'lingerMs', 0);
  const maxLingerMs = wholeNumber(given.maxLingerMs ?? Math.max(50, lingerMs), 'maxLingerMs', lingerMs);
  const window = wholeNumber(given.window ?? 2 * size, 'window', size);
  const { run } = given;
  if (typeof run !== 'function') throw misconfigured('run', 'run must be a function that takes one batch');
  if (given.onError !== undefined && typeof given.onError !== 'function') throw misconfigured('onError', 'onError must be a function');
  const onError =
    given.onError ??
    ((error) =>
      queueMicrotask(() => {
        throw error;
      }));

  let pending = [];
  let timer = null;
  let firstAt = 0;
  let running = 0;
  let sent = 0;
  let sentItems = 0;
  const batches = new Set();
  const waiting = [];

  // The partial batch's timer: lingerMs after its first item while nothing
  // runs, maxLingerMs after it while a batch runs (that batch settling sends it sooner).
  const arm = () => {
    clearTimeout(timer);
    timer = null;
    if (pending.length === 0) return;
    const waited = performance.now() - firstAt;
    const limit = running === 0 ? lingerMs : maxLingerMs;
    timer = setTimeout(flush, Math.max(0, limit - waited));
  };

  const admit = () => {
    while (waiting.length > 0 && pending.length + running < window) waiting.shift()();
  };
  const flush = () => {
    clearTimeout(timer);
    timer = null;
    if (pending.length === 0) return;
    const batch = pending;
    pending = [];
    running += batch.length;
    sent += 1;
    sentItems += batch.length;
    const settled = Promise.resolve()
      .then(() => run(batch))
      .catch((error) => onError(error, batch))
      .finally(() => {
        running -= batch.length;
        batches.delete(settled);
        admit();
        // Nothing else running: what filled meanwhile goes once lingerMs has passed since its first item (at once after a long run).
        arm();
      });
    batches.add(settled);
  };

  return {
    /** Adds an item; resolves once it is taken (at once while the window has room). */
    push(item) {
      const take = () => {
        pending.push(item);
        if (pending.length >= size) flush();
        else if (pending.length === 1) {
          firstAt = performance.now();
          arm();
        }
      };
      if (pending.length + running < window && waiting.length === 0) {
        take();
        return Promise.resolve();
      }
      return new Promise((resolve) =>
        waiting.push(() => {
          take();
          resolve();
        }),
      );
    },
    /** Items waiting for their batch. */
    get held() {
      return pending.length;
    },
    /** Items in batches that have not settled. */
    get running() {
      return running;
    },
    /** Batches sent so far and the items they held (their mean is the batch size reached). */
    get sent() {
      return { batches: sent, items: sentItems };
    },
    /** Sends what is held now and resolves once every batch has settled. */
    async drain() {
      while (waiting.length > 0 || pending.length > 0 || batches.size > 0) {
        admit();
        flush();
        await Promise.allSettled([...batches]);
      }
    },
  };
}

module.exports = { createBatcher };
