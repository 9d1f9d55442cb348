// Creates a few swaps in `waiting` and publishes their events to the swaps
// queue in shuffled order, with duplicates and two bad messages.
//
//   node examples/rabbitmq-worker/publish.mjs [swaps]
import amqp from 'amqplib';
import { openStore } from '../shared/store.mjs';
import { sampleSwaps } from '../shared/swaps.mjs';
import { declareQueues, publishConfirmed, queueNames } from './topology.mjs';

const names = queueNames();
const { swaps, bodies } = sampleSwaps(Number(process.argv[2] ?? 10));

// The host creates each swap before its events can matter.
const { store, close } = openStore({ poolSize: 1 });
await store.migrate();
for (const swap of swaps) await store.putWorkflow(swap);
await close();

const connection = await amqp.connect(process.env.IDEMFLOW_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672');
const channel = await connection.createConfirmChannel();
await declareQueues(channel, names);
for (const body of bodies) await publishConfirmed(channel, names.main, Buffer.from(body));
await connection.close();
console.log(`created ${swaps.length} swaps (${swaps[0].id} …), published ${bodies.length} messages to ${names.main}`);
