// What the Kafka tests and the bench read of the broker (the one `make
// kafka-broker` starts, IDEMFLOW_KAFKA_BROKERS): every message of a few
// topics, and how many of them a group has not committed yet.
//
// Tansu 0.6.0 answers ListOffsets (latest) with the base offset of a
// partition's last record batch + 1, not its last offset + 1: after one
// produce request of 10 records to a partition it says 1, where Fetch's high
// watermark says 10. So the end of a partition is read from Fetch, by a
// reader that consumes the topics (its own group) and keeps each partition's
// high watermark.
import { randomUUID } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';

export const KAFKA_BROKERS = process.env.IDEMFLOW_KAFKA_BROKERS || '';

export function kafkaFor(clientId, brokers = KAFKA_BROKERS) {
  return new Kafka({ clientId, brokers: brokers.split(','), logLevel: logLevel.NOTHING });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A reader of `topics` from their beginning, running until `close()`:
 * `messages(topic)` is what it has read ({ partition, offset, key, value,
 * headers }), `end(topic, partition)` the partition's end as Fetch reports
 * it, `caughtUp()` resolves once every partition that holds messages has
 * been read to its end.
 */
export async function watchTopics(kafka, topics, { timeoutMs = 60_000 } = {}) {
  const admin = kafka.admin();
  await admin.connect();
  const groupId = `reader-${randomUUID()}`;
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10_000, heartbeatInterval: 1000, maxWaitTimeInMs: 100 });
  const read = new Map(topics.map((topic) => [topic, []]));
  const ends = new Map(); // "topic/partition" -> high watermark of its last fetch
  const next = new Map(); // "topic/partition" -> the offset after the last one read
  let joined;
  const ready = new Promise((resolve) => {
    joined = resolve;
  });
  consumer.on(consumer.events.GROUP_JOIN, () => joined());
  await consumer.connect();
  await consumer.subscribe({ topics, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      const key = `${batch.topic}/${batch.partition}`;
      ends.set(key, Math.max(ends.get(key) ?? 0, Number(batch.highWatermark)));
      for (const message of batch.messages) {
        if (Number(message.offset) < (next.get(key) ?? 0)) continue; // fetched again after a rejoin
        read.get(batch.topic).push({
          partition: batch.partition,
          offset: message.offset,
          key: message.key,
          value: message.value,
          headers: message.headers ?? {},
        });
        next.set(key, Number(message.offset) + 1);
      }
    },
  });
  await ready;

  const end = (topic, partition) => ends.get(`${topic}/${partition}`) ?? 0;
  return {
    messages: (topic) => read.get(topic),
    end,
    /** Waits until every partition that ListOffsets says is not empty has been read to the end Fetch reports. */
    async caughtUp() {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        let behind = 0;
        for (const topic of topics) {
          for (const mark of await admin.fetchTopicOffsets(topic)) {
            const key = `${topic}/${mark.partition}`;
            const high = Math.max(Number(mark.high), ends.get(key) ?? 0);
            behind += high - Math.max(next.get(key) ?? 0, Number(mark.low));
          }
        }
        if (behind === 0) return;
        if (Date.now() > deadline) throw new Error(`read ${topics} for ${timeoutMs} ms and still ${behind} messages behind`);
        await sleep(100);
      }
    },
    /** Messages of `groupTopics` at or past `groupId`'s committed offsets (a partition it never committed counts whole). */
    async backlog(group, groupTopics) {
      await this.caughtUp();
      const committed = await admin.fetchOffsets({ groupId: group, topics: groupTopics });
      let behind = 0;
      for (const topic of groupTopics) {
        const done = committed.find((entry) => entry.topic === topic)?.partitions ?? [];
        for (const mark of await admin.fetchTopicOffsets(topic)) {
          const offset = Number(done.find((p) => p.partition === mark.partition)?.offset ?? -1);
          behind += Math.max(Number(mark.high), end(topic, mark.partition)) - Math.max(offset, Number(mark.low));
        }
      }
      return behind;
    },
    async close() {
      await consumer.disconnect().catch(() => {});
      await admin.deleteGroups([groupId]).catch(() => {});
      await admin.disconnect().catch(() => {});
    },
  };
}
