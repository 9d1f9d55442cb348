// idemflow/kysely: Kysely over idemflow's transaction (docs/adapters.md, "Drizzle, Kysely, Knex, TypeORM, Prisma").
import type { BoundCallback, BoundHandler } from './types.js';

export type { BoundCallback, BoundHandler } from './types.js';

/** Kysely's own config without `dialect`: plugins, log. */
export interface KyselyConfig {
  plugins?: unknown[];
  log?: unknown;
  dialect?: never;
}

/**
 * An onApplied (or idempotent()'s work) that runs `fn(db, decision)` with a Kysely over idemflow's
 * transaction (PostgreSQL, PGlite, MySQL/MariaDB, better-sqlite3): its queries commit with the receipt,
 * its db.transaction() is a savepoint. Name the db's type on `fn`'s parameter (Kysely<Database>).
 */
// biome-ignore lint/suspicious/noExplicitAny: the db's type is the caller's (Kysely<Database>)
export function withKysely<Db = any>(fn: BoundCallback<Db>, config?: KyselyConfig): BoundHandler;

/** A Kysely over idemflow's transaction `tx` (an Idempotency-Key handler's `req.idempotency.tx`, a store.transaction()'s). */
// biome-ignore lint/suspicious/noExplicitAny: as withKysely
export function kyselyOf<Db = any>(tx: unknown, config?: KyselyConfig): Promise<Db>;
