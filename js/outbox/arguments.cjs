'use strict';
// What the outbox consumer reads of its arguments and of what a handler
// threw: the handlers by type, whole-number options, a thrown value described
// without trusting it (its getters may throw), and the tally runOnce and
// drain answer.

const os = require('node:os');
const { randomUUID } = require('node:crypto');
const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys, wholeNumberOr } = require('../core/options.cjs');
const { POLICY_OPTIONS, createPolicy } = require('../core/policy.cjs');

/** What a store must offer the consumer (docs/outbox.md, "The store interface"). */
const STORE_METHODS = Object.freeze(['claimOperations', 'renewLease', 'completeOperation', 'failOperation', 'releaseOperation']);
const DEFAULT_CONCURRENCY = 4;
const MAX_CONCURRENCY = 1000;
const DEFAULT_POLL_INTERVAL_MS = 1000;
/** The longest lease owner: the narrowest store's name column holds 255 characters. */
const MAX_OWNER_BYTES = 255;
// With the default poll interval, a look for unhandled types about once a minute when idle.
const DEFAULT_TYPE_CHECK_POLLS = 60;
const CONSUMER_OPTIONS = [
  ...POLICY_OPTIONS,
  'concurrency',
  'pollIntervalMs',
  'owner',
  'now',
  'autoRenew',
  'typeCheckPolls',
  'backlogIntervalMs',
  'breakerThreshold',
  'breakerProbeMs',
  'ruleSets',
  'ignoreTypes',
];

// Error codes of Node's sockets and undici (fetch) that say the other side is not there now.
const UNAVAILABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_SOCKET',
]);
// HTTP statuses that say "not now": too many requests, service unavailable.
const UNAVAILABLE_STATUSES = new Set([429, 503]);

// The core keeps 1000 characters of an error; this only bounds what crosses into wasm.
const MAX_MESSAGE_UNITS = 8000;

function invalidArgument(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { details });
}

function wellFormed(value) {
  const text = value.length > MAX_MESSAGE_UNITS ? value.slice(0, MAX_MESSAGE_UNITS) : value;
  return text.isWellFormed() ? text : text.toWellFormed();
}

/** What a thrown value says about itself, read defensively (getters may throw). */
function describeFailure(thrown, stopping) {
  const isObject = thrown !== null && (typeof thrown === 'object' || typeof thrown === 'function');
  const field = (key) => {
    if (!isObject) return undefined;
    try {
      return thrown[key];
    } catch {
      return undefined;
    }
  };
  const label = (value) => {
    if (typeof value === 'string') return wellFormed(value);
    if (typeof value === 'number' && Number.isFinite(value)) return String(value);
    return undefined;
  };
  let message = label(field('message'));
  if (message === undefined && !isObject) {
    try {
      message = wellFormed(String(thrown));
    } catch {
      message = typeof thrown;
    }
  }
  const retryable = field('retryable');
  const disposition = field('disposition');
  // fetch() throws TypeError('fetch failed') with the socket's error as its cause.
  let cause = field('cause');
  const causeCode = () => {
    try {
      return cause !== null && typeof cause === 'object' ? cause.code : undefined;
    } catch {
      cause = null;
      return undefined;
    }
  };
  const response = field('response');
  let responseStatus;
  try {
    responseStatus = response !== null && typeof response === 'object' ? response.status : undefined;
  } catch {
    responseStatus = undefined;
  }
  const unavailable =
    field('unavailable') === true ||
    UNAVAILABLE_CODES.has(field('code')) ||
    UNAVAILABLE_CODES.has(causeCode()) ||
    field('name') === 'TimeoutError' ||
    UNAVAILABLE_STATUSES.has(field('status')) ||
    UNAVAILABLE_STATUSES.has(field('statusCode')) ||
    UNAVAILABLE_STATUSES.has(responseStatus);
  return {
    ok: false,
    stopping,
    name: label(field('name')),
    code: label(field('code')),
    message: message ?? '',
    retryable: typeof retryable === 'boolean' ? retryable : undefined,
    unavailable,
    disposition: typeof disposition === 'string' ? disposition : undefined,
  };
}

/** True when `promise` settles within `ms` (Infinity waits for it). */
async function settlesWithin(promise, ms) {
  if (ms === Infinity) {
    await promise;
    return true;
  }
  let timer;
  const timeout = new Promise((resolve) => {
    timer = setTimeout(resolve, ms, false);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function emptyTally() {
  return { claimed: 0, done: 0, retried: 0, dead: 0, released: 0, stale: 0, errors: 0 };
}

const TALLY_KEY = { done: 'done', retry: 'retried', dead: 'dead', release: 'released', stale: 'stale', error: 'errors' };

function tally(outcomes) {
  const counts = emptyTally();
  counts.claimed = outcomes.length;
  for (const outcome of outcomes) counts[TALLY_KEY[outcome]] += 1;
  return counts;
}

function readHandlers(handlers) {
  const entries =
    handlers instanceof Map ? [...handlers] : handlers !== null && typeof handlers === 'object' ? Object.entries(handlers) : null;
  if (entries === null || entries.length === 0) {
    throw invalidArgument(
      'handlers must map each operation type to a function, e.g. { START_EXCHANGE: async (operation, { idempotencyKey }) => {...} }',
      {
        field: 'handlers',
        reason: 'no handlers',
      },
    );
  }
  for (const [type, handler] of entries) {
    if (typeof type !== 'string' || type.length === 0 || typeof handler !== 'function') {
      throw invalidArgument(`the handler for ${String(type)} must be a function`, { field: 'handlers', reason: 'not a function' });
    }
  }
  return new Map(entries);
}

/**
 * The start-up check: every operation type the rule sets in `ruleSets` can
 * emit (the core's answer) has a handler, or is named in `ignoreTypes`
 * (operations another consumer runs). A type left out would wait pending in
 * silence: INVALID_ARGUMENT, disposition fatal, naming the types.
 */
function checkServedTypes(opts, handlers) {
  if (opts.ruleSets === undefined) {
    if (opts.ignoreTypes !== undefined) {
      throw invalidArgument('options.ignoreTypes needs options.ruleSets: the rule sets whose emitted types are checked', {
        field: 'ignoreTypes',
        reason: 'without ruleSets',
      });
    }
    return;
  }
  const { resolveRuleSet } = require('../core/rules.cjs');
  if (!Array.isArray(opts.ruleSets) || opts.ruleSets.length === 0) {
    throw invalidArgument('options.ruleSets must be a non-empty array of RuleSets or built-in names', {
      field: 'ruleSets',
      reason: 'not a non-empty array',
    });
  }
  const ignore = opts.ignoreTypes ?? [];
  if (!Array.isArray(ignore) || ignore.some((type) => typeof type !== 'string' || type.length === 0)) {
    throw invalidArgument('options.ignoreTypes must be an array of operation type names', { field: 'ignoreTypes', reason: 'not names' });
  }
  const emitted = new Map();
  for (const given of opts.ruleSets) {
    const ruleSet = resolveRuleSet(given);
    for (const type of ruleSet.operationTypes()) if (!emitted.has(type)) emitted.set(type, `${ruleSet.id}@${ruleSet.version}`);
  }
  const unknownIgnored = ignore.filter((type) => !emitted.has(type));
  if (unknownIgnored.length > 0) {
    throw invalidArgument(`options.ignoreTypes names types no rule set given emits: ${unknownIgnored.join(', ')}`, {
      field: 'ignoreTypes',
      reason: 'not emitted',
      types: unknownIgnored,
    });
  }
  const unhandled = [...emitted.keys()].filter((type) => !handlers.has(type) && !ignore.includes(type));
  if (unhandled.length > 0) {
    throw new IdemflowError(
      'INVALID_ARGUMENT',
      `the rule sets served emit operation types with no handler: ${unhandled.join(', ')} (add handlers, or name them in options.ignoreTypes if another consumer runs them)`,
      {
        disposition: 'fatal',
        details: {
          field: 'handlers',
          reason: 'unhandled operation types',
          types: unhandled,
          ruleSets: unhandled.map((type) => emitted.get(type)),
        },
      },
    );
  }
}

/** A consumer's settings from createOutboxConsumer's arguments, each checked (INVALID_ARGUMENT naming the option). */
function consumerSettings(store, handlers, options = {}) {
  if (store === null || typeof store !== 'object') {
    throw invalidArgument('store must be an outbox store (see docs/outbox.md)', { field: 'store', reason: 'not a store' });
  }
  const missing = STORE_METHODS.filter((name) => typeof store[name] !== 'function');
  if (missing.length > 0) {
    throw invalidArgument(`store does not implement the outbox interface: missing ${missing.join(', ')}`, {
      field: 'store',
      reason: 'missing methods',
      missing,
    });
  }
  const opts = options ?? {};
  if (typeof opts !== 'object') throw invalidArgument('options must be an object', { field: 'options', reason: 'not an object' });
  checkOptionKeys(opts, CONSUMER_OPTIONS, 'createOutboxConsumer');
  if (opts.owner !== undefined && (typeof opts.owner !== 'string' || opts.owner.length === 0 || !opts.owner.isWellFormed())) {
    throw invalidArgument('options.owner must be a non-empty string', { field: 'owner', reason: 'not a non-empty string' });
  }
  // The lease owner column is a name: VARCHAR(255) in MySQL/MariaDB (characters; a UTF-8 byte is at most one).
  if (opts.owner !== undefined && Buffer.byteLength(opts.owner, 'utf8') > MAX_OWNER_BYTES) {
    throw invalidArgument(`options.owner must be at most ${MAX_OWNER_BYTES} UTF-8 bytes`, { field: 'owner', reason: 'too long' });
  }
  if (opts.now !== undefined && typeof opts.now !== 'function') {
    throw invalidArgument('options.now must be a function returning milliseconds since the epoch', {
      field: 'now',
      reason: 'not a function',
    });
  }
  if (opts.autoRenew !== undefined && typeof opts.autoRenew !== 'boolean') {
    throw invalidArgument('options.autoRenew must be a boolean', { field: 'autoRenew', reason: 'not a boolean' });
  }
  const policy = createPolicy(opts);
  const handlerMap = readHandlers(handlers);
  checkServedTypes(opts, handlerMap);
  return {
    handlers: handlerMap,
    policy,
    /** consumer.policy: the settings, and the wait after failed attempt `attempt` of `operationId`, as the core computes it. */
    policyView: Object.freeze({ ...policy.settings, backoffDelay: (operationId, attempt) => policy.backoff(operationId, attempt).delayMs }),
    concurrency: wholeNumberOr(opts.concurrency, DEFAULT_CONCURRENCY, 'concurrency', 1, MAX_CONCURRENCY),
    pollIntervalMs: wholeNumberOr(opts.pollIntervalMs, DEFAULT_POLL_INTERVAL_MS, 'pollIntervalMs', 1, 3_600_000),
    owner: opts.owner ?? `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
    clock: opts.now ?? (typeof store.now === 'function' ? () => store.now() : Date.now),
    autoRenew: opts.autoRenew ?? true,
    typeCheckPolls: wholeNumberOr(opts.typeCheckPolls, DEFAULT_TYPE_CHECK_POLLS, 'typeCheckPolls', 0, 1_000_000),
    backlogIntervalMs: wholeNumberOr(opts.backlogIntervalMs, 5000, 'backlogIntervalMs', 0, 3_600_000),
    // Consecutive "unavailable" failures of one type that open its breaker (0: no breaker).
    breakerThreshold: wholeNumberOr(opts.breakerThreshold, 5, 'breakerThreshold', 0, 1_000_000),
    breakerProbeMs: wholeNumberOr(opts.breakerProbeMs, 30_000, 'breakerProbeMs', 1, 86_400_000),
  };
}

const DEFAULT_ABORT_GRACE_MS = 5000;

/** stop()'s `{ timeoutMs, abortGraceMs }` (Infinity: wait for the handlers however long). */
function stopSettings(options) {
  const opts = options ?? {};
  checkOptionKeys(opts, ['timeoutMs', 'abortGraceMs'], 'consumer.stop');
  return {
    timeoutMs: opts.timeoutMs === Infinity ? Infinity : wholeNumberOr(opts.timeoutMs, Infinity, 'timeoutMs', 0, 2 ** 31 - 1),
    abortGraceMs: wholeNumberOr(opts.abortGraceMs, DEFAULT_ABORT_GRACE_MS, 'abortGraceMs', 0, 2 ** 31 - 1),
  };
}

/** drain()'s `{ maxRounds }`. */
function drainSettings(options) {
  checkOptionKeys(options, ['maxRounds'], 'consumer.drain');
  return { maxRounds: wholeNumberOr(options?.maxRounds, 1000, 'maxRounds', 1, Number.MAX_SAFE_INTEGER) };
}

module.exports = {
  consumerSettings,
  stopSettings,
  drainSettings,
  invalidArgument,
  describeFailure,
  settlesWithin,
  emptyTally,
  tally,
};
