// processBatch against per-event store.process on every backend of
// workers/backends.mjs, measured side by side in one run: the same events
// (1/3 applied, 1/3 duplicate deliveries, 1/3 already-applied re-publications)
// through each, as ratios and absolute events per second, at batch sizes 16,
// 128 and 512. The figures also go to target/bench.json (key "batch").
import { BACKENDS, tablesFor, uniquePrefix, writeBenchJson } from '../workers/backends.mjs';

const SIZES = [16, 128, 512];
const WORKFLOWS = Number(process.env.IDEMFLOW_BENCH_WORKFLOWS ?? 1024);
const ROUNDS = Number(process.env.IDEMFLOW_BENCH_ROUNDS ?? 3);

/**
 * Each workflow's confirmation, its duplicate and its re-publication, shuffled in blocks so that duplicates meet within a batch.
 * The swaps are created in waiting with no deposit (deposit-swap v3: an empty deposits map), so the confirmation is the
 * watcher's first word on the deposit (observation 1): applied, it starts the exchange and records the deposit in
 * deposits and on the swap; its re-publication is already-applied.
 */
function eventsFor(ns) {
  const events = [];
  for (let i = 0; i < WORKFLOWS; i += 1) {
    const confirmed = {
      eventId: `${ns}:c${i}`,
      workflowId: `${ns}:w${i}`,
      type: 'DEPOSIT_CONFIRMED',
      depositRef: `tx-${i}`,
      amountUnits: String(1000 + i),
      sequence: 1,
    };
    events.push(confirmed, { ...confirmed }, { ...confirmed, eventId: `${ns}:r${i}` });
  }
  return events;
}

async function fill(store, ns) {
  for (let i = 0; i < WORKFLOWS; i += 1) await store.putWorkflow({ id: `${ns}:w${i}`, status: 'waiting', revision: 0 });
}

/** events/s of one way of processing `events` on fresh workflows. */
async function rate(store, run) {
  const ns = uniquePrefix();
  await fill(store, ns);
  const events = eventsFor(ns);
  const started = process.hrtime.bigint();
  const outcomes = await run(events);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const applied = outcomes.filter((o) => o === 'applied').length;
  if (applied !== WORKFLOWS) throw new Error(`expected ${WORKFLOWS} applied, got ${applied}`);
  return events.length / seconds;
}

const perEvent = (store) => async (events) => {
  const outcomes = [];
  for (const event of events) outcomes.push((await store.process(event)).outcome);
  return outcomes;
};

const batched = (store, size) => async (events) => {
  const outcomes = [];
  for (let i = 0; i < events.length; i += size) {
    for (const result of await store.processBatch(events.slice(i, i + size))) outcomes.push(result.outcome ?? result.error.code);
  }
  return outcomes;
};

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const fmt = (n) => Math.round(n).toLocaleString('en-US').padStart(8);

const report = {};
console.log(
  `processBatch vs per-event store.process, one connection, ${WORKFLOWS * 3} events per measurement, median of ${ROUNDS} alternating rounds`,
);
const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  if (backend.skip) {
    console.log(`${backend.name}: skipped (${backend.skip})`);
    continue;
  }
  if (backend.fake) {
    console.log(`${backend.name}: not measured (a fake driver)`);
    continue;
  }
  let env = null;
  let helper = null;
  let store;
  try {
    if (backend.durable) {
      env = await backend.setup();
      helper = await env.open(tablesFor(uniquePrefix()), { poolSize: 1 });
      store = helper.store;
      await store.migrate();
    } else {
      const { InMemoryStore } = await import('idemflow');
      store = new InMemoryStore();
    }
    const rounds = { single: [], ...Object.fromEntries(SIZES.map((n) => [n, []])) };
    for (let round = 0; round < ROUNDS; round += 1) {
      rounds.single.push(await rate(store, perEvent(store)));
      for (const size of SIZES) rounds[size].push(await rate(store, batched(store, size)));
    }
    const single = median(rounds.single);
    const line = [`${backend.name.padEnd(44)} per event ${fmt(single)} events/s`];
    report[backend.id] = { perEvent: Math.round(single) };
    for (const size of SIZES) {
      const r = median(rounds[size]);
      line.push(`batch ${size}: ${fmt(r)} events/s (${(r / single).toFixed(1)}x)`);
      report[backend.id][`batch${size}`] = { eventsPerSecond: Math.round(r), ratio: Number((r / single).toFixed(2)) };
    }
    console.log(line.join('   '));
  } catch (error) {
    console.log(`${backend.name}: failed (${String(error.message).split('\n')[0]})`);
  } finally {
    await helper?.drop?.();
    await helper?.close?.();
    await env?.close?.();
  }
}

writeBenchJson('batch', { workflows: WORKFLOWS, backends: report });
