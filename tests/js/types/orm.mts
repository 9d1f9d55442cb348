// A strict consumer of idemflow/drizzle, idemflow/kysely, idemflow/knex, idemflow/typeorm and idemflow/prisma, checked by
// `tsc -p tsconfig.json`: the helpers take callbacks typed with the tools' own types and
// are an onApplied and idempotent()'s work as they are.

import Database from 'better-sqlite3';
import { idempotent, processBatch, processEvent, RuleSet } from 'idemflow';
import { drizzleOf, withDrizzle } from 'idemflow/drizzle';
import { knexTransaction, withKnex } from 'idemflow/knex';
import { kyselyOf, withKysely } from 'idemflow/kysely';
import { SqliteStore } from 'idemflow/sqlite';
import type { Knex } from 'knex';
import type { Generated, Kysely } from 'kysely';

// drizzle-orm's own declarations do not compile under skipLibCheck: false, so its db's
// type stands in here by shape (the helper takes the type named on the callback's parameter).
interface NodePgDatabase {
  insert(table: 'shipments'): { values(row: { orderId: string }): Promise<unknown> & { returning(): Promise<{ id: number }[]> } };
}
interface Database_ {
  shipments: { id: Generated<number>; order_id: string };
}

const store = new SqliteStore(new Database(':memory:'));
const ruleSet = RuleSet.builtin('order-shipment');
const event = { eventId: 'e1', workflowId: 'o1', type: 'SHIPMENT_REQUESTED' };

await processEvent(store, event, {
  ruleSet,
  onApplied: withDrizzle((db: NodePgDatabase, decision) =>
    db.insert('shipments').values({ orderId: decision.event.workflowId }).returning(),
  ),
});
await processBatch(store, [event], {
  ruleSet,
  onApplied: withKysely(async (db: Kysely<Database_>, decision) => {
    await db.insertInto('shipments').values({ order_id: decision.event.workflowId }).execute();
    return { shipped: true };
  }),
});
await processEvent(store, event, {
  ruleSet,
  onApplied: withKnex((trx: Knex.Transaction, decision) => trx('shipments').insert({ order_id: decision.event.workflowId })),
});
const keyed = await idempotent(
  store,
  { key: 'k', payload: 1 },
  withKnex((trx: Knex.Transaction) => trx('shipments').count()),
);
void keyed.replayed;
await store.transaction(async (tx) => {
  const db = await drizzleOf<NodePgDatabase>(tx);
  await db.insert('shipments').values({ orderId: 'x' });
  const k = await kyselyOf<Kysely<Database_>>(tx);
  await k.selectFrom('shipments').selectAll().execute();
  const n: number = await knexTransaction(tx, async (trx: Knex.Transaction) => (await trx('shipments')).length);
  void n;
});
// @ts-expect-error a helper takes a function
withKysely({});
// @ts-expect-error the connection is idemflow's
withKnex(() => null, { connection: 'postgres://elsewhere' });

// TypeORM: the EntityManager's type named on the callback's parameter.
import { typeormManager, withTypeorm } from 'idemflow/typeorm';
import { type EntityManager, EntitySchema } from 'typeorm';

const Shipment = new EntitySchema<{ id: number; orderId: string }>({
  name: 'Shipment',
  columns: { id: { type: Number, primary: true, generated: true }, orderId: { type: String } },
});
const typeormOptions = { entities: [Shipment] };
await processEvent(store, event, {
  ruleSet,
  onApplied: withTypeorm(async (manager: EntityManager, decision) => {
    const saved = await manager.save(Shipment, { orderId: decision.event.workflowId });
    return { shipmentId: saved.id };
  }, typeormOptions),
});
await store.transaction((tx) => typeormManager(tx, typeormOptions, (manager: EntityManager) => manager.count(Shipment)));
// @ts-expect-error the connection is idemflow's
withTypeorm(() => null, { entities: [], host: 'elsewhere' });

// Prisma: the generated client's class (declared here by shape: the test suite generates its own at run time).
import { prismaTransaction, withPrisma } from 'idemflow/prisma';

declare class PrismaClient {
  constructor(options?: { log?: string[]; adapter?: unknown });
  shipment: { create(args: { data: { orderId: string } }): Promise<{ id: number; orderId: string }> };
  $transaction<T>(fn: (prisma: Omit<PrismaClient, '$connect' | '$disconnect'>) => Promise<T>): Promise<T>;
  $connect(): Promise<void>;
  $disconnect(): Promise<void>;
}
await processEvent(store, event, {
  ruleSet,
  onApplied: withPrisma(PrismaClient, async (prisma, decision) => {
    const shipment = await prisma.shipment.create({ data: { orderId: decision.event.workflowId } });
    return { shipmentId: shipment.id };
  }),
});
const created: { id: number } = await store.transaction((tx) =>
  prismaTransaction(tx, PrismaClient, (prisma) => prisma.shipment.create({ data: { orderId: 'x' } }), { schema: 'app' }),
);
void created;
// @ts-expect-error the transaction client has no $connect
withPrisma(PrismaClient, (prisma) => prisma.$connect());
// @ts-expect-error the adapter is idemflow's
withPrisma(PrismaClient, () => null, { adapter: {} });
// @ts-expect-error the class, not an instance
withPrisma(new PrismaClient(), () => null);
