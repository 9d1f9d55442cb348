'use strict';
// What processEvent and processBatch share: a call's options, read once into
// a plain copy; its deadline (the store's timeoutMs for the whole call, its
// re-runs and fallbacks included); what follows a lost race (the metric,
// the host's hook, a jittered pause); and the results the host gets from a
// decision. js/host/event.cjs and js/host/batch.cjs run the read → decide →
// onApplied → commit → telemetry cycle on it, one event or many at a time.

const { IdemflowError } = require('../core/errors.cjs');
const { resolveRuleSet } = require('../core/rules.cjs');
const { numericOption, optionsOf } = require('../core/options.cjs');
const telemetry = require('../core/telemetry.cjs');
const { appliedHookOf } = require('./applied.cjs');

const DEFAULT_RACE_RETRIES = 4;
/** Host metadata is correlation data (an id, a tenant), not a second payload. */
const MAX_METADATA_UNITS = 16 * 1024;

/** The options of processEvent and processBatch (and of the store's process and processBatch). */
const PROCESS_OPTIONS = Object.freeze(['ruleSet', 'type', 'raceRetries', 'metadata', 'hooks', 'onApplied']);

function checkStore(store) {
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'store must have a transaction(fn) method', { details: { reason: 'not a store' } });
  }
}

/** How many cycles a delivery may run: 1 + raceRetries (from the call, else the store, else the default). */
function cyclesOf(raceRetries, store) {
  if (raceRetries !== undefined) return numericOption('raceRetries', raceRetries) + 1;
  const fromStore = store.raceRetries;
  return (Number.isSafeInteger(fromStore) && fromStore >= 0 ? fromStore : DEFAULT_RACE_RETRIES) + 1;
}

/**
 * When a call must end (performance.now() time): the store's timeoutMs
 * from now, for the whole call, its re-runs and fallbacks included; null
 * for a store without one (a host's own store may have none).
 */
function callDeadline(store) {
  const { timeoutMs } = store;
  return Number.isSafeInteger(timeoutMs) && timeoutMs > 0 ? performance.now() + timeoutMs : null;
}

/** Host metadata for the operations a delivery writes: a plain JSON object (at most 16 KiB as JSON), copied. */
function metadataOf(metadata) {
  if (metadata === undefined || metadata === null) return null;
  if (typeof metadata !== 'object' || Array.isArray(metadata)) {
    throw new IdemflowError('INVALID_ARGUMENT', 'metadata must be a plain object such as { correlationId, tenant }', {
      details: { field: 'metadata', reason: 'not an object' },
    });
  }
  let text;
  try {
    text = JSON.stringify(metadata);
  } catch (cause) {
    throw new IdemflowError('INVALID_ARGUMENT', 'metadata must be JSON (no cycles, no bigints)', {
      details: { field: 'metadata', reason: 'not JSON' },
      cause,
    });
  }
  if (text.length > MAX_METADATA_UNITS || !text.isWellFormed()) {
    throw new IdemflowError('INVALID_ARGUMENT', `metadata must be well-formed JSON of at most ${MAX_METADATA_UNITS} characters`, {
      details: { field: 'metadata', reason: text.length > MAX_METADATA_UNITS ? 'too large' : 'lone surrogate' },
    });
  }
  return JSON.parse(text);
}

/** `{ onRaceRetry }`, each a function when given (a plain copy, read as options are). */
function hooksOf(hooks) {
  if (hooks === undefined || hooks === null) return {};
  if (typeof hooks !== 'object') {
    throw new IdemflowError('INVALID_ARGUMENT', 'hooks must be an object such as { onRaceRetry }', {
      details: { field: 'hooks', reason: 'not an object' },
    });
  }
  const copy = optionsOf(hooks, ['onRaceRetry'], 'hooks');
  if (copy.onRaceRetry !== undefined && typeof copy.onRaceRetry !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'hooks.onRaceRetry must be a function', {
      details: { field: 'hooks.onRaceRetry', reason: 'not a function' },
    });
  }
  return copy;
}

/**
 * A call of processEvent or processBatch, from its options (read once, like
 * an event): the rule set, the event type it must have, its cycles, the
 * host's metadata, hooks and onApplied, and its deadline.
 */
function callOf(store, options, where) {
  checkStore(store);
  const opts = optionsOf(options, PROCESS_OPTIONS, where);
  const { onRaceRetry } = hooksOf(opts.hooks);
  return {
    store,
    ruleSet: resolveRuleSet(opts.ruleSet),
    type: opts.type,
    cycles: cyclesOf(opts.raceRetries, store),
    metadata: metadataOf(opts.metadata),
    onRaceRetry,
    onApplied: appliedHookOf(opts.onApplied),
    deadlineAt: callDeadline(store),
  };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether a failure is a lost race the cycle can run again. */
function isLostRace(error) {
  return error instanceof IdemflowError && error.code === 'CONCURRENT_UPDATE';
}

/** The metric and the hook of a lost race, without the pause (a batch re-deciding inside its transaction must not wait holding it). */
function noteLostRace(error, attempt, onRaceRetry, run = null) {
  const reason = typeof error.details?.reason === 'string' ? error.details.reason : 'unknown';
  telemetry.raceRetried(run, { attempt, reason });
  if (onRaceRetry !== undefined) {
    try {
      onRaceRetry({ attempt, reason, error });
    } catch {
      // ignored, as documented
    }
  }
}

/**
 * What follows a lost race (cycle `attempt` failed with CONCURRENT_UPDATE)
 * before the cycle runs again: the race re-run metric (of telemetry run
 * `run`), the host's hook (whose failure must not turn a race that is being
 * handled into an error) and a full-jitter backoff, which keeps racing
 * workers from colliding again in lockstep, never past the call's deadline.
 */
async function afterLostRace(error, attempt, call, run = null) {
  noteLostRace(error, attempt, call.onRaceRetry, run);
  const pause = Math.random() * Math.min(100, 5 * 2 ** attempt);
  // Past the deadline the next cycle fails at once, without touching the store.
  await sleep(call.deadlineAt === null ? pause : Math.max(0, Math.min(pause, call.deadlineAt - performance.now())));
}

/** What the host gets from a decision: the outcome and, when applied, its operations and the workflow's new state. */
function resultOf(decision) {
  // A duplicate answers what the first delivery produced, read from its
  // receipt; null when that receipt was written before receipts kept it.
  if (decision.outcome === 'duplicate-delivery') return { outcome: decision.outcome, original: decision.original ?? null };
  if (decision.outcome !== 'applied') return { outcome: decision.outcome };
  const operationIds = decision.writeSet.outbox.map((op) => op.id);
  const set = decision.writeSet.workflow.set;
  return {
    outcome: 'applied',
    operationId: operationIds.length > 0 ? operationIds[0] : null,
    operationIds,
    status: set.status,
    revision: set.revision,
  };
}

/** The outbox operations of a write set with the host's metadata and the delivery's trace context beside their payloads. */
function withCorrelation(writeSet, metadata, traceContext) {
  if (metadata === null && traceContext === null) return writeSet;
  return { ...writeSet, outbox: writeSet.outbox.map((operation) => ({ ...operation, metadata, traceContext })) };
}

module.exports = { callOf, hooksOf, isLostRace, noteLostRace, afterLostRace, resultOf, withCorrelation };
