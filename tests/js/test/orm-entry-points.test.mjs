// idemflow/drizzle, idemflow/kysely and idemflow/knex on every database each
// supports here (SQLite via better-sqlite3, PGlite, PostgreSQL, MariaDB): the
// callback gets the tool's own object bound to idemflow's transaction, so the
// host's row and the receipt commit together on success and neither on a
// throw; the tool's own transaction() inside it is a savepoint (its rollback
// undoes its part alone); in processBatch one event's failure fails that
// event only; idempotent()'s work takes the same helper. Misuse fails with
// INVALID_ARGUMENT: a helper given no function, options that would point the
// tool at another connection, a transaction that is not a SQL store's, a
// tool's object kept past the callback. The entry points load without the tools.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { InMemoryStore, idempotent, processBatch, processEvent, RuleSet } from 'idemflow';
import { drizzleOf, withDrizzle } from 'idemflow/drizzle';
import { knexTransaction, withKnex } from 'idemflow/knex';
import { kyselyOf, withKysely } from 'idemflow/kysely';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });

/** Drizzle's table of the host's shipments on each database. */
async function drizzleTable(kind, name) {
  if (kind === 'mysql') {
    const { mysqlTable, int, varchar } = await import('drizzle-orm/mysql-core');
    return mysqlTable(name, {
      id: int('id').autoincrement().primaryKey(),
      eventId: varchar('event_id', { length: 200 }).notNull(),
      orderId: varchar('order_id', { length: 200 }).notNull(),
    });
  }
  if (kind === 'sqlite') {
    const { sqliteTable, integer, text } = await import('drizzle-orm/sqlite-core');
    return sqliteTable(name, { id: integer('id').primaryKey(), eventId: text('event_id').notNull(), orderId: text('order_id').notNull() });
  }
  const { pgTable, serial, text } = await import('drizzle-orm/pg-core');
  return pgTable(name, { id: serial('id').primaryKey(), eventId: text('event_id').notNull(), orderId: text('order_id').notNull() });
}

/**
 * Each tool as a test drives it on `kind`: `handler(fn)` the helper;
 * `insert(db, id)` a write awaited; `natural(db, id)` the write as a user
 * returns it (unawaited, answering the new row's id where the database
 * returns it); `transaction(db, fn)` the tool's own transaction; `nested(trx, fn)`
 * one inside it. SQLite's Drizzle is synchronous (.run(), a transaction of plain functions).
 */
async function toolsOf(kind, table) {
  const tools = {};
  const sync = kind === 'sqlite';
  const d = await drizzleTable(kind, table);
  tools.drizzle = {
    handler: withDrizzle,
    of: drizzleOf,
    insert: async (db, id) =>
      sync ? db.insert(d).values({ eventId: id, orderId: id }).run() : db.insert(d).values({ eventId: id, orderId: id }),
    natural: (db, id) =>
      kind === 'mysql'
        ? db.insert(d).values({ eventId: id, orderId: id }).$returningId()
        : db.insert(d).values({ eventId: id, orderId: id }).returning({ id: d.id }),
    transaction: (db, fn) => (sync ? db.transaction((trx) => fn(trx)) : db.transaction(async (trx) => fn(trx))),
    nested: (trx, fn) => (sync ? trx.transaction((inner) => fn(inner)) : trx.transaction(async (inner) => fn(inner))),
    sync,
  };
  tools.kysely = {
    handler: withKysely,
    of: kyselyOf,
    insert: (db, id) => db.insertInto(table).values({ event_id: id, order_id: id }).execute(),
    natural: (db, id) =>
      kind === 'mysql'
        ? db.insertInto(table).values({ event_id: id, order_id: id })
        : db.insertInto(table).values({ event_id: id, order_id: id }).returning('id'),
    transaction: (db, fn) => db.transaction().execute(fn),
    // Kysely nests through a controlled transaction's savepoints.
    outer: async (db, fn) => {
      const trx = await db.startTransaction().execute();
      try {
        await fn(trx);
        await trx.commit().execute();
      } catch (error) {
        await trx.rollback().execute();
        throw error;
      }
    },
    nested: async (trx, fn) => {
      const point = await trx.savepoint('inner').execute();
      try {
        await fn(point);
        await point.releaseSavepoint('inner').execute();
      } catch (error) {
        await point.rollbackToSavepoint('inner').execute();
        throw error;
      }
    },
  };
  if (kind !== 'pglite') {
    tools.knex = {
      handler: withKnex,
      insert: (trx, id) => trx(table).insert({ event_id: id, order_id: id }),
      natural: (trx, id) =>
        kind === 'mysql' ? trx(table).insert({ event_id: id, order_id: id }) : trx(table).insert({ event_id: id, order_id: id }, ['id']),
      // withKnex's trx is Knex's transaction already: its own transaction() is a nested one.
      transaction: (trx, fn) => trx.transaction((inner) => fn(inner)),
      nested: (trx, fn) => trx.transaction((inner) => fn(inner)),
    };
  }
  return tools;
}

const SUPPORTED = new Set(['sqlite', 'pglite', 'pg', 'mysql']);

for (const backend of BACKENDS) {
  if (!SUPPORTED.has(backend.id)) continue;
  describe(`idemflow/drizzle, idemflow/kysely, idemflow/knex on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    const table = `${uniquePrefix()}_orm`;
    let rows;
    let tools;
    before(async () => {
      rows = shipmentsOf(backend.id, suite.helper, table);
      await rows.create();
      tools = await toolsOf(backend.id, table);
    });
    const hasRow = async (eventId) => {
      const q = backend.id === 'mysql' ? `\`${table}\`` : `"${table}"`;
      const mark = backend.id === 'pg' || backend.id === 'pglite' ? '$1' : '?';
      const sql = `SELECT COUNT(*) AS n FROM ${q} WHERE event_id = ${mark}`;
      const found = backend.id === 'sqlite' ? suite.store.db.prepare(sql).get(eventId) : (await suite.helper.query(sql, [eventId]))[0];
      return Number(found.n) > 0;
    };

    for (const name of ['drizzle', 'kysely', 'knex']) {
      const skip = backend.id === 'pglite' && name === 'knex' ? 'Knex has no PGlite client' : false;
      it(`${name}: the row and the receipt commit together; a duplicate answers the same output; idempotent()'s work takes the helper`, {
        skip,
      }, async () => {
        const tool = tools[name];
        const ns = uniquePrefix();
        const onApplied = tool.handler((db, decision) => tool.natural(db, decision.event.eventId));
        const first = await processEvent(suite.store, request(`${ns}:a`, `${ns}:a`), { ruleSet, onApplied });
        assert.equal(first.outcome, 'applied');
        assert.equal(await hasRow(`${ns}:a`), true);
        assert.notEqual(await suite.store.getReceipt(`${ns}:a`), null);
        const again = await processEvent(suite.store, request(`${ns}:a`, `${ns}:a`), { ruleSet, onApplied });
        assert.equal(again.outcome, 'duplicate-delivery');
        assert.deepEqual(again.original.output ?? null, first.output ?? null);
        // The rows of a RETURNING are the output; MariaDB returns none but Drizzle's $returningId().
        if (backend.id !== 'mysql' || name === 'drizzle')
          assert.equal(typeof first.output?.[0]?.id, 'number', JSON.stringify(first.output));
        // An output of the callback's own, as onApplied's.
        const own = await processEvent(suite.store, request(`${ns}:b`, `${ns}:b`), {
          ruleSet,
          onApplied: tool.handler(async (db, decision) => {
            await tool.insert(db, decision.event.eventId);
            return { shipped: decision.event.eventId };
          }),
        });
        assert.deepEqual(own.output, { shipped: `${ns}:b` });
        const keyed = { key: `${ns}:key`, payload: { n: 1 } };
        const work = tool.handler(async (db) => {
          await tool.insert(db, `${ns}:work`);
          return { done: true };
        });
        const ran = await idempotent(suite.store, keyed, work);
        const replayed = await idempotent(suite.store, keyed, work);
        assert.deepEqual([ran.replayed, ran.output, replayed.replayed, replayed.output], [false, { done: true }, true, { done: true }]);
        assert.equal(await hasRow(`${ns}:work`), true);
      });

      it(`${name}: a throw leaves neither the row nor the receipt, and the next delivery applies`, { skip }, async () => {
        const tool = tools[name];
        const ns = uniquePrefix();
        const boom = new Error('after the write');
        const failed = await outcomeOf(
          processEvent(suite.store, request(`${ns}:t`, `${ns}:t`), {
            ruleSet,
            onApplied: tool.handler(async (db, decision) => {
              await tool.insert(db, decision.event.eventId);
              throw boom;
            }),
          }),
        );
        assert.equal(failed.error?.code, 'HANDLER_FAILED');
        assert.equal(failed.error.cause, boom);
        assert.equal(failed.error.details.eventId, `${ns}:t`);
        assert.equal(await hasRow(`${ns}:t`), false);
        assert.equal(await suite.store.getReceipt(`${ns}:t`), null);
        const next = await processEvent(suite.store, request(`${ns}:t`, `${ns}:t`), {
          ruleSet,
          onApplied: tool.handler((db, decision) => tool.insert(db, decision.event.eventId)),
        });
        assert.equal(next.outcome, 'applied');
        assert.equal(await hasRow(`${ns}:t`), true);
      });

      it(`${name}: its own transaction inside is a savepoint, and a nested one rolls back alone`, { skip }, async () => {
        const tool = tools[name];
        const ns = uniquePrefix();
        const undo = new Error('undo the nested part');
        const result = await processEvent(suite.store, request(`${ns}:n`, `${ns}:n`), {
          ruleSet,
          onApplied: tool.handler(async (db) => {
            await tool.insert(db, `${ns}:before`);
            if (tool.sync) {
              tool.transaction(db, (trx) => {
                tool.insert(trx, `${ns}:outer`);
                try {
                  tool.nested(trx, (inner) => {
                    tool.insert(inner, `${ns}:nested`);
                    throw undo;
                  });
                } catch (error) {
                  assert.equal(error, undo);
                }
              });
              try {
                tool.transaction(db, (trx) => {
                  tool.insert(trx, `${ns}:undone`);
                  throw undo;
                });
              } catch (error) {
                assert.equal(error, undo);
              }
            } else {
              await (tool.outer ?? tool.transaction)(db, async (trx) => {
                await tool.insert(trx, `${ns}:outer`);
                await tool
                  .nested(trx, async (inner) => {
                    await tool.insert(inner, `${ns}:nested`);
                    throw undo;
                  })
                  .catch((error) => assert.equal(error, undo));
              });
              await tool
                .transaction(db, async (trx) => {
                  await tool.insert(trx, `${ns}:undone`);
                  throw undo;
                })
                .catch((error) => assert.equal(error, undo));
            }
            return null;
          }),
        });
        assert.equal(result.outcome, 'applied');
        assert.deepEqual(
          [await hasRow(`${ns}:before`), await hasRow(`${ns}:outer`), await hasRow(`${ns}:nested`), await hasRow(`${ns}:undone`)],
          [true, true, false, false],
          'before and outer kept; the nested and the rolled-back transactions undone alone',
        );
      });

      it(`${name}: in processBatch one event's failure fails that event only`, { skip }, async () => {
        const tool = tools[name];
        const ns = uniquePrefix();
        const ids = [`${ns}:b1`, `${ns}:b2`, `${ns}:b3`];
        const results = await processBatch(
          suite.store,
          ids.map((id) => request(id, id)),
          {
            ruleSet,
            onApplied: tool.handler(async (db, decision) => {
              await tool.insert(db, decision.event.eventId);
              if (decision.event.eventId === ids[1]) throw new Error('this one fails');
              return { id: decision.event.eventId };
            }),
          },
        );
        assert.deepEqual(
          results.map((r) => r.outcome ?? r.error?.code),
          ['applied', 'HANDLER_FAILED', 'applied'],
        );
        assert.equal(results[1].error.details.eventId, ids[1]);
        assert.deepEqual([await hasRow(ids[0]), await hasRow(ids[1]), await hasRow(ids[2])], [true, false, true]);
        assert.equal(await suite.store.getReceipt(ids[1]), null);
      });
    }

    it("a tool's object kept past the callback is refused; options that would point the tool elsewhere are refused", async () => {
      const ns = uniquePrefix();
      let kept;
      await processEvent(suite.store, request(`${ns}:k`, `${ns}:k`), {
        ruleSet,
        onApplied: withKysely((db) => {
          kept = db;
        }),
      });
      const late = await outcomeOf(
        kept
          .insertInto(table)
          .values({ event_id: `${ns}:late`, order_id: 'x' })
          .execute(),
      );
      assert.equal(late.error?.code, 'INVALID_ARGUMENT');
      assert.equal(late.error.details.reason, 'after-transaction');
      assert.equal(await hasRow(`${ns}:late`), false);
      for (const [make, key] of [
        [() => withDrizzle(() => null, { client: {} }), 'client'],
        [() => withKysely(() => null, { dialect: {} }), 'dialect'],
        [() => withKnex(() => null, { connection: {} }), 'connection'],
      ]) {
        assert.throws(make, (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === `options.${key}`);
      }
      if (backend.id === 'pglite') {
        const knexOnPglite = await outcomeOf(suite.store.transaction((tx) => knexTransaction(tx, () => null)));
        assert.equal(knexOnPglite.error?.code, 'INVALID_ARGUMENT');
        assert.equal(knexOnPglite.error.details.reason, 'driver not supported');
      }
    });
  });
}

describe('the helpers refuse what is not theirs', () => {
  it('a helper given no function, and a transaction that is not a SQL store’s, are INVALID_ARGUMENT; nothing is written', async () => {
    for (const helper of [withDrizzle, withKysely, withKnex]) {
      assert.throws(
        () => helper({}),
        (error) => error.code === 'INVALID_ARGUMENT' && error.details.reason === 'not a function',
      );
    }
    const store = new InMemoryStore();
    for (const [i, helper] of [withDrizzle, withKysely, withKnex].entries()) {
      const outcome = await outcomeOf(
        processEvent(store, request(`mem:${i}`, `mem:${i}`), { ruleSet, onApplied: helper(() => assert.fail('ran')) }),
      );
      assert.equal(outcome.error?.code, 'INVALID_ARGUMENT');
      assert.equal(outcome.error.details.reason, 'not a SQL store transaction');
      assert.equal(await store.getReceipt(`mem:${i}`), null);
    }
    await assert.rejects(drizzleOf({ client: {} }), (error) => error.code === 'INVALID_ARGUMENT');
  });

  it('without the tool installed, the entry point loads and its helper fails with INVALID_ARGUMENT naming the package', () => {
    // The installed package and better-sqlite3 alone, in a node_modules of their own: no drizzle-orm, kysely, knex, typeorm or Prisma.
    const dir = mkdtempSync(join(tmpdir(), 'idemflow-no-tools-'));
    try {
      const modules = join(dir, 'node_modules');
      mkdirSync(modules);
      const installed = fileURLToPath(new URL('../node_modules/', import.meta.url));
      // idemflow copied (a symlink would resolve to the test project, where the tools are); the driver linked.
      cpSync(join(installed, 'idemflow'), join(modules, 'idemflow'), { recursive: true });
      symlinkSync(join(installed, 'better-sqlite3'), join(modules, 'better-sqlite3'));
      const script = `
        const Database = require('better-sqlite3');
        const { processEvent, RuleSet } = require('idemflow');
        const { SqliteStore } = require('idemflow/sqlite');
        class SomeClient { $transaction() {} }
        const withPrisma = (fn) => require('idemflow/prisma').withPrisma(SomeClient, fn);
        const helpers = [require('idemflow/drizzle').withDrizzle, require('idemflow/kysely').withKysely, require('idemflow/knex').withKnex, withPrisma];
        (async () => {
          const store = new SqliteStore(new Database(':memory:'));
          await store.migrate();
          const seen = [];
          for (const [i, helper] of helpers.entries()) {
            try {
              await processEvent(store, { eventId: 'e' + i, workflowId: 'o' + i, type: 'SHIPMENT_REQUESTED' }, { ruleSet: RuleSet.builtin('order-shipment'), onApplied: helper(() => null) });
              seen.push('applied');
            } catch (error) {
              seen.push([error.code, error.details.field, error.details.reason, await store.getReceipt('e' + i)]);
            }
          }
          process.stdout.write(JSON.stringify(seen));
        })();`;
      const run = spawnSync(process.execPath, ['-e', script], { cwd: dir, encoding: 'utf8' });
      assert.equal(run.status, 0, run.stderr);
      assert.deepEqual(JSON.parse(run.stdout), [
        ['INVALID_ARGUMENT', 'drizzle-orm', 'peer dependency not installed', null],
        ['INVALID_ARGUMENT', 'kysely', 'peer dependency not installed', null],
        ['INVALID_ARGUMENT', 'knex', 'peer dependency not installed', null],
        ['INVALID_ARGUMENT', '@prisma/adapter-better-sqlite3', 'peer dependency not installed', null],
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the entry points load without importing the tools', () => {
    const script = `
      require('idemflow/drizzle'); require('idemflow/kysely'); require('idemflow/knex'); require('idemflow/typeorm'); require('idemflow/prisma');
      const loaded = Object.keys(require.cache).filter((f) => /node_modules[\\\\/](drizzle-orm|kysely|knex|typeorm|@prisma|prisma)[\\\\/]/.test(f));
      process.stdout.write(JSON.stringify(loaded));`;
    const run = spawnSync(process.execPath, ['-e', script], { cwd: fileURLToPath(new URL('..', import.meta.url)), encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), []);
  });
});

// ---- docs/adapters.md's recipes, as written: Drizzle on PGlite, Kysely and Knex on SQLite

const DOC = readFileSync(new URL('../../../docs/adapters.md', import.meta.url), 'utf8');

/** The docs' js block that imports `entry`, its imports taken out, run with `names`: its onApplied. */
function recipe(entry, names) {
  const block = [...DOC.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes(`from '${entry}'`));
  assert.ok(block, `docs/adapters.md has a block importing ${entry}`);
  const code = block.replace(/^import [\s\S]*?;$/gm, '');
  return new Function(...Object.keys(names), `${code}\nreturn onApplied;`)(...Object.values(names));
}

describe("docs/adapters.md's Drizzle, Kysely and Knex recipes", () => {
  it('each runs as written: the shipment and the receipt commit together, and a duplicate answers the same output', async () => {
    const { PGlite } = await import('@electric-sql/pglite');
    const { PostgresStore } = await import('idemflow/postgres');
    const { SqliteStore } = await import('idemflow/sqlite');
    const { default: Database } = await import('better-sqlite3');
    const pgCore = await import('drizzle-orm/pg-core');
    const pglite = new PGlite();
    const sqlite = new Database(':memory:');
    try {
      await pglite.exec('CREATE TABLE shipments (id SERIAL PRIMARY KEY, order_id TEXT NOT NULL)');
      sqlite.exec('CREATE TABLE shipments (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL); CREATE TABLE audit (shipment_id INTEGER)');
      const pgStore = new PostgresStore(pglite);
      const sqliteStore = new SqliteStore(sqlite);
      await pgStore.migrate();
      await sqliteStore.migrate();
      const cases = [
        ['drizzle', pgStore, recipe('idemflow/drizzle', { withDrizzle, ...pgCore }), [{ shipmentId: 1 }]],
        ['kysely', sqliteStore, recipe('idemflow/kysely', { withKysely }), { shipmentId: 1 }],
        ['knex', sqliteStore, recipe('idemflow/knex', { withKnex }), { shipmentId: 2 }],
      ];
      for (const [name, store, onApplied, output] of cases) {
        const event = request(`docs:${name}`, `docs:${name}`);
        const first = await processEvent(store, event, { ruleSet, onApplied });
        assert.equal(first.outcome, 'applied', name);
        assert.deepEqual(first.output, output, name);
        const again = await processEvent(store, event, { ruleSet, onApplied });
        assert.deepEqual(again.original.output, output, `${name}: the duplicate answers the same shipment`);
      }
      assert.equal((await pglite.query('SELECT COUNT(*)::int AS n FROM shipments')).rows[0].n, 1);
      assert.equal(sqlite.prepare('SELECT COUNT(*) AS n FROM shipments').get().n, 2);
      assert.equal(sqlite.prepare('SELECT COUNT(*) AS n FROM audit').get().n, 0, "the Kysely recipe's audit transaction rolled back alone");
    } finally {
      await pglite.close();
      sqlite.close();
    }
  });

  it("what not to do: an isolation level on the tool's own transaction is refused (transaction-control), nothing written", async () => {
    const { PGlite } = await import('@electric-sql/pglite');
    const { PostgresStore } = await import('idemflow/postgres');
    const pglite = new PGlite();
    try {
      await pglite.exec('CREATE TABLE shipments (id SERIAL PRIMARY KEY, order_id TEXT NOT NULL)');
      const store = new PostgresStore(pglite);
      await store.migrate();
      const { pgTable, serial, text } = await import('drizzle-orm/pg-core');
      const shipments = pgTable('shipments', { id: serial('id').primaryKey(), orderId: text('order_id').notNull() });
      for (const [name, onApplied] of [
        [
          'drizzle',
          withDrizzle((db) => db.transaction((trx) => trx.insert(shipments).values({ orderId: 'x' }), { isolationLevel: 'serializable' })),
        ],
        [
          'kysely',
          withKysely((db) =>
            db
              .transaction()
              .setIsolationLevel('serializable')
              .execute((trx) => trx.insertInto('shipments').values({ order_id: 'x' }).execute()),
          ),
        ],
      ]) {
        const outcome = await outcomeOf(processEvent(store, request(`iso:${name}`, `iso:${name}`), { ruleSet, onApplied }));
        assert.equal(outcome.error?.code, 'INVALID_ARGUMENT', `${name}: ${outcome.error?.message}`);
        assert.equal(outcome.error.details.reason, 'transaction-control', name);
      }
      assert.equal((await pglite.query('SELECT COUNT(*)::int AS n FROM shipments')).rows[0].n, 0);
    } finally {
      await pglite.close();
    }
  });
});
