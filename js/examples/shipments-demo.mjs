// Your own writes in idemflow's transaction: a handler that ships an order
// writes its `shipments` row in the same SQLite transaction as idemflow's
// receipt, workflow and outbox rows (onApplied, through tx.client). Three
// checks, each asserted:
//   1. a duplicate delivery: two calls, one shipment row, the same shipment id;
//   2. a failure inside the handler: nothing of the delivery is kept (no
//      receipt, no order, no shipment), and the redelivery succeeds;
//   3. an event id reused for another order: refused, nothing written.
//
// Run with `make demo` (better-sqlite3, an in-memory database).
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { IdemflowError, RuleSet } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';

const db = new Database(':memory:');
const store = new SqliteStore(db);
await store.migrate();
// The host's own table, beside idemflow's three.
db.exec('CREATE TABLE shipments (id INTEGER PRIMARY KEY, event_id TEXT UNIQUE NOT NULL, order_id TEXT NOT NULL)');
const shipmentRows = () => db.prepare('SELECT COUNT(*) AS n FROM shipments').get().n;
const orderShipment = RuleSet.builtin('order-shipment');

/**
 * One delivery of "ship this order": idemflow decides (a new request, a
 * duplicate, the same order again under a new id) and the host's row is
 * written only when the decision is applied, inside the same transaction.
 * `failBeforeInsert` plays a crash of the handler's own work.
 */
async function handleShipmentRequest(message, { failBeforeInsert = false } = {}) {
  const result = await store.process(
    { eventId: message.id, workflowId: message.orderId, type: 'SHIPMENT_REQUESTED' },
    {
      ruleSet: orderShipment,
      onApplied: (tx) => {
        if (failBeforeInsert) throw new Error('the carrier label printer is on fire');
        const { lastInsertRowid } = tx.client
          .prepare('INSERT INTO shipments (event_id, order_id) VALUES (?, ?)')
          .run(message.id, message.orderId);
        return { shipmentId: Number(lastInsertRowid) };
      },
    },
  );
  const output = result.outcome === 'applied' ? result.output : result.original?.output;
  return { outcome: result.outcome, shipmentId: output?.shipmentId ?? null };
}

// 1. The same message twice.
const first = await handleShipmentRequest({ id: 'evt-1', orderId: 'order-1' });
const replay = await handleShipmentRequest({ id: 'evt-1', orderId: 'order-1' });
assert.deepEqual([first.outcome, replay.outcome], ['applied', 'duplicate-delivery']);
assert.equal(replay.shipmentId, first.shipmentId);
assert.equal(shipmentRows(), 1);
console.log(`duplicate delivery: 2 calls, ${shipmentRows()} shipment row, shipment ${first.shipmentId} both times`);

// 2. The handler fails: the whole transaction rolls back; the redelivery ships.
const second = { id: 'evt-2', orderId: 'order-2' };
await assert.rejects(handleShipmentRequest(second, { failBeforeInsert: true }), (error) => {
  assert.ok(error instanceof IdemflowError);
  assert.equal(error.code, 'HANDLER_FAILED');
  assert.equal(error.disposition, 'retry'); // the broker redelivers it
  return true;
});
assert.equal(await store.getReceipt('evt-2'), null);
assert.equal(await store.getWorkflow('order-2'), null);
assert.equal(shipmentRows(), 1);
const retried = await handleShipmentRequest(second);
assert.equal(retried.outcome, 'applied');
assert.equal(shipmentRows(), 2);
console.log(`failure and retry: the failed delivery left no receipt and no shipment; the retry shipped (shipment ${retried.shipmentId})`);

// 3. evt-1 again, claiming another order: an integrity conflict, refused.
await assert.rejects(handleShipmentRequest({ id: 'evt-1', orderId: 'order-9' }), (error) => {
  assert.equal(error.code, 'EVENT_ID_CONFLICT');
  assert.equal(error.disposition, 'reconcile'); // parked for a person
  return true;
});
assert.equal(shipmentRows(), 2);
console.log('identity conflict: an event id reused for another order is refused; nothing written');

store.close();
console.log("PASS: one transaction for idemflow's rows and the host's shipments");
