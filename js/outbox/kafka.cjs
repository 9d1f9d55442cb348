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
// The producer is duck-typed: anything with kafkajs's `send({ topic, messages })`
// (kafkajs itself, @confluentinc/kafka-javascript's KafkaJS API). acks are
// the producer's: kafkajs waits for all in-sync replicas unless told otherwise.

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

const RELAY_OPTIONS = ['topic'];

function invalidArgument(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { disposition: 'fatal', details });
}

function checkTopicOption(options) {
  if (options === null || typeof options !== 'object')
    throw invalidArgument('createKafkaRelay: options must be an object with a topic', { field: 'options', reason: 'not an object' });
  checkOptionKeys(options, RELAY_OPTIONS, 'createKafkaRelay');
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

/**
 * An outbox handler for `createOutboxConsumer`: sends each operation it is
 * given as one record and resolves once the producer's send has (a failed send
 * throws, and the consumer retries the operation after its backoff).
 *
 *   createOutboxConsumer(store, { START_EXCHANGE: relay, SEND_PAYOUT: relay }, options)
 */
function createKafkaRelay(producer, options) {
  let sends = false;
  try {
    sends = typeof producer?.send === 'function';
  } catch {
    // A proxy that throws on a lookup is no producer.
  }
  if (!sends)
    throw invalidArgument('createKafkaRelay: the producer must have send({ topic, messages }) (a connected kafkajs producer)', {
      field: 'producer',
      reason: 'no send',
    });
  checkTopicOption(options);
  const settings = { topic: options.topic };
  return async function relayToKafka(operation, context) {
    const { topic, message } = kafkaRecord(operation, context, settings);
    await producer.send({ topic, messages: [message] });
  };
}

module.exports = { createKafkaRelay, kafkaRecord, RELAY_HEADERS };
