// idemflow/prisma: Prisma ORM 7 over idemflow's transaction (docs/adapters.md, "Drizzle, Kysely, Knex, TypeORM, Prisma").
import type { AppliedDecision } from '../host/types.js';
import type { BoundHandler } from './types.js';

export type { BoundHandler } from './types.js';

/** Your generated PrismaClient class (`import { PrismaClient } from` your generator's output). */
export type PrismaClientClass<Client> = new (...options: never[]) => Client;

/** The transaction client a callback gets: the generated client without its connection methods (its $transaction nests, as a savepoint). */
export type PrismaTransactionClient<Client> = Omit<Client, '$connect' | '$disconnect' | '$on' | '$extends'>;

/**
 * PrismaClient's constructor options without any of a connection (adapter, datasourceUrl, datasources,
 * accelerateUrl) or transactionOptions (log, errorFormat, omit), and `schema` on PostgreSQL.
 * Pass the same object each call: its client is made once, inside the first callback.
 */
export interface PrismaOptions {
  /** PostgreSQL: the schema the models are in, when it is not `public` (Prisma names it in every statement). */
  schema?: string;
  [option: string]: unknown;
  adapter?: never;
  datasourceUrl?: never;
  datasources?: never;
  accelerateUrl?: never;
  transactionOptions?: never;
}

/**
 * An onApplied (or idempotent()'s work) that runs `fn(prisma, decision)` with a Prisma transaction client
 * on idemflow's connection (pg through @prisma/adapter-pg, better-sqlite3 through
 * @prisma/adapter-better-sqlite3, mysql2 through @prisma/adapter-mariadb): its writes commit with the receipt, its nested $transaction() is a
 * savepoint. It returns the output (a JSON value), or a Prisma query unawaited, whose result is the
 * output when it is a JSON value.
 */
export function withPrisma<Client>(
  PrismaClient: PrismaClientClass<Client>,
  fn: (prisma: PrismaTransactionClient<Client>, decision: AppliedDecision) => unknown,
  options?: PrismaOptions,
): BoundHandler;

/** Runs `fn(prisma)` with a Prisma transaction client on idemflow's transaction `tx` (an Idempotency-Key handler's `req.idempotency.tx`). */
export function prismaTransaction<Client, T>(
  tx: unknown,
  PrismaClient: PrismaClientClass<Client>,
  fn: (prisma: PrismaTransactionClient<Client>) => Promise<T> | T,
  options?: PrismaOptions,
): Promise<T>;
