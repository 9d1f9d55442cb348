// idemflow/express for ES modules: the same objects as express.cjs.
import express from './express.cjs';

export const { idempotency, rawBody, createWebhookReceiver, stripeSignature, signStripe, standardWebhooksSignature, signStandardWebhook } =
  express;

export default express;
