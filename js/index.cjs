'use strict';
// idemflow for CommonJS. `index.mjs` re-exports exactly these names for ESM.

const { IdemflowError, isIdemflowError } = require('./errors.cjs');
const core = require('./core.cjs');
const { processEvent, processDepositConfirmed, commitWriteSet } = require('./host.cjs');
const { InMemoryStore } = require('./memory.cjs');
const { createOutboxConsumer } = require('./outbox.cjs');
const { createDeliveryHandler } = require('./delivery.cjs');

module.exports = {
  IdemflowError,
  isIdemflowError,
  RuleSet: core.RuleSet,
  validateEvent: core.validateEvent,
  normalizeEvent: core.normalizeEvent,
  fingerprint: core.fingerprint,
  decide: core.decide,
  decideJSON: core.decideJSON,
  planDepositConfirmation: core.planDepositConfirmation,
  verifyRuleSet: core.verifyRuleSet,
  processEvent,
  processDepositConfirmed,
  commitWriteSet,
  InMemoryStore,
  wasmMemoryBytes: core.wasmMemoryBytes,
  createOutboxConsumer,
  createDeliveryHandler,
};
