'use strict';
// idemflow for CommonJS. `index.mjs` re-exports exactly these names for ESM.

const { IdemflowError, isIdemflowError } = require('./core/errors.cjs');
const { RuleSet } = require('./core/rules.cjs');
const core = require('./core/decide.cjs');
const { processEvent, processDepositConfirmed, commitWriteSet } = require('./core/host.cjs');
const { createDeliveryHandler } = require('./core/delivery.cjs');
const { processBatch } = require('./core/batch.cjs');
const { InMemoryStore } = require('./adapters/memory/index.cjs');
const { createOutboxConsumer } = require('./outbox/consumer.cjs');
const { createRetention } = require('./store/retention.cjs');

module.exports = {
  IdemflowError,
  isIdemflowError,
  RuleSet,
  validateEvent: core.validateEvent,
  normalizeEvent: core.normalizeEvent,
  fingerprint: core.fingerprint,
  decide: core.decide,
  decideJSON: core.decideJSON,
  planDepositConfirmation: core.planDepositConfirmation,
  verifyRuleSet: core.verifyRuleSet,
  processEvent,
  processBatch,
  processDepositConfirmed,
  commitWriteSet,
  InMemoryStore,
  wasmMemoryBytes: core.wasmMemoryBytes,
  createOutboxConsumer,
  createDeliveryHandler,
  createRetention,
};
