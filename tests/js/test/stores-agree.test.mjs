// Every store applies a write set with one meaning: the same random
// histories (deposit-swap v3 and v4 with several deposits of one swap,
// subscription, order-shipment), delivered in the same order through
// processEvent on every backend, leave the same workflows (status,
// revision, every recorded field and the facts maps, compared as canonical
// JSON), the same receipts and the same outbox operations, byte for byte,
// as the in-memory store, which is the reference. Histories repeat event ids
// (duplicates and conflicting reuses), re-observe facts with higher and
// lower numbers and carry events the core refuses.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { canonicalJson, InMemoryStore, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { random } from '../workers/broker.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const SEED = Number(process.env.IDEMFLOW_AGREE_SEED ?? 20261208);
const HISTORIES = Number(process.env.IDEMFLOW_AGREE_HISTORIES ?? 12);
const LENGTH = 14;

const RULE_SETS = [
  { name: 'deposit-swap', options: { version: 3 }, start: { status: 'waiting', data: { expectedUnits: '250' } } },
  { name: 'deposit-swap', options: {}, start: { status: 'waiting', data: { expectedUnits: '250' } } },
  { name: 'subscription', options: {}, start: null },
  { name: 'order-shipment', options: {}, start: null },
];
/** Values per field kind: few enough that facts repeat, amounts below, at and above what is expected. */
const VALUES = { text: ['r1', 'r2', 'r3'], units: ['100', '250', '400'], count: [1, 2, 3] };

/** The rule set's events and field kinds, read from its definition. */
function shapeOf(ruleSet) {
  const definition = ruleSet.definition();
  const kinds = Object.fromEntries((definition.fields ?? []).map((field) => [field.name, field.kind]));
  return { events: definition.events.map((event) => ({ type: event.type, fields: event.fields })), kinds };
}

/** `count` histories of `LENGTH` drawn events for `ruleSet`, the same on every backend (a seeded draw). */
function historiesOf(ruleSet, seed) {
  const next = random(seed);
  const pick = (list) => list[Math.floor(next() * list.length)];
  const { events, kinds } = shapeOf(ruleSet);
  return Array.from({ length: HISTORIES }, () => {
    const history = [];
    for (let i = 0; i < LENGTH; i += 1) {
      const roll = next();
      if (history.length > 0 && roll < 0.12) {
        history.push({ ...pick(history) }); // a duplicate delivery
        continue;
      }
      const event = pick(events);
      const drawn = { id: Math.floor(next() * 10), workflow: Math.floor(next() * 2), type: event.type, values: {} };
      for (const field of event.fields) drawn.values[field] = pick(VALUES[kinds[field]]);
      if (roll > 0.95 && event.fields.length > 0) drawn.values[event.fields[0]] = 7; // a number where text belongs: refused
      history.push(drawn);
    }
    return history;
  });
}

const eventOf = (drawn, ns) => ({
  eventId: `${ns}:e${drawn.id}`,
  workflowId: `${ns}:w${drawn.workflow}`,
  type: drawn.type,
  ...drawn.values,
});

/** The store's workflows, receipts and operations of one history, without its namespace and times, as canonical JSON. */
async function stateOf(store, ns, history) {
  const strip = (value) =>
    JSON.parse(
      canonicalJson(value)
        .replaceAll(`${ns}:`, '')
        .replace(/fp1:[0-9a-f]{64}/g, 'fp1:…'),
    );
  const state = { workflows: [], receipts: [], operations: [] };
  for (const w of [0, 1]) {
    const workflow = await store.getWorkflow(`${ns}:w${w}`);
    if (workflow) {
      delete workflow.createdAt;
      delete workflow.updatedAt;
    }
    state.workflows.push(workflow);
  }
  for (const id of [...new Set(history.map((d) => d.id))].sort((a, b) => a - b)) {
    const receipt = await store.getReceipt(`${ns}:e${id}`);
    if (receipt) delete receipt.recordedAt;
    state.receipts.push(receipt);
  }
  const ids = new Set(state.receipts.flatMap((receipt) => receipt?.result?.operationIds ?? receipt?.operationIds ?? []));
  for (const id of [...ids].sort()) {
    const op = await store.getOperation(id);
    state.operations.push(op && { id: op.id, type: op.type, payload: op.payload, status: op.status, eventId: op.eventId });
  }
  return canonicalJson(strip(state));
}

/** Runs every history of every rule set on `store`; answers each history's outcomes and state, by rule set. */
async function runAll(store) {
  const out = [];
  for (const [r, spec] of RULE_SETS.entries()) {
    const ruleSet = RuleSet.builtin(spec.name, spec.options);
    for (const [h, history] of historiesOf(ruleSet, SEED + r).entries()) {
      const ns = `${r}-${h}-${uniquePrefix()}`;
      if (spec.start) {
        for (const w of [0, 1]) await store.putWorkflow({ id: `${ns}:w${w}`, revision: 0, ...spec.start }, { ruleSet });
      }
      const outcomes = [];
      for (const drawn of history) {
        const result = await outcomeOf(processEvent(store, eventOf(drawn, ns), { ruleSet }));
        outcomes.push(result.error ? `${result.error.code}` : result.outcome);
      }
      out.push({ label: `${spec.name} v${ruleSet.version} #${h}`, outcomes, state: await stateOf(store, ns, history) });
    }
  }
  return out;
}

let reference;
before(async () => {
  reference = await runAll(new InMemoryStore());
});

it('the histories exercise what is compared: applied deliveries, duplicates, refusals, facts maps of several entries', () => {
  const outcomes = reference.flatMap((run) => run.outcomes);
  for (const kind of ['applied', 'duplicate-delivery', 'INVALID_EVENT']) assert.ok(outcomes.includes(kind), `some ${kind}`);
  const maps = reference.flatMap((run) => JSON.parse(run.state).workflows.map((w) => Object.keys(w?.deposits ?? {}).length));
  assert.ok(Math.max(...maps) >= 2, 'a swap with two deposits or more');
  assert.ok(
    reference.some((run) => JSON.parse(run.state).operations.length > 0),
    'operations scheduled',
  );
});

for (const backend of BACKENDS) {
  if (!backend.durable || (only && !only.has(backend.id))) continue;
  describe(`${backend.name} agrees with the in-memory store`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    it(`the same ${RULE_SETS.length * HISTORIES} histories leave the same outcomes, workflows, receipts and operations, byte for byte`, async () => {
      const mine = await runAll(suite.store);
      assert.equal(mine.length, reference.length);
      for (const [i, run] of mine.entries()) {
        assert.deepEqual(run.outcomes, reference[i].outcomes, `${run.label}: outcomes`);
        assert.equal(run.state, reference[i].state, `${run.label}: stored state`);
      }
    });
  });
}
