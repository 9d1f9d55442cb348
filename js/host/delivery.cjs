'use strict';
// The delivery handler: one function between any broker and processEvent. It
// turns whatever a message contains into a plain verdict the worker maps onto
// its broker's verbs (ack, nack with delay, dead-letter, park), and it throws
// only when the worker itself is wrong, so a misconfigured worker stops
// instead of dead-lettering or redelivering every message it is handed.

const { IdemflowError } = require('../core/errors.cjs');
const { resolveRuleSet } = require('../core/rules.cjs');
const { messageOf, numericOption, optionsOf, wholeNumberOr } = require('../core/options.cjs');
const { processEvent } = require('./event.cjs');
const { processBatch } = require('./batch.cjs');
const { hooksOf } = require('./cycle.cjs');
const { appliedHookOf } = require('./applied.cjs');
const { createPolicy } = require('../core/policy.cjs');

/** Events are a few short fields (each at most 512 bytes): 64 KiB is generous and still cheap to refuse. */
const DEFAULT_MAX_BYTES = 64 * 1024;
/** The largest maxBytes accepted: a body beyond this is not an event whatever the configuration. */
const MAX_MAX_BYTES = 64 * 1024 * 1024;
const DEFAULT_BASE_DELAY_MS = 500;
const DEFAULT_MAX_DELAY_MS = 60_000;
/** Redelivery counts beyond this no longer change the (already capped) hint. */
const MAX_ATTEMPT = 1000;
/**
 * Deliveries of one message before a retryable verdict becomes park: with
 * the default backoff (500 ms doubling to 60 s) about a quarter of an hour
 * of retries, so an event whose workflow never appears is set aside for a
 * person instead of cycling through the retry queue for ever.
 */
const DEFAULT_MAX_DELIVERIES = 20;

/** The dispositions a verdict answers; any other (fatal) is thrown, or in a batch that committed parks its message. */
const DISPOSITIONS = new Set(['reject', 'reconcile', 'retry']);

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/** The same error, marked as the worker's fault: a worker that sees it must stop. */
function asFatal(error) {
  if (!(error instanceof IdemflowError)) return error;
  if (error.disposition === 'fatal') return error;
  return new IdemflowError(error.code, error.message, { disposition: 'fatal', details: error.details, cause: error });
}

function misconfigured(message, reason) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details: { reason } });
}

function invalidBody(reason, message, extra = {}) {
  return new IdemflowError('INVALID_EVENT', `the message is not an event: ${message}`, {
    disposition: 'reject',
    details: { reason, ...extra },
  });
}

/** A short description of a value the caller passed, for a message (never throws). */
function describe(value) {
  if (value === null) return 'null';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.slice(0, 20))}`;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  return typeof value;
}

/** A handler call's context, read as options are (a fatal error: the worker is wrong). */
function contextOf(context, known, where) {
  try {
    return optionsOf(context, known, where);
  } catch (error) {
    throw asFatal(error);
  }
}

/** A plain copy of an array the worker passes (messages, attempts); one that cannot be read is the worker's fault. */
function listOf(value, name) {
  try {
    if (!Array.isArray(value)) throw misconfigured(`handle.batch takes ${name} as an array`, 'not an array');
    return Array.from({ length: value.length }, (_, i) => value[i]);
  } catch (cause) {
    if (cause instanceof IdemflowError) throw cause;
    throw new IdemflowError('INVALID_ARGUMENT', `${name} cannot be read: ${messageOf(cause)}`, {
      disposition: 'fatal',
      details: { field: name, reason: 'unreadable' },
      cause,
    });
  }
}

function isStore(store) {
  return store !== null && typeof store === 'object' && typeof store.transaction === 'function';
}

/** Bytes of a raw body without copying it; for a string, its UTF-8 length (computed only when it could matter). */
function byteLength(body, maxBytes) {
  if (typeof body === 'string') {
    // A UTF-16 unit is at least one UTF-8 byte and at most three.
    if (body.length > maxBytes) return body.length;
    if (body.length * 3 <= maxBytes) return body.length;
    return Buffer.byteLength(body, 'utf8');
  }
  return body.byteLength;
}

/** The default parse: strict UTF-8, then JSON. */
function parseJson(body) {
  const text = typeof body === 'string' ? body : utf8.decode(body);
  return JSON.parse(text);
}

const HANDLER_OPTIONS = ['ruleSet', 'parse', 'maxBytes', 'raceRetries', 'maxDeliveries', 'baseDelayMs', 'maxDelayMs', 'hooks', 'onApplied'];

/**
 * A handler for deliveries from any broker over a store.
 * Throws (disposition fatal) at once when its own arguments are wrong.
 */
function createDeliveryHandler(store, handlerOptions) {
  if (!isStore(store)) {
    throw misconfigured('createDeliveryHandler needs a store with a transaction(fn) method', 'not a store');
  }
  if (handlerOptions !== undefined && (handlerOptions === null || typeof handlerOptions !== 'object')) {
    throw misconfigured('createDeliveryHandler options must be an object', 'options must be an object');
  }
  let options;
  try {
    options = optionsOf(handlerOptions, HANDLER_OPTIONS, 'createDeliveryHandler');
  } catch (error) {
    throw asFatal(error);
  }
  let ruleSet;
  try {
    ruleSet = resolveRuleSet(options.ruleSet);
  } catch (error) {
    throw asFatal(error);
  }
  const parse = options.parse ?? parseJson;
  if (typeof parse !== 'function') throw misconfigured('parse must be a function', 'parse must be a function');
  wholeNumberOr(options.maxBytes, undefined, 'maxBytes', 1, MAX_MAX_BYTES);
  numericOption('raceRetries', options.raceRetries);
  if (options.maxDeliveries !== Infinity) wholeNumberOr(options.maxDeliveries, undefined, 'maxDeliveries', 1, Number.MAX_SAFE_INTEGER);
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  const maxDeliveries = options.maxDeliveries ?? DEFAULT_MAX_DELIVERIES;
  let policy;
  try {
    // The outbox's backoff from the core: capped doubling, jitter fixed by key and attempt.
    policy = createPolicy({
      baseDelayMs: options.baseDelayMs ?? DEFAULT_BASE_DELAY_MS,
      maxDelayMs: options.maxDelayMs ?? DEFAULT_MAX_DELAY_MS,
    });
  } catch (error) {
    throw asFatal(error);
  }
  const processOptions = { ruleSet, raceRetries: options.raceRetries, hooks: options.hooks, onApplied: options.onApplied };
  try {
    if (options.hooks !== undefined) processOptions.hooks = hooksOf(options.hooks);
    appliedHookOf(options.onApplied);
  } catch (error) {
    throw asFatal(error);
  }

  /** Half the ceiling plus a jittered half: never a hot loop, never in lockstep. */
  function retryAfterMs(key, attempt) {
    const { ceilingMs, delayMs } = policy.backoff(key, attempt);
    return Math.ceil(ceilingMs / 2 + delayMs / 2);
  }

  /** The event a message carries, or the reason it carries none. */
  async function eventOf(message) {
    let raw;
    try {
      raw = typeof message === 'string' || message instanceof Uint8Array; // a revoked proxy throws here
    } catch (cause) {
      return { error: invalidBody('unreadable', messageOf(cause)) };
    }
    if (raw) {
      const size = byteLength(message, maxBytes);
      if (size > maxBytes) {
        return { error: invalidBody('too-large', `${size} bytes exceed maxBytes ${maxBytes}`, { bytes: size, maxBytes }) };
      }
      let parsed;
      try {
        parsed = await parse(message);
      } catch (cause) {
        let reason = parse === parseJson ? 'not-json' : 'unparseable';
        if (cause instanceof TypeError && cause.code === 'ERR_ENCODING_INVALID_ENCODED_DATA') reason = 'not-utf8';
        const error = invalidBody(reason, cause instanceof Error ? cause.message : String(cause));
        return { error };
      }
      message = parsed;
    }
    const array = Array.isArray(message); // (only a revoked proxy throws here, and it threw above)
    if (message === null || typeof message !== 'object' || array) {
      const kind = message === null ? 'null' : array ? 'an array' : typeof message;
      return { error: invalidBody('not-an-object', `it is ${kind}, not a JSON object`) };
    }
    return { event: message };
  }

  /**
   * The broker's delivery count of a message (1 for its first delivery):
   * the retry hint grows with it and maxDeliveries caps it. Anything but a
   * positive safe integer means the worker counts wrong: it must stop.
   */
  function attemptOf(rawAttempt, field) {
    if (!Number.isSafeInteger(rawAttempt) || rawAttempt < 1) {
      throw new IdemflowError(
        'INVALID_ARGUMENT',
        `${field} must be the delivery count, a whole number from 1 (the first delivery), not ${describe(rawAttempt)}`,
        {
          disposition: 'fatal',
          details: { field, reason: 'not a positive safe integer' },
        },
      );
    }
    return rawAttempt;
  }

  /** The retry hint's jitter key, read without running a getter (the core reads the event once, itself). */
  function eventIdOf(event) {
    try {
      const id = Object.getOwnPropertyDescriptor(event, 'eventId');
      if (id && typeof id.value === 'string') return id.value;
    } catch {
      // A proxy that throws here is refused by validation.
    }
    return null;
  }

  /**
   * The verdict on a coded error; a fatal one (or an unknown disposition) is
   * thrown: stop rather than guess. A retry of a message delivered
   * maxDeliveries times already is parked instead, with its error.
   */
  function verdictOnError(error, eventId, attempt) {
    switch (error.disposition) {
      case 'reject':
        return { action: 'dead-letter', error };
      case 'reconcile':
        return { action: 'park', error };
      case 'retry':
        if (attempt >= maxDeliveries) return { action: 'park', error, deliveries: attempt, maxDeliveries };
        return { action: 'retry', error, retryAfterMs: retryAfterMs(eventId ?? error.code, Math.min(attempt, MAX_ATTEMPT)) };
      default:
        throw asFatal(error);
    }
  }

  /**
   * What to do with one delivery. `context.attempt` is the broker's delivery
   * count (1 for the first delivery, and when not given); the retry hint
   * grows with it, and a message that would be retried after maxDeliveries
   * is parked. `context.metadata` (correlation id, tenant, …) is stored
   * beside the payload of each outbox operation the delivery writes.
   */
  async function handle(message, context) {
    const given = contextOf(context, ['attempt', 'metadata'], 'handle');
    const attempt = Object.hasOwn(given, 'attempt') ? attemptOf(given.attempt, 'attempt') : 1;
    const { event, error: bodyError } = await eventOf(message);
    if (bodyError) return { action: 'dead-letter', error: bodyError };
    const eventId = eventIdOf(event);
    try {
      const { metadata } = given;
      const result = await processEvent(store, event, metadata === undefined ? processOptions : { ...processOptions, metadata });
      return { action: 'ack', outcome: result.outcome, result };
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error; // a bug in the store or the host: crash and restart
      return verdictOnError(error, eventId, attempt);
    }
  }

  /**
   * What to do with each of many deliveries, decided and committed in one
   * transaction (processBatch): one verdict per message, in order.
   * `context.attempts[i]` is message i's delivery count (all 1 when not given).
   */
  async function handleBatch(messages, context) {
    const given = contextOf(context, ['attempts'], 'handle.batch');
    const list = listOf(messages, 'messages');
    const attempts = given.attempts === undefined ? null : listOf(given.attempts, 'attempts');
    if (attempts !== null && attempts.length !== list.length) {
      throw misconfigured(`attempts holds ${attempts.length} delivery counts for ${list.length} messages`, 'attempts of another length');
    }
    const counts = list.map((_, i) => (attempts === null ? 1 : attemptOf(attempts[i], `attempts[${i}]`)));
    const verdicts = new Array(list.length);
    const events = [];
    const positions = [];
    for (const [i, message] of list.entries()) {
      const { event, error } = await eventOf(message);
      if (error) {
        verdicts[i] = { action: 'dead-letter', error };
      } else {
        events.push(event);
        positions.push(i);
      }
    }
    const results = await processBatch(store, events, processOptions);
    const acked = results.some((result) => result.error === undefined);
    for (const [j, result] of results.entries()) {
      const i = positions[j];
      const { error } = result;
      if (error === undefined) verdicts[i] = { action: 'ack', outcome: result.outcome, result };
      // Once other messages committed, a fatal error is this message's alone (its callback's bad output
      // or misuse, rolled back by itself): throwing would answer nothing for the committed ones.
      else if (acked && !DISPOSITIONS.has(error.disposition)) verdicts[i] = { action: 'park', error };
      else verdicts[i] = verdictOnError(error, eventIdOf(events[j]), counts[i]);
    }
    return verdicts;
  }

  Object.defineProperty(handle, 'batch', { value: handleBatch, enumerable: true });
  return handle;
}

module.exports = { createDeliveryHandler, DEFAULT_MAX_BYTES };
