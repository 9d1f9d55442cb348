'use strict';
// The outbox policy of the core: when a lease expires, how long a retry
// waits, whether an operation may run again, and what a handler's result
// means. The consumer and the delivery handler ask; the core answers.

const { bindings: wasm, call, decider } = require('./wasm.cjs');

const POLICY_OPTIONS = Object.freeze(['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'leaseMs', 'outageBudgetMs']);

/** The core's claim condition for one stored operation at `now`. */
function isClaimable(operation, now) {
  return call(() => wasm.outboxClaimable(String(operation.status), operation.nextAttemptAt, operation.leaseExpiresAt ?? undefined, now));
}

/** The policy as the core normalised it, and the questions the consumer asks of it. */
function createPolicy(options) {
  const settings = {};
  for (const key of POLICY_OPTIONS) {
    if (options[key] !== undefined) settings[key] = options[key];
  }
  // Compiled once in wasm and held for the life of the consumer (a handful per process), not re-parsed per call.
  const compiled = call(() => decider().outboxPolicy(settings));
  const backoff = (operationId, attempt) => JSON.parse(call(() => compiled.backoff(JSON.stringify({ operationId, attempt }))));
  return {
    settings: Object.freeze(JSON.parse(compiled.settingsJson())),
    backoff,
    leaseExpiresAt: (now) => call(() => compiled.leaseExpiresAt(now)),
    admit: (attempts) => JSON.parse(call(() => compiled.admit(attempts))),
    classify: (request) => JSON.parse(call(() => compiled.classify(JSON.stringify(request)))),
  };
}

module.exports = { POLICY_OPTIONS, isClaimable, createPolicy };
