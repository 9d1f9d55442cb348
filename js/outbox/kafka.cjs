'use strict';
// idemflow/kafka: an outbox handler that relays each operation to a Kafka
// topic, what Debezium's outbox event router does for a table it tails. The
// record is keyed by the workflow id (one workflow's operations stay in one
// partition, in the order the relay sent them), carries the operation id in a
// header as the downstream idempotency key, and the trace context of the
// delivery that wrote the operation. The handler resolves once the broker has
// acknowledged the record; the outbox consumer marks the operation done only
// then. A relay that dies between the two leaves a claim that expires, and
// the next claim sends the record again under the same operation id:
// at least once, never exactly once (docs/kafka.md says how a downstream
// consumer makes the second copy harmless).
//
// The producer is duck-typed: anything with kafkajs's `send({ topic, messages, acks })`
// (kafkajs itself, @confluentinc/kafka-javascript's KafkaJS API). Every send
// asks for acks -1 (all in-sync replicas). The handler context's abort signal
// is honoured: a send whose signal aborts rejects at once with its reason and
// is never reported done, even if the broker acknowledges it later. With
// `partitions` (and an `admin` to read metadata with), the relay reads each
// topic's partition count once before its first send to it and refuses to
// send to a topic that is missing or has another count: a topic lost and
// auto-created with the broker's default would move workflows to other
// partitions.

const { IdemflowError } = require('../core/errors.cjs');
const { checkOptionKeys } = require('../core/options.cjs');
const telemetry = require('../core/telemetry.cjs');

/** The headers of a relayed record (values are UTF-8 text). */
const RELAY_HEADERS = Object.freeze({
  operationId: 'idemflow-operation-id',
  operationType: 'idemflow-operation-type',
  workflowId: 'idemflow-workflow-id',
  eventId: 'idemflow-event-id',
  traceparent: 'traceparent',
});

const RELAY_OPTIONS = ['topic', 'partitions', 'admin'];
const RECORD_OPTIONS = ['topic'];

function invalidArgument(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details });
}

function checkTopicOption(options, keys = RECORD_OPTIONS) {
  if (options === null || typeof options !== 'object')
    throw invalidArgument('createKafkaRelay: options must be an object with a topic', { field: 'options', reason: 'not an object' });
  checkOptionKeys(options, keys, 'createKafkaRelay');
  const { topic } = options;
  if (typeof topic === 'function') return;
  if (typeof topic !== 'string' || topic.length === 0) {
    throw invalidArgument('createKafkaRelay: topic must be a topic name or a function of the operation that returns one', {
      field: 'topic',
      reason: 'not a topic',
    });
  }
}

/**
 * The record an operation becomes: `{ topic, message: { key, value, headers } }`.
 * `value` is the JSON of `{ id, type, workflowId, eventId, payload, metadata }`.
 * The traceparent is the active span's (the consumer's `handle <type>` span,
 * which continues the stored trace) when OpenTelemetry runs, else the stored one.
 */
function kafkaRecord(operation, context, options) {
  checkTopicOption(options);
  const topic = typeof options.topic === 'function' ? options.topic(operation) : options.topic;
  if (typeof topic !== 'string' || topic.length === 0) {
    throw invalidArgument(`createKafkaRelay: the topic function returned ${JSON.stringify(topic) ?? String(topic)} for ${operation.type}`, {
      field: 'topic',
      reason: 'not a topic',
      operationId: operation.id,
    });
  }
  const headers = {
    [RELAY_HEADERS.operationId]: operation.id,
    [RELAY_HEADERS.operationType]: operation.type,
    [RELAY_HEADERS.workflowId]: operation.workflowId,
    [RELAY_HEADERS.eventId]: operation.eventId,
  };
  const traceparent = telemetry.activeTraceparent() ?? context?.traceContext ?? null;
  if (traceparent !== null) headers[RELAY_HEADERS.traceparent] = traceparent;
  const value = JSON.stringify({
    id: operation.id,
    type: operation.type,
    workflowId: operation.workflowId,
    eventId: operation.eventId,
    payload: operation.payload,
    metadata: operation.metadata ?? null,
  });
  return { topic, message: { key: operation.workflowId, value, headers } };
}

/** A function of `value`, or false (a proxy that throws on the lookup has none). */
function hasMethod(value, name) {
  try {
    return typeof value?.[name] === 'function';
  } catch {
    return false;
  }
}

function checkPartitionsOption(options) {
  const { partitions, admin } = options;
  if (partitions === undefined) {
    if (admin !== undefined)
      throw invalidArgument('createKafkaRelay: admin is only used to check the partitions option, which is not given', {
        field: 'admin',
        reason: 'admin without partitions',
      });
    return;
  }
  if (!Number.isSafeInteger(partitions) || partitions < 1) {
    throw invalidArgument(`createKafkaRelay: partitions must be a positive integer, not ${String(partitions)}`, {
      field: 'partitions',
      reason: 'not a partition count',
    });
  }
  if (!hasMethod(admin, 'fetchTopicMetadata')) {
    throw invalidArgument('createKafkaRelay: partitions needs an admin with fetchTopicMetadata({ topics }) (kafka.admin()) to read them', {
      field: 'admin',
      reason: 'no fetchTopicMetadata',
    });
  }
}

/** The refusal of a topic whose partition count is not the expected one (`actual` null: no such topic). */
function topicMismatch(topic, expected, actual) {
  const found = actual === null ? 'does not exist' : `has ${actual} partitions`;
  return new IdemflowError(
    'INVALID_ARGUMENT',
    `createKafkaRelay: topic ${topic} ${found}, not the ${expected} the relay was given: nothing is sent to it (create it with ${expected}, or fix partitions)`,
    {
      disposition: 'fatal',
      details: { field: 'partitions', reason: actual === null ? 'no such topic' : 'partition count mismatch', topic, expected, actual },
    },
  );
}

/**
 * Reads each topic's partition count once, through `admin` (connected for
 * the read and disconnected after, one read at a time): a missing topic or
 * another count is a fatal refusal, kept for every later send to the topic;
 * a failed read (the broker is down) is thrown as it is and tried again by
 * the next send. kafkajs's admin never asks the broker to create a topic.
 */
function partitionCheck(admin, expected) {
  const checked = new Map(); // topic -> Promise<void>
  let reads = Promise.resolve();
  const read = async (topic) => {
    if (hasMethod(admin, 'connect')) await admin.connect();
    try {
      const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
      const found = metadata?.topics?.find?.((entry) => entry?.name === topic);
      return Array.isArray(found?.partitions) ? found.partitions.length : null;
    } catch (error) {
      if (error?.type === 'UNKNOWN_TOPIC_OR_PARTITION') return null;
      throw error;
    } finally {
      if (hasMethod(admin, 'disconnect')) await admin.disconnect();
    }
  };
  return function check(topic) {
    let done = checked.get(topic);
    if (done === undefined) {
      done = reads.then(async () => {
        const actual = await read(topic);
        if (actual !== expected) throw topicMismatch(topic, expected, actual);
      });
      reads = done.catch(() => {});
      checked.set(topic, done);
      done.catch((error) => {
        if (!(error instanceof IdemflowError)) checked.delete(topic); // not an answer: read again next time
      });
    }
    return done;
  };
}

/**
 * `promise`, or a rejection with the signal's reason as soon as the signal
 * aborts; aborted by the time `promise` settles, it rejects with the reason
 * too (a send acknowledged after the abort is not reported done).
 */
function unlessAborted(signal, promise) {
  if (signal === null) return promise;
  if (signal.aborted) {
    promise.catch(() => {}); // nobody waits for it any more
    return Promise.reject(signal.reason);
  }
  return new Promise((resolve, reject) => {
    const aborted = () => reject(signal.reason);
    signal.addEventListener('abort', aborted, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', aborted);
        if (signal.aborted) reject(signal.reason);
        else resolve(value);
      },
      (error) => {
        signal.removeEventListener('abort', aborted);
        reject(signal.aborted ? signal.reason : error);
      },
    );
  });
}

/**
 * An outbox handler for `createOutboxConsumer`: sends each operation it is
 * given as one record (acks -1) and resolves once the producer's send has (a
 * failed send throws, and the consumer retries the operation after its
 * backoff). With `partitions` and `admin`, each topic's partition count is
 * checked before the first send to it; `relay.ready()` runs the check of a
 * topic name (or of `topics`) ahead, so a worker can refuse to start.
 *
 *   createOutboxConsumer(store, { START_EXCHANGE: relay, SEND_PAYOUT: relay }, options)
 */
function createKafkaRelay(producer, options) {
  if (!hasMethod(producer, 'send'))
    throw invalidArgument('createKafkaRelay: the producer must have send({ topic, messages }) (a connected kafkajs producer)', {
      field: 'producer',
      reason: 'no send',
    });
  checkTopicOption(options, RELAY_OPTIONS);
  checkPartitionsOption(options);
  const settings = { topic: options.topic };
  const check = options.partitions === undefined ? null : partitionCheck(options.admin, options.partitions);
  async function relayToKafka(operation, context) {
    const { topic, message } = kafkaRecord(operation, context, settings);
    const signal = hasMethod(context?.signal, 'addEventListener') ? context.signal : null;
    if (signal?.aborted) throw signal.reason; // sends nothing
    if (check !== null) await unlessAborted(signal, check(topic));
    await unlessAborted(signal, producer.send({ topic, messages: [message], acks: -1 }));
  }
  relayToKafka.ready = async (topics = typeof settings.topic === 'string' ? [settings.topic] : []) => {
    if (!Array.isArray(topics) || !topics.every((topic) => typeof topic === 'string' && topic.length > 0))
      throw invalidArgument('relay.ready: topics must be a list of topic names', { field: 'topics', reason: 'not a topic list' });
    if (check !== null) await Promise.all(topics.map(check));
  };
  return relayToKafka;
}

module.exports = { createKafkaRelay, kafkaRecord, RELAY_HEADERS };
