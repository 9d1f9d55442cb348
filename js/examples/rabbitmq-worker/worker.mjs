// A RabbitMQ worker: takes events from the swaps queue, runs them through the
// delivery handler over PostgreSQL in batches (up to BATCH_SIZE messages, one
// transaction each: handle.batch; the prefetch window holds two batches, so one
// fills while the other commits), and maps each verdict onto RabbitMQ:
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
// (default swaps), PREFETCH (default 16: unacknowledged messages at once), BATCH_SIZE (default half
// the prefetch), RETRY_BASE_DELAY_MS (default 500), RETRY_MAX_DELAY_MS (default 60000),
// STOP_GRACE_MS (default 500: the wait after the last ack before the channel closes on SIGTERM),
// and the store's variables (../shared/store.mjs).
import amqp from 'amqplib';
import { createBatcher } from 'idemflow';
import { errorFields, log, openWorker } from '../shared/store.mjs';
import { declareQueues, publishConfirmed, queueNames } from './topology.mjs';

const AMQP_URL = process.env.IDEMFLOW_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672';
const PREFETCH = Number(process.env.PREFETCH || 16);
const BATCH_SIZE = Number(process.env.BATCH_SIZE || Math.max(1, Math.floor(PREFETCH / 2)));
const STOP_GRACE_MS = Number(process.env.STOP_GRACE_MS || 500);
const names = queueNames();

const { close, handle } = await openWorker();

const connection = await amqp.connect(AMQP_URL);
const channel = await connection.createConfirmChannel();
await declareQueues(channel, names);
await channel.prefetch(PREFETCH); // at most this many unacknowledged messages at once

/**
 * This delivery's number, 1 for the first. A retried copy is a new message
 * to RabbitMQ, so the count travels in a header of ours (the copy carries the
 * number of its next delivery); the quorum queue adds its own redeliveries
 * of this message (x-delivery-count: absent on a first delivery, then 1, 2, …).
 */
function attemptOf(message) {
  const headers = message.properties.headers ?? {};
  const carried =
    Number.isSafeInteger(headers['x-idemflow-attempt']) && headers['x-idemflow-attempt'] >= 1 ? headers['x-idemflow-attempt'] : 1;
  const redelivered =
    Number.isSafeInteger(headers['x-delivery-count']) && headers['x-delivery-count'] >= 0 ? headers['x-delivery-count'] : 0;
  return carried + redelivered;
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
  log({
    role: 'worker',
    action: verdict.action,
    outcome: verdict.outcome,
    ...error,
    messageId: message.properties.messageId,
    attempt,
    inFlight: batcher.held + batcher.running,
  });
}

/** One batch: one transaction for its events, then each message settled in order. */
async function onBatch(messages) {
  try {
    const attempts = messages.map(attemptOf);
    const verdicts = await handle.batch(
      messages.map((message) => message.content),
      { attempts },
    );
    for (const [i, message] of messages.entries()) await settle(message, verdicts[i], attempts[i]);
  } catch (error) {
    // Fatal (or a bug): stop without acknowledging; RabbitMQ requeues what we held.
    log({ role: 'worker', action: 'stop', error: String(error?.message ?? error), disposition: error?.disposition ?? null });
    process.exit(1);
  }
}

const batcher = createBatcher({ size: BATCH_SIZE, window: PREFETCH, run: onBatch });

let stopping = false;
const { consumerTag } = await channel.consume(
  names.main,
  (message) => {
    if (message === null) process.exit(1); // the queue was deleted: nothing more will come
    // Stopping: a message that still arrives is left unacknowledged; the channel's close hands it back.
    if (!stopping) batcher.push(message);
  },
  { noAck: false },
);
log({ role: 'worker', event: 'started', queue: names.main });

// A graceful stop: take no more messages, let every batch held or in flight
// commit and settle (its acks go out on the open channel), then close. A
// quorum queue settles acks asynchronously, and a channel closed right after
// its last acks can have those messages handed back (redelivered: duplicate
// deliveries, harmless but avoidable): the worker waits STOP_GRACE_MS first.
process.once('SIGTERM', async () => {
  stopping = true;
  await channel.cancel(consumerTag).catch(() => {});
  await batcher.drain();
  await new Promise((resolve) => setTimeout(resolve, STOP_GRACE_MS));
  await channel.close().catch(() => {});
  await connection.close().catch(() => {});
  await close();
  log({ role: 'worker', event: 'stopped' });
  process.exit(0);
});
