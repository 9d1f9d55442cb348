// fast-check properties over hostile values: whatever a caller passes to the
// package's entry points, each call returns or throws an IdemflowError with a
// known code (never a TypeError, a raw getter error or a wasm trap), and the
// wasm memory stays within a fixed bound.

import assert from 'node:assert/strict';
import test from 'node:test';
import fc from 'fast-check';
import { decide, fingerprint, IdemflowError, normalizeEvent, RuleSet, validateEvent, verifyRuleSet } from 'idemflow';
import { shipmentDefinition } from '../workers/fixtures.mjs';
import { wasmMemoryBytes } from '../workers/wasm-memory.mjs';

const RUNS = Number(process.env.IDEMFLOW_PROPERTY_RUNS ?? 300);
const FIELDS = [
  'eventId',
  'workflowId',
  'type',
  'depositRef',
  'amountUnits',
  'payoutUnits',
  'payoutRef',
  'sequence',
  'id',
  'status',
  'revision',
  'fingerprint',
  'ruleSet',
];
const TYPES = [
  'DEPOSIT_DETECTED',
  'DEPOSIT_CONFIRMED',
  'EXCHANGE_COMPLETED',
  'PAYOUT_CONFIRMED',
  'DEADLINE_PASSED',
  'DEPOSIT_REVERSED',
  'SHIPMENT_REQUESTED',
];
const STATUSES = ['waiting', 'deposit', 'exchange', 'sending', 'success', 'overdue', 'review', 'shipping'];

/** Any UTF-16 string, lone surrogates included. */
const utf16 = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u)), maxLength: 40 });
const loneSurrogate = fc
  .tuple(fc.string({ maxLength: 8 }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.string({ maxLength: 8 }))
  .map(([a, u, b]) => `${a}${String.fromCharCode(u)}${b}`);
const plausible = fc.oneof(
  fc.constantFrom(...TYPES, ...STATUSES, 'swap-42', 'evt-1', '12500000', '0', '012', 'fp1:00', ''),
  fc.bigInt({ min: 1n, max: 10n ** 80n }).map(String),
);

/** A value to put where a field goes: JSON, near-valid text, or JS-only hazards. */
const { value: hostileValue } = fc.letrec((tie) => ({
  value: fc.oneof(
    { depth: 2, withCrossShrink: true },
    plausible,
    utf16,
    loneSurrogate,
    fc.jsonValue({ maxDepth: 2 }),
    fc.constantFrom(undefined, null, NaN, -0, Infinity, 10n, Symbol('s'), () => 1, new String('x'), new Date(0)),
    tie('object'),
  ),
  object: fc
    .tuple(
      fc.dictionary(fc.constantFrom(...FIELDS), tie('value'), { maxKeys: 8 }),
      fc.constantFrom('plain', 'inherited', 'throwing-getter', 'proxy', 'revoked', 'null-prototype', 'array'),
      fc.constantFrom(...FIELDS),
    )
    .map(([members, shape, key]) => shaped(members, shape, key)),
}));

// fast-check inspects generated values (to print and clone them), and a
// revoked proxy or a throwing getter would break fast-check itself: the
// arbitraries make plain descriptions, and `build` makes the hostile object
// inside the property.
const SHAPE = Symbol('shape');

function shaped(members, shape, key) {
  return { [SHAPE]: { members, shape, key } };
}

function build(value) {
  if (value === null || typeof value !== 'object' || value instanceof String || value instanceof Date) return value;
  if (Array.isArray(value)) return value.map(build);
  const description = value[SHAPE];
  if (description === undefined) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, build(v)]));
  const members = Object.fromEntries(Object.entries(description.members).map(([k, v]) => [k, build(v)]));
  const { shape, key } = description;
  switch (shape) {
    case 'inherited':
      return Object.create(members);
    case 'throwing-getter':
      return Object.defineProperty({ ...members }, key, {
        get() {
          throw new Error(`getter ${key}`);
        },
      });
    case 'proxy':
      return new Proxy(members, {
        get(target, k) {
          if (k === key) throw new Error('trap');
          return target[k];
        },
      });
    case 'revoked': {
      const p = Proxy.revocable(members, {});
      p.revoke();
      return p.proxy;
    }
    case 'null-prototype':
      return Object.assign(Object.create(null), members);
    case 'array':
      return Object.assign([], members);
    default:
      return members;
  }
}

/** An event: usually most of a valid one, some fields replaced by hostile values. */
const eventLike = fc
  .tuple(
    fc.record(
      {
        eventId: fc.oneof(fc.constant('evt-1'), hostileValue),
        workflowId: fc.oneof(fc.constant('swap-42'), hostileValue),
        type: fc.oneof(fc.constantFrom(...TYPES), hostileValue),
        depositRef: fc.oneof(fc.constant('btc:tx:0'), hostileValue),
        amountUnits: fc.oneof(fc.constant('12500000'), hostileValue),
        sequence: fc.oneof(fc.constant(1), hostileValue), // the chain watcher's number (deposit-swap v3)
      },
      { requiredKeys: [] },
    ),
    fc.constantFrom('plain', 'plain', 'inherited', 'throwing-getter', 'proxy', 'revoked', 'null-prototype'),
    fc.constantFrom(...FIELDS),
  )
  .map(([members, shape, key]) => shaped(members, shape, key));

const recordLike = fc.oneof(
  fc.constant(null),
  hostileValue,
  fc.record(
    {
      id: fc.oneof(fc.constant('swap-42'), hostileValue),
      status: fc.oneof(fc.constantFrom(...STATUSES), hostileValue),
      revision: fc.oneof(fc.nat(), hostileValue),
      fingerprint: fc.oneof(fc.constant(`fp1:${'0'.repeat(64)}`), hostileValue),
      depositRef: hostileValue,
      amountUnits: hostileValue,
    },
    { requiredKeys: [] },
  ),
);

const ruleSetOption = fc.oneof(fc.constant(undefined), fc.constantFrom('deposit-swap', 'order-shipment', 'nope'), hostileValue);

function base() {
  return shipmentDefinition('prop');
}

/** A definition: arbitrary JSON, or a valid one with one part replaced. */
const definitionLike = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  utf16,
  fc
    .tuple(
      fc.constantFrom('id', 'version', 'statuses', 'events', 'rules', 'fields', 'otherwise', 'description'),
      fc.oneof(
        fc.jsonValue({ maxDepth: 3 }),
        fc.array(fc.constantFrom('*', '(none)', 'shipping', 'SHIPMENT_REQUESTED'), { maxLength: 600 }),
      ),
    )
    .map(([key, value]) => ({ ...base(), [key]: value })),
  fc.tuple(fc.constantFrom('on', 'in', 'then', 'guard'), fc.jsonValue({ maxDepth: 3 })).map(([key, value]) => {
    const d = base();
    d.rules[1][key] = value;
    return d;
  }),
  hostileValue,
);

function answersOrCodedError(fn) {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof IdemflowError, `threw a non-IdemflowError: ${error?.stack}`);
    assert.ok(Object.hasOwn(IdemflowError.codes, error.code), `unknown code ${error.code}`);
    assert.ok(['reject', 'retry', 'reconcile', 'fatal'].includes(error.disposition), error.disposition);
  }
}

const settled = () => wasmMemoryBytes();
let before;

test('warm up: the memory bound is measured from a used module', () => {
  const event = { eventId: 'e', workflowId: 'w', type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '1', sequence: 1 };
  for (let i = 0; i < 1000; i += 1) answersOrCodedError(() => decide({ event, receipt: null, workflow: null }));
  before = settled();
});

test('validateEvent, normalizeEvent and fingerprint answer any event and options with a result or an IdemflowError', () => {
  fc.assert(
    fc.property(eventLike, ruleSetOption, (eventDescription, ruleSetDescription) => {
      const [event, ruleSet] = [build(eventDescription), build(ruleSetDescription)];
      answersOrCodedError(() => validateEvent(event, { ruleSet }));
      answersOrCodedError(() => normalizeEvent(event, { ruleSet, type: 'DEPOSIT_CONFIRMED' }));
      answersOrCodedError(() => fingerprint(event, { ruleSet }));
    }),
    { numRuns: RUNS },
  );
});

test('decide answers any event, receipt, workflow and input object with a result or an IdemflowError', () => {
  fc.assert(
    fc.property(
      eventLike,
      recordLike,
      recordLike,
      ruleSetOption,
      fc.constantFrom('plain', 'inherited', 'throwing-getter', 'proxy', 'revoked'),
      fc.constantFrom('event', 'receipt', 'workflow', 'ruleSet'),
      (event, receipt, workflow, ruleSet, shape, key) => {
        const input = build(shaped({ event, receipt, workflow, ruleSet }, shape, key));
        answersOrCodedError(() => decide(input));
      },
    ),
    { numRuns: RUNS },
  );
});

test('RuleSet.fromJSON and verifyRuleSet answer any definition with a rule set or an IdemflowError', () => {
  fc.assert(
    fc.property(definitionLike, (description) => {
      const definition = build(description);
      answersOrCodedError(() => RuleSet.fromJSON(definition));
      answersOrCodedError(() => verifyRuleSet(definition));
      let text;
      try {
        text = JSON.stringify(definition);
      } catch {
        text = '{';
      }
      answersOrCodedError(() => RuleSet.fromJSON(typeof text === 'string' ? text : 'null'));
    }),
    { numRuns: RUNS },
  );
});

test('after every property the wasm memory is within a fixed bound and a valid decision still works', () => {
  const grown = settled() - before;
  assert.ok(grown <= 16 * 2 ** 20, `wasm memory grew by ${(grown / 2 ** 20).toFixed(1)} MiB`);
  const event = { eventId: 'e', workflowId: 'w', type: 'DEPOSIT_DETECTED', depositRef: 'r', amountUnits: '1', sequence: 1 };
  const decision = decide({ event, receipt: null, workflow: { id: 'w', status: 'waiting', revision: 1 } });
  assert.equal(decision.outcome, 'applied');
});
