// Deliveries per second end to end through Kafka (the broker of `make
// kafka-broker`), measured side by side in one run: 3 example workers
// (examples/kafka-worker/worker.mjs over PostgreSQL) against 3 members that do
// the same with Kafka and nothing with the messages (workers/kafka-plain-consumer.mjs:
// the same consumer settings, chunks of the same size, commits and heartbeats),
// on a 6-partition topic of its own per run. The clock runs from the first
// produce request until every message has been settled; the group has formed
// before. The messages are the example's sample swaps (a detection, a
// confirmation delivered twice and once more from another observer, per swap,
// and two bad messages). No kills: the chaos run of test/brokers.test.mjs
// prints what those cost. Needs IDEMFLOW_KAFKA_BROKERS and IDEMFLOW_PG_URL;
// the figures also go to target/bench.json (key "kafka").
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { openStore, PG_URL, tablesFor, uniquePrefix, writeBenchJson } from '../workers/backends.mjs';
import { EXAMPLES, supervise } from '../workers/chaos.mjs';
import { KAFKA_BROKERS, kafkaFor, watchTopics } from '../workers/kafka.mjs';

const SWAPS = Number(process.env.BENCH_KAFKA_SWAPS ?? 1000);
const ROUNDS = Number(process.env.BENCH_KAFKA_ROUNDS ?? 2);
const BATCH_SIZE = '16';
const WORKERS = 3;
const PLAIN = fileURLToPath(new URL('../workers/kafka-plain-consumer.mjs', import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

console.log(`kafka: ${WORKERS} group members, 6 partitions, chunks of ${BATCH_SIZE}, produce + consume + commit`);
if (!KAFKA_BROKERS || !PG_URL) {
  console.log(`  skipped: ${!KAFKA_BROKERS ? 'IDEMFLOW_KAFKA_BROKERS (make kafka-broker)' : 'IDEMFLOW_PG_URL'} is not set`);
  process.exit(0);
}

const { sampleSwaps } = await import(path.join(EXAMPLES, 'shared/swaps.mjs'));
const { createProducer, ensureTopics, keyOf, topicNames } = await import(path.join(EXAMPLES, 'kafka-worker/topology.mjs'));

/** One run: `WORKERS` processes of `script` in one group; deliveries per second over `bodies`. */
async function run(script, extraEnv, bodies) {
  const prefix = uniquePrefix();
  const names = topicNames(`bench-${prefix}`);
  const kafka = kafkaFor(`bench-${prefix}`);
  await ensureTopics(kafka, names, { partitions: 6 });
  const env = {
    IDEMFLOW_KAFKA_BROKERS: KAFKA_BROKERS,
    SWAPS_TOPIC: names.main,
    BATCH_SIZE,
    SESSION_TIMEOUT_MS: '6000',
    ...extraEnv(prefix),
  };
  let settled = 0;
  let assigned = 0;
  let allSettled;
  const done = new Promise((resolve) => {
    allSettled = resolve;
  });
  const members = Array.from({ length: WORKERS }, () => {
    const member = { partitions: 0 };
    member.child = supervise(script, env, (line) => {
      if (line.event === 'group-join') {
        assigned += (line.assignment[names.main]?.length ?? 0) - member.partitions;
        member.partitions = line.assignment[names.main]?.length ?? 0;
      }
      if (line.action && line.topic === names.main) {
        settled += 1;
        if (settled === bodies.length) allSettled();
      }
    });
    return member;
  });
  try {
    const deadline = Date.now() + 60_000;
    while (!(assigned === 6 && members.every((m) => m.partitions > 0))) {
      if (Date.now() > deadline) throw new Error(`the group did not form (${assigned} partitions assigned)`);
      await sleep(50);
    }
    const producer = createProducer(kafka);
    await producer.connect();
    const started = process.hrtime.bigint();
    for (let i = 0; i < bodies.length; i += 500) {
      await producer.send({
        topic: names.main,
        acks: -1,
        messages: bodies.slice(i, i + 500).map((value) => ({ key: keyOf(value), value })),
      });
    }
    const timeout = setTimeout(() => allSettled(), 300_000);
    await done;
    clearTimeout(timeout);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    await producer.disconnect();
    if (settled < bodies.length) throw new Error(`only ${settled} of ${bodies.length} deliveries settled in 300 s`);
    // Not timed: everything settled was committed too.
    const watcher = await watchTopics(kafka, [names.main]);
    for (let waited = 0; (await watcher.backlog(names.group, [names.main])) > 0; waited += 100) {
      if (waited > 30_000) throw new Error('offsets were left uncommitted');
      await sleep(100);
    }
    await watcher.close();
    return { deliveriesPerSecond: settled / seconds, seconds };
  } finally {
    for (const { child } of members) child.kill('SIGTERM');
    await Promise.all(
      members.map(({ child }) =>
        child.exitCode === null && child.signalCode === null ? new Promise((resolve) => child.once('exit', resolve)) : null,
      ),
    );
    const admin = kafka.admin();
    await admin.connect();
    await admin.deleteGroups([names.group]).catch(() => {});
    await admin.deleteTopics({ topics: [names.main, names.retry, names.dead, names.parked] }).catch(() => {});
    await admin.disconnect();
  }
}

const plain = [];
const idemflow = [];
const dbs = [];
try {
  for (let round = 0; round < ROUNDS; round += 1) {
    const { swaps, bodies } = sampleSwaps(SWAPS);
    plain.push(await run(PLAIN, () => ({}), bodies));
    const prefix = uniquePrefix();
    const db = await openStore('pg', { tables: tablesFor(prefix), url: PG_URL, poolSize: 2 });
    dbs.push(db);
    await db.store.migrate();
    for (const swap of swaps) await db.store.putWorkflow(swap);
    idemflow.push(
      await run(path.join(EXAMPLES, 'kafka-worker/worker.mjs'), () => ({ IDEMFLOW_PG_URL: PG_URL, IDEMFLOW_TABLE_PREFIX: prefix }), bodies),
    );
  }
} finally {
  for (const db of dbs) {
    await db.drop();
    await db.close();
  }
}

const best = (runs) => Math.max(...runs.map((r) => r.deliveriesPerSecond));
const [reference, worker] = [best(plain), best(idemflow)];
const messages = sampleSwaps(SWAPS).bodies.length;
console.log(
  `  broker alone      ${String(Math.round(reference)).padStart(6)} deliveries/s  (best of ${ROUNDS}: ${plain.map((r) => `${r.seconds.toFixed(2)} s`).join(', ')} for ${messages} messages)`,
);
console.log(
  `  idemflow worker   ${String(Math.round(worker)).padStart(6)} deliveries/s  (best of ${ROUNDS}: ${idemflow.map((r) => `${r.seconds.toFixed(2)} s`).join(', ')}; over PostgreSQL, one transaction per chunk)`,
);
console.log(`  ratio             ${(worker / reference).toFixed(2)} of the broker alone`);
writeBenchJson('kafka', {
  workers: WORKERS,
  partitions: 6,
  batchSize: Number(BATCH_SIZE),
  messages,
  brokerAloneDeliveriesPerSecond: Math.round(reference),
  workerDeliveriesPerSecond: Math.round(worker),
  ratio: Number((worker / reference).toFixed(3)),
});
