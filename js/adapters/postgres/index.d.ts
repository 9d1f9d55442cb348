// idemflow/postgres: PostgreSQL over a pg Pool or Client, or PGlite in process.
import type { DurableStore, DurableStoreTransaction, RecordedReceipt, StoredOperation, StoreOptions, TableNames, TimeoutOptions } from '../../store/types.js';
import { StoreBase } from '../../store/types.js';
import type { EventInput, ProcessOptions, ProcessResult, Workflow } from '../../index.js';

export type { DurableStore, DurableStoreTransaction, RecordedReceipt, StoredOperation, StoreOptions, TableNames, OperationStatus, TimeoutOptions } from '../../store/types.js';
export { DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } from '../../store/types.js';

/** What the store needs of a query result: pg reports rowCount, PGlite affectedRows. */
export interface PostgresResult {
  rows: unknown[];
  rowCount?: number | null;
  affectedRows?: number;
}

/** A connected pg Client (or a client checked out of a Pool). */
export interface PostgresClient {
  query(text: string, values?: unknown[]): Promise<PostgresResult>;
}

/** A pg Pool: the store checks out one client per transaction. */
export interface PostgresPool extends PostgresClient {
  readonly totalCount: number;
  connect(): Promise<PostgresClient & { release(err?: Error | boolean): void }>;
}

/** A PGlite instance. */
export interface PGliteLike {
  query<T>(query: string, params?: unknown[]): Promise<PostgresResult>;
  exec(query: string): Promise<unknown>;
  transaction<T>(callback: (tx: { query<R>(query: string, params?: unknown[]): Promise<PostgresResult> }) => Promise<T>): Promise<T>;
}

/**
 * A durable store over PostgreSQL: a connection per transaction from a Pool, or transactions queued on one Client or PGlite.
 * An outbox store too: a claim is one statement that locks due rows FOR UPDATE SKIP LOCKED.
 */
export declare class PostgresStore extends StoreBase {
  constructor(db: PostgresPool | PostgresClient | PGliteLike, options?: StoreOptions & TimeoutOptions);
  /** The pg Pool, pg Client or PGlite instance the store works through (the host owns and closes it). */
  readonly client: PostgresPool | PostgresClient | PGliteLike;
}
/** Every member of the DurableStore contract (declaration merging keeps them in one place). */
export interface PostgresStore extends DurableStore {
  now(): number;
}

/**
 * The handle `PostgresStore.transaction(fn)` passes to `fn`; exported so a host can
 * recognise it (`instanceof`), not to be constructed.
 */
export declare class PostgresTransaction {
  private constructor();
}
export interface PostgresTransaction extends DurableStoreTransaction {}
