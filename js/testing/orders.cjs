'use strict';
// Every delivery order of a history, through the real decider: for a user's
// own tests of a rule set. Each order is delivered with processEvent to an
// in-memory store that starts from the given workflows; a delivery answered
// with a `retry` error comes back later (at most `retries` times per event), as
// a broker redelivers it; with `duplicates`, every event is delivered twice.
// The search walks orders as a tree and merges branches that reach the same
// stored state with the same deliveries left, so its cost follows the
// distinct states, not the factorial of the history's length; it stops at
// `maxStates` and says so (a coded error), never silently.

const { IdemflowError } = require('../core/errors.cjs');
const { optionsOf, wholeNumberOr } = require('../core/options.cjs');
const { AssertionError } = require('node:assert');
const { canonicalJson } = require('../core/payload.cjs');
const { resolveRuleSet } = require('../core/rules.cjs');
const { processEvent } = require('../host/event.cjs');
const { InMemoryStore } = require('../adapters/memory/index.cjs');

const DEFAULT_MAX_STATES = 100_000;
// A fixed clock: stored timestamps then never tell two orders apart.
const EPOCH = Date.UTC(2026, 0, 1);

function invalid(field, reason) {
  return new IdemflowError('INVALID_ARGUMENT', `exploreOrders: ${reason}`, { disposition: 'fatal', details: { field, reason } });
}

function optionsFor(options) {
  const given = optionsOf(options, ['ruleSet', 'workflows', 'events', 'duplicates', 'retries', 'maxStates'], 'exploreOrders');
  if (given.ruleSet === undefined) throw invalid('ruleSet', 'ruleSet is required: the RuleSet (or built-in name) under test');
  const ruleSet = resolveRuleSet(given.ruleSet);
  if (!Array.isArray(given.events) || given.events.length === 0) throw invalid('events', 'events must be a non-empty array of events');
  const workflows = given.workflows ?? [];
  if (!Array.isArray(workflows)) throw invalid('workflows', 'workflows must be an array of start workflows');
  if (given.duplicates !== undefined && typeof given.duplicates !== 'boolean') throw invalid('duplicates', 'duplicates must be a boolean');
  return {
    ruleSet,
    workflows,
    events: given.events,
    copies: given.duplicates ? 2 : 1,
    retries: wholeNumberOr(given.retries, 2, 'retries', 0),
    maxStates: wholeNumberOr(given.maxStates, DEFAULT_MAX_STATES, 'maxStates', 1),
  };
}

/** What an order ends in: each workflow's status and recorded fields, the operations emitted, and the events left unresolved. */
async function endStateOf(snapshot, unresolved) {
  const store = InMemoryStore.fromSnapshot(snapshot, { now: () => EPOCH });
  const workflows = [];
  for (const id of [...snapshot.workflows.keys()].sort()) {
    const { status, revision: _revision, id: _id, ...fields } = await store.getWorkflow(id);
    workflows.push({ id, status, fields });
  }
  const operations = [...snapshot.outbox.values()]
    .map(({ id, type, payload }) => ({ id, type, payload }))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
  return { workflows, operations, unresolved: [...unresolved].sort((a, b) => (a.eventId < b.eventId ? -1 : 1)) };
}

/** The stored state that decides what later deliveries do (timestamps are fixed). */
function stateKey(snapshot) {
  return canonicalJson({
    workflows: [...snapshot.workflows.entries()].sort(),
    receipts: [...snapshot.inbox.keys()].sort(),
    operations: [...snapshot.outbox.keys()].sort(),
  });
}

/**
 * Explores every delivery order of `events` and resolves to
 * `{ endStates: [{ state, orders, example }], orders, states }`: the distinct
 * end states (with how many orders reach each and one order that does, as the
 * event ids delivered), the number of orders and of distinct states visited.
 * Options: `ruleSet` (a RuleSet or a built-in's name), `events`, `workflows`
 * (the workflows as they stand before the history, default none),
 * `duplicates` (deliver every event twice), `retries` (redeliveries of an event
 * answered with a retry error, default 2), `maxStates` (default 100,000).
 */
async function exploreOrders(options) {
  const { ruleSet, workflows, events, copies, retries, maxStates } = optionsFor(options);
  const start = new InMemoryStore([], { now: () => EPOCH });
  for (const workflow of workflows) await start.putWorkflow(workflow);
  const endStates = new Map();
  const memo = new Map();
  let states = 0;

  // Resolves to Map(endKey -> { state, orders, example }) for what is left: `left[i]` deliveries of event i,
  // `budget[i]` retries; `retried` is the event just answered with a retry, which comes back after
  // another delivery (at once only when nothing else is left: the same state gives the same answer).
  const walk = async (snapshot, left, budget, unresolved, retried) => {
    const key = `${stateKey(snapshot)}|${left.join(',')}|${budget.join(',')}|${retried}|${canonicalJson([...unresolved.values()])}`;
    const known = memo.get(key);
    if (known) return known;
    states += 1;
    if (states > maxStates) {
      const reason = `more than ${maxStates} distinct states: deliver fewer events, drop duplicates, or raise maxStates`;
      throw new IdemflowError('INVALID_ARGUMENT', `exploreOrders: ${reason}`, {
        disposition: 'fatal',
        details: { field: 'maxStates', reason, maxStates, events: events.length, duplicates: copies > 1 },
      });
    }
    const ends = new Map();
    if (left.every((n) => n === 0)) {
      const state = await endStateOf(snapshot, [...unresolved.values()]);
      ends.set(canonicalJson(state), { state, orders: 1, example: [] });
    }
    const others = left.some((n, i) => n > 0 && i !== retried);
    for (let i = 0; i < events.length; i += 1) {
      if (left[i] === 0 || (i === retried && others)) continue;
      const store = InMemoryStore.fromSnapshot(snapshot, { now: () => EPOCH });
      const nextLeft = left.slice();
      nextLeft[i] -= 1;
      const nextBudget = budget.slice();
      const nextUnresolved = new Map(unresolved);
      let nextRetried = -1;
      const { eventId } = events[i];
      try {
        await processEvent(store, events[i], { ruleSet });
        nextUnresolved.delete(eventId);
      } catch (error) {
        if (!(error instanceof IdemflowError)) throw error;
        if (error.disposition === 'fatal') throw error;
        if (error.disposition === 'retry' && nextBudget[i] > 0) {
          nextBudget[i] -= 1;
          nextLeft[i] += 1;
          nextRetried = i;
        }
        nextUnresolved.set(eventId, { eventId, code: error.code, disposition: error.disposition });
      }
      const below = await walk(store.snapshot(), nextLeft, nextBudget, nextUnresolved, nextRetried);
      for (const [endKey, end] of below) {
        const seen = ends.get(endKey);
        if (seen) seen.orders += end.orders;
        else ends.set(endKey, { state: end.state, orders: end.orders, example: [eventId, ...end.example] });
      }
    }
    memo.set(key, ends);
    return ends;
  };

  const ends = await walk(
    start.snapshot(),
    events.map(() => copies),
    events.map(() => retries),
    new Map(),
    -1,
  );
  for (const [key, end] of ends) endStates.set(key, end);
  const all = [...endStates.values()];
  return { endStates: all, orders: all.reduce((sum, end) => sum + end.orders, 0), states };
}

/**
 * Explores every order (exploreOrders) and throws an AssertionError (as
 * node:assert does, so node:test, Vitest and Jest report it) unless every order
 * ends in one state; with `expected` ({ workflows?, operations?, unresolved? },
 * each compared when given), that state must equal it. Resolves to the one end state.
 */
async function assertEveryOrder(options) {
  const { expected, ...rest } = optionsOf(
    options,
    ['ruleSet', 'workflows', 'events', 'duplicates', 'retries', 'maxStates', 'expected'],
    'assertEveryOrder',
  );
  const result = await exploreOrders(rest);
  if (result.endStates.length !== 1) {
    const [a, b] = result.endStates;
    throw new AssertionError({
      message: `${result.endStates.length} different end states over ${result.orders} delivery orders, e.g. ${a.example.join(' → ')} and ${b.example.join(' → ')}`,
      actual: b.state,
      expected: a.state,
      operator: 'everyOrder',
    });
  }
  const [{ state }] = result.endStates;
  if (expected !== undefined) {
    for (const part of ['workflows', 'operations', 'unresolved']) {
      if (expected[part] === undefined) continue;
      if (canonicalJson(expected[part]) !== canonicalJson(state[part])) {
        throw new AssertionError({
          message: `every order ends alike, but not with the expected ${part}`,
          actual: state[part],
          expected: expected[part],
          operator: 'everyOrder',
        });
      }
    }
  }
  return state;
}

module.exports = { exploreOrders, assertEveryOrder };
