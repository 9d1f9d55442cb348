// The reference of the Kafka bench: a group member that does what the example
// worker does with Kafka (the same consumer settings, chunks, commits and
// heartbeats: examples/kafka-worker/consume.mjs) and nothing with the
// messages, logging one line per message as the worker does. What the worker
// takes longer is idemflow and PostgreSQL.
//
//   IDEMFLOW_KAFKA_BROKERS=… SWAPS_TOPIC=… BATCH_SIZE=16 node workers/kafka-plain-consumer.mjs
import { createConsumer, inChunks } from '../examples/kafka-worker/consume.mjs';
import { kafkaClient, topicNames } from '../examples/kafka-worker/topology.mjs';

const names = topicNames();
const kafka = kafkaClient(`plain-${process.pid}`);
const consumer = createConsumer(kafka, names.group);
consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  process.stdout.write(
    `${JSON.stringify({ role: 'worker', event: 'group-join', isLeader: payload.isLeader, assignment: payload.memberAssignment })}\n`,
  );
});
await consumer.connect();
await consumer.subscribe({ topics: [names.main], fromBeginning: true });
await consumer.run({
  autoCommit: false,
  eachBatchAutoResolve: false,
  partitionsConsumedConcurrently: Number(process.env.PARTITIONS_CONCURRENTLY || 2),
  eachBatch: inChunks({
    size: Number(process.env.BATCH_SIZE || 16),
    retryTopic: names.retry,
    settle: async (topic, partition, messages) => {
      for (const message of messages)
        process.stdout.write(`${JSON.stringify({ role: 'worker', action: 'ack', topic, partition, offset: message.offset })}\n`);
    },
  }),
});
process.once('SIGTERM', async () => {
  await consumer.disconnect().catch(() => {});
  process.exit(0);
});
