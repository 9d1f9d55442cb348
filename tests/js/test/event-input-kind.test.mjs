// Passing an event's JSON text or its bytes where the object is expected is a
// common slip at a queue boundary; the error names what was passed and what
// to do, for every entry point that takes an event.

import assert from 'node:assert/strict';
import test from 'node:test';
import { decide, fingerprint, IdemflowError, InMemoryStore, normalizeEvent, processEvent, validateEvent } from 'idemflow';
import { SEED_EVENT as event } from '../workers/fixtures.mjs';

const text = JSON.stringify(event);
const bytes = new TextEncoder().encode(text);

const inputs = [
  ['JSON text', text, /event must be an object, not a string: parse it first/],
  ['a Buffer', Buffer.from(text), /event must be an object, not a Buffer: decode and parse it first/],
  ['a Uint8Array', bytes, /not a Buffer: decode and parse it first/],
  ['an ArrayBuffer', bytes.buffer, /not a Buffer: decode and parse it first/],
  ['a DataView', new DataView(bytes.buffer), /not a Buffer: decode and parse it first/],
];

const entryPoints = [
  ['validateEvent', async (input) => validateEvent(input)],
  ['fingerprint', async (input) => fingerprint(input)],
  ['decide', async (input) => decide({ event: input, receipt: null, workflow: null })],
  ['normalizeEvent', async (input) => normalizeEvent(input)],
  ['processEvent', async (input) => processEvent(new InMemoryStore([]), input)],
];

for (const [entry, call] of entryPoints) {
  for (const [what, input, message] of inputs) {
    test(`${entry} given ${what} says what was passed (INVALID_EVENT, field event)`, async () => {
      await assert.rejects(call(input), (error) => {
        assert.ok(error instanceof IdemflowError, `expected IdemflowError, got ${error}`);
        assert.equal(error.code, 'INVALID_EVENT');
        assert.equal(error.details.field, 'event');
        assert.match(error.message, message);
        return true;
      });
    });
  }
}

test('the parsed event is still accepted by the same entry points', async () => {
  validateEvent(JSON.parse(text));
  assert.match(fingerprint(JSON.parse(new TextDecoder().decode(bytes))), /^fp1:[0-9a-f]{64}$/);
});
