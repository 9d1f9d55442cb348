// Issue 9: no rule-set definition traps the wasm or holds the loader for long,
// inputs are read from their own properties only, every public entry answers
// any input with a result or an IdemflowError, and evicted rule sets give
// their wasm memory back without leaving a dangling RuleSet behind.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  decide,
  fingerprint,
  IdemflowError,
  normalizeEvent,
  planDepositConfirmation,
  RuleSet,
  validateEvent,
  verifyRuleSet,
} from 'idemflow';
import { detectedSwap, SEED_EVENT, shipmentDefinition } from '../workers/fixtures.mjs';
import { wasmMemoryBytes } from '../workers/wasm-memory.mjs';

const event = SEED_EVENT;
const workflow = detectedSwap({ id: 'swap-42', revision: 2, depositRef: event.depositRef, amountUnits: event.amountUnits });

function base() {
  return shipmentDefinition('hostile');
}

const range = (n, f) => Array.from({ length: n }, (_, i) => f(i));
const withKey = (key, value) => ({ ...base(), [key]: value });

function hostileDefinitions() {
  const stars = base();
  stars.rules[1].on = range(50_000, () => '*');
  stars.rules[1].in = range(50_000, () => '*');
  const emits = base();
  emits.rules[0].then.emit = range(33, (i) => ({ type: 'CREATE_SHIPMENT', id: `create-shipment-${i}:{workflowId}` }));
  const wide = {
    ...base(),
    statuses: range(256, (i) => ({ name: `s${i}` })),
    events: range(256, (i) => ({ type: `E${i}`, fields: [] })),
    rules: range(4096, () => ({ on: '*', in: '*', then: { outcome: 'stale' } })),
  };
  let deep = 'bottom';
  for (let i = 0; i < 100; i += 1) deep = [deep];
  return [
    ['one rule holding 50,000 "*" in on and in (the 399 KiB trap)', stars, '$.rules[1].on', 'maxListNames'],
    [
      '30,000 statuses',
      withKey(
        'statuses',
        range(30_000, (i) => ({ name: `s${i}` })),
      ),
      '$.statuses',
      'maxStatuses',
    ],
    [
      '100,000 statuses',
      withKey(
        'statuses',
        range(100_000, (i) => ({ name: `s${i}` })),
      ),
      '$',
      'maxDefinitionBytes',
    ],
    [
      '20,000 event types',
      withKey(
        'events',
        range(20_000, (i) => ({ type: `E${i}`, fields: [] })),
      ),
      '$.events',
      'maxEventTypes',
    ],
    [
      '100 fields',
      withKey(
        'fields',
        range(100, (i) => ({ name: `f${i}`, kind: 'text' })),
      ),
      '$.fields',
      'maxFields',
    ],
    [
      '10,000 rules',
      withKey(
        'rules',
        range(10_000, () => base().rules[1]),
      ),
      '$.rules',
      'maxRules',
    ],
    ['33 emits in one rule', emits, '$.rules[0].then.emit', 'maxEmitsPerRule'],
    ['4096 rules answering 256 x 256 pairs each', wide, '$.rules[2]', 'maxTableEntries'],
    ['arrays nested 100 deep', withKey('description', deep), '$', 'maxDepth'],
    ['a 1.5 MiB description', withKey('description', 'x'.repeat(3 << 19)), '$', 'maxDefinitionBytes'],
    ['a 64 MiB text', 'x'.repeat(64 << 20), '$', 'maxDefinitionBytes'],
  ];
}

function coded(fn, code) {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error?.stack}`);
    if (code) assert.equal(error.code, code, error.message);
    return error;
  }
  assert.fail('did not throw');
}

function aValidDecisionStillWorks() {
  assert.equal(decide({ event, receipt: null, workflow }).outcome, 'applied');
  assert.match(fingerprint(event), /^fp1:[0-9a-f]{64}$/);
  assert.equal(RuleSet.fromJSON(base()).id, 'hostile');
}

test('every hostile definition is RULESET_INVALID naming its limit, and the module keeps deciding', () => {
  for (const [name, definition, path, limit] of hostileDefinitions()) {
    for (const load of [() => RuleSet.fromJSON(definition), () => verifyRuleSet(definition)]) {
      const error = coded(load, 'RULESET_INVALID');
      assert.equal(error.details.path, path, `${name}: ${error.message}`);
      assert.ok(error.details.reason.startsWith(`limit ${limit}: `), `${name}: ${error.details.reason}`);
    }
    aValidDecisionStillWorks();
  }
});

/**
 * Within every count limit, but past the reorder-safe check's budget in total (issue 24): `types` event
 * types racing pairwise from `statuses` initial statuses, each answering every type without moving. With
 * 15 types and 256 statuses (146 KiB) the budget that restarted per (history, start status) let it explore
 * billions of configurations; the same generator as tests/hostile/definitions.rs.
 */
function pastTheReorderBudget(types, statuses) {
  const names = range(types, (i) => `E${i}`);
  const half = types >> 1;
  const rules = [{ on: '*', in: '(none)', then: { error: 'UNKNOWN_WORKFLOW', disposition: 'retry' } }];
  for (let s = 0; s < statuses; s += 1) {
    for (const on of names.slice(0, half)) rules.push({ on, in: `s${s}`, then: { outcome: 'applied', to: `s${s}` } });
    rules.push({ on: names.slice(half), in: `s${s}`, then: { outcome: 'already-applied' } });
  }
  return {
    id: 'reorder-budget',
    version: 1,
    statuses: range(statuses, (i) => ({ name: `s${i}`, initial: true })),
    events: names.map((type) => ({ type, fields: [] })),
    order: { races: names.slice(0, -1).map((name, i) => ({ between: [name, names.slice(i + 1)] })) },
    rules,
  };
}

test('a definition past the reorder budget in total is refused naming it (too many histories: counted first, in under 2 s of CPU)', () => {
  for (const [types, statuses, limit] of [
    [15, 256, 'maxReorderHistories'],
    [10, 18, 'maxReorderConfigurations'],
  ]) {
    const definition = pastTheReorderBudget(types, statuses);
    const label = `${types} types from ${statuses} statuses (${JSON.stringify(definition).length >> 10} KiB)`;
    for (const [entry, load] of [
      ['RuleSet.fromJSON', () => RuleSet.fromJSON(definition)],
      ['verifyRuleSet', () => verifyRuleSet(definition)],
    ]) {
      const before = process.cpuUsage();
      const error = coded(load, 'RULESET_INVALID');
      const spent = process.cpuUsage(before);
      assert.equal(error.details.path, '$.order', `${label}, ${entry}: ${error.message}`);
      assert.ok(error.details.reason.startsWith(`limit ${limit}: `), `${label}, ${entry}: ${error.details.reason}`);
      const seconds = (spent.user + spent.system) / 1e6;
      // Past the configurations' budget the search stops there; the budget bounds its time (`make bench`).
      if (limit === 'maxReorderHistories') {
        assert.ok(seconds < 2, `${label}, ${entry}: refused after ${seconds.toFixed(2)} s of CPU`);
      }
    }
    aValidDecisionStillWorks();
  }
});

test('a verification report says how much of the reorder budget the definition used', () => {
  const checked = verifyRuleSet(pastTheReorderBudget(4, 3)).properties.find((p) => p.name === 'reorder-safe').checked;
  // 75 histories of up to six events from 4 types (each at most twice), from (none) and 3 initial statuses.
  assert.deepEqual(checked.budget.histories, { used: 75 * 4, limit: 100_000 });
  assert.deepEqual(checked.budget.configurations, { used: checked.configurations, limit: 12_000_000 });
  assert.ok(checked.configurations > checked.histories);
});

test('a field named after an Object.prototype member is RULESET_INVALID', () => {
  for (const name of ['constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__']) {
    const error = coded(() => RuleSet.fromJSON({ ...base(), fields: [{ name, kind: 'text' }] }), 'RULESET_INVALID');
    assert.equal(error.details.path, '$.fields[0].name', name);
  }
});

/** `fn`'s answer (or what it threw) with `Object.prototype[key] = value`, cleaned up before anything is asserted. */
function polluted(key, value, fn) {
  Object.defineProperty(Object.prototype, key, { value, configurable: true, writable: true, enumerable: false });
  try {
    return { value: fn() };
  } catch (thrown) {
    return { thrown };
  } finally {
    delete Object.prototype[key];
  }
}

test('an event that only inherits its fields (Object.create) is INVALID_EVENT', () => {
  const error = coded(() => validateEvent(Object.create(event)), 'INVALID_EVENT');
  assert.equal(error.details.field, 'eventId');
});

test('a polluted Object.prototype supplies no missing field', () => {
  const { amountUnits, ...withoutAmount } = event;
  const answer = polluted('amountUnits', '999', () => fingerprint(withoutAmount));
  assert.ok(answer.thrown instanceof IdemflowError, `accepted: ${answer.value}`);
  assert.equal(answer.thrown.details.field, 'amountUnits');
});

test('a polluted Object.prototype supplies no workflow, receipt or stored status to decide', () => {
  const created = { ...event, type: 'DEPOSIT_DETECTED', sequence: 1 };
  const inherited = polluted('workflow', { ...workflow, status: 'waiting' }, () => decide({ event: created }));
  assert.equal(inherited.thrown?.code, 'UNKNOWN_WORKFLOW', 'an inherited workflow was used');
  const { status, ...withoutStatus } = workflow;
  const stored = polluted('status', 'deposit', () => decide({ event, receipt: null, workflow: withoutStatus }));
  assert.equal(stored.thrown?.code, 'INVALID_RECORD');
  assert.equal(stored.thrown?.details.field, 'status');
});

test('an own getter on an event field is read', () => {
  const withGetter = Object.defineProperty({ ...event }, 'depositRef', { get: () => event.depositRef, enumerable: true });
  assert.equal(fingerprint(withGetter), fingerprint(event));
});

test('decide with a throwing getter on event, receipt, workflow or ruleSet is an IdemflowError', () => {
  const boom = (key) =>
    Object.defineProperty({ event, receipt: null, workflow }, key, {
      get() {
        throw new Error(`boom ${key}`);
      },
    });
  const onEvent = coded(() => decide(boom('event')), 'INVALID_EVENT');
  assert.equal(onEvent.details.field, 'event');
  for (const key of ['receipt', 'workflow', 'ruleSet']) {
    const error = coded(() => decide(boom(key)), 'INVALID_ARGUMENT');
    assert.match(error.message, new RegExp(key));
  }
});

test('every public entry answers hostile arguments with an IdemflowError', () => {
  const revoked = () => {
    const p = Proxy.revocable({}, {});
    p.revoke();
    return p.proxy;
  };
  const trap = new Proxy(
    {},
    {
      get() {
        throw new Error('get trap');
      },
      getOwnPropertyDescriptor() {
        throw new Error('gOPD trap');
      },
      has() {
        throw new Error('has trap');
      },
    },
  );
  const throwingToJSON = {
    toJSON() {
      throw new Error('toJSON');
    },
  };
  const hostile = [revoked(), trap, throwingToJSON, Symbol('x'), 10n, () => 1, null, undefined, 'x', -0, NaN];
  const entries = [
    (x) => validateEvent(x),
    (x) => validateEvent(event, x),
    (x) => normalizeEvent(x),
    (x) => normalizeEvent(event, x),
    (x) => fingerprint(x),
    (x) => fingerprint(event, x),
    (x) => decide(x),
    (x) => decide({ event: x }),
    (x) => decide({ event, receipt: x, workflow }),
    (x) => decide({ event, receipt: null, workflow: x }),
    (x) => planDepositConfirmation(x, event),
    (x) => planDepositConfirmation(workflow, x),
    (x) => RuleSet.fromJSON(x),
    (x) => RuleSet.builtin(x),
    (x) => verifyRuleSet(x),
  ];
  for (const [i, entry] of entries.entries()) {
    for (const value of hostile) {
      try {
        entry(value);
      } catch (error) {
        assert.ok(error instanceof IdemflowError, `entry ${i} with ${typeof value}: ${error?.stack}`);
        assert.ok(error.code in IdemflowError.codes, error.code);
      }
    }
  }
});

test('40,000 distinct rule-set loads keep the wasm memory bounded without a garbage collection', () => {
  const load = (i) => RuleSet.fromJSON({ ...base(), version: 1_000_000 + i });
  for (let i = 0; i < 200; i += 1) load(i);
  const before = wasmMemoryBytes();
  for (let i = 200; i < 40_000; i += 1) load(i);
  const grown = wasmMemoryBytes() - before;
  assert.ok(grown < 4 << 20, `wasm memory grew by ${(grown / 2 ** 20).toFixed(1)} MiB`);
});

test('an evicted RuleSet still works: it compiles its definition again', () => {
  const held = RuleSet.fromJSON(withKey('version', 7));
  const order = { eventId: 'evt-1', workflowId: 'order-1', type: 'SHIPMENT_REQUESTED' };
  const expected = decide({ event: order, receipt: null, workflow: null, ruleSet: held });
  for (let i = 0; i < 200; i += 1) RuleSet.fromJSON({ ...base(), version: 2_000_000 + i });
  assert.equal(held.version, 7);
  assert.deepEqual(decide({ event: order, receipt: null, workflow: null, ruleSet: held }), expected);
  assert.equal(held.table().length > 0, true);
  assert.equal(verifyRuleSet(held).ok, true);
  // Loading the same text again gives one owner, and both objects keep working.
  for (let i = 0; i < 200; i += 1) RuleSet.fromJSON({ ...base(), version: 3_000_000 + i });
  const again = RuleSet.fromJSON(withKey('version', 7));
  assert.deepEqual(decide({ event: order, receipt: null, workflow: null, ruleSet: held }), expected);
  assert.deepEqual(decide({ event: order, receipt: null, workflow: null, ruleSet: again }), expected);
});

test('a definition is proven once per process: recompiling it after an eviction, or from other text, never proves it again', () => {
  const rules = fileURLToPath(new URL('../node_modules/idemflow/core/rules.cjs', import.meta.url));
  const { proofStats } = createRequire(import.meta.url)(rules);
  const definition = withKey('version', 9_000_001);
  const before = proofStats().proofsRun;
  const held = RuleSet.fromJSON(definition);
  assert.equal(proofStats().proofsRun, before + 1, 'the first load proves');
  for (let i = 0; i < 200; i += 1) RuleSet.fromJSON({ ...base(), version: 9_100_000 + i }); // evicts `held`
  const afterOthers = proofStats().proofsRun;
  assert.equal(afterOthers, before + 201);
  const order = { eventId: 'evt-9', workflowId: 'order-9', type: 'SHIPMENT_REQUESTED' };
  assert.equal(decide({ event: order, receipt: null, workflow: null, ruleSet: held }).outcome, 'applied'); // compiles again
  assert.equal(RuleSet.fromJSON(JSON.stringify(definition, null, 2)).hash, held.hash); // the same rules, other text
  assert.equal(proofStats().proofsRun, afterOthers, 'no proof ran again');
  // A definition that fails is not remembered: it is refused every time.
  const unreachable = { ...base(), version: 9_000_002, statuses: [...base().statuses, { name: 'limbo' }] };
  for (let i = 0; i < 2; i += 1) assert.throws(() => RuleSet.fromJSON(unreachable), { code: 'RULESET_INVALID' });
  assert.equal(proofStats().proofsRun, afterOthers + 2);
});

test('a getter that loads rule sets in the middle of a decision cannot free the rules in use', () => {
  const ruleSet = RuleSet.fromJSON(withKey('version', 8));
  let loads = 0;
  const order = {
    eventId: 'evt-2',
    type: 'SHIPMENT_REQUESTED',
    get workflowId() {
      // Evicts `ruleSet` (and frees its compiled rules) while decide is reading this event.
      for (let i = 0; i < 100; i += 1) RuleSet.fromJSON({ ...base(), version: 4_000_000 + loads++ });
      return 'order-2';
    },
  };
  const decision = decide({ event: order, receipt: null, workflow: null, ruleSet });
  assert.equal(decision.outcome, 'applied');
  aValidDecisionStillWorks();
});
