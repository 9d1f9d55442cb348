// Compiled with tsc --strict (never run): the outbox types as a consumer sees them.
import { InMemoryStore, createOutboxConsumer, type ClaimedOperation, type HandlerContext, type OutboxStore, type StoredOperation } from 'idemflow';

let t = 0;
const store = new InMemoryStore([], { now: () => t });
const asStore: OutboxStore = store;
const consumer = createOutboxConsumer(asStore, {
  START_EXCHANGE: async (operation: ClaimedOperation, { idempotencyKey, signal, attempt }: HandlerContext) => {
    void [idempotencyKey as string, signal.aborted as boolean, operation.id as string, attempt as number];
  },
}, { maxAttempts: 3, leaseMs: 1000, concurrency: 2 });
consumer.on('retry-scheduled', ({ operationId, nextAttemptAt, error }) => { void [nextAttemptAt as number, operationId + error]; });
consumer.on('dead', ({ reason }) => { const r: 'max-attempts' | 'non-retryable' | 'claims-expired' = reason; void r; });
async function admin(): Promise<void> {
  const dead: StoredOperation[] = await store.listOperations({ status: 'dead' });
  for (const op of dead) await store.requeue(op.id);
  const { deleted, batches } = await store.purgeReceipts({ olderThan: new Date(), batchSize: 500 });
  const done = await store.purgeOperations({ olderThan: Date.now() - 86_400_000 });
  const counts = await consumer.drain();
  const stopped = await consumer.stop({ timeoutMs: 1000 });
  void [deleted, batches, done.deleted, counts.rounds, stopped.abandoned, consumer.policy.backoffDelay('op', 1), t++];
}
void admin;
consumer.on('quarantined', ({ operationId, error, recorded }) => { void [operationId ?? 'unreadable id', error.code, recorded as boolean]; });
async function quarantine(): Promise<void> {
  const claimed = await store.claimOperations({ owner: 'o', now: 0, leaseExpiresAt: 1, limit: 1, onQuarantine: ({ lastError }) => { void (lastError as string); } });
  const unreadable: string[] | undefined = (await store.listOperations({ status: 'dead' }))[0]?.unreadable;
  void [claimed, unreadable, consumer.stats().quarantined as number];
}
void quarantine;
// @ts-expect-error an unknown event name does not type-check
consumer.on('finished', () => {});
