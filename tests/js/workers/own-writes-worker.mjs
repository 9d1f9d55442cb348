// A worker for the own-writes kill test: it delivers one SHIPMENT_REQUESTED
// with an onApplied that writes a shipment row, through tx.client or, with
// `tool` in its config, through a tool's helper (drizzle, kysely, knex,
// typeorm, prisma: `prismaClient` is the directory of a generated client).
// With IDEMFLOW_HANG_IN_CALLBACK it reports 'inside' once the row is written
// and waits there (the test SIGKILLs it); otherwise it reports the outcome.
import { createRequire } from 'node:module';
import { RuleSet } from 'idemflow';
import { openStore } from './backends.mjs';
import { typeormShipments } from './host-tables.mjs';

const { kind, table, eventId, orderId, tool = 'raw', prismaClient, ...options } = JSON.parse(process.env.IDEMFLOW_OWN_WRITES);
const hang = process.env.IDEMFLOW_HANG_IN_CALLBACK === '1';
const helper = await openStore(kind, options);
const row = { event_id: eventId, order_id: orderId };

/** onApplied of `tool` that runs `write` and then `after()` (the hang, or nothing). */
async function handlerOf(after) {
  switch (tool) {
    case 'raw':
      return async (tx) => {
        if (kind === 'pg') await tx.client.query(`INSERT INTO "${table}" (event_id, order_id) VALUES ($1, $2)`, [eventId, orderId]);
        else if (kind === 'mysql') await tx.client.query(`INSERT INTO \`${table}\` (event_id, order_id) VALUES (?, ?)`, [eventId, orderId]);
        else tx.client.prepare(`INSERT INTO "${table}" (event_id, order_id) VALUES (?, ?)`).run(eventId, orderId);
        return after();
      };
    case 'drizzle': {
      const { withDrizzle } = await import('idemflow/drizzle');
      const core = await import({ pg: 'drizzle-orm/pg-core', mysql: 'drizzle-orm/mysql-core', sqlite: 'drizzle-orm/sqlite-core' }[kind]);
      const shipments = {
        pg: () => core.pgTable(table, { eventId: core.text('event_id').notNull(), orderId: core.text('order_id').notNull() }),
        mysql: () =>
          core.mysqlTable(table, {
            eventId: core.varchar('event_id', { length: 200 }).notNull(),
            orderId: core.varchar('order_id', { length: 200 }).notNull(),
          }),
        sqlite: () => core.sqliteTable(table, { eventId: core.text('event_id').notNull(), orderId: core.text('order_id').notNull() }),
      }[kind]();
      return withDrizzle(async (db) => {
        const insert = db.insert(shipments).values({ eventId, orderId });
        await (kind === 'sqlite' ? insert.run() : insert);
        return after();
      });
    }
    case 'kysely': {
      const { withKysely } = await import('idemflow/kysely');
      return withKysely(async (db) => {
        await db.insertInto(table).values(row).execute();
        return after();
      });
    }
    case 'knex': {
      const { withKnex } = await import('idemflow/knex');
      return withKnex(async (trx) => {
        await trx(table).insert(row);
        return after();
      });
    }
    case 'typeorm': {
      const { withTypeorm } = await import('idemflow/typeorm');
      const { EntitySchema } = await import('typeorm');
      const Shipment = typeormShipments(EntitySchema, table);
      return withTypeorm(
        async (manager) => {
          await manager.insert(Shipment, { eventId, orderId });
          return after();
        },
        { entities: [Shipment], ...{ sqlite: { type: 'better-sqlite3' }, mysql: { type: 'mariadb' } }[kind] },
      );
    }
    case 'prisma': {
      const { withPrisma } = await import('idemflow/prisma');
      const { PrismaClient } = createRequire(import.meta.url)(prismaClient);
      return withPrisma(PrismaClient, async (prisma) => {
        await prisma.shipment.create({ data: { eventId, orderId } });
        return after();
      });
    }
    default:
      throw new Error(`no tool ${tool}`);
  }
}

const onApplied = await handlerOf(async () => {
  if (hang) {
    process.send('inside');
    await new Promise(() => {}); // until the test kills this process
  }
  return { shipped: orderId };
});
const result = await helper.store.process(
  { eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' },
  { ruleSet: RuleSet.builtin('order-shipment'), onApplied },
);
process.send({ outcome: result.outcome, output: result.output ?? result.original?.output ?? null });
await helper.close();
process.exit(0);
