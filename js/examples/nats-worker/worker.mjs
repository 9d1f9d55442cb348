// A NATS JetStream worker: pulls events from <base>.events, runs each through
// the delivery handler over PostgreSQL, and maps the verdict onto JetStream:
//
//   ack          message.ack(), only now that the transaction has committed
//   retry        message.nak(retryAfterMs): redelivered after the delay
//   dead-letter  publish to <base>.dead (msgID: no second copy after a
//                crash), then message.term(): never redelivered
//   park         publish to <base>.parked the same way, then message.ack()
//
// A message that is never acknowledged (its worker crashed) is redelivered
// after ACK_WAIT_MS, at most MAX_DELIVER times. A fatal error stops the
// worker without acknowledging.
//
//   node examples/nats-worker/worker.mjs
//
// IDEMFLOW_NATS_URL (default nats://127.0.0.1:4222), SWAPS_STREAM (default
// swaps), PREFETCH (default 16: messages held or in flight at once), BATCH_SIZE (default half the
// prefetch), RETRY_BASE_DELAY_MS (default 500), RETRY_MAX_DELAY_MS (default 60000), ACK_WAIT_MS,
// and the store's variables (../shared/store.mjs).

import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers } from '@nats-io/transport-node';
import { createBatcher } from 'idemflow';
import { errorFields, log, openWorker } from '../shared/store.mjs';
import { ensureStream, streamNames } from './topology.mjs';

const NATS_URL = process.env.IDEMFLOW_NATS_URL || 'nats://127.0.0.1:4222';
const PREFETCH = Number(process.env.PREFETCH || 16);
const BATCH_SIZE = Number(process.env.BATCH_SIZE || Math.max(1, Math.floor(PREFETCH / 2)));
const names = streamNames();

const { close, handle } = await openWorker();

const connection = await connect({ servers: NATS_URL });
await ensureStream(await jetstreamManager(connection), names);
const js = jetstream(connection);
const consumer = await js.consumers.get(names.stream, names.consumer);

/** A copy of the message on another subject, with the error in headers. */
async function publishCopy(subject, message, error) {
  const h = headers();
  h.set('Idemflow-Code', error.code);
  h.set('Idemflow-Reason', String(error.details.reason ?? error.message).slice(0, 200));
  await js.publish(subject, message.data, { msgID: `${subject}:${message.seq}`, headers: h });
}

/** Carries out one verdict on its message. */
async function settle(message, verdict, attempt) {
  switch (verdict.action) {
    case 'ack':
      message.ack();
      break;
    case 'retry':
      message.nak(verdict.retryAfterMs);
      break;
    case 'dead-letter':
      await publishCopy(names.dead, message, verdict.error);
      message.term(); // (a reason argument needs NATS server 2.10)
      break;
    case 'park':
      await publishCopy(names.parked, message, verdict.error);
      message.ack();
      break;
  }
  const error = errorFields(verdict);
  log({
    role: 'worker',
    action: verdict.action,
    outcome: verdict.outcome,
    ...error,
    seq: message.seq,
    attempt,
    inFlight: batcher.held + batcher.running,
  });
}

/** One batch: one transaction for its events (handle.batch), then each message settled in order. */
async function onBatch(batch) {
  try {
    const attempts = batch.map((message) => message.info.deliveryCount);
    const verdicts = await handle.batch(
      batch.map((message) => message.data),
      { attempts },
    );
    for (const [i, message] of batch.entries()) await settle(message, verdicts[i], attempts[i]);
  } catch (error) {
    // Fatal (or a bug): stop without acknowledging; JetStream redelivers after ack_wait.
    log({ role: 'worker', action: 'stop', error: String(error?.message ?? error), disposition: error?.disposition ?? null });
    process.exit(1);
  }
}

// At most PREFETCH messages held or in flight at once (push waits for room): one batch fills while another commits.
const batcher = createBatcher({ size: BATCH_SIZE, window: PREFETCH, run: onBatch });

const messages = await consumer.consume({ max_messages: PREFETCH });
log({ role: 'worker', event: 'started', stream: names.stream });

// A graceful stop: take no more messages, let every batch held or in flight commit and settle, then close.
process.once('SIGTERM', async () => {
  messages.stop();
  await batcher.drain();
  await connection.drain().catch(() => {});
  await close();
  log({ role: 'worker', event: 'stopped' });
  process.exit(0);
});

for await (const message of messages) {
  await batcher.push(message);
}
