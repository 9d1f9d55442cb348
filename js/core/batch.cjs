'use strict';
// Many deliveries, one transaction: the host loop of host.cjs for a batch.
// Each event is decided in delivery order against what the transaction has
// read and written so far, so a later event sees what an earlier one wrote
// (a second delivery of one event id is a duplicate, several events for one
// workflow apply one after another): the results and the stored state are
// those of processing the events one by one. Only the transaction is shared.

const { IdemflowError, Unreadable } = require('./errors.cjs');
const { messageOf, optionsOf } = require('./options.cjs');
const { resolveRuleSet } = require('./rules.cjs');
const { decideNormalized, decideNormalizedBatch, normalizeEvent } = require('./decide.cjs');
const { PROCESS_OPTIONS, afterLostRace, callDeadline, cyclesOf, hooksOf, metadataOf, noteLostRace, processChecked, resultOf } = require('./host.cjs');

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
async function processBatch(store, events, options) {
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'store must have a transaction(fn) method', { details: { reason: 'not a store' } });
  }
  const list = eventsOf(events);
  const opts = optionsOf(options, PROCESS_OPTIONS, 'processBatch');
  const ruleSet = resolveRuleSet(opts.ruleSet);
  const cycles = cyclesOf(opts, store);
  const metadata = metadataOf(opts.metadata);
  const { onRaceRetry } = hooksOf(opts.hooks);
  const deadlineAt = callDeadline(store);
  const transactionOptions = { ...BATCH, deadlineAt };
  const results = new Array(list.length);
  const valid = [];
  for (const [index, event] of list.entries()) {
    if (event instanceof Unreadable) {
      results[index] = { error: event.error };
      continue;
    }
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
      const outcome = await store.transaction((tx) => decideAll(tx, valid, ruleSet, clockOf(store), metadata, cycles, onRaceRetry), transactionOptions);
      for (const [index, result, decided] of outcome) results[index] = result.error === undefined ? { ...result, attempts: attempt - 1 + decided } : result;
      return results;
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      const raced = error.code === 'CONCURRENT_UPDATE';
      if (raced && attempt < cycles) {
        await afterLostRace(error, attempt, onRaceRetry, null, deadlineAt);
        continue;
      }
      if (raced || error.code === 'OUTBOX_CONFLICT') return oneByOne(store, valid, results, { ...opts, ruleSet }, deadlineAt);
      // The store itself failed: nothing was committed, and every event is to be redelivered.
      for (const { index } of valid) results[index] = { error };
      return results;
    }
  }
}

/**
 * The events of a batch as a plain array, read once: an array that cannot
 * be read (a revoked proxy, a throwing length) is INVALID_ARGUMENT; an
 * element whose read throws is an Unreadable holding that event's
 * INVALID_EVENT, and the others go on.
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
      list[i] = events[i];
    } catch (cause) {
      const reason = `cannot be read: ${messageOf(cause)}`;
      list[i] = new Unreadable(new IdemflowError('INVALID_EVENT', `event ${i} ${reason}`, { details: { reason, index: i }, cause }));
    }
  }
  return list;
}

/** What processBatch asks of a store's transaction: the isolation its locking reads need (MySQL: READ COMMITTED). */
const BATCH = Object.freeze({ batch: true });

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

/** Whether another transaction created, changed or removed a workflow since it was read (or it can no longer be read, or now can). */
function workflowMoved(before, after) {
  if (before === undefined || after === undefined || before instanceof Unreadable || after instanceof Unreadable) return before !== after;
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
  // The workflows first, locked in id order, then the receipts: every batch
  // takes its locks in the same order (workflows, receipts, operations;
  // commit), so batches over overlapping workflows queue instead of
  // deadlocking, and the receipts read after the locks see what a batch that
  // held them committed.
  const workflows = await readMany(tx, 'getWorkflows', 'getWorkflow', keysOf(valid, 'workflowId'), LOCKED);
  const stored = { receipts: await readMany(tx, 'getReceipts', 'getReceipt', keysOf(valid, 'eventId')), workflows };
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
    // An event whose record cannot be read has its error already; the core decides the rest.
    const readable = inputs.filter((input) => input.error === undefined);
    const answers = decideNormalizedBatch(how.ruleSet.compiled, readable);
    let k = 0;
    for (const [j, position] of first.entries()) {
      const answer = inputs[j].error === undefined ? answers[k++] : inputs[j];
      settle(valid[position], position, answer, entries, state, how);
    }
  } else {
    later.unshift(...first);
  }
  for (const position of later) {
    const { event } = valid[position];
    const input = inputOf(event, state);
    let answer = input;
    if (input.error === undefined) {
      try {
        answer = decideNormalized(how.ruleSet.compiled, event, input.receipt, input.workflow);
      } catch (error) {
        answer = { error };
      }
    }
    settle(valid[position], position, answer, entries, state, how);
  }
}

/**
 * What a decision of `event` reads: its receipt, and without one its
 * workflow; `{ error }` when the one it needs cannot be read (as
 * processEvent would fail on it, and on nothing else).
 */
function inputOf(event, state) {
  const receipt = state.receipts.get(event.eventId) ?? null;
  if (receipt instanceof Unreadable) return { error: receipt.error };
  if (receipt) return { event, receipt, workflow: null };
  const workflow = state.workflows.get(event.workflowId) ?? null;
  if (workflow instanceof Unreadable) return { error: workflow.error };
  return { event, receipt: null, workflow };
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
  const workflowsNow = await tx.getWorkflows(written, LOCKED);
  const receiptsNow = await tx.getReceipts(inserted);
  const eventIds = new Set(inserted.filter((id) => receiptsNow.has(id)));
  const workflowIds = new Set(written.filter((id) => workflowMoved(stored.workflows.get(id), workflowsNow.get(id))));
  const positions = touching(valid, eventIds, workflowIds);
  if (positions.length === 0) return;
  // The keys those reads answered stand; only the others the losers touch are read.
  const workflows = await readRest(tx, 'getWorkflows', workflowIds, written, workflowsNow, LOCKED);
  const receipts = await readRest(tx, 'getReceipts', eventIds, inserted, receiptsNow);
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
async function readRest(tx, many, keys, done, read, how) {
  const answered = new Set(done);
  const rest = [...keys].filter((key) => !answered.has(key));
  if (rest.length === 0) return read;
  return new Map([...read, ...await tx[many](rest, how)]);
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
  // Each kind in key order: the order every batch takes its locks in.
  receipts.sort((a, b) => compareKeys(a.eventId, b.eventId));
  workflows.sort(byId);
  operations.sort(byId);
  return { receipts, workflows, operations };
}

function compareKeys(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

function byId(a, b) {
  return compareKeys(a.id, b.id);
}

/** The batch's writes: workflows, receipts, operations (see writesOf), through commitBatch when the transaction has it. */
async function commit(tx, { receipts, workflows, operations }, now) {
  if (typeof tx.commitBatch === 'function') {
    await tx.commitBatch({ receipts, workflows, operations, now });
    return;
  }
  for (const write of workflows) await tx.writeWorkflow(write);
  for (const receipt of receipts) await tx.insertReceipt(receipt);
  for (const operation of operations) await tx.insertOperation(operation);
}

/**
 * key → record for the keys that exist, through `many` when the transaction
 * has it, else one read each; a record that cannot be read is an Unreadable
 * (see store/records.cjs).
 */
async function readMany(tx, many, one, keys, how) {
  if (typeof tx[many] === 'function') return how === undefined ? tx[many](keys) : tx[many](keys, how);
  const found = new Map();
  for (const key of keys) {
    let record;
    try {
      record = await tx[one](key);
    } catch (error) {
      if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
      record = new Unreadable(error);
    }
    if (record) found.set(key, record);
  }
  return found;
}

/**
 * The events of a batch that could not commit together, one transaction
 * each, within the batch's deadline. The first failure of the store itself
 * (STORE_UNAVAILABLE: an outage, or the time is up) ends it: the events not
 * yet decided answer that error, to be redelivered, and touch nothing.
 */
async function oneByOne(store, valid, results, opts, deadlineAt) {
  for (const [k, { index, event }] of valid.entries()) {
    try {
      results[index] = await processChecked(store, event, opts, deadlineAt);
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      results[index] = { error };
      if (error.code === 'STORE_UNAVAILABLE') {
        for (const rest of valid.slice(k + 1)) results[rest.index] = { error };
        return results;
      }
    }
  }
  return results;
}

module.exports = { processBatch, MAX_BATCH };
