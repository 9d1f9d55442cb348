// Creates a few swaps in `waiting` and produces their events to the swaps
// topic in shuffled order, with duplicates and two bad messages, each keyed
// by its workflow id (the bad ones that have none go to any partition).
// The events are shared/swaps.mjs's: as a chain watcher sends them, each
// deposit event carries `sequence`, its number of the observation.
//
//   node examples/kafka-worker/publish.mjs [swaps]
import { createSampleSwaps } from '../shared/swaps.mjs';
import { createProducer, ensureTopics, kafkaClient, keyOf, topicNames } from './topology.mjs';

const names = topicNames();
const { swaps, bodies } = await createSampleSwaps(Number(process.argv[2] ?? 10));

const kafka = kafkaClient('idemflow-publisher');
await ensureTopics(kafka, names);
const producer = createProducer(kafka);
await producer.connect();
// acks -1: resolves once the broker has every message.
await producer.send({ topic: names.main, acks: -1, messages: bodies.map((body) => ({ key: keyOf(body), value: body })) });
await producer.disconnect();
console.log(`created ${swaps.length} swaps (${swaps[0].id} …), produced ${bodies.length} messages to ${names.main}`);
