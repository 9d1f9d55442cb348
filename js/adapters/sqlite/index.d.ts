// idemflow/sqlite: the embedded store over better-sqlite3 or node:sqlite.
import type { DurableStore, DurableStoreTransaction, StoreOptions } from '../../store/types.js';
import { StoreBase } from '../../store/types.js';

export type {
  DurableStore,
  DurableStoreTransaction,
  OperationStatus,
  RecordedReceipt,
  StoredOperation,
  StoreOptions,
  TableNames,
} from '../../store/types.js';
export { DEFAULT_TABLES, isStoreUnavailable, STORE_UNAVAILABLE } from '../../store/types.js';

/** What the store needs of a synchronous SQLite handle; better-sqlite3's Database and node:sqlite's DatabaseSync both fit. */
export interface SqliteHandle {
  prepare(sql: string): {
    get(...params: unknown[]): unknown;
    all(...params: unknown[]): unknown[];
    run(...params: unknown[]): { changes: number | bigint; lastInsertRowid?: number | bigint };
  };
  exec(sql: string): unknown;
  close(): unknown;
}

export interface SqliteStoreOptions extends StoreOptions {
  /** How long a transaction waits for its callback (onApplied, idempotent()'s work) before it is rolled back and the call fails (default 30000). */
  timeoutMs?: number;
  /** PRAGMA busy_timeout: how long BEGIN IMMEDIATE waits for another writer (default 5000). */
  busyTimeoutMs?: number;
  /** PRAGMA synchronous; left as the handle has it unless given. FULL survives power loss, NORMAL (in WAL mode) a process crash. */
  synchronous?: 'OFF' | 'NORMAL' | 'FULL' | 'EXTRA';
  /** Set PRAGMA journal_mode = WAL (default true). */
  wal?: boolean;
}

export interface SqliteOpenOptions extends SqliteStoreOptions {
  /** Which driver opens the file (default: better-sqlite3 when installed, else node:sqlite). */
  driver?: 'better-sqlite3' | 'node:sqlite';
}

/**
 * A durable store over one SQLite handle; transactions use BEGIN IMMEDIATE and run one at a time per store.
 * An outbox store too: a claim is one UPDATE … RETURNING inside BEGIN IMMEDIATE.
 */
export declare class SqliteStore<Db extends SqliteHandle = SqliteHandle> extends StoreBase {
  constructor(db: Db, options?: SqliteStoreOptions);
  /** Opens (or creates) a database file; the store owns the handle and close() closes it. */
  static open(filename: string, options?: SqliteOpenOptions): SqliteStore;
  readonly db: Db;
  /** Closes the handle when the store opened it (SqliteStore.open); otherwise does nothing. */
  close(): Promise<void>;
}
/** Every member of the DurableStore contract (declaration merging keeps them in one place). */
export interface SqliteStore<Db extends SqliteHandle = SqliteHandle> extends DurableStore<SqliteTransaction<Db>> {
  now(): number;
}

/**
 * The handle `SqliteStore.transaction(fn)` passes to `fn`; exported so a host can
 * recognise it (`instanceof`), not to be constructed.
 */
export declare class SqliteTransaction<Db extends SqliteHandle = SqliteHandle> {
  private constructor();
}
export interface SqliteTransaction<Db extends SqliteHandle = SqliteHandle> extends DurableStoreTransaction {
  /**
   * The store's handle, inside BEGIN IMMEDIATE, guarded: the host's statements on it commit or roll back with
   * idemflow's; its BEGIN/COMMIT/ROLLBACK become a savepoint of idemflow's transaction, and control that
   * cannot be mapped is refused with INVALID_ARGUMENT (docs/adapters.md, "What the guard maps, and what it refuses").
   */
  readonly client: Db;
}
