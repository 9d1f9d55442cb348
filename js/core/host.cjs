'use strict';
// The host loop: read, let the core decide, commit the write set, all in one
// store transaction. It knows no rule; it only carries out decisions.

const { IdemflowError } = require('./errors.cjs');
const { RuleSet, resolveRuleSet } = require('./rules.cjs');
const { decideNormalized, normalizeEvent } = require('./decide.cjs');
const { checkOptionKeys } = require('./options.cjs');

const DEFAULT_RACE_RETRIES = 4;

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
 * Writes a decision's write set through a store transaction, in a fixed
 * order: receipt (unique event id), workflow (compare-and-set), operations
 * (unique operation ids). Stores signal a lost race with CONCURRENT_UPDATE
 * and an existing operation id with OUTBOX_CONFLICT.
 */
async function commitWriteSet(tx, writeSet) {
  if (writeSet.receipt) await tx.insertReceipt(writeSet.receipt);
  if (writeSet.workflow) await tx.writeWorkflow(writeSet.workflow);
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
 * Processes one delivery: validates it (before any I/O), then in one
 * transaction reads the receipt and the workflow, decides and commits. When a
 * concurrent writer wins a race (CONCURRENT_UPDATE) the whole cycle runs again
 * and the core classifies the re-read state, so a lost race for the same fact
 * becomes duplicate-delivery or already-applied, not an error.
 */
async function processEvent(store, event, opts = {}) {
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'store must have a transaction(fn) method', {
      details: { reason: 'not a store' },
    });
  }
  checkOptionKeys(opts, ['ruleSet', 'type', 'raceRetries', 'maxAttempts'], 'processEvent');
  const ruleSet = resolveRuleSet(opts.ruleSet);
  const valid = normalizeEvent(event, { ruleSet, type: opts.type });
  const maxAttempts = cyclesOf(opts, store);
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await store.transaction(async (tx) => {
        const receipt = await tx.getReceipt(valid.eventId);
        const workflow = receipt ? null : await tx.getWorkflow(valid.workflowId);
        // Validated once, above: the normalized copy is plain data the fast path decides as it is.
        const decision = decideNormalized(ruleSet.compiled, valid, receipt, workflow);
        await commitWriteSet(tx, decision.writeSet);
        return resultOf(decision);
      });
    } catch (error) {
      const raced = error instanceof IdemflowError && error.code === 'CONCURRENT_UPDATE';
      if (!raced || attempt >= maxAttempts) throw error;
      // Full jitter keeps racing workers from colliding again in lockstep.
      await sleep(Math.random() * Math.min(100, 5 * 2 ** attempt));
    }
  }
}

/**
 * processEvent for DEPOSIT_CONFIRMED, as in the seed article: by default under
 * deposit-swap v1, the seed's rules (no jump from waiting or overdue straight
 * to exchange). Pass `ruleSet` for another, such as the reorder-safe current one.
 */
async function processDepositConfirmed(store, event, opts = {}) {
  checkOptionKeys(opts, ['ruleSet', 'raceRetries', 'maxAttempts'], 'processDepositConfirmed');
  const ruleSet = opts.ruleSet ?? RuleSet.builtin('deposit-swap', { version: 1 });
  return processEvent(store, event, { ...opts, ruleSet, type: 'DEPOSIT_CONFIRMED' });
}

module.exports = { processEvent, processDepositConfirmed, commitWriteSet, cyclesOf, resultOf, sleep };
