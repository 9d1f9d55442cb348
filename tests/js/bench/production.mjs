// The production-shaped benchmark: WORKERS worker processes over one
// database, the chaos test's traffic (workers/swap-traffic.mjs: many swaps,
// detections and confirmations, reversals, deadlines, duplicates,
// re-publications, conflicts, a few bodies that are not events) in one
// shuffled order, so that batches of different workers touch the same
// workflows; each figure beside references measured in the same run.
//
// Through a broker (RabbitMQ, NATS JetStream: when IDEMFLOW_AMQP_URL /
// IDEMFLOW_NATS_URL and IDEMFLOW_PG_URL are set), at each prefetch P:
//   idemflow      the example worker itself (js/examples/<broker>-worker:
//                 batches of up to P through handle.batch) over PostgreSQL
//   hand-written  a worker of one transaction per message (bench/hand-written.mjs)
//   broker alone  publish, consume and ack only, the same queues and prefetch
// Store only (PostgreSQL, MariaDB: always, when their URLs are set): WORKERS
// processes calling handle.batch on batches of P taken from one shared queue
// (workers/lanes.mjs), beside the hand-written worker in as many processes.
// The hand-written worker runs BENCH_HAND_CONCURRENCY (default 4) transactions
// at a time in each process, over a pool of as many connections.
//
// Events per second, p50/p99 per batch (per transaction for the hand-written
// worker), deadlocks (hooks.onRaceRetry reason `deadlock`; and every
// transaction that ended in one, the last attempt's included), race re-runs
// by reason, the database's own deadlock counter (server-wide: other clients
// count too) and the load average before and after each figure. Everything
// goes to target/bench.json under "production".
//
// Every contender first runs BENCH_PRODUCTION_WARM_SWAPS (default 100) swaps
// of other traffic, untimed. Scale with BENCH_PRODUCTION_SWAPS (default 2000,
// about 4.5 messages each),
// BENCH_PRODUCTION_PREFETCH (default 16,128,512), BENCH_PRODUCTION_WORKERS
// (default 3), BENCH_HAND_CONCURRENCY, BENCH_PRODUCTION_ONLY (a
// comma-separated choice of rabbitmq, nats, store-pg, store-mysql).
import os from 'node:os';

import { BACKENDS, MYSQL_URL, openStore, PG_URL, tablesFor, writeBenchJson } from '../workers/backends.mjs';
import { runOnBroker } from '../workers/broker-runs.mjs';
import { BROKERS, brokerSkip } from '../workers/chaos.mjs';
import { laneTables, percentile, runLanes } from '../workers/lanes.mjs';
import { endOf, swapTraffic } from '../workers/swap-traffic.mjs';

const SWAPS = Number(process.env.BENCH_PRODUCTION_SWAPS ?? 2000);
const WARM_SWAPS = Number(process.env.BENCH_PRODUCTION_WARM_SWAPS ?? 100);
const PREFETCHES = (process.env.BENCH_PRODUCTION_PREFETCH ?? '16,128,512').split(',').map(Number);
const WORKERS = Number(process.env.BENCH_PRODUCTION_WORKERS ?? 3);
const HAND_CONCURRENCY = Number(process.env.BENCH_HAND_CONCURRENCY ?? 4);
const ONLY = process.env.BENCH_PRODUCTION_ONLY ? new Set(process.env.BENCH_PRODUCTION_ONLY.split(',')) : null;
const SEED = Number(process.env.BENCH_PRODUCTION_SEED ?? 1);
/** The broker alone runs the traffic this many times over: a run of a fraction of a second measures its start more than its rate. */
const FLOOR_REPEAT = Number(process.env.BENCH_FLOOR_REPEAT ?? 4);

const load = () => Number(os.loadavg()[0].toFixed(2));
const round = (ms) => (ms === null ? null : Number(ms.toFixed(1)));
const traffic = swapTraffic({ swaps: SWAPS, seed: SEED, runId: 'bench' });
/** Run first by every contender, untimed: its workers' first batches (connections, compilation) are not what is measured. */
const warmUp = swapTraffic({ swaps: WARM_SWAPS, seed: SEED + 100, runId: 'warm' });

/** The database's own deadlock counter (server-wide: other clients' deadlocks count too). */
async function serverDeadlocks(kind, url) {
  const helper = await openStore(kind, { tables: tablesFor('unused'), url, poolSize: 1 });
  try {
    if (kind === 'pg')
      return Number((await helper.query('SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()', []))[0].deadlocks);
    const [row] = await helper.query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'", []);
    return row ? Number(row.Value) : null;
  } finally {
    await helper.close();
  }
}

/** Runs `measure()` with the load average and the server's deadlock counter taken before and after. */
async function measured(kind, url, measure) {
  const before = { load: load(), deadlocks: url ? await serverDeadlocks(kind, url) : null };
  const raw = await measure();
  const after = { load: load(), deadlocks: url ? await serverDeadlocks(kind, url) : null };
  return {
    ...raw,
    load: [before.load, after.load],
    serverDeadlocks: before.deadlocks === null ? null : after.deadlocks - before.deadlocks,
  };
}

/** A run's figures as reported: `rerunsBy` 'hook' (idemflow's onRaceRetry) or 'transaction' (the hand-written worker runs it again). */
function summary(raw, rerunsBy) {
  const reRuns = rerunsBy === 'hook' ? raw.races : raw.failedTransactions;
  return {
    messages: raw.messages,
    seconds: Number(raw.seconds.toFixed(2)),
    eventsPerSecond: raw.eventsPerSecond,
    ...(raw.publishSeconds !== undefined ? { publishSeconds: Number(raw.publishSeconds.toFixed(2)) } : {}),
    p50Ms: round(percentile(raw.latencies, 50)),
    p99Ms: round(percentile(raw.latencies, 99)),
    batches: raw.latencies.length,
    deadlocks: reRuns.deadlock ?? 0,
    deadlockedTransactions: raw.failedTransactions.deadlock ?? 0,
    raceReRuns: reRuns,
    failedTransactions: raw.failedTransactions,
    serverDeadlocks: raw.serverDeadlocks,
    verdicts: raw.verdicts,
    load: raw.load,
    problems: raw.problems,
  };
}

/** Whether two contenders that did the same work ended the same (every workflow's status, the receipts, the operations). */
function endsDiffer(a, b) {
  if (!a || !b) return null;
  if (a.statuses.size !== b.statuses.size || a.receipts !== b.receipts || a.operations !== b.operations) {
    return `receipts ${a.receipts}/${b.receipts}, operations ${a.operations}/${b.operations}`;
  }
  let differ = 0;
  for (const [id, status] of a.statuses) if (b.statuses.get(id) !== status) differ += 1;
  return differ === 0 ? null : `${differ} workflows end elsewhere`;
}

function line(label, f) {
  const latency = f.p50Ms === null ? ''.padEnd(34) : `  p50 ${String(f.p50Ms).padStart(7)} ms  p99 ${String(f.p99Ms).padStart(7)} ms`;
  const races =
    Object.entries(f.raceReRuns ?? {})
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  const deadlocks =
    f.deadlocks === undefined ? '' : `  deadlocks ${f.deadlocks} (${f.deadlockedTransactions} transactions)  re-runs: ${races}`;
  return (
    `    ${label.padEnd(22)} ${String(f.eventsPerSecond).padStart(6)} events/s${latency}${deadlocks}` +
    `  (server deadlocks ${f.serverDeadlocks ?? 'n/a'}; load ${f.load.join(' → ')})${f.problems.length ? `  PROBLEMS: ${f.problems.join('; ')}` : ''}`
  );
}

// ---- Store only -------------------------------------------------------------

/** Store-only retries go back to the shared queue, as a broker redelivers them. */
const settleVerdict = (item, result) => (result.action === 'retry' && item.attempt < 20 ? 'again' : 'final');

function verdictCounts(items) {
  const counts = {};
  for (const item of items) {
    const last = item.results[item.results.length - 1];
    const label = last.action === 'ack' ? `ack ${last.outcome}` : `${last.action}${last.code ? ` ${last.code}` : ''}`;
    counts[label] = (counts[label] ?? 0) + 1;
  }
  return counts;
}

/** One store-only contender on fresh tables. */
async function storeOnly(server, mode, prefetch) {
  const backend = BACKENDS.find((b) => b.id === server.kind);
  const options = { poolSize: mode === 'hand-written' ? HAND_CONCURRENCY : 2 };
  const { helper, spec, tables, close } = await laneTables(backend, options, [...warmUp.workflows, ...traffic.workflows]);
  try {
    return await measured(server.kind, server.url, async () => {
      const run = await runLanes({
        lanes: WORKERS,
        config: { mode, concurrency: HAND_CONCURRENCY, store: spec },
        items: traffic.messages.map((m) => ({ body: m.body })),
        warmUp: warmUp.messages.map((m) => ({ body: m.body })),
        batchSize: prefetch,
        settle: settleVerdict,
        timeoutMs: 600_000,
      });
      const end = await endOf(helper, tables);
      const eventIds = traffic.validIds.size + warmUp.validIds.size;
      const problems = end.receipts === eventIds ? [] : [`${end.receipts} receipts for ${eventIds} event ids`];
      return {
        ...run,
        messages: traffic.messages.length,
        eventsPerSecond: Math.round(traffic.messages.length / run.seconds),
        verdicts: verdictCounts(run.items),
        problems,
        end,
      };
    });
  } finally {
    await close();
  }
}

// ---- The run ----------------------------------------------------------------

const report = {
  swaps: SWAPS,
  messages: traffic.messages.length,
  eventIds: traffic.validIds.size,
  workers: WORKERS,
  handConcurrency: HAND_CONCURRENCY,
  prefetches: PREFETCHES,
  cores: os.cpus().length,
  loadAtStart: load(),
  brokers: {},
  storeOnly: {},
};
const ratio = (a, b) => Number((a / b).toFixed(2));
const chosen = (id) => !ONLY || ONLY.has(id);

console.log(
  `production-shaped runs: ${WORKERS} worker processes, ${SWAPS} swaps = ${traffic.messages.length} messages (${traffic.validIds.size} event ids), ` +
    `prefetch / batch ${PREFETCHES.join(', ')}; load average ${load()} on ${os.cpus().length} cores (figures under load are noisy)`,
);

// The references (workers/broker-reference.mjs) speak RabbitMQ and NATS; Kafka's
// example workers are measured against the broker alone by bench/kafka.mjs.
const REFERENCED = new Set(['rabbitmq', 'nats']);

for (const { name, env } of BROKERS) {
  if (!chosen(name)) continue;
  if (!REFERENCED.has(name)) {
    console.log(`  ${name}: measured by bench/kafka.mjs (its references here are RabbitMQ's and NATS's)`);
    continue;
  }
  const skip = brokerSkip(env);
  if (skip) {
    console.log(`  ${name}: skipped (${skip})`);
    continue;
  }
  const url = process.env[env];
  console.log(
    `  ${name} + PostgreSQL: ${WORKERS} example workers, beside ${WORKERS} hand-written workers and ${WORKERS} consumers of the broker alone ` +
      `(which runs the messages ${FLOOR_REPEAT} times over); p50/p99 per batch, per transaction for the hand-written worker`,
  );
  const figures = {};
  for (const prefetch of PREFETCHES) {
    const run = (contender) =>
      measured('pg', contender === 'floor' ? null : PG_URL, () =>
        runOnBroker({
          brokerName: name,
          url,
          contender,
          prefetch,
          traffic,
          warmUp,
          workers: WORKERS,
          seed: SEED,
          repeat: contender === 'floor' ? FLOOR_REPEAT : 1,
          handConcurrency: HAND_CONCURRENCY,
        }),
      );
    const floor = await run('floor');
    const example = await run('example');
    const hand = await run('hand-written');
    const differs = endsDiffer(example.end, hand.end);
    if (differs) example.problems.push(`the hand-written worker ended elsewhere: ${differs}`);
    const f = {
      idemflow: summary(example, 'hook'),
      handWritten: summary(hand, 'transaction'),
      brokerAlone: {
        ...summary(floor, 'transaction'),
        p50Ms: null,
        p99Ms: null,
        batches: undefined,
        deadlocks: undefined,
        deadlockedTransactions: undefined,
        raceReRuns: undefined,
      },
    };
    f.ofBrokerAlone = ratio(f.idemflow.eventsPerSecond, f.brokerAlone.eventsPerSecond);
    f.ofHandWritten = ratio(f.idemflow.eventsPerSecond, f.handWritten.eventsPerSecond);
    console.log(`   prefetch ${prefetch}:`);
    console.log(line('idemflow example', f.idemflow));
    console.log(line('hand-written', f.handWritten));
    console.log(line('broker alone', f.brokerAlone));
    console.log(`    idemflow = ${Math.round(f.ofBrokerAlone * 100)}% of the broker alone, ${f.ofHandWritten}x the hand-written worker`);
    figures[prefetch] = f;
  }
  report.brokers[name] = figures;
}

for (const server of [
  { id: 'store-pg', kind: 'pg', name: 'PostgreSQL', url: PG_URL, env: 'IDEMFLOW_PG_URL' },
  { id: 'store-mysql', kind: 'mysql', name: 'MariaDB', url: MYSQL_URL, env: 'IDEMFLOW_MYSQL_URL' },
]) {
  if (!chosen(server.id)) continue;
  if (!server.url) {
    console.log(`  store only, ${server.name}: skipped (${server.env} is not set)`);
    continue;
  }
  console.log(
    `  store only, ${server.name}: ${WORKERS} processes calling handle.batch, beside the hand-written worker (${HAND_CONCURRENCY} transactions at a time per process)`,
  );
  const figures = {};
  for (const prefetch of PREFETCHES) {
    const idemflow = await storeOnly(server, 'handle-batch', prefetch);
    const hand = await storeOnly(server, 'hand-written', prefetch);
    const differs = endsDiffer(idemflow.end, hand.end);
    if (differs) idemflow.problems.push(`the hand-written worker ended elsewhere: ${differs}`);
    const f = { idemflow: summary(idemflow, 'hook'), handWritten: summary(hand, 'transaction') };
    f.ofHandWritten = ratio(f.idemflow.eventsPerSecond, f.handWritten.eventsPerSecond);
    console.log(`   batch ${prefetch}:`);
    console.log(line('idemflow handle.batch', f.idemflow));
    console.log(line('hand-written', f.handWritten));
    console.log(`    idemflow = ${f.ofHandWritten}x the hand-written worker`);
    figures[prefetch] = f;
  }
  report.storeOnly[server.kind] = figures;
}

report.loadAtEnd = load();
writeBenchJson('production', report);
