// The outbox relay (idemflow/kafka) against the Kafka-protocol broker of
// `make kafka-broker` (IDEMFLOW_KAFKA_BROKERS): docs/kafka.md's partition
// check block as it stands (a topic with the count it names, one with
// another, a missing one that the check never creates), and an abort during
// a real send. kafka.test.mjs has the same over stand-ins for the producer
// and the admin.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { IdemflowError, InMemoryStore, processEvent } from 'idemflow';
import { createKafkaRelay } from 'idemflow/kafka';
import { Partitioners } from 'kafkajs';
import { uniquePrefix } from '../workers/backends.mjs';
import { numberedConfirmation as confirmation, numberedSwap as swap } from '../workers/fixtures.mjs';
import { KAFKA_BROKERS, kafkaFor, watchTopics } from '../workers/kafka.mjs';

const skip = KAFKA_BROKERS ? false : 'IDEMFLOW_KAFKA_BROKERS is not set';
const AsyncFunction = (async () => {}).constructor;

/** docs/kafka.md's block that checks the relay's partitions, its topic renamed to `topic`. */
function partitionBlock(topic) {
  const text = fs.readFileSync(new URL('../../../docs/kafka.md', import.meta.url), 'utf8');
  const block = [...text.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes('await relay.ready()'));
  assert.ok(block, 'the partition check block is in docs/kafka.md');
  const named = block.replace("topic: 'swaps.operations'", `topic: '${topic}'`);
  assert.notEqual(named, block, "the block's topic is swaps.operations");
  return new AsyncFunction('kafka', 'producer', 'createKafkaRelay', `${named}\nreturn relay;`);
}

async function operations(count) {
  const store = new InMemoryStore(Array.from({ length: count }, (_, i) => swap(i + 1)));
  for (let i = 1; i <= count; i += 1) assert.equal((await processEvent(store, confirmation(i))).outcome, 'applied');
  return Promise.all(Array.from({ length: count }, (_, i) => store.getOperation(`start-exchange:swap-${i + 1}`)));
}

describe('the Kafka relay against the broker', { skip }, () => {
  const prefix = uniquePrefix();
  const kafka = kafkaFor(`relay-${prefix}`);
  const admin = kafka.admin();
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  const created = [];
  const create = async (topic, numPartitions) => {
    created.push(topic);
    assert.equal(await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions }] }), true);
  };
  before(async () => {
    await admin.connect();
    await producer.connect();
  });
  after(async () => {
    await producer.disconnect().catch(() => {});
    await admin.deleteTopics({ topics: created }).catch(() => {});
    await admin.disconnect().catch(() => {});
  });

  it("docs/kafka.md's partition check: the topic with 6 partitions is relayed to, one with 4 and a missing one are refused, and the missing one is not created", {
    timeout: 60_000,
  }, async () => {
    const [operation] = await operations(1);
    const six = `idemflow-${prefix}.six`;
    await create(six, 6);
    const watcher = await watchTopics(kafka, [six]);
    try {
      const relay = await partitionBlock(six)(kafka, producer, createKafkaRelay);
      await relay(operation, { traceContext: null });
      await watcher.caughtUp();
      assert.deepEqual(
        watcher.messages(six).map((m) => m.headers['idemflow-operation-id'].toString()),
        ['start-exchange:swap-1'],
      );
    } finally {
      await watcher.close();
    }

    const four = `idemflow-${prefix}.four`;
    await create(four, 4);
    const missing = `idemflow-${prefix}.missing`;
    for (const [topic, reason, actual] of [
      [four, 'partition count mismatch', 4],
      [missing, 'no such topic', null],
    ]) {
      await assert.rejects(partitionBlock(topic)(kafka, producer, createKafkaRelay), (error) => {
        assert.ok(error instanceof IdemflowError);
        assert.deepEqual(
          [error.code, error.disposition, error.details],
          ['INVALID_ARGUMENT', 'fatal', { field: 'partitions', reason, topic, expected: 6, actual }],
        );
        return true;
      });
      // A relay that skipped ready() refuses its sends the same way.
      const relay = createKafkaRelay(producer, { topic, partitions: 6, admin: kafka.admin() });
      await assert.rejects(relay(operation, { traceContext: null }), (error) => error.details.reason === reason);
    }
    assert.equal((await admin.listTopics()).includes(missing), false, 'the check did not create the missing topic');
    const [described] = (await admin.fetchTopicMetadata({ topics: [four] })).topics;
    assert.equal(described.partitions.length, 4);
  });

  it('an abort during a real send rejects with its reason though the broker then takes the record', { timeout: 60_000 }, async () => {
    const [operation] = await operations(1);
    const topic = `idemflow-${prefix}.abort`;
    await create(topic, 2);
    const watcher = await watchTopics(kafka, [topic]);
    try {
      const relay = createKafkaRelay(producer, { topic });
      const controller = new AbortController();
      const reason = new DOMException('the lease on the operation was lost', 'AbortError');
      const sending = relay(operation, { traceContext: null, signal: controller.signal });
      controller.abort(reason);
      await assert.rejects(sending, (error) => error === reason);
      // The send went out before the abort: the record arrives, and the relay did not report it done.
      const deadline = Date.now() + 30_000;
      while (watcher.messages(topic).length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
      assert.deepEqual(
        watcher.messages(topic).map((m) => m.headers['idemflow-operation-id'].toString()),
        ['start-exchange:swap-1'],
      );
    } finally {
      await watcher.close();
    }
  });
});

if (skip) console.log(`kafka relay broker tests: skipped (${skip}; make kafka-broker starts the broker)`);
