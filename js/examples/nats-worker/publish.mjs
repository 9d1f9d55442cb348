// Creates a few swaps in `waiting` and publishes their events to
// <base>.events in shuffled order, with duplicates and two bad messages.
// The events are shared/swaps.mjs's: as a chain watcher sends them, each
// deposit event carries `sequence`, its number of the observation.
//
//   node examples/nats-worker/publish.mjs [swaps]

import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { createSampleSwaps } from '../shared/swaps.mjs';
import { ensureStream, streamNames } from './topology.mjs';

const names = streamNames();
const { swaps, bodies } = await createSampleSwaps(Number(process.argv[2] ?? 10));

const connection = await connect({ servers: process.env.IDEMFLOW_NATS_URL || 'nats://127.0.0.1:4222' });
await ensureStream(await jetstreamManager(connection), names);
const js = jetstream(connection);
for (const body of bodies) await js.publish(names.events, body); // resolves once the stream stored it
await connection.drain();
console.log(`created ${swaps.length} swaps (${swaps[0].id} …), published ${bodies.length} messages to ${names.events}`);
