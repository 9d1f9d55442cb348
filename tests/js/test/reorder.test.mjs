// Reorder safety as a property of the installed package (issue 8): random
// histories of one swap whose workflow starts in `waiting`, delivered in
// random orders with duplicates, re-publications and retry-redelivery, end
// where the same history delivered in order ends, through InMemoryStore and
// through SQLite (better-sqlite3); the same generator finds the overtakings
// that deposit-swap v1 gets wrong. The model, the reference delivery for
// declared races and why it always exists: ../workers/reorder-property.mjs.
//
// IDEMFLOW_REORDER_RUNS sets the cases per store (default 10,000) for a
// longer campaign; IDEMFLOW_REORDER_SEED replays a failure's seed.
import test from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { InMemoryStore } from 'idemflow';
import {
  ANSWERS, FOLLOWS, OPERATION_ID, RACES, V1, V2, describeTrace, overtakings, reorderProperty, runCase,
} from '../workers/reorder-property.mjs';

const RUNS = Number(process.env.IDEMFLOW_REORDER_RUNS ?? 10_000);
const SEED = process.env.IDEMFLOW_REORDER_SEED === undefined ? undefined : Number(process.env.IDEMFLOW_REORDER_SEED);

function inWorker(kind) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('../workers/reorder-property.mjs', import.meta.url), {
      workerData: { task: 'reorder-property', kind, runs: RUNS, seed: SEED },
    });
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the ${kind} worker exited with ${code} before it answered`)));
  });
}

test('the order section is the one this property models', () => {
  assert.equal(V2.version, 2);
  assert.equal(V1.version, 1);
  assert.deepEqual(ANSWERS, { EXCHANGE_COMPLETED: 'START_EXCHANGE', PAYOUT_CONFIRMED: 'SEND_PAYOUT' });
  assert.deepEqual(FOLLOWS, { DEPOSIT_CONFIRMED: ['DEPOSIT_DETECTED'], DEPOSIT_REVERSED: ['DEPOSIT_DETECTED'] });
  assert.equal(RACES.length, 6);
  assert.deepEqual(Object.keys(OPERATION_ID).sort(), ['OPEN_REVIEW', 'SEND_PAYOUT', 'START_EXCHANGE']);
});

test(`deposit-swap v2: any delivery order ends as in order, ${RUNS} cases per store`, { concurrency: 2 }, async (t) => {
  const stores = { memory: 'InMemoryStore', sqlite: 'SQLite (better-sqlite3)' };
  const cpu = process.cpuUsage();
  await Promise.all(Object.entries(stores).map(([kind, name]) => t.test(`through ${name}`, async (t) => {
    const { error, coverage, seconds } = await inWorker(kind);
    t.diagnostic(JSON.stringify({ seconds, ...coverage }));
    if (error !== null) assert.fail(`the property failed through ${name}:\n${error}`);
    // A generator that drifted into trivia would pass without testing anything.
    assert.equal(coverage.cases, RUNS);
    for (const key of ['overtaken', 'retried', 'duplicates', 'racesDecidedByDeadline']) {
      assert.ok(coverage[key] >= coverage.cases / 50, `${key}: ${coverage[key]} of ${coverage.cases} cases`);
    }
    for (const status of ['deposit', 'exchange', 'sending', 'success', 'overdue', 'reversed', 'review']) {
      assert.ok(coverage.ends[status] > 0, `no case ended in ${status}: ${JSON.stringify(coverage.ends)}`);
    }
  })));
  const used = process.cpuUsage(cpu);
  t.diagnostic(`CPU seconds, both stores: ${(used.user + used.system) / 1e6}`);
});

test('deposit-swap v1: the same property finds a confirmation or a reversal that overtook its detection', async (t) => {
  // v1 has other reorder defects too (a re-published detection or deadline
  // after a reversal sent it back to waiting), and which one shrinking reaches
  // first depends on the seed: a fixed seed keeps this test about the
  // overtakings of issue 8.
  const store = new InMemoryStore();
  const result = await fc.check(reorderProperty(store, V1), { numRuns: 2_000, seed: 1 });
  assert.equal(result.failed, true, 'v1 passed the reorder property');
  const [history, plan] = result.counterexample;
  const { shuffled, inOrder, problems } = await runCase(store, V1, history, plan);
  t.diagnostic(`v1 counterexample after ${result.numRuns} runs and ${result.numShrinks} shrinks: ${problems.join('; ')}`);
  t.diagnostic(`shuffled: ${describeTrace(shuffled.run)}`);
  t.diagnostic(`in order: ${describeTrace(inOrder.run)}`);
  assert.notDeepEqual(problems, []);
  assert.notDeepEqual(overtakings(shuffled.run), [], 'the counterexample has a confirmation or a reversal before its detection');
});

test('deposit-swap v2: the reference needs the declared races: without the deadline race the property fails on it', async (t) => {
  // The deadline against the deposit is a race whose order is the meaning; an
  // in-order delivery that ignores how the shuffled one decided it must differ.
  const races = RACES.filter((pair) => !pair.includes('DEADLINE_PASSED'));
  const store = new InMemoryStore();
  const result = await fc.check(reorderProperty(store, V2, { races }), { numRuns: 2_000, seed: SEED });
  assert.equal(result.failed, true, 'the property passed without the deadline race');
  const { shuffled, inOrder, problems } = await runCase(store, V2, ...result.counterexample, races);
  t.diagnostic(`${problems.join('; ')}; shuffled: ${describeTrace(shuffled.run)}; in order: ${describeTrace(inOrder.run)}`);
  assert.notDeepEqual(problems, []);
  assert.ok(shuffled.run.trace.some((a) => a.type === 'DEADLINE_PASSED'), 'the counterexample has a deadline');
});
