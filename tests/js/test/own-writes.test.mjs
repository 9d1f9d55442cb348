// The host's own writes in idemflow's transaction (onApplied), on every
// store: the callback's rows and idemflow's receipt, compare-and-set and
// outbox rows commit together or not at all; every later duplicate answers
// what the callback returned; a callback that throws leaves nothing and the
// retry succeeds; 25 concurrent deliveries run it once; in a batch a
// failing callback fails its event alone; a workflow can be born in the
// host's own transaction beside the row that starts it.

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { IdemflowError, processBatch, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';
import { prismaClientDir } from '../workers/prisma-client.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });

/** An onApplied that writes the shipment row and answers its id; `fail(eventId)` says when to throw after the write. */
function shipping(shipments, { fail = () => null, calls = [] } = {}) {
  return async (tx, decision) => {
    calls.push(decision.event.eventId);
    const id = await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
    const failure = fail(decision.event.eventId);
    if (failure) throw failure;
    return { shipmentId: id };
  };
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`onApplied on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    let helper;
    before(() => {
      helper = suite.helper;
    });
    const table = () => `${uniquePrefix()}_shipments`;

    it("the article's three checks: a duplicate answers the same shipment, an injected failure leaves nothing and the retry succeeds, an identity conflict is refused", async () => {
      const shipments = shipmentsOf(backend.id, helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      const event = request(`${ns}:evt-1`, `${ns}:order-1`);
      const first = await helper.store.process(event, { ruleSet, onApplied: shipping(shipments) });
      const replay = await helper.store.process(event, { ruleSet, onApplied: shipping(shipments) });
      assert.equal(first.outcome, 'applied');
      assert.equal(replay.outcome, 'duplicate-delivery');
      assert.deepEqual(replay.original.output, first.output, 'the duplicate answers what the first delivery returned');
      assert.equal(await shipments.count(), 1);

      const retry = request(`${ns}:evt-2`, `${ns}:order-2`);
      const injected = new Error('Injected failure after the shipment insert');
      const failed = await outcomeOf(helper.store.process(retry, { ruleSet, onApplied: shipping(shipments, { fail: () => injected }) }));
      assert.equal(failed.error?.code, 'HANDLER_FAILED');
      assert.equal(failed.error.disposition, 'retry');
      assert.equal(failed.error.cause, injected, 'the thrown error is the cause');
      assert.equal(await helper.store.getReceipt(retry.eventId), null, 'no receipt');
      assert.equal(await helper.store.getWorkflow(retry.workflowId), null, 'no workflow');
      assert.equal(await helper.store.getOperation(`create-shipment:${retry.workflowId}`), null, 'no outbox row');
      assert.equal(await shipments.count(), 1, 'none of the host rows');
      assert.equal(
        (await helper.store.process(retry, { ruleSet, onApplied: shipping(shipments) })).outcome,
        'applied',
        'the retry succeeds',
      );
      assert.equal(await shipments.count(), 2);

      const conflict = await outcomeOf(
        helper.store.process(request(event.eventId, `${ns}:other-order`), { ruleSet, onApplied: shipping(shipments) }),
      );
      assert.equal(conflict.error?.code, 'EVENT_ID_CONFLICT');
      assert.equal(await shipments.count(), 2);
    });

    it('an IdemflowError thrown by the callback keeps its code; a bad output is a coded error and rolls back', async () => {
      const shipments = shipmentsOf(backend.id, helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      const parked = new IdemflowError('INVALID_TRANSITION', 'the order was cancelled meanwhile', { disposition: 'reconcile' });
      const kept = await outcomeOf(
        helper.store.process(request(`${ns}:e1`, `${ns}:o1`), { ruleSet, onApplied: shipping(shipments, { fail: () => parked }) }),
      );
      assert.equal(kept.error, parked);
      for (const [i, bad] of [() => {}, 10n, Number.NaN, { big: 'x'.repeat(17 * 1024) }, new Date(0)].entries()) {
        const onApplied = async (tx, decision) => {
          await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
          return bad;
        };
        const outcome = await outcomeOf(helper.store.process(request(`${ns}:bad-${i}`, `${ns}:bad-${i}`), { ruleSet, onApplied }));
        assert.equal(outcome.error?.code, 'INVALID_ARGUMENT', `output ${i}`);
        assert.equal(outcome.error.details.field, 'output');
      }
      const cyclic = {};
      cyclic.self = cyclic;
      assert.equal(
        (await outcomeOf(helper.store.process(request(`${ns}:cyclic`, `${ns}:cyclic`), { ruleSet, onApplied: () => cyclic }))).error?.code,
        'INVALID_ARGUMENT',
      );
      assert.equal(await shipments.count(), 0, 'nothing of any of them was kept');
      assert.equal(await helper.store.getReceipt(`${ns}:bad-0`), null);
    });

    it('never runs for duplicate-delivery, already-applied or an error; runs for applied only', async () => {
      const shipments = shipmentsOf(backend.id, helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      const calls = [];
      const onApplied = shipping(shipments, { calls });
      await helper.store.process(request(`${ns}:e1`, `${ns}:o1`), { ruleSet, onApplied });
      await helper.store.process(request(`${ns}:e1`, `${ns}:o1`), { ruleSet, onApplied }); // duplicate-delivery
      const again = await helper.store.process(request(`${ns}:e2`, `${ns}:o1`), { ruleSet, onApplied }); // already-applied
      assert.equal(again.outcome, 'already-applied');
      assert.equal(again.output, undefined, 'another event id is another delivery: no output');
      await outcomeOf(helper.store.process({ ...request(`${ns}:e3`, `${ns}:o3`), type: 'NOT_A_TYPE' }, { ruleSet, onApplied }));
      assert.deepEqual(calls, [`${ns}:e1`]);
    });

    it('25 concurrent deliveries of one event, and 25 of one fact under new event ids, run the callback to its commit once', async () => {
      const shipments = shipmentsOf(backend.id, helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      const same = await Promise.all(
        Array.from({ length: 25 }, () =>
          outcomeOf(helper.store.process(request(`${ns}:e`, `${ns}:o`), { ruleSet, onApplied: shipping(shipments) })),
        ),
      );
      assert.equal(
        same.filter((r) => r.outcome === 'applied').length,
        1,
        JSON.stringify(same.filter((r) => r.error).map((r) => r.error.code)),
      );
      const fresh = await Promise.all(
        Array.from({ length: 25 }, (_, i) =>
          outcomeOf(helper.store.process(request(`${ns}:source-${i}`, `${ns}:p`), { ruleSet, onApplied: shipping(shipments) })),
        ),
      );
      assert.equal(fresh.filter((r) => r.outcome === 'applied').length, 1);
      assert.equal(await shipments.count(), 2, 'one shipment row per order');
      const duplicates = same.filter((r) => r.outcome === 'duplicate-delivery');
      for (const duplicate of duplicates) assert.deepEqual(duplicate.original.output, same.find((r) => r.outcome === 'applied').output);
    });

    it("a batch runs each applied event's callback in delivery order; one that throws fails its event alone, the others commit", async () => {
      const shipments = shipmentsOf(backend.id, helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      const calls = [];
      const events = [
        request(`${ns}:a`, `${ns}:oa`),
        request(`${ns}:b`, `${ns}:ob`),
        request(`${ns}:b`, `${ns}:ob`),
        request(`${ns}:c`, `${ns}:oc`),
        request(`${ns}:d`, `${ns}:ob`),
      ];
      const onApplied = shipping(shipments, { calls, fail: (eventId) => (eventId === `${ns}:b` ? new Error('b fails') : null) });
      const results = await processBatch(helper.store, events, { ruleSet, onApplied });
      assert.equal(results[0].outcome, 'applied');
      assert.equal(results[1].error?.code, 'HANDLER_FAILED');
      // b's callback failed: its second delivery is decided without it (and fails the same way), and d is the first to apply on ob.
      assert.equal(results[2].error?.code, 'HANDLER_FAILED');
      assert.equal(results[3].outcome, 'applied');
      assert.equal(results[4].outcome, 'applied', JSON.stringify(results[4]));
      assert.deepEqual(
        results.map((r) => r.output?.shipmentId !== undefined),
        [true, false, false, true, true],
      );
      assert.equal(await shipments.count(), 3, "a, c and d: the failed callbacks' rows are gone");
      assert.equal(await helper.store.getReceipt(`${ns}:b`), null);
      const replay = await processBatch(helper.store, events.slice(0, 1), { ruleSet, onApplied });
      assert.deepEqual(replay[0].original.output, results[0].output);
    });

    it("a workflow born in the host's own transaction commits with the host's row, or neither does", async () => {
      const shipments = shipmentsOf(backend.id, helper, table());
      await shipments.create();
      const ns = uniquePrefix();
      await helper.store.transaction(async (tx) => {
        await shipments.insert(tx, `${ns}:start`, `${ns}:swap-1`);
        await tx.putWorkflow({ id: `${ns}:swap-1`, status: 'waiting', revision: 0 });
      });
      assert.deepEqual(await helper.store.getWorkflow(`${ns}:swap-1`), { id: `${ns}:swap-1`, status: 'waiting', revision: 0 });
      await assert.rejects(
        helper.store.transaction(async (tx) => {
          await shipments.insert(tx, `${ns}:start-2`, `${ns}:swap-2`);
          await tx.putWorkflow({ id: `${ns}:swap-2`, status: 'waiting', revision: 0 });
          throw new Error('the host changes its mind');
        }),
        /changes its mind/,
      );
      assert.equal(await helper.store.getWorkflow(`${ns}:swap-2`), null);
      assert.equal(await shipments.count(), 1);
    });
  });
}

// ---- A worker killed in the middle of onApplied ------------------------------
// Through tx.client and through each tool's helper (js/orm), on SQLite, PostgreSQL and MariaDB.

const KILL_BACKENDS = BACKENDS.filter((backend) => ['sqlite', 'pg', 'mysql'].includes(backend.id));
const TOOLS = ['raw', 'drizzle', 'kysely', 'knex', 'typeorm', 'prisma'];

/** Runs own-writes-worker.mjs; resolves what it reported last, and how it ended. */
function runWorker(config, { hang }) {
  return new Promise((resolve) => {
    const child = fork(path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workers', 'own-writes-worker.mjs'), [], {
      env: { ...process.env, IDEMFLOW_OWN_WRITES: JSON.stringify(config), IDEMFLOW_HANG_IN_CALLBACK: hang ? '1' : '0' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let last = null;
    child.on('message', (message) => {
      last = message;
      if (message === 'inside') child.kill('SIGKILL');
    });
    const watchdog = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('exit', (code, signal) => {
      clearTimeout(watchdog);
      resolve({ last, code, signal });
    });
  });
}

for (const backend of KILL_BACKENDS) {
  describe(`a worker SIGKILLed inside onApplied on ${backend.name}`, { skip: backend.skip }, () => {
    for (const tool of TOOLS) {
      const through = tool === 'raw' ? 'tx.client' : `idemflow/${tool}`;
      it(`through ${through}: leaves both the receipt and the host row, or neither; the restarted worker applies once`, async () => {
        const env = await backend.setup();
        const tables = tablesFor(uniquePrefix());
        const spec = env.spec(tables);
        const helper = await env.open(tables, {});
        const table = `${uniquePrefix()}_shipments`;
        try {
          await helper.store.migrate();
          await shipmentsOf(backend.id, helper, table).create();
          const config = { ...spec, table, tool, eventId: `${table}:evt-1`, orderId: `${table}:order-1` };
          if (tool === 'prisma')
            config.prismaClient = prismaClientDir({ pg: 'postgresql', mysql: 'mysql', sqlite: 'sqlite' }[backend.id], table);
          const counts = async () => ({
            receipt: (await helper.store.getReceipt(config.eventId)) !== null,
            rows: await shipmentsOf(backend.id, helper, table).count(),
          });
          const killed = await runWorker(config, { hang: true });
          assert.equal(killed.signal, 'SIGKILL', 'killed inside the callback');
          assert.deepEqual(await counts(), { receipt: false, rows: 0 }, 'neither: the transaction died with its worker');
          const restarted = await runWorker(config, { hang: false });
          assert.deepEqual(restarted.last, { outcome: 'applied', output: { shipped: config.orderId } });
          assert.deepEqual(await counts(), { receipt: true, rows: 1 }, 'both');
          const again = await runWorker(config, { hang: false });
          assert.deepEqual(
            again.last,
            { outcome: 'duplicate-delivery', output: { shipped: config.orderId } },
            'a redelivery answers the output, and writes nothing',
          );
          assert.deepEqual(await counts(), { receipt: true, rows: 1 });
        } finally {
          await helper.drop?.();
          await helper.close();
          await env.close();
        }
      });
    }
  });
}
