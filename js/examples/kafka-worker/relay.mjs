// The outbox relay: an outbox consumer whose handler (idemflow/kafka's
// createKafkaRelay) publishes each committed operation to <base>.operations,
// keyed by the workflow id, with the operation id in the
// idemflow-operation-id header and the trace context of the delivery that
// wrote it in traceparent. The operation is marked done once the broker has
// acknowledged the record. A relay killed in between leaves a claim that
// expires after OUTBOX_LEASE_MS; another relay publishes the record again
// under the same operation id, which is what a downstream consumer
// deduplicates on. Run as many as you like:
//
//   node examples/kafka-worker/relay.mjs
//
// RELAY_TOPIC (default <base>.operations), PARTITIONS (6), IDEMFLOW_KAFKA_BROKERS, SWAPS_TOPIC,
// and the settings of ../shared/outbox.mjs (store, lease, backoff, poll interval).
import { createKafkaRelay } from 'idemflow/kafka';
import { runOutboxConsumer } from '../shared/outbox.mjs';
import { createProducer, ensureTopic, kafkaClient, PARTITIONS, topicNames } from './topology.mjs';

const topic = process.env.RELAY_TOPIC || topicNames().operations;

const kafka = kafkaClient(`idemflow-relay-${process.pid}`);
await ensureTopic(kafka, [topic]);
const producer = createProducer(kafka);
await producer.connect();

// One topic for every type here; `topic: (operation) => …` sends each type to its own.
// The topic must have PARTITIONS partitions: checked before the consumer starts (a topic that came back
// through auto-creation with the broker's default would move workflows to other partitions).
const relay = createKafkaRelay(producer, { topic, partitions: PARTITIONS, admin: kafka.admin() });
await relay.ready();
runOutboxConsumer({
  role: 'relay',
  handlers: { START_EXCHANGE: relay, SEND_PAYOUT: relay, OPEN_REVIEW: relay, REVIEW_DEPOSIT: relay },
  onStop: () => producer.disconnect().catch(() => {}),
  fields: { topic },
});
