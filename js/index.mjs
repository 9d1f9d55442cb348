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
  canonicalJson,
  canonicalJsonText,
  fingerprintPayload,
  fingerprintPayloadText,
  processEvent,
  processBatch,
  idempotent,
  processDepositConfirmed,
  commitWriteSet,
  InMemoryStore,
  createOutboxConsumer,
  createDeliveryHandler,
  createBatcher,
  createRetention,
  createWebhookReceiver,
  hmacSignature,
  signPayload,
  observeOutboxBacklog,
} = idemflow;

export default idemflow;
