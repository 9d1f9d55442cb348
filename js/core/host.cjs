'use strict';
// The host loop: read, let the core decide, commit the write set, all in one
// store transaction. It knows no rule; it only carries out decisions.

const { IdemflowError } = require('./errors.cjs');
const { RuleSet, resolveRuleSet } = require('./rules.cjs');
const { decideNormalized, normalizeEvent } = require('./decide.cjs');
const { optionsOf } = require('./options.cjs');
const telemetry = require('./telemetry.cjs');
const { step } = require('./step.cjs');

const DEFAULT_RACE_RETRIES = 4;
/** Host metadata is correlation data (an id, a tenant), not a second payload. */
const MAX_METADATA_UNITS = 16 * 1024;

/**
 * How many cycles a delivery may run: 1 + raceRetries (from the call, then
 * the store), or the older name maxAttempts (the cycles themselves).
 */
function cyclesOf(opts, store) {
  const { raceRetries } = opts;
  if (raceRetries !== undefined) {
    if (!Number.isSafeInteger(raceRetries) || raceRetries < 0) {
      throw new IdemflowError('INVALID_ARGUMENT', 'raceRetries must be a whole number of at least 0', {
        details: { field: 'raceRetries', reason: 'not a non-negative integer' },
      });
    }
    return raceRetries + 1;
  }
  if (opts.maxAttempts !== undefined) return opts.maxAttempts;
  if (store.raceRetries !== undefined) return store.raceRetries + 1;
  return store.maxAttempts ?? DEFAULT_RACE_RETRIES + 1;
}

/**
 * Writes a decision's write set through a store transaction, in the order
 * every transaction of idemflow takes its locks: workflow (compare-and-set),
 * receipt (unique event id), operations (unique operation ids). Stores
 * signal a lost race with CONCURRENT_UPDATE and an existing operation id
 * with OUTBOX_CONFLICT.
 */
async function commitWriteSet(tx, writeSet) {
  if (writeSet.workflow) await tx.writeWorkflow(writeSet.workflow);
  if (writeSet.receipt) await tx.insertReceipt(writeSet.receipt);
  for (const operation of writeSet.outbox) await tx.insertOperation(operation);
}

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

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * What follows a lost race (cycle `attempt` failed with CONCURRENT_UPDATE)
 * before the cycle runs again: the race re-run metric (of telemetry run
 * `run`), the host's hook (whose failure must not turn a race that is being
 * handled into an error) and a full-jitter backoff, which keeps racing
 * workers from colliding again in lockstep.
 */
async function afterLostRace(error, attempt, onRaceRetry, run = null, deadlineAt = null) {
  noteLostRace(error, attempt, onRaceRetry, run);
  const pause = Math.random() * Math.min(100, 5 * 2 ** attempt);
  // Never past the call's deadline: the next cycle then fails at once, without touching the store.
  await sleep(deadlineAt === null ? pause : Math.max(0, Math.min(pause, deadlineAt - performance.now())));
}

/**
 * When a call must end (performance.now() time): the store's timeoutMs
 * from now, for the whole call, its re-runs and fallbacks included; null
 * for a store without one (SQLite, memory: their calls do not wait on a server).
 */
function callDeadline(store) {
  const { timeoutMs } = store;
  return Number.isSafeInteger(timeoutMs) && timeoutMs > 0 ? performance.now() + timeoutMs : null;
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
    throw new IdemflowError('INVALID_ARGUMENT', 'metadata must be JSON (no cycles, no bigints)', { details: { field: 'metadata', reason: 'not JSON' }, cause });
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
    throw new IdemflowError('INVALID_ARGUMENT', 'hooks must be an object such as { onRaceRetry }', { details: { field: 'hooks', reason: 'not an object' } });
  }
  const copy = optionsOf(hooks, ['onRaceRetry'], 'processEvent hooks');
  if (copy.onRaceRetry !== undefined && typeof copy.onRaceRetry !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'hooks.onRaceRetry must be a function', { details: { field: 'hooks.onRaceRetry', reason: 'not a function' } });
  }
  return copy;
}

/** The outbox operations of a write set with the host's metadata and the delivery's trace context beside their payloads. */
function withCorrelation(writeSet, metadata, traceContext) {
  if (metadata === null && traceContext === null) return writeSet;
  return { ...writeSet, outbox: writeSet.outbox.map((operation) => ({ ...operation, metadata, traceContext })) };
}

/**
 * Processes one delivery: validates it (before any I/O), then in one
 * transaction reads the receipt and the workflow, decides and commits. When a
 * concurrent writer wins a race (CONCURRENT_UPDATE) the whole cycle runs again
 * and the core classifies the re-read state, so a lost race for the same fact
 * becomes duplicate-delivery or already-applied, not an error. The result
 * says how many cycles it took (`attempts`) and the event's `fingerprint`;
 * `hooks.onRaceRetry({ attempt, reason, error })` hears of each re-run.
 */
async function processEvent(store, event, opts) {
  try {
    return await processChecked(store, event, opts, null);
  } catch (error) {
    telemetry.errorRaised(error, 'process');
    throw error;
  }
}

const PROCESS_OPTIONS = ['ruleSet', 'type', 'raceRetries', 'maxAttempts', 'metadata', 'hooks'];

/** processEvent within `deadlineAt` (a batch's fallback passes its own; null: the store's timeoutMs from now). */
async function processChecked(store, event, options, deadlineAt) {
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'store must have a transaction(fn) method', {
      details: { reason: 'not a store' },
    });
  }
  const opts = optionsOf(options, PROCESS_OPTIONS, 'processEvent');
  const ruleSet = resolveRuleSet(opts.ruleSet);
  const valid = normalizeEvent(event, { ruleSet, type: opts.type });
  const maxAttempts = cyclesOf(opts, store);
  const metadata = metadataOf(opts.metadata);
  const { onRaceRetry } = hooksOf(opts.hooks);
  const transactionOptions = { deadlineAt: deadlineAt ?? callDeadline(store) };
  const run = telemetry.processStarted({ store, event: valid, ruleSet });
  let attempt = 1;
  try {
    const result = await telemetry.inSpan(run, async () => {
      for (; ; attempt += 1) {
        try {
          // Read, decide, write: in steps (step.cjs) that stay synchronous
          // inside a transaction over a synchronous driver (SQLite), so that
          // the transaction holds no promise per statement.
          return await store.transaction((tx) => {
            try {
              return decideIn(tx);
            } catch (error) {
              // As an async body would: a store that does not expect its work to throw gets a rejection.
              return Promise.reject(error);
            }
          }, transactionOptions);
        } catch (error) {
          const raced = error instanceof IdemflowError && error.code === 'CONCURRENT_UPDATE';
          if (!raced || attempt >= maxAttempts) throw error;
          await afterLostRace(error, attempt, onRaceRetry, run, transactionOptions.deadlineAt);
        }
      }
    });
    result.attempts = attempt;
    telemetry.processEnded(run, result);
    return result;
  } catch (error) {
    telemetry.processFailed(run, error, attempt);
    throw error;
  }

  /** One cycle inside a transaction. */
  function decideIn(tx) {
    // A transaction that can read less for a decision does (a store's own, or one a host wrote).
    const read = typeof tx.getReceiptToDecide === 'function' ? tx.getReceiptToDecide(valid.eventId) : tx.getReceipt(valid.eventId);
    return step(read, (receipt) => {
      const workflow = receipt ? null : typeof tx._workflowToDecide === 'function' ? tx._workflowToDecide(valid.workflowId) : tx.getWorkflow(valid.workflowId);
      return step(workflow, (stored) => {
        // Validated once, above: the normalized copy is plain data the fast path decides as it is.
        const decision = decideNormalized(ruleSet.compiled, valid, receipt, stored);
        const writeSet = withCorrelation(decision.writeSet, metadata, run?.traceparent ?? null);
        // A store's own transaction stores what the core made without checking it again; another goes through the checked methods.
        const written = typeof tx._commitDecided === 'function' ? tx._commitDecided(writeSet) : commitWriteSet(tx, writeSet);
        return step(written, () => ({ ...resultOf(decision), fingerprint: decision.fingerprint }));
      });
    });
  }
}

/**
 * processEvent for DEPOSIT_CONFIRMED, as in the seed article: by default under
 * deposit-swap v1, the seed's rules (no jump from waiting or overdue straight
 * to exchange). Pass `ruleSet` for another, such as the reorder-safe current one.
 */
async function processDepositConfirmed(store, event, options) {
  const opts = optionsOf(options, ['ruleSet', 'raceRetries', 'maxAttempts', 'metadata', 'hooks'], 'processDepositConfirmed');
  const ruleSet = opts.ruleSet ?? RuleSet.builtin('deposit-swap', { version: 1 });
  return processEvent(store, event, { ...opts, ruleSet, type: 'DEPOSIT_CONFIRMED' });
}

module.exports = { processEvent, processChecked, processDepositConfirmed, commitWriteSet, cyclesOf, callDeadline, resultOf, afterLostRace, noteLostRace, hooksOf, metadataOf, PROCESS_OPTIONS };
