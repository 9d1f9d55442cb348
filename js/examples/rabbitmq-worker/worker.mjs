// A RabbitMQ worker: takes events from the swaps queue, runs them through the
// delivery handler over PostgreSQL in batches (up to the prefetch window, one
// transaction each: handle.batch), and maps each verdict onto RabbitMQ:
//
//   ack          channel.ack, only now that the transaction has committed
//   retry        a copy to <base>.retry with expiration = retryAfterMs (it
//                comes back to <base> when it expires), then ack
//   dead-letter  channel.nack without requeue: the queue's dead-letter
//                exchange moves it to <base>.dead
//   park         a copy to <base>.parked with the error, then ack
//
// A fatal error (wrong tables, wrong configuration) stops the worker without
// acknowledging: the message stays in the queue for a fixed worker.
//
//   node examples/rabbitmq-worker/worker.mjs
//
// IDEMFLOW_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672), SWAPS_QUEUE
// (default swaps), PREFETCH (default 16), RETRY_BASE_DELAY_MS (default 500), RETRY_MAX_DELAY_MS (default 60000),
// and the store's variables (../shared/store.mjs).
import amqp from 'amqplib';
import { createBatcher } from '../shared/batcher.mjs';
import { errorFields, log, openWorker } from '../shared/store.mjs';
import { declareQueues, publishConfirmed, queueNames } from './topology.mjs';

const AMQP_URL = process.env.IDEMFLOW_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672';
const PREFETCH = Number(process.env.PREFETCH || 16);
const names = queueNames();

const { close, handle } = await openWorker();

const connection = await amqp.connect(AMQP_URL);
const channel = await connection.createConfirmChannel();
await declareQueues(channel, names);
await channel.prefetch(PREFETCH); // at most this many unacknowledged messages at once

let inFlight = 0;

/** Deliveries so far: ours in a header on retried copies, plus the quorum queue's redelivery count. */
function attemptOf(message) {
  const headers = message.properties.headers ?? {};
  return Number(headers['x-idemflow-attempt'] ?? 1) + Number(headers['x-delivery-count'] ?? 0);
}

/** Carries out one verdict on its message. */
async function settle(message, verdict, attempt) {
  const error = errorFields(verdict);
  switch (verdict.action) {
    case 'ack':
      channel.ack(message);
      break;
    case 'retry':
      await publishConfirmed(channel, names.retry, message.content, {
        expiration: String(verdict.retryAfterMs),
        messageId: message.properties.messageId,
        headers: { 'x-idemflow-attempt': attempt + 1, 'x-idemflow-code': verdict.error.code },
      });
      channel.ack(message);
      break;
    case 'dead-letter':
      channel.nack(message, false, false);
      break;
    case 'park':
      await publishConfirmed(channel, names.parked, message.content, {
        messageId: message.properties.messageId,
        headers: { 'x-idemflow-code': verdict.error.code, 'x-idemflow-error': verdict.error.message },
      });
      channel.ack(message);
      break;
  }
  log({ role: 'worker', action: verdict.action, outcome: verdict.outcome, ...error, messageId: message.properties.messageId, attempt, inFlight });
}

/** One batch: one transaction for its events, then each message settled in order. */
async function onBatch(messages) {
  inFlight += messages.length;
  try {
    const attempts = messages.map(attemptOf);
    const verdicts = await handle.batch(messages.map((message) => message.content), { attempts });
    for (const [i, message] of messages.entries()) await settle(message, verdicts[i], attempts[i]);
  } catch (error) {
    // Fatal (or a bug): stop without acknowledging; RabbitMQ requeues what we held.
    log({ role: 'worker', action: 'stop', error: String(error?.message ?? error), disposition: error?.disposition ?? null });
    process.exit(1);
  } finally {
    inFlight -= messages.length;
  }
}

const batcher = createBatcher({ size: PREFETCH, run: onBatch });

await channel.consume(names.main, (message) => {
  if (message === null) process.exit(1); // the queue was deleted: nothing more will come
  batcher.push(message);
}, { noAck: false });
log({ role: 'worker', event: 'started', queue: names.main });

// Stop taking messages, let those in flight finish, then close.
process.once('SIGTERM', async () => {
  await channel.close().catch(() => {});
  await connection.close().catch(() => {});
  await close();
  process.exit(0);
});
