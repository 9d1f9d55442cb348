// The reorder property of test/reorder.test.mjs (issue 8): random histories
// of one swap whose workflow starts in `waiting`, delivered in random orders
// with duplicates, re-publications and retry-redelivery, end where the same
// history delivered in order ends. This module is the model and the property;
// run as a worker thread (workerData.task 'reorder-property') it checks the
// property over one store and posts what it found. A worker, because the
// test runner's promise tracking in the test's own thread costs about a
// third of the run, and the two stores can then run side by side.
//
// The model, read from the `order` section of deposit-swap v2 rather than
// restated here:
// - A history is what the producers publish for one swap: for each event type
//   up to two publications (a second one is a re-publication: same content,
//   new event id), each delivered once or twice (a duplicate: the same event
//   id again). An event type that `follows` another event type (a confirmation
//   or a reversal follows the detection of its deposit) is only in histories
//   that hold that type, and is published after its first publication. An
//   event type that `follows` an operation (EXCHANGE_COMPLETED after
//   START_EXCHANGE, PAYOUT_CONFIRMED after SEND_PAYOUT) is published by the
//   test only once that operation is in the store's outbox, as the exchange or
//   the payout provider would; until then it does not exist.
// - The shuffled delivery is a queue in a random order; a published answer
//   lands at a random place in what is left of it, and an answer with
//   disposition `retry` puts the event at the back. In some cases the host
//   stores the workflow only after a few deliveries, so early events are
//   answered UNKNOWN_WORKFLOW (retry) and come round again: that keeps the
//   retry path of the model exercised (with the workflow stored first,
//   deposit-swap answers nothing with retry).
// - The in-order delivery is a FIFO queue in producer order, answers appended
//   when published, retries appended too.
// - The end state compared: status, the recorded fields, the set of outbox
//   operation ids (their templates: the ids embed the workflow id), the
//   multiset of event types answered with a final error (any disposition but
//   retry),
//   and the events left undelivered after a generous step bound (an event
//   deferred forever). Not the revision: absorbing an overtaken event reaches
//   the same state in fewer transitions (a confirmation in `waiting` goes
//   straight to `exchange`), so the count of transitions is not part of the
//   outcome. Per event, the shuffled delivery must never get an error with
//   disposition reconcile or reject that the in-order delivery did not give
//   that same event.
//
// Declared races. Where the history holds both types of a declared racing pair
// (the deadline against the deposit, the reversal against the money moving on)
// the order the swap saw them in is the meaning, so the shuffled delivery is
// compared with the in-order delivery that saw each racing pair in the same
// order, and only with it. ("Saw" means answered with anything but retry: a
// deferred event did not reach the workflow.) That reference is the FIFO above
// with one change: the first event of a racing type waits while a racing
// partner that the shuffled delivery saw before it has not been seen yet (the
// in-order queue skips ahead to the next event that may go). Only first events
// are held: a race is decided by which type the swap saw first, as in the
// verifier's model (it keys races on the first delivery of each type); what
// later copies do after that is part of what the property checks.
// One refinement makes that reference exist. A type that others follow is
// implied by them: a confirmation or a reversal seen before its detection
// means the swap learned of the deposit then. So the race position of
// DEPOSIT_DETECTED is the first time any of DEPOSIT_DETECTED,
// DEPOSIT_CONFIRMED, DEPOSIT_REVERSED was seen. Without it, the shuffled order
// confirmation, deadline, detection would ask the reference for "deadline
// before detection" and "confirmation before deadline", while the producer
// order puts the detection before the confirmation: no in-order delivery
// satisfies all three. With it, every racing pair is ordered by one ranking
// that also respects `follows`, so the reference is always a producer-order
// delivery. It can still get stuck only on an answer that is not published yet
// (the shuffled delivery saw EXCHANGE_COMPLETED before a reversal, but the
// in-order one never emitted START_EXCHANGE): that is reported as a
// difference, it means the orders did not reach the same operations.
import fs from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import fc from 'fast-check';
import { IdemflowError, InMemoryStore, RuleSet, processEvent } from 'idemflow';
import { openStore, tablesFor, tempDir, uniquePrefix } from './backends.mjs';
import { WATCHED_TYPES } from './fixtures.mjs';

export const V2 = RuleSet.builtin('deposit-swap');
export const V1 = RuleSet.builtin('deposit-swap', { version: 1 });
const definition = V2.definition();

// ---- What the rule set declares ---------------------------------------------

export const EVENT_TYPES = definition.events.map((e) => e.type);
const FIELDS = Object.fromEntries(definition.events.map((e) => [e.type, e.fields]));
/** Event type → the event types it follows (and so implies). */
export const FOLLOWS = {};
/** Event type → the operation type it answers (published once that operation exists). */
export const ANSWERS = {};
for (const f of definition.order.follows) {
  if (EVENT_TYPES.includes(f.after)) (FOLLOWS[f.event] ??= []).push(f.after);
  else ANSWERS[f.event] = f.after;
}
const sides = (x) => (Array.isArray(x) ? x : [x]);
/** Declared racing pairs of event types. */
export const RACES = definition.order.races.flatMap(({ between: [a, b] }) => sides(a).flatMap((x) => sides(b).map((y) => [x, y])));
/** Operation type → its id template, from the rules' emits (v1 emits the same operations). */
export const OPERATION_ID = {};
for (const rule of definition.rules) for (const emit of rule.then?.emit ?? []) OPERATION_ID[emit.type] = emit.id;
const operationId = (type, workflowId) => OPERATION_ID[type].replaceAll('{workflowId}', workflowId);

// Every event of a history speaks of the same facts: other values are the guards' business.
const FACTS = { depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000', payoutUnits: '4100000000', payoutRef: 'payout-9' };

const MAX_PUBLICATIONS = 2;
const MAX_STEPS = 200;
const EXTERNAL_TYPES = EVENT_TYPES.filter((t) => !ANSWERS[t]);
const MAX_EXTERNAL_MESSAGES = EXTERNAL_TYPES.length * MAX_PUBLICATIONS * 2;
const MAX_ANSWER_MESSAGES = Object.keys(ANSWERS).length * MAX_PUBLICATIONS * 2;

// ---- Histories and delivery plans ---------------------------------------------

// One publication: when its producer published it (relative to what it follows),
// and whether the broker delivers it a second time (how much later).
const publication = fc.record({ at: fc.nat(20), duplicateAfter: fc.option(fc.nat(20), { nil: null, freq: 3 }) });

const historyArbitrary = fc
  .record(Object.fromEntries(EVENT_TYPES.map((t) => [t, fc.array(publication, { maxLength: MAX_PUBLICATIONS })])))
  .map(buildHistory)
  .filter((h) => h.external.length > 0);

/**
 * Messages in producer order: `external` (the chain watcher's and the
 * timer's) and `answers` per answering type (published when their operation
 * appears). A message is `{ local, type, at }`; `local` names the event id
 * within one delivery (a duplicate shares it).
 */
function buildHistory(publications) {
  const firstAt = {};
  const messages = [];
  // Types that follow another type come after it, so their base time is known.
  const types = [...EVENT_TYPES].sort((a, b) => (FOLLOWS[a] ? 1 : 0) - (FOLLOWS[b] ? 1 : 0));
  for (const type of types) {
    let base = 0;
    if (FOLLOWS[type]) {
      const befores = FOLLOWS[type].map((t) => firstAt[t]);
      if (befores.some((at) => at === undefined)) continue; // no detection, so no confirmation or reversal
      base = Math.max(...befores) + 1;
    }
    publications[type].forEach((p, copy) => {
      const local = `${type}#${copy + 1}`;
      const at = base + p.at;
      firstAt[type] = Math.min(firstAt[type] ?? Infinity, at);
      messages.push({ local, type, at });
      if (p.duplicateAfter !== null) messages.push({ local, type, at: at + 1 + p.duplicateAfter });
    });
  }
  const rank = (m) => [m.at, EVENT_TYPES.indexOf(m.type), m.local];
  messages.sort((a, b) => {
    const [x, y] = [rank(a), rank(b)];
    for (let i = 0; i < x.length; i += 1) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  });
  // The chain watcher numbers its observations of the deposit in the order it first published them;
  // a type's other publications (new event ids, duplicates) are the same observation, the same number.
  const watched = [...new Set(messages.map((m) => m.type).filter((t) => WATCHED_TYPES.includes(t)))];
  for (const m of messages) if (watched.includes(m.type)) m.sequence = watched.indexOf(m.type) + 1;
  const answers = Object.fromEntries(Object.keys(ANSWERS).map((t) => [t, messages.filter((m) => m.type === t)]));
  return { external: messages.filter((m) => !ANSWERS[m.type]), answers };
}

// How the broker shuffles: a key per external message (the queue is sorted by
// it), where each published answer lands in what is left of the queue, and
// after how many deliveries the host stores the workflow. All shrink towards
// producer order, answers delivered at once, the workflow stored first.
const planArbitrary = fc.record({
  keys: fc.array(fc.nat(1000), { minLength: MAX_EXTERNAL_MESSAGES, maxLength: MAX_EXTERNAL_MESSAGES }),
  inserts: fc.array(fc.nat(1000), { minLength: MAX_ANSWER_MESSAGES, maxLength: MAX_ANSWER_MESSAGES }),
  storedAfter: fc.nat(9).map((n) => Math.max(0, n - 6)),
});

// ---- Delivering -----------------------------------------------------------------

/** One delivery of a history to one workflow: its answers, and what it saw first. */
class Delivery {
  constructor(store, ruleSet, workflowId, history) {
    Object.assign(this, { store, ruleSet, workflowId, history });
    this.trace = [];
    /** Event type → how many events the workflow had seen when it first saw one of that type. */
    this.firstSeen = new Map();
    this.seen = 0;
    this.steps = 0;
    this.retries = 0;
    this.published = new Set();
    this.stored = false;
    this.stuck = false;
  }

  async storeWorkflow() {
    await this.store.putWorkflow({ id: this.workflowId, status: 'waiting', revision: 1 });
    this.stored = true;
  }

  event(message) {
    const fields = Object.fromEntries(FIELDS[message.type].map((f) => [f, FACTS[f]]));
    const sequence = message.sequence === undefined ? {} : { sequence: message.sequence };
    return { eventId: `${this.workflowId}/${message.local}`, workflowId: this.workflowId, type: message.type, ...fields, ...sequence };
  }

  /** Delivers one message: `{ retry, published }`, the answer messages it made exist. */
  async deliver(message) {
    this.steps += 1;
    let answer;
    let emitted = false;
    try {
      const result = await processEvent(this.store, this.event(message), { ruleSet: this.ruleSet });
      answer = { outcome: result.outcome };
      emitted = result.outcome === 'applied' && result.operationIds.length > 0;
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      answer = { code: error.code, disposition: error.disposition };
    }
    this.trace.push({ local: message.local, type: message.type, ...answer });
    const retry = answer.disposition === 'retry';
    if (retry) {
      this.retries += 1;
    } else {
      if (!this.firstSeen.has(message.type)) this.firstSeen.set(message.type, this.seen);
      this.seen += 1;
    }
    const published = [];
    // The outbox is the truth; it is read when the host says it added to it.
    if (emitted) {
      for (const [type, operationType] of Object.entries(ANSWERS)) {
        if (this.published.has(type)) continue;
        if (await this.store.getOperation(operationId(operationType, this.workflowId))) {
          this.published.add(type);
          published.push(...this.history.answers[type]);
        }
      }
    }
    return { retry, published };
  }

  /** The end state compared between deliveries. */
  async end(undelivered) {
    const { id, status, revision, ...recorded } = (await this.store.getWorkflow(this.workflowId)) ?? {};
    const operations = [];
    for (const [type, template] of Object.entries(OPERATION_ID)) {
      if (await this.store.getOperation(operationId(type, this.workflowId))) operations.push(template);
    }
    const finalError = (a) => a.code !== undefined && a.disposition !== 'retry';
    return {
      status,
      recorded,
      operations: operations.sort(),
      answeredWithError: this.trace.filter(finalError).map((a) => a.type).sort(),
      undelivered: undelivered.map((m) => m.local).sort(),
    };
  }
}

async function deliverShuffled(store, ruleSet, workflowId, history, plan) {
  const run = new Delivery(store, ruleSet, workflowId, history);
  const queue = history.external
    .map((message, i) => ({ message, key: plan.keys[i] }))
    .sort((a, b) => a.key - b.key)
    .map((x) => x.message);
  let inserted = 0;
  while (queue.length > 0 && run.steps < MAX_STEPS) {
    if (!run.stored && run.steps >= plan.storedAfter) await run.storeWorkflow();
    const message = queue.shift();
    const { retry, published } = await run.deliver(message);
    if (retry) queue.push(message);
    for (const answer of published) {
      queue.splice(plan.inserts[inserted % plan.inserts.length] % (queue.length + 1), 0, answer);
      inserted += 1;
    }
  }
  if (!run.stored) await run.storeWorkflow(); // only an empty history ends before its workflow exists
  return { run, end: await run.end(queue) };
}

/**
 * The race position of each type in a delivery: when the workflow first saw
 * it or a type that implies it (see the header). Infinity: never seen.
 */
export function racePositions(firstSeen) {
  const positions = new Map();
  for (const type of EVENT_TYPES) {
    const implying = EVENT_TYPES.filter((t) => t === type || FOLLOWS[t]?.includes(type));
    positions.set(type, Math.min(...implying.map((t) => firstSeen.get(t) ?? Infinity)));
  }
  return positions;
}

/** May the in-order delivery deliver this message now, given the race outcomes it must reproduce? */
function mayGo(run, message, positions, races) {
  if ((FOLLOWS[message.type] ?? []).some((t) => !run.firstSeen.has(t))) return false;
  if (run.firstSeen.has(message.type)) return true;
  return races.every(([a, b]) => {
    const partner = a === message.type ? b : b === message.type ? a : null;
    return partner === null || run.firstSeen.has(partner) || !(positions.get(partner) < positions.get(message.type));
  });
}

async function deliverInOrder(store, ruleSet, workflowId, history, positions, races) {
  const run = new Delivery(store, ruleSet, workflowId, history);
  await run.storeWorkflow();
  const pending = [...history.external];
  while (pending.length > 0 && run.steps < MAX_STEPS) {
    let index = pending.findIndex((m) => mayGo(run, m, positions, races));
    if (index < 0) {
      run.stuck = true;
      index = 0;
    }
    const [message] = pending.splice(index, 1);
    const { retry, published } = await run.deliver(message);
    if (retry) pending.push(message);
    pending.push(...published);
  }
  return { run, end: await run.end(pending) };
}

// ---- The property -----------------------------------------------------------------

function differences(shuffled, inOrder) {
  const problems = [];
  for (const key of ['status', 'recorded', 'operations', 'answeredWithError', 'undelivered']) {
    if (!isDeepStrictEqual(shuffled.end[key], inOrder.end[key])) {
      problems.push(`${key}: shuffled ${JSON.stringify(shuffled.end[key])}, in order ${JSON.stringify(inOrder.end[key])}`);
    }
  }
  if (inOrder.run.stuck) problems.push('the in-order delivery could not see the racing events in the order the shuffled one did');
  const inOrderErrors = new Set(inOrder.run.trace.filter((a) => a.code).map((a) => `${a.local} ${a.code}`));
  for (const a of shuffled.run.trace) {
    if ((a.disposition === 'reconcile' || a.disposition === 'reject') && !inOrderErrors.has(`${a.local} ${a.code}`)) {
      problems.push(`${a.local} answered ${a.code} (${a.disposition}) only when shuffled`);
    }
  }
  return problems;
}

export const describeTrace = (run) =>
  run.trace.map((a) => `${a.local} → ${a.outcome ?? `${a.code} (${a.disposition})`}`).join(', ');

/** The first events of a follower type seen before the first of the type it follows. */
export function overtakings(run) {
  const out = [];
  for (const [type, befores] of Object.entries(FOLLOWS)) {
    for (const before of befores) {
      if (run.firstSeen.has(type) && !(run.firstSeen.get(before) < run.firstSeen.get(type))) out.push(`${type} before ${before}`);
    }
  }
  return out;
}

let swaps = 0;

/**
 * Delivers one case both ways in `store`; `{ shuffled, inOrder, problems }`.
 * `races`: the racing pairs the in-order delivery reproduces (the declared ones).
 */
export async function runCase(store, ruleSet, history, plan, races = RACES) {
  swaps += 1;
  const id = `swap-${process.pid}-${swaps}`;
  const shuffled = await deliverShuffled(store, ruleSet, id, history, plan);
  const inOrder = await deliverInOrder(store, ruleSet, `${id}-in-order`, history, racePositions(shuffled.run.firstSeen), races);
  return { shuffled, inOrder, problems: differences(shuffled, inOrder) };
}

export function reorderProperty(store, ruleSet, { coverage, races } = {}) {
  return fc.asyncProperty(historyArbitrary, planArbitrary, async (history, plan) => {
    const { shuffled, inOrder, problems } = await runCase(store, ruleSet, history, plan, races);
    coverage?.count(shuffled, inOrder);
    if (problems.length > 0) {
      throw new Error([
        ...problems,
        `shuffled: ${describeTrace(shuffled.run)}`,
        `in order: ${describeTrace(inOrder.run)}`,
      ].join('\n'));
    }
  });
}

/** What the cases exercised (the test checks that a drifted generator still exercises it). */
export class Coverage {
  cases = 0;
  overtaken = 0;
  retried = 0;
  duplicates = 0;
  racesDecidedByDeadline = 0;
  ends = {};

  count(shuffled) {
    this.cases += 1;
    if (overtakings(shuffled.run).length > 0) this.overtaken += 1;
    if (shuffled.run.retries > 0) this.retried += 1;
    if (shuffled.run.trace.some((a) => a.outcome === 'duplicate-delivery')) this.duplicates += 1;
    const positions = racePositions(shuffled.run.firstSeen);
    if (positions.get('DEADLINE_PASSED') < positions.get('DEPOSIT_DETECTED')) this.racesDecidedByDeadline += 1;
    this.ends[shuffled.end.status] = (this.ends[shuffled.end.status] ?? 0) + 1;
  }
}

/**
 * Checks the property over deposit-swap v2 in one store: `{ error, coverage,
 * seconds }`, error being fast-check's report (seed, path, counterexample)
 * or null.
 */
export async function checkStore(kind, { runs, seed }) {
  const started = performance.now();
  let store;
  let close = async () => {};
  if (kind === 'memory') {
    store = new InMemoryStore();
  } else {
    // One file for all cases, each on its own workflow ids; nothing here is about durability.
    const dir = tempDir('reorder');
    const sqliteOnly = kind.startsWith('sqlite') ? { synchronous: 'OFF' } : {}; // the server stores refuse a SQLite pragma
    const opened = await openStore(kind, { tables: tablesFor(uniquePrefix()), file: path.join(dir, 'reorder.db'), ...sqliteOnly });
    store = opened.store;
    close = async () => {
      await opened.close();
      fs.rmSync(dir, { recursive: true, force: true });
    };
    await store.migrate();
  }
  const coverage = new Coverage();
  let error = null;
  try {
    await fc.assert(reorderProperty(store, V2, { coverage }), { numRuns: runs, seed, includeErrorInReport: true });
  } catch (failure) {
    error = failure instanceof Error ? failure.message : String(failure);
  } finally {
    await close();
  }
  return { error, coverage: { ...coverage }, seconds: (performance.now() - started) / 1000 };
}

if (!isMainThread && workerData?.task === 'reorder-property') {
  parentPort.postMessage(await checkStore(workerData.kind, workerData));
}
