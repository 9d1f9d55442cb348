// docs/kafka.md's worker block, taken from the page and run as it stands
// against the Kafka-protocol broker of `make kafka-broker`
// (IDEMFLOW_KAFKA_BROKERS) over a SQLite store: a late swap (its event
// arrives before the workflow exists) waits in the retry topic until it
// applies, a duplicate is a duplicate-delivery, an invalid body lands in the
// dead topic. The only things the test changes are the topics' base name
// (one per run), and, through the Kafka class it hands the block, the
// brokers, a short fetch wait (Tansu holds a fetch for kafkajs's default
// 5 s) and a short session (a join takes half of it).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { SqliteStore } from 'idemflow/sqlite';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
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
import { KAFKA_BROKERS, kafkaFor, watchTopics } from '../workers/kafka.mjs';

const skip = KAFKA_BROKERS ? false : 'IDEMFLOW_KAFKA_BROKERS is not set';

const workerBlock = () =>
  docsBlock('kafka.md', 'createDeliveryHandler(store', [
    "import { createDeliveryHandler } from 'idemflow';",
    "import { Kafka, Partitioners } from 'kafkajs';",
  ]);

/** kafkajs's Kafka, pointed at the broker of the tests, its consumers quick to fetch and to join. */
class TestKafka extends Kafka {
  constructor(config) {
    super({ ...config, brokers: KAFKA_BROKERS.split(','), logLevel: logLevel.NOTHING });
  }
  consumer(config) {
    return super.consumer({ ...config, maxWaitTimeInMs: 100, sessionTimeout: 6000, heartbeatInterval: 1000 });
  }
}

describe("docs/kafka.md's worker block", { skip }, () => {
  it('runs as written: a late swap waits in the retry topic and is exchanged, a duplicate is a duplicate-delivery, an invalid body is dead-lettered', {
    timeout: 120_000,
  }, async () => {
    const prefix = uniquePrefix();
    const base = `idemflow-${prefix}`;
    const names = { main: base, retry: `${base}.retry`, dead: `${base}.dead`, parked: `${base}.parked` };
    const dir = tempDir('kafka-docs');
    const store = SqliteStore.open(path.join(dir, 'swaps.db'), { tables: tablesFor(prefix), driver: 'better-sqlite3' });
    await store.migrate();
    await store.putWorkflow(swap(2)); // swap 1 is the late one: created only once its event has been retried

    // What the block's handler answered, message by message.
    const verdicts = [];
    const recordingHandler = recordingHandlerOf(verdicts);

    const block = workerBlock();
    const named = block.replace("const base = 'swaps';", `const base = '${base}';`);
    assert.notEqual(named, block, "the block names its topics after const base = 'swaps'");
    const run = new AsyncFunction('store', 'createDeliveryHandler', 'Kafka', 'Partitioners', `${named}\nreturn { consumer, producer };`);
    const kafka = kafkaFor(`kafka-docs-${prefix}`);
    let worker = null;
    let watcher = null;
    try {
      worker = await run(store, recordingHandler, TestKafka, Partitioners);
      // The main topic too: the group's backlog is read against the ends Fetch reports (workers/kafka.mjs).
      watcher = await watchTopics(kafka, Object.values(names));

      const late = JSON.stringify(confirmation(1, 'late-1'));
      const twice = JSON.stringify(confirmation(2, 'confirm-2'));
      const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
      await producer.connect();
      await producer.send({
        topic: names.main,
        acks: -1,
        messages: [
          { key: 'swap-1', value: late },
          { key: 'swap-2', value: twice },
          { key: 'bad-1', value: 'not json' },
          { key: 'swap-2', value: twice },
        ],
      });
      await producer.disconnect();

      const of = (body) => verdicts.filter((v) => v.body === body);
      await until('the late event is retried', () => of(late).some((v) => v.action === 'retry'), 60_000);
      await sleep(2000); // the swap is created ~2 s after its event first met UNKNOWN_WORKFLOW
      await store.putWorkflow(swap(1));
      await until('the late event is settled (applied or parked)', () => of(late).some((v) => v.action !== 'retry'), 60_000);
      await until('the invalid body is in the dead topic', () => watcher.messages(names.dead).length > 0, 30_000);
      await until(
        'the group has committed everything',
        async () => (await watcher.backlog(`${base}-workers`, [names.main, names.retry])) === 0,
        30_000,
      );

      // The late swap: retried on UNKNOWN_WORKFLOW, each delivery the next attempt, until the swap existed; never parked.
      await assertLateSwapExchanged(of(late), store, 'main topic');
      const retries = of(late).filter((v) => v.action === 'retry');
      await watcher.caughtUp();
      assert.deepEqual(watcher.messages(names.parked), [], 'nothing parked');
      const copies = watcher.messages(names.retry);
      assert.equal(copies.length, retries.length, 'one retry copy per retry verdict');
      const header = (copy, name) => copy.headers[name]?.toString();
      assert.deepEqual(
        copies.map((copy) => [copy.key.toString(), copy.value.toString(), header(copy, 'idemflow-code'), header(copy, 'idemflow-attempt')]),
        copies.map((_, i) => ['swap-1', late, 'UNKNOWN_WORKFLOW', String(i + 2)]),
      );
      const origins = new Set(copies.map((copy) => header(copy, 'idemflow-origin')));
      assert.equal(origins.size, 1, 'every copy of the event names one origin, the original message');
      assert.match([...origins][0], new RegExp(`^${base}/\\d+/0$`));

      // The duplicate: the same event twice on the main topic, applied once.
      assert.deepEqual(
        of(twice).map((v) => [v.action, v.outcome]),
        [
          ['ack', 'applied'],
          ['ack', 'duplicate-delivery'],
        ],
      );
      assert.equal((await store.getWorkflow('swap-2')).status, 'exchange');

      // The invalid body: one dead letter with its code and reason.
      assert.deepEqual(
        of('not json').map((v) => [v.action, v.code]),
        [['dead-letter', 'INVALID_EVENT']],
      );
      const dead = watcher.messages(names.dead);
      assert.deepEqual(
        dead.map((copy) => [copy.key.toString(), copy.value.toString(), header(copy, 'idemflow-code'), header(copy, 'idemflow-reason')]),
        [['bad-1', 'not json', 'INVALID_EVENT', 'not-json']],
      );
    } finally {
      await worker?.consumer.disconnect().catch(() => {});
      await worker?.producer.disconnect().catch(() => {});
      await watcher?.close();
      const admin = kafka.admin();
      await admin.connect();
      await admin.deleteGroups([`${base}-workers`]).catch(() => {});
      await admin.deleteTopics({ topics: Object.values(names) }).catch(() => {});
      await admin.disconnect();
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

if (skip) console.log(`kafka docs block test: skipped (${skip}; make kafka-broker starts the broker)`);
