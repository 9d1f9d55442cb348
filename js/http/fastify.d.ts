// idemflow/fastify: the Idempotency-Key plugin and the webhook route for Fastify.
import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import type { IdempotencyContext, IdempotencyOptions, WebhookReceiver } from './types.js';

export type { IdempotencyContext, IdempotencyOptions } from './types.js';

/** A route's own settings (`config: { idempotency }`): the plugin's, overridden; false turns it off. */
export type RouteIdempotency = Partial<Omit<IdempotencyOptions<FastifyRequest>, 'store'>> | false;

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by idemflow's idempotency plugin: write through `client`; `final()` keeps a 5xx. */
    idempotency?: IdempotencyContext;
  }
  interface FastifyContextConfig {
    idempotency?: RouteIdempotency;
  }
}

/** `fastify.register(idempotency, { store })`: every route of the instance; a route's config overrides. */
export const idempotency: FastifyPluginCallback<IdempotencyOptions<FastifyRequest>>;

/** `fastify.register(webhook, { receiver, url })`: a POST route whose raw body goes to the receiver. */
export const webhook: FastifyPluginCallback<{ receiver: WebhookReceiver; url: string }>;
