'use strict';
// processEvent: the host cycle for one delivery. It validates the event
// (before any I/O), then in one store transaction reads the receipt and the
// workflow, lets the core decide, runs the host's onApplied when the
// decision is applied, and commits the write set; it knows no rule, it only
// carries out decisions.

const { RuleSet } = require('../core/rules.cjs');
const { decideNormalized, normalizeEvent } = require('../core/decide.cjs');
const { optionsOf } = require('../core/options.cjs');
const telemetry = require('../core/telemetry.cjs');
const { step } = require('../core/step.cjs');
const { runApplied, splitOutput, withOriginalOutput } = require('./applied.cjs');
const { contractOf } = require('./contract.cjs');
const { callOf, afterLostRace, isLostRace, resultOf, withCorrelation } = require('./cycle.cjs');

/**
 * Processes one delivery. When a concurrent writer wins a race
 * (CONCURRENT_UPDATE) the whole cycle runs again (onApplied included, after
 * the first attempt rolled back) and the core classifies the re-read state,
 * so a lost race for the same fact becomes duplicate-delivery or
 * already-applied, not an error. The result says how many cycles it took
 * (`attempts`), the event's `fingerprint` and, with onApplied, its `output`;
 * `hooks.onRaceRetry({ attempt, reason, error })` hears of each re-run. The
 * whole call ends within the store's timeoutMs.
 */
async function processEvent(store, event, options) {
  try {
    const call = callOf(store, options, 'processEvent');
    return await processValid(call, normalizeEvent(event, { ruleSet: call.ruleSet, type: call.type }));
  } catch (error) {
    telemetry.errorRaised(error, 'process');
    throw error;
  }
}

/** processEvent of an event normalizeEvent has validated, in a call already read (a batch's one-by-one fallback passes its own). */
async function processValid(call, valid) {
  const { store, ruleSet, metadata, onApplied } = call;
  const transactionOptions = { deadlineAt: call.deadlineAt };
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
              return cycle(contractOf(tx));
            } catch (error) {
              // As an async body would: a store that does not expect its work to throw gets a rejection.
              return Promise.reject(error);
            }
          }, transactionOptions);
        } catch (error) {
          if (!isLostRace(error) || attempt >= call.cycles) throw error;
          await afterLostRace(error, attempt, call, run);
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

  /** One cycle inside a transaction (the contract of js/host/contract.cjs). */
  function cycle(tx) {
    return step(tx.getReceiptToDecide(valid.eventId, valid.workflowId), (stored) => {
      const { receipt, output: original } = splitOutput(stored);
      return step(receipt ? null : tx.getWorkflowToDecide(valid.workflowId), (workflow) => {
        // Validated once, above: the normalized copy is plain data the core decides as it is.
        const decision = decideNormalized(ruleSet.compiled, valid, receipt, workflow);
        const writeSet = withCorrelation(decision.writeSet, metadata, run?.traceparent ?? null);
        const result = { ...resultOf(decision), fingerprint: decision.fingerprint };
        if (decision.outcome === 'duplicate-delivery') return withOriginalOutput(result, original);
        if (onApplied === undefined || decision.outcome !== 'applied') return step(tx.commitDecided(writeSet), () => result);
        // The workflow is written (and locked) first, then the host's work, then the receipt with its output.
        const between = () => runApplied(onApplied, tx, { ...result, event: valid });
        return step(tx.commitDecided(writeSet, between), (output) => ({ ...result, output }));
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
  const opts = optionsOf(options, ['ruleSet', 'raceRetries', 'metadata', 'hooks', 'onApplied'], 'processDepositConfirmed');
  const ruleSet = opts.ruleSet ?? RuleSet.builtin('deposit-swap', { version: 1 });
  return processEvent(store, event, { ...opts, ruleSet, type: 'DEPOSIT_CONFIRMED' });
}

module.exports = { processEvent, processValid, processDepositConfirmed };
