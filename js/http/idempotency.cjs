'use strict';
// Idempotency-Key for HTTP APIs, with Stripe's semantics, for any framework
// (express.cjs and fastify.cjs are the glue). A request with a key runs its
// handler inside the keyed mode's transaction: the handler's own writes
// (through `idempotency.client`) and the stored response commit together, and
// the client sees the response only once they have. A retry with the same
// key and request answers the stored response with a replay header; the same
// key with another request is 422; a request still running is 409 (or waits);
// a 5xx rolls back and leaves the key free, unless the handler marks its
// answer final.

const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys } = require('../core/options.cjs');
const { idempotent } = require('../host/keyed.cjs');
const { createHash } = require('node:crypto');
const { canonicalJsonText, fingerprintPayload } = require('../core/payload.cjs');
const { problem, problemOfError } = require('./response.cjs');

const DEFAULTS = Object.freeze({
  header: 'idempotency-key',
  required: false,
  methods: ['POST', 'PATCH'],
  storeHeaders: ['content-type', 'location'],
  replayHeader: 'idempotent-replayed',
  waitMs: 0,
  retryAfterMs: 1000,
  maxBodyBytes: 1 << 20,
  maxResponseBytes: 256 * 1024,
});
/** Stripe's bound on a key: a client's UUID fits many times over. Keys are ASCII, so it is a bound in bytes too. */
const MAX_KEY_LENGTH = 255;
/** `scope: GLOBAL`: the service's callers share one key space (a single-tenant service). */
const GLOBAL = 'global';
/** What the stored response may take: the keyed mode's bound on an output. */
const MAX_STORED_BYTES = 1 << 20;

function misconfigured(message, field) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details: { field, reason: message } });
}

function whole(value, field, min, max) {
  if (!Number.isSafeInteger(value) || value < min || value > max)
    throw misconfigured(`${field} must be a whole number from ${min} to ${max}`, field);
  return value;
}

function names(list, field) {
  if (!Array.isArray(list) || !list.every((name) => typeof name === 'string' && name.length > 0))
    throw misconfigured(`${field} must be an array of names`, field);
  return list.map((name) => name.toLowerCase());
}

/** The options, checked once (a route's overrides go through here too). */
function settingsOf(options, base = null) {
  const known = [
    'store',
    'header',
    'required',
    'methods',
    'storeHeaders',
    'replayHeader',
    'waitMs',
    'retryAfterMs',
    'maxBodyBytes',
    'maxResponseBytes',
    'scope',
  ];
  checkOptionKeys(options, known, 'idempotency');
  const given = { ...(base ?? DEFAULTS), ...(options ?? {}) };
  const { store } = given;
  if (store === null || typeof store !== 'object' || typeof store.transaction !== 'function')
    throw misconfigured('idempotency needs an idemflow store', 'store');
  if (typeof given.header !== 'string' || !/^[A-Za-z0-9-]+$/.test(given.header))
    throw misconfigured('header must be a header name', 'header');
  if (typeof given.required !== 'boolean') throw misconfigured('required must be true or false', 'required');
  if (typeof given.replayHeader !== 'string' || !/^[A-Za-z0-9-]+$/.test(given.replayHeader))
    throw misconfigured('replayHeader must be a header name', 'replayHeader');
  if (typeof given.scope !== 'function' && given.scope !== GLOBAL) {
    throw misconfigured(
      "idempotency needs scope: (request) => the caller's id (an account, a tenant), so one caller's key never answers another; " +
        "scope: 'global' only where every caller may share every key",
      'scope',
    );
  }
  return {
    store,
    header: given.header.toLowerCase(),
    required: given.required,
    methods: names(given.methods, 'methods').map((method) => method.toUpperCase()),
    storeHeaders: names(given.storeHeaders, 'storeHeaders'),
    replayHeader: given.replayHeader.toLowerCase(),
    waitMs: whole(given.waitMs, 'waitMs', 0, 10 * 60 * 1000),
    retryAfterMs: whole(given.retryAfterMs, 'retryAfterMs', 1, 10 * 60 * 1000),
    maxBodyBytes: whole(given.maxBodyBytes, 'maxBodyBytes', 1, 1 << 20),
    maxResponseBytes: whole(given.maxResponseBytes, 'maxResponseBytes', 1, MAX_STORED_BYTES / 2),
    scope: given.scope,
  };
}

function retryAfter(ms) {
  return String(Math.max(1, Math.ceil(ms / 1000)));
}

/**
 * The answer to a coded error of the keyed mode, or null when it is not one
 * the client can act on. The client is told of its own key, not of the
 * record the key is stored under.
 */
function answerOfError(error, header, key) {
  if (!(error instanceof IdemflowError)) return null;
  switch (error.code) {
    case 'IDEMPOTENCY_KEY_CONFLICT':
      return problem(422, 'idempotency-key-reused', `${header} ${key} was used for another request (method, URL or body)`, { error });
    case 'IDEMPOTENCY_KEY_IN_PROGRESS':
      return problem(409, 'idempotency-key-in-progress', `a request with ${header} ${key} is still being processed`, {
        error,
        extra: { retryAfterMs: error.details.retryAfterMs },
        headers: { 'retry-after': retryAfter(error.details.retryAfterMs) },
      });
    case 'STORE_UNAVAILABLE':
    case 'CONCURRENT_UPDATE':
      return problemOfError(503, error, { headers: { 'retry-after': '1' } });
    default:
      return null;
  }
}

/**
 * The key a header value names, or null when it names none: the
 * Idempotency-Key draft's form, a Structured Field string (`"…"`, with `\"`
 * and `\\` escaped), and the bare form most clients send (visible ASCII) are
 * one key: `"abc"` and `abc` are the same. 1 to MAX_KEY_LENGTH characters,
 * counted on the key itself.
 */
function keyOf(value) {
  if (typeof value !== 'string') return null;
  let key = value;
  if (value.startsWith('"')) {
    const quoted = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/.exec(value);
    if (quoted === null) return null;
    key = quoted[1].replace(/\\(["\\])/g, '$1');
  } else if (!/^[\x21-\x7e]+$/.test(value)) {
    return null;
  }
  return key.length >= 1 && key.length <= MAX_KEY_LENGTH ? key : null;
}

/**
 * The record a key is kept under: `http:<scope>:<key>`, the scope being `*`
 * for a global key space, else the hex SHA-256 of the scope's UTF-16 code
 * units (so every string, however long or whatever it holds, is its own
 * scope, and no caller's id is stored). At most 325 bytes.
 */
function recordKeyOf(scope, key) {
  const part = scope === null ? '*' : createHash('sha256').update(Buffer.from(scope, 'utf16le')).digest('hex');
  return `http:${part}:${key}`;
}

/** Raised for the app's own bug: the scope function did not answer a caller's id. */
function badScope(detail) {
  return new IdemflowError(
    'INVALID_ARGUMENT',
    `idempotency's scope ${detail}: the request is refused rather than given a shared key space`,
    {
      disposition: 'fatal',
      details: { field: 'scope', reason: 'scope-invalid' },
    },
  );
}

/** The scope of a request: a non-empty string from the app's function, or null for a global key space. */
async function scopeOf(scope, request) {
  if (scope === GLOBAL) return null;
  const scoped = await scope(request);
  if (typeof scoped !== 'string') throw badScope(`answered ${scoped === null ? 'null' : typeof scoped}, not a string`);
  if (scoped.length === 0) throw badScope('answered an empty string');
  return scoped;
}

function isJson(contentType) {
  return typeof contentType === 'string' && /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i.test(contentType);
}

/**
 * The request as its fingerprint covers it: method, URL and the body the
 * client sent. A JSON body counts as its RFC 8785 text (so whitespace and
 * member order do not make another request); any other body, or JSON that
 * does not parse, as its bytes.
 */
function requestFingerprint({ method, url, headers, body }) {
  let content = { bytes: body.toString('base64') };
  if (body.length > 0 && isJson(headers['content-type'])) {
    try {
      content = { json: canonicalJsonText(body) };
    } catch (error) {
      if (!(error instanceof IdemflowError) || error.code !== 'INVALID_PAYLOAD') throw error;
    }
  }
  return fingerprintPayload({ method, url, body: content });
}

/** A header value as stored: text, or a list of texts. */
function headerValue(value) {
  if (Array.isArray(value)) return value.map(String);
  return String(value);
}

/** What is stored of a response: status, the allowlisted headers, the body as text or base64. */
function storedResponse(response, storeHeaders) {
  const headers = {};
  for (const name of storeHeaders) {
    if (response.headers[name] !== undefined) headers[name] = headerValue(response.headers[name]);
  }
  const text = response.body.toString('utf8');
  const body =
    Buffer.from(text, 'utf8').equals(response.body) && text.isWellFormed() ? { text } : { base64: response.body.toString('base64') };
  return { status: response.status, headers, body };
}

function replayOf(output, replayHeader) {
  const body =
    typeof output.body?.text === 'string' ? Buffer.from(output.body.text, 'utf8') : Buffer.from(output.body?.base64 ?? '', 'base64');
  return { status: output.status, headers: { ...output.headers, [replayHeader]: 'true' }, body };
}

/** Raised inside the keyed transaction to roll it back: the answer is not one to keep. */
class NotKept extends Error {}

function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * The framework-neutral middleware. `begin({ method, url, headers, body })`
 * (body: the raw bytes; headers with lowercase names) resolves to one step:
 * `{ action: 'pass' }` (no key where none is required, another method),
 * `{ action: 'answer', response }` (a replay, or 400, 409, 413, 422, 503), or
 * `{ action: 'run', context, finish }`: run the handler with `context`
 * (`{ key, tx, client, final() }`), then `finish(response)` with what it
 * answered (`{ status, headers, body }`) resolves to what to send: the same
 * response once it is committed, or what replaces it.
 */
function createIdempotency(options, base = null) {
  const settings = settingsOf(options, base);
  const { store, header, required, methods, storeHeaders, replayHeader, waitMs, retryAfterMs, maxBodyBytes, maxResponseBytes, scope } =
    settings;

  async function begin(request) {
    const method = String(request.method).toUpperCase();
    if (!methods.includes(method)) return { action: 'pass' };
    const given = request.headers[header];
    if (given === undefined || given === '') {
      if (!required) return { action: 'pass' };
      return { action: 'answer', response: problem(400, 'idempotency-key-missing', `this request needs an ${header} header`) };
    }
    const key = keyOf(Array.isArray(given) ? given[0] : given);
    if (key === null) {
      return {
        action: 'answer',
        response: problem(
          400,
          'idempotency-key-invalid',
          `${header} must be 1 to ${MAX_KEY_LENGTH} visible ASCII characters, bare or as a quoted string ("…")`,
        ),
      };
    }
    if (request.body.length > maxBodyBytes) {
      return {
        action: 'answer',
        response: problem(413, 'too-large', `at most ${maxBodyBytes} bytes of body`, { headers: { connection: 'close' } }),
      };
    }
    // The framework's own request (Express req, Fastify request), after the app's hooks: where its authentication put the caller.
    const recordKey = recordKeyOf(await scopeOf(scope, request.native ?? request), key);
    const fingerprint = requestFingerprint({ method, url: request.url, headers: request.headers, body: request.body });

    const started = deferred();
    const answered = deferred();
    let context = null;
    let entered = false;
    const call = idempotent(
      store,
      { key: recordKey, fingerprint },
      async (tx) => {
        // A driver that runs a transaction's function again by itself (MongoDB's withTransaction
        // after a transient error) must not keep the answer of a handler whose writes rolled back.
        if (entered) {
          throw new IdemflowError('CONCURRENT_UPDATE', 'the transaction ran again after the handler had answered', {
            details: { reason: 'transaction-retried' },
          });
        }
        entered = true;
        let final = false;
        context = {
          key,
          tx,
          client: tx.client,
          final: () => {
            final = true;
          },
        };
        started.resolve({ action: 'run' });
        const response = await answered.promise;
        // A 5xx leaves the key free for the retry, unless the handler said its answer is final.
        if (response.status >= 500 && !final) throw new NotKept('not kept');
        if (response.body.length > maxResponseBytes) throw new NotKept('too large');
        return storedResponse(response, storeHeaders);
        // A lost race (a deadlock, a serialization failure) must not run the cycle again: the handler
        // has answered once, and its writes rolled back with the first try. The client retries (503).
      },
      { waitMs, retryAfterMs, maxOutputBytes: MAX_STORED_BYTES, raceRetries: 0 },
    );
    const settled = call.then(
      (result) => {
        if (result.replayed) started.resolve({ action: 'answer', response: replayOf(result.output, replayHeader) });
        return { kept: true };
      },
      (error) => {
        if (context === null) {
          // Nothing ran: a conflict, a call in progress, the store down, or a bug.
          const answer = answerOfError(error, header, key);
          if (answer !== null) started.resolve({ action: 'answer', response: answer });
          else started.reject(error);
          return { kept: false };
        }
        return { kept: false, error };
      },
    );
    const step = await started.promise;
    if (step.action !== 'run') return step;

    async function finish(response) {
      answered.resolve(response);
      const { kept, error } = await settled;
      if (kept) return response;
      if (error instanceof NotKept) {
        return error.message === 'too large'
          ? problem(500, 'response-too-large', `the response is more than maxResponseBytes ${maxResponseBytes}: nothing was kept`)
          : response;
      }
      // The commit failed, so nothing the handler wrote holds: the client must not see its answer.
      return answerOfError(error, header, key) ?? problem(500, 'not-committed', 'the response could not be stored; nothing was kept');
    }
    return { action: 'run', context, finish };
  }

  return { begin, settings };
}

module.exports = { createIdempotency, isJson };
