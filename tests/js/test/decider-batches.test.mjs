// The package's decider (core/packed.cjs) over generated inputs, hostile
// JavaScript values included (getters, throwing getters, proxies, lone
// surrogates, every kind of value, huge strings), for every built-in rule
// set: a batch answers each input exactly as that input decided alone (the
// same decision, or the same error), whatever the batch's size and however
// its items share the wasm regions; and validation, normalization and the
// fingerprint agree with one another. What each answer is, is pinned by the
// shared vectors (vectors.test.mjs) and the hostile-input tests.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import test from 'node:test';
import { fingerprint, IdemflowError, normalizeEvent, RuleSet, validateEvent } from 'idemflow';
import { random } from '../workers/broker.mjs';

const require = createRequire(import.meta.url);
const root = process.env.IDEMFLOW_PKG ?? path.dirname(require.resolve('idemflow/package.json'));
const { decider } = require(path.join(root, 'core', 'wasm.cjs'));

const SEED = Number(process.env.DECIDER_SEED ?? 20261201);
const CASES = Number(process.env.DECIDER_CASES ?? 6_000);
const BUILTINS = [
  ['deposit-swap', 1],
  ['deposit-swap', 2],
  ['deposit-swap', 3],
  ['order-shipment', 1],
  ['order-shipment', 2],
  ['subscription', 1],
  ['subscription', 2],
];
const TEXTS = ['ref-a', 'ref-b', 'btc-mainnet:tx-9f:vout-0', 'réf-☃', '😀-emoji', 'a"quote\\', '2026-11'];
const UNITS = ['1', '250', '1000000', '99999999999999999999999999'];
const COUNTS = [1, 2, 3, 4, 9007199254740991];
const HOSTILE = [
  () => ({ absent: true }),
  () => ({ value: null }),
  () => ({ value: undefined }),
  () => ({ value: '' }),
  () => ({ value: '   ' }),
  () => ({ value: '012' }),
  () => ({ value: 5 }),
  () => ({ value: -0 }),
  () => ({ value: true }),
  () => ({ value: 10n }),
  () => ({ value: Symbol('s') }),
  () => ({ value: ['a'] }),
  () => ({ value: { nested: 1 } }),
  () => ({ value: 'a\u0001b' }),
  () => ({ value: 'lone \ud800 high' }),
  () => ({ value: 'ends high \ud83d' }),
  () => ({ value: '\ude00 starts low' }),
  () => ({ value: 'real \ufffd' }),
  () => ({ value: 'x'.repeat(513) }),
  () => ({ value: 'é'.repeat(300) }),
  () => ({ getter: 'value' }),
  () => ({ getter: 'throw' }),
  () => ({ getter: 'throw-string' }),
];

/**
 * One input drawn from `rng`: `make()` builds fresh objects from the same
 * choices every time it is called, so the batch and the lone decision read
 * equal inputs (a getter returns the same value on every read).
 */
function recipe(rng, ruleSet) {
  const pick = (items) => items[Math.floor(rng() * items.length)];
  const chance = (p) => rng() < p;
  const definition = ruleSet.definition();
  const type = pick(definition.events);
  const kinds = Object.fromEntries((definition.fields ?? []).map((f) => [f.name, f.kind]));
  const hostile = chance(0.3);
  const valid = (field) => (kinds[field] === 'units' ? pick(UNITS) : kinds[field] === 'count' ? pick(COUNTS) : pick(TEXTS));
  const draw = (field, p = 0.15) => {
    if (!(hostile && chance(p))) return { value: field === 'type' ? type.type : valid(field) };
    const spec = pick(HOSTILE)();
    if (spec.getter !== undefined) spec.of = field === 'type' ? type.type : valid(field);
    return spec;
  };
  const event = [
    ['eventId', hostile && chance(0.1) ? draw('eventId', 1) : { value: pick(['evt-1', 'evt-2', 'watcher:evt-☃']) }],
    ['type', hostile && chance(0.05) ? pick([{ value: 'NOPE' }, { value: 7 }, { getter: 'value', of: type.type }]) : { value: type.type }],
    ['workflowId', hostile && chance(0.1) ? draw('workflowId', 1) : { value: pick(['wf-1', 'wf-2', 'wf 😀']) }],
  ];
  for (const f of definition.fields ?? []) {
    if ((type.fields ?? []).includes(f.name) || chance(0.2)) event.push([f.name, draw(f.name)]);
  }
  const eventShape = hostile && chance(0.08) ? pick(['proxy', 'null-proto', 'inherited', 'array', 'string', 'null']) : 'plain';
  let receipt = null;
  if (chance(0.25)) {
    receipt = [['eventId', pick([{ sameAs: 'eventId' }, { sameAs: 'eventId' }, { value: 'another' }, { value: 7 }])]];
    receipt.push(['fingerprint', pick([{ right: true }, { right: true }, { value: `fp1:${'0'.repeat(64)}` }, { value: 'fp1:x' }])]);
    if (chance(0.6)) {
      receipt.push([
        'result',
        {
          value: pick([
            { operationIds: ['op:wf-1'], status: 'sending', revision: 3 },
            { operationIds: [] },
            { operationIds: [''] },
            '{"operationIds":[]}',
            5,
          ]),
        },
      ]);
      receipt.push(['outcome', { value: pick(['applied', 'stale', 'nope']) }]);
      if (chance(0.5)) receipt.push(['recordedAt', { value: pick([0, 1_764_000_000_000, -1, 1.5]) }]);
    }
  }
  let workflow = null;
  if (chance(0.85)) {
    workflow = [
      ['id', chance(0.92) ? { sameAs: 'workflowId' } : { value: 'other-wf' }],
      ['status', chance(0.97) ? { value: pick(definition.statuses).name } : pick([{ value: 'nope' }, { value: 3 }])],
      ['revision', chance(0.9) ? { value: pick([0, 1, 41]) } : { value: pick([-0, -1, 1.5, NaN, 2 ** 53, '3', null]) }],
    ];
    for (const f of definition.fields ?? []) {
      const r = rng();
      if (r < 0.6) workflow.push([f.name, { sameAs: f.name }]);
      else if (r < 0.7) workflow.push([f.name, { copyOf: f.name }]);
      else if (r < 0.85) workflow.push([f.name, hostile ? draw(f.name, 0.3) : { value: valid(f.name) }]);
    }
  }
  const workflowShape = workflow && hostile && chance(0.1) ? pick(['proxy', 'number', 'array', 'null-proto']) : 'plain';

  return function make() {
    const seen = {};
    const define = (target, entries, owner) => {
      for (const [key, spec] of entries) {
        if (spec.absent) continue;
        let value = spec.value;
        if (spec.sameAs !== undefined) value = seen[spec.sameAs];
        // An equal string that is not the same one.
        if (spec.copyOf !== undefined) value = typeof seen[spec.copyOf] === 'string' ? ` ${seen[spec.copyOf]}`.slice(1) : seen[spec.copyOf];
        if (spec.right) {
          try {
            value = fingerprint(make.event, { ruleSet });
          } catch {
            value = 'fp1:x';
          }
        }
        if (spec.getter !== undefined) {
          const { getter, of } = spec;
          Object.defineProperty(target, key, {
            enumerable: true,
            get() {
              if (getter === 'throw') throw new Error(`boom ${key}`);
              if (getter === 'throw-string') throw `string ${key}`; // eslint-disable-line no-throw-literal
              return of;
            },
          });
          if (owner === 'event') seen[key] = of;
          continue;
        }
        target[key] = value;
        if (owner === 'event') seen[key] = value;
      }
      return target;
    };
    const shape = (entries, kind, owner) => {
      switch (kind) {
        case 'proxy':
          return new Proxy(define({}, entries, owner), {});
        case 'null-proto':
          return define(Object.create(null), entries, owner);
        case 'inherited':
          return Object.create(define({}, entries, owner));
        case 'array':
          return define([], entries, owner);
        case 'string':
          define({}, entries, owner);
          return '{"eventId":"x"}';
        case 'number':
          return 42;
        case 'null':
          define({}, entries, owner);
          return null;
        default:
          return define({}, entries, owner);
      }
    };
    make.event = shape(event, eventShape, 'event');
    const r = receipt === null ? null : shape(receipt, 'plain', 'receipt');
    const w = workflow === null ? null : shape(workflow, workflowShape, 'workflow');
    return { event: make.event, receipt: r, workflow: w };
  };
}

/** What an answer is, for comparison: the decision, or the error's code, message, disposition and details. */
function answerOf(fn) {
  try {
    return { decision: fn() };
  } catch (error) {
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error?.stack}`);
    return { error: { code: error.code, message: error.message, disposition: error.disposition, details: error.details } };
  }
}

function fromBatch(answer) {
  if (answer.error === undefined) return { decision: answer };
  assert.ok(answer.error instanceof IdemflowError, String(answer.error));
  const { code, message, disposition, details } = answer.error;
  return { error: { code, message, disposition, details } };
}

test(`a batch answers each of ${CASES} generated inputs as that input alone, in batches of 1 to 300 and one of 2,100`, () => {
  const rng = random(SEED);
  const d = decider();
  const counts = { decided: 0, failed: 0 };
  for (const [name, version] of BUILTINS) {
    const ruleSet = RuleSet.builtin(name, { version });
    const recipes = Array.from({ length: CASES / BUILTINS.length }, () => recipe(rng, ruleSet));
    const alone = recipes.map((make) => {
      const { event, receipt, workflow } = make();
      return answerOf(() => d.decide(ruleSet.compiled, event, receipt, workflow));
    });
    for (let start = 0; start < recipes.length; ) {
      const size = Math.min(recipes.length - start, 1 + Math.floor(rng() * 300));
      const answers = d.decideBatch(
        ruleSet.compiled,
        recipes.slice(start, start + size).map((make) => make()),
      );
      answers.forEach((answer, i) => assert.deepStrictEqual(fromBatch(answer), alone[start + i], `${name} v${version} input ${start + i}`));
      start += size;
    }
    // Past one call's chunk of items: the answers still line up.
    const many = Array.from({ length: 2100 }, (_, i) => recipes[i % recipes.length]);
    d.decideBatch(
      ruleSet.compiled,
      many.map((make) => make()),
    ).forEach((answer, i) => {
      assert.deepStrictEqual(fromBatch(answer), alone[i % recipes.length], `${name} v${version} chunked input ${i}`);
    });
    for (const answer of alone) counts[answer.error === undefined ? 'decided' : 'failed'] += 1;
  }
  assert.ok(counts.decided > CASES / 4 && counts.failed > CASES / 10, JSON.stringify(counts));
});

test('validation, normalization and the fingerprint agree on generated events', () => {
  const rng = random(SEED + 1);
  for (const [name, version] of BUILTINS) {
    const ruleSet = RuleSet.builtin(name, { version });
    for (let i = 0; i < 600; i += 1) {
      const { event } = recipe(rng, ruleSet)();
      const validated = answerOf(() => validateEvent(event, { ruleSet }));
      const normalized = answerOf(() => normalizeEvent(event, { ruleSet }));
      const fingerprinted = answerOf(() => fingerprint(event, { ruleSet }));
      assert.deepStrictEqual(normalized.error, validated.error, `${name} v${version}`);
      assert.deepStrictEqual(fingerprinted.error, validated.error, `${name} v${version}`);
      if (validated.error === undefined) {
        // A normalized copy is a plain event of the same meaning.
        assert.equal(Object.getPrototypeOf(normalized.decision), Object.prototype);
        assert.equal(fingerprint(normalized.decision, { ruleSet }), fingerprinted.decision);
        assert.deepStrictEqual(normalizeEvent(normalized.decision, { ruleSet }), normalized.decision);
      }
    }
  }
});
