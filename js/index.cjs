'use strict';
// idemflow for CommonJS; `index.mjs` re-exports the same names for ESM.

const { IdemflowError, isIdemflowError } = require('./core/errors.cjs');
const { RuleSet } = require('./core/rules.cjs');
const {
  validateEvent,
  normalizeEvent,
  fingerprint,
  decide,
  planDepositConfirmation,
  verifyRuleSet,
  proveRuleSet,
} = require('./core/decide.cjs');
const { processEvent, processDepositConfirmed } = require('./host/event.cjs');
const { commitWriteSet } = require('./host/contract.cjs');
const { createDeliveryHandler } = require('./host/delivery.cjs');
const { createBatcher } = require('./host/batcher.cjs');
const { processBatch } = require('./host/batch.cjs');
const { observeBacklog } = require('./core/telemetry.cjs');
const { canonicalJson, canonicalJsonText, fingerprintPayload, fingerprintPayloadText } = require('./core/payload.cjs');
const { idempotent } = require('./host/keyed.cjs');

// The outbox consumer and retention are loaded at their first use: a worker
// that only decides and commits does not pay for them at start.
function createOutboxConsumer(...args) {
  return require('./outbox/consumer.cjs').createOutboxConsumer(...args);
}

function createRetention(...args) {
  return require('./store/retention.cjs').createRetention(...args);
}

function createWebhookReceiver(...args) {
  return require('./http/webhook.cjs').createWebhookReceiver(...args);
}

function stripeSignature(...args) {
  return require('./http/signature.cjs').stripeSignature(...args);
}

function signStripe(...args) {
  return require('./http/signature.cjs').signStripe(...args);
}

function standardWebhooksSignature(...args) {
  return require('./http/signature.cjs').standardWebhooksSignature(...args);
}

function signStandardWebhook(...args) {
  return require('./http/signature.cjs').signStandardWebhook(...args);
}

// Names and identifiers only: Node reads this object's names for `import` (index.mjs).
module.exports = {
  IdemflowError,
  isIdemflowError,
  RuleSet,
  validateEvent,
  normalizeEvent,
  fingerprint,
  decide,
  planDepositConfirmation,
  verifyRuleSet,
  proveRuleSet,
  canonicalJson,
  canonicalJsonText,
  fingerprintPayload,
  fingerprintPayloadText,
  processEvent,
  processBatch,
  idempotent,
  processDepositConfirmed,
  commitWriteSet,
  createOutboxConsumer,
  createDeliveryHandler,
  createBatcher,
  createRetention,
  createWebhookReceiver,
  stripeSignature,
  signStripe,
  standardWebhooksSignature,
  signStandardWebhook,
  observeOutboxBacklog: observeBacklog,
};

// Loaded at first use too (a worker with a database store never needs it); the same class every time.
Object.defineProperty(module.exports, 'InMemoryStore', {
  enumerable: true,
  get: () => require('./adapters/memory/index.cjs').InMemoryStore,
});
