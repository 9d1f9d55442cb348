'use strict';
// processBatch: the host cycle of event.cjs for many deliveries in one
// transaction. Each event is decided in delivery order against what the
// transaction has read and written so far, so a later event sees what an
// earlier one wrote (a second delivery of one event id is a duplicate,
// several events for one workflow apply one after another): the results and
// the stored state are those of processing the events one by one. Only the
// transaction is shared.

const { IdemflowError, Unreadable } = require('../core/errors.cjs');
const { messageOf } = require('../core/options.cjs');
const { decideNormalized, decideNormalizedBatch, normalizeEvent } = require('../core/decide.cjs');
const telemetry = require('../core/telemetry.cjs');
const { runApplied, splitOutput, withOriginalOutput } = require('./applied.cjs');
const { contractOf } = require('./contract.cjs');
const { afterLostRace, callOf, isLostRace, noteLostRace, resultOf } = require('./cycle.cjs');
const { processValid } = require('./event.cjs');

const MAX_BATCH = 10_000;
/** The batch's workflows are locked as they are read, in id order (see decideAll). */
const LOCKED = Object.freeze({ lock: true });

/**
 * An error of one event, raised before it wrote anything: the core refused it
 * (an unknown workflow, a reused event id), or a record it read cannot be
 * read. A lost race, the store's own failure and a fatal error are not one
 * event's: they end the batch's transaction.
 */
function ownError(error) {
  return (
    error instanceof IdemflowError &&
    error.code !== 'CONCURRENT_UPDATE' &&
    error.code !== 'STORE_UNAVAILABLE' &&
    error.disposition !== 'fatal'
  );
}

/** The store's failure or a lost race (the callback's database error, classified as the store's own). */
function storeFailure(error) {
  return error instanceof IdemflowError && (error.code === 'CONCURRENT_UPDATE' || error.code === 'STORE_UNAVAILABLE');
}

/**
 * A callback failed in a transaction that cannot undo one event's part
 * (no savepoints: memory, MongoDB): the batch's transaction rolls back and
 * its events run one transaction each.
 */
class EventsApart extends Error {}

/**
 * Processes `events` in one store transaction and returns one result per
 * event, in input order: `{ outcome, … }` as processEvent returns it, or
 * `{ error }` (an IdemflowError) for an event that was refused and wrote
 * nothing. An event the core rejects does not disturb the others.
 *
 * The batch locks its workflows as it reads them (in id order) and writes
 * workflows, receipts and operations each in key order, so batches over the
 * same workflows queue instead of deadlocking. Every write is guarded, so a
 * concurrent writer's commit (a receipt, a workflow created meanwhile) makes
 * a write fail instead of interleaving; in a SQL store the batch then rolls
 * back to a savepoint taken before its writes and, in the same transaction,
 * re-reads and re-decides only the events that touch what the winner
 * committed; the other decisions stand. Where that is not possible (no
 * savepoints, a deadlock, onApplied callbacks, a lost race that keeps
 * recurring) the whole batch runs again, up to raceRetries times; if it
 * still loses, or one event's write set cannot be committed
 * (OUTBOX_CONFLICT, WRITE_TOO_LARGE), the events run one transaction each, so that only the
 * events that keep failing answer with an error. A failure of the store
 * itself (STORE_UNAVAILABLE, a missing table) is every event's error. The
 * whole call ends within the store's timeoutMs.
 *
 * `onApplied(tx, decision)` runs for each applied event in delivery order
 * inside the batch's transaction; one that throws rolls back that event
 * alone (a savepoint per event, where the store has them; elsewhere the
 * events run one transaction each) and the event answers its error, but
 * for a lost race of its own statement (a deadlock, a serialization
 * failure: CONCURRENT_UPDATE), which runs the batch again as idemflow's own
 * lost races do.
 */
async function processBatch(store, events, options) {
  const call = callOf(store, options, 'processBatch');
  const list = eventsOf(events);
  const results = new Array(list.length);
  const valid = [];
  for (const [index, { event, error: unreadable }] of list.entries()) {
    if (unreadable !== undefined) {
      results[index] = { error: unreadable };
      continue;
    }
    try {
      valid.push({ index, event: normalizeEvent(event, { ruleSet: call.ruleSet, type: call.type }) });
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      results[index] = { error };
    }
  }
  if (valid.length === 0) return results;
  const run = telemetry.batchStarted({ store, ruleSet: call.ruleSet, size: list.length });
  try {
    await telemetry.inSpan(run, () => decideInTransactions(call, valid, results, run));
  } catch (error) {
    telemetry.batchFailed(run, error);
    throw error;
  }
  telemetry.batchEnded(run, valid, results);
  return results;
}

/** The batch's transaction, run again after a lost race, and its fallback: one transaction per event. */
async function decideInTransactions(call, valid, results, run) {
  const transactionOptions = { batch: true, deadlineAt: call.deadlineAt };
  const traceContext = run?.traceparent ?? null;
  for (let attempt = 1; ; attempt += 1) {
    try {
      const outcome = await call.store.transaction((tx) => decideAll(contractOf(tx), valid, call, traceContext, run), transactionOptions);
      for (const [index, result, decided] of outcome)
        results[index] = result.error === undefined ? { ...result, attempts: attempt - 1 + decided } : result;
      return;
    } catch (error) {
      if (error instanceof EventsApart) {
        await oneByOne(call, valid, results);
        return;
      }
      if (!(error instanceof IdemflowError)) throw error;
      if (isLostRace(error) && attempt < call.cycles) {
        await afterLostRace(error, attempt, call, run);
        continue;
      }
      if (isLostRace(error) || error.code === 'OUTBOX_CONFLICT' || error.code === 'WRITE_TOO_LARGE') {
        await oneByOne(call, valid, results);
        return;
      }
      // The store itself failed: nothing was committed, and every event is to be redelivered.
      for (const { index } of valid) results[index] = { error };
      return;
    }
  }
}

/**
 * The events of a batch as a plain array of `{ event }`, read once: an array
 * that cannot be read (a revoked proxy, a throwing length) is
 * INVALID_ARGUMENT; an element whose read throws is `{ error }`, that
 * event's INVALID_EVENT, and the others go on. An element is never looked
 * at here (an `instanceof` on a revoked proxy throws): the core's
 * validation answers it, as processEvent's does.
 */
function eventsOf(events) {
  let length;
  try {
    if (!Array.isArray(events)) {
      throw new IdemflowError('INVALID_ARGUMENT', 'processBatch takes an array of events', { details: { reason: 'not an array' } });
    }
    length = events.length;
  } catch (cause) {
    if (cause instanceof IdemflowError) throw cause;
    const reason = `the events cannot be read: ${messageOf(cause)}`;
    throw new IdemflowError('INVALID_ARGUMENT', reason, { details: { reason }, cause });
  }
  if (length > MAX_BATCH) {
    throw new IdemflowError('INVALID_ARGUMENT', `a batch holds at most ${MAX_BATCH} events, not ${length}`, {
      details: { reason: 'batch too large', limit: MAX_BATCH },
    });
  }
  const list = new Array(length);
  for (let i = 0; i < length; i += 1) {
    try {
      list[i] = { event: events[i] };
    } catch (cause) {
      const reason = `cannot be read: ${messageOf(cause)}`;
      list[i] = { error: new IdemflowError('INVALID_EVENT', `event ${i} ${reason}`, { details: { reason, index: i }, cause }) };
    }
  }
  return list;
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
  return (
    error instanceof IdemflowError &&
    error.code === 'CONCURRENT_UPDATE' &&
    ['receipt-exists', 'workflow-exists', 'workflow-changed'].includes(error.details?.reason)
  );
}

/** Whether another transaction created, changed or removed a workflow since it was read (or it can no longer be read, or now can). */
function workflowMoved(before, after) {
  if (before === undefined || after === undefined || before instanceof Unreadable || after instanceof Unreadable) return before !== after;
  return before.status !== after.status || before.revision !== after.revision;
}

/**
 * Inside one transaction: reads every workflow (locked, in id order) and
 * receipt the batch names at once, decides each event in order against
 * those copies (each decision updates them as its commit would), runs the
 * host's onApplied for each applied event, and commits the writes of all the
 * decisions together: one compare-and-set per workflow, the receipts, the
 * operations. [index, result, decided] per valid event, `decided` being how
 * often it was decided.
 *
 * A write lost to another transaction (see lostWrite) rolls back to a
 * savepoint taken before the writes, where the transaction has one (and no
 * callback ran: their writes would be undone too): the receipts and
 * workflows the writes expected are read again to find the losers; the
 * events on them (and every event that shares an event id or a workflow
 * with those, and so on) are read again and decided again in order; the
 * other events' decisions stand; and the writes are made again, up to
 * `call.cycles` times in all, in the same transaction.
 */
async function decideAll(tx, valid, call, traceContext, run) {
  // One time for the whole batch: the receipts are stamped with it, and a
  // duplicate within the batch reads it back as its original's decidedAt.
  const now = clockOf(call.store)();
  // The workflows first, locked in id order, then the receipts: every batch
  // takes its locks in the same order (workflows, receipts, operations;
  // commit), so batches over overlapping workflows queue instead of
  // deadlocking, and the receipts read after the locks see what a batch that
  // held them committed.
  const workflows = await tx.getWorkflows(keysOf(valid, 'workflowId'), LOCKED);
  const stored = { receipts: await tx.getReceipts(keysOf(valid, 'eventId')), workflows };
  const state = { receipts: new Map(stored.receipts), workflows: new Map(stored.workflows), copies: new Set() };
  const entries = new Array(valid.length);
  const how = { ruleSet: call.ruleSet, now, decided: 1, onApplied: call.onApplied, tx, stored };
  await decideSome(valid, valid.keys(), entries, state, how);
  const undoable = tx.savepoints && call.onApplied === undefined;
  if (undoable) await tx.savepoint('batch');
  for (let round = 1; ; round += 1) {
    const writes = writesOf(entries, stored.workflows, state.workflows, call.metadata, traceContext);
    try {
      await tx.commitBatch({ ...writes, now });
      return entries.map(({ index, result, error, decided }) => [index, error === undefined ? result : { error }, decided]);
    } catch (error) {
      if (!undoable || !lostWrite(error) || round >= call.cycles) throw error;
      noteLostRace(error, round, call.onRaceRetry, run);
      await tx.rollbackToSavepoint('batch');
      await decideLosersAgain(tx, valid, entries, stored, state, writes, { ...how, decided: round + 1 });
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
 * With onApplied, each applied event's callback runs in delivery order
 * before its decision counts, so an event after one whose callback failed
 * decides on the state without it, as one by one.
 */
async function decideSome(valid, positions, entries, state, how) {
  const eventIds = new Set();
  const workflowIds = new Set();
  const ordered = [...positions];
  const first = [];
  for (const position of ordered) {
    const { eventId, workflowId } = valid[position].event;
    if (!eventIds.has(eventId) && !workflowIds.has(workflowId)) first.push(position);
    eventIds.add(eventId);
    workflowIds.add(workflowId);
  }
  const early = new Map();
  if (first.length > 1) {
    const inputs = first.map((position) => inputOf(valid[position].event, state));
    // An event whose record cannot be read has its error already; the core decides the rest.
    const answers = decideNormalizedBatch(
      how.ruleSet.compiled,
      inputs.filter((input) => input.error === undefined),
    );
    let k = 0;
    for (const [j, position] of first.entries()) early.set(position, inputs[j].error === undefined ? answers[k++] : inputs[j]);
  }
  for (const position of ordered) {
    let answer = early.get(position);
    if (answer === undefined) {
      const input = inputOf(valid[position].event, state);
      answer = input;
      if (input.error === undefined) {
        try {
          answer = decideNormalized(how.ruleSet.compiled, input.event, input.receipt, input.workflow);
        } catch (error) {
          answer = { error };
        }
      }
    }
    if (how.onApplied !== undefined && answer.outcome === 'applied') answer = await withCallback(valid[position], answer, how);
    settle(valid[position], position, answer, entries, state, how);
  }
}

/**
 * The host's onApplied for an applied decision, in a savepoint of its own
 * where the transaction has them: a callback that throws undoes its writes
 * alone and the event answers its error. Without savepoints the batch's
 * transaction cannot undo one event's part: its events run one by one.
 */
async function withCallback({ event }, decision, { onApplied, tx, now }) {
  const view = { ...resultOf(decision), fingerprint: decision.fingerprint, event };
  // A workflow the event creates is written before its callback runs, as processEvent writes it:
  // a batch and a single delivery of the event then take their locks in one order (the workflow,
  // then the host's rows), so they queue instead of deadlocking. Its failure (the workflow was
  // created meanwhile) is a lost race of the batch's, not the callback's.
  const creates = decision.writeSet.workflow?.expect === null;
  const create = () => tx.commitBatch({ receipts: [], workflows: [decision.writeSet.workflow], operations: [], now });
  const written = creates ? { workflowWritten: true } : {};
  if (!tx.savepoints) {
    if (creates) await create();
    try {
      return { ...decision, ...written, output: await runApplied(onApplied, tx, view) };
    } catch {
      throw new EventsApart();
    }
  }
  await tx.savepoint('event');
  if (creates) await create();
  try {
    const output = await runApplied(onApplied, tx, view);
    await tx.releaseSavepoint('event');
    return { ...decision, ...written, output };
  } catch (error) {
    try {
      await tx.rollbackToSavepoint('event');
      await tx.releaseSavepoint('event');
    } catch (undo) {
      // The transaction itself is gone (a lost connection; MySQL's deadlock rolls it all back): a
      // database error of the callback's own ends the batch's transaction, as the store's would.
      throw storeFailure(error) ? error : undo;
    }
    // A lost race of the callback's own statement (a deadlock, a serialization failure) is the
    // batch's, as one of idemflow's statements would be: the batch runs again (processEvent's cycle does).
    if (isLostRace(error)) throw error;
    return { error, callback: true };
  }
}

/**
 * What a decision of `event` reads: its receipt, and without one its
 * workflow; `{ error }` when the one it needs cannot be read (as
 * processEvent would fail on it, and on nothing else).
 */
function inputOf(event, state) {
  const stored = state.receipts.get(event.eventId) ?? null;
  if (stored instanceof Unreadable) return { error: stored.error };
  if (stored) return { event, receipt: splitOutput(stored).receipt, workflow: null };
  const workflow = state.workflows.get(event.workflowId) ?? null;
  if (workflow instanceof Unreadable) return { error: workflow.error };
  return { event, receipt: null, workflow };
}

/** Records an event's decision (or error) and its result, and updates `state` as its commit would. */
function settle({ index, event }, position, answer, entries, state, { now, decided, stored }) {
  if (Object.hasOwn(answer, 'error')) {
    // A callback's error is its event's whatever it is; the core's and the store's are the batch's unless ownError.
    if (!answer.callback && !ownError(answer.error)) throw answer.error;
    entries[position] = { index, error: answer.error, decided };
    return;
  }
  const { receipt, workflow } = answer.writeSet;
  const withOutput =
    answer.output === undefined || !receipt ? receipt : { ...receipt, result: { ...receipt.result, output: answer.output } };
  if (withOutput) state.receipts.set(withOutput.eventId, { ...withOutput, recordedAt: now });
  if (workflow) applySet(state, workflow.id, workflow.set);
  // Written already (withCallback): the batch's write of it, if a later event changes it, compares against this.
  if (answer.workflowWritten) stored.workflows.set(workflow.id, { ...state.workflows.get(workflow.id) });
  let result = { ...resultOf(answer), fingerprint: answer.fingerprint };
  if (answer.outcome === 'duplicate-delivery') result = withOriginalOutput(result, splitOutput(state.receipts.get(event.eventId)).output);
  if (answer.output !== undefined) result.output = answer.output;
  entries[position] = {
    index,
    decision: withOutput === receipt ? answer : { ...answer, writeSet: { ...answer.writeSet, receipt: withOutput } },
    result,
    decided,
  };
}

/**
 * After a lost write, undone: finds what was lost (receipts now stored,
 * workflows no longer as read), re-reads the workflows (locked) and
 * receipts of every event that touches it, and decides those events again in order.
 */
async function decideLosersAgain(tx, valid, entries, stored, state, writes, how) {
  const inserted = writes.receipts.map((receipt) => receipt.eventId);
  const written = writes.workflows.map((write) => write.id);
  const workflowsNow = await tx.getWorkflows(written, LOCKED);
  const receiptsNow = await tx.getReceipts(inserted);
  const eventIds = new Set(inserted.filter((id) => receiptsNow.has(id)));
  const workflowIds = new Set(written.filter((id) => workflowMoved(stored.workflows.get(id), workflowsNow.get(id))));
  const positions = touching(valid, eventIds, workflowIds);
  if (positions.length === 0) return;
  // The keys those reads answered stand; only the others the losers touch are read.
  const workflows = await readRest(tx, 'getWorkflows', workflowIds, written, workflowsNow, LOCKED);
  const receipts = await readRest(tx, 'getReceipts', eventIds, inserted, receiptsNow);
  for (const [table, keys, fresh] of [
    ['receipts', eventIds, receipts],
    ['workflows', workflowIds, workflows],
  ]) {
    for (const key of keys) {
      if (fresh.has(key)) stored[table].set(key, fresh.get(key));
      else stored[table].delete(key);
      if (fresh.has(key)) state[table].set(key, fresh.get(key));
      else state[table].delete(key);
    }
  }
  await decideSome(valid, positions, entries, state, how);
}

/** `read` (a map of what is stored now for the keys `done`) with the rest of `keys` read too. */
async function readRest(tx, many, keys, done, read, how) {
  const answered = new Set(done);
  const rest = [...keys].filter((key) => !answered.has(key));
  if (rest.length === 0) return read;
  return new Map([...read, ...(await tx[many](rest, how))]);
}

/**
 * The positions of the events whose event id or workflow is in the sets,
 * which grow to hold those events' own ids and workflows until no other
 * event shares one: only these events' decisions depended on what was lost.
 */
function touching(valid, eventIds, workflowIds) {
  for (let grew = true; grew; ) {
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

function compareKeys(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

function byId(a, b) {
  return compareKeys(a.id, b.id);
}

/**
 * The writes of the batch's decisions: one compare-and-set per workflow, the
 * receipts and the operations (with the host's metadata and the batch's
 * trace context), each in key order: the order every batch takes its locks in.
 */
function writesOf(entries, original, final, metadata, traceContext) {
  const receipts = [];
  const operations = [];
  const expected = new Map();
  const operationIds = new Set();
  const correlated = metadata !== null || traceContext !== null;
  for (const { decision } of entries) {
    if (decision === undefined) continue;
    const { receipt, workflow, outbox } = decision.writeSet;
    if (receipt) receipts.push(receipt);
    if (workflow && !decision.workflowWritten && !expected.has(workflow.id)) expected.set(workflow.id, workflow.expect ?? null);
    for (const operation of outbox) {
      // Written only if absent (an untracked fact's), the second of one id writes nothing.
      if (operation.ifAbsent === true && operationIds.has(operation.id)) continue;
      // The same id twice: one by one, the second insert is OUTBOX_CONFLICT for its event.
      if (operationIds.has(operation.id)) {
        throw new IdemflowError('OUTBOX_CONFLICT', `outbox operation ${operation.id} is written twice in one batch`, {
          details: { operationId: operation.id, reason: 'twice-in-batch' },
        });
      }
      operationIds.add(operation.id);
      operations.push(correlated ? { ...operation, metadata, traceContext } : operation);
    }
  }
  const workflows = [...expected].map(([id, expect]) => collapsed(id, expect, original.get(id) ?? null, final.get(id)));
  receipts.sort((a, b) => compareKeys(a.eventId, b.eventId));
  workflows.sort(byId);
  operations.sort(byId);
  return { receipts, workflows, operations };
}

/**
 * The events of a batch that could not commit together, one transaction
 * each, within the batch's deadline. The first failure of the store itself
 * (STORE_UNAVAILABLE: an outage, or the time is up) ends it: the events not
 * yet decided answer that error, to be redelivered, and touch nothing.
 */
async function oneByOne(call, valid, results) {
  for (const [k, { index, event }] of valid.entries()) {
    try {
      results[index] = await processValid(call, event);
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      results[index] = { error };
      if (error.code === 'STORE_UNAVAILABLE') {
        for (const rest of valid.slice(k + 1)) results[rest.index] = { error };
        return;
      }
    }
  }
}

module.exports = { processBatch };
