// One odd item never fails a whole call (issue 37), on every store: a
// revoked Proxy among processBatch's events is that event's INVALID_EVENT;
// a callback's bad output in handle.batch parks that message alone after
// the others committed; tx.client.release() inside a callback is a coded
// refusal that leaks no pooled connection; a database error of the host's
// own statement in onApplied is classified as the store's own
// (STORE_UNAVAILABLE with its reason, a lost race run again), a plain
// Error stays HANDLER_FAILED; putWorkflow with a rule set checks its facts
// map with the core and refuses one stored as a JSON string.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createDeliveryHandler, decide, IdemflowError, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const ruleSet = RuleSet.builtin('order-shipment');
/** The most entries a facts map may hold, as the core lays it out for its host. */
const MAX_FACTS = JSON.parse(RuleSet.builtin('deposit-swap').compiled.layoutJson()).facts.maxEntries;
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });

function revokedProxy() {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

/**
 * A statement of the host's that the database refuses (a syntax error),
 * through the driver's own handle: what each driver throws for it. Null for
 * a store without a SQL driver.
 */
const BAD_STATEMENT = {
  sqlite: (tx) => tx.client.prepare('SELEC 1'),
  'sqlite-node': (tx) => tx.client.prepare('SELEC 1'),
  pglite: (tx) => tx.client.query('SELEC 1'),
  pg: (tx) => tx.client.query('SELEC 1'),
  mysql: (tx) => tx.client.query('SELEC 1'),
};

/** A statement that makes the server raise SQLSTATE `code` (PostgreSQL and PGlite: plpgsql's RAISE). */
const raising = (code) => (tx) => tx.client.query(`DO $$ BEGIN RAISE EXCEPTION 'raised by the test' USING ERRCODE = '${code}'; END $$`);

/**
 * Every connection of the store's pool is back in it, none checked out twice
 * or left in a transaction: each one taken out at once is a distinct session
 * outside any transaction.
 */
async function assertPoolIdle(kind, pool) {
  if (kind === 'pg') {
    assert.equal(pool.waitingCount, 0);
    assert.equal(pool.idleCount, pool.totalCount, 'every client is back in the pool, none checked out');
    const clients = await Promise.all(Array.from({ length: pool.totalCount }, () => pool.connect()));
    try {
      const sessions = new Set();
      for (const client of clients) {
        const { rows } = await client.query('SELECT pg_backend_pid() AS pid, now() = statement_timestamp() AS fresh');
        assert.equal(rows[0].fresh, true, 'not inside a transaction');
        sessions.add(rows[0].pid);
      }
      assert.equal(sessions.size, clients.length, 'no client handed out twice');
    } finally {
      for (const client of clients) client.release();
    }
    return;
  }
  const free = pool.pool._freeConnections;
  const all = pool.pool._allConnections;
  const frees = free.toArray ? free.toArray() : [...free];
  assert.equal(new Set(frees).size, frees.length, 'no connection is free twice');
  assert.equal(frees.length, all.length, 'every connection is back in the pool');
  const connections = await Promise.all(frees.map(() => pool.getConnection()));
  try {
    const sessions = new Set();
    for (const connection of connections) {
      const [rows] = await connection.query('SELECT CONNECTION_ID() AS id, @@in_transaction AS open');
      assert.equal(Number(rows[0].open), 0, 'not inside a transaction');
      sessions.add(rows[0].id);
    }
    assert.equal(sessions.size, connections.length, 'no connection handed out twice');
  } finally {
    for (const connection of connections) connection.release();
  }
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

    it("a plain Error thrown by the callback stays HANDLER_FAILED; a database error of the host's own statement is STORE_UNAVAILABLE with its reason", async () => {
      const ns = uniquePrefix();
      const plain = new Error('the host is confused');
      const thrown = await outcomeOf(
        processEvent(suite.store, request(`${ns}:plain`, `${ns}:plain`), {
          ruleSet,
          onApplied: () => {
            throw plain;
          },
        }),
      );
      assert.equal(thrown.error?.code, 'HANDLER_FAILED');
      assert.equal(thrown.error.cause, plain);
      const statement = BAD_STATEMENT[backend.id];
      if (statement === undefined) return; // no driver of its own (memory, MongoDB)
      let driverError;
      const onApplied = async (tx) => {
        try {
          await statement(tx);
        } catch (error) {
          driverError = error;
          throw error;
        }
      };
      const failed = await outcomeOf(processEvent(suite.store, request(`${ns}:sql`, `${ns}:sql`), { ruleSet, onApplied }));
      assert.ok(driverError !== undefined, 'the statement failed');
      assert.equal(failed.error?.code, 'STORE_UNAVAILABLE', String(failed.error));
      assert.equal(failed.error.details.reason, 'database-error');
      assert.equal(failed.error.disposition, 'retry');
      assert.equal(typeof failed.error.details.driverCode, 'string');
      assert.equal(failed.error.cause, driverError);
      assert.equal(await suite.store.getReceipt(`${ns}:sql`), null);
      // In a batch: that event's error, the others commit.
      const results = await processBatch(suite.store, [request(`${ns}:ok`, `${ns}:ok`), request(`${ns}:sql`, `${ns}:sql`)], {
        ruleSet,
        onApplied: (tx, decision) => (decision.event.eventId === `${ns}:sql` ? onApplied(tx) : null),
      });
      assert.equal(results[0].outcome, 'applied');
      assert.equal(results[1].error?.code, 'STORE_UNAVAILABLE');
      assert.equal(results[1].error.details.reason, 'database-error');
      assert.equal(await suite.store.getReceipt(`${ns}:sql`), null);
    });

    it("putWorkflow with the workflow's rule set checks its facts map as a decision reads it, and refuses one stored as a JSON string", async () => {
      const ns = uniquePrefix();
      const deposits = { [`${ns}:tx-1:vout-0`]: { event: 'DEPOSIT_DETECTED', amountUnits: '100', sequence: 1 } };
      const swap = (id, facts) => ({ id: `${ns}:${id}`, status: 'waiting', revision: 1, expectedUnits: '100', deposits: facts });
      const over = Object.fromEntries(
        Array.from({ length: MAX_FACTS + 1 }, (_, i) => [
          `${ns}:tx-${i}:vout-0`,
          { event: 'DEPOSIT_DETECTED', amountUnits: '1', sequence: 1 },
        ]),
      );
      const refusals = [
        ['as-text', JSON.stringify(deposits), 'deposits', 'facts map stored as a string'],
        ['over', over, 'deposits', null],
        ['bad-event', { k: { event: 'CLOSE', sequence: 1 } }, 'deposits["k"].event', null],
        ['bad-sequence', { k: { event: 'DEPOSIT_DETECTED', sequence: 'one' } }, 'deposits["k"].sequence', null],
        ['bad-member', { k: { event: 'DEPOSIT_DETECTED', note: 'x' } }, 'deposits["k"].note', null],
      ];
      for (const [id, facts, field, reason] of refusals) {
        for (const put of [
          (workflow) => suite.store.putWorkflow(workflow, { ruleSet: 'deposit-swap' }),
          (workflow) => suite.store.transaction((tx) => tx.putWorkflow(workflow, { ruleSet: 'deposit-swap' })),
          // Without a rule set, the default processEvent decides with (deposit-swap).
          (workflow) => suite.store.putWorkflow(workflow),
        ]) {
          const refused = await outcomeOf(put(swap(id, facts)));
          assert.ok(refused.error instanceof IdemflowError, `${id}: refused`);
          assert.equal(refused.error.code, 'INVALID_ARGUMENT', id);
          assert.equal(refused.error.details.field, field, id);
          if (reason !== null) assert.equal(refused.error.details.reason, reason, id);
          assert.equal(await suite.store.getWorkflow(`${ns}:${id}`), null, `${id}: nothing stored`);
        }
      }
      await suite.store.putWorkflow(swap('good', deposits), { ruleSet: 'deposit-swap' });
      assert.deepEqual((await suite.store.getWorkflow(`${ns}:good`)).deposits, deposits);
      await suite.store.transaction((tx) => tx.putWorkflow(swap('good-tx', deposits), { ruleSet: RuleSet.builtin('deposit-swap') }));
      assert.deepEqual((await suite.store.getWorkflow(`${ns}:good-tx`)).deposits, deposits);
      const unknown = await outcomeOf(suite.store.putWorkflow(swap('opt', deposits), { rules: 'deposit-swap' }));
      assert.equal(unknown.error?.code, 'INVALID_ARGUMENT', 'an unknown option is refused');
    });

    if (backend.id === 'pg' || backend.id === 'pglite') {
      it('the server out of room in the callback is STORE_UNAVAILABLE server-out-of-resources; a deadlock there is a lost race, run again', async () => {
        const ns = uniquePrefix();
        const full = await outcomeOf(
          processEvent(suite.store, request(`${ns}:full`, `${ns}:full`), { ruleSet, onApplied: raising('53100') }),
        );
        assert.equal(full.error?.code, 'STORE_UNAVAILABLE', String(full.error));
        assert.equal(full.error.details.reason, 'server-out-of-resources');
        assert.equal(full.error.details.driverCode, '53100');
        let runs = 0;
        const once = async (tx) => {
          runs += 1;
          if (runs === 1) await raising('40P01')(tx);
          return { runs };
        };
        const result = await processEvent(suite.store, request(`${ns}:deadlock`, `${ns}:deadlock`), { ruleSet, onApplied: once });
        assert.equal(result.outcome, 'applied');
        assert.equal(result.attempts, 2, 'the deadlock re-ran the cycle');
        assert.deepEqual(result.output, { runs: 2 });
      });
    }

    if (backend.id === 'pg') {
      it('a lost connection in the callback is STORE_UNAVAILABLE, and the pool discards the connection', async () => {
        const ns = uniquePrefix();
        const lost = await outcomeOf(
          processEvent(suite.store, request(`${ns}:lost`, `${ns}:lost`), {
            ruleSet,
            onApplied: (tx) => tx.client.query('SELECT pg_terminate_backend(pg_backend_pid())'),
          }),
        );
        assert.equal(lost.error?.code, 'STORE_UNAVAILABLE', String(lost.error));
        assert.ok(['server-unavailable', 'connection-lost'].includes(lost.error.details.reason), lost.error.details.reason);
        assert.equal(await suite.store.getReceipt(`${ns}:lost`), null);
        assert.equal((await processEvent(suite.store, request(`${ns}:lost`, `${ns}:lost`), { ruleSet })).outcome, 'applied');
      });
    }

    if (backend.id === 'pg' || backend.id === 'mysql') {
      it('tx.client.release() inside a callback is a coded refusal: nothing of that event commits, the others do, and no pooled client leaks', async () => {
        const ns = uniquePrefix();
        const release = (tx) => {
          tx.client.release();
        };
        const alone = await outcomeOf(processEvent(suite.store, request(`${ns}:r1`, `${ns}:r1`), { ruleSet, onApplied: release }));
        assert.ok(alone.error instanceof IdemflowError, String(alone.error));
        assert.equal(alone.error.code, 'INVALID_ARGUMENT');
        assert.equal(alone.error.details.field, 'tx.client.release');
        assert.equal(await suite.store.getReceipt(`${ns}:r1`), null);
        const results = await processBatch(suite.store, [request(`${ns}:ok`, `${ns}:ok`), request(`${ns}:r2`, `${ns}:r2`)], {
          ruleSet,
          onApplied: (tx, decision) => (decision.event.eventId === `${ns}:r2` ? release(tx) : null),
        });
        assert.equal(results[0].outcome, 'applied');
        assert.equal(results[1].error?.code, 'INVALID_ARGUMENT');
        assert.equal(await suite.store.getReceipt(`${ns}:r2`), null);
        // A host that catches the refusal goes on in the transaction, which commits.
        const caught = await processEvent(suite.store, request(`${ns}:r3`, `${ns}:r3`), {
          ruleSet,
          onApplied: (tx) => {
            assert.throws(() => tx.client.release(), { code: 'INVALID_ARGUMENT' });
          },
        });
        assert.equal(caught.outcome, 'applied');
        await assertPoolIdle(backend.id, suite.store.client);
      });
    }
  });
}

describe('a facts map stored as a string of JSON text', () => {
  it('is an INVALID_RECORD for the decision that reads it, never read as the map', () => {
    const deposits = { 'btc:tx-1:vout-0': { event: 'DEPOSIT_DETECTED', amountUnits: '100', sequence: 1 } };
    const event = {
      eventId: 'as-text-c2',
      workflowId: 'swap-as-text',
      type: 'DEPOSIT_CONFIRMED',
      depositRef: 'btc:tx-1:vout-0',
      amountUnits: '100',
      sequence: 2,
    };
    const workflow = (facts) => ({ id: 'swap-as-text', status: 'deposit', revision: 2, expectedUnits: '100', deposits: facts });
    assert.equal(decide({ event, receipt: null, workflow: workflow(deposits) }).outcome, 'applied');
    for (const facts of [JSON.stringify(deposits), 7, true, ['btc:tx-1:vout-0']]) {
      assert.throws(
        () => decide({ event, receipt: null, workflow: workflow(facts) }),
        (error) => error instanceof IdemflowError && error.code === 'INVALID_RECORD' && error.details.field === 'deposits',
        JSON.stringify(facts),
      );
    }
  });
});
