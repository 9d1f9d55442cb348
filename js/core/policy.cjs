'use strict';
// The outbox policy of the core: when a lease expires, how long a retry
// waits, whether an operation may run again, and what a handler's result
// means. The consumer and the delivery handler ask; the core answers.

const { bindings: wasm, call } = require('./wasm.cjs');

const POLICY_OPTIONS = Object.freeze(['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'leaseMs']);

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
  const text = call(() => wasm.outboxPolicy(settings));
  const backoff = (operationId, attempt) => JSON.parse(call(() => wasm.outboxBackoff(text, JSON.stringify({ operationId, attempt }))));
  return {
    settings: Object.freeze(JSON.parse(text)),
    backoff,
    leaseExpiresAt: (now) => call(() => wasm.outboxLeaseExpiresAt(text, now)),
    admit: (attempts) => JSON.parse(call(() => wasm.outboxAdmit(text, attempts))),
    classify: (request) => JSON.parse(call(() => wasm.outboxClassify(text, JSON.stringify(request)))),
  };
}

module.exports = { POLICY_OPTIONS, isClaimable, createPolicy };
