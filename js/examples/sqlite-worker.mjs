// A worker over the embedded store: one SQLite file (WAL, BEGIN IMMEDIATE),
// shared by as many worker processes as you start. Run it with
// `make examples && cd tests/js && node examples/sqlite-worker.mjs`.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isIdemflowError } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idemflow-example-'));
const store = SqliteStore.open(path.join(dir, 'swaps.db'));
await store.migrate(); // idempotent: every worker may run it on start

// The swap as the chain watcher's detection left it: in `deposit`, the deposit recorded under its
// depositRef with the detection's `sequence` 1 (the watcher's number of its observations of it).
await store.putWorkflow({
  id: 'swap-42',
  status: 'deposit',
  revision: 3,
  expectedUnits: '12500000',
  deposits: { 'btc-mainnet:tx-abc:vout-0': { event: 'DEPOSIT_DETECTED', amountUnits: '12500000', sequence: 1 } },
});

// The confirmation is the watcher's observation 2 of that deposit; a re-publication keeps the number.
const confirmed = {
  eventId: 'chain-watcher:event-001',
  workflowId: 'swap-42',
  type: 'DEPOSIT_CONFIRMED',
  depositRef: 'btc-mainnet:tx-abc:vout-0',
  amountUnits: '12500000',
  sequence: 2,
};

// What the queue hands this worker: the event, its redelivery, the same fact
// from another observer, and an id reused with another amount.
const deliveries = [confirmed, { ...confirmed }, { ...confirmed, eventId: 'observer-b:event-77' }, { ...confirmed, amountUnits: '1' }];

for (const delivery of deliveries) {
  try {
    const result = await store.process(delivery, { ruleSet: 'deposit-swap' });
    console.log(`ack   ${delivery.eventId.padEnd(24)} ${result.outcome}${result.operationId ? ` -> ${result.operationId}` : ''}`);
  } catch (error) {
    if (!isIdemflowError(error)) throw error;
    // retry: leave it for redelivery; reject and reconcile: dead-letter it with the code.
    const action = error.disposition === 'retry' ? 'nack ' : 'dead ';
    console.log(`${action} ${delivery.eventId.padEnd(24)} ${error.code} (${error.disposition})`);
  }
}

console.log('workflow', await store.getWorkflow('swap-42'));
console.log('outbox  ', await store.getOperation('start-exchange:swap-42'));
await store.close();
fs.rmSync(dir, { recursive: true, force: true });
