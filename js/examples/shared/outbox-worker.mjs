// The outbox consumer: it carries out what committed decisions intend
// (START_EXCHANGE, SEND_PAYOUT, OPEN_REVIEW, REVIEW_DEPOSIT) by calling the provider with the
// operation id as idempotency key. A crash mid-call leaves a claim that
// expires; another consumer runs the call again with the same key, and the
// provider answers it without a second exchange. Run as many as you like:
//
//   PROVIDER_URL=http://127.0.0.1:8085 node examples/shared/outbox-worker.mjs
//
// Also the settings of outbox.mjs (store, lease, backoff, poll interval).
import { runOutboxConsumer } from './outbox.mjs';

const PROVIDER_URL = process.env.PROVIDER_URL || 'http://127.0.0.1:8085';

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

runOutboxConsumer({
  role: 'outbox',
  handlers: {
    START_EXCHANGE: (operation, context) => callProvider('exchanges', operation, context),
    SEND_PAYOUT: (operation, context) => callProvider('payouts', operation, context),
    OPEN_REVIEW: (operation, context) => callProvider('reviews', operation, context),
    // A deposit the swap did not exchange (a second payment, a partial one): a person refunds or settles it.
    REVIEW_DEPOSIT: (operation, context) => callProvider('deposit-reviews', operation, context),
  },
});
