'use strict';
// HMAC signatures in the style of Stripe's `Stripe-Signature` header:
// `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, several v1
// values while a secret is rotated. The timestamp is signed with the body,
// so a captured request replayed later is refused once it leaves the
// tolerance window; each v1 is compared in constant time.

const { createHmac, timingSafeEqual } = require('node:crypto');
const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys } = require('../core/options.cjs');

const DEFAULT_HEADER = 'webhook-signature';
const DEFAULT_TOLERANCE_SECONDS = 300;

function misconfigured(message, field) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details: { field, reason: message } });
}

function secretsOf(secret) {
  const secrets = Array.isArray(secret) ? secret : [secret];
  if (secrets.length === 0 || !secrets.every((s) => (typeof s === 'string' && s.length > 0) || (s instanceof Uint8Array && s.length > 0))) {
    throw misconfigured('secret must be a non-empty string or Buffer, or an array of them (old and new while rotating)', 'secret');
  }
  return secrets;
}

function digest(secret, timestamp, body) {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

/** The header value that signs `body` (a Buffer or string) at `timestamp` (unix seconds): what a sender writes. */
function signPayload(body, { secret, timestamp = Math.floor(Date.now() / 1000) } = {}) {
  const [first] = secretsOf(secret);
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) throw misconfigured('timestamp must be whole unix seconds', 'timestamp');
  return `t=${timestamp},v1=${digest(first, timestamp, body).toString('hex')}`;
}

/** `{ timestamp, signatures }` of a header value; null when it is not of the form. */
function parseHeader(value) {
  if (typeof value !== 'string' || value.length > 4096) return null;
  let timestamp = null;
  const signatures = [];
  for (const part of value.split(',')) {
    const at = part.indexOf('=');
    if (at < 0) continue;
    const key = part.slice(0, at).trim();
    const item = part.slice(at + 1).trim();
    if (key === 't' && /^[0-9]{1,12}$/.test(item)) timestamp = Number(item);
    else if (key === 'v1' && /^[0-9a-f]{64}$/i.test(item)) signatures.push(Buffer.from(item, 'hex'));
  }
  return timestamp === null || signatures.length === 0 ? null : { timestamp, signatures };
}

/**
 * A `verify` hook for createWebhookReceiver: true when `header` carries a v1
 * HMAC-SHA256 of "<t>.<raw body>" under one of the secrets, with t within
 * `toleranceSeconds` of now (either way: a clock ahead is as suspect as one
 * behind). Answers `{ ok: false, reason }` otherwise: 'missing',
 * 'malformed', 'stale' or 'mismatch'.
 */
function hmacSignature(options) {
  checkOptionKeys(options, ['secret', 'header', 'toleranceSeconds', 'now'], 'hmacSignature');
  const { secret, header = DEFAULT_HEADER, toleranceSeconds = DEFAULT_TOLERANCE_SECONDS, now = Date.now } = options ?? {};
  const secrets = secretsOf(secret);
  if (typeof header !== 'string' || header.length === 0) throw misconfigured('header must be a header name', 'header');
  if (!Number.isSafeInteger(toleranceSeconds) || toleranceSeconds < 1)
    throw misconfigured('toleranceSeconds must be a whole number of at least 1', 'toleranceSeconds');
  if (typeof now !== 'function') throw misconfigured('now must be a function returning ms since the epoch', 'now');
  const name = header.toLowerCase();
  return function verifySignature({ headers, body }) {
    const raw = headers[name];
    if (raw === undefined) return { ok: false, reason: 'missing' };
    const parsed = parseHeader(Array.isArray(raw) ? raw.join(',') : raw);
    if (parsed === null) return { ok: false, reason: 'malformed' };
    if (Math.abs(Math.floor(now() / 1000) - parsed.timestamp) > toleranceSeconds) return { ok: false, reason: 'stale' };
    for (const key of secrets) {
      const expected = digest(key, parsed.timestamp, body);
      // timingSafeEqual: how long a comparison takes says nothing of where the bytes differ.
      if (parsed.signatures.some((given) => timingSafeEqual(given, expected))) return { ok: true };
    }
    return { ok: false, reason: 'mismatch' };
  };
}

module.exports = { hmacSignature, signPayload, DEFAULT_HEADER };
