// RFC 8785 from JavaScript (layer 3 of tests/vectors/jcs): canonicalJson and
// fingerprintPayload of any JSON value, and of JSON text as received.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import test from 'node:test';
import { canonicalJson, canonicalJsonText, fingerprintPayload, fingerprintPayloadText, IdemflowError } from 'idemflow';
import { random } from '../workers/broker.mjs';
import { wasmMemoryBytes } from '../workers/wasm-memory.mjs';

const vectors = new URL('../../vectors/jcs/', import.meta.url);
const FILES = ['arrays', 'french', 'structures', 'unicode', 'values', 'weird'];
const read = (part) => readFileSync(new URL(part, vectors));

function refused(fn, path, words) {
  assert.throws(fn, (error) => {
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error}`);
    assert.equal(error.code, 'INVALID_PAYLOAD');
    assert.equal(error.disposition, 'reject');
    if (path !== undefined) assert.equal(error.details.path, path, error.message);
    if (words !== undefined) assert.match(error.message, words);
    return true;
  });
}

for (const name of FILES) {
  test(`RFC 8785 test file ${name}: as text, as bytes and as the value JSON.parse makes`, () => {
    const input = read(`input/${name}.json`);
    const output = read(`output/${name}.json`).toString('utf8');
    assert.equal(canonicalJsonText(input.toString('utf8')), output);
    assert.equal(canonicalJsonText(input), output, 'a Buffer of UTF-8');
    assert.equal(canonicalJsonText(input.buffer.slice(input.byteOffset, input.byteOffset + input.length)), output, 'an ArrayBuffer');
    assert.equal(canonicalJson(JSON.parse(input.toString('utf8'))), output);
  });
}

test('number vectors: every double as Number::toString writes it, NaN and the infinities refused', () => {
  const view = new DataView(new ArrayBuffer(8));
  for (const c of JSON.parse(read('numbers.json')).cases) {
    view.setBigUint64(0, BigInt(`0x${c.bits}`));
    const x = view.getFloat64(0);
    if (c.error) {
      refused(() => canonicalJson(x), '$', /finite/);
      refused(() => canonicalJson({ n: [x] }), '$.n[0]');
    } else {
      assert.equal(canonicalJson(x), c.text, c.bits);
      assert.equal(canonicalJson({ n: [x] }), `{"n":[${c.text}]}`);
      assert.equal(canonicalJsonText(c.text), c.text);
    }
  }
});

test('random doubles and every spelling of them are written as JSON.stringify writes them', () => {
  const rand = random(8785);
  const view = new DataView(new ArrayBuffer(8));
  for (let i = 0; i < 50_000; i += 1) {
    view.setUint32(0, Math.floor(rand() * 2 ** 32));
    view.setUint32(4, Math.floor(rand() * 2 ** 32));
    const x = view.getFloat64(0);
    if (!Number.isFinite(x)) continue;
    const expected = JSON.stringify(x);
    assert.equal(canonicalJson(x), expected);
    // The same double spelt otherwise in the text: an exponent form with more digits.
    assert.equal(canonicalJsonText(`[${x.toExponential(20)}]`), `[${expected}]`, `${x.toExponential(20)}`);
  }
});

test('a payload fingerprint is pf1: and the SHA-256 of the canonical text, whatever the spelling', () => {
  const canonical = '{"amount":"125.00","items":[1,2.5,true],"note":"é"}';
  const expected = `pf1:${createHash('sha256').update(canonical, 'utf8').digest('hex')}`;
  assert.equal(fingerprintPayload({ note: 'é', items: [1.0, 2.5, true], amount: '125.00' }), expected);
  assert.equal(fingerprintPayloadText('{ "items": [1e0, 25e-1, true], "amount": "125.00", "note": "\\u00e9" }'), expected);
  assert.equal(fingerprintPayloadText(Buffer.from(canonical)), expected);
  assert.notEqual(fingerprintPayload({ amount: '125.0', items: [1, 2.5, true], note: 'é' }), expected);
});

test('what JSON.stringify would drop or change without a word is refused with its path', () => {
  refused(() => canonicalJson({ a: { b: undefined } }), '$.a.b', /undefined/);
  refused(() => canonicalJson({ a: [1, () => 1] }), '$.a[1]', /function/);
  refused(() => canonicalJson({ s: Symbol('x') }), '$.s', /symbol/);
  refused(() => canonicalJson({ big: 10n }), '$.big', /BigInt/);
  refused(() => canonicalJson({ m: new Map([[1, 2]]) }), '$.m', /Map/);
  refused(() => canonicalJson({ set: new Set([1]) }), '$.set', /Set/);
  // biome-ignore lint/suspicious/noSparseArray: the hole is what is refused
  refused(() => canonicalJson([1, , 3]), '$[1]', /undefined/);
  refused(() => canonicalJson({ 'a b': { c: -Infinity } }), '$["a b"].c', /-Infinity/);
  refused(() => canonicalJson({ s: 'a\uD800' }), '$.s', /lone surrogate/);
  refused(() => canonicalJson({ '\uDC00': 1 }), undefined, /lone surrogate/);
  refused(() => canonicalJson(undefined), '$', /undefined/);
  const cycle = { a: {} };
  cycle.a.b = cycle;
  refused(() => canonicalJson(cycle), '$', /cycle/);
  // toJSON is honoured as JSON.stringify honours it: a Date is its ISO text, a Buffer its bytes.
  assert.equal(canonicalJson({ at: new Date(0) }), '{"at":"1970-01-01T00:00:00.000Z"}');
  assert.equal(canonicalJson({ buf: Buffer.from('x') }), '{"buf":{"data":[120],"type":"Buffer"}}');
  // An object without a prototype is plain.
  assert.equal(canonicalJson(Object.assign(Object.create(null), { b: 1, a: 2 })), '{"a":2,"b":1}');
});

test('payloads are bounded in depth and in size, and huge ones are not serialised first', () => {
  let deep = [];
  for (let i = 1; i < 100_000; i += 1) deep = [deep];
  refused(() => canonicalJson(deep), `$${'[0]'.repeat(64)}`, /deeper than 64/);
  refused(() => canonicalJsonText('['.repeat(65) + ']'.repeat(65)), '$', /deeper than 64/);
  assert.equal(canonicalJsonText('['.repeat(64) + ']'.repeat(64)), '['.repeat(64) + ']'.repeat(64));
  const large = { a: 'x'.repeat(1 << 20) };
  refused(() => canonicalJson(large), '$', /maxPayloadBytes/);
  refused(() => canonicalJsonText(JSON.stringify(large)), '$', /maxPayloadBytes/);
});

test('text that is not JSON, not UTF-8 or holds an escaped lone surrogate is INVALID_PAYLOAD', () => {
  for (const text of ['', '{', '[1,]', '{"a":1}x', 'NaN', "'a'", '01', '1.', '.5', '+1', '1e', '"\t"', '"\\x"']) {
    refused(() => canonicalJsonText(text), '$');
  }
  refused(() => canonicalJsonText(Buffer.from([0x22, 0xff, 0x22])), '$', /UTF-8/);
  refused(() => canonicalJsonText('["\\ud800"]'), '$', /lone surrogate/);
  refused(() => canonicalJsonText('[1e400]'), '$', /range of a double/);
  assert.equal(canonicalJsonText('{"a":1,"b":2,"a":3}'), '{"a":3,"b":2}', 'the last of a name given twice, as JSON.parse');
  assert.throws(() => canonicalJsonText(42), { code: 'INVALID_ARGUMENT' });
});

test('ten thousand refused payloads leave the wasm memory as it was', () => {
  const bad = [{ a: [1, undefined] }, { n: NaN }, '{"a":[1,]}'];
  const refuse = (i) =>
    assert.throws(() => (i % 3 === 2 ? canonicalJsonText(bad[2]) : canonicalJson(bad[i % 3])), { code: 'INVALID_PAYLOAD' });
  for (let i = 0; i < 500; i += 1) refuse(i);
  const before = wasmMemoryBytes();
  for (let i = 0; i < 10_000; i += 1) refuse(i);
  assert.equal(wasmMemoryBytes(), before);
});
