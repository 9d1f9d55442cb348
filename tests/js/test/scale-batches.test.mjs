// Batches from different workers over the same workflows: 4 worker processes
// (workers/lane.mjs) run processBatch on batches of 128 taken from one
// shuffled queue of the chaos test's traffic (workers/swap-traffic.mjs:
// detections and confirmations, reversals, deadlines, duplicates and
// re-publications), so concurrent batches share workflows and event ids.
// No batch may deadlock (counted by hooks.onRaceRetry's reason and by every
// transaction that ended in one) and no event may end in an error; every
// result and the stored state must be those of processing the events one by
// one: the applied results, replayed one by one in the order of the
// revisions they produced, give the same results, and the rest come out as
// they did; receipts, workflows and operations equal the replay's, and each
// swap ends where its history in order leads. PostgreSQL and MariaDB run
// when their URLs are set; a SQLite file (its writers queue, so nothing can
// deadlock) always runs, as the control that the checks hold where they should.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InMemoryStore, processEvent } from 'idemflow';

import { BACKENDS } from '../workers/backends.mjs';
import { laneTables, runLanes } from '../workers/lanes.mjs';
import { swapTraffic } from '../workers/swap-traffic.mjs';

const SWAPS = Number(process.env.IDEMFLOW_SCALE_SWAPS ?? 600);
const LANES = 4;
const BATCH = 128;

/** The servers (when their URLs are set) and a SQLite file the processes share; `options` what each store opens with. */
const backends = BACKENDS.filter((b) => ['pg', 'mysql', 'sqlite'].includes(b.id)).map((b) => ({
  ...b,
  name: b.id === 'sqlite' ? `${b.name} (control)` : b.name,
  options: b.id === 'sqlite' ? { synchronous: 'NORMAL', busyTimeoutMs: 30_000 } : { poolSize: 2 },
}));

const ruleSet = 'deposit-swap';
/** A workflow as a comparable value: status, revision and recorded fields. */
const workflowValue = (w) =>
  w
    ? JSON.stringify(
        Object.keys(w)
          .sort()
          .map((key) => [key, w[key]]),
      )
    : null;

/**
 * Replays the run one by one, each workflow over an InMemoryStore of its own
 * holding it as it was created: its applied events in the order of the
 * revisions they produced must give the same results; an event that applied
 * nothing writes only its receipt, so it may have come between any two of
 * them, and one of those states must give its outcome; a duplicate answers
 * its original's fingerprint. Returns the problems found and, per workflow,
 * the replay's workflow and operations.
 */
async function replay(traffic, firsts, duplicates) {
  const problems = [];
  const byWorkflow = new Map(traffic.workflows.map((w) => [w.id, []]));
  for (const first of firsts.values()) byWorkflow.get(first.event.workflowId).push(first);
  const end = new Map();
  for (const workflow of traffic.workflows) {
    const store = new InMemoryStore([{ ...workflow }]);
    const states = [store.snapshot()];
    const decided = byWorkflow.get(workflow.id);
    for (const { event, result } of decided
      .filter((d) => d.result.outcome === 'applied')
      .sort((a, b) => a.result.revision - b.result.revision)) {
      const again = await processEvent(store, event, { ruleSet });
      const want = {
        outcome: result.outcome,
        status: result.status,
        revision: result.revision,
        operationIds: result.operationIds,
        fingerprint: result.fingerprint,
      };
      const got = {
        outcome: again.outcome,
        status: again.status,
        revision: again.revision,
        operationIds: again.operationIds,
        fingerprint: again.fingerprint,
      };
      if (JSON.stringify(got) !== JSON.stringify(want))
        problems.push(`${event.eventId}: the batch gave ${JSON.stringify(want)}, one by one ${JSON.stringify(got)}`);
      states.push(store.snapshot());
    }
    for (const { event, result } of decided.filter((d) => d.result.outcome !== 'applied')) {
      const seen = [];
      for (const state of states) {
        const again = await processEvent(InMemoryStore.fromSnapshot(state), event, { ruleSet });
        seen.push(again.outcome);
        if (again.outcome === result.outcome && again.fingerprint === result.fingerprint) break;
      }
      if (seen[seen.length - 1] !== result.outcome)
        problems.push(`${event.eventId}: the batch gave ${result.outcome}, one by one at any point ${seen.join(' / ')}`);
    }
    const snapshot = store.snapshot();
    end.set(workflow.id, { workflow: snapshot.workflows.get(workflow.id), operations: [...snapshot.outbox.values()] });
  }
  for (const { event, result } of duplicates) {
    if (result.fingerprint !== firsts.get(event.eventId)?.result.fingerprint)
      problems.push(`${event.eventId}: a duplicate answered another fingerprint`);
  }
  return { problems, end };
}

/** Each swap's history in order, one by one: where the swaps must end whatever the order (a reorder-safe rule set). */
async function inOrder(traffic) {
  const store = new InMemoryStore(traffic.workflows.map((w) => ({ ...w })));
  const published = new Set(traffic.messages.map((m) => m.eventId));
  for (const swap of traffic.swaps)
    for (const event of swap.history) if (published.has(event.eventId)) await processEvent(store, event, { ruleSet });
  return store.snapshot();
}

describe(`${LANES} processes running processBatch on batches of ${BATCH} over shared workflows`, () => {
  for (const backend of backends) {
    it(`${backend.name}: no deadlock, no error, results and state those of one by one`, {
      skip: backend.skip,
      timeout: 180_000,
    }, async (t) => {
      const traffic = swapTraffic({ swaps: SWAPS, seed: Date.now() % 100_000, eventsOnly: true });
      const { tables, helper, spec, close } = await laneTables(backend, backend.options, traffic.workflows);
      try {
        const run = await runLanes({
          lanes: LANES,
          config: { mode: 'process-batch', store: spec },
          items: traffic.messages.map((m) => ({ event: m.event })),
          batchSize: BATCH,
          timeoutMs: 150_000,
        });
        t.diagnostic(
          `${backend.name}: ${traffic.messages.length} events (${traffic.validIds.size} event ids) for ${traffic.workflows.length} swaps ` +
            `in ${run.batches} batches over ${run.seconds.toFixed(1)} s; race re-runs ${JSON.stringify(run.races)}; transactions lost to a race ${JSON.stringify(run.failedTransactions)}`,
        );

        assert.equal(run.races.deadlock ?? 0, 0, `${run.races.deadlock} batches ran again after a deadlock`);
        assert.equal(run.failedTransactions.deadlock ?? 0, 0, `${run.failedTransactions.deadlock} transactions ended in a deadlock`);
        const errors = run.items.map((item) => item.results[0]).filter((r) => r.code !== undefined);
        assert.deepEqual(errors.slice(0, 3), [], `${errors.length} events ended in an error`);

        // The first delivery of each event id decided it; every other one is a duplicate of it.
        const firsts = new Map();
        const duplicates = [];
        for (const item of run.items) {
          const [result] = item.results;
          if (result.outcome === 'duplicate-delivery') duplicates.push({ event: item.event, result });
          else if (firsts.has(item.event.eventId))
            assert.fail(`${item.event.eventId} was decided twice: ${firsts.get(item.event.eventId).result.outcome}, ${result.outcome}`);
          else firsts.set(item.event.eventId, { event: item.event, result });
        }
        assert.equal(firsts.size, traffic.validIds.size, 'every event id decided once');

        // The receipts hold what the deciding delivery answered.
        const receipts = await helper.query(`SELECT event_id, fingerprint, outcome FROM ${tables.inbox}`, []);
        assert.equal(receipts.length, traffic.validIds.size, 'one receipt per event id');
        const mismatched = receipts.filter((row) => {
          const first = firsts.get(row.event_id);
          return !first || first.result.fingerprint !== row.fingerprint || first.result.outcome !== row.outcome;
        });
        assert.deepEqual(mismatched.slice(0, 3), [], `${mismatched.length} receipts differ from their results`);
        const outcomes = {};
        for (const { result } of [...firsts.values(), ...duplicates]) outcomes[result.outcome] = (outcomes[result.outcome] ?? 0) + 1;
        t.diagnostic(`${backend.name}: outcomes ${JSON.stringify(outcomes)}`);

        const { problems, end: oneByOne } = await replay(traffic, firsts, duplicates);
        assert.deepEqual(problems.slice(0, 3), [], `${problems.length} results differ from one-by-one processing`);

        // Workflows and operations as the replay left them, and where each swap's history in order leads.
        const ordered = await inOrder(traffic);
        const differing = [];
        for (const { id } of traffic.workflows) {
          const stored = workflowValue(await helper.store.getWorkflow(id));
          const replayed = oneByOne.get(id).workflow;
          if (stored !== workflowValue(replayed)) differing.push(`${id}: ${stored} stored, ${workflowValue(replayed)} one by one`);
          const { revision, ...end } = replayed;
          const { revision: r, ...want } = ordered.workflows.get(id);
          if (workflowValue(end) !== workflowValue(want))
            differing.push(`${id}: ${workflowValue(end)}, its history in order ${workflowValue(want)}`);
        }
        assert.deepEqual(differing.slice(0, 3), [], `${differing.length} workflows differ`);
        const operations = (await helper.query(`SELECT id, type, workflow_id, event_id FROM ${tables.outbox}`, []))
          .map((row) => `${row.id} ${row.type} ${row.workflow_id} ${row.event_id}`)
          .sort();
        const replayedOperations = [...oneByOne.values()].flatMap((w) => w.operations);
        const expected = replayedOperations.map((op) => `${op.id} ${op.type} ${op.workflowId} ${op.eventId}`).sort();
        assert.deepEqual(operations, expected, 'the operations of one-by-one processing');
        const exchanges = new Map();
        for (const op of replayedOperations)
          if (op.type === 'START_EXCHANGE') exchanges.set(op.workflowId, (exchanges.get(op.workflowId) ?? 0) + 1);
        const inOrderExchanges = [...ordered.outbox.values()].filter((op) => op.type === 'START_EXCHANGE').length;
        assert.equal(exchanges.size, inOrderExchanges, 'a START_EXCHANGE for each swap whose history exchanges');
        assert.ok(
          [...exchanges.values()].every((n) => n === 1),
          'one START_EXCHANGE per swap',
        );
      } finally {
        await close();
      }
    });
  }
});
