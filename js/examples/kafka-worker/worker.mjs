// A Kafka worker: a member of the consumer group <base>-workers on <base> and
// <base>.retry. Each partition's batch (eachBatch) is taken BATCH_SIZE messages
// at a time through the delivery handler over PostgreSQL (handle.batch, one
// transaction), and each verdict is carried out in Kafka:
//
//   ack          nothing to send
//   retry        a copy to <base>.retry with the next attempt and the time it is
//                due (now + retryAfterMs) in headers
//   dead-letter  a copy to <base>.dead with the error in headers
//   park         a copy to <base>.parked the same way
//
// The copies keep the message's key (the workflow id) and name the message the
// event first came in (idemflow-origin, carried forward from copy to copy). On
// the retry topic a copy of an event whose chain this member has already seen
// further on is a fork left by a crash, and is dropped (consume.mjs's
// chainGuard): one retry chain per event. Only once the store
// has committed and the broker has acknowledged every copy of a chunk are the
// chunk's offsets resolved and committed: a crash before that redelivers the
// chunk from the last commit, and each replay is a duplicate-delivery. A
// retry copy that is not yet due pauses its partition until it is. The worker
// heartbeats after every chunk, so a long batch keeps its partitions.
//
// A fatal error (wrong tables, wrong configuration) stops the worker without
// committing: the messages come back to a fixed worker.
//
//   node examples/kafka-worker/worker.mjs
//
// IDEMFLOW_KAFKA_BROKERS (default 127.0.0.1:19092), SWAPS_TOPIC (default
// swaps), BATCH_SIZE (16), PARTITIONS_CONCURRENTLY (2), SESSION_TIMEOUT_MS
// (30000), FETCH_MAX_WAIT_MS (5000), RETRY_BASE_DELAY_MS (500), RETRY_MAX_DELAY_MS (60000), and the
// store's variables (../shared/store.mjs).
import { errorFields, log, openWorker } from '../shared/store.mjs';
import { attemptOf, chainGuard, copyFor, createConsumer, inChunks, originOf } from './consume.mjs';
import { createProducer, ensureTopics, kafkaClient, topicNames } from './topology.mjs';

const BATCH_SIZE = Number(process.env.BATCH_SIZE || 16);
const names = topicNames();

const { close, handle } = await openWorker();

const kafka = kafkaClient(`idemflow-worker-${process.pid}`);
await ensureTopics(kafka, names);
const producer = createProducer(kafka);
await producer.connect();
const consumer = createConsumer(kafka, names.group);
consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  log({
    role: 'worker',
    event: 'group-join',
    memberId: payload.memberId,
    isLeader: payload.isLeader,
    assignment: payload.memberAssignment,
  });
});
await consumer.connect();
await consumer.subscribe({ topics: [names.main, names.retry], fromBeginning: true });

const guard = chainGuard();

/** One chunk: one transaction, then the copies its verdicts ask for, all acknowledged by the broker. */
async function settle(topic, partition, chunk) {
  // On the retry topic, a copy of an event whose chain this member has seen further on is a fork: dropped.
  const keep = topic === names.retry ? guard.fresh(topic, partition, chunk) : chunk.map(() => true);
  chunk.forEach((message, i) => {
    if (keep[i]) return;
    log({
      role: 'worker',
      event: 'fork-dropped',
      topic,
      partition,
      offset: message.offset,
      origin: originOf(topic, partition, message),
      attempt: attemptOf(message),
    });
  });
  const messages = chunk.filter((_, i) => keep[i]);
  if (messages.length === 0) return;
  const attempts = messages.map(attemptOf);
  let verdicts;
  try {
    verdicts = await handle.batch(
      messages.map((message) => message.value ?? Buffer.alloc(0)),
      { attempts },
    );
  } catch (error) {
    // Fatal (or a bug): stop without committing; the group hands these messages to another member.
    log({ role: 'worker', action: 'stop', error: String(error?.message ?? error), disposition: error?.disposition ?? null });
    process.exit(1);
  }
  const copies = new Map(); // topic -> messages
  verdicts.forEach((verdict, i) => {
    const copy = copyFor(names, topic, partition, messages[i], verdict, attempts[i]);
    if (copy) copies.set(copy.topic, [...(copies.get(copy.topic) ?? []), copy.message]);
  });
  if (copies.size > 0) {
    await producer.sendBatch({ acks: -1, topicMessages: [...copies].map(([to, batch]) => ({ topic: to, messages: batch })) });
  }
  if (topic === names.retry) guard.settled(topic, partition, messages);
  // Logged before the offsets are committed: these messages are still held (a kill now redelivers them).
  verdicts.forEach((verdict, i) => {
    log({
      role: 'worker',
      action: verdict.action,
      outcome: verdict.outcome,
      ...errorFields(verdict),
      topic,
      partition,
      offset: messages[i].offset,
      attempt: attempts[i],
      origin: originOf(topic, partition, messages[i]),
      inFlight: messages.length,
    });
  });
}

await consumer.run({
  autoCommit: false, // offsets are committed by inChunks, after the store and the copies
  eachBatchAutoResolve: false, // an unresolved message is fetched again
  partitionsConsumedConcurrently: Number(process.env.PARTITIONS_CONCURRENTLY || 2),
  eachBatch: inChunks({ size: BATCH_SIZE, retryTopic: names.retry, settle }),
});
log({ role: 'worker', event: 'started', topics: [names.main, names.retry], group: names.group });

// Finish the chunk in hand and commit it, leave the group (the others need not wait for its session to time out), exit.
process.once('SIGTERM', async () => {
  await consumer.disconnect().catch(() => {});
  await producer.disconnect().catch(() => {});
  await close();
  log({ role: 'worker', event: 'stopped' });
  process.exit(0);
});
