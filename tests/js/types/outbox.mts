// Compiled with tsc --strict (never run): the outbox types as a consumer sees them.
import {
  type ClaimedOperation,
  createOutboxConsumer,
  type HandlerContext,
  InMemoryStore,
  type OutboxStore,
  type StoredOperation,
} from 'idemflow';

let t = 0;
const store = new InMemoryStore([], { now: () => t });
const asStore: OutboxStore = store;
const consumer = createOutboxConsumer(
  asStore,
  {
    START_EXCHANGE: async (operation: ClaimedOperation, { idempotencyKey, signal, attempt }: HandlerContext) => {
      void [idempotencyKey as string, signal.aborted as boolean, operation.id as string, attempt as number];
    },
  },
  { maxAttempts: 3, leaseMs: 1000, concurrency: 2 },
);
consumer.on('retry-scheduled', ({ operationId, nextAttemptAt, error }) => {
  void [nextAttemptAt as number, operationId + error];
});
consumer.on('dead', ({ reason }) => {
  const r: 'max-attempts' | 'non-retryable' | 'claims-expired' | 'outage-budget' = reason;
  void r;
});
consumer.on('breaker-opened', ({ type, probeAt }) => {
  void [type.length, probeAt];
});
const open: Record<string, { state: 'open' | 'half-open' }> = consumer.breakers();
void open;
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
consumer.on('quarantined', ({ operationId, error, recorded }) => {
  void [operationId ?? 'unreadable id', error.code, recorded as boolean];
});
async function quarantine(): Promise<void> {
  const claimed = await store.claimOperations({
    owner: 'o',
    now: 0,
    leaseExpiresAt: 1,
    limit: 1,
    onQuarantine: ({ lastError }) => {
      void (lastError as string);
    },
  });
  const unreadable: string[] | undefined = (await store.listOperations({ status: 'dead' }))[0]?.unreadable;
  void [claimed, unreadable, consumer.stats().quarantined as number];
}
void quarantine;
// @ts-expect-error an unknown event name does not type-check
consumer.on('finished', () => {});
async function operator(durable: import('idemflow/sqlite').SqliteStore): Promise<void> {
  const page = await durable.listOperations({
    status: 'dead',
    type: 'START_EXCHANGE',
    workflowId: 'swap-1',
    owner: 'w',
    olderThan: new Date(),
    newerThan: 0,
    errorContains: 'timeout',
    limit: 10,
    afterId: 'a',
  });
  const results = await store.requeueOperations({ ids: page.map((op) => op.id) });
  const byFilter = await durable.requeueOperations({ status: 'dead', type: 'START_EXCHANGE', limit: 100 });
  const outcome: 'requeued' | 'not-dead' | 'not-found' = results[0]?.result ?? 'not-found';
  const { byStatus, byType, oldestDueAgeMs } = await durable.stats({ now: Date.now() });
  const released: string[] = await store.releaseOwner('worker-1');
  await store.purgeOperations({
    olderThan: 0,
    status: 'dead',
    onBatch: ({ deleted, batches }) => {
      void [deleted as number, batches as number];
    },
  });
  void [byFilter, outcome, byStatus.dead as number, byType.START_EXCHANGE?.pending, oldestDueAgeMs ?? 'nothing due', released];
  // @ts-expect-error a filter that requeues must say status: 'dead'
  await store.requeueOperations({ type: 'START_EXCHANGE' });
  // @ts-expect-error listOperations takes no unknown filter
  await store.listOperations({ kind: 'dead' });
}
void operator;
