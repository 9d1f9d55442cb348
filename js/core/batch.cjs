'use strict';
// Many deliveries, one transaction: the host loop of host.cjs for a batch.
// Each event is decided in delivery order against what the transaction has
// read and written so far, so a later event sees what an earlier one wrote
// (a second delivery of one event id is a duplicate, several events for one
// workflow apply one after another): the results and the stored state are
// those of processing the events one by one. Only the transaction is shared.

const { IdemflowError } = require('./errors.cjs');
const { checkOptionKeys } = require('./options.cjs');
const { resolveRuleSet } = require('./rules.cjs');
const { decideNormalized, normalizeEvent } = require('./decide.cjs');
const { afterLostRace, cyclesOf, hooksOf, metadataOf, processEvent, resultOf } = require('./host.cjs');

const MAX_BATCH = 10_000;

/**
 * An error of one event, raised before it wrote anything: the core refused it
 * (an unknown workflow, a reused event id), or a record it read cannot be
 * read. A lost race, the store's own failure and a fatal error are not one
 * event's: they end the batch's transaction.
 */
function ownError(error) {
  return error instanceof IdemflowError && error.code !== 'CONCURRENT_UPDATE' && error.code !== 'STORE_UNAVAILABLE' && error.disposition !== 'fatal';
}

/**
 * Processes `events` in one store transaction and returns one result per
 * event, in input order: `{ outcome, … }` as processEvent returns it, or
 * `{ error }` (an IdemflowError) for an event that was refused and wrote
 * nothing. An event the core rejects does not disturb the others.
 *
 * Every write is guarded, so a concurrent writer makes the transaction fail
 * (CONCURRENT_UPDATE) instead of interleaving: the whole batch then runs
 * again (re-reading what the winner committed, so its events become
 * duplicates or already-applied), up to raceRetries times; if it still
 * loses, or one event's write set cannot be committed (OUTBOX_CONFLICT),
 * the events run one transaction each, so that only the events that keep
 * failing answer with an error. A failure of the store itself
 * (STORE_UNAVAILABLE, a missing table) is every event's error.
 */
async function processBatch(store, events, opts = {}) {
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'store must have a transaction(fn) method', { details: { reason: 'not a store' } });
  }
  if (!Array.isArray(events)) {
    throw new IdemflowError('INVALID_ARGUMENT', 'processBatch takes an array of events', { details: { reason: 'not an array' } });
  }
  if (events.length > MAX_BATCH) {
    throw new IdemflowError('INVALID_ARGUMENT', `a batch holds at most ${MAX_BATCH} events, not ${events.length}`, {
      details: { reason: 'batch too large', limit: MAX_BATCH },
    });
  }
  checkOptionKeys(opts, ['ruleSet', 'type', 'raceRetries', 'maxAttempts', 'metadata', 'hooks'], 'processBatch');
  const ruleSet = resolveRuleSet(opts.ruleSet);
  const cycles = cyclesOf(opts, store);
  const metadata = metadataOf(opts.metadata);
  const { onRaceRetry } = hooksOf(opts.hooks);
  const results = new Array(events.length);
  const valid = [];
  for (const [index, event] of events.entries()) {
    try {
      valid.push({ index, event: normalizeEvent(event, { ruleSet, type: opts.type }) });
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      results[index] = { error };
    }
  }
  if (valid.length === 0) return results;

  for (let attempt = 1; ; attempt += 1) {
    try {
      const decided = await store.transaction((tx) => decideAll(tx, valid, ruleSet, clockOf(store), metadata));
      for (const [index, result] of decided) results[index] = result.error === undefined ? { ...result, attempts: attempt } : result;
      return results;
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      const raced = error.code === 'CONCURRENT_UPDATE';
      if (raced && attempt < cycles) {
        await afterLostRace(error, attempt, onRaceRetry);
        continue;
      }
      if (raced || error.code === 'OUTBOX_CONFLICT') return oneByOne(store, valid, results, { ...opts, ruleSet });
      // The store itself failed: nothing was committed, and every event is to be redelivered.
      for (const { index } of valid) results[index] = { error };
      return results;
    }
  }
}

/** The store's clock (StoreBase has one), else the wall clock. */
function clockOf(store) {
  return typeof store.now === 'function' ? () => store.now() : Date.now;
}

/** A workflow after a write's `set`: a null removes a recorded field. */
function afterSet(workflow, id, set) {
  const next = { ...(workflow ?? { id }) };
  for (const [field, value] of Object.entries(set)) {
    if (value === null) delete next[field];
    else next[field] = value;
  }
  return next;
}

/** One write per workflow from its first expectation and its last state: the compare-and-set of the whole batch. */
function collapsed(id, expect, original, final) {
  const set = {};
  for (const [field, value] of Object.entries(final)) if (field !== 'id') set[field] = value;
  if (original) for (const field of Object.keys(original)) if (!(field in final)) set[field] = null;
  return { id, expect, set };
}

/**
 * Inside one transaction: reads every receipt and workflow the batch names
 * at once, decides each event in order against those copies (each decision
 * updates them as its commit would), and commits the writes of all the
 * decisions together: the receipts, one compare-and-set per workflow, the
 * operations. [index, result] per valid event.
 */
async function decideAll(tx, valid, ruleSet, clock, metadata) {
  // One time for the whole batch: the receipts are stamped with it, and a
  // duplicate within the batch reads it back as its original's decidedAt.
  const now = clock();
  const receipts = await readMany(tx, 'getReceipts', 'getReceipt', [...new Set(valid.map(({ event }) => event.eventId))]);
  const workflows = await readMany(tx, 'getWorkflows', 'getWorkflow', [...new Set(valid.map(({ event }) => event.workflowId))]);
  const original = new Map(workflows);
  const expected = new Map();
  const writes = { receipts: [], operations: [] };
  const operationIds = new Set();
  const out = [];
  for (const { index, event } of valid) {
    let decision;
    try {
      const receipt = receipts.get(event.eventId) ?? null;
      const workflow = receipt ? null : workflows.get(event.workflowId) ?? null;
      decision = decideNormalized(ruleSet.compiled, event, receipt, workflow);
    } catch (error) {
      if (!ownError(error)) throw error;
      out.push([index, { error }]);
      continue;
    }
    const { receipt, workflow, outbox } = decision.writeSet;
    if (receipt) {
      writes.receipts.push(receipt);
      receipts.set(receipt.eventId, { ...receipt, recordedAt: now });
    }
    if (workflow) {
      if (!expected.has(workflow.id)) expected.set(workflow.id, workflow.expect ?? null);
      workflows.set(workflow.id, afterSet(workflows.get(workflow.id), workflow.id, workflow.set));
    }
    for (const operation of outbox) {
      // The same id twice: one by one, the second insert is OUTBOX_CONFLICT for its event.
      if (operationIds.has(operation.id)) {
        throw new IdemflowError('OUTBOX_CONFLICT', `outbox operation ${operation.id} is written twice in one batch`, {
          details: { operationId: operation.id, reason: 'twice-in-batch' },
        });
      }
      operationIds.add(operation.id);
      writes.operations.push(metadata === null ? operation : { ...operation, metadata, traceContext: null });
    }
    out.push([index, { ...resultOf(decision), fingerprint: decision.fingerprint }]);
  }
  const workflowWrites = [...expected].map(([id, expect]) => collapsed(id, expect, original.get(id) ?? null, workflows.get(id)));
  if (typeof tx.commitBatch === 'function') {
    await tx.commitBatch({ receipts: writes.receipts, workflows: workflowWrites, operations: writes.operations, now });
  } else {
    for (const receipt of writes.receipts) await tx.insertReceipt(receipt);
    for (const write of workflowWrites) await tx.writeWorkflow(write);
    for (const operation of writes.operations) await tx.insertOperation(operation);
  }
  return out;
}

/** key → record for the keys that exist, through `many` when the transaction has it, else one read each. */
async function readMany(tx, many, one, keys) {
  if (typeof tx[many] === 'function') return tx[many](keys);
  const found = new Map();
  for (const key of keys) {
    const record = await tx[one](key);
    if (record) found.set(key, record);
  }
  return found;
}

/** The events of a batch that could not commit together, one transaction each. */
async function oneByOne(store, valid, results, opts) {
  for (const { index, event } of valid) {
    try {
      results[index] = await processEvent(store, event, opts);
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      results[index] = { error };
    }
  }
  return results;
}

module.exports = { processBatch, MAX_BATCH };
