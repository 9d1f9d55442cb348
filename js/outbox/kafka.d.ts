// idemflow/kafka: an outbox handler that relays each operation to a Kafka topic.
import type { ClaimedOperation, HandlerContext, OperationHandler, StoredOperation } from '../index.js';

/** A record header's name per relayed field. */
export declare const RELAY_HEADERS: Readonly<{
  operationId: 'idemflow-operation-id';
  operationType: 'idemflow-operation-type';
  workflowId: 'idemflow-workflow-id';
  eventId: 'idemflow-event-id';
  traceparent: 'traceparent';
}>;

/** One record as kafkajs's `send` takes it. */
export interface KafkaRelayMessage {
  /** The workflow id: one workflow's operations stay in one partition. */
  key: string;
  /** JSON of `{ id, type, workflowId, eventId, payload, metadata }`. */
  value: string;
  headers: { [name: string]: string };
}

/** What the relay needs of a producer: kafkajs's `send` (or the KafkaJS API of @confluentinc/kafka-javascript). */
export interface KafkaProducerLike {
  send(record: { topic: string; messages: KafkaRelayMessage[] }): Promise<unknown>;
}

export interface KafkaRelayOptions {
  /** One topic for every operation, or the topic of each (by its type, say). */
  topic: string | ((operation: StoredOperation) => string);
}

/**
 * An outbox handler that sends each operation as one record and resolves once
 * the producer's send has; the operation id travels in the
 * `idemflow-operation-id` header as the downstream idempotency key.
 */
export function createKafkaRelay(producer: KafkaProducerLike, options: KafkaRelayOptions): OperationHandler;

/** The record the relay sends for an operation. */
export function kafkaRecord(
  operation: ClaimedOperation | StoredOperation,
  context: Pick<HandlerContext, 'traceContext'> | null,
  options: KafkaRelayOptions,
): { topic: string; message: KafkaRelayMessage };
