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
