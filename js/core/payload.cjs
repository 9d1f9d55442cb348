'use strict';
// The RFC 8785 text and the `pf1:` fingerprint of any JSON value a host
// holds: a request body, a keyed call's arguments. The core canonicalises;
// this file picks the entry point for a value or for JSON text as received.

const { IdemflowError } = require('./errors.cjs');
const { entry } = require('./options.cjs');
const { bindings: wasm, call } = require('./wasm.cjs');

/** JSON text as the core takes it: a string, or UTF-8 bytes in a Uint8Array (a Buffer is one). */
function jsonText(text) {
  if (typeof text === 'string' || text instanceof Uint8Array) return text;
  if (text instanceof ArrayBuffer) return new Uint8Array(text);
  throw new IdemflowError('INVALID_ARGUMENT', 'JSON text must be a string, a Buffer, a Uint8Array or an ArrayBuffer', {
    details: { reason: 'not JSON text' },
  });
}

/** The RFC 8785 text of a JSON value; INVALID_PAYLOAD (details.path) where it is none. */
function canonicalJson(value) {
  return call(() => wasm.canonicalJson(value));
}

/** `pf1:` + hex SHA-256 of canonicalJson(value). */
function fingerprintPayload(value) {
  return call(() => wasm.fingerprintPayload(value));
}

/** The RFC 8785 text of JSON text (as JSON.parse reads it: a name given twice keeps its last value). */
function canonicalJsonText(text) {
  return call(() => wasm.canonicalJsonText(jsonText(text)));
}

/** `pf1:` + hex SHA-256 of canonicalJsonText(text). */
function fingerprintPayloadText(text) {
  return call(() => wasm.fingerprintPayloadText(jsonText(text)));
}

module.exports = {
  canonicalJson: entry(canonicalJson),
  fingerprintPayload: entry(fingerprintPayload),
  canonicalJsonText: entry(canonicalJsonText),
  fingerprintPayloadText: entry(fingerprintPayloadText),
};
