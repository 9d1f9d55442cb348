// The production-shaped benchmark: several worker processes over one
// database, measured beside the references of the same run.
//
// Store only (PostgreSQL, MariaDB): WORKERS processes (workers/lane.mjs)
// calling handle.batch with batches of P, beside the hand-written worker
// (bench/hand-written.mjs: one transaction per message, 4 at a time over each
// process's pool).
//
// Events per second, p50/p99 per batch (per transaction for the hand-written
// worker), deadlocks and race re-runs (hooks.onRaceRetry, by reason), the
// load average next to each figure. Everything goes to target/bench.json
// under "production". Scale with BENCH_PRODUCTION_SWAPS (default 600, about
// 5 messages each), BENCH_PRODUCTION_PREFETCH (default 16,128,512),
// BENCH_PRODUCTION_WORKERS (default 3), BENCH_PRODUCTION_ONLY (store-pg,
// store-mysql: a comma-separated choice).
import os from 'node:os';

import { MYSQL_URL, PG_URL, openStore, tablesFor, uniquePrefix, writeBenchJson } from '../workers/backends.mjs';
import { percentile, runLanes } from '../workers/lanes.mjs';
import { putWorkflows, swapTraffic } from '../workers/swap-traffic.mjs';

const SWAPS = Number(process.env.BENCH_PRODUCTION_SWAPS ?? 600);
const PREFETCHES = (process.env.BENCH_PRODUCTION_PREFETCH ?? '16,128,512').split(',').map(Number);
const WORKERS = Number(process.env.BENCH_PRODUCTION_WORKERS ?? 3);
const HAND_CONCURRENCY = Number(process.env.BENCH_HAND_CONCURRENCY ?? 4);
const ONLY = process.env.BENCH_PRODUCTION_ONLY ? new Set(process.env.BENCH_PRODUCTION_ONLY.split(',')) : null;
const SEED = Number(process.env.BENCH_PRODUCTION_SEED ?? 1);

const load = () => Number(os.loadavg()[0].toFixed(2));

/** The database's own deadlock counter (server-wide: other clients' deadlocks count too). */
async function serverDeadlocks(helper, kind) {
  if (kind === 'pg') return Number((await helper.query('SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()', []))[0].deadlocks);
  const [row] = await helper.query("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'", []);
  return row ? Number(row.Value) : null;
}

/** What one run's results say: a verdict's count by action (and outcome), and whether it is final. */
function settleVerdict(item, result) {
  return result.action === 'retry' && item.attempt < 20 ? 'again' : 'final';
}

function verdictCounts(items) {
  const counts = {};
  for (const item of items) {
    const last = item.results[item.results.length - 1];
    const label = last.action === 'ack' ? `ack ${last.outcome}` : `${last.action}${last.code ? ` ${last.code}` : ''}`;
    counts[label] = (counts[label] ?? 0) + 1;
  }
  return counts;
}

/** Every workflow's status and receipt count after a run: two contenders that did the same work end the same. */
async function endState(helper, tables) {
  const statuses = new Map((await helper.query(`SELECT id, status FROM ${tables.workflows}`, [])).map((row) => [row.id, row.status]));
  const receipts = await helper.count('inbox');
  const operations = await helper.count('outbox');
  return { statuses, receipts, operations };
}

const SERVERS = [
  { id: 'store-pg', kind: 'pg', name: 'PostgreSQL', url: PG_URL, env: 'IDEMFLOW_PG_URL' },
  { id: 'store-mysql', kind: 'mysql', name: 'MariaDB', url: MYSQL_URL, env: 'IDEMFLOW_MYSQL_URL' },
];

/** One contender on fresh tables: the figures of a store-only run. */
async function storeOnly(server, mode, prefetch) {
  const traffic = swapTraffic({ swaps: SWAPS, seed: SEED, runId: 'bench' });
  const tables = tablesFor(uniquePrefix());
  const helper = await openStore(server.kind, { tables, url: server.url, poolSize: 4 });
  try {
    await helper.store.migrate();
    await putWorkflows(helper.store, traffic.workflows);
    const before = { load: load(), deadlocks: await serverDeadlocks(helper, server.kind) };
    const run = await runLanes({
      lanes: WORKERS,
      config: { mode, concurrency: HAND_CONCURRENCY, store: { kind: server.kind, url: server.url, tables, poolSize: mode === 'hand-written' ? HAND_CONCURRENCY : 2 } },
      items: traffic.messages.map((m) => ({ body: m.body })),
      batchSize: prefetch,
      settle: settleVerdict,
      timeoutMs: 600_000,
    });
    const after = { load: load(), deadlocks: await serverDeadlocks(helper, server.kind) };
    const state = await endState(helper, tables);
    const problems = [];
    if (state.receipts !== traffic.validIds.size) problems.push(`${state.receipts} receipts for ${traffic.validIds.size} event ids`);
    return {
      figures: {
        messages: traffic.messages.length,
        deliveries: run.deliveries,
        seconds: Number(run.seconds.toFixed(2)),
        eventsPerSecond: Math.round(traffic.messages.length / run.seconds),
        p50Ms: round(percentile(run.latencies, 50)),
        p99Ms: round(percentile(run.latencies, 99)),
        // By the hook (idemflow) or as the hand-written worker runs its transaction again.
        deadlocks: (mode === 'hand-written' ? run.failedTransactions.deadlock : run.races.deadlock) ?? 0,
        raceReRuns: mode === 'hand-written' ? run.failedTransactions : run.races,
        // Every transaction that ended in a lost race, the last attempt's included (a batch's last attempt is no re-run).
        deadlockedTransactions: run.failedTransactions.deadlock ?? 0,
        failedTransactions: run.failedTransactions,
        serverDeadlocks: before.deadlocks === null ? null : after.deadlocks - before.deadlocks,
        verdicts: verdictCounts(run.items),
        load: [before.load, after.load],
        problems,
      },
      state,
    };
  } finally {
    await helper.drop();
    await helper.close();
  }
}

const round = (ms) => (ms === null ? null : Number(ms.toFixed(1)));

function sameEnd(a, b) {
  if (a.statuses.size !== b.statuses.size || a.receipts !== b.receipts || a.operations !== b.operations) {
    return `receipts ${a.receipts}/${b.receipts}, operations ${a.operations}/${b.operations}`;
  }
  let differ = 0;
  for (const [id, status] of a.statuses) if (b.statuses.get(id) !== status) differ += 1;
  return differ === 0 ? null : `${differ} workflows end elsewhere`;
}

function line(label, f) {
  const latency = f.p50Ms === null ? '' : `  p50 ${String(f.p50Ms).padStart(7)} ms  p99 ${String(f.p99Ms).padStart(7)} ms`;
  const races = Object.entries(f.raceReRuns).map(([k, v]) => `${k} ${v}`).join(', ') || 'none';
  return `    ${label.padEnd(28)} ${String(f.eventsPerSecond).padStart(6)} events/s${latency}  deadlocks ${f.deadlocks} (${f.deadlockedTransactions} transactions)`
    + `  re-runs: ${races}  (server deadlocks ${f.serverDeadlocks ?? 'n/a'}; load ${f.load.join(' → ')})${f.problems.length ? `  PROBLEMS: ${f.problems.join('; ')}` : ''}`;
}

const report = { swaps: SWAPS, workers: WORKERS, handConcurrency: HAND_CONCURRENCY, prefetches: PREFETCHES, cores: os.cpus().length, storeOnly: {} };

console.log(`production-shaped runs: ${WORKERS} worker processes, ${SWAPS} swaps (chaos-test traffic), prefetch / batch ${PREFETCHES.join(', ')}; load average ${load()} on ${os.cpus().length} cores`);
for (const server of SERVERS) {
  if (ONLY && !ONLY.has(server.id)) continue;
  if (!server.url) {
    console.log(`  store only, ${server.name}: skipped (${server.env} is not set)`);
    continue;
  }
  console.log(`  store only, ${server.name}: ${WORKERS} processes calling handle.batch, beside the hand-written worker (${HAND_CONCURRENCY} transactions at a time per process)`);
  const figures = {};
  for (const prefetch of PREFETCHES) {
    const idemflow = await storeOnly(server, 'handle-batch', prefetch);
    const hand = await storeOnly(server, 'hand-written', prefetch);
    const differs = sameEnd(idemflow.state, hand.state);
    if (differs) idemflow.figures.problems.push(`the hand-written worker ended elsewhere: ${differs}`);
    console.log(`   batch ${prefetch}:`);
    console.log(line('idemflow handle.batch', idemflow.figures));
    console.log(line('hand-written', hand.figures));
    const ratio = Number((idemflow.figures.eventsPerSecond / hand.figures.eventsPerSecond).toFixed(2));
    console.log(`    idemflow / hand-written: ${ratio}x`);
    figures[prefetch] = { idemflow: idemflow.figures, handWritten: hand.figures, ratioToHandWritten: ratio };
  }
  report.storeOnly[server.kind] = figures;
}

writeBenchJson('production', report);
