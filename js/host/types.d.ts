// Types of the host cycle: stores and their transactions, processEvent and processBatch, onApplied, the keyed mode, the delivery handler and the batcher, exclusive locks.

import type {
  DepositConfirmedEvent,
  EventInput,
  IdemflowError,
  JsonValue,
  NormalizedEvent,
  OperationMetadata,
  OutboxOperation,
  Outcome,
  ProcessHooks,
  ProcessResult,
  Receipt,
  RuleSetOption,
  StoredReceipt,
  Workflow,
  WorkflowWrite,
  WriteSet,
} from '../core/types.js';

/**
 * The transaction the keyed mode hands `work` when the store's own type does not say
 * more (a store's transaction type, PostgresTransaction and the like, is inferred from
 * the store): idemflow's own reads and writes, and the driver's handle bound to the
 * transaction, whose statements commit or roll back with the key's record
 * (docs/adapters.md, "tx.client").
 */
export interface KeyedTransaction extends StoreTransaction {
  /** The pg PoolClient or Client (the PGlite transaction), the SQLite handle, the mysql2 connection, the MongoClient; undefined in memory. */
  readonly client: unknown;
  /** MongoDB: the session every operation of the host's passes. */
  readonly session?: unknown;
  /** The in-memory store: a table of the host's own that commits with the transaction. */
  table?(name: string): Map<unknown, unknown>;
}

/** One keyed call: `payload` (any JSON value, fingerprinted here) or a `fingerprint` made by fingerprintPayload(Text). */
export type KeyedRequest =
  | { key: string; payload: unknown; fingerprint?: undefined }
  | { key: string; fingerprint: string; payload?: undefined };

export interface KeyedOptions {
  /** How long a call waits for another holding the key before IDEMPOTENCY_KEY_IN_PROGRESS (default 0: at once). */
  waitMs?: number;
  /** The retry hint of IDEMPOTENCY_KEY_IN_PROGRESS (`details.retryAfterMs`, default 1000). */
  retryAfterMs?: number;
  /** The most the output may take as JSON (default 16384, as onApplied's; at most 1 MiB). */
  maxOutputBytes?: number;
  /** Whole re-runs after a lost race (default the store's, else 4). */
  raceRetries?: number;
}

export interface KeyedResult<T> {
  /** What work returned (as JSON: undefined is null), or what the first call stored. */
  output: T | null;
  /** True when the key's record answered and work did not run. */
  replayed: boolean;
  /** When the key's record was written (ms since the epoch, the store's clock). */
  recordedAt: number;
  key: string;
  /** The payload's `pf1:` fingerprint. */
  fingerprint: string;
}

/**
 * Runs `work(tx)` once per key: its writes through `tx.client` and the key's record
 * (an inbox receipt, expired by retention) commit together. The same key with the
 * same payload answers the stored output without running work; with another payload
 * IDEMPOTENCY_KEY_CONFLICT (reconcile); while another call holds the key,
 * IDEMPOTENCY_KEY_IN_PROGRESS (retry) after `waitMs`. If work throws, nothing is
 * written and the error comes out as thrown.
 */
export function idempotent<S extends Store, T>(
  store: S,
  request: KeyedRequest,
  work: (tx: TransactionOf<S>) => Promise<T> | T,
  options?: KeyedOptions,
): Promise<KeyedResult<T>>;

/** The transaction a store hands `fn` (PostgresTransaction, SqliteTransaction, …), or KeyedTransaction when its type does not say. */
export type TransactionOf<S> = S extends { transaction<R>(fn: (tx: infer Tx) => Promise<R>, options?: TransactionOptions): Promise<R> }
  ? Tx extends { readonly client: unknown }
    ? Tx
    : KeyedTransaction
  : KeyedTransaction;

/**
 * One transaction of a store. Each write method throws IdemflowError:
 * CONCURRENT_UPDATE when a receipt already exists or the compare-and-set
 * fails, OUTBOX_CONFLICT when the operation id exists.
 */
export interface StoreTransaction {
  getReceipt(eventId: string): Promise<StoredReceipt | null>;
  getWorkflow(id: string): Promise<Workflow | null>;
  insertReceipt(receipt: Receipt): Promise<void>;
  writeWorkflow(write: WorkflowWrite): Promise<void>;
  insertOperation(operation: OutboxOperation): Promise<void>;
}

/**
 * What the host cycle asks of a store's transaction (docs/adapters.md): `batch`,
 * processBatch's (its locking reads need READ COMMITTED); `deadlineAt`, the
 * performance.now() time the whole call must end by.
 */
export interface TransactionOptions {
  batch?: boolean;
  deadlineAt?: number | null;
}

/** What processEvent needs of a store. */
export interface Store {
  transaction<T>(fn: (tx: StoreTransaction) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /** Re-runs of a cycle after a lost race, when processEvent is not given its own. */
  readonly raceRetries?: number;
  /** How long one call may take (a server store's options.timeoutMs); undefined where calls wait on no server. */
  readonly timeoutMs?: number;
}

/** What onApplied is told of the decision it runs for: the applied result, and the event as validated. */
export interface AppliedDecision {
  outcome: 'applied';
  operationId: string | null;
  operationIds: string[];
  status: string;
  revision: number;
  fingerprint: string;
  event: NormalizedEvent;
}

/**
 * The host's own writes in idemflow's transaction: runs when a delivery is applied, before the
 * commit, with the store's transaction (`tx.client`: the driver's handle bound to it). Returns the
 * delivery's output (a JSON value of at most 16 KiB, kept in the receipt and answered to every later
 * duplicate); a throw rolls everything back (an IdemflowError as thrown, anything else HANDLER_FAILED).
 */
// biome-ignore lint/suspicious/noExplicitAny: a store's own transaction type narrows it; untyped, the callback takes any
// biome-ignore lint/suspicious/noConfusingVoidType: a callback that returns nothing keeps no output
export type OnApplied<Tx = any> = (tx: Tx, decision: AppliedDecision) => JsonValue | void | Promise<JsonValue | void>;

// biome-ignore lint/suspicious/noExplicitAny: as OnApplied
export interface ProcessOptions<Tx = any> extends RuleSetOption {
  /** How many times the read-decide-write cycle runs again when a concurrent writer wins (default 4). */
  raceRetries?: number;
  /** Refuse events of any other type (INVALID_EVENT, field "type"). */
  type?: string;
  /** Stored beside the payload of each outbox operation this delivery writes. */
  metadata?: OperationMetadata;
  hooks?: ProcessHooks;
  onApplied?: OnApplied<Tx>;
}

export function processEvent(store: Store, event: EventInput, options?: ProcessOptions): Promise<ProcessResult>;
/** One result of processBatch: what processEvent returns, or the error of an event that wrote nothing. */
export type BatchResult = ProcessResult | { error: IdemflowError };
/**
 * Processes many deliveries in one store transaction (at most 10,000), in order, with
 * the results and stored state of processing them one by one; one result per event.
 */
export function processBatch(store: Store, events: readonly EventInput[], options?: ProcessOptions): Promise<BatchResult[]>;
export function processDepositConfirmed(store: Store, event: DepositConfirmedEvent, options?: ProcessOptions): Promise<ProcessResult>;
export function commitWriteSet(tx: StoreTransaction, writeSet: WriteSet): Promise<void>;

/** A message as a broker hands it over: the raw body (a Buffer is a Uint8Array), or an object already parsed. */
export type DeliveryMessage = Uint8Array | string | object;

export interface DeliveryHandlerOptions extends RuleSetOption {
  /**
   * Turns a raw body (as passed to handle) into the event; may be async.
   * Default: strict UTF-8 decoding, then JSON.parse. A throw dead-letters the message.
   */
  parse?: (body: Uint8Array | string) => unknown;
  /** Raw bodies larger than this many bytes are dead-lettered unparsed (default 65536). */
  maxBytes?: number;
  /** Passed to processEvent: re-runs after a lost race (default 4). */
  raceRetries?: number;
  /** Passed to processEvent and processBatch: the host's own writes in the transaction. */
  onApplied?: OnApplied;
  /**
   * Deliveries of one message before a verdict that would be retry becomes
   * park, with its error (default 20; Infinity for no cap). Counted from
   * `attempt` / `attempts`, which the worker must pass for the cap to apply.
   */
  maxDeliveries?: number;
  /** The retry hint's ceiling for the first delivery, doubling per delivery (default 500). */
  baseDelayMs?: number;
  /** The retry hint's cap (default 60000). */
  maxDelayMs?: number;
  /** Passed to processEvent. */
  hooks?: ProcessHooks;
}

export interface DeliveryContext {
  /**
   * The broker's delivery count, 1 for the first delivery (the default when
   * the key is absent): the retry hint grows with it and maxDeliveries caps
   * it. Anything but a positive safe integer is a fatal INVALID_ARGUMENT.
   */
  attempt?: number;
  /** Passed to processEvent: stored beside the payload of each outbox operation. */
  metadata?: OperationMetadata;
}

/** Why a body was dead-lettered before it reached validation (`error.details.reason`). */
export type InvalidBodyReason = 'too-large' | 'not-utf8' | 'not-json' | 'unparseable' | 'not-an-object';

/** What the worker does with the message. Never thrown: only a fatal error is. */
export type DeliveryVerdict =
  /** Committed (or nothing to commit): acknowledge the message. */
  | { action: 'ack'; outcome: Outcome; result: ProcessResult; error?: undefined; retryAfterMs?: undefined }
  /** Transient (an outage, a lost race, no workflow yet): redeliver after about retryAfterMs. */
  | { action: 'retry'; error: IdemflowError; retryAfterMs: number; outcome?: undefined }
  /** The message can never succeed (disposition reject): move it to the dead-letter queue. */
  | { action: 'dead-letter'; error: IdemflowError; outcome?: undefined; retryAfterMs?: undefined }
  /**
   * A genuine conflict (disposition reconcile), or a retry past maxDeliveries
   * (then `deliveries` and `maxDeliveries` say so): park it where a person or
   * a reconciliation job looks.
   */
  | { action: 'park'; error: IdemflowError; deliveries?: number; maxDeliveries?: number; outcome?: undefined; retryAfterMs?: undefined };

export type DeliveryAction = DeliveryVerdict['action'];

/**
 * Resolves to a verdict for anything a message can contain; rejects only with
 * an IdemflowError of disposition fatal (the worker is misconfigured: stop it),
 * or with a non-idemflow error from the store (a bug: crash and restart).
 */
export interface DeliveryHandler {
  (message: DeliveryMessage, context?: DeliveryContext): Promise<DeliveryVerdict>;
  /**
   * Many deliveries (a broker's prefetched messages) decided and committed in one
   * transaction (processBatch): one verdict per message, in order.
   * `attempts[i]` is message i's delivery count (all 1 when not given); an
   * attempts list of another length is a fatal INVALID_ARGUMENT.
   */
  batch(messages: readonly DeliveryMessage[], context?: { attempts?: readonly number[] }): Promise<DeliveryVerdict[]>;
}

export interface BatcherOptions<T> {
  /** Items per batch: a full batch goes at once. */
  size: number;
  /** A partial batch goes this long after its first item while no batch is running (default 5 ms). */
  lingerMs?: number;
  /** While a batch is running, a partial batch goes when it settles or this long after its first item (default 50 ms, at least lingerMs). */
  maxLingerMs?: number;
  /** Items held or in unsettled batches at most; push() waits for room (default twice `size`; set the broker's prefetch to it). */
  window?: number;
  /** One batch: settles its items (acks, retries, …). */
  run: (items: T[]) => unknown;
  /** A batch whose run threw (default: the error is thrown uncaught, and the process ends). */
  onError?: (error: unknown, items: T[]) => void;
}

export interface Batcher<T> {
  /** Adds an item; resolves once it is taken (at once while the window has room). */
  push(item: T): Promise<void>;
  /** Items waiting for their batch. */
  readonly held: number;
  /** Items in batches that have not settled. */
  readonly running: number;
  /** Batches sent so far and the items they held. */
  readonly sent: { batches: number; items: number };
  /** A graceful stop: sends what is held now, resolves once every batch has settled. */
  drain(): Promise<void>;
}

/** Groups a broker's deliveries into batches for handle.batch; a fatal INVALID_ARGUMENT for bad options. */
export function createBatcher<T>(options: BatcherOptions<T>): Batcher<T>;

/** Throws an IdemflowError of disposition fatal when store or options are wrong. */
export function createDeliveryHandler(store: Store, options?: DeliveryHandlerOptions): DeliveryHandler;

/** What withExclusiveLock answers: the function's value, or that someone else held the lock (nothing ran). */
export type LockResult<T> = { acquired: true; value: T } | { acquired: false };

/**
 * One holder at a time across every process on a store's database: an
 * advisory lock on PostgreSQL, GET_LOCK on MySQL/MariaDB, a lease row taken
 * under the write lock on SQLite, a lease document on MongoDB, a mutex in
 * memory. Never waits: a held lock answers `{ acquired: false }`.
 */
export interface ExclusiveLocks {
  /** `leaseMs`: how long a lease-based lock (SQLite, MongoDB) outlives a holder that died (default 10 minutes). */
  withExclusiveLock<T>(name: string, fn: () => Promise<T> | T, options?: { leaseMs?: number }): Promise<LockResult<T>>;
}
