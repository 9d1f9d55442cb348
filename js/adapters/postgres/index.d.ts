// idemflow/postgres: PostgreSQL over a pg Pool or Client, or PGlite in process.
import type { DurableStore, DurableStoreTransaction, StoreOptions, TimeoutOptions } from '../../store/types.js';
import { StoreBase } from '../../store/types.js';

export type {
  DurableStore,
  DurableStoreTransaction,
  OperationStatus,
  RecordedReceipt,
  StoredOperation,
  StoreOptions,
  TableNames,
  TimeoutOptions,
} from '../../store/types.js';
export { DEFAULT_TABLES, isStoreUnavailable, STORE_UNAVAILABLE } from '../../store/types.js';

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
  query<_T>(query: string, params?: unknown[]): Promise<PostgresResult>;
  exec(query: string): Promise<unknown>;
  transaction<T>(callback: (tx: { query<_R>(query: string, params?: unknown[]): Promise<PostgresResult> }) => Promise<T>): Promise<T>;
}

/**
 * A durable store over PostgreSQL: a connection per transaction from a Pool, or transactions queued on one Client or PGlite.
 * An outbox store too: a claim is one statement that locks due rows FOR UPDATE SKIP LOCKED.
 */
export declare class PostgresStore<
  Db extends PostgresPool | PostgresClient | PGliteLike = PostgresPool | PostgresClient | PGliteLike,
> extends StoreBase {
  constructor(db: Db, options?: StoreOptions & TimeoutOptions);
  /** The pg Pool, pg Client or PGlite instance the store works through (the host owns and closes it). */
  readonly client: Db;
}
/** Every member of the DurableStore contract (declaration merging keeps them in one place). */
export interface PostgresStore<Db extends PostgresPool | PostgresClient | PGliteLike = PostgresPool | PostgresClient | PGliteLike>
  extends DurableStore<PostgresTransaction<Db>> {
  now(): number;
}

/** What `tx.client` is over `Db`: the client checked out of a Pool, the Client itself, or PGlite's transaction. */
export type PostgresTransactionClient<Db> = Db extends PostgresPool
  ? PostgresClient & { release(err?: Error | boolean): void }
  : Db extends PGliteLike
    ? Parameters<Parameters<Db['transaction']>[0]>[0]
    : Db;

/**
 * The handle `PostgresStore.transaction(fn)` passes to `fn`; exported so a host can
 * recognise it (`instanceof`), not to be constructed.
 */
export declare class PostgresTransaction<Db = PostgresPool | PostgresClient | PGliteLike> {
  private constructor();
}
export interface PostgresTransaction<Db = PostgresPool | PostgresClient | PGliteLike> extends DurableStoreTransaction {
  /**
   * The connection of this transaction, guarded: the host's statements on it commit or roll back with
   * idemflow's; its BEGIN/COMMIT/ROLLBACK become a savepoint of idemflow's transaction, and control that
   * cannot be mapped is refused with INVALID_ARGUMENT (docs/adapters.md, "What the guard maps, and what it refuses").
   */
  readonly client: PostgresTransactionClient<Db>;
}
