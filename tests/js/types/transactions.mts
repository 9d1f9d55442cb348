// The transaction classes each adapter entry point exports (from import and
// require alike) are typed as the DurableStoreTransaction a store hands to
// transaction(fn), and cannot be constructed by a host.

import { MongoTransaction } from 'idemflow/mongodb';
import { MysqlTransaction } from 'idemflow/mysql';
import { PostgresTransaction } from 'idemflow/postgres';
import { type DurableStoreTransaction, type SqliteStore, SqliteTransaction } from 'idemflow/sqlite';

declare const store: SqliteStore;

const kinds: string[] = await store.transaction(async (tx: DurableStoreTransaction) => [
  tx instanceof SqliteTransaction ? 'sqlite' : '',
  tx instanceof PostgresTransaction ? 'postgres' : '',
  tx instanceof MysqlTransaction ? 'mysql' : '',
  tx instanceof MongoTransaction ? 'mongodb' : '',
]);

function reads(tx: SqliteTransaction | PostgresTransaction | MysqlTransaction | MongoTransaction): DurableStoreTransaction {
  return tx;
}

// @ts-expect-error a transaction comes from store.transaction(fn), never from new
new SqliteTransaction();

export { kinds, reads };
