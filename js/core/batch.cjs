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
const { decideNormalized, decideNormalizedBatch, normalizeEvent } = require('./decide.cjs');
const { afterLostRace, cyclesOf, hooksOf, metadataOf, noteLostRace, processEvent, resultOf } = require('./host.cjs');

const MAX_BATCH = 10_000;
/** Reads after a lost write: what the winner committed, past any snapshot. */
const LATEST = Object.freeze({ latest: true });

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
 * Every write is guarded, so a concurrent writer's commit makes a write fail
 * instead of interleaving. In a SQL store the batch then rolls back to a
 * savepoint taken before its writes and, in the same transaction, re-reads
 * and re-decides only the events that touch what the winner committed (its
 * events become duplicates or already-applied); the other decisions stand.
 * Where that is not possible (no savepoints, a deadlock, a lost race that
 * keeps recurring) the transaction fails (CONCURRENT_UPDATE) and the whole
 * batch runs again, up to raceRetries times; if it still
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
      const outcome = await store.transaction((tx) => decideAll(tx, valid, ruleSet, clockOf(store), metadata, cycles, onRaceRetry));
      for (const [index, result, decided] of outcome) results[index] = result.error === undefined ? { ...result, attempts: attempt - 1 + decided } : result;
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

/**
 * The workflow after a write's `set` (a null removes a recorded field), in
 * `state`: the batch's own copy, made at its first write and changed in
 * place after that (the records read stay as read).
 */
function applySet(state, id, set) {
  let next = state.workflows.get(id);
  if (next === undefined || !state.copies.has(next)) {
    next = { ...(next ?? { id }) };
    state.copies.add(next);
    state.workflows.set(id, next);
  }
  for (const field in set) {
    const value = set[field];
    if (value === null) delete next[field];
    else next[field] = value;
  }
}

/** One write per workflow from its first expectation and its last state: the compare-and-set of the whole batch. */
function collapsed(id, expect, original, final) {
  const set = {};
  for (const [field, value] of Object.entries(final)) if (field !== 'id') set[field] = value;
  if (original) for (const field of Object.keys(original)) if (!(field in final)) set[field] = null;
  return { id, expect, set };
}

/**
 * A write that lost to another transaction's commit: a receipt it inserts
 * exists, or a workflow it creates or compares-and-sets is not as read. The
 * batch can undo its writes to its savepoint and decide the losers again.
 */
function lostWrite(error) {
  return error instanceof IdemflowError && error.code === 'CONCURRENT_UPDATE'
    && ['receipt-exists', 'workflow-exists', 'workflow-changed'].includes(error.details?.reason);
}

/** Whether another transaction created, changed or removed a workflow since it was read. */
function workflowMoved(before, after) {
  if (before === undefined || after === undefined) return before !== after;
  return before.status !== after.status || before.revision !== after.revision;
}

/**
 * Inside one transaction: reads every receipt and workflow the batch names
 * at once, decides each event in order against those copies (each decision
 * updates them as its commit would), and commits the writes of all the
 * decisions together: the receipts, one compare-and-set per workflow, the
 * operations. [index, result, decided] per valid event, `decided` being how
 * often it was decided.
 *
 * A write lost to another transaction (see lostWrite) rolls back to a
 * savepoint taken before the writes, where the transaction has one: the
 * receipts and workflows the writes expected are read again to find the
 * losers; the events on them (and every event that shares an event id or a
 * workflow with those, and so on) are read again and decided again in order;
 * the other events' decisions stand; and the writes are made again, up to
 * `cycles` times in all, in the same transaction.
 */
async function decideAll(tx, valid, ruleSet, clock, metadata, cycles, onRaceRetry) {
  // One time for the whole batch: the receipts are stamped with it, and a
  // duplicate within the batch reads it back as its original's decidedAt.
  const now = clock();
  // As stored (read), and as the decisions so far leave them.
  const stored = {
    receipts: await readMany(tx, 'getReceipts', 'getReceipt', keysOf(valid, 'eventId')),
    workflows: await readMany(tx, 'getWorkflows', 'getWorkflow', keysOf(valid, 'workflowId')),
  };
  const state = { receipts: new Map(stored.receipts), workflows: new Map(stored.workflows), copies: new Set() };
  const entries = new Array(valid.length);
  decideSome(valid, valid.keys(), entries, state, { ruleSet, now, decided: 1 });
  const undoable = typeof tx.savepoint === 'function' && typeof tx.getReceipts === 'function' && typeof tx.getWorkflows === 'function';
  if (undoable) await tx.savepoint();
  for (let round = 1; ; round += 1) {
    const writes = writesOf(entries, stored.workflows, state.workflows, metadata);
    try {
      await commit(tx, writes, now);
      return entries.map(({ index, decision, error, decided }) => [index, error === undefined ? { ...resultOf(decision), fingerprint: decision.fingerprint } : { error }, decided]);
    } catch (error) {
      if (!undoable || !lostWrite(error) || round >= cycles) throw error;
      noteLostRace(error, round, onRaceRetry);
      await tx.rollbackToSavepoint();
      await decideLosersAgain(tx, valid, entries, stored, state, writes, { ruleSet, now, decided: round + 1 });
    }
  }
}

/** The distinct values of one field of the batch's events. */
function keysOf(valid, field, positions = valid.keys()) {
  const keys = new Set();
  for (const position of positions) keys.add(valid[position].event[field]);
  return [...keys];
}

/**
 * Decides the events at `positions` in order against `state`, which each
 * decision updates as its commit would. The events that are the first of
 * `positions` on both their event id and their workflow read nothing an
 * earlier one writes: they are decided together, in one call to the core.
 */
function decideSome(valid, positions, entries, state, how) {
  const eventIds = new Set();
  const workflowIds = new Set();
  const first = [];
  const later = [];
  for (const position of positions) {
    const { eventId, workflowId } = valid[position].event;
    (eventIds.has(eventId) || workflowIds.has(workflowId) ? later : first).push(position);
    eventIds.add(eventId);
    workflowIds.add(workflowId);
  }
  if (first.length > 1) {
    const inputs = first.map((position) => inputOf(valid[position].event, state));
    const answers = decideNormalizedBatch(how.ruleSet.compiled, inputs);
    for (const [k, position] of first.entries()) settle(valid[position], position, answers[k], entries, state, how);
  } else {
    later.unshift(...first);
  }
  for (const position of later) {
    const { event } = valid[position];
    const { receipt, workflow } = inputOf(event, state);
    let answer;
    try {
      answer = decideNormalized(how.ruleSet.compiled, event, receipt, workflow);
    } catch (error) {
      answer = { error };
    }
    settle(valid[position], position, answer, entries, state, how);
  }
}

/** What a decision of `event` reads: its receipt, and without one its workflow. */
function inputOf(event, state) {
  const receipt = state.receipts.get(event.eventId) ?? null;
  return { event, receipt, workflow: receipt ? null : state.workflows.get(event.workflowId) ?? null };
}

/** Records an event's decision (or error) and updates `state` as its commit would. */
function settle({ index }, position, answer, entries, state, { now, decided }) {
  if (Object.hasOwn(answer, 'error')) {
    if (!ownError(answer.error)) throw answer.error;
    entries[position] = { index, error: answer.error, decided };
    return;
  }
  const { receipt, workflow } = answer.writeSet;
  if (receipt) state.receipts.set(receipt.eventId, { ...receipt, recordedAt: now });
  if (workflow) applySet(state, workflow.id, workflow.set);
  entries[position] = { index, decision: answer, decided };
}

/**
 * After a lost write, undone: finds what was lost (receipts now stored,
 * workflows no longer as read), re-reads the receipts and workflows of every
 * event that touches it, and decides those events again in order.
 */
async function decideLosersAgain(tx, valid, entries, stored, state, writes, how) {
  const inserted = writes.receipts.map((receipt) => receipt.eventId);
  const written = writes.workflows.map((write) => write.id);
  const receiptsNow = await tx.getReceipts(inserted, LATEST);
  const workflowsNow = await tx.getWorkflows(written, LATEST);
  const eventIds = new Set(inserted.filter((id) => receiptsNow.has(id)));
  const workflowIds = new Set(written.filter((id) => workflowMoved(stored.workflows.get(id), workflowsNow.get(id))));
  const positions = touching(valid, eventIds, workflowIds);
  if (positions.length === 0) return;
  // The keys those reads answered stand; only the others the losers touch are read.
  const receipts = await readRest(tx, 'getReceipts', eventIds, inserted, receiptsNow);
  const workflows = await readRest(tx, 'getWorkflows', workflowIds, written, workflowsNow);
  for (const [table, keys, fresh] of [['receipts', eventIds, receipts], ['workflows', workflowIds, workflows]]) {
    for (const key of keys) {
      if (fresh.has(key)) stored[table].set(key, fresh.get(key));
      else stored[table].delete(key);
      if (fresh.has(key)) state[table].set(key, fresh.get(key));
      else state[table].delete(key);
    }
  }
  decideSome(valid, positions, entries, state, how);
}

/** `read` (a map of what is stored now for the keys `done`) with the rest of `keys` read too. */
async function readRest(tx, many, keys, done, read) {
  const answered = new Set(done);
  const rest = [...keys].filter((key) => !answered.has(key));
  if (rest.length === 0) return read;
  return new Map([...read, ...await tx[many](rest, LATEST)]);
}

/**
 * The positions of the events whose event id or workflow is in the sets,
 * which grow to hold those events' own ids and workflows until no other
 * event shares one: only these events' decisions depended on what was lost.
 */
function touching(valid, eventIds, workflowIds) {
  for (let grew = true; grew;) {
    grew = false;
    for (const { event } of valid) {
      const hasEvent = eventIds.has(event.eventId);
      const hasWorkflow = workflowIds.has(event.workflowId);
      if (hasEvent !== hasWorkflow) {
        eventIds.add(event.eventId);
        workflowIds.add(event.workflowId);
        grew = true;
      }
    }
  }
  const positions = [];
  for (const [position, { event }] of valid.entries()) if (eventIds.has(event.eventId)) positions.push(position);
  return positions;
}

/** The writes of the batch's decisions: receipts and operations in order, one compare-and-set per workflow. */
function writesOf(entries, original, final, metadata) {
  const receipts = [];
  const operations = [];
  const expected = new Map();
  const operationIds = new Set();
  for (const { decision } of entries) {
    if (decision === undefined) continue;
    const { receipt, workflow, outbox } = decision.writeSet;
    if (receipt) receipts.push(receipt);
    if (workflow && !expected.has(workflow.id)) expected.set(workflow.id, workflow.expect ?? null);
    for (const operation of outbox) {
      // The same id twice: one by one, the second insert is OUTBOX_CONFLICT for its event.
      if (operationIds.has(operation.id)) {
        throw new IdemflowError('OUTBOX_CONFLICT', `outbox operation ${operation.id} is written twice in one batch`, {
          details: { operationId: operation.id, reason: 'twice-in-batch' },
        });
      }
      operationIds.add(operation.id);
      operations.push(metadata === null ? operation : { ...operation, metadata, traceContext: null });
    }
  }
  const workflows = [...expected].map(([id, expect]) => collapsed(id, expect, original.get(id) ?? null, final.get(id)));
  return { receipts, workflows, operations };
}

async function commit(tx, { receipts, workflows, operations }, now) {
  if (typeof tx.commitBatch === 'function') {
    await tx.commitBatch({ receipts, workflows, operations, now });
    return;
  }
  for (const receipt of receipts) await tx.insertReceipt(receipt);
  for (const write of workflows) await tx.writeWorkflow(write);
  for (const operation of operations) await tx.insertOperation(operation);
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
