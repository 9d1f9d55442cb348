// The JetStream stream and consumer of the NATS worker. Creating them is
// idempotent, so every process (workers, publisher) ensures them on start.
//
//   stream <base>            subjects <base>.events, <base>.dead, <base>.parked
//   consumer <base>-workers  durable pull consumer on <base>.events: explicit
//                            acks, redelivered after ACK_WAIT_MS without an
//                            ack (a crashed worker), at most MAX_DELIVER times
import { AckPolicy, JetStreamApiError } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';

export const MAX_DELIVER = 20;

export function streamNames(base = process.env.SWAPS_STREAM || 'swaps') {
  return {
    stream: base,
    consumer: `${base}-workers`,
    events: `${base}.events`,
    dead: `${base}.dead`,
    parked: `${base}.parked`,
  };
}

export async function ensureStream(jsm, names, { ackWaitMs = Number(process.env.ACK_WAIT_MS || 30_000) } = {}) {
  try {
    await jsm.streams.info(names.stream);
  } catch (error) {
    if (!(error instanceof JetStreamApiError)) throw error;
    // The dedup window lets a worker that crashed after publishing a dead
    // letter publish it again under the same msgID without storing it twice.
    await jsm.streams
      .add({ name: names.stream, subjects: [names.events, names.dead, names.parked], duplicate_window: nanos(120_000) })
      .catch((raced) => {
        if (!(raced instanceof JetStreamApiError)) throw raced;
      });
  }
  await jsm.consumers.add(names.stream, {
    durable_name: names.consumer,
    filter_subject: names.events,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(ackWaitMs),
    max_deliver: MAX_DELIVER,
    max_ack_pending: 1000,
  });
}
