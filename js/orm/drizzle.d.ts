// idemflow/drizzle: Drizzle ORM over idemflow's transaction (docs/adapters.md, "Drizzle, Kysely, Knex, TypeORM, Prisma").
import type { BoundCallback, BoundHandler } from './types.js';

export type { BoundCallback, BoundHandler } from './types.js';

/** Drizzle's own config without `client` or `connection`: schema, casing, logger, and mode on MySQL (default 'default'). */
export interface DrizzleConfig {
  schema?: Record<string, unknown>;
  casing?: 'snake_case' | 'camelCase';
  logger?: unknown;
  mode?: 'default' | 'planetscale';
  client?: never;
  connection?: never;
}

/**
 * An onApplied (or idempotent()'s work) that runs `fn(db, decision)` with a Drizzle db over idemflow's
 * transaction, with the store's driver (node-postgres, PGlite, mysql2, better-sqlite3): its writes commit
 * with the receipt, its db.transaction() is a savepoint. Name the db's type on `fn`'s parameter
 * (NodePgDatabase, MySql2Database, BetterSQLite3Database, PgliteDatabase).
 */
// biome-ignore lint/suspicious/noExplicitAny: the db's type is the caller's (its driver and schema)
export function withDrizzle<Db = any>(fn: BoundCallback<Db>, config?: DrizzleConfig): BoundHandler;

/** A Drizzle db over idemflow's transaction `tx` (an Idempotency-Key handler's `req.idempotency.tx`, a store.transaction()'s). */
// biome-ignore lint/suspicious/noExplicitAny: as withDrizzle
export function drizzleOf<Db = any>(tx: unknown, config?: DrizzleConfig): Promise<Db>;
