// The topics and the client of the Kafka worker. Creating the topics is
// idempotent, so every process (workers, publisher, relay) ensures them on start.
//
//   <base>          the events, keyed by workflow id; the workers' group consumes it
//   <base>.retry    copies to try again, with their attempt and not-before time in
//                   headers; the same group consumes it and waits until each is due
//   <base>.dead     dead letters (messages that can never succeed)
//   <base>.parked   conflicts for a person or a reconciliation job
//   <base>.operations  what the outbox relay (relay.mjs) publishes: one record
//                   per outbox operation, the operation id in a header
//
// Every copy keeps the original key (the workflow id), so one workflow's
// retries, dead letters and parked messages each stay in one partition.
import { Kafka, logLevel, Partitioners } from 'kafkajs';

export const BROKERS = (process.env.IDEMFLOW_KAFKA_BROKERS || '127.0.0.1:19092').split(',');
export const PARTITIONS = Number(process.env.PARTITIONS || 6);

// The headers the worker writes on its copies (Kafka header values are bytes; these are UTF-8 text).
export const HEADERS = {
  attempt: 'idemflow-attempt', // the delivery the copy will be: 2 for the first retry
  notBefore: 'idemflow-not-before', // milliseconds since the epoch
  code: 'idemflow-code',
  reason: 'idemflow-reason',
  origin: 'idemflow-origin', // <topic>/<partition>/<offset> of the message the copy was made of
};

export function topicNames(base = process.env.SWAPS_TOPIC || 'swaps') {
  return {
    main: base,
    retry: `${base}.retry`,
    dead: `${base}.dead`,
    parked: `${base}.parked`,
    group: `${base}-workers`,
    operations: `${base}.operations`,
  };
}

/** A kafkajs client; kafkajs's own log lines are off (warnings and errors go to stderr) so stdout stays one JSON line per event. */
export function kafkaClient(clientId, { brokers = BROKERS } = {}) {
  return new Kafka({
    clientId,
    brokers,
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, log }) =>
        process.stderr.write(`${JSON.stringify({ kafkajs: level, ...log })}\n`),
  });
}

/**
 * A producer that hashes the key (murmur2, as the Java client does) to pick the
 * partition. Not idempotent: the broker of the tests refuses InitProducerId, so
 * a copy sent twice (a retried send, a crash before the commit) is told apart
 * by its origin header.
 */
export function createProducer(kafka) {
  return kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
}

/** Creates those of `topics` that do not exist yet, with `partitions` partitions each. */
export async function ensureTopic(kafka, topics, { partitions = PARTITIONS } = {}) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const missing = topics.filter((topic) => !existing.has(topic));
    // Resolves false (not an error) when another process created them meanwhile.
    if (missing.length > 0)
      await admin.createTopics({ waitForLeaders: true, topics: missing.map((topic) => ({ topic, numPartitions: partitions })) });
  } finally {
    await admin.disconnect();
  }
}

export function ensureTopics(kafka, names, options) {
  return ensureTopic(kafka, [names.main, names.retry, names.dead, names.parked], options);
}

/** A header's value as text, or undefined. */
export function headerText(message, name) {
  const value = message.headers?.[name];
  if (value === undefined || value === null) return undefined;
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(Array.isArray(value) ? value[0] : value);
}

/** The key producers give an event: its workflow id when the body is an event, else none (a round-robin partition). */
export function keyOf(body) {
  try {
    const workflowId = JSON.parse(Buffer.isBuffer(body) ? body.toString('utf8') : body)?.workflowId;
    return typeof workflowId === 'string' ? workflowId : null;
  } catch {
    return null;
  }
}
