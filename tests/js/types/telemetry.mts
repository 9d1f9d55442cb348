// The observability surface type-checks as a host would use it.

import type { ProcessResult, RaceReason, StoredOperation } from 'idemflow';
import { createDeliveryHandler, createOutboxConsumer, InMemoryStore, observeOutboxBacklog, processEvent } from 'idemflow';

const store = new InMemoryStore();
const reasons: RaceReason[] = [];
const result: ProcessResult = await processEvent(
  store,
  { eventId: 'e-1', workflowId: 'w-1', type: 'DEPOSIT_CONFIRMED' },
  {
    metadata: { correlationId: 'corr-1', tenant: 'acme' },
    hooks: {
      onRaceRetry: ({ attempt, reason, error }) => {
        reasons.push(reason);
        void attempt.toFixed();
        void error.code;
      },
    },
  },
);
const attempts: number = result.attempts;
const fp: string = result.fingerprint;
void attempts;
void fp;

const handle = createDeliveryHandler(store, { hooks: { onRaceRetry: () => {} } });
await handle('{}', { attempt: 2, metadata: { correlationId: 'corr-2' } });

const consumer = createOutboxConsumer(
  store,
  {
    START_EXCHANGE: async (_operation, context) => {
      const tenant: unknown = context.metadata?.tenant;
      const traceparent: string | null = context.traceContext;
      void tenant;
      void traceparent;
    },
  },
  { backlogIntervalMs: 10_000 },
);
void consumer;

const operation: StoredOperation | null = await store.getOperation('start-exchange:w-1');
const stored: string | null = operation?.traceContext ?? null;
void stored;

const backlog = observeOutboxBacklog(store, { intervalMs: 1000 });
backlog.close();
