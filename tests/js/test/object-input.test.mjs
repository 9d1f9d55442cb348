// The JavaScript-only hazards of the object entry points (lone surrogates,
// getters, proxies, huge strings, values of every kind, leaks): the package
// reads a caller's objects (core/packed.cjs) and lays them out for the one
// decider, so these cases live here, where objects are read. They were
// tests/wasm.rs's while the binding read objects field by field.

import assert from 'node:assert/strict';
import test from 'node:test';
import { decide, fingerprint, IdemflowError, normalizeEvent, planDepositConfirmation, RuleSet, validateEvent } from 'idemflow';
import { detectedSwap, exchangingSwap, SEED_EVENT } from '../workers/fixtures.mjs';
import { wasmMemoryBytes } from '../workers/wasm-memory.mjs';

const seed = () => ({ ...SEED_EVENT });
// The seed's fingerprint under the default rule set (deposit-swap v3, which fingerprints its sequence):
// tests/vectors/fingerprint.json, "deposit-swap v3: the seed confirmation with its sequence".
const SEED_FINGERPRINT = 'fp1:d8e288dea415099a5dc24517655e59c8358a1b1154054650d2816742507359fa';
// The swap in `deposit`, as v3 stores it: its detection recorded sequence 1 in the deposits map, so the seed (sequence 2) applies.
const storedWorkflow = (extra = {}) => ({
  ...detectedSwap({ id: 'swap-42', revision: 2, depositRef: SEED_EVENT.depositRef, amountUnits: SEED_EVENT.amountUnits }),
  ...extra,
});
const decideOne = (event, receipt = null, workflow = null) => decide({ event, receipt, workflow });

function thrown(fn) {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error?.stack}`);
    return error;
  }
  assert.fail('did not throw');
}

function invalidEvent(fn, field) {
  const error = thrown(fn);
  assert.equal(error.code, 'INVALID_EVENT', error.message);
  assert.equal(error.disposition, 'reject');
  assert.equal(error.details.field, field, error.message);
  return error;
}

function invalidRecord(fn, record, field) {
  const error = thrown(fn);
  assert.equal(error.code, 'INVALID_RECORD', error.message);
  assert.equal(error.details.record, record);
  assert.equal(error.details.field, field, error.message);
  return error;
}

const throwingGetter = (target, key, message) =>
  Object.defineProperty(target, key, {
    get() {
      throw new Error(message);
    },
    enumerable: true,
  });

test('a value that is not an object is an INVALID_EVENT named event, on every entry point', () => {
  for (const value of [null, undefined, 5, '{"eventId":"e"}', true, [seed()]]) {
    invalidEvent(() => validateEvent(value), 'event');
    invalidEvent(() => fingerprint(value), 'event');
    invalidEvent(() => decideOne(value), 'event');
  }
});

test('a receipt or workflow that is neither an object nor null is INVALID_ARGUMENT (fatal)', () => {
  for (const [receipt, workflow] of [
    ['fp1:0', null],
    [undefined, 1],
    [null, [storedWorkflow()]],
    [Symbol('r'), null],
  ]) {
    const error = thrown(() => decide({ event: seed(), receipt, workflow }));
    assert.equal(error.code, 'INVALID_ARGUMENT', error.message);
    assert.equal(error.disposition, 'fatal');
  }
});

test('an amount given as a bigint is an INVALID_EVENT', () => {
  invalidEvent(() => fingerprint({ ...seed(), amountUnits: 12_500_000n }), 'amountUnits');
});

test('a revision that is NaN, infinite or fractional is an INVALID_RECORD', () => {
  for (const revision of [NaN, Infinity, -0.5]) {
    invalidRecord(() => decideOne(seed(), null, storedWorkflow({ revision })), 'workflow', 'revision');
  }
});

test('a lone surrogate in an event id is INVALID_EVENT, and the reason says so', () => {
  const error = invalidEvent(() => validateEvent({ ...seed(), eventId: '\ud800' }), 'eventId');
  assert.match(error.details.reason, /surrogate/);
});

test('a lone surrogate is not fingerprinted like U+FFFD, in an id or an identity field', () => {
  invalidEvent(() => fingerprint({ ...seed(), workflowId: 'swap-42-\ud800' }), 'workflowId');
  assert.match(fingerprint({ ...seed(), workflowId: 'swap-42-\ufffd' }), /^fp1:[0-9a-f]{64}$/);
  invalidEvent(() => fingerprint({ ...seed(), depositRef: 'btc:tx-\udc00' }), 'depositRef');
});

test('a lone surrogate next to a real U+FFFD is still refused; pairs and U+FFFD are accepted', () => {
  for (const depositRef of ['\ufffd\ud800', '\ud800\ufffd', '\ude00\ud83d', 'a\udfff']) {
    invalidEvent(() => validateEvent({ ...seed(), depositRef }), 'depositRef');
  }
  for (const depositRef of ['\ud83d\ude00', '\ufffd', '\ud800\udc00']) validateEvent({ ...seed(), depositRef });
});

test('two lone halves in adjacent strings are not taken for the pair they make together', () => {
  // Laid out one after the other, 'evt-\ud83d' and '\ude00-swap' encode as one well-formed pair.
  invalidEvent(() => validateEvent({ ...seed(), eventId: 'evt-\ud83d', workflowId: '\ude00-swap' }), 'eventId');
  invalidEvent(() => fingerprint({ ...seed(), workflowId: 'swap-\ud83d', depositRef: '\ude00-ref' }), 'workflowId');
});

test('a lone surrogate in the type is an INVALID_EVENT', () => {
  invalidEvent(() => fingerprint({ ...seed(), type: 'DEPOSIT_CONFIRMED\ud800' }), 'type');
});

test('a lone surrogate in a recorded field is an INVALID_RECORD', () => {
  // Exchanging, the swap records the deposit it acts on, and a newer deposit event reads that depositRef.
  const exchanging = exchangingSwap({ id: 'swap-42', revision: 4, depositRef: SEED_EVENT.depositRef, amountUnits: SEED_EVENT.amountUnits });
  const workflow = { ...exchanging, depositRef: 'btc-mainnet:tx-abc:vout-0\ud800' };
  invalidRecord(() => decideOne({ ...seed(), sequence: 1000 }, null, workflow), 'workflow', 'depositRef');
});

test('a getter that throws is an INVALID_EVENT for its field, with the message and the event id', () => {
  const event = throwingGetter(
    { eventId: 'e-1', workflowId: 'swap-42', type: 'DEPOSIT_CONFIRMED', amountUnits: '1' },
    'depositRef',
    'boom',
  );
  for (const call of [() => validateEvent(event), () => fingerprint(event), () => decideOne(event)]) {
    const error = invalidEvent(call, 'depositRef');
    assert.match(error.details.reason, /boom/);
    assert.equal(error.details.eventId, 'e-1');
  }
});

test('a throwing getter on a property the rules do not read is never touched', () => {
  assert.equal(fingerprint(throwingGetter(seed(), 'observedAt', 'must not be read')), SEED_FINGERPRINT);
});

test('with a receipt, a throwing getter on the workflow is never touched', () => {
  const receipt = { eventId: seed().eventId, fingerprint: SEED_FINGERPRINT };
  const workflow = throwingGetter(storedWorkflow(), 'status', 'must not be read');
  assert.equal(decideOne(seed(), receipt, workflow).outcome, 'duplicate-delivery');
});

test("a proxy whose get trap throws is an INVALID_EVENT with the trap's message", () => {
  const proxy = new Proxy(seed(), {
    get(_, key) {
      throw new Error(`trap for ${String(key)}`);
    },
  });
  const error = invalidEvent(() => fingerprint(proxy), 'eventId');
  assert.match(error.details.reason, /trap for eventId/);
});

test('a revoked proxy is an INVALID_EVENT as the event and an INVALID_RECORD as the workflow', () => {
  const { proxy, revoke } = Proxy.revocable(seed(), {});
  revoke();
  invalidEvent(() => fingerprint(proxy), 'eventId');
  invalidRecord(() => decideOne(seed(), null, proxy), 'workflow', 'id');
});

test('a throwing getter on a stored workflow is an INVALID_RECORD', () => {
  const workflow = throwingGetter({ id: 'swap-42', revision: 2 }, 'status', 'storage layer exploded');
  invalidRecord(() => decideOne(seed(), null, workflow), 'workflow', 'status');
});

test('a ten-megabyte string is an INVALID_EVENT that does not quote it, without growing the wasm memory', () => {
  thrown(() => fingerprint({ ...seed(), eventId: 'e'.repeat(600) })); // warm up
  const before = wasmMemoryBytes();
  for (const [field, unit] of [
    ['eventId', 'e'],
    ['workflowId', 'w'],
    ['depositRef', 'é'],
    ['amountUnits', '1'],
    ['type', 'T'],
  ]) {
    const event = { ...seed(), [field]: unit.repeat(10_000_000) };
    const error = invalidEvent(() => fingerprint(event), field);
    assert.ok(error.message.length < 1000, `${field}: the message does not quote the string`);
    invalidEvent(() => decideOne(event), field);
  }
  invalidRecord(() => decideOne(seed(), null, storedWorkflow({ status: 's'.repeat(10_000_000) })), 'workflow', 'status');
  const grown = wasmMemoryBytes() - before;
  assert.ok(grown <= 1 << 20, `memory grew by ${grown} bytes`);
});

test('ten thousand rejected calls of every kind do not grow the wasm memory', () => {
  const badWorkflow = { id: 'swap-42', status: 'archived', revision: 1 };
  const round = (i) => {
    switch (i % 9) {
      case 0:
        return () => fingerprint({ ...seed(), amountUnits: '012' });
      case 1:
        return () => validateEvent({ ...seed(), eventId: '\ud800' });
      case 2:
        return () => decideOne(throwingGetter(seed(), 'depositRef', 'boom'));
      case 3:
        return () => decideOne(seed(), null, badWorkflow);
      case 4:
        return () => decideOne(seed(), { fingerprint: 'fp1:0000' });
      case 5:
        return () => planDepositConfirmation(null, seed());
      case 6:
        return () => fingerprint(null);
      case 7:
        return () => RuleSet.fromJSON('{');
      default:
        return () => RuleSet.fromJSON({ id: 'x', version: 1, statuses: [], events: [], rules: [] });
    }
  };
  for (let i = 0; i < 900; i += 1) thrown(round(i));
  const before = wasmMemoryBytes();
  for (let i = 0; i < 10_000; i += 1) thrown(round(i));
  assert.equal(wasmMemoryBytes(), before, 'rejected calls grew wasm memory');
});

test('accepted calls do not grow the wasm memory either', () => {
  const event = seed();
  const workflow = storedWorkflow();
  for (let i = 0; i < 500; i += 1) decideOne(event, null, workflow);
  const before = wasmMemoryBytes();
  for (let i = 0; i < 10_000; i += 1) {
    assert.equal(decideOne(event, null, workflow).outcome, 'applied');
    assert.equal(fingerprint(event), SEED_FINGERPRINT);
  }
  assert.equal(wasmMemoryBytes(), before, 'accepted calls grew wasm memory');
});

test('a getter that decides again while its own event is read gets the right answers, both of them', () => {
  const inner = seed();
  let innerDecision;
  const outer = {
    ...seed(),
    eventId: 'chain-watcher:event-002',
    get depositRef() {
      innerDecision = decideOne(inner, null, storedWorkflow());
      return 'btc-mainnet:tx-abc:vout-0';
    },
  };
  const decision = decideOne(outer, null, storedWorkflow());
  assert.equal(decision.eventId, 'chain-watcher:event-002');
  assert.equal(decision.outcome, 'applied');
  assert.equal(innerDecision.eventId, 'chain-watcher:event-001');
  assert.equal(innerDecision.fingerprint, SEED_FINGERPRINT);
});

test('where generated code is forbidden, values are read by loops, to the same answers', async () => {
  const { execFileSync } = await import('node:child_process');
  const script = `
    const { decide, normalizeEvent } = require('idemflow');
    const event = { eventId: 'chain-watcher:event-001', workflowId: 'swap-42', type: 'DEPOSIT_CONFIRMED', depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000', sequence: 2 };
    const workflow = { id: 'swap-42', status: 'deposit', revision: 2, deposits: { [event.depositRef]: { event: 'DEPOSIT_DETECTED', amountUnits: event.amountUnits, sequence: 1 } } };
    const broken = Object.defineProperty({ ...event }, 'depositRef', { get() { throw new Error('boom'); } });
    let refused;
    try { decide({ event: broken, receipt: null, workflow }); } catch (error) { refused = { code: error.code, details: error.details }; }
    let generated = true;
    try { new Function('return 1'); } catch { generated = false; }
    console.log(JSON.stringify({ generated, decision: decide({ event, receipt: null, workflow }), normalized: normalizeEvent(event), refused }));
  `;
  const out = JSON.parse(execFileSync(process.execPath, ['--disallow-code-generation-from-strings', '-e', script], { encoding: 'utf8' }));
  assert.equal(out.generated, false, 'the child could generate code');
  const event = seed();
  assert.deepEqual(out.decision, decideOne(event, null, storedWorkflow()));
  assert.deepEqual(out.normalized, normalizeEvent(event));
  const error = invalidEvent(() => decideOne(throwingGetter(seed(), 'depositRef', 'boom'), null, storedWorkflow()), 'depositRef');
  assert.deepEqual(out.refused, { code: error.code, details: error.details });
});
