'use strict';
// A webhook endpoint in front of a delivery handler: the raw body, bounded,
// is verified (the `verify` hook) before anything is parsed or stored, then
// handed to createDeliveryHandler, whose verdict becomes the status the
// sender acts on: ack → 200, retry → 503 with Retry-After (the sender
// redelivers), dead-letter → 400 (it never will succeed), park → 200 once
// the `park` hook has stored the delivery for a person.

const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys } = require('../core/options.cjs');
const { DEFAULT_MAX_BYTES } = require('../host/delivery.cjs');
const { HttpRefusal, readRawBody } = require('./raw-body.cjs');
const { problem, problemOfError, problemOfRefusal, sendNode } = require('./response.cjs');

/** When parking itself failed: the sender tries again in this many seconds. */
const PARK_RETRY_AFTER_SECONDS = 30;

function misconfigured(message, field) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details: { field, reason: message } });
}

function json(status, body, headers = {}) {
  return { status, headers: { 'content-type': 'application/json; charset=utf-8', ...headers }, body: JSON.stringify(body) };
}

function retryAfterSeconds(ms) {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** What `verify` answered, as accepted or the reason it was not. */
async function verdictOfSignature(verify, request) {
  let answer;
  try {
    answer = await verify(request);
  } catch (error) {
    // Verifiers of providers' SDKs throw on a bad signature.
    return { ok: false, reason: error instanceof Error ? error.message.slice(0, 200) : 'the verifier threw' };
  }
  if (answer === true) return { ok: true };
  if (answer !== null && typeof answer === 'object' && answer.ok === true) return { ok: true };
  return {
    ok: false,
    reason: answer !== null && typeof answer === 'object' && typeof answer.reason === 'string' ? answer.reason : 'refused',
  };
}

/**
 * An HTTP endpoint for deliveries to `handle` (a createDeliveryHandler).
 * Options: `verify({ headers, body })` → true | { ok, reason } (required;
 * `false` to accept unsigned requests, for tests), `park({ body, headers,
 * error })` stores what a person must look at (required), `maxBytes` of raw
 * body (default 65536), `context({ headers })` → `{ attempt, metadata }` for
 * the handler. The result is a Node request listener (node:http, Express:
 * `app.post(path, receiver)`) with `receive({ method, headers, body })`,
 * the same answer as `{ status, headers, body }` for other frameworks.
 */
function createWebhookReceiver(handle, options) {
  if (typeof handle !== 'function') throw misconfigured('createWebhookReceiver needs a delivery handler (createDeliveryHandler)', 'handle');
  checkOptionKeys(options, ['verify', 'park', 'maxBytes', 'context'], 'createWebhookReceiver');
  const { verify, park, maxBytes = DEFAULT_MAX_BYTES, context = () => ({}) } = options ?? {};
  if (verify !== false && typeof verify !== 'function') {
    throw misconfigured(
      'verify must be a function checking the signature of the raw body (stripeSignature or standardWebhooksSignature gives one), or false to accept unsigned requests',
      'verify',
    );
  }
  if (typeof park !== 'function') throw misconfigured('park must be a function that stores a delivery a person must look at', 'park');
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 1) throw misconfigured('maxBytes must be a whole number of at least 1', 'maxBytes');
  if (typeof context !== 'function') throw misconfigured('context must be a function', 'context');

  /** The answer to one request `{ method, headers, body }` (body: the raw bytes); rejects only when the worker must stop. */
  async function receive({ method = 'POST', headers = {}, body }) {
    if (method !== 'POST') return problem(405, 'method', 'webhooks are POSTed', { headers: { allow: 'POST' } });
    if (!(body instanceof Uint8Array)) throw misconfigured('receive needs the raw body as a Buffer or Uint8Array', 'body');
    if (body.length > maxBytes) return problem(413, 'too-large', `at most ${maxBytes} bytes`);
    if (verify !== false) {
      const signature = await verdictOfSignature(verify, { headers, body });
      if (!signature.ok) return problem(401, 'signature', signature.reason);
    }
    const verdict = await handle(body, context({ headers }) ?? {});
    switch (verdict.action) {
      case 'ack':
        return json(200, { outcome: verdict.outcome });
      case 'retry':
        return problemOfError(503, verdict.error, {
          extra: { retryAfterMs: verdict.retryAfterMs },
          headers: { 'retry-after': String(retryAfterSeconds(verdict.retryAfterMs)) },
        });
      case 'dead-letter':
        return problemOfError(400, verdict.error);
      case 'park':
        try {
          await park({ body, headers, error: verdict.error });
        } catch {
          return problemOfError(503, verdict.error, {
            extra: { parked: false },
            headers: { 'retry-after': String(PARK_RETRY_AFTER_SECONDS) },
          });
        }
        return json(200, { parked: true, code: verdict.error.code });
      default:
        throw misconfigured(`the delivery handler answered an unknown action ${String(verdict.action)}`, 'handle');
    }
  }

  async function receiver(req, res, next) {
    let answer;
    try {
      if (req.method !== 'POST') {
        answer = await receive({ method: req.method, headers: req.headers, body: Buffer.alloc(0) });
      } else {
        answer = await receive({ method: req.method, headers: req.headers, body: await readRawBody(req, maxBytes) });
      }
    } catch (error) {
      if (error instanceof HttpRefusal) {
        sendNode(res, problemOfRefusal(error));
        return;
      }
      sendNode(res, problem(500, 'internal', 'the receiver failed'));
      // A misconfigured worker or a store's bug: the host's error path decides (Express's next, else a rejection).
      if (typeof next === 'function') next(error);
      else throw error;
      return;
    }
    sendNode(res, answer);
  }

  Object.defineProperty(receiver, 'receive', { value: receive, enumerable: true });
  Object.defineProperty(receiver, 'maxBytes', { value: maxBytes, enumerable: true });
  return receiver;
}

module.exports = { createWebhookReceiver };
