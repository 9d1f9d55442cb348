// Where the example workers keep their state: PostgreSQL through a pg Pool.
// Every process opens its own pool; the tables are shared. Configure with
//   IDEMFLOW_PG_URL        (default postgres://postgres@127.0.0.1:5432/test)
//   IDEMFLOW_TABLE_PREFIX  (default swaps_example: swaps_example_workflows, _inbox, _outbox)

import { createDeliveryHandler } from 'idemflow';
import { PostgresStore } from 'idemflow/postgres';
import pg from 'pg';

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

/**
 * What a broker worker runs on: the store (its tables migrated) and the
 * delivery handler, whose retry hints come from RETRY_BASE_DELAY_MS (default
 * 500) and RETRY_MAX_DELAY_MS (default 60000).
 */
export async function openWorker() {
  const { store, close } = openStore({ poolSize: 4 });
  await store.migrate(); // idempotent
  const handle = createDeliveryHandler(store, {
    ruleSet: 'deposit-swap',
    baseDelayMs: Number(process.env.RETRY_BASE_DELAY_MS || 500),
    maxDelayMs: Number(process.env.RETRY_MAX_DELAY_MS || 60_000),
  });
  return { store, close, handle };
}

/** The fields of a verdict's error a worker logs: its code and, when it has them, the field, reason and workflow. */
export function errorFields(verdict) {
  if (!verdict.error) return {};
  const { field, reason, workflowId } = verdict.error.details;
  return { code: verdict.error.code, field, reason, workflowId };
}

/** One JSON line per thing that happened: easy to read, easy to grep, easy for a test to follow. */
export function log(fields) {
  process.stdout.write(`${JSON.stringify({ pid: process.pid, ...fields })}\n`);
}
