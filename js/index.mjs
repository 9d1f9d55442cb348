// idemflow for ES modules: the same objects as the CommonJS entry point.
import idemflow from './index.cjs';

export const {
  IdemflowError,
  isIdemflowError,
  RuleSet,
  validateEvent,
  normalizeEvent,
  fingerprint,
  decide,
  planDepositConfirmation,
  verifyRuleSet,
  processEvent,
  processBatch,
  processDepositConfirmed,
  commitWriteSet,
  InMemoryStore,
  createOutboxConsumer,
  createDeliveryHandler,
  createBatcher,
  createRetention,
  observeOutboxBacklog,
} = idemflow;

export default idemflow;
