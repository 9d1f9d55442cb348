// idemflow/mysql: MySQL 8 and MariaDB over a mysql2 Pool or Connection.
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

/** A mysql2 Connection, promise flavour (`mysql2/promise`). */
export interface MysqlConnection {
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
  beginTransaction(): Promise<void>;
}

/** A mysql2 Pool, promise flavour: the store checks out one connection per transaction. */
export interface MysqlPool {
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
  getConnection(): Promise<MysqlConnection & { release(): void; destroy(): void }>;
}

/** A mysql2 Pool or Connection of the callback flavour (`mysql2`); the store uses its .promise(). */
export interface MysqlCallbackClient {
  promise(): MysqlPool | MysqlConnection;
}

export interface MysqlStoreOptions extends StoreOptions, TimeoutOptions {
  /** Collation of the id columns made by migrate() (default utf8mb4_nopad_bin on MariaDB, utf8mb4_0900_bin on MySQL 8). */
  collation?: string;
}

/**
 * A durable store over MySQL or MariaDB (InnoDB). An outbox store too: a claim locks due rows
 * FOR UPDATE SKIP LOCKED (MySQL 8, MariaDB 10.6+) in a short READ COMMITTED transaction.
 */
export declare class MysqlStore extends StoreBase {
  constructor(db: MysqlPool | MysqlConnection | MysqlCallbackClient, options?: MysqlStoreOptions);
  /** The Pool or Connection (promise flavour) the store works through (the host owns and closes it). */
  readonly client: MysqlPool | MysqlConnection;
}
/** Every member of the DurableStore contract (declaration merging keeps them in one place). */
export interface MysqlStore extends DurableStore<MysqlTransaction> {
  now(): number;
}

/**
 * The handle `MysqlStore.transaction(fn)` passes to `fn`; exported so a host can
 * recognise it (`instanceof`), not to be constructed.
 */
export declare class MysqlTransaction {
  private constructor();
}
export interface MysqlTransaction extends DurableStoreTransaction {
  /**
   * The connection of this transaction (promise flavour, callbacks taken too), guarded: the host's statements
   * on it commit or roll back with idemflow's; its BEGIN/COMMIT/ROLLBACK become a savepoint of idemflow's
   * transaction, and control that cannot be mapped (DDL that commits implicitly among it) is refused with
   * INVALID_ARGUMENT (docs/adapters.md, "What the guard maps, and what it refuses").
   */
  readonly client: MysqlConnection;
}
