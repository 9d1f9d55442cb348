// Store-only runs: `lanes` worker processes (workers/lane.mjs), each with its
// own connections, take batches from one shared queue in this process, as
// consumers of one broker queue would, but with no broker in between. A
// batch goes to whichever lane asks first, so batches of different lanes
// touch the same workflows. The clock starts once every lane is ready.
import { fork } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { tablesFor, uniquePrefix } from './backends.mjs';
import { putWorkflows } from './swap-traffic.mjs';

const LANE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'lane.mjs');

/**
 * Fresh, migrated tables on `backend` (one of workers/backends.mjs BACKENDS)
 * holding `workflows`: this process's helper on them, the spec a lane opens
 * them with (`options` added), and close(), which drops them.
 */
export async function laneTables(backend, options, workflows = []) {
  const tables = tablesFor(uniquePrefix());
  const env = await backend.setup();
  const helper = await env.open(tables, options);
  const close = async () => {
    await helper.drop();
    await helper.close();
    await env.close();
  };
  try {
    await helper.store.migrate();
    await putWorkflows(helper.store, workflows);
  } catch (error) {
    await close();
    throw error;
  }
  return { tables, helper, spec: { ...env.spec(tables), ...options }, close };
}

const add = (into, counts) => {
  for (const [reason, n] of Object.entries(counts ?? {})) into[reason] = (into[reason] ?? 0) + n;
};

/**
 * Runs `items` (`{ body }` or `{ event }`, each delivered with `attempt`)
 * through `lanes` lanes in batches of `batchSize`. `settle(item, result)`
 * says what a result means: 'final', or 'again' (the item goes back to the
 * queue `retryDelayMs` later, attempt + 1, as a broker redelivers it).
 * Resolves the run's figures: seconds, deliveries, batch latencies (ms),
 * lost races heard by the hook (`races`) and transactions that ended in one
 * (`failedTransactions`), by reason, and each item's results in delivery
 * order (`item.results`). `warmUp` items go through first, untimed and
 * uncounted: the clock starts once they are all settled.
 */
export function runLanes({
  lanes,
  config,
  items,
  warmUp = [],
  batchSize,
  settle = () => 'final',
  retryDelayMs = 20,
  timeoutMs = 120_000,
  onBatch = null,
}) {
  const prepare = (list) => list.map((item) => ({ ...item, attempt: item.attempt ?? 1, results: [] }));
  const main = prepare(items);
  const queue = prepare(warmUp);
  const fresh = () => ({
    lanes,
    batchSize,
    items: items.length,
    deliveries: 0,
    batches: 0,
    latencies: [],
    races: {},
    failedTransactions: {},
    seconds: null,
  });
  let figures = fresh();
  let warming = queue.length > 0;
  const children = [];
  const idle = []; // lanes that asked while the queue was empty
  const outstanding = new Map(); // batch id -> items
  let retrying = 0;
  let nextId = 0;
  let ready = 0;
  let started = null;
  let allReady = false;
  let finished = false;
  const early = []; // lanes that asked before every lane was ready
  const settled = []; // items with a final result

  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () =>
        finish(
          new Error(
            `lanes did not finish in ${timeoutMs} ms: ${queue.length} queued, ` +
              `${outstanding.size} batches out, ${figures.deliveries} deliveries`,
          ),
        ),
      timeoutMs,
    );

    function finish(error) {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      if (started !== null) figures.seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const exits = children.map(
        (child) =>
          new Promise((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.once('exit', done);
            child.send({ type: 'stop' });
            setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
          }),
      );
      Promise.all(exits).then(() => (error ? reject(error) : resolve({ ...figures, items: settled })));
    }

    /** All settled: after the warm-up, the clock starts on the items; after the items, the run is over. */
    function phaseDone() {
      if (!warming) return finish();
      warming = false;
      figures = fresh();
      settled.length = 0;
      started = process.hrtime.bigint();
      queue.push(...main);
      for (const lane of idle.splice(0)) serve(lane);
    }

    function serve(child) {
      if (queue.length === 0) {
        idle.push(child);
        if (outstanding.size === 0 && retrying === 0) phaseDone();
        return;
      }
      const batch = queue.splice(0, batchSize);
      const id = nextId++;
      outstanding.set(id, batch);
      figures.deliveries += batch.length;
      child.send({
        type: 'batch',
        id,
        items: batch.map(({ body, event, attempt }) => (body !== undefined ? { body, attempt } : { event, attempt })),
      });
    }

    function again(item) {
      retrying += 1;
      setTimeout(() => {
        retrying -= 1;
        queue.push(item);
        while (idle.length > 0 && queue.length > 0) serve(idle.shift());
      }, retryDelayMs);
    }

    function onDone(_child, message) {
      const batch = outstanding.get(message.id);
      outstanding.delete(message.id);
      add(figures.races, message.races);
      add(figures.failedTransactions, message.failedTransactions);
      if (message.type === 'failed') return finish(new Error(`a lane failed: ${message.error}`));
      figures.batches += 1;
      figures.latencies.push(...message.latencies);
      onBatch?.(batch, message.results);
      for (const [i, item] of batch.entries()) {
        const result = message.results[i];
        item.results.push(result);
        if (settle(item, result) === 'again') {
          item.attempt += 1;
          again(item);
        } else {
          settled.push(item);
        }
      }
      if (queue.length === 0 && outstanding.size === 0 && retrying === 0) phaseDone();
    }

    for (let i = 0; i < lanes; i += 1) {
      const child = fork(LANE, [], {
        env: { ...process.env, IDEMFLOW_LANE_CONFIG: JSON.stringify(config) },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        serialization: 'advanced',
      });
      children.push(child);
      child.on('message', (message) => {
        if (message.type === 'ready') {
          ready += 1;
          if (ready === lanes) {
            if (!warming) {
              started = process.hrtime.bigint();
              queue.push(...main);
            }
            allReady = true;
            for (const lane of early.splice(0)) serve(lane);
          }
        } else if (message.type === 'next') {
          if (!allReady) early.push(child);
          else serve(child);
        } else {
          onDone(child, message);
        }
      });
      child.on('exit', (code, signal) => {
        if (!finished) finish(new Error(`a lane exited (${signal ?? code})`));
      });
    }
  });
}

/** The p-th percentile (0..100) of `values`, or null. */
export function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
