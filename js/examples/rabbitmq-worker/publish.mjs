// Creates a few swaps in `waiting` and publishes their events to the swaps
// queue in shuffled order, with duplicates and two bad messages.
// The events are shared/swaps.mjs's: as a chain watcher sends them, each
// deposit event carries `sequence`, its number of the observation.
//
//   node examples/rabbitmq-worker/publish.mjs [swaps]
import amqp from 'amqplib';
import { createSampleSwaps } from '../shared/swaps.mjs';
import { declareQueues, publishConfirmed, queueNames } from './topology.mjs';

const names = queueNames();
const { swaps, bodies } = await createSampleSwaps(Number(process.argv[2] ?? 10));

const connection = await amqp.connect(process.env.IDEMFLOW_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672');
const channel = await connection.createConfirmChannel();
await declareQueues(channel, names);
for (const body of bodies) await publishConfirmed(channel, names.main, Buffer.from(body));
await connection.close();
console.log(`created ${swaps.length} swaps (${swaps[0].id} …), published ${bodies.length} messages to ${names.main}`);
