/// <reference types="emscripten" />
// A strict consumer of the adapter entry points, checked by `tsc -p tsconfig.json`:
// each store accepts the real driver objects (types from the drivers themselves)
// and satisfies both the Store contract and the DurableStore surface.

import { PGlite } from '@electric-sql/pglite';
import Database from 'better-sqlite3';
import { IdemflowError, type JsonValue, type ProcessResult, processEvent, type Store, type Workflow } from 'idemflow';
import { MongoStore } from 'idemflow/mongodb';
import { MysqlStore } from 'idemflow/mysql';
import { PostgresStore } from 'idemflow/postgres';
import {
  DEFAULT_TABLES,
  type DurableStore,
  isStoreUnavailable,
  type RecordedReceipt,
  SqliteStore,
  STORE_UNAVAILABLE,
  type StoredOperation,
  type TableNames,
} from 'idemflow/sqlite';
import { MongoClient } from 'mongodb';
import mysqlCallbacks from 'mysql2';
import mysql from 'mysql2/promise';
import pg from 'pg';

const sqlite = new SqliteStore(new Database(':memory:'), {
  tables: { inbox: 'inbox_a' },
  busyTimeoutMs: 1000,
  synchronous: 'FULL',
  raceRetries: 7,
});
const owned: SqliteStore = SqliteStore.open('/tmp/idemflow-types.db', { driver: 'better-sqlite3', now: () => 0 });
const postgresPool = new PostgresStore(new pg.Pool({ connectionString: 'postgres://localhost/db' }));
const postgresClient = new PostgresStore(new pg.Client());
const postgresLite = new PostgresStore(new PGlite());
const mysqlPool = new MysqlStore(mysql.createPool({ uri: 'mysql://localhost/db' }), { collation: 'utf8mb4_bin' });
const mysqlCallbackPool = new MysqlStore(mysqlCallbacks.createPool({ uri: 'mysql://localhost/db' }));
const mongoClient = new MongoClient('mongodb://localhost/db?replicaSet=rs0');
const mongo = new MongoStore(mongoClient, { db: 'idemflow', tables: { workflows: 'wf' } });
const mongoOnDb = new MongoStore(mongoClient, { db: mongoClient.db('other') });

const stores: DurableStore[] = [sqlite, owned, postgresPool, postgresClient, postgresLite, mysqlPool, mysqlCallbackPool, mongo, mongoOnDb];
const contract: Store[] = stores;
const names: Readonly<TableNames> = DEFAULT_TABLES;
const code: 'STORE_UNAVAILABLE' = STORE_UNAVAILABLE;

async function useStore(store: DurableStore): Promise<void> {
  await store.migrate();
  // deposit-swap v3 keeps a deposit in the swap's deposits map until the exchange.
  const workflow: Workflow = {
    id: 'swap-42',
    status: 'deposit',
    revision: 3,
    deposits: { 'btc:tx:0': { event: 'DEPOSIT_DETECTED', amountUnits: '12500000', sequence: 1 } },
  };
  await store.putWorkflow(workflow);
  const event = {
    eventId: 'e-1',
    workflowId: 'swap-42',
    type: 'DEPOSIT_CONFIRMED',
    depositRef: 'btc:tx:0',
    amountUnits: '12500000',
    sequence: 2,
  };
  const result: ProcessResult = await store.process(event, { ruleSet: 'deposit-swap', raceRetries: 2 });
  if (result.outcome === 'applied') {
    const id: string | null = result.operationId;
    const operation: StoredOperation | null = id === null ? null : await store.getOperation(id);
    if (operation) {
      const due: number = operation.nextAttemptAt;
      const owner: string | null = operation.leaseOwner;
      void due;
      void owner;
    }
  }
  const receipt: RecordedReceipt | null = await store.getReceipt('e-1');
  const at: number | undefined = receipt?.recordedAt;
  await processEvent(store, event);
  const seen: string | null = await store.transaction(async (tx) => (await tx.getOperation('op'))?.status ?? null);
  const now: number = store.now();
  void at;
  void seen;
  void now;
}

try {
  for (const store of stores) await useStore(store);
} catch (error) {
  if (isStoreUnavailable(error) && error instanceof IdemflowError) {
    const disposition: 'reject' | 'retry' | 'reconcile' | 'fatal' = error.disposition;
    void disposition;
  }
}
await owned.close();

// @ts-expect-error a plain object is not a SQLite handle
new SqliteStore({});
// @ts-expect-error a MongoStore needs a MongoClient, not a Db
new MongoStore(mongoClient.db('x'));
// @ts-expect-error synchronous takes the PRAGMA's level names
new SqliteStore(new Database(':memory:'), { synchronous: 'fast' });

void contract;
void names;
void code;

// onApplied: tx.client is each driver's own handle bound to the transaction.
async function ownWrites(): Promise<void> {
  const order = { eventId: 'o-1', workflowId: 'order-1', type: 'SHIPMENT_REQUESTED' };
  const shipped = await sqlite.process(order, {
    ruleSet: 'order-shipment',
    onApplied: (tx, decision) => {
      const row = tx.client.prepare('INSERT INTO shipments (order_id) VALUES (?)').run(decision.event.workflowId);
      return { shipmentId: Number(row.lastInsertRowid) };
    },
  });
  if (shipped.outcome === 'applied') {
    const output: JsonValue | undefined = shipped.output;
    void output;
  }
  await postgresPool.process(order, {
    ruleSet: 'order-shipment',
    onApplied: async (tx) => {
      await tx.client.query('INSERT INTO shipments (order_id) VALUES ($1)', ['order-1']);
    },
  });
  await mongo.process(order, {
    ruleSet: 'order-shipment',
    onApplied: async (tx) => {
      await tx.client.db('shop').collection('shipments').insertOne({ orderId: 'order-1' }, { session: tx.session });
    },
  });
  await mysqlPool.transaction(async (tx) => {
    await tx.client.query('INSERT INTO swaps (id) VALUES (?)', ['swap-1']);
    await tx.putWorkflow({ id: 'swap-1', status: 'waiting', revision: 0 });
  });
  // @ts-expect-error a callback's output is JSON: a function is not
  await sqlite.process(order, { onApplied: () => () => 1 });
}
void ownWrites;
