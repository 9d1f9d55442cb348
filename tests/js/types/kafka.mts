// Compiled with tsc --strict (never run): the Kafka relay as a consumer sees it, over a kafkajs producer.

import { createOutboxConsumer, InMemoryStore, type StoredOperation } from 'idemflow';
import { createKafkaRelay, type KafkaProducerLike, kafkaRecord, RELAY_HEADERS } from 'idemflow/kafka';
import { Kafka } from 'kafkajs';

const kafka = new Kafka({ clientId: 'relay', brokers: ['127.0.0.1:19092'] });
const producer = kafka.producer();
const asProducer: KafkaProducerLike = producer; // a kafkajs producer is what the relay takes
const byType = createKafkaRelay(asProducer, { topic: (operation: StoredOperation) => `swaps.${operation.type.toLowerCase()}` });
const oneTopic = createKafkaRelay(producer, { topic: 'swaps.operations' });
const consumer = createOutboxConsumer(new InMemoryStore(), { START_EXCHANGE: byType, SEND_PAYOUT: oneTopic });
const header: 'idemflow-operation-id' = RELAY_HEADERS.operationId;
async function records(operation: StoredOperation): Promise<void> {
  const { topic, message } = kafkaRecord(operation, { traceContext: operation.traceContext }, { topic: 'swaps.operations' });
  const key: string = message.key;
  const id: string | undefined = message.headers[RELAY_HEADERS.operationId];
  await producer.send({ topic, messages: [message] });
  void [key, id];
}
// The partition check reads metadata through a kafkajs admin; ready() runs it ahead of the consumer.
const checked = createKafkaRelay(producer, { topic: 'swaps.operations', partitions: 6, admin: kafka.admin() });
const ready: Promise<void> = checked.ready();
const readyMany: Promise<void> = checked.ready(['swaps.start_exchange', 'swaps.send_payout']);
void [consumer, header, records, ready, readyMany];
// @ts-expect-error partitions is a count
createKafkaRelay(producer, { topic: 'swaps.operations', partitions: '6', admin: kafka.admin() });
// @ts-expect-error the relay needs a topic
createKafkaRelay(producer, {});
// @ts-expect-error a topic is a name or a function of the operation
createKafkaRelay(producer, { topic: 42 });
