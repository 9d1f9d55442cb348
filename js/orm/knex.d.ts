// idemflow/knex: Knex over idemflow's transaction (docs/adapters.md, "Drizzle, Kysely, Knex, TypeORM, Prisma").
import type { BoundCallback, BoundHandler } from './types.js';

export type { BoundCallback, BoundHandler } from './types.js';

/** Knex's own config without client, connection or pool (idemflow's connection): postProcessResponse, wrapIdentifier, useNullAsDefault. */
export interface KnexConfig {
  postProcessResponse?: (result: unknown, queryContext: unknown) => unknown;
  wrapIdentifier?: (value: string, origImpl: (value: string) => string, queryContext: unknown) => string;
  useNullAsDefault?: boolean;
  client?: never;
  connection?: never;
  pool?: never;
}

/**
 * An onApplied (or idempotent()'s work) that runs `fn(trx, decision)` in a Knex transaction on idemflow's
 * connection (pg, mysql2, better-sqlite3): a savepoint of idemflow's transaction, committed with the
 * receipt; trx.transaction() nests. Name trx's type on `fn`'s parameter (Knex.Transaction).
 */
// biome-ignore lint/suspicious/noExplicitAny: the transaction's type is Knex's
export function withKnex<Trx = any>(fn: BoundCallback<Trx>, config?: KnexConfig): BoundHandler;

/** Runs `fn(trx)` in a Knex transaction on idemflow's transaction `tx` (an Idempotency-Key handler's `req.idempotency.tx`). */
// biome-ignore lint/suspicious/noExplicitAny: as withKnex
export function knexTransaction<T, Trx = any>(tx: unknown, fn: (trx: Trx) => Promise<T> | T, config?: KnexConfig): Promise<T>;
