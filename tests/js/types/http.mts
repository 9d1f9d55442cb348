// Compiled with tsc --strict (never run): RFC 8785, the keyed mode, the webhook receiver and the
// Idempotency-Key middleware as a service sees them.
import http from 'node:http';
import express from 'express';
import Fastify from 'fastify';
import {
  canonicalJson,
  createDeliveryHandler,
  createWebhookReceiver,
  fingerprintPayload,
  fingerprintPayloadText,
  InMemoryStore,
  idempotent,
  type KeyedResult,
  signStandardWebhook,
  signStripe,
  standardWebhooksSignature,
  stripeSignature,
  type WebhookReceiver,
} from 'idemflow';
import { idempotency, rawBody } from 'idemflow/express';
import { idempotency as fastifyIdempotency, webhook } from 'idemflow/fastify';
import type { PostgresPool, PostgresStore } from 'idemflow/postgres';
import type { SqliteStore } from 'idemflow/sqlite';

declare const postgres: PostgresStore<PostgresPool>;
declare const sqlite: SqliteStore;
const canonical: string = canonicalJson({ b: [1, 2.5], a: null });
const fingerprint: string = fingerprintPayload({ amount: '125' });
void [canonical, fingerprint, fingerprintPayloadText(Buffer.from('{}'))];

async function placeOrder(key: string, order: { sku: string; quantity: number }): Promise<string> {
  // The store's transaction type comes through: tx.client is the pg client of the transaction.
  const result: KeyedResult<{ orderId: string }> = await idempotent(
    postgres,
    { key, payload: order },
    async (tx) => {
      const { rows } = await tx.client.query('INSERT INTO orders (sku, quantity) VALUES ($1, $2) RETURNING id', [
        order.sku,
        order.quantity,
      ]);
      const [row] = rows as { id: string }[];
      return { orderId: row.id };
    },
    { waitMs: 2000 },
  );
  await idempotent(sqlite, { key, fingerprint: fingerprintPayload(order) }, (tx) => {
    tx.client.prepare('INSERT INTO orders (sku) VALUES (?)').run(order.sku);
  });
  return result.replayed ? `replayed ${result.output?.orderId}` : `placed ${result.output?.orderId}`;
}
void placeOrder('k', { sku: 'A', quantity: 1 });

const store = new InMemoryStore();
const receiver: WebhookReceiver = createWebhookReceiver(createDeliveryHandler(store, { ruleSet: 'deposit-swap' }), {
  verify: standardWebhooksSignature({ secret: ['whsec_bmV3', 'whsec_b2xk'], toleranceSeconds: 300 }),
  park: async ({ body, error }) => {
    void [body.length, error.code];
  },
  maxBytes: 65536,
});
http.createServer(receiver);
const header: string = signStripe('{"eventId":"e"}', { secret: 'whsec_new' });
const signed: string = signStandardWebhook('{}', { secret: 'whsec_bmV3', id: 'msg_1' })['webhook-signature'];
void [header, signed, stripeSignature({ secret: 'whsec_new', header: 'stripe-signature' })];

const app = express();
app.post(
  '/orders',
  idempotency({ store, required: true, waitMs: 500, scope: (req) => String(req.headers['x-account']) }),
  express.json({ verify: rawBody }),
  (req, res) => {
    const key: string | undefined = req.idempotency?.key;
    if (req.body === undefined) req.idempotency?.final();
    res.status(201).json({ key });
  },
);
app.post('/webhooks', receiver);

const fastify = Fastify();
fastify.register(fastifyIdempotency, { store, methods: ['POST'], scope: (request) => request.ip });
fastify.register(fastifyIdempotency, { store, scope: 'global' });
fastify.register(webhook, { receiver, url: '/webhooks' });
fastify.post('/orders', { config: { idempotency: { required: true } } }, async (request) => ({ key: request.idempotency?.key ?? null }));
fastify.post('/free', { config: { idempotency: false } }, async () => ({ ok: true }));
