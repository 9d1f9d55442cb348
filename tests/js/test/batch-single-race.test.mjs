// A batch and a single delivery of the same new event, raced many times on
// PostgreSQL and MariaDB, each with an onApplied that writes the same host row
// (its event id unique): the batch writes the workflow the event creates
// before that event's callback, as processEvent does, so the two take their
// locks in one order (the workflow, then the host's row) and one waits for
// the other instead of deadlocking. Every race ends with the row once, the
// receipt once, one delivery applied and the other a duplicate (a lost race
// run again is fine); no delivery fails with HANDLER_FAILED or a deadlock.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });
const RACES = 40;

for (const backend of BACKENDS) {
  if (backend.id !== 'pg' && backend.id !== 'mysql') continue;
  describe(`a batch and a single delivery of one new event on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    let shipments;
    before(async () => {
      shipments = shipmentsOf(backend.id, suite.helper, `${uniquePrefix()}_race`);
      await shipments.create();
    });

    it(`${RACES} races: never a deadlock or HANDLER_FAILED; the row and the receipt once, one applied and one duplicate`, async () => {
      const ns = uniquePrefix();
      // The callback holds its transaction a moment after its write, so the other delivery runs into its locks.
      const onApplied = async (tx, decision) => {
        const id = await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
        await sleep(3);
        return { shipmentId: Number(id) };
      };
      let retried = 0;
      const hooks = {
        onRaceRetry: () => {
          retried += 1;
        },
      };
      const outcomes = { applied: 0, 'duplicate-delivery': 0 };
      for (let i = 0; i < RACES; i += 1) {
        const raced = request(`${ns}:e${i}`, `${ns}:o${i}`);
        const before = request(`${ns}:first${i}`, `${ns}:first${i}`);
        const [batch, single] = await Promise.all([
          outcomeOf(processBatch(suite.store, [before, raced], { ruleSet, onApplied, hooks, raceRetries: 8 })),
          outcomeOf(processEvent(suite.store, raced, { ruleSet, onApplied, hooks, raceRetries: 8 })),
        ]);
        assert.equal(batch.error, undefined, String(batch.error));
        assert.equal(single.error, undefined, `race ${i}: ${single.error?.code} ${single.error?.message}`);
        const [first, inBatch] = batch;
        assert.equal(first.outcome, 'applied', `race ${i}: ${first.error?.code} ${first.error?.message}`);
        assert.notEqual(inBatch.outcome, undefined, `race ${i}: the batch's copy failed: ${inBatch.error?.code} ${inBatch.error?.message}`);
        const answers = [inBatch.outcome, single.outcome].sort();
        assert.deepEqual(answers, ['applied', 'duplicate-delivery'], `race ${i}`);
        for (const answer of answers) outcomes[answer] += 1;
        const original = inBatch.outcome === 'applied' ? inBatch : single;
        const copy = inBatch.outcome === 'applied' ? single : inBatch;
        assert.deepEqual(copy.original?.output, original.output, `race ${i}: the duplicate answers the same shipment`);
      }
      assert.equal(await shipments.count(), 2 * RACES, 'each raced event wrote its row once, and each batch its first event');
      assert.deepEqual(outcomes, { applied: RACES, 'duplicate-delivery': RACES });
      // Not asserted (it depends on timing): how often a lost race ran again.
      console.log(`# ${backend.id}: ${retried} lost races run again in ${RACES} races`);
    });
  });
}

// The workflow an event creates, written before its callback: undone with the callback's failure
// (a later event of the batch for the same workflow creates it then), and the one write of it when
// the callback succeeds (a later event decides on it: already-applied).
for (const backend of BACKENDS) {
  if (!['sqlite', 'pglite', 'pg', 'mysql'].includes(backend.id)) continue;
  describe(`a batch's new workflows written before their callbacks on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    it("a failed callback undoes its workflow; a later event of the batch creates it; one that succeeds is the workflow's one write", async () => {
      const ns = uniquePrefix();
      const failing = `${ns}:e1`;
      const results = await processBatch(
        suite.store,
        [request(failing, `${ns}:o1`), request(`${ns}:e2`, `${ns}:o1`), request(`${ns}:e3`, `${ns}:o2`), request(`${ns}:e4`, `${ns}:o2`)],
        {
          ruleSet,
          onApplied: (_tx, decision) => {
            if (decision.event.eventId === failing) throw new Error('this callback fails');
            return { by: decision.event.eventId };
          },
        },
      );
      assert.deepEqual(
        results.map((r) => r.outcome ?? r.error?.code),
        ['HANDLER_FAILED', 'applied', 'applied', 'already-applied'],
      );
      assert.deepEqual(results[1].output, { by: `${ns}:e2` });
      for (const id of [`${ns}:o1`, `${ns}:o2`]) {
        const workflow = await suite.store.getWorkflow(id);
        assert.deepEqual([workflow?.status, workflow?.revision], ['shipping', results[1].revision], id);
      }
      assert.equal(await suite.store.getReceipt(failing), null);
    });
  });
}

// Two batches whose callbacks lock two host rows in opposite orders, made to deadlock on their
// first run (each waits, holding its first row, until the other holds its own): the database
// picks a victim, and the victim's batch runs again, as processEvent's cycle does on a lost race
// of the callback's own statement, instead of failing the victim's event. Every event applies.
for (const backend of BACKENDS) {
  if (backend.id !== 'pg' && backend.id !== 'mysql') continue;
  describe(`a deadlock between two batches' callbacks on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    it("the victim's batch runs again and every event applies", async () => {
      const ns = uniquePrefix();
      const table = `${ns}_locks`;
      const q = backend.id === 'mysql' ? `\`${table}\`` : `"${table}"`;
      const mark = backend.id === 'mysql' ? '?' : '$1';
      await suite.helper.query(
        `CREATE TABLE ${q} (id VARCHAR(20) PRIMARY KEY, n INT NOT NULL)${backend.id === 'mysql' ? ' ENGINE=InnoDB' : ''}`,
        [],
      );
      await suite.helper.query(`INSERT INTO ${q} (id, n) VALUES ('r1', 0), ('r2', 0)`, []);
      const latch = () => {
        let open;
        const opened = new Promise((resolve) => {
          open = resolve;
        });
        return { open, opened };
      };
      const aHolds = latch();
      const bHolds = latch();
      // Event → [the row it locks, the latch it opens after, the latch it waits for] (first run only: then open).
      const plan = {
        [`${ns}:a1`]: ['r1', aHolds, bHolds],
        [`${ns}:a2`]: ['r2'],
        [`${ns}:b1`]: ['r2', bHolds, aHolds],
        [`${ns}:b2`]: ['r1'],
      };
      const attempts = new Map();
      const onApplied = async (tx, decision) => {
        const id = decision.event.eventId;
        attempts.set(id, (attempts.get(id) ?? 0) + 1);
        const [row, mine, theirs] = plan[id];
        await tx.client.query(`UPDATE ${q} SET n = n + 1 WHERE id = ${mark}`, [row]);
        mine?.open();
        await theirs?.opened;
        return { row };
      };
      const batchOf = (a, b) => [request(a, a), request(b, b)];
      const [first, second] = await Promise.all([
        processBatch(suite.store, batchOf(`${ns}:a1`, `${ns}:a2`), { ruleSet, onApplied, raceRetries: 4 }),
        processBatch(suite.store, batchOf(`${ns}:b1`, `${ns}:b2`), { ruleSet, onApplied, raceRetries: 4 }),
      ]);
      assert.deepEqual(
        [...first, ...second].map((r) => r.outcome ?? `${r.error?.code} ${r.error?.message}`),
        ['applied', 'applied', 'applied', 'applied'],
      );
      assert.ok(
        [...attempts.values()].some((n) => n > 1),
        `a callback ran again after the deadlock (${JSON.stringify([...attempts])})`,
      );
      const rows = await suite.helper.query(`SELECT id, n FROM ${q} ORDER BY id`, []);
      assert.deepEqual(
        rows.map((r) => [r.id, Number(r.n)]),
        [
          ['r1', 2],
          ['r2', 2],
        ],
        "each row counts each event once: the victim's first run rolled back",
      );
    });
  });
}
