// idemflow/typeorm on PostgreSQL, PGlite, MariaDB and SQLite (better-sqlite3): the callback gets an
// EntityManager on idemflow's connection, so the host's row and the receipt
// commit together on success and neither on a throw; manager.transaction()
// is a savepoint and a nested one rolls back alone; in processBatch one
// event's failure fails that event only; idempotent()'s work takes the same
// helper. The DataSource reaches no connection outside a callback, and
// options of a connection or a schema change are refused.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { IdemflowError, idempotent, processBatch, processEvent, RuleSet } from 'idemflow';
import { typeormManager, withTypeorm } from 'idemflow/typeorm';
import { EntitySchema } from 'typeorm';
import { BACKENDS, PG_URL, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf, typeormShipments } from '../workers/host-tables.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });

for (const backend of BACKENDS) {
  if (!['pg', 'pglite', 'mysql', 'sqlite'].includes(backend.id)) continue;
  describe(`idemflow/typeorm on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    const table = `${uniquePrefix()}_typeorm`;
    const Shipment = typeormShipments(EntitySchema, table);
    const options = { entities: [Shipment], ...{ mysql: { type: 'mariadb' }, sqlite: { type: 'better-sqlite3' } }[backend.id] };
    before(async () => {
      await shipmentsOf(backend.id, suite.helper, table).create();
    });
    const hasRow = async (eventId) => {
      if (backend.id === 'sqlite')
        return Number(suite.store.db.prepare(`SELECT COUNT(*) AS n FROM "${table}" WHERE event_id = ?`).get(eventId).n) > 0;
      const sql =
        backend.id === 'mysql'
          ? `SELECT COUNT(*) AS n FROM \`${table}\` WHERE event_id = ?`
          : `SELECT COUNT(*) AS n FROM "${table}" WHERE event_id = $1`;
      return Number((await suite.helper.query(sql, [eventId]))[0].n) > 0;
    };
    const save = (manager, id) => manager.save(Shipment, { eventId: id, orderId: id });

    it('the row and the receipt commit together, a duplicate answers the same output; a throw leaves neither; idempotent() takes it', async () => {
      const ns = uniquePrefix();
      const onApplied = withTypeorm(async (manager, decision) => {
        const saved = await save(manager, decision.event.eventId);
        return { shipmentId: saved.id };
      }, options);
      const first = await processEvent(suite.store, request(`${ns}:a`, `${ns}:a`), { ruleSet, onApplied });
      assert.equal(first.outcome, 'applied');
      assert.equal(typeof first.output.shipmentId, 'number');
      assert.equal(await hasRow(`${ns}:a`), true);
      const again = await processEvent(suite.store, request(`${ns}:a`, `${ns}:a`), { ruleSet, onApplied });
      assert.deepEqual(again.original.output, first.output);
      const boom = new Error('after the write');
      const failed = await outcomeOf(
        processEvent(suite.store, request(`${ns}:t`, `${ns}:t`), {
          ruleSet,
          onApplied: withTypeorm(async (manager, decision) => {
            await save(manager, decision.event.eventId);
            throw boom;
          }, options),
        }),
      );
      assert.equal(failed.error?.code, 'HANDLER_FAILED');
      assert.equal(failed.error.cause, boom);
      assert.equal(await hasRow(`${ns}:t`), false);
      assert.equal(await suite.store.getReceipt(`${ns}:t`), null);
      // manager.insert answers TypeORM's InsertResult: no output.
      const inserted = await processEvent(suite.store, request(`${ns}:i`, `${ns}:i`), {
        ruleSet,
        onApplied: withTypeorm((manager, decision) => manager.insert(Shipment, { eventId: decision.event.eventId, orderId: 'i' }), options),
      });
      assert.equal(inserted.outcome, 'applied');
      assert.equal(await hasRow(`${ns}:i`), true);
      const keyed = { key: `${ns}:key`, payload: 1 };
      const work = withTypeorm(async (manager) => {
        await save(manager, `${ns}:work`);
        return { done: true };
      }, options);
      const ran = await idempotent(suite.store, keyed, work);
      const replayed = await idempotent(suite.store, keyed, work);
      assert.deepEqual([ran.replayed, replayed.replayed, replayed.output], [false, true, { done: true }]);
      assert.equal(await hasRow(`${ns}:work`), true);
    });

    it('manager.transaction() is a savepoint; a nested one rolls back alone; in a batch one failure fails its event only', async () => {
      const ns = uniquePrefix();
      const undo = new Error('undo the nested part');
      const nested = await processEvent(suite.store, request(`${ns}:n`, `${ns}:n`), {
        ruleSet,
        onApplied: withTypeorm(async (manager) => {
          await manager.transaction(async (outer) => {
            await save(outer, `${ns}:outer`);
            await outer
              .transaction(async (inner) => {
                await save(inner, `${ns}:nested`);
                throw undo;
              })
              .catch((error) => assert.equal(error, undo));
          });
          await manager
            .transaction(async (trx) => {
              await save(trx, `${ns}:undone`);
              throw undo;
            })
            .catch((error) => assert.equal(error, undo));
          return null;
        }, options),
      });
      assert.equal(nested.outcome, 'applied');
      assert.deepEqual([await hasRow(`${ns}:outer`), await hasRow(`${ns}:nested`), await hasRow(`${ns}:undone`)], [true, false, false]);
      const ids = [`${ns}:b1`, `${ns}:b2`, `${ns}:b3`];
      const results = await processBatch(
        suite.store,
        ids.map((id) => request(id, id)),
        {
          ruleSet,
          onApplied: withTypeorm(async (manager, decision) => {
            await save(manager, decision.event.eventId);
            if (decision.event.eventId === ids[1]) throw new Error('this one fails');
            return { id: decision.event.eventId };
          }, options),
        },
      );
      assert.deepEqual(
        results.map((r) => r.outcome ?? r.error?.code),
        ['applied', 'HANDLER_FAILED', 'applied'],
      );
      assert.deepEqual([await hasRow(ids[0]), await hasRow(ids[1]), await hasRow(ids[2])], [true, false, true]);
    });

    it("an isolation level on TypeORM's transaction is refused (transaction-control), nothing written; SQLite's one level passes", async () => {
      const ns = uniquePrefix();
      const outcome = await outcomeOf(
        processEvent(suite.store, request(`${ns}:iso`, `${ns}:iso`), {
          ruleSet,
          onApplied: withTypeorm((manager) => manager.transaction('SERIALIZABLE', (trx) => save(trx, `${ns}:iso`)), options),
        }),
      );
      if (backend.id === 'sqlite') {
        // TypeORM sets SQLite's level with a pragma, not in the transaction: every SQLite transaction is serializable.
        assert.equal(outcome.outcome, 'applied', String(outcome.error));
        assert.equal(await hasRow(`${ns}:iso`), true);
        return;
      }
      assert.equal(outcome.error?.code, 'INVALID_ARGUMENT', String(outcome.error));
      assert.equal(outcome.error.details.reason, 'transaction-control');
      assert.equal(await hasRow(`${ns}:iso`), false);
    });

    it('the DataSource reaches no connection outside a callback; options of a connection or a schema change are refused', async () => {
      let kept;
      await suite.store.transaction((tx) =>
        typeormManager(tx, options, async (manager) => {
          kept = manager.connection;
        }),
      );
      // TypeORM's SQLite driver wraps what its driver throws in a QueryFailedError: idemflow's refusal is its driverError.
      const outside = await kept.manager.find(Shipment).then(
        () => assert.fail('the DataSource read outside a callback'),
        (error) => (error instanceof IdemflowError ? error : error.driverError),
      );
      assert.ok(outside instanceof IdemflowError, String(outside));
      assert.equal(outside.code, 'INVALID_ARGUMENT');
      assert.equal(outside.details.reason, 'outside the transaction');
      for (const key of ['host', 'url', 'synchronize', 'driver', 'database']) {
        assert.throws(
          () => withTypeorm(() => null, { ...options, [key]: 'x' }),
          (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === `options.${key}`,
        );
      }
    });
  });
}

// ---- docs/adapters.md's TypeORM recipe, as written, on PostgreSQL (a schema of its own)

const DOC = readFileSync(new URL('../../../docs/adapters.md', import.meta.url), 'utf8');

describe("docs/adapters.md's TypeORM recipe", { skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run it on PostgreSQL' }, () => {
  it('runs as written: the shipment and the receipt commit together, and a duplicate answers the same shipment', async () => {
    const block = [...DOC.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes("from 'idemflow/typeorm'"));
    assert.ok(block, 'a TypeORM block is in docs/adapters.md');
    const { default: pg } = await import('pg');
    const { PostgresStore } = await import('idemflow/postgres');
    const schema = `docs_${uniquePrefix()}`;
    const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
    await admin.query(`CREATE SCHEMA "${schema}"`);
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4, options: `-c search_path="${schema}"` });
    try {
      await pool.query('CREATE TABLE shipments (id SERIAL PRIMARY KEY, order_id TEXT NOT NULL)');
      const store = new PostgresStore(pool, { tables: { workflows: 't_workflows', inbox: 't_inbox', outbox: 't_outbox' } });
      await store.migrate();
      const code = block.replace(/^import [\s\S]*?;$/gm, '');
      const onApplied = new Function('withTypeorm', 'EntitySchema', `${code}\nreturn onApplied;`)(withTypeorm, EntitySchema);
      const event = request('docs:typeorm', 'docs:typeorm');
      const first = await processEvent(store, event, { ruleSet, onApplied });
      const again = await processEvent(store, event, { ruleSet, onApplied });
      assert.equal(first.outcome, 'applied');
      assert.equal(typeof first.output.shipmentId, 'number');
      assert.deepEqual(again.original.output, first.output);
      assert.equal((await pool.query('SELECT COUNT(*)::int AS n FROM shipments')).rows[0].n, 1);
    } finally {
      await pool.end();
      await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
      await admin.end();
    }
  });
});
