// Types shared by the durable stores (idemflow/sqlite, idemflow/postgres,
// idemflow/mysql, idemflow/mongodb).
import type { EventInput, ProcessResult, PutWorkflowOptions, ReceiptResult, RecordedOutcome, RuleSetRef, Workflow } from '../core/types.js';
import type { BatchResult, ExclusiveLocks, ProcessOptions, Store, StoreTransaction, TransactionOptions } from '../host/types.js';
import type { OutboxAdmin, OutboxStore, StoredOperation } from '../outbox/types.js';

/** The outbox row and its statuses are the package's own types (idemflow's StoredOperation). */
export type { OperationStatus, StoredOperation } from '../outbox/types.js';

/** Names of the three tables (collections in MongoDB); `schema.name` is allowed in SQL. */
export interface TableNames {
  workflows: string;
  inbox: string;
  outbox: string;
}

/** `{ workflows: 'workflows', inbox: 'event_inbox', outbox: 'event_outbox' }` */
export declare const DEFAULT_TABLES: Readonly<TableNames>;

/**
 * The code of the IdemflowError a store throws when its database cannot be
 * reached (refused or lost connection, server shutting down); its
 * disposition is 'retry'.
 */
export declare const STORE_UNAVAILABLE: 'STORE_UNAVAILABLE';

/** True for the IdemflowError a store throws when its database cannot be reached. */
export declare function isStoreUnavailable(error: unknown): boolean;

export interface StoreOptions {
  /** Table names; any left out keep their default. */
  tables?: Partial<TableNames>;
  /** How many times processEvent runs the read-decide-write cycle again after a lost race (default 4). */
  raceRetries?: number;
  /** The clock for recorded_at, created_at and updated_at: milliseconds since the epoch (default Date.now). */
  now?: () => number;
}

/** The bounds of a store over a server (PostgreSQL, PGlite, MySQL/MariaDB, MongoDB). */
export interface TimeoutOptions {
  /**
   * Client-side bound on every store call (a transaction or a single outbox statement, connection
   * checkout included), in ms (default 30000). Past it the call fails with STORE_UNAVAILABLE,
   * details.reason 'timeout', and the connection it held is discarded.
   */
  timeoutMs?: number;
  /**
   * Server-side bound on each statement, in ms (default 10000; 0 leaves the server's own setting):
   * PostgreSQL SET LOCAL statement_timeout, MariaDB SET STATEMENT max_statement_time and
   * innodb_lock_wait_timeout, MongoDB maxTimeMS.
   */
  statementTimeoutMs?: number;
}

/** An inbox row as stored. (A type, not an interface, so it fits StoredReceipt's index signature.) */
export type RecordedReceipt = {
  eventId: string;
  fingerprint: string;
  workflowId: string;
  eventType: string;
  outcome: RecordedOutcome;
  ruleSet: RuleSetRef | null;
  /** Milliseconds since the epoch. */
  recordedAt: number;
  /** What the delivery produced; null for a receipt written before receipts kept it. */
  result: ReceiptResult | null;
};

/** One transaction of a durable store: the Store contract, a read of the outbox, and the host's own writes. */
export interface DurableStoreTransaction extends StoreTransaction {
  getReceipt(eventId: string): Promise<RecordedReceipt | null>;
  getOperation(id: string): Promise<StoredOperation | null>;
  /** Inserts or replaces a workflow in this transaction: the host's row that starts it and the workflow commit together. */
  putWorkflow(workflow: Workflow, options?: PutWorkflowOptions): Promise<void>;
  /** The driver's own handle bound to this transaction (each adapter types it). */
  readonly client: unknown;
}

/**
 * The outbox store interface (docs/outbox.md), which every durable store
 * inherits: the consumer's claims and fenced writes (OutboxStore) and an
 * operator's listing, requeue and purges (OutboxAdmin). A fenced write
 * resolves false, recording nothing, when the operation is no longer claimed
 * under that token; requeue without `options.now` uses the store's clock.
 */
export declare abstract class StoreBase {}
export interface StoreBase extends OutboxStore, OutboxAdmin, ExclusiveLocks {}

/** What every durable store offers a host: the Store contract, the outbox interface and helpers. */
export interface DurableStore<Tx extends DurableStoreTransaction = DurableStoreTransaction>
  extends Store,
    OutboxStore,
    OutboxAdmin,
    ExclusiveLocks {
  readonly tables: Readonly<TableNames>;
  /** Re-runs of a cycle after a lost race (undefined: processEvent's default, 4). */
  readonly raceRetries?: number;
  /** The store's clock (Date.now unless options.now was given). */
  now(): number;
  /** Creates the tables and indexes if they do not exist; safe in every worker at start, beside live traffic. */
  migrate(): Promise<void>;
  transaction<T>(fn: (tx: Tx) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /** processEvent(this, event, options): the same outcomes as InMemoryStore. */
  process(event: EventInput, options?: ProcessOptions<Tx>): Promise<ProcessResult>;
  /** processBatch(this, events, options): one transaction, one result per event. */
  processBatch(events: readonly EventInput[], options?: ProcessOptions<Tx>): Promise<BatchResult[]>;
  /**
   * Inserts or replaces a workflow. Fields other than id, status and revision
   * must be strings (amounts are decimal strings); null leaves a field out.
   */
  putWorkflow(workflow: Workflow, options?: PutWorkflowOptions): Promise<void>;
  getWorkflow(id: string): Promise<Workflow | null>;
  getReceipt(eventId: string): Promise<RecordedReceipt | null>;
  getOperation(id: string): Promise<StoredOperation | null>;
}
