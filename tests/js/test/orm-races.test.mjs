// A race lost by the host's own statement through a tool's helper re-runs
// the cycle, as idemflow's own lost races do, on PostgreSQL and MariaDB:
// two deliveries of different events both look for the host's row, find
// none, and insert it; the second insert waits on the first's key and,
// when the first commits, fails with a unique violation (raised by the
// tool's own statement, in the tool's own error type). That delivery runs
// again, finds the row and applies without writing it: both events apply,
// one row. A callback that keeps failing so is still bounded (raceRetries).
// SQLite runs one transaction at a time and has no such race.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { processEvent, RuleSet } from 'idemflow';
import { withDrizzle } from 'idemflow/drizzle';
import { withKnex } from 'idemflow/knex';
import { withKysely } from 'idemflow/kysely';
import { withPrisma } from 'idemflow/prisma';
import { withTypeorm } from 'idemflow/typeorm';
import { EntitySchema } from 'typeorm';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf, typeormShipments } from '../workers/host-tables.mjs';
import { prismaClientFor } from '../workers/prisma-client.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });

/** Each tool's `find(db, key)` (the row or nothing) and `insert(db, key)` of the host's row keyed `key` (event_id is unique). */
async function toolsOf(kind, table) {
  const { eq } = await import('drizzle-orm');
  const core = kind === 'mysql' ? await import('drizzle-orm/mysql-core') : await import('drizzle-orm/pg-core');
  const d =
    kind === 'mysql'
      ? core.mysqlTable(table, {
          eventId: core.varchar('event_id', { length: 200 }).notNull(),
          orderId: core.varchar('order_id', { length: 200 }).notNull(),
        })
      : core.pgTable(table, { eventId: core.text('event_id').notNull(), orderId: core.text('order_id').notNull() });
  const Shipment = typeormShipments(EntitySchema, table);
  const tools = {
    drizzle: {
      handler: (fn) => withDrizzle(fn),
      find: async (db, key) => (await db.select().from(d).where(eq(d.eventId, key)))[0],
      insert: (db, key) => db.insert(d).values({ eventId: key, orderId: key }),
    },
    kysely: {
      handler: (fn) => withKysely(fn),
      find: (db, key) => db.selectFrom(table).select('event_id').where('event_id', '=', key).executeTakeFirst(),
      insert: (db, key) => db.insertInto(table).values({ event_id: key, order_id: key }).execute(),
    },
    knex: {
      handler: (fn) => withKnex(fn),
      find: (trx, key) => trx(table).where({ event_id: key }).first(),
      insert: (trx, key) => trx(table).insert({ event_id: key, order_id: key }),
    },
    typeorm: {
      handler: (fn) => withTypeorm(fn, typeormOptions),
      find: (manager, key) => manager.findOneBy(Shipment, { eventId: key }),
      insert: (manager, key) => manager.insert(Shipment, { eventId: key, orderId: key }),
    },
  };
  const typeormOptions = { entities: [Shipment], ...(kind === 'mysql' ? { type: 'mariadb' } : {}) };
  {
    const PrismaClient = prismaClientFor(kind === 'mysql' ? 'mysql' : 'postgresql', table);
    tools.prisma = {
      handler: (fn) => withPrisma(PrismaClient, fn),
      find: (prisma, key) => prisma.shipment.findUnique({ where: { eventId: key } }),
      insert: (prisma, key) => prisma.shipment.create({ data: { eventId: key, orderId: key } }),
    };
  }
  return tools;
}

/** A promise each of `n` callers awaits until all `n` have come: their first attempts meet here. */
function barrier(n) {
  let arrived = 0;
  let open;
  const opened = new Promise((resolve) => {
    open = resolve;
  });
  return () => {
    arrived += 1;
    if (arrived === n) open();
    return opened;
  };
}

for (const backend of BACKENDS) {
  if (backend.id !== 'pg' && backend.id !== 'mysql') continue;
  describe(`a race lost by a tool's own statement, on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    const table = `${uniquePrefix()}_races`;
    let tools;
    before(async () => {
      await shipmentsOf(backend.id, suite.helper, table).create();
      tools = await toolsOf(backend.id, table);
    });
    const rowsKeyed = async (key) => {
      const sql =
        backend.id === 'mysql'
          ? `SELECT COUNT(*) AS n FROM \`${table}\` WHERE event_id = ?`
          : `SELECT COUNT(*) AS n FROM "${table}" WHERE event_id = $1`;
      return Number((await suite.helper.query(sql, [key]))[0].n);
    };

    for (const name of ['drizzle', 'kysely', 'knex', 'typeorm', 'prisma']) {
      it(`${name}: a unique violation of its insert runs the delivery again, which finds the row: both apply, one row`, async () => {
        const tool = tools[name];
        const ns = uniquePrefix();
        const key = `${ns}:shared`;
        const meet = barrier(2);
        const attempts = [];
        const onApplied = tool.handler(async (db, decision) => {
          const id = decision.event.eventId;
          attempts.push(id);
          const found = await tool.find(db, key);
          if (attempts.filter((a) => a === id).length === 1) await meet();
          if (!found) await tool.insert(db, key);
          return { wrote: !found };
        });
        const results = await Promise.all(
          [request(`${ns}:a`, `${ns}:a`), request(`${ns}:b`, `${ns}:b`)].map((event) =>
            outcomeOf(processEvent(suite.store, event, { ruleSet, onApplied })),
          ),
        );
        assert.deepEqual(
          results.map((r) => r.outcome ?? `${r.error?.code}: ${r.error?.message}`),
          ['applied', 'applied'],
        );
        assert.deepEqual(results.map((r) => r.output.wrote).sort(), [false, true], 'one wrote the row, the one run again found it');
        assert.equal(attempts.length, 3, `the loser ran again: ${attempts}`);
        assert.equal(await rowsKeyed(key), 1);
      });
    }

    it('a callback whose statement loses every time is run raceRetries more times, then fails with CONCURRENT_UPDATE, nothing written', async () => {
      const tool = tools.kysely;
      const ns = uniquePrefix();
      const key = `${ns}:taken`;
      await suite.store.transaction((tx) => shipmentsOf(backend.id, suite.helper, table).insert(tx, key, key));
      let runs = 0;
      const outcome = await outcomeOf(
        processEvent(suite.store, request(`${ns}:c`, `${ns}:c`), {
          ruleSet,
          raceRetries: 2,
          onApplied: tool.handler(async (db) => {
            runs += 1;
            await tool.insert(db, key);
          }),
        }),
      );
      assert.equal(outcome.error?.code, 'CONCURRENT_UPDATE', String(outcome.error));
      assert.equal(outcome.error.details.reason, 'unique-violation');
      assert.equal(runs, 3, 'the first run and two re-runs');
      assert.equal(await suite.store.getReceipt(`${ns}:c`), null);
      assert.equal(await rowsKeyed(key), 1);
    });
  });
}
