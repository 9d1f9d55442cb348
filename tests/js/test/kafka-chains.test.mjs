// One retry chain per event on Kafka (issue 34): the example worker's copies
// carry the event's origin forward, and a worker killed between sending a
// retry copy and committing the offset, again and again, leaves one chain and
// one parked copy. Over stand-ins: copyFor and chainGuard
// (examples/kafka-worker/consume.mjs). Against the broker of `make
// kafka-broker` (IDEMFLOW_KAFKA_BROKERS, with IDEMFLOW_PG_URL): the example
// worker with workers/kafka-kill-after-retry.mjs preloaded.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openStore, PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { brokerSkip, EXAMPLES, supervise } from '../workers/chaos.mjs';
import { KAFKA_BROKERS, kafkaFor, watchTopics } from '../workers/kafka.mjs';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const skipExamples = fs.existsSync(EXAMPLES) ? false : 'tests/js/examples is missing: run `make examples`';
const names = { main: 'swaps', retry: 'swaps.retry', dead: 'swaps.dead', parked: 'swaps.parked' };

/** Resolves once `done()` is true, polling; rejects after `ms`. */
async function until(what, done, ms) {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

/** The child's [code, signal] once it exits; rejects after `ms`. */
async function exitWithin(child, ms) {
  if (child.exitCode !== null || child.signalCode !== null) return [child.exitCode, child.signalCode];
  let timer;
  try {
    return await Promise.race([
      once(child, 'exit'),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the worker did not exit within ${ms} ms: ${child.stderrTail()}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

const copy = (offset, { origin, attempt } = {}) => ({
  offset: String(offset),
  key: Buffer.from('swap-1'),
  value: Buffer.from('{}'),
  headers: {
    ...(origin === undefined ? {} : { 'idemflow-origin': Buffer.from(origin) }),
    ...(attempt === undefined ? {} : { 'idemflow-attempt': Buffer.from(String(attempt)) }),
  },
});
const retryVerdict = { action: 'retry', retryAfterMs: 100, error: { code: 'UNKNOWN_WORKFLOW', message: 'no workflow', details: {} } };

describe("the Kafka worker's copies and its chain guard", { skip: skipExamples }, () => {
  it('a copy names the message the event came in, a copy of a copy too', async () => {
    const { copyFor } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    const first = copyFor(names, 'swaps', 4, copy(17), retryVerdict, 1);
    assert.equal(first.topic, 'swaps.retry');
    assert.deepEqual([first.message.headers['idemflow-origin'], first.message.headers['idemflow-attempt']], ['swaps/4/17', '2']);
    const again = copyFor(names, 'swaps.retry', 1, { ...first.message, offset: '230' }, retryVerdict, 2);
    assert.deepEqual([again.message.headers['idemflow-origin'], again.message.headers['idemflow-attempt']], ['swaps/4/17', '3']);
    const parked = copyFor(
      names,
      'swaps.retry',
      1,
      { ...again.message, offset: '231' },
      { action: 'park', error: { code: 'UNKNOWN_WORKFLOW', message: 'no workflow', details: {} } },
      3,
    );
    assert.deepEqual([parked.topic, parked.message.headers['idemflow-origin']], ['swaps.parked', 'swaps/4/17']);
    assert.equal(copyFor(names, 'swaps', 4, copy(18), { action: 'ack' }, 1), null);
  });

  it('drops a copy at or below an attempt of its origin already settled, or below another of its chunk, and keeps one of a chunk', async () => {
    const { chainGuard } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    const guard = chainGuard();
    const a = { origin: 'swaps/4/17' };
    const b = { origin: 'swaps/2/5' };
    // Two forks of one event in one chunk (the second sent by a member that crashed before committing), and another event.
    const chunk = [
      copy(1, { ...a, attempt: 2 }),
      copy(2, { ...b, attempt: 2 }),
      copy(3, { ...a, attempt: 2 }),
      copy(4, { ...a, attempt: 3 }),
    ];
    assert.deepEqual(guard.fresh('swaps.retry', 0, chunk), [false, true, false, true]);
    assert.deepEqual(guard.fresh('swaps.retry', 0, chunk), [false, true, false, true], 'fresh() alone remembers nothing');
    guard.settled('swaps.retry', 0, [chunk[1], chunk[3]]);
    assert.deepEqual(
      guard.fresh('swaps.retry', 0, [copy(5, { ...a, attempt: 3 }), copy(6, { ...a, attempt: 2 }), copy(7, { ...b, attempt: 3 })]),
      [false, false, true],
    );
    assert.deepEqual(guard.fresh('swaps.retry', 0, [copy(8, { ...a, attempt: 4 })]), [true], 'the chain furthest on goes on');
  });

  it('forgets the origins settled longest ago past its limit', async () => {
    const { chainGuard } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    const guard = chainGuard({ limit: 2 });
    for (const origin of ['swaps/0/1', 'swaps/0/2', 'swaps/0/3']) guard.settled('swaps.retry', 0, [copy(1, { origin, attempt: 2 })]);
    assert.equal(guard.size, 2);
    assert.deepEqual(
      guard.fresh('swaps.retry', 0, [copy(9, { origin: 'swaps/0/1', attempt: 2 }), copy(10, { origin: 'swaps/0/3', attempt: 2 })]),
      [true, false],
    );
  });
});

const skipBroker = brokerSkip('IDEMFLOW_KAFKA_BROKERS');

describe('a Kafka worker killed between a retry copy and its commit', { skip: skipBroker }, () => {
  // One kill in make test (each costs a group rebalance on the broker of the tests: without the guard, one kill
  // already leaves two chains and two parked copies); IDEMFLOW_KAFKA_CHAIN_KILLS for more.
  const KILLS = Number(process.env.IDEMFLOW_KAFKA_CHAIN_KILLS ?? 1);
  it(`killed ${KILLS} times after sending a retry copy and before committing: one retry chain, one parked copy`, {
    timeout: 300_000,
  }, async () => {
    const prefix = uniquePrefix();
    const base = `idemflow-${prefix}`;
    const db = await openStore('pg', { tables: tablesFor(prefix), url: PG_URL, poolSize: 2 });
    await db.store.migrate();
    const kafka = kafkaFor(`chains-test-${prefix}`);
    const { createProducer, ensureTopics, topicNames } = await import(path.join(EXAMPLES, 'kafka-worker/topology.mjs'));
    const topics = topicNames(base);
    await ensureTopics(kafka, topics, { partitions: 2 });
    const watcher = await watchTopics(kafka, [topics.main, topics.retry, topics.dead, topics.parked]);
    const dir = tempDir('kafka-chains');
    const killsFile = path.join(dir, 'kills');
    fs.writeFileSync(killsFile, String(KILLS));
    const env = {
      IDEMFLOW_KAFKA_BROKERS: KAFKA_BROKERS,
      IDEMFLOW_PG_URL: PG_URL,
      IDEMFLOW_TABLE_PREFIX: prefix,
      SWAPS_TOPIC: base,
      PARTITIONS: '2',
      SESSION_TIMEOUT_MS: '6000',
      FETCH_MAX_WAIT_MS: '100',
      RETRY_BASE_DELAY_MS: '20',
      RETRY_MAX_DELAY_MS: '200',
      KAFKA_KILLS_FILE: killsFile,
    };
    const runs = []; // per worker process: its kill, its retry-topic verdicts, the forks it dropped
    let worker = null;
    const start = () => {
      const run = { killed: false, retried: [], dropped: [], parked: 0 };
      runs.push(run);
      worker = supervise(
        path.join(EXAMPLES, 'kafka-worker/worker.mjs'),
        env,
        (line) => {
          if (line.role === 'kill') run.killed = true;
          if (line.event === 'fork-dropped') run.dropped.push(line.attempt);
          if (line.role === 'worker' && line.action && line.topic === topics.retry) run.retried.push(line.attempt);
          if (line.action === 'park') run.parked += 1;
        },
        ['--import', fileURLToPath(new URL('../workers/kafka-kill-after-retry.mjs', import.meta.url))],
      );
      return worker;
    };
    try {
      const producer = createProducer(kafka);
      await producer.connect();
      // An event whose workflow never appears: retried until maxDeliveries (20) parks it.
      const event = {
        eventId: 'ghost-1',
        workflowId: 'swap-ghost',
        type: 'DEPOSIT_CONFIRMED',
        depositRef: 'btc:tx-g:vout-0',
        amountUnits: '1',
        sequence: 2,
      };
      await producer.send({ topic: topics.main, acks: -1, messages: [{ key: event.workflowId, value: JSON.stringify(event) }] });
      await producer.disconnect();

      // Each worker is restarted once the hook has killed it, until the kills are spent.
      for (let kill = 0; kill < KILLS; kill += 1) {
        const child = start();
        const [, signal] = await exitWithin(child, 90_000);
        assert.equal(signal, 'SIGKILL', `worker ${kill + 1} was killed by the hook: ${child.stderrTail()}`);
        assert.ok(runs.at(-1).killed, 'after a retry copy was acknowledged');
      }
      assert.equal(fs.readFileSync(killsFile, 'utf8'), '0');
      start();
      await until(
        'the event is parked and the group has committed everything',
        async () => {
          if (watcher.messages(topics.parked).length === 0) return false;
          return (await watcher.backlog(topics.group, [topics.main, topics.retry])) === 0;
        },
        180_000,
      );

      await watcher.caughtUp();
      const header = (record, name) => record.headers[name]?.toString();
      const origin = `${base}/${watcher.messages(topics.main)[0].partition}/0`;
      const parked = watcher.messages(topics.parked);
      assert.deepEqual(
        parked.map((record) => [header(record, 'idemflow-code'), header(record, 'idemflow-origin')]),
        [['UNKNOWN_WORKFLOW', origin]],
        'one parked copy, naming the original message',
      );
      const copies = watcher.messages(topics.retry);
      assert.deepEqual(
        new Set(copies.map((record) => header(record, 'idemflow-origin'))),
        new Set([origin]),
        'every copy names the original message',
      );
      const forks = runs.flatMap((run) => run.dropped);
      assert.ok(forks.length >= 1, 'the crashes forked the event, and the forks were dropped');
      // The worker that was not killed settled each attempt of the chain once: one chain.
      const last = runs.at(-1);
      assert.deepEqual(last.retried, [...new Set(last.retried)], `one chain: ${last.retried}`);
      assert.equal(
        runs.reduce((sum, run) => sum + run.parked, 0),
        1,
      );
      assert.deepEqual(watcher.messages(topics.dead), []);
    } finally {
      if (worker && worker.exitCode === null && worker.signalCode === null) {
        worker.kill('SIGTERM');
        await exitWithin(worker, 20_000).catch(() => worker.kill('SIGKILL'));
      }
      await watcher.close();
      const admin = kafka.admin();
      await admin.connect();
      await admin.deleteGroups([topics.group]).catch(() => {});
      await admin.deleteTopics({ topics: [topics.main, topics.retry, topics.dead, topics.parked] }).catch(() => {});
      await admin.disconnect();
      await db.drop();
      await db.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

if (skipBroker) console.log(`kafka chain tests: skipped (${skipBroker}; make kafka-broker starts the broker)`);
