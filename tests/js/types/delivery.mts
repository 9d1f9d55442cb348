// Compiled with tsc --strict (never run): the delivery handler's types as a worker sees them.
import {
  createDeliveryHandler,
  type DeliveryHandler,
  type DeliveryVerdict,
  type IdemflowError,
  InMemoryStore,
  type Outcome,
} from 'idemflow';
import type { PostgresStore } from 'idemflow/postgres';

declare const postgres: PostgresStore;
const handle: DeliveryHandler = createDeliveryHandler(new InMemoryStore(), { ruleSet: 'deposit-swap', maxBytes: 65536, baseDelayMs: 200 });
const overPostgres: DeliveryHandler = createDeliveryHandler(postgres, { parse: async (body) => JSON.parse(String(body)) });
void overPostgres;

async function onMessage(body: Buffer, deliveryCount: number): Promise<string> {
  const verdict: DeliveryVerdict = await handle(body, { attempt: deliveryCount });
  switch (verdict.action) {
    case 'ack': {
      const outcome: Outcome = verdict.outcome;
      return outcome;
    }
    case 'retry': {
      const delay: number = verdict.retryAfterMs;
      return `${verdict.error.code} in ${delay} ms`;
    }
    case 'dead-letter':
    case 'park': {
      const error: IdemflowError = verdict.error;
      return `${verdict.action}: ${error.code} (${error.disposition})`;
    }
  }
}
void onMessage(Buffer.from('{}'), 1);
void handle('{"eventId":"e"}');
void handle({ eventId: 'e', workflowId: 'w', type: 'DEADLINE_PASSED' });
void handle(new Uint8Array(2));

// @ts-expect-error a store is required
createDeliveryHandler(undefined);
// @ts-expect-error maxBytes is a number
createDeliveryHandler(new InMemoryStore(), { maxBytes: '64k' });
