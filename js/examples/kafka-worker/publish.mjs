// Creates a few swaps in `waiting` and produces their events to the swaps
// topic in shuffled order, with duplicates and two bad messages, each keyed
// by its workflow id (the bad ones that have none go to any partition).
//
//   node examples/kafka-worker/publish.mjs [swaps]
import { openStore } from '../shared/store.mjs';
import { sampleSwaps } from '../shared/swaps.mjs';
import { createProducer, ensureTopics, kafkaClient, keyOf, topicNames } from './topology.mjs';

const names = topicNames();
const { swaps, bodies } = sampleSwaps(Number(process.argv[2] ?? 10));

// The host creates each swap before its events can matter.
const { store, close } = openStore({ poolSize: 1 });
await store.migrate();
for (const swap of swaps) await store.putWorkflow(swap);
await close();

const kafka = kafkaClient('idemflow-publisher');
await ensureTopics(kafka, names);
const producer = createProducer(kafka);
await producer.connect();
// acks -1: resolves once the broker has every message.
await producer.send({ topic: names.main, acks: -1, messages: bodies.map((body) => ({ key: keyOf(body), value: body })) });
await producer.disconnect();
console.log(`created ${swaps.length} swaps (${swaps[0].id} …), produced ${bodies.length} messages to ${names.main}`);
