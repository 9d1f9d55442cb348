// Anything at all can be passed in: the answer is a coded error or a result,
// never a panic, a hang or an uncaught wasm trap, and rejected calls do not
// make the wasm memory grow.

import assert from 'node:assert/strict';
import test from 'node:test';
import { decide, fingerprint, IdemflowError, validateEvent } from 'idemflow';
import { detectedSwap, SEED_EVENT } from '../workers/fixtures.mjs';
import { wasmMemoryBytes } from '../workers/wasm-memory.mjs';

const event = SEED_EVENT;

function rejected(input) {
  try {
    validateEvent(input);
  } catch (error) {
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error?.stack}`);
    return error;
  }
  assert.fail(`accepted ${String(input)}`);
}

const hostile = [
  ['undefined', undefined, 'event'],
  ['null', null, 'event'],
  ['a number', 42, 'event'],
  ['a string', 'DEPOSIT_CONFIRMED', 'event'],
  ['an array', [event], 'event'],
  ['a function', () => event, 'event'],
  ['a symbol', Symbol('event'), 'event'],
  ['a bigint', 10n, 'event'],
  ['an empty object', {}, 'eventId'],
  ['a JSON-parsed __proto__ key', JSON.parse('{"__proto__": {"eventId": "x"}, "type": "DEPOSIT_CONFIRMED"}'), 'eventId'],
  [
    'a getter that throws',
    Object.defineProperty({ ...event }, 'depositRef', {
      get() {
        throw new Error('boom');
      },
    }),
    'depositRef',
  ],
  [
    'a getter that throws a string',
    Object.defineProperty({ ...event }, 'eventId', {
      get() {
        throw 'nope';
      },
    }),
    'eventId',
  ],
  [
    'a revoked proxy',
    (() => {
      const p = Proxy.revocable({}, {});
      p.revoke();
      return p.proxy;
    })(),
    'eventId',
  ],
  ['a 10 MB eventId', { ...event, eventId: 'x'.repeat(10 * 1024 * 1024) }, 'eventId'],
  ['a 10 MB amount', { ...event, amountUnits: '1'.repeat(10 * 1024 * 1024) }, 'amountUnits'],
  ['a lone high surrogate', { ...event, eventId: 'evt-\uD800' }, 'eventId'],
  ['a lone low surrogate', { ...event, depositRef: '\uDC00tx' }, 'depositRef'],
  ['amount as a number', { ...event, amountUnits: 12500000 }, 'amountUnits'],
  ['amount as a float string', { ...event, amountUnits: '1.5' }, 'amountUnits'],
  ['amount with a leading zero', { ...event, amountUnits: '012' }, 'amountUnits'],
  ['amount zero', { ...event, amountUnits: '0' }, 'amountUnits'],
  ['amount of 79 digits', { ...event, amountUnits: '1'.repeat(79) }, 'amountUnits'],
  ['a whitespace-only workflowId', { ...event, workflowId: ' \t ' }, 'workflowId'],
  ['a control character', { ...event, depositRef: 'tx\u0000' }, 'depositRef'],
  ['DEL', { ...event, depositRef: 'tx\u007f' }, 'depositRef'],
  ['a String object', { ...event, eventId: new String('evt') }, 'eventId'],
  ['an unknown type', { ...event, type: 'DEPOSIT_CONFIRMED ' }, 'type'],
  ['a nested object as a field', { ...event, depositRef: { ref: 'x' } }, 'depositRef'],
];

for (const [name, input, field] of hostile) {
  test(`${name} is INVALID_EVENT naming ${field}`, () => {
    const error = rejected(input);
    assert.equal(error.code, 'INVALID_EVENT');
    assert.equal(error.disposition, 'reject');
    assert.equal(error.details.field, field);
  });
}

test('a lone surrogate and U+FFFD never share a fingerprint', () => {
  const replaced = { ...event, depositRef: 'tx-\uFFFD' };
  assert.match(fingerprint(replaced), /^fp1:[0-9a-f]{64}$/);
  assert.equal(rejected({ ...event, depositRef: 'tx-\uD83D' }).details.field, 'depositRef');
});

test('a surrogate pair (an emoji) is well-formed and accepted', () => {
  assert.match(fingerprint({ ...event, depositRef: 'tx-🦀' }), /^fp1:[0-9a-f]{64}$/);
});

test('a getter on an unrelated property is never read', () => {
  const watched = Object.defineProperty({ ...event }, 'unrelated', {
    get() {
      throw new Error('read');
    },
    enumerable: true,
  });
  assert.doesNotThrow(() => validateEvent(watched));
});

test('bad stored records and arguments to decide are coded errors', () => {
  const workflow = detectedSwap({ id: 'swap-42', revision: 3, depositRef: event.depositRef, amountUnits: event.amountUnits });
  const cases = [
    [{ event, receipt: 'nope', workflow }, 'INVALID_ARGUMENT'],
    [{ event, receipt: { fingerprint: 42 }, workflow }, 'INVALID_RECORD'],
    [{ event, receipt: null, workflow: { ...workflow, revision: -1 } }, 'INVALID_RECORD'],
    [{ event, receipt: null, workflow: { ...workflow, revision: 1.5 } }, 'INVALID_RECORD'],
    [{ event, receipt: null, workflow: { ...workflow, revision: '3' } }, 'INVALID_RECORD'],
    [{ event, receipt: null, workflow: { ...workflow, status: 'lost' } }, 'INVALID_RECORD'],
    [{ event, receipt: null, workflow: { ...workflow, id: 'swap-43' } }, 'INVALID_ARGUMENT'],
    [{ event, receipt: null, workflow: [workflow] }, 'INVALID_ARGUMENT'],
    [{ event, receipt: null, workflow: { ...workflow, revision: 2 ** 53 - 1 } }, 'INVALID_RECORD'],
    [null, 'INVALID_EVENT'],
  ];
  for (const [input, code] of cases) {
    assert.throws(
      () => decide(input),
      (error) => error instanceof IdemflowError && error.code === code,
      JSON.stringify(input),
    );
  }
});

test('100,000 rejected calls leave the wasm memory within a fixed bound, and a valid call still works', () => {
  const inputs = [
    null,
    { ...event, amountUnits: 12500000 },
    { ...event, eventId: 'evt-\uD800' },
    { ...event, depositRef: 'x'.repeat(600) },
    Object.defineProperty({ ...event }, 'depositRef', {
      get() {
        throw new Error('boom');
      },
    }),
    { ...event, type: 'NOPE' },
  ];
  // Warm up so one-time allocations (rule set, interned strings) are not counted.
  for (const input of inputs) assert.throws(() => validateEvent(input));
  const before = wasmMemoryBytes();
  for (let i = 0; i < 100_000; i += 1) {
    try {
      if (i % 2 === 0) validateEvent(inputs[i % inputs.length]);
      else decide({ event: inputs[i % inputs.length], receipt: null, workflow: null });
      assert.fail('accepted a bad input');
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
    }
  }
  const grown = wasmMemoryBytes() - before;
  assert.ok(grown <= 64 * 1024, `wasm memory grew by ${grown} bytes over 100,000 rejected calls`);
  assert.match(fingerprint(event), /^fp1:[0-9a-f]{64}$/);
});
