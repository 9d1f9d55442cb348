// Where the example workers keep their state: PostgreSQL through a pg Pool.
// Every process opens its own pool; the tables are shared. Configure with
//   IDEMFLOW_PG_URL        (default postgres://postgres@127.0.0.1:5432/test)
//   IDEMFLOW_TABLE_PREFIX  (default swaps_example: swaps_example_workflows, _inbox, _outbox)
import pg from 'pg';
import { PostgresStore } from 'idemflow/postgres';

export const PG_URL = process.env.IDEMFLOW_PG_URL || 'postgres://postgres@127.0.0.1:5432/test';
export const TABLE_PREFIX = process.env.IDEMFLOW_TABLE_PREFIX || 'swaps_example';

export function tableNames(prefix = TABLE_PREFIX) {
  return { workflows: `${prefix}_workflows`, inbox: `${prefix}_inbox`, outbox: `${prefix}_outbox` };
}

/** A PostgresStore over a pool of `poolSize` connections; `close()` ends the pool. */
export function openStore({ poolSize = 4, prefix = TABLE_PREFIX } = {}) {
  const pool = new pg.Pool({ connectionString: PG_URL, max: poolSize });
  // An idle connection that loses its server emits 'error'; the next query
  // reports the outage as STORE_UNAVAILABLE, which the handler answers with retry.
  pool.on('error', () => {});
  const store = new PostgresStore(pool, { tables: tableNames(prefix) });
  return { store, pool, close: () => pool.end() };
}

/** One JSON line per thing that happened: easy to read, easy to grep, easy for a test to follow. */
export function log(fields) {
  process.stdout.write(`${JSON.stringify({ pid: process.pid, ...fields })}\n`);
}
