// What every outbox consumer program of the examples runs: the store, a
// consumer over the given handlers with its settings from the environment,
// one log line per event, and a SIGTERM that lets the calls in flight finish
// (what is left is claimed again by another consumer).
//
// IDEMFLOW_PG_URL, IDEMFLOW_TABLE_PREFIX (see store.mjs), OUTBOX_LEASE_MS
// (default 30000), OUTBOX_BASE_DELAY_MS (default 1000), OUTBOX_POLL_MS (default 1000).
import { createOutboxConsumer } from 'idemflow';
import { log, openStore } from './store.mjs';

const env = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);

/** Starts the consumer; `onStop` runs after it stopped and before the store closes (to close a producer, say). */
export function runOutboxConsumer({ role, handlers, onStop = async () => {}, fields = {} }) {
  const { store, close } = openStore();
  const consumer = createOutboxConsumer(store, handlers, {
    concurrency: 4,
    maxAttempts: 10,
    leaseMs: env('OUTBOX_LEASE_MS', 30_000),
    baseDelayMs: env('OUTBOX_BASE_DELAY_MS', 1000),
    pollIntervalMs: env('OUTBOX_POLL_MS', 1000),
  });
  consumer
    .on('claimed', (e) => log({ role, event: 'claimed', operationId: e.operationId, attempt: e.attempt }))
    .on('done', (e) => log({ role, event: 'done', operationId: e.operationId, attempt: e.attempt }))
    .on('retry-scheduled', (e) => log({ role, event: 'retry', operationId: e.operationId, delayMs: e.delayMs, error: e.error }))
    .on('dead', (e) => log({ role, event: 'dead', operationId: e.operationId, reason: e.reason, error: e.error }))
    .on('store-error', (e) => log({ role, event: 'store-error', during: e.during, error: String(e.error?.message ?? e.error) }));
  consumer.start();
  log({ role, event: 'started', owner: consumer.owner, ...fields });

  process.once('SIGTERM', async () => {
    await consumer.stop({ timeoutMs: 5000 });
    await onStop();
    await close();
    process.exit(0);
  });
  return consumer;
}
