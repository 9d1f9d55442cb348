// The reorder property of test/reorder.test.mjs (issues 8 and 21): random
// histories of one swap whose workflow starts in `waiting`, delivered in
// random orders with duplicates, re-publications and retry-redelivery, end
// where the same history delivered in order ends. The histories are a
// model's (./reorder-models.mjs: deposit-swap v3's numbered chains, or v2's
// one kind per type); this module delivers them and is the property. Run as a
// worker thread (workerData.task 'reorder-property') it checks the property
// over one store and posts what it found. A worker, because the test
// runner's promise tracking in the test's own thread costs about a third of
// the run, and the two stores can then run side by side.
//
// - A history is what the producers publish for one swap, as messages of
//   kinds (an observation of the chain, or an event type): a kind's
//   publications are new event ids, each delivered once or twice (a
//   duplicate: the same event id again). An event type that `follows` an
//   operation (EXCHANGE_COMPLETED after START_EXCHANGE, PAYOUT_CONFIRMED
//   after SEND_PAYOUT) is published by the test only once that operation is
//   in the store's outbox, as the exchange or the payout provider would;
//   until then it does not exist.
// - The shuffled delivery is a queue in a random order; a published answer
//   lands at a random place in what is left of it, and an answer with
//   disposition `retry` puts the event at the back. In some cases the host
//   stores the workflow only after a few deliveries, so early events are
//   answered UNKNOWN_WORKFLOW (retry) and come round again: that keeps the
//   retry path exercised (with the workflow stored first, deposit-swap
//   answers nothing with retry).
// - The in-order delivery is a FIFO queue in producer order, answers appended
//   when published, retries appended too.
// - The end state compared: status, the recorded fields (v3's recorded
//   `sequence` among them), the set of outbox operation ids (their
//   templates: the ids embed the workflow id), the multiset of event types
//   answered with a final error (any disposition but retry), and the events
//   left undelivered after a generous step bound (an event deferred
//   forever). Not the revision: absorbing an overtaken event reaches the same
//   state in fewer transitions, so the count of transitions is not part of
//   the outcome. Per event, the shuffled delivery must never get an error
//   with disposition reconcile or reject that the in-order delivery did not
//   give that same event.
//
// Declared races. Where the history holds both kinds of a racing pair (the
// model says which pairs race, as the verifier does) the order the swap saw
// them in is the meaning, so the shuffled delivery is compared with the
// in-order delivery that saw each racing pair in the same order, and only
// with it. ("Saw" means answered with anything but retry: a deferred event
// did not reach the workflow.) That reference is the FIFO above with one
// change: the first event of a racing kind waits while a racing partner that
// the shuffled delivery saw before it has not been seen yet (the queue skips
// ahead to the next event that may go). Only first events are held: a race is
// decided by which kind the swap saw first, as in the verifier's model (it
// keys races on the first delivery of each kind); what later copies do after
// that is part of what the property checks. An event also waits for the kinds
// it follows. Where the shuffled delivery decided the races so that no
// producer-order delivery reproduces them (a confirmation #2, the deadline,
// then the detection #1: the deadline raced both, and the detection is older;
// or a confirmation #2 whose exchange completed before the detection #1 came),
// a model with `softFollows` (v3) lets the reference take the first event
// whose races allow it, ahead of what it follows (the verifier, too, compares
// every order of one race outcome with the others, not with producer order);
// v2's model ranks its races so that this never happens.
// Several deposits (the 'deposits' model, or any history under a rule set
// with `facts`): besides the comparison, each delivery's end is checked
// directly against what deposit-swap v3 promises (depositProblems): no
// operation id emitted twice, the exchanged deposit covers expectedUnits and
// is not also reviewed, every other deposit whose latest word is a
// confirmation has exactly one review-deposit:<ref>:<swap> (or the swap is in
// review with its open-review), and a deposit event answered stale has its
// entry in `deposits` recording a newer observation.
//
// The reference can still get stuck on an answer that is not published yet
// (the shuffled delivery saw EXCHANGE_COMPLETED before a reversal, but the
// in-order one never emitted START_EXCHANGE): that is reported as a
// difference, it means the orders did not reach the same operations.
import fs from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import fc from 'fast-check';
import { IdemflowError, InMemoryStore, processEvent } from 'idemflow';
import { openStore, tablesFor, tempDir, uniquePrefix } from './backends.mjs';
import { covers, MODELS, ONE_DEPOSIT, perFactOperationId } from './reorder-models.mjs';

export { MODELS, readOrder, V1, V2, V3, V4 } from './reorder-models.mjs';

// Every event of a history speaks of the same facts (a deposit event of its
// deposit's): other values are the guards' business.
const FACTS = { ...ONE_DEPOSIT, payoutUnits: '4100000000', payoutRef: 'payout-9' };

const MAX_STEPS = 200;

const operationId = (model, type, workflowId) => model.order.operationId[type].replaceAll('{workflowId}', workflowId);

// How the broker shuffles: a key per external message (the queue is sorted by
// it), where each published answer lands in what is left of the queue, and
// after how many deliveries the host stores the workflow. All shrink towards
// producer order, answers delivered at once, the workflow stored first.
const planArbitrary = (model) =>
  fc.record({
    keys: fc.array(fc.nat(1000), { minLength: model.maxExternal, maxLength: model.maxExternal }),
    inserts: fc.array(fc.nat(1000), { minLength: model.maxAnswers, maxLength: model.maxAnswers }),
    storedAfter: fc.nat(9).map((n) => Math.max(0, n - 6)),
  });

// ---- Delivering -----------------------------------------------------------------

/** One delivery of a history to one workflow: its answers, and what it saw first. */
class Delivery {
  constructor(store, model, ruleSet, workflowId, history) {
    Object.assign(this, { store, model, ruleSet, workflowId, history });
    this.trace = [];
    /** Kind → how many events the workflow had seen when it first saw one of that kind. */
    this.firstSeen = new Map();
    this.seen = 0;
    this.steps = 0;
    this.retries = 0;
    this.published = new Set();
    this.stored = false;
    this.stuck = false;
    /** Events the in-order reference took ahead of a kind they follow, to reproduce a race (`softFollows`). */
    this.ahead = 0;
  }

  async storeWorkflow() {
    // The host creates the swap with the amount it expects, or without it.
    const { expectedUnits } = this.history;
    await this.store.putWorkflow({
      id: this.workflowId,
      status: 'waiting',
      revision: 1,
      ...(expectedUnits === undefined ? {} : { expectedUnits }),
    });
    this.stored = true;
  }

  event(message) {
    const facts = message.deposit === undefined ? FACTS : { ...FACTS, ...this.history.deposits[message.deposit] };
    const fields = Object.fromEntries(this.model.order.fields[message.type].map((f) => [f, facts[f]]));
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
      emitted = result.outcome === 'applied' && result.operationIds.length > 0;
      answer = { outcome: result.outcome, ...(emitted ? { operationIds: result.operationIds } : {}) };
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      answer = { code: error.code, disposition: error.disposition };
    }
    const depositRef = message.deposit === undefined ? undefined : this.history.deposits[message.deposit].depositRef;
    this.trace.push({ local: message.local, kind: message.kind, type: message.type, sequence: message.sequence, depositRef, ...answer });
    const retry = answer.disposition === 'retry';
    if (retry) {
      this.retries += 1;
    } else {
      if (!this.firstSeen.has(message.kind)) this.firstSeen.set(message.kind, this.seen);
      this.seen += 1;
    }
    const published = [];
    // The outbox is the truth; it is read when the host says it added to it.
    if (emitted) {
      for (const [type, operationType] of Object.entries(this.model.order.answers)) {
        if (this.published.has(type)) continue;
        if (await this.store.getOperation(operationId(this.model, operationType, this.workflowId))) {
          this.published.add(type);
          published.push(...this.history.answers[type]);
        }
      }
    }
    return { retry, published };
  }

  /** Every operation id the rule set may emit for this swap (a per-fact one for each deposit of the history) → its type. */
  operationIds() {
    const { order } = this.model;
    const ids = new Map();
    for (const [type, template] of Object.entries(order.operationId)) {
      if (!order.perFact.has(type)) {
        ids.set(operationId(this.model, type, this.workflowId), type);
        continue;
      }
      for (const { depositRef } of this.history.deposits ?? [])
        ids.set(perFactOperationId(template, order.facts.key, depositRef, this.workflowId), type);
    }
    return ids;
  }

  /** The end state compared between deliveries. */
  async end(undelivered) {
    const { id, status, revision, ...recorded } = (await this.store.getWorkflow(this.workflowId)) ?? {};
    const operations = [];
    for (const [id, _type] of this.operationIds()) {
      if (await this.store.getOperation(id)) operations.push(id.replaceAll(this.workflowId, '{workflowId}'));
    }
    const finalError = (a) => a.code !== undefined && a.disposition !== 'retry';
    return {
      status,
      recorded,
      operations: operations.sort(),
      answeredWithError: this.trace
        .filter(finalError)
        .map((a) => a.kind)
        .sort(),
      undelivered: undelivered.map((m) => m.local).sort(),
    };
  }
}

async function deliverShuffled(store, model, ruleSet, workflowId, history, plan) {
  const run = new Delivery(store, model, ruleSet, workflowId, history);
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

/** May the first event of its kind go now, given the race outcomes the reference must reproduce? */
function racesAllow(run, message, positions, races) {
  if (run.firstSeen.has(message.kind)) return true;
  return races.every(([a, b]) => {
    const partner = a === message.kind ? b : b === message.kind ? a : null;
    return partner === null || run.firstSeen.has(partner) || !(positions.get(partner) < positions.get(message.kind));
  });
}

const followsAllow = (run, message, history) => history.follows[message.kind].every((k) => run.firstSeen.has(k));

async function deliverInOrder(store, model, ruleSet, workflowId, history, positions, races) {
  const run = new Delivery(store, model, ruleSet, workflowId, history);
  await run.storeWorkflow();
  const pending = [...history.external];
  while (pending.length > 0 && run.steps < MAX_STEPS) {
    let index = pending.findIndex((m) => followsAllow(run, m, history) && racesAllow(run, m, positions, races));
    if (index < 0 && model.softFollows) {
      index = pending.findIndex((m) => racesAllow(run, m, positions, races));
      if (index >= 0) run.ahead += 1;
    }
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

// ---- Several deposits: what spec 2 promises, checked on each delivery's end --------

const factsOfRuleSet = new WeakMap();
/** The `facts` block of a rule set (a mutant without an order section too), or null. */
function factsOf(ruleSet) {
  if (!factsOfRuleSet.has(ruleSet)) factsOfRuleSet.set(ruleSet, ruleSet.definition().facts ?? null);
  return factsOfRuleSet.get(ruleSet);
}

/**
 * For a rule set with facts, what must hold at the end of one delivery
 * whatever the order (not computed by re-implementing the rules):
 * - no operation id is emitted twice (so at most one start-exchange);
 * - the exchanged deposit covered the expected amount and has no
 *   review-deposit operation;
 * - a deposit whose latest word is a confirmation and that was not exchanged
 *   has exactly one review-deposit operation, or the swap is in review (or
 *   overdue) with its open-review;
 * - a deposit event answered stale has its deposit's entry in the facts map,
 *   recording a newer observation (a person can find what the chain said);
 *   every deposit the swap saw has an entry, except, under a rule set that
 *   states it never keeps them (deposit-swap v4's `dust-never-kept`), a
 *   partial one, which has none and whose review is written if absent (so
 *   emitted again by its later words, and stored once).
 */
async function depositProblems(run, end, label) {
  const facts = factsOf(run.ruleSet);
  const { history, model, store, workflowId } = run;
  if (facts === null || history.deposits === undefined) return [];
  const problems = [];
  const untrackedPartials = (run.ruleSet.definition().invariants ?? []).some((i) => i.never?.keep === facts.name);
  const untracked = (d) => untrackedPartials && !covers(d.amountUnits, history.expectedUnits);
  const reviewTemplate = model.order.operationId.REVIEW_DEPOSIT;
  const writtenIfAbsent = new Set(
    history.deposits.filter(untracked).map((d) => perFactOperationId(reviewTemplate, facts.key, d.depositRef, workflowId)),
  );
  const emitted = new Map();
  for (const a of run.trace) for (const id of a.operationIds ?? []) emitted.set(id, (emitted.get(id) ?? 0) + 1);
  for (const [id, n] of emitted) if (n > 1 && !writtenIfAbsent.has(id)) problems.push(`${label}: ${id} was emitted ${n} times`);
  const exchange = await store.getOperation(operationId(model, 'START_EXCHANGE', workflowId));
  const exchanged = exchange?.payload?.depositRef;
  const openReview = await store.getOperation(operationId(model, 'OPEN_REVIEW', workflowId));
  const map = end.recorded[facts.name] ?? {};
  for (const [fact, { depositRef, amountUnits }] of history.deposits.entries()) {
    const reviewId = perFactOperationId(reviewTemplate, facts.key, depositRef, workflowId);
    const emissions = emitted.get(reviewId) ?? 0;
    const reviews = writtenIfAbsent.has(reviewId) ? Math.min(emissions, 1) : emissions;
    const stored = (await store.getOperation(reviewId)) !== null;
    if (stored !== reviews > 0) problems.push(`${label}: ${reviewId} emitted ${reviews} times, ${stored ? '' : 'not '}in the outbox`);
    if (depositRef === exchanged) {
      if (!covers(amountUnits, history.expectedUnits))
        problems.push(`${label}: ${depositRef} (${amountUnits} of ${history.expectedUnits}) was exchanged`);
      if (reviews > 0) problems.push(`${label}: ${depositRef} was exchanged and reviewed`);
    } else if (history.chains[fact].at(-1) === 'DEPOSIT_CONFIRMED') {
      const inReview = (end.status === 'review' || end.status === 'overdue') && openReview !== null;
      if (reviews !== 1 && !inReview) {
        problems.push(
          `${label}: ${depositRef}'s latest word is a confirmation, it was not exchanged, and it has ${reviews} review-deposit operations (status ${end.status})`,
        );
      }
    }
    const seen = run.trace.some((a) => a.depositRef === depositRef && a.code === undefined && a.outcome !== 'duplicate-delivery');
    if (untracked({ amountUnits })) {
      if (map[depositRef] !== undefined) problems.push(`${label}: ${facts.name} keeps the partial deposit ${depositRef}`);
    } else if (seen && map[depositRef] === undefined)
      problems.push(`${label}: the swap saw ${depositRef} and has no entry for it in ${facts.name}`);
  }
  for (const a of run.trace) {
    if (a.outcome !== 'stale' || a.depositRef === undefined) continue;
    const entry = map[a.depositRef];
    if (entry === undefined) problems.push(`${label}: ${a.local} was answered stale and ${facts.name} has no entry for ${a.depositRef}`);
    else if (!(entry.sequence > a.sequence))
      problems.push(`${label}: ${a.local} (sequence ${a.sequence}) was answered stale under ${JSON.stringify(entry)}`);
  }
  return problems;
}

/** A history's deposits, chains and expected amount, for a counterexample. */
export function describeHistory(history) {
  const deposits = (history.deposits ?? []).map((d, i) => `${d.depositRef} ${d.amountUnits}: ${(history.chains?.[i] ?? []).join(' ')}`);
  return `expectedUnits ${history.expectedUnits ?? '(not set)'}; ${deposits.join('; ')}`;
}

export const describeTrace = (run) => run.trace.map((a) => `${a.local} → ${a.outcome ?? `${a.code} (${a.disposition})`}`).join(', ');

/** The first events of a kind seen before the first of a kind it follows (for a chain: an older observation). */
export function overtakings(run) {
  const out = [];
  for (const [kind, befores] of Object.entries(run.history.follows)) {
    for (const before of befores) {
      if (run.firstSeen.has(kind) && !(run.firstSeen.get(before) < run.firstSeen.get(kind))) out.push(`${kind} before ${before}`);
    }
  }
  return out;
}

let swaps = 0;

/**
 * Delivers one case both ways in `store` under `ruleSet` (the model's own by
 * default): `{ shuffled, inOrder, problems }`. `races`: the racing pairs of
 * kinds the in-order delivery reproduces (the model's, by default).
 */
export async function runCase(store, model, history, plan, { ruleSet = model.ruleSet, races = history.races } = {}) {
  swaps += 1;
  const id = `swap-${process.pid}-${swaps}`;
  const shuffled = await deliverShuffled(store, model, ruleSet, id, history, plan);
  const positions = model.positions(history, shuffled.run.firstSeen);
  const inOrder = await deliverInOrder(store, model, ruleSet, `${id}-in-order`, history, positions, races);
  const problems = [
    ...differences(shuffled, inOrder),
    ...(await depositProblems(shuffled.run, shuffled.end, 'shuffled')),
    ...(await depositProblems(inOrder.run, inOrder.end, 'in order')),
  ];
  return { shuffled, inOrder, problems };
}

/**
 * The property over `model`'s histories, delivered to `options.ruleSet`
 * (a mutant, say; the model's own by default); `options.races(history)`
 * replaces the racing pairs the reference reproduces; `options.histories`
 * the model's arbitrary (a filtered one, say).
 */
export function reorderProperty(store, model, { coverage, ruleSet, races, histories = model.history } = {}) {
  return fc.asyncProperty(histories, planArbitrary(model), async (history, plan) => {
    const { shuffled, inOrder, problems } = await runCase(store, model, history, plan, { ruleSet, races: races?.(history) });
    coverage?.count(shuffled, inOrder, history);
    if (problems.length > 0) {
      throw new Error(
        [
          ...problems,
          `history: ${describeHistory(history)}`,
          `shuffled: ${describeTrace(shuffled.run)}`,
          `in order: ${describeTrace(inOrder.run)}`,
        ].join('\n'),
      );
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

  constructor(model) {
    Object.defineProperty(this, 'model', { value: model, enumerable: false });
  }

  count(shuffled, inOrder, history) {
    const { run } = shuffled;
    this.cases += 1;
    if (inOrder.run.ahead > 0) this.referenceAhead = (this.referenceAhead ?? 0) + 1;
    if (overtakings(run).length > 0) this.overtaken += 1;
    if (run.retries > 0) this.retried += 1;
    if (run.trace.some((a) => a.outcome === 'duplicate-delivery')) this.duplicates += 1;
    // The deadline seen before every kind it races with (the deposit's events).
    const partners = history.races.filter((pair) => pair.includes('DEADLINE_PASSED')).map(([a, b]) => (a === 'DEADLINE_PASSED' ? b : a));
    if (run.firstSeen.has('DEADLINE_PASSED') && partners.every((k) => !(run.firstSeen.get(k) < run.firstSeen.get('DEADLINE_PASSED')))) {
      this.racesDecidedByDeadline += 1;
    }
    for (const [key, held] of Object.entries(this.model.coverage(shuffled, history))) if (held) this[key] = (this[key] ?? 0) + 1;
    this.ends[shuffled.end.status] = (this.ends[shuffled.end.status] ?? 0) + 1;
    // The number each deposit ended at: its entry in the facts map (v3 records a deposit on the swap only once it acts on it).
    const facts = this.model.order.facts && shuffled.end.recorded[this.model.order.facts.name];
    const sequences = facts ? Object.values(facts).map((entry) => entry.sequence) : [shuffled.end.recorded.sequence];
    for (const sequence of sequences)
      if (sequence !== undefined) {
        this.endSequences ??= {};
        this.endSequences[sequence] = (this.endSequences[sequence] ?? 0) + 1;
      }
  }
}

/**
 * Checks the property of `MODELS[version]` in one store: `{ error, coverage,
 * seconds }`, error being fast-check's report (seed, path, counterexample)
 * or null.
 */
export async function checkStore(kind, { runs, seed, version = 3 }) {
  const started = performance.now();
  const model = MODELS[version];
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
  const coverage = new Coverage(model);
  let error = null;
  try {
    await fc.assert(reorderProperty(store, model, { coverage }), { numRuns: runs, seed, includeErrorInReport: true });
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
