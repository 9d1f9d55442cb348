// The references bench/production.mjs measures the example workers against,
// on the examples' own queues (RabbitMQ) or stream and consumer (NATS), with
// the same prefetch:
//   REFERENCE=floor         the broker alone: every message acknowledged as it
//                           arrives; reports {"role":"floor","acked":n,"lastAckAt":ms}
//                           every 25 ms while the count grows
//   REFERENCE=hand-written  the hand-written worker (bench/hand-written.mjs):
//                           each message in a transaction of its own over a pool
//                           of HAND_POOL (default 4) PostgreSQL connections, as
//                           it arrives; settled as the examples settle verdicts,
//                           one JSON line per message like theirs, with the time
//                           its transaction took (`ms`) and the races it lost
// BROKER (rabbitmq | nats), PREFETCH and the examples' variables
// (IDEMFLOW_AMQP_URL, SWAPS_QUEUE; IDEMFLOW_NATS_URL, SWAPS_STREAM,
// ACK_WAIT_MS; IDEMFLOW_PG_URL, IDEMFLOW_TABLE_PREFIX).
import pg from 'pg';
import { eventOfBody, handWrittenDelivery, MARKS, pgTransactions, statements } from '../bench/hand-written.mjs';
import { tablesFor } from './backends.mjs';

const REFERENCE = process.env.REFERENCE;
const PREFETCH = Number(process.env.PREFETCH || 16);
const log = (fields) => process.stdout.write(`${JSON.stringify({ pid: process.pid, ...fields })}\n`);

/** The hand-written worker's verdict on one body: ack, retry, dead-letter or park. */
function handWrittenWorker() {
  const pool = new pg.Pool({ connectionString: process.env.IDEMFLOW_PG_URL, max: Number(process.env.HAND_POOL || 4) });
  pool.on('error', () => {});
  const sql = statements(tablesFor(process.env.IDEMFLOW_TABLE_PREFIX), MARKS.pg);
  const transaction = pgTransactions(pool);
  return {
    /** The verdict, the transaction's time and the races it lost (each ran it again). */
    async verdict(body) {
      const event = eventOfBody(body);
      if (event === null) return { action: 'dead-letter' };
      const races = [];
      const { outcome, refused, ms } = await handWrittenDelivery(transaction, sql, event, { onRace: (reason) => races.push(reason) });
      return {
        action: outcome ? 'ack' : { reject: 'dead-letter', retry: 'retry', reconcile: 'park' }[refused],
        outcome,
        ms: Number(ms.toFixed(2)),
        races,
      };
    },
  };
}

/** The floor's count, reported while it grows. */
function floorCounter() {
  const counter = { acked: 0, lastAckAt: 0, reported: 0 };
  setInterval(() => {
    if (counter.acked === counter.reported) return;
    counter.reported = counter.acked;
    log({ role: 'floor', acked: counter.acked, lastAckAt: counter.lastAckAt });
  }, 25).unref();
  counter.ack = () => {
    counter.acked += 1;
    counter.lastAckAt = Date.now();
  };
  return counter;
}

async function rabbitmq() {
  const { default: amqp } = await import('amqplib');
  const { declareQueues, publishConfirmed, queueNames } = await import('../examples/rabbitmq-worker/topology.mjs');
  const names = queueNames();
  const connection = await amqp.connect(process.env.IDEMFLOW_AMQP_URL);
  const channel = await connection.createConfirmChannel();
  await declareQueues(channel, names);
  await channel.prefetch(PREFETCH);
  let onMessage;
  if (REFERENCE === 'floor') {
    const counter = floorCounter();
    onMessage = (message) => {
      channel.ack(message);
      counter.ack();
    };
  } else {
    const worker = handWrittenWorker();
    onMessage = async (message) => {
      const verdict = await worker.verdict(message.content);
      if (verdict.action === 'ack') channel.ack(message);
      else if (verdict.action === 'dead-letter') channel.nack(message, false, false);
      else {
        await publishConfirmed(
          channel,
          verdict.action === 'retry' ? names.retry : names.parked,
          message.content,
          verdict.action === 'retry' ? { expiration: '50' } : {},
        );
        channel.ack(message);
      }
      log({ role: 'worker', ...verdict });
    };
  }
  await channel.consume(
    names.main,
    (message) => {
      if (message) onMessage(message);
    },
    { noAck: false },
  );
  return async () => {
    await channel.close().catch(() => {});
    await connection.close().catch(() => {});
  };
}

async function nats() {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const { ensureStream, streamNames } = await import('../examples/nats-worker/topology.mjs');
  const names = streamNames();
  const connection = await connect({ servers: process.env.IDEMFLOW_NATS_URL });
  await ensureStream(await jetstreamManager(connection), names);
  const js = jetstream(connection);
  const consumer = await js.consumers.get(names.stream, names.consumer);
  const messages = await consumer.consume({ max_messages: PREFETCH });
  const loop = (async () => {
    if (REFERENCE === 'floor') {
      const counter = floorCounter();
      for await (const message of messages) {
        message.ack();
        counter.ack();
      }
      return;
    }
    const worker = handWrittenWorker();
    let inFlight = 0;
    const slots = [];
    for await (const message of messages) {
      while (inFlight >= PREFETCH) await new Promise((resolve) => slots.push(resolve));
      inFlight += 1;
      worker
        .verdict(message.data)
        .then(async (verdict) => {
          if (verdict.action === 'ack') message.ack();
          else if (verdict.action === 'retry') message.nak(50);
          else {
            await js.publish(verdict.action === 'park' ? names.parked : names.dead, message.data, {
              msgID: `${verdict.action}:${message.seq}`,
            });
            if (verdict.action === 'park') message.ack();
            else message.term();
          }
          log({ role: 'worker', ...verdict });
        })
        .finally(() => {
          inFlight -= 1;
          slots.shift()?.();
        });
    }
  })();
  return async () => {
    messages.stop();
    await loop.catch(() => {});
    await connection.drain().catch(() => {});
  };
}

const close = await (process.env.BROKER === 'nats' ? nats() : rabbitmq());
log({ role: REFERENCE === 'floor' ? 'floor' : 'worker', event: 'started' });
process.once('SIGTERM', async () => {
  await close();
  process.exit(0);
});
