// idemflow/typeorm: TypeORM over idemflow's transaction (docs/adapters.md, "Drizzle, Kysely, Knex, TypeORM, Prisma").
import type { BoundCallback, BoundHandler } from './types.js';

export type { BoundCallback, BoundHandler } from './types.js';

/**
 * TypeORM's DataSource options without any of a connection (url, host, port, username, password,
 * database, driver, extra, replication, poolSize) or a schema change (synchronize, migrationsRun, dropSchema):
 * entities, namingStrategy, logging, entityPrefix; `type: 'mariadb'` on MariaDB. Pass the same object each
 * call: its DataSource is made once, inside the first callback.
 */
export interface TypeormOptions {
  type?: 'postgres' | 'mysql' | 'mariadb' | 'better-sqlite3';
  entities?: unknown[];
  [option: string]: unknown;
  url?: never;
  host?: never;
  port?: never;
  username?: never;
  password?: never;
  database?: never;
  driver?: never;
  synchronize?: never;
}

/**
 * An onApplied (or idempotent()'s work) that runs `fn(manager, decision)` with a TypeORM EntityManager on
 * idemflow's connection (pg, PGlite, mysql2, better-sqlite3): its writes commit with the receipt, manager.transaction() is a
 * savepoint. Name the manager's type on `fn`'s parameter (EntityManager).
 */
// biome-ignore lint/suspicious/noExplicitAny: the manager's type is TypeORM's
export function withTypeorm<Manager = any>(fn: BoundCallback<Manager>, options: TypeormOptions): BoundHandler;

/** Runs `fn(manager)` with a TypeORM EntityManager on idemflow's transaction `tx` (an Idempotency-Key handler's `req.idempotency.tx`). */
// biome-ignore lint/suspicious/noExplicitAny: as withTypeorm
export function typeormManager<T, Manager = any>(
  tx: unknown,
  options: TypeormOptions,
  fn: (manager: Manager) => Promise<T> | T,
): Promise<T>;
