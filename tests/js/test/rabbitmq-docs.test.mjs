// docs/brokers.md's RabbitMQ worker block, taken from the page and run as it
// stands against the RabbitMQ of the tests (IDEMFLOW_AMQP_URL) over a SQLite
// store: a late swap (its event arrives before the workflow exists) waits in
// the retry queue until it applies, a duplicate is a duplicate-delivery, an
// invalid body lands in the dead-letter queue, and a message redelivered after
// a consumer died holding it is handled as its next attempt. The only things
// the test changes are the queues' base name (one per run) and, through the
// amqp module it hands the block, the server's address; the block's SIGTERM
// handler goes to a stand-in for `process`, and the test calls its `stop`.
// A first test pins what the block's attempt count relies on: how this
// server's quorum queue sets x-delivery-count.

import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import amqp from 'amqplib';
import { createBatcher } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';
import { tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import {
  AsyncFunction,
  assertLateSwapExchanged,
  docsBlock,
  recordingHandler as recordingHandlerOf,
  sleep,
  until,
} from '../workers/docs-worker.mjs';
import { numberedConfirmation as confirmation, numberedSwap as swap } from '../workers/fixtures.mjs';

const AMQP_URL = process.env.IDEMFLOW_AMQP_URL || null;
const skip = AMQP_URL ? false : 'IDEMFLOW_AMQP_URL is not set';

/** Publishes on a confirm channel; resolves once the broker has the message. */
function publish(channel, queue, body, options = {}) {
  return new Promise((resolve, reject) => {
    channel.sendToQueue(queue, Buffer.from(body), { persistent: true, ...options }, (error) => (error ? reject(error) : resolve()));
  });
}

/** The next message a new consumer on `channel` receives from `queue` (prefetch 1), its consumer cancelled; rejects after `ms`. */
async function receive(channel, queue, ms = 10_000) {
  await channel.prefetch(1);
  let timer = null;
  let tag = null;
  const message = await Promise.race([
    new Promise((resolve) => {
      channel
        .consume(queue, (m) => resolve(m), { noAck: false })
        .then((answer) => {
          tag = answer.consumerTag;
        });
    }),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`nothing from ${queue} within ${ms} ms`)), ms);
    }),
  ]);
  clearTimeout(timer);
  await until('the consumer is registered', () => tag !== null, ms);
  await channel.cancel(tag);
  return message;
}

/** A connection whose socket the test can cut, as a consumer that dies would. */
async function dyingConnection() {
  const connection = await amqp.connect(AMQP_URL);
  connection.on('error', () => {}); // the cut is the point
  let closed = false;
  connection.once('close', () => {
    closed = true;
  });
  return {
    connection,
    async die() {
      // An error on the socket, as a killed process's would be: amqplib closes the connection and stops its heartbeat.
      connection.connection.stream.destroy(new Error('the consumer died'));
      await until('the cut connection is closed', () => closed, 10_000);
    },
  };
}

const workerBlock = () =>
  docsBlock('brokers.md', 'amqp.connect(', [
    "import amqp from 'amqplib';",
    "import { createBatcher, createDeliveryHandler } from 'idemflow';",
  ]);

describe("docs/brokers.md's RabbitMQ recipe", { skip }, () => {
  it("this server's quorum queue: x-delivery-count is absent on a first delivery, then counts requeues and a dead consumer's messages; a copy back from the retry queue starts again", {
    timeout: 60_000,
  }, async () => {
    const base = `idemflow-${uniquePrefix()}-count`;
    const connection = await amqp.connect(AMQP_URL);
    const channel = await connection.createConfirmChannel();
    try {
      await channel.assertQueue(base, { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 20 } });
      await channel.assertQueue(`${base}.retry`, {
        durable: true,
        arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': base },
      });
      const count = (message) => message.properties.headers?.['x-delivery-count'];
      await publish(channel, base, 'one');

      const consumer = await connection.createChannel();
      let message = await receive(consumer, base);
      assert.equal(message.fields.redelivered, false);
      assert.equal(count(message), undefined, 'absent on the first delivery');
      consumer.nack(message, false, true);
      message = await receive(consumer, base);
      assert.equal(count(message), 1, 'after a nack with requeue');
      consumer.reject(message, true);
      message = await receive(consumer, base);
      assert.equal(count(message), 2, 'after a reject with requeue');
      await consumer.close(); // its channel closes with the message unacknowledged

      const dying = await dyingConnection();
      message = await receive(await dying.connection.createChannel(), base);
      assert.equal(count(message), 3, 'after a channel closed holding it');
      await dying.die();
      const again = await connection.createChannel();
      message = await receive(again, base);
      assert.equal(count(message), 4, "after its consumer's connection died holding it");
      again.ack(message);

      await publish(channel, `${base}.retry`, 'copy', { expiration: '50', headers: { 'x-idemflow-attempt': 3 } });
      message = await receive(again, base);
      assert.equal(message.content.toString(), 'copy');
      assert.equal(count(message), undefined, 'a copy dead-lettered back from the retry queue is a first delivery');
      assert.equal(message.properties.headers['x-idemflow-attempt'], 3);
      again.ack(message);
      await again.close();
    } finally {
      await channel.deleteQueue(base).catch(() => {});
      await channel.deleteQueue(`${base}.retry`).catch(() => {});
      await connection.close().catch(() => {});
    }
  });

  it("the worker block runs as written: a late swap waits in the retry queue and is exchanged, a duplicate is a duplicate-delivery, an invalid body is dead-lettered, a dead consumer's message comes back as its next attempt", {
    timeout: 120_000,
  }, async () => {
    const prefix = uniquePrefix();
    const base = `idemflow-${prefix}`;
    const names = { main: base, retry: `${base}.retry`, dead: `${base}.dead`, parked: `${base}.parked` };
    const dir = tempDir('rabbitmq-docs');
    const store = SqliteStore.open(path.join(dir, 'swaps.db'), { tables: tablesFor(prefix), driver: 'better-sqlite3' });
    await store.migrate();
    await store.putWorkflow(swap(2)); // swap 1 is the late one: created only once its event has been retried
    await store.putWorkflow(swap(3));

    // What the block's handler answered, message by message.
    const verdicts = [];
    const recordingHandler = recordingHandlerOf(verdicts);

    const block = workerBlock();
    const named = block.replace("const base = 'swaps';", `const base = '${base}';`);
    assert.notEqual(named, block, "the block names its queues after const base = 'swaps'");
    assert.match(block, /amqp\.connect\('amqp:\/\/guest:guest@127\.0\.0\.1:5672'\)/);
    const testAmqp = { connect: () => amqp.connect(AMQP_URL) };
    const run = new AsyncFunction('store', 'createBatcher', 'createDeliveryHandler', 'amqp', 'process', `${named}\nreturn { stop };`);
    /** Starts the block as a worker would start; its SIGTERM handler is registered on a stand-in. */
    const start = async () => {
      const signals = new EventEmitter();
      const worker = await run(store, createBatcher, recordingHandler, testAmqp, signals);
      assert.deepEqual(signals.listeners('SIGTERM'), [worker.stop], 'the block stops on SIGTERM');
      return worker;
    };

    const connection = await amqp.connect(AMQP_URL);
    const channel = await connection.createConfirmChannel();
    let worker = null;
    try {
      worker = await start();

      const late = JSON.stringify(confirmation(1, 'late-1'));
      const twice = JSON.stringify(confirmation(2, 'confirm-2'));
      for (const body of [late, twice, 'not json', twice]) await publish(channel, names.main, body);

      const of = (body) => verdicts.filter((v) => v.body === body);
      await until('the late event is retried', () => of(late).some((v) => v.action === 'retry'), 30_000);
      await sleep(2000); // the swap is created ~2 s after its event first met UNKNOWN_WORKFLOW
      await store.putWorkflow(swap(1));
      await until('the late event is settled (applied or parked)', () => of(late).some((v) => v.action !== 'retry'), 60_000);
      await until(
        'the invalid body is in the dead-letter queue',
        async () => (await channel.checkQueue(names.dead)).messageCount > 0,
        30_000,
      );
      await worker.stop();
      worker = null;

      // The late swap: retried on UNKNOWN_WORKFLOW, each delivery the next attempt, until the swap existed; never parked.
      await assertLateSwapExchanged(of(late), store, 'main queue');

      // The duplicate: the same event twice, applied once.
      assert.deepEqual(
        of(twice).map((v) => [v.action, v.outcome]),
        [
          ['ack', 'applied'],
          ['ack', 'duplicate-delivery'],
        ],
      );
      assert.equal((await store.getWorkflow('swap-2')).status, 'exchange');

      // The invalid body: dead-lettered once, into the dead-letter queue; nothing parked, nothing left.
      assert.deepEqual(
        of('not json').map((v) => [v.action, v.code]),
        [['dead-letter', 'INVALID_EVENT']],
      );
      const dead = await channel.get(names.dead, { noAck: true });
      assert.equal(dead?.content.toString(), 'not json');
      assert.equal(dead.properties.headers['x-first-death-reason'], 'rejected');
      assert.equal((await channel.checkQueue(names.dead)).messageCount, 0, 'one dead letter');
      assert.equal((await channel.checkQueue(names.parked)).messageCount, 0, 'nothing parked');
      assert.equal((await channel.checkQueue(names.main)).messageCount, 0, 'every message settled before the stop');
      assert.equal((await channel.checkQueue(names.retry)).messageCount, 0);

      // A consumer takes swap 3's event and dies holding it; the block, started again, gets it as delivery 2.
      const third = JSON.stringify(confirmation(3));
      await publish(channel, names.main, third);
      const dying = await dyingConnection();
      const held = await receive(await dying.connection.createChannel(), names.main);
      assert.equal(held.content.toString(), third);
      await dying.die();
      worker = await start();
      await until("the dead consumer's message is handled", () => of(third).length > 0, 30_000);
      await worker.stop();
      worker = null;
      assert.deepEqual(
        of(third).map((v) => [v.attempt, v.action, v.outcome]),
        [[2, 'ack', 'applied']],
      );
      assert.equal((await store.getWorkflow('swap-3')).status, 'exchange');
      assert.equal((await channel.checkQueue(names.main)).messageCount, 0);
    } finally {
      await worker?.stop().catch(() => {});
      for (const queue of Object.values(names)) await channel.deleteQueue(queue).catch(() => {});
      await connection.close().catch(() => {});
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

if (skip) console.log(`rabbitmq docs block test: skipped (${skip})`);
