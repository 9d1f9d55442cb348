// One measured run through a real broker for bench/production.mjs: worker
// processes consuming the examples' queues (RabbitMQ) or stream (NATS
// JetStream) with one prefetch, while 4 publishers publish the traffic; the
// clock runs from the first publish to the last final verdict. Contenders:
//   example       the example worker itself (js/examples/<broker>-worker),
//                 instrumented from outside (workers/instrumented-idemflow.mjs)
//   hand-written  workers/broker-reference.mjs REFERENCE=hand-written
//   floor         workers/broker-reference.mjs REFERENCE=floor: the broker alone
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { openStore, PG_URL, tablesFor, uniquePrefix } from './backends.mjs';
import { random } from './broker.mjs';
import { brokerHarness, supervise } from './chaos.mjs';
import { endOf, putWorkflows } from './swap-traffic.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const count = (into, key, n = 1) => {
  into[key] = (into[key] ?? 0) + n;
};

/** Publishes `bodies` from 4 publishers (a share each, in order, 64 unconfirmed at a time). */
async function publishAll(broker, bodies, seed) {
  const rand = random(seed);
  const shares = Array.from({ length: 4 }, () => []);
  for (const body of bodies) shares[Math.floor(rand() * shares.length)].push(body);
  await Promise.all(
    shares.map(async (share) => {
      const publisher = await broker.publisher();
      for (let i = 0; i < share.length; i += 64) await Promise.all(share.slice(i, i + 64).map((body) => publisher.publish(body)));
      await publisher.close();
    }),
  );
}

/**
 * Runs `traffic` (workers/swap-traffic.mjs) through `workers` processes of
 * `contender` on `brokerName` at `prefetch`; resolves the run's figures:
 * seconds, events/s, the latencies (per batch for the example, per
 * transaction for the hand-written worker), race re-runs and transactions
 * lost to a race by reason, verdicts, and the problems found.
 */
export async function runOnBroker({
  brokerName,
  url,
  contender,
  prefetch,
  traffic,
  warmUp = null,
  workers = 3,
  timeoutMs = 300_000,
  seed = 1,
  repeat = 1,
  handConcurrency = 4,
}) {
  const runId = uniquePrefix();
  const tables = tablesFor(runId);
  const usesStore = contender !== 'floor';
  const db = usesStore ? await openStore('pg', { tables, url: PG_URL, poolSize: 4 }) : null;
  const broker = await brokerHarness(brokerName, url, `idemflow-${runId}`, { ackWaitMs: 60_000 });
  const figures = { latencies: [], races: {}, failedTransactions: {}, verdicts: {}, problems: [] };
  const children = [];
  try {
    if (db) {
      await db.store.migrate();
      await putWorkflows(db.store, [...(warmUp?.workflows ?? []), ...traffic.workflows]);
    }
    const storeEnv = { IDEMFLOW_PG_URL: PG_URL, IDEMFLOW_TABLE_PREFIX: runId };
    const [script, env, nodeArgs] =
      contender === 'example'
        ? [
            broker.worker,
            { ...broker.env, ...storeEnv, PREFETCH: String(prefetch), RETRY_BASE_DELAY_MS: '50', RETRY_MAX_DELAY_MS: '500' },
            ['--import', path.join(HERE, 'instrumented-idemflow.mjs')],
          ]
        : [
            path.join(HERE, 'broker-reference.mjs'),
            {
              ...broker.env,
              ...storeEnv,
              BROKER: brokerName,
              REFERENCE: contender,
              PREFETCH: String(prefetch),
              HAND_POOL: String(handConcurrency),
            },
            [],
          ];

    let started = 0;
    let finals = 0;
    const floor = new Map(); // pid -> acked
    let lastAckAt = 0;
    const fatal = [];
    const onLine = (line) => {
      if (line.event === 'started') started += 1;
      else if (line.role === 'floor') {
        floor.set(line.pid, line.acked);
        lastAckAt = Math.max(lastAckAt, line.lastAckAt);
      } else if (line.role === 'bench') {
        if (line.event === 'batch') figures.latencies.push(line.ms);
        else if (line.event === 'race') count(figures.races, line.reason);
        else if (line.event === 'failed-transaction') count(figures.failedTransactions, line.reason);
      } else if (line.role === 'worker' && line.action === 'stop') {
        fatal.push(line);
      } else if (line.role === 'worker' && line.action) {
        if (line.action !== 'retry') finals += 1;
        count(figures.verdicts, line.action === 'ack' ? `ack ${line.outcome}` : `${line.action}${line.code ? ` ${line.code}` : ''}`);
        if (line.ms !== undefined) figures.latencies.push(line.ms); // the hand-written worker's transaction
        for (const reason of line.races ?? []) {
          count(figures.races, reason);
          count(figures.failedTransactions, reason);
        }
      }
    };
    for (let i = 0; i < workers; i += 1) children.push(supervise(script, env, onLine, nodeArgs));
    const ready = Date.now();
    while (started < workers && fatal.length === 0 && Date.now() - ready < 60_000) await sleep(20);
    if (started < workers)
      throw new Error(
        `${started} of ${workers} ${contender} workers started: ${children
          .map((c) => c.stderrTail())
          .join(' | ')
          .slice(0, 500)}`,
      );

    const settledSoFar = () => (contender === 'floor' ? [...floor.values()].reduce((a, b) => a + b, 0) : finals);
    if (warmUp) {
      // Untimed and uncounted: the workers' first batches (connections, compilation) are not what is measured.
      const warmed = Date.now();
      await publishAll(
        broker,
        warmUp.messages.map((m) => m.body),
        seed + 1,
      );
      while (settledSoFar() < warmUp.messages.length && fatal.length === 0 && Date.now() - warmed < timeoutMs) await sleep(5);
      Object.assign(figures, { latencies: [], races: {}, failedTransactions: {}, verdicts: {} });
    }
    const before = settledSoFar();
    const done = () => settledSoFar() - before;
    // The broker alone is quick: `repeat` times the traffic gives its rate a run long enough to measure.
    const bodies = Array.from({ length: repeat }, () => traffic.messages.map((m) => m.body)).flat();
    const total = bodies.length;
    const t0 = Date.now();
    await publishAll(broker, bodies, seed);
    figures.publishSeconds = (Date.now() - t0) / 1000;
    while (done() < total && fatal.length === 0 && Date.now() - t0 < timeoutMs) await sleep(5);
    const t1 = contender === 'floor' ? lastAckAt : Date.now();
    if (fatal.length > 0) figures.problems.push(`a worker stopped: ${JSON.stringify(fatal[0])}`);
    if (done() < total) figures.problems.push(`${done()} of ${total} messages settled after ${timeoutMs} ms`);
    if (done() > total) figures.problems.push(`${done()} final verdicts for ${total} messages (redelivered after a timeout?)`);
    figures.messages = total;
    figures.seconds = (t1 - t0) / 1000;
    figures.eventsPerSecond = Math.round(total / figures.seconds);

    // A quorum queue settles acks asynchronously: a channel closed right after its last acks can
    // hand those messages back (seen here: 30-40 of them in about 1 run in 4 at prefetch 512, before
    // the examples waited STOP_GRACE_MS on SIGTERM). The clock has stopped; let them land.
    await sleep(500);
    const pendingBeforeStop = await broker.pending();
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(children.map((child) => (child.exitCode === null && child.signalCode === null ? once(child, 'exit') : null)));
    const stopped = children.splice(0);
    // The broker's counts can lag its acknowledgements by a moment.
    let pending = await broker.pending();
    for (const waitUntil = Date.now() + 3000; pending !== 0 && Date.now() < waitUntil; pending = await broker.pending()) await sleep(100);
    if (pending !== 0)
      figures.problems.push(`${pending} messages left in the broker (${pendingBeforeStop} before the workers were stopped)`);
    const exits = stopped.map((child) => child.exitCode ?? child.signalCode).filter((code) => code !== 0);
    if (exits.length > 0) figures.problems.push(`workers exited with ${exits.join(', ')} on SIGTERM`);
    if (db) {
      figures.end = await endOf(db, tables);
      const eventIds = traffic.validIds.size + (warmUp?.validIds.size ?? 0);
      if (figures.end.receipts !== eventIds) figures.problems.push(`${figures.end.receipts} receipts for ${eventIds} event ids`);
    }
    return figures;
  } finally {
    for (const child of children) child.kill('SIGKILL');
    await broker.teardown();
    if (db) {
      await db.drop();
      await db.close();
    }
  }
}
