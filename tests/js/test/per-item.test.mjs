// One odd item never fails a whole call (issue 37), on every store: a
// revoked Proxy among processBatch's events is that event's INVALID_EVENT;
// a callback's bad output in handle.batch parks that message alone after
// the others committed; tx.client.release() inside a callback is a coded
// refusal that leaks no pooled connection; a database error of the host's
// own statement in onApplied is classified as the store's own
// (STORE_UNAVAILABLE with its reason, a lost race run again), a plain
// Error stays HANDLER_FAILED.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createDeliveryHandler, IdemflowError, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });

function revokedProxy() {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`per-item answers on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    const table = () => `${uniquePrefix()}_shipments`;

    it("processBatch answers a revoked Proxy among its events with that event's INVALID_EVENT, as processEvent does; the others commit", async () => {
      const ns = uniquePrefix();
      const alone = await outcomeOf(processEvent(suite.store, revokedProxy(), { ruleSet }));
      assert.ok(alone.error instanceof IdemflowError);
      assert.equal(alone.error.code, 'INVALID_EVENT');
      const events = [request(`${ns}:a`, `${ns}:oa`), revokedProxy(), request(`${ns}:b`, `${ns}:ob`)];
      for (const results of [await processBatch(suite.store, events, { ruleSet }), await suite.store.processBatch(events, { ruleSet })]) {
        assert.equal(results.length, 3);
        assert.ok(results[1].error instanceof IdemflowError, String(results[1].error));
        assert.equal(results[1].error.code, 'INVALID_EVENT');
        assert.equal(results[1].error.disposition, 'reject');
      }
      const [first, , second] = await processBatch(suite.store, events, { ruleSet });
      assert.deepEqual([first.outcome, second.outcome], ['duplicate-delivery', 'duplicate-delivery'], 'the first batch committed them');
    });

    it('handle.batch answers a callback that returns a BigInt for that message alone (parked, nothing of it kept); the others ack and commit', async () => {
      const shipments = shipmentsOf(backend.id, suite.helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      const bad = `${ns}:bad`;
      const onApplied = async (tx, decision) => {
        const id = await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
        return decision.event.eventId === bad ? 10n : { shipmentId: id };
      };
      const handle = createDeliveryHandler(suite.store, { ruleSet, onApplied });
      const verdicts = await handle.batch([request(`${ns}:a`, `${ns}:oa`), request(bad, `${ns}:obad`), request(`${ns}:b`, `${ns}:ob`)]);
      assert.deepEqual(
        verdicts.map((v) => v.action),
        ['ack', 'park', 'ack'],
      );
      assert.ok(verdicts[1].error instanceof IdemflowError);
      assert.equal(verdicts[1].error.code, 'INVALID_ARGUMENT');
      assert.equal(verdicts[1].error.details.field, 'output');
      assert.equal(await suite.store.getReceipt(bad), null, 'no receipt for the bad one');
      assert.equal(await suite.store.getWorkflow(`${ns}:obad`), null, 'no workflow');
      assert.equal(await suite.store.getOperation(`create-shipment:${ns}:obad`), null, 'no outbox row');
      assert.equal(await shipments.count(), 2, "the others' host rows only");
      assert.equal((await suite.store.getReceipt(`${ns}:a`)).result.output.shipmentId !== undefined, true);
      // Alone (nothing else committed), the worker is wrong as handle says: a fatal throw, as for one message.
      const only = await outcomeOf(handle.batch([request(bad, `${ns}:obad`)]));
      assert.equal(only.error?.code, 'INVALID_ARGUMENT');
      assert.equal(only.error.disposition, 'fatal');
    });
  });
}
