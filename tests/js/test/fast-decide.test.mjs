// The fast decide path (js/core/fast.cjs over src/batch.rs) against the wasm
// `decide` it stands in for, on generated inputs: every built-in rule set,
// every status, duplicates and conflicting receipts, stale and mismatched
// workflows, and hostile values (getters, proxies, lone surrogates, numbers
// for strings, huge strings, unusual objects). Each input is built twice, so
// each path gets its own objects; both must give the same decision (and the
// same JSON, key order included) or throw the same error (code, disposition,
// details, message), and any caller code (a getter, a proxy trap) must run
// the same way in both.
//
// IDEMFLOW_PKG=<dir> tests a built pkg/ directory instead of the installed package.
import { test } from 'node:test';
import { deepStrictEqual, strictEqual, ok } from 'node:assert';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { random } from '../workers/broker.mjs';

const require = createRequire(import.meta.url);
const root = process.env.IDEMFLOW_PKG ?? path.dirname(require.resolve('idemflow/package.json'));
// The wasm module as the package loads it: core/wasm.cjs is its one route to it.
const { bindings: wasm } = require(path.join(root, 'core', 'wasm.cjs'));
const { createFastDecider } = require(path.join(root, 'core', 'fast.cjs'));

const SEED = Number(process.env.FAST_DECIDE_SEED ?? 20261130);
const CASES = Number(process.env.FAST_DECIDE_CASES ?? 14_000);

const BUILTINS = [['deposit-swap', 1], ['deposit-swap', 2], ['order-shipment', 1], ['order-shipment', 2], ['subscription', 1]];
const ruleSets = BUILTINS.map(([name, version]) => {
  const compiled = wasm.builtinRuleSet(name, version);
  const definition = JSON.parse(compiled.definitionJson());
  return { name: `${name}@${version}`, compiled, definition };
});

/** What a call did: its result, or the error it threw, as comparable data. */
function outcomeOf(fn) {
  try {
    const value = fn();
    return { value, json: JSON.stringify(value) };
  } catch (error) {
    if (!(error instanceof Error)) return { thrown: String(error) };
    return {
      error: {
        name: error.name,
        message: error.message,
        code: error.idemflowCode,
        disposition: error.disposition,
        details: error.details,
      },
    };
  }
}

const errorOf = (e) =>
  e instanceof Error
    ? { name: e.name, message: e.message, code: e.idemflowCode, disposition: e.disposition, details: e.details }
    : { thrown: String(e) };

/** Stored results `decide` refuses or reads unusually: each must answer (or throw) as it does. */
const RESULT_HOSTILE = [
  'extra-key', 'ids-not-array', 'empty-id', 'number-id', 'lone-surrogate-id', 'hole', 'status-number', 'status-lone',
  'revision-negative', 'revision-fraction', 'revision-huge', 'revision-string', 'revision-minus-zero', 'revision-nan',
  'hidden-ids', 'getter', 'id-getter', 'array', 'string', 'to-json', 'too-long', 'class', 'proxy', 'bigint', 'null-proto',
];

/** A stored receipt's result of kind `kind` (see RESULT_HOSTILE), built afresh; `log` records caller code. */
function storedResult({ result: kind, ids, status, revision }, log) {
  const plain = { operationIds: [...ids] };
  if (status !== undefined) plain.status = status;
  if (revision !== undefined) plain.revision = revision;
  switch (kind) {
    case 'plain': return plain;
    case 'null': return null;
    case 'extra-key': return { ...plain, note: 'kept?' };
    case 'ids-not-array': return { ...plain, operationIds: 'a' };
    case 'empty-id': return { ...plain, operationIds: [''] };
    case 'number-id': return { ...plain, operationIds: [1] };
    case 'lone-surrogate-id': return { ...plain, operationIds: ['op \ud800'] };
    case 'hole': return { ...plain, operationIds: [, 'a'] }; // eslint-disable-line no-sparse-arrays
    case 'status-number': return { ...plain, status: 4 };
    case 'status-lone': return { ...plain, status: '\udc00' };
    case 'revision-negative': return { ...plain, revision: -1 };
    case 'revision-fraction': return { ...plain, revision: 1.5 };
    case 'revision-huge': return { ...plain, revision: 2 ** 53 };
    case 'revision-string': return { ...plain, revision: '3' };
    case 'revision-minus-zero': return { ...plain, revision: -0 };
    case 'revision-nan': return { ...plain, revision: NaN };
    case 'hidden-ids': return Object.defineProperty({ ...plain }, 'operationIds', { enumerable: false });
    case 'getter': return Object.defineProperty({ ...plain }, 'status', { enumerable: true, get() { log.push('get result.status'); return 'sending'; } });
    case 'id-getter': return { ...plain, operationIds: Object.defineProperty([], 0, { enumerable: true, get() { log.push('get result.operationIds[0]'); return 'a'; } }) };
    case 'array': return [plain];
    case 'string': return JSON.stringify(plain);
    case 'to-json': return { ...plain, toJSON() { log.push('result.toJSON'); return plain; } };
    case 'too-long': return { ...plain, operationIds: Array.from({ length: 3000 }, (_, i) => `operation-${i}-${'x'.repeat(20)}`) };
    case 'class': return Object.assign(new (class Result {})(), plain);
    case 'proxy': return new Proxy(plain, { get(t, k, r) { log.push(`proxy get result.${String(k)}`); return Reflect.get(t, k, r); } });
    case 'bigint': return { ...plain, revision: 3n };
    case 'null-proto': return Object.assign(Object.create(null), plain);
    default: throw new Error(`no result kind ${kind}`);
  }
}

const TEXTS = ['ref-a', 'ref-b', 'btc-mainnet:tx-9f:vout-0', 'réf-☃', '😀-emoji', 'a"quote\\', '2026-11', 'spaced value'];
const UNITS = ['1', '250', '1000000', '99999999999999999999999999'];

/**
 * A generator of inputs. `recipe(rng)` draws every choice once and returns
 * `make(log)`, which builds fresh objects from those choices (with `log`
 * recording getter and proxy activity), so the two paths get equal inputs.
 */
function recipe(rng, ruleSet) {
  const pick = (items) => items[Math.floor(rng() * items.length)];
  const chance = (p) => rng() < p;
  const { definition } = ruleSet;
  const eventDef = pick(definition.events);
  const kinds = Object.fromEntries((definition.fields ?? []).map((f) => [f.name, f.kind]));
  const hostile = chance(0.3);

  const validValue = (field) => (kinds[field] === 'units' ? pick(UNITS) : pick(TEXTS));
  // A value that is mostly fine; in a hostile case sometimes anything at all.
  const HOSTILE = [
    () => ({ absent: true }),
    () => ({ value: null }),
    () => ({ value: undefined }),
    () => ({ value: '' }),
    () => ({ value: '   ' }),
    () => ({ value: '0' }),
    () => ({ value: 5 }),
    () => ({ value: -0 }),
    () => ({ value: true }),
    () => ({ value: 10n }),
    () => ({ value: Symbol('s') }),
    () => ({ value: ['a'] }),
    () => ({ value: { nested: 1 } }),
    () => ({ value: 'a\u0001b' }),
    () => ({ value: 'lone \ud800 high' }),
    () => ({ value: 'lone \udc00 low' }),
    () => ({ value: 'ends high \ud83d' }),
    () => ({ value: '\ude00 starts low' }),
    () => ({ value: 'real \ufffd replacement' }),
    () => ({ value: 'x'.repeat(513) }),
    () => ({ value: 'é'.repeat(300) }),
    () => ({ value: 'y'.repeat(100_000) }),
    () => ({ getter: 'value' }),
    () => ({ getter: 'throw' }),
    () => ({ getter: 'throw-string' }),
    () => ({ getter: 'throw-object' }),
  ];
  // Every choice is drawn here, never while building: a getter's value too.
  const hostileFor = (key) => {
    const spec = pick(HOSTILE)();
    if (spec.getter !== undefined) spec.of = key === 'type' ? eventDef.type : validValue(key);
    return spec;
  };
  const draw = (field, p = 0.12) => {
    if (hostile && chance(p)) return hostileFor(field);
    return { value: field === 'type' ? eventDef.type : validValue(field) };
  };

  const eventIds = ['evt-1', 'evt-2', 'watcher:evt-☃'];
  const workflowIds = ['wf-1', 'wf-2', 'wf 😀'];
  const event = [
    ['eventId', hostile && chance(0.1) ? hostileFor('eventId') : { value: pick(eventIds) }],
    ['type', hostile && chance(0.05) ? pick([{ value: 'NOPE' }, { value: 7 }, { getter: 'value', of: eventDef.type }]) : { value: eventDef.type }],
    ['workflowId', hostile && chance(0.1) ? hostileFor('workflowId') : { value: pick(workflowIds) }],
  ];
  for (const f of definition.fields ?? []) {
    // Undeclared fields too: decide never reads them.
    if ((eventDef.fields ?? []).includes(f.name) || chance(0.2)) event.push([f.name, draw(f.name)]);
  }
  if (chance(0.1)) event.push(['extra', { value: 'ignored' }]);
  if (hostile && chance(0.05)) event.reverse();
  const eventShape = hostile && chance(0.08) ? pick(['proxy', 'null-proto', 'class', 'inherited', 'array', 'string', 'buffer', 'null', 'frozen']) : 'plain';

  let receipt = null;
  if (chance(0.25)) {
    receipt = [];
    const idChoice = pick(['same', 'same', 'same', 'absent', 'other', 'number', 'null']);
    if (idChoice === 'same') receipt.push(['eventId', { sameAs: 'eventId' }]);
    if (idChoice === 'other') receipt.push(['eventId', { value: 'another-id' }]);
    if (idChoice === 'number') receipt.push(['eventId', { value: 7 }]);
    if (idChoice === 'null') receipt.push(['eventId', { value: null }]);
    const fp = pick(['right', 'right', 'right', 'wrong', 'malformed', 'upper', 'hostile']);
    receipt.push(['fingerprint', fp === 'hostile' && hostile ? hostileFor('fingerprint') : { fingerprint: fp }]);
    // What the first delivery produced (a duplicate answers it as original), as this version
    // writes it, as an older version left it (absent), or in a hostile case anything.
    const kept = pick(['plain', 'plain', 'plain', 'absent', 'null', ...(hostile ? RESULT_HOSTILE : [])]);
    if (kept !== 'absent') {
      receipt.push(['result', { result: kept, ids: pick([[], ['send-payout:wf-1'], ['a:1:wf', 'b:wf 😀']]), status: pick(['sending', null, undefined]), revision: pick([0, 3, null, undefined]) }]);
    }
    const outcome = hostile && chance(0.1) ? pick([{ value: 'duplicate-delivery' }, { value: 7 }, { absent: true }, { getter: 'value', of: 'applied' }]) : { value: pick(['applied', 'already-applied', 'stale']) };
    receipt.push(['outcome', outcome]);
    const recordedAt = hostile && chance(0.1) ? pick([-1, 1.5, '5', -0, 2 ** 53, NaN]) : pick([undefined, null, 0, 1_764_000_000_000]);
    if (recordedAt !== undefined) receipt.push(['recordedAt', { value: recordedAt }]);
  }
  const noReceipt = chance(0.5) ? null : undefined;
  const receiptShape = receipt && hostile && chance(0.1) ? pick(['proxy', 'array', 'string', 'null-proto']) : 'plain';

  let workflow = null;
  if (chance(0.85)) {
    const statuses = definition.statuses.map((s) => s.name);
    workflow = [
      ['id', chance(0.92) ? { sameAs: 'workflowId' } : { value: 'other-wf' }],
      ['status', chance(0.97) ? { value: pick(statuses) } : pick([{ value: 'nope' }, { value: 3 }, hostile ? { getter: 'value', of: statuses[0] } : { value: null }])],
      ['revision', chance(0.9) ? { value: pick([0, 1, 41]) } : { value: pick([-0, -1, 1.5, NaN, Infinity, 2 ** 53, 2 ** 53 - 1, '3', null]) }],
    ];
    for (const f of definition.fields ?? []) {
      const r = rng();
      if (r < 0.6) workflow.push([f.name, { sameAs: f.name }]);
      else if (r < 0.7) workflow.push([f.name, { copyOf: f.name }]);
      else if (r < 0.85) workflow.push([f.name, hostile ? draw(f.name, 0.3) : { value: validValue(f.name) }]);
      // else absent
    }
  }
  const workflowShape = workflow && hostile && chance(0.1) ? pick(['proxy', 'number', 'array', 'class', 'null-proto']) : 'plain';

  make.hostile = hostile;
  return make;

  function make(log, fingerprintOf) {
    const eventValues = {};
    const define = (target, entries, owner) => {
      for (const [key, spec] of entries) {
        if (spec.absent) continue;
        let value = spec.value;
        if (spec.result !== undefined) value = storedResult(spec, log);
        if (spec.sameAs !== undefined) value = eventValues[spec.sameAs];
        if (spec.copyOf !== undefined) value = typeof eventValues[spec.copyOf] === 'string' ? ` ${eventValues[spec.copyOf]}`.slice(1) : eventValues[spec.copyOf];
        if (spec.fingerprint !== undefined) {
          const right = fingerprintOf();
          value = {
            right,
            wrong: `fp1:${'0'.repeat(64)}`,
            malformed: 'fp1:xyz',
            upper: right === undefined ? undefined : right.toUpperCase(),
          }[spec.fingerprint];
        }
        if (spec.getter !== undefined) {
          const kind = spec.getter;
          const of = spec.of;
          Object.defineProperty(target, key, {
            enumerable: true,
            get() {
              log.push(`get ${owner}.${key}`);
              if (kind === 'throw') throw new Error(`boom ${key}`);
              if (kind === 'throw-string') throw `string ${key}`; // eslint-disable-line no-throw-literal
              if (kind === 'throw-object') throw { code: 1 }; // eslint-disable-line no-throw-literal
              return of;
            },
          });
          if (owner === 'event') eventValues[key] = of;
          continue;
        }
        target[key] = value;
        if (owner === 'event') eventValues[key] = value;
      }
      return target;
    };
    const shape = (entries, kind, owner) => {
      switch (kind) {
        case 'proxy': {
          const target = define({}, entries, owner);
          return new Proxy(target, {
            get(t, k, r) { log.push(`proxy get ${owner}.${String(k)}`); return Reflect.get(t, k, r); },
            getOwnPropertyDescriptor(t, k) { log.push(`proxy own ${owner}.${String(k)}`); return Reflect.getOwnPropertyDescriptor(t, k); },
            has(t, k) { log.push(`proxy has ${owner}.${String(k)}`); return Reflect.has(t, k); },
            getPrototypeOf(t) { log.push(`proxy proto ${owner}`); return Reflect.getPrototypeOf(t); },
          });
        }
        case 'null-proto': return define(Object.create(null), entries, owner);
        case 'class': return define(new (class Record {})(), entries, owner);
        case 'inherited': return Object.create(define({}, entries, owner));
        case 'frozen': return Object.freeze(define({}, entries, owner));
        case 'array': return define([], entries, owner);
        case 'string': define({}, entries, owner); return JSON.stringify({ eventId: 'x' });
        case 'buffer': define({}, entries, owner); return Buffer.from('{}');
        case 'number': return 42;
        case 'null': define({}, entries, owner); return null;
        default: return define({}, entries, owner);
      }
    };
    const e = shape(event, eventShape, 'event');
    const r = receipt === null ? noReceipt : shape(receipt, receiptShape, 'receipt');
    const w = workflow === null ? null : shape(workflow, workflowShape, 'workflow');
    return [e, r, w];
  }
}

/**
 * The wasm module with its `decide` counted: the fast path calls it only for
 * what it leaves to the slow path.
 */
function counted() {
  const module = { ...wasm, slowCalls: 0 };
  module.decide = (...args) => {
    module.slowCalls += 1;
    return wasm.decide(...args);
  };
  return module;
}

/** The fingerprint `decide` gives the event (for receipts that should match). */
function fingerprintOf(compiled, make) {
  const [event] = make([], () => undefined);
  try {
    return wasm.fingerprint(compiled, event);
  } catch {
    return undefined;
  }
}

function compareOne(fast, ruleSet, make, label, module) {
  const right = () => fingerprintOf(ruleSet.compiled, make);
  const slowLog = [];
  const [e1, r1, w1] = make(slowLog, right);
  const slow = outcomeOf(() => JSON.parse(wasm.decide(ruleSet.compiled, e1, r1, w1)));
  const fastLog = [];
  const [e2, r2, w2] = make(fastLog, right);
  const before = module?.slowCalls;
  const got = outcomeOf(() => fast.decide(ruleSet.compiled, e2, r2, w2));
  deepStrictEqual(got, slow, label);
  deepStrictEqual(fastLog, slowLog, `${label}: caller code ran differently`);
  // Plain inputs that decide are decided on the fast path, not left to the slow one.
  if (module && !make.hostile && slow.value) strictEqual(module.slowCalls, before, `${label}: left to the slow path`);
  return slow;
}

test(`fast decide equals wasm decide on ${CASES} generated inputs`, () => {
  const module = counted();
  const fast = createFastDecider(module);
  const rng = random(SEED);
  const tally = { decided: 0, errors: 0, outcomes: {} };
  for (let n = 0; n < CASES; n += 1) {
    const ruleSet = ruleSets[n % ruleSets.length];
    const make = recipe(rng, ruleSet);
    const result = compareOne(fast, ruleSet, make, `case ${n} (${ruleSet.name}, seed ${SEED})`, module);
    if (result.value) {
      tally.decided += 1;
      tally.outcomes[result.value.outcome] = (tally.outcomes[result.value.outcome] ?? 0) + 1;
    } else {
      tally.errors += 1;
    }
  }
  // Every kind of answer was compared, not only errors.
  for (const outcome of ['applied', 'already-applied', 'stale', 'duplicate-delivery']) ok(tally.outcomes[outcome] > 100, JSON.stringify(tally));
  ok(tally.errors > 1000, JSON.stringify(tally));
  ok(CASES - module.slowCalls > tally.decided * 0.7, `${module.slowCalls} of ${CASES} calls went to the slow path: ${JSON.stringify(tally)}`);
});

test('fast decideBatch equals wasm decide input by input, in batches of 1 to 300', () => {
  const module = counted();
  const fast = createFastDecider(module);
  const rng = random(SEED + 1);
  let compared = 0;
  let errors = 0;
  let round = 0;
  while (compared < CASES / 2) {
    const ruleSet = ruleSets[round % ruleSets.length];
    round += 1;
    const size = 1 + Math.floor(rng() * 300);
    const makes = Array.from({ length: size }, () => recipe(rng, ruleSet));
    const slowLog = [];
    const expected = makes.map((make) => {
      const [e, r, w] = make(slowLog, () => fingerprintOf(ruleSet.compiled, make));
      try {
        return { value: JSON.parse(wasm.decide(ruleSet.compiled, e, r, w)) };
      } catch (error) {
        errors += 1;
        return { error: errorOf(error) };
      }
    });
    const fastLog = [];
    const inputs = makes.map((make) => {
      const [event, receipt, workflow] = make(fastLog, () => fingerprintOf(ruleSet.compiled, make));
      return { event, receipt, workflow };
    });
    const slowBefore = module.slowCalls;
    const got = fast.decideBatch(ruleSet.compiled, inputs).map((result) =>
      Object.hasOwn(result, 'error') ? { error: errorOf(result.error) } : { value: result });
    deepStrictEqual(got, expected, `batch ${round} (${ruleSet.name}, seed ${SEED})`);
    for (let i = 0; i < size; i += 1) {
      if (got[i].value) strictEqual(JSON.stringify(got[i].value), JSON.stringify(expected[i].value));
    }
    deepStrictEqual(fastLog, slowLog, `batch ${round}: caller code ran differently`);
    const plainDecided = makes.filter((make, i) => !make.hostile && expected[i].value).length;
    ok(module.slowCalls - slowBefore <= size - plainDecided, `batch ${round}: plain inputs were left to the slow path`);
    compared += size;
  }
  ok(errors > 500 && errors < compared - 1000, `${errors} errors in ${compared}`);
});

test(`fast normalize equals wasm normalizeEvent on ${CASES / 2} generated events, with and without an expected type`, () => {
  const fast = createFastDecider(wasm);
  const rng = random(SEED + 2);
  const tally = { valid: 0, errors: 0, fast: 0, plainValid: 0 };
  for (let n = 0; n < CASES / 2; n += 1) {
    const ruleSet = ruleSets[n % ruleSets.length];
    const make = recipe(rng, ruleSet);
    const types = ruleSet.definition.events.map((e) => e.type);
    const type = rng() < 0.3 ? (rng() < 0.8 ? types[Math.floor(rng() * types.length)] : 'NOT_A_TYPE') : undefined;
    const label = `case ${n} (${ruleSet.name}, type ${type}, seed ${SEED})`;
    const slowLog = [];
    const [slowEvent] = make(slowLog, () => fingerprintOf(ruleSet.compiled, make));
    const slow = outcomeOf(() => JSON.parse(wasm.normalizeEvent(ruleSet.compiled, slowEvent, type)));
    const fastLog = [];
    const [fastEvent] = make(fastLog, () => fingerprintOf(ruleSet.compiled, make));
    let answered = false;
    const got = outcomeOf(() => {
      const quick = fast.normalize(ruleSet.compiled, fastEvent, type);
      answered = quick !== undefined;
      return quick ?? JSON.parse(wasm.normalizeEvent(ruleSet.compiled, fastEvent, type));
    });
    // The same object, the same JSON (key order included), or the same error; caller code ran alike.
    deepStrictEqual(got, slow, label);
    deepStrictEqual(fastLog, slowLog, `${label}: caller code ran differently`);
    if (slow.value) {
      tally.valid += 1;
      if (!make.hostile) tally.plainValid += 1;
    } else {
      tally.errors += 1;
      ok(!answered, `${label}: the fast path answered an event normalizeEvent refuses`);
    }
    if (answered) tally.fast += 1;
  }
  ok(tally.valid > 1000 && tally.errors > 500, JSON.stringify(tally));
  // Plain valid events are answered on the fast path.
  ok(tally.fast >= tally.plainValid * 0.9, JSON.stringify(tally));
});

test('a lone surrogate split across two strings is not mistaken for a pair', () => {
  const fast = createFastDecider(wasm);
  const ruleSet = ruleSets.find((r) => r.name === 'deposit-swap@2');
  // eventId, type, workflowId, depositRef are laid out one after the other:
  // "…\ud83d" then "\ude00…" would encode as one valid character.
  const make = () => [
    { eventId: 'evt-1', type: 'DEPOSIT_DETECTED', workflowId: 'wf\ud83d', depositRef: '\ude00ref', amountUnits: '5' },
    null,
    { id: 'wf\ud83d', status: 'waiting', revision: 0 },
  ];
  compareOne(fast, ruleSet, () => make(), 'split pair');
  const [event, , workflow] = make();
  strictEqual(outcomeOf(() => fast.decide(ruleSet.compiled, event, null, workflow)).error.code, 'INVALID_EVENT');
});

test('an inherited field is absent on both paths, even on a polluted Object.prototype', () => {
  const fast = createFastDecider(wasm);
  const ruleSet = ruleSets.find((r) => r.name === 'deposit-swap@2');
  const event = { eventId: 'evt-1', type: 'DEPOSIT_DETECTED', workflowId: 'wf-1', depositRef: 'r' };
  const workflow = { id: 'wf-1', status: 'waiting', revision: 0 };
  Object.prototype.amountUnits = '100'; // eslint-disable-line no-extend-native
  try {
    const slow = outcomeOf(() => JSON.parse(wasm.decide(ruleSet.compiled, event, null, workflow)));
    strictEqual(slow.error.code, 'INVALID_EVENT');
    deepStrictEqual(outcomeOf(() => fast.decide(ruleSet.compiled, event, null, workflow)), slow);
  } finally {
    delete Object.prototype.amountUnits;
  }
});

test('a getter that decides again while the slow path reads it gets the right answer', () => {
  const fast = createFastDecider(wasm);
  const ruleSet = ruleSets.find((r) => r.name === 'deposit-swap@2');
  const inner = { eventId: 'evt-2', type: 'DEADLINE_PASSED', workflowId: 'wf-2' };
  const innerWorkflow = { id: 'wf-2', status: 'waiting', revision: 3 };
  let innerResult;
  const event = {
    eventId: 'evt-1',
    type: 'DEADLINE_PASSED',
    get workflowId() {
      innerResult = fast.decide(ruleSet.compiled, inner, null, innerWorkflow);
      return 'wf-1';
    },
  };
  const batch = fast.decideBatch(ruleSet.compiled, [
    { event: inner, receipt: null, workflow: innerWorkflow },
    { event, receipt: null, workflow: { id: 'wf-1', status: 'waiting', revision: 0 } },
    { event: inner, receipt: null, workflow: innerWorkflow },
  ]);
  const expected = JSON.parse(wasm.decide(ruleSet.compiled, inner, null, innerWorkflow));
  deepStrictEqual(innerResult, expected);
  deepStrictEqual(batch[0], expected);
  deepStrictEqual(batch[2], expected);
  strictEqual(batch[1].outcome, 'applied');
  strictEqual(batch[1].writeSet.workflow.set.status, 'overdue');
});

test('two deciders over one module, and memory growth between calls, change no answer', () => {
  const a = createFastDecider(wasm);
  const b = createFastDecider(wasm);
  const ruleSet = ruleSets.find((r) => r.name === 'subscription@1');
  const inputs = Array.from({ length: 2000 }, (_, i) => ({
    event: { eventId: `evt-${i}`, type: 'RENEWAL_DUE', workflowId: `sub-${i}`, paidThrough: '2026-11', period: '2026-12', amountUnits: String(100 + i) },
    receipt: null,
    workflow: { id: `sub-${i}`, status: 'active', revision: i, paidThrough: '2026-11' },
  }));
  const expected = inputs.map(({ event, receipt, workflow }) => JSON.parse(wasm.decide(ruleSet.compiled, event, receipt, workflow)));
  deepStrictEqual(a.decideBatch(ruleSet.compiled, inputs.slice(0, 10)), expected.slice(0, 10));
  deepStrictEqual(b.decideBatch(ruleSet.compiled, inputs), expected);
  // Growing the memory detaches every view a decider holds: they must be made again.
  const memory = wasm.wasmMemory();
  const buffer = memory.buffer;
  memory.grow(1);
  ok(buffer.byteLength === 0, 'the old buffer is detached');
  deepStrictEqual(a.decideBatch(ruleSet.compiled, inputs.slice(10, 300)), expected.slice(10, 300));
  memory.grow(1);
  deepStrictEqual(a.decide(ruleSet.compiled, inputs[5].event, null, inputs[5].workflow), expected[5]);
  // Past the 1024 items laid out per call, and with holes the slow path answers.
  const many = [...inputs, ...inputs, null, { event: 'text' }, ...inputs];
  const results = a.decideBatch(ruleSet.compiled, many);
  deepStrictEqual(results.slice(0, 4000), [...expected, ...expected]);
  deepStrictEqual(results.slice(4002), expected);
  deepStrictEqual([results[4000].error.idemflowCode, results[4001].error.idemflowCode], ['INVALID_EVENT', 'INVALID_EVENT']);
  strictEqual(expected[7].writeSet.outbox[0].id, 'charge-renewal:8:sub-7');
});

test('a loaded (not built-in) rule set decides alike', () => {
  const fast = createFastDecider(wasm);
  const base = JSON.parse(wasm.builtinRuleSet('order-shipment', 2).definitionJson());
  const compiled = wasm.loadRuleSet(JSON.stringify(base));
  const ruleSet = { name: 'order-shipment (loaded)', compiled, definition: base };
  const rng = random(SEED + 2);
  for (let n = 0; n < 500; n += 1) compareOne(fast, ruleSet, recipe(rng, ruleSet), `loaded case ${n}`);
  compiled.free();
});

test('a scratch refuses a reservation past its limits without growing the memory', () => {
  const scratch = new wasm.DecideScratch();
  const before = wasm.memoryBytes();
  for (const [items, perItem, text] of [[2 ** 20, 17, 0], [16, 17, 2 ** 30], [16, 10_000, 0]]) {
    let thrown;
    try {
      scratch.reserve(items, perItem, text);
    } catch (error) {
      thrown = error;
    }
    strictEqual(thrown?.idemflowCode, 'INVALID_ARGUMENT');
  }
  strictEqual(wasm.memoryBytes(), before);
  scratch.free();
});

test('a rule set that is not one, or was freed, throws as wasm decide throws', () => {
  const fast = createFastDecider(wasm);
  const event = { eventId: 'evt-1', type: 'DEADLINE_PASSED', workflowId: 'wf-1' };
  const workflow = { id: 'wf-1', status: 'waiting', revision: 0 };
  const definition = wasm.builtinRuleSet('deposit-swap').definitionJson();
  const used = wasm.loadRuleSet(definition);
  fast.decide(used, event, null, workflow);
  used.free();
  const unused = wasm.loadRuleSet(definition);
  unused.free();
  for (const compiled of [undefined, null, {}, 'deposit-swap', used, unused]) {
    const slow = outcomeOf(() => JSON.parse(wasm.decide(compiled, event, null, workflow)));
    ok(slow.error, 'wasm decide throws');
    deepStrictEqual(outcomeOf(() => fast.decide(compiled, event, null, workflow)), slow);
    const [result] = fast.decideBatch(compiled, [{ event, receipt: null, workflow }]);
    deepStrictEqual({ error: errorOf(result.error) }, slow);
  }
});

test('the shared decision and validation vectors decide alike, one by one and as batches', () => {
  const module = counted();
  const fast = createFastDecider(module);
  const load = (name) => JSON.parse(readFileSync(new URL(`../../vectors/${name}.json`, import.meta.url), 'utf8')).cases;
  // A validation case's event with a workflow in its initial status, so a valid one decides.
  const cases = [
    ...load('decisions'),
    ...load('validation').map((c) => ({ ...c, receipt: null, workflow: null })),
    ...load('validation').map((c) => ({ ...c, receipt: null, workflow: { id: c.event?.workflowId, status: 'waiting', revision: 0 } })),
  ];
  const byRuleSet = new Map();
  let decided = 0;
  for (const c of cases) {
    const compiled = wasm.builtinRuleSet(c.ruleSet ?? 'deposit-swap', c.ruleSetVersion);
    const slow = outcomeOf(() => JSON.parse(wasm.decide(compiled, c.event, c.receipt, c.workflow)));
    const before = module.slowCalls;
    deepStrictEqual(outcomeOf(() => fast.decide(compiled, c.event, c.receipt, c.workflow)), slow, c.name);
    if (slow.value) {
      // Every vector that decides is plain data: decided on the fast path.
      strictEqual(module.slowCalls, before, `${c.name}: left to the slow path`);
      decided += 1;
    }
    const key = `${c.ruleSet ?? 'deposit-swap'}@${c.ruleSetVersion}`;
    if (!byRuleSet.has(key)) byRuleSet.set(key, { compiled, cases: [], expected: [] });
    byRuleSet.get(key).cases.push(c);
    byRuleSet.get(key).expected.push(slow.value ? { value: slow.value } : { error: slow.error });
  }
  for (const { compiled, cases: batch, expected } of byRuleSet.values()) {
    const got = fast.decideBatch(compiled, batch).map((r) => (Object.hasOwn(r, 'error') ? { error: errorOf(r.error) } : { value: r }));
    deepStrictEqual(got, expected);
  }
  ok(decided >= 88, `${decided} of ${cases.length} vectors decide`);
});

test('the package decides on the fast path: decide, processEvent and processBatch leave plain data to no slow call', async () => {
  const pkg = process.env.IDEMFLOW_PKG ? require(`${root}/`) : require('idemflow');
  const { decide: publicDecide, processEvent, processBatch, InMemoryStore } = pkg;
  const original = wasm.decide;
  const originalNormalize = wasm.normalizeEvent;
  let slowCalls = 0;
  wasm.decide = (...args) => {
    slowCalls += 1;
    return original(...args);
  };
  wasm.normalizeEvent = (...args) => {
    slowCalls += 1;
    return originalNormalize(...args);
  };
  try {
    const event = { eventId: 'e-1', workflowId: 'swap-1', type: 'DEPOSIT_CONFIRMED', depositRef: 'ref-a', amountUnits: '100' };
    const workflow = { id: 'swap-1', status: 'deposit', revision: 3, depositRef: 'ref-a', amountUnits: '100' };
    const decision = publicDecide({ event, receipt: null, workflow });
    strictEqual(decision.outcome, 'applied');
    deepStrictEqual(decision.writeSet.receipt.result, { operationIds: decision.writeSet.outbox.map((op) => op.id), status: 'exchange', revision: 4 });
    const store = new InMemoryStore([workflow, { ...workflow, id: 'swap-2' }]);
    const applied = await processEvent(store, event);
    strictEqual(applied.outcome, 'applied');
    const duplicate = await processEvent(store, event);
    deepStrictEqual(duplicate.original && { ...duplicate.original, decidedAt: typeof duplicate.original.decidedAt },
      { outcome: 'applied', operationIds: applied.operationIds, status: 'exchange', revision: 4, decidedAt: 'number' });
    const results = await processBatch(store, [
      { ...event, eventId: 'e-2', workflowId: 'swap-2' },
      { ...event, eventId: 'e-2', workflowId: 'swap-2' },
      { ...event, eventId: 'e-3' },
    ]);
    deepStrictEqual(results.map((r) => r.outcome), ['applied', 'duplicate-delivery', 'already-applied']);
    strictEqual(results[1].original.revision, 4);
    strictEqual(slowCalls, 0, 'plain data went to the slow path');
    // Anything unusual still goes to it, with its errors.
    await processEvent(store, { ...event, eventId: 'e-4', amountUnits: '7' }).then(() => ok(false), (error) => strictEqual(error.code, 'IDENTITY_MISMATCH'));
    ok(slowCalls > 0);
    // An invalid event is refused before any I/O: the store is never asked.
    let transactions = 0;
    const watched = { transaction: (fn) => { transactions += 1; return store.transaction(fn); } };
    await processEvent(watched, { ...event, amountUnits: 12.5 }).then(() => ok(false), (error) => strictEqual(error.code, 'INVALID_EVENT'));
    strictEqual(transactions, 0);
  } finally {
    wasm.decide = original;
    wasm.normalizeEvent = originalNormalize;
  }
});
