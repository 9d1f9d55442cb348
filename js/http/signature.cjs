'use strict';
// Webhook signatures, two schemes, each by its own name:
// - Stripe's `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
//   "<t>.<raw body>">` (stripeSignature, signStripe);
// - Standard Webhooks (standardwebhooks.com): `webhook-id`,
//   `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of
//   "<id>.<timestamp>.<raw body>">`, the key being the base64 after `whsec_`
//   (standardWebhooksSignature, signStandardWebhook).
// In both the timestamp is signed with the body, so a captured request
// replayed later is refused once it leaves the tolerance window; a header may
// carry several signatures and a receiver several secrets while one is
// rotated; each signature is compared in constant time.

const { createHmac, timingSafeEqual } = require('node:crypto');
const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys } = require('../core/options.cjs');

const DEFAULT_TOLERANCE_SECONDS = 300;
/** The longest signature header read: a sender rotating a few secrets stays far below. */
const MAX_HEADER_LENGTH = 4096;
/** Standard Webhooks' message ids are short (`msg_` + 27 characters); this bounds what is signed. */
const MAX_ID_LENGTH = 256;

function misconfigured(message, field) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details: { field, reason: message } });
}

function secretList(secret) {
  const secrets = Array.isArray(secret) ? secret : [secret];
  if (secrets.length === 0 || !secrets.every((s) => (typeof s === 'string' && s.length > 0) || (s instanceof Uint8Array && s.length > 0))) {
    throw misconfigured('secret must be a non-empty string or Buffer, or an array of them (old and new while rotating)', 'secret');
  }
  return secrets;
}

function toleranceOf(toleranceSeconds, now) {
  if (!Number.isSafeInteger(toleranceSeconds) || toleranceSeconds < 1)
    throw misconfigured('toleranceSeconds must be a whole number of at least 1', 'toleranceSeconds');
  if (typeof now !== 'function') throw misconfigured('now must be a function returning ms since the epoch', 'now');
}

function timestampOf(timestamp) {
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) throw misconfigured('timestamp must be whole unix seconds', 'timestamp');
  return timestamp;
}

/** One header's value as text (a repeated header arrives as a list). */
function headerText(headers, name, separator) {
  const raw = headers[name];
  if (raw === undefined) return undefined;
  return Array.isArray(raw) ? raw.join(separator) : String(raw);
}

/** Whether `given` is one of `expected` (Buffers), each compared in constant time. */
function anyEqual(givens, expected) {
  // timingSafeEqual: how long a comparison takes says nothing of where the bytes differ.
  return givens.some((given) => given.length === expected.length && timingSafeEqual(given, expected));
}

function fresh(timestamp, now, toleranceSeconds) {
  // Either way: a clock ahead is as suspect as one behind.
  return Math.abs(Math.floor(now() / 1000) - timestamp) <= toleranceSeconds;
}

// ---- Stripe

function stripeDigest(secret, timestamp, body) {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

/** `{ timestamp, signatures }` of a `t=…,v1=…` value; null when it is not of the form. */
function parseStripe(value) {
  if (value.length > MAX_HEADER_LENGTH) return null;
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

/** The `Stripe-Signature` value that signs `body` (a Buffer or string) at `timestamp` (unix seconds): what a sender writes. */
function signStripe(body, { secret, timestamp = Math.floor(Date.now() / 1000) } = {}) {
  const secrets = secretList(secret);
  const t = timestampOf(timestamp);
  return [`t=${t}`, ...secrets.map((key) => `v1=${stripeDigest(key, t, body).toString('hex')}`)].join(',');
}

/**
 * A `verify` hook for createWebhookReceiver, Stripe's scheme: true when
 * `header` (default `stripe-signature`) carries a v1 HMAC-SHA256 of
 * "<t>.<raw body>" under one of the secrets (the endpoint's `whsec_…` text
 * is the key as it is), with t within `toleranceSeconds` of now. Answers
 * `{ ok: false, reason }` otherwise: 'missing', 'malformed', 'stale' or
 * 'mismatch'.
 */
function stripeSignature(options) {
  checkOptionKeys(options, ['secret', 'header', 'toleranceSeconds', 'now'], 'stripeSignature');
  const { secret, header = 'stripe-signature', toleranceSeconds = DEFAULT_TOLERANCE_SECONDS, now = Date.now } = options ?? {};
  const secrets = secretList(secret);
  if (typeof header !== 'string' || !/^[A-Za-z0-9-]+$/.test(header)) throw misconfigured('header must be a header name', 'header');
  toleranceOf(toleranceSeconds, now);
  const name = header.toLowerCase();
  return function verifyStripeSignature({ headers, body }) {
    const value = headerText(headers, name, ',');
    if (value === undefined) return { ok: false, reason: 'missing' };
    const parsed = parseStripe(value);
    if (parsed === null) return { ok: false, reason: 'malformed' };
    if (!fresh(parsed.timestamp, now, toleranceSeconds)) return { ok: false, reason: 'stale' };
    for (const key of secrets) {
      if (anyEqual(parsed.signatures, stripeDigest(key, parsed.timestamp, body))) return { ok: true };
    }
    return { ok: false, reason: 'mismatch' };
  };
}

// ---- Standard Webhooks

/** The HMAC key of a Standard Webhooks secret: the base64 after `whsec_` (the prefix is optional), or the bytes given. */
function standardKey(secret) {
  if (secret instanceof Uint8Array) return Buffer.from(secret);
  const text = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || text.length % 4 === 1) {
    throw misconfigured('a Standard Webhooks secret is whsec_ followed by base64 (or the key as a Buffer)', 'secret');
  }
  const key = Buffer.from(text, 'base64');
  if (key.length === 0) throw misconfigured('a Standard Webhooks secret holds no key', 'secret');
  return key;
}

function standardDigest(key, id, timestamp, body) {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

/** The v1 signatures of a `webhook-signature` value (space-separated `v<n>,<base64>`; other versions ignored). */
function parseStandard(value) {
  if (value.length > MAX_HEADER_LENGTH) return null;
  const signatures = [];
  for (const part of value.split(' ')) {
    const at = part.indexOf(',');
    if (at < 0 || part.slice(0, at) !== 'v1') continue;
    const item = part.slice(at + 1);
    if (/^[A-Za-z0-9+/]{43}=$/.test(item)) signatures.push(Buffer.from(item, 'base64'));
  }
  return signatures;
}

/**
 * The three headers a Standard Webhooks sender writes for `body` (a Buffer
 * or string): `{ 'webhook-id', 'webhook-timestamp', 'webhook-signature' }`,
 * one `v1,` signature per secret.
 */
function signStandardWebhook(body, { secret, id, timestamp = Math.floor(Date.now() / 1000) } = {}) {
  const keys = secretList(secret).map(standardKey);
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH || !/^[\x21-\x7e]+$/.test(id)) {
    throw misconfigured(`id must be 1 to ${MAX_ID_LENGTH} visible ASCII characters (the message's id)`, 'id');
  }
  const t = timestampOf(timestamp);
  return {
    'webhook-id': id,
    'webhook-timestamp': String(t),
    'webhook-signature': keys.map((key) => `v1,${standardDigest(key, id, t, body).toString('base64')}`).join(' '),
  };
}

/**
 * A `verify` hook for createWebhookReceiver, Standard Webhooks' scheme: true
 * when `webhook-signature` carries a `v1,` HMAC-SHA256 of
 * "<webhook-id>.<webhook-timestamp>.<raw body>" under one of the secrets
 * (`whsec_` + base64, as the spec gives them), with the timestamp within
 * `toleranceSeconds` of now. Answers `{ ok: false, reason }` otherwise:
 * 'missing' (any of the three headers), 'malformed', 'stale' or 'mismatch'.
 */
function standardWebhooksSignature(options) {
  checkOptionKeys(options, ['secret', 'toleranceSeconds', 'now'], 'standardWebhooksSignature');
  const { secret, toleranceSeconds = DEFAULT_TOLERANCE_SECONDS, now = Date.now } = options ?? {};
  const keys = secretList(secret).map(standardKey);
  toleranceOf(toleranceSeconds, now);
  return function verifyStandardWebhook({ headers, body }) {
    const id = headerText(headers, 'webhook-id', ',');
    const timestamp = headerText(headers, 'webhook-timestamp', ',');
    const value = headerText(headers, 'webhook-signature', ' ');
    if (id === undefined || timestamp === undefined || value === undefined) return { ok: false, reason: 'missing' };
    if (id.length === 0 || id.length > MAX_ID_LENGTH || !/^[0-9]{1,12}$/.test(timestamp)) return { ok: false, reason: 'malformed' };
    const signatures = parseStandard(value);
    if (signatures === null || signatures.length === 0) return { ok: false, reason: 'malformed' };
    const t = Number(timestamp);
    if (!fresh(t, now, toleranceSeconds)) return { ok: false, reason: 'stale' };
    for (const key of keys) {
      if (anyEqual(signatures, standardDigest(key, id, t, body))) return { ok: true };
    }
    return { ok: false, reason: 'mismatch' };
  };
}

module.exports = { stripeSignature, signStripe, standardWebhooksSignature, signStandardWebhook };
