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
  decideJSON,
  planDepositConfirmation,
  verifyRuleSet,
  canonicalJson,
  canonicalJsonText,
  fingerprintPayload,
  fingerprintPayloadText,
  processEvent,
  processBatch,
  processDepositConfirmed,
  commitWriteSet,
  InMemoryStore,
  wasmMemoryBytes,
  createOutboxConsumer,
  createDeliveryHandler,
  createBatcher,
  createRetention,
  observeOutboxBacklog,
} = idemflow;

export default idemflow;
