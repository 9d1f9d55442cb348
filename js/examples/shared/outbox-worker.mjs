// The outbox consumer: it carries out what committed decisions intend
// (START_EXCHANGE, SEND_PAYOUT, OPEN_REVIEW) by calling the provider with the
// operation id as idempotency key. A crash mid-call leaves a claim that
// expires; another consumer runs the call again with the same key, and the
// provider answers it without a second exchange. Run as many as you like:
//
//   PROVIDER_URL=http://127.0.0.1:8085 node examples/shared/outbox-worker.mjs
//
// Also: IDEMFLOW_PG_URL, IDEMFLOW_TABLE_PREFIX (see store.mjs), OUTBOX_LEASE_MS
// (default 30000), OUTBOX_BASE_DELAY_MS (default 1000), OUTBOX_POLL_MS (default 1000).
import { createOutboxConsumer } from 'idemflow';
import { log, openStore } from './store.mjs';

const PROVIDER_URL = process.env.PROVIDER_URL || 'http://127.0.0.1:8085';
const env = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);

const { store, close } = openStore();

/** One provider call. 5xx and 429 are worth retrying; any other refusal is not. */
async function callProvider(kind, operation, { idempotencyKey, signal }) {
  const response = await fetch(`${PROVIDER_URL}/${kind}`, {
    method: 'POST',
    signal, // aborted when this consumer loses the lease
    headers: {
      'content-type': 'application/json',
      'idempotency-key': idempotencyKey,
      'x-caller': String(process.pid),
    },
    body: JSON.stringify({ workflowId: operation.workflowId, ...operation.payload }),
  });
  await response.arrayBuffer();
  if (response.ok) return;
  const error = new Error(`provider answered ${response.status} to ${kind} ${idempotencyKey}`);
  if (response.status !== 429 && response.status < 500) error.retryable = false; // dead at once
  throw error;
}

const consumer = createOutboxConsumer(store, {
  START_EXCHANGE: (operation, context) => callProvider('exchanges', operation, context),
  SEND_PAYOUT: (operation, context) => callProvider('payouts', operation, context),
  OPEN_REVIEW: (operation, context) => callProvider('reviews', operation, context),
}, {
  concurrency: 4,
  maxAttempts: 10,
  leaseMs: env('OUTBOX_LEASE_MS', 30_000),
  baseDelayMs: env('OUTBOX_BASE_DELAY_MS', 1000),
  pollIntervalMs: env('OUTBOX_POLL_MS', 1000),
});

consumer
  .on('claimed', (e) => log({ role: 'outbox', event: 'claimed', operationId: e.operationId, attempt: e.attempt }))
  .on('done', (e) => log({ role: 'outbox', event: 'done', operationId: e.operationId, attempt: e.attempt }))
  .on('retry-scheduled', (e) => log({ role: 'outbox', event: 'retry', operationId: e.operationId, delayMs: e.delayMs, error: e.error }))
  .on('dead', (e) => log({ role: 'outbox', event: 'dead', operationId: e.operationId, reason: e.reason, error: e.error }))
  .on('store-error', (e) => log({ role: 'outbox', event: 'store-error', during: e.during, error: String(e.error?.message ?? e.error) }));

consumer.start();
log({ role: 'outbox', event: 'started', owner: consumer.owner });

// Finish the calls in flight, then leave; what is left is claimed again by another consumer.
process.once('SIGTERM', async () => {
  await consumer.stop({ timeoutMs: 5000 });
  await close();
  process.exit(0);
});
