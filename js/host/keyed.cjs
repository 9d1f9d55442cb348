'use strict';
// The keyed mode: idempotent(store, { key, payload }, work) runs `work` once
// per key and answers every later call with the same key what the first one
// stored, without a rule set or a workflow. The key's record (an inbox
// receipt of type idemflow.key, so retention expires it by age) and what
// `work` writes through `tx.client` commit in one transaction: a call that
// fails or dies leaves neither, and the key free. The core decides run,
// replay or conflict (json::keyed); this file holds the key, runs `work` and
// commits.

const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys, numericOption, wholeNumberOr } = require('../core/options.cjs');
const { bindings: wasm, call } = require('../core/wasm.cjs');
const { fingerprintPayload } = require('../core/payload.cjs');
const { outputOf, MAX_OUTPUT_BYTES: DEFAULT_MAX_OUTPUT_BYTES } = require('./applied.cjs');

const DEFAULT_RETRY_AFTER_MS = 1000;
/** The most an output may take here (an HTTP response with its body); a delivery's is 16 KiB. */
const MAX_OUTPUT_BYTES = 1 << 20;
const MAX_WAIT_MS = 10 * 60 * 1000;
/** How often a call waiting for another process's hold asks again. */
const POLL_MS = 20;
const DEFAULT_RACE_RETRIES = 4;

function invalidArgument(message, field) {
  return new IdemflowError('INVALID_ARGUMENT', message, { details: { field, reason: message } });
}

/** A key or fingerprint as the caller gave it: non-empty, well-formed text (the core bounds its length). */
function text(value, field) {
  if (typeof value !== 'string' || value.length === 0 || !value.isWellFormed()) {
    throw invalidArgument(`${field} must be a non-empty string of well-formed Unicode`, field);
  }
  return value;
}

function inProgress(key, retryAfterMs) {
  return new IdemflowError(
    'IDEMPOTENCY_KEY_IN_PROGRESS',
    `idempotency key ${key} is held by a call still running; retry in ${retryAfterMs} ms`,
    {
      details: { key, retryAfterMs },
    },
  );
}

/** `{ key, fingerprint }` of a call: a payload fingerprinted here, or a fingerprint made by fingerprintPayload(Text). */
function requestOf(request) {
  if (request === null || typeof request !== 'object')
    throw invalidArgument('idempotent takes { key, payload } (or { key, fingerprint })', 'request');
  checkOptionKeys(request, ['key', 'payload', 'fingerprint'], 'idempotent');
  const key = text(request.key, 'key');
  const hasPayload = Object.hasOwn(request, 'payload');
  if (hasPayload === (request.fingerprint !== undefined)) throw invalidArgument('give either payload or fingerprint', 'payload');
  return { key, fingerprint: hasPayload ? fingerprintPayload(request.payload) : text(request.fingerprint, 'fingerprint') };
}

function optionsOf(options) {
  checkOptionKeys(options, ['waitMs', 'retryAfterMs', 'maxOutputBytes', 'raceRetries'], 'idempotent');
  const opts = options ?? {};
  return {
    waitMs: wholeNumberOr(opts.waitMs, 0, 'waitMs', 0, MAX_WAIT_MS),
    retryAfterMs: wholeNumberOr(opts.retryAfterMs, DEFAULT_RETRY_AFTER_MS, 'retryAfterMs', 1, MAX_WAIT_MS),
    maxOutputBytes: wholeNumberOr(opts.maxOutputBytes, DEFAULT_MAX_OUTPUT_BYTES, 'maxOutputBytes', 2, MAX_OUTPUT_BYTES),
    raceRetries: numericOption('raceRetries', opts.raceRetries),
  };
}

// The keys this process holds, by what in-process holders are told apart by
// (a store, or the one session it shares: store._lockScope()): a second call
// here waits on the first's promise instead of asking the database.
const HELD = new WeakMap();

function sleep(ms) {
  return new Promise((resolve) => {
    setTimeout(resolve, ms);
  });
}

/** `promise` or `ms`, whichever comes first; the timer does not outlive the wait. */
async function waitAtMost(promise, ms) {
  let timer;
  try {
    await Promise.race([
      promise,
      new Promise((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `fn(holder)` holding `key` in this process. A holder only reading the
 * key's record (a replay, or a call not yet past its decision) is waited for
 * until it is done or starts work, whatever the bound: that is one short
 * transaction. A holder running work (`holder.running`, set through
 * `holder.run()`) is waited for until `deadline`, then the call is in
 * progress: with `waitMs: 0`, at once.
 */
async function holdInProcess(store, key, deadline, retryAfterMs, fn) {
  const scope = store._lockScope();
  if (!HELD.has(scope)) HELD.set(scope, new Map());
  const held = HELD.get(scope);
  while (held.has(key)) {
    const holder = held.get(key);
    if (!holder.running) {
      await Promise.race([holder.done, holder.started]);
      continue;
    }
    const left = deadline - Date.now();
    if (left <= 0) throw inProgress(key, retryAfterMs);
    await waitAtMost(holder.done, left);
  }
  let release;
  let start;
  const holder = {
    running: false,
    done: new Promise((resolve) => {
      release = resolve;
    }),
    started: new Promise((resolve) => {
      start = resolve;
    }),
    run() {
      holder.running = true;
      start();
    },
    stop() {
      holder.running = false;
      holder.started = new Promise((resolve) => {
        start = resolve;
      });
    },
  };
  held.set(key, holder);
  try {
    return await fn(holder);
  } finally {
    held.delete(key);
    start();
    release();
  }
}

/** Answered by a transaction that found the key held by another process and nothing recorded under it yet. */
const HELD_ELSEWHERE = Symbol('held elsewhere');

/**
 * Runs `work(tx)` once for `key`: `{ output, replayed, recordedAt, key,
 * fingerprint }`. A later call with the same key and payload answers the
 * stored output (`replayed: true`) without running work; another payload is
 * IDEMPOTENCY_KEY_CONFLICT (reconcile); a call while another runs work under
 * the key waits up to `waitMs` (default 0) and is then
 * IDEMPOTENCY_KEY_IN_PROGRESS (retry, `details.retryAfterMs`). If work
 * throws, nothing is written and the error comes out as thrown.
 */
async function idempotent(store, request, work, options) {
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function' || typeof store._lockScope !== 'function') {
    throw invalidArgument('idempotent needs an idemflow store', 'store');
  }
  const { key, fingerprint } = requestOf(request);
  if (typeof work !== 'function') throw invalidArgument('idempotent needs a function to run', 'work');
  const { waitMs, retryAfterMs, maxOutputBytes, raceRetries } = optionsOf(options);
  const cycles = 1 + (raceRetries ?? store.raceRetries ?? DEFAULT_RACE_RETRIES);
  const deadline = Date.now() + waitMs;
  /** The core's decision on what is stored under the key: run, replay, or a conflict thrown. */
  const decide = (stored) =>
    JSON.parse(call(() => wasm.decideKey(JSON.stringify({ key, fingerprint, storedFingerprint: stored?.fingerprint ?? null }))));
  const replay = (stored) => ({ output: stored.result?.output ?? null, replayed: true, recordedAt: stored.recordedAt, key, fingerprint });
  return holdInProcess(store, key, deadline, retryAfterMs, async (holder) => {
    for (let cycle = 1; ; ) {
      let outcome;
      try {
        outcome = await store.transaction(async (tx) => {
          // Each try is a transaction of its own, and the hold comes before its first read: a
          // snapshot (MySQL's REPEATABLE READ) then sees what the previous holder committed.
          if (!(await tx._tryHoldKey(key))) {
            // Another process holds the key: it may only be reading a record that is there.
            const stored = await tx.getReceipt(key);
            if (stored === null) return HELD_ELSEWHERE;
            decide(stored);
            return replay(stored);
          }
          const stored = await tx.getReceipt(key);
          const decision = decide(stored);
          if (decision.outcome === 'replay') return replay(stored);
          holder.run();
          // The core's receipt, committed as a decision's is: work runs where onApplied would,
          // and what it returns (checked as onApplied's output, within this call's bound) is kept.
          const recordedAt = store.now();
          const output = await tx.commitDecided({ receipt: decision.receipt, workflow: null, outbox: [] }, async () => {
            const returned = await work(tx);
            // What the work left wrong through tx.client (a refusal, a statement that aborted the transaction) is its failure.
            const misuse = tx.endHostWork(false);
            if (misuse !== null) throw misuse;
            return outputOf(returned, maxOutputBytes);
          });
          return { output, replayed: false, recordedAt, key, fingerprint };
        });
      } catch (error) {
        // Another process recorded the key between this one's read and its insert (a store
        // without a hold across processes), or the database aborted a lost race: the next cycle
        // replays the key or runs again.
        if (!(error instanceof IdemflowError) || error.code !== 'CONCURRENT_UPDATE' || cycle >= cycles) throw error;
        holder.stop();
        cycle += 1;
        continue;
      }
      if (outcome !== HELD_ELSEWHERE) return outcome;
      const left = deadline - Date.now();
      if (left <= 0) throw inProgress(key, retryAfterMs);
      await sleep(Math.min(POLL_MS, left));
    }
  });
}

module.exports = { idempotent };
