// idemflow/kafka: an outbox handler that relays each operation to a Kafka topic.
import type { ClaimedOperation, HandlerContext, StoredOperation } from './types.js';

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
  /** The relay always passes `acks: -1` (every in-sync replica). */
  send(record: { topic: string; messages: KafkaRelayMessage[]; acks: -1 }): Promise<unknown>;
}

/** What the partition check needs of an admin client: kafkajs's `kafka.admin()`. */
export interface KafkaAdminLike {
  /** Called before each read when present; the relay owns the admin for its reads. */
  connect?(): Promise<unknown>;
  /** Called after each read when present. */
  disconnect?(): Promise<unknown>;
  /** Rejects with `type: 'UNKNOWN_TOPIC_OR_PARTITION'` for a missing topic (kafkajs's admin never asks to create one). */
  fetchTopicMetadata(request: { topics: string[] }): Promise<{ topics: Array<{ name: string; partitions: readonly unknown[] }> }>;
}

/** What a record's topic is: the same for every operation, or each one's (by its type, say). */
export interface KafkaRecordOptions {
  topic: string | ((operation: StoredOperation) => string);
}

export interface KafkaRelayOptions extends KafkaRecordOptions {
  /**
   * The partition count every topic the relay sends to must have. Each
   * topic's metadata is read once, through `admin`, before the first send
   * to it; a missing topic or another count refuses every send to it
   * (IdemflowError INVALID_ARGUMENT, disposition fatal, details
   * `{ field: 'partitions', reason, topic, expected, actual }`, actual null
   * for a missing topic).
   */
  partitions?: number;
  /** Reads the metadata for `partitions` (required with it, refused without it). */
  admin?: KafkaAdminLike;
}

/** The relay: an outbox handler, and the partition check to run ahead of the consumer. */
export interface KafkaRelay {
  (operation: ClaimedOperation, context: HandlerContext): Promise<void>;
  /**
   * Checks the partition count of `topics` (default: the topic, when it is a
   * name) as the first send would, and rejects as it would; resolves at once
   * without `partitions`. Await it before `consumer.start()` so a wrong topic
   * stops the worker instead of failing operations.
   */
  ready(topics?: readonly string[]): Promise<void>;
}

/**
 * An outbox handler that sends each operation as one record (acks -1) and
 * resolves once the producer's send has; the operation id travels in the
 * `idemflow-operation-id` header as the downstream idempotency key. A send
 * whose context signal aborts rejects with the signal's reason at once and is
 * never reported done.
 */
export function createKafkaRelay(producer: KafkaProducerLike, options: KafkaRelayOptions): KafkaRelay;

/** The record the relay sends for an operation. */
export function kafkaRecord(
  operation: ClaimedOperation | StoredOperation,
  context: Pick<HandlerContext, 'traceContext'> | null,
  options: KafkaRecordOptions,
): { topic: string; message: KafkaRelayMessage };
