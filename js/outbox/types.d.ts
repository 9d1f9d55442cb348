// Types of the outbox: stored operations, the consumer and its policy, the admin calls, retention.

import type { BuiltinRuleSetName, IdemflowError, OperationMetadata, RuleSet } from '../core/types.js';
import type { ExclusiveLocks } from '../host/types.js';

export type OperationStatus = 'pending' | 'claimed' | 'done' | 'dead';

/** An outbox row as a store holds it. Times are milliseconds since the epoch. */
export interface StoredOperation {
  id: string;
  type: string;
  workflowId: string;
  eventId: string;
  payload: { [field: string]: string };
  status: OperationStatus;
  /** Claims so far (each claim adds one; a release gives it back). */
  attempts: number;
  nextAttemptAt: number;
  leaseOwner: string | null;
  leaseExpiresAt: number | null;
  /** Adds one on every claim; a record under an older token is refused. */
  fencingToken: number;
  lastError: string | null;
  createdAt: number;
  updatedAt: number;
  /** The host metadata given to processEvent (null when none, and for rows written before it existed). */
  metadata: OperationMetadata | null;
  /** The W3C traceparent of the delivery that wrote it (null without OpenTelemetry). */
  traceContext: string | null;
  /**
   * Present only on a row that cannot be read (getOperation, listOperations):
   * the fields that could not be, each null above. claimOperations never
   * returns such a row: it quarantines it (dead, the reason in lastError).
   */
  unreadable?: string[];
}

/** What claimOperations reports of a claimed row it could not read and set aside. */
export interface QuarantineReport {
  /** null when even the id cannot be read. */
  operationId: string | null;
  /** The INVALID_RECORD error naming the column. */
  error: IdemflowError;
  /** `INVALID_RECORD: …`, what the row's lastError now holds. */
  lastError: string;
  /** False when marking it dead failed too (storeError): its claim then expires and it is tried again. */
  recorded: boolean;
  storeError?: unknown;
}

/** An operation as claimOperations returns it. */
export interface ClaimedOperation extends StoredOperation {
  status: 'claimed';
  leaseOwner: string;
  leaseExpiresAt: number;
}

export interface ClaimArgs {
  owner: string;
  now: number;
  /** now + leaseMs, computed by the core. */
  leaseExpiresAt: number;
  limit: number;
  /** Only these operation types (the consumer's handlers). */
  types?: string[];
  /** Hears of each claimed row that could not be read and was quarantined instead of returned. */
  onQuarantine?: (report: QuarantineReport) => void;
}

/** Identifies one claim: the operation and the fencing token it was claimed with. */
export interface FencedArgs {
  id: string;
  fencingToken: number;
  now: number;
}

export interface RenewArgs extends FencedArgs {
  leaseExpiresAt: number;
}

export type FailArgs =
  | (FencedArgs & {
      status: 'pending';
      nextAttemptAt: number;
      lastError: string /** false: an outage retry, the claim's attempt given back. */;
      attemptCounted?: boolean;
    })
  | (FencedArgs & { status: 'dead'; lastError: string });

/** Filters of listOperations (and requeueOperations): every one given must hold (AND). */
export interface OperationFilter {
  status?: OperationStatus;
  type?: string;
  workflowId?: string;
  /** The lease owner (a claimed operation's worker). */
  owner?: string;
  /** Created before this time. */
  olderThan?: number | Date;
  /** Created at or after this time. */
  newerThan?: number | Date;
  /** The last error contains this text, case-insensitively (ASCII letters only on SQLite). */
  errorContains?: string;
}

/** An unknown key is INVALID_ARGUMENT, never ignored. */
export interface ListOperationsArgs extends OperationFilter {
  /** Default 100. */
  limit?: number;
  /** Page on: operations are listed by id; pass the last id of the page before. */
  afterId?: string;
}

/** Ids, or a filter of dead operations (`status: 'dead'` is required, so "everything" is never meant by accident). */
export type RequeueOperationsArgs =
  | { ids: string[]; now?: number | Date }
  | (OperationFilter & { status: 'dead'; limit?: number; now?: number | Date });

/** What requeueOperations did with one id. */
export interface RequeueResult {
  id: string;
  result: 'requeued' | 'not-dead' | 'not-found';
}

export interface StatusCounts {
  pending: number;
  claimed: number;
  done: number;
  dead: number;
}

/** stats(): counts by status and by type, and the age of the oldest due operation. */
export interface OutboxStats {
  byStatus: StatusCounts;
  /** Every type stored, each with its four counts. */
  byType: { [type: string]: StatusCounts };
  /** How long the oldest due operation (pending and due, or claimed with its lease expired) has waited; null when none is due. */
  oldestDueAgeMs: number | null;
}

export interface PurgeArgs {
  /** Rows recorded (receipts) or finished (operations) before this time are deleted. */
  olderThan: number | Date;
  /** Rows deleted per transaction (default 1000). */
  batchSize?: number;
  /** Hears the running totals after each batch that deleted something. */
  onBatch?: (progress: PurgeResult) => void;
}

export interface PurgeResult {
  deleted: number;
  /** Transactions that deleted something. */
  batches: number;
}

/**
 * What the consumer needs of a store. Every method is one atomic step; the
 * fenced ones resolve to false, recording nothing, when the operation is no
 * longer claimed under that token.
 */
export interface OutboxStore {
  claimOperations(args: ClaimArgs): Promise<ClaimedOperation[]>;
  renewLease(args: RenewArgs): Promise<boolean>;
  completeOperation(args: FencedArgs): Promise<boolean>;
  failOperation(args: FailArgs): Promise<boolean>;
  /** Back to pending, due now, the attempt not counted. */
  releaseOperation(args: FencedArgs): Promise<boolean>;
  /** The consumer's default clock when options.now is not given. */
  now?(): number;
}

/** What an operator (or a retention job) needs of a store. */
export interface OutboxAdmin {
  /** A dead operation back to pending with attempts 0; false unless it was dead (requeueOperations says why). */
  requeue(operationId: string, options?: { now?: number }): Promise<boolean>;
  /** Requeues ids, or the dead operations a filter selects; per id what happened. */
  requeueOperations(args: RequeueOperationsArgs): Promise<RequeueResult[]>;
  /** Operations matching every filter given, by id. */
  listOperations(args?: ListOperationsArgs): Promise<StoredOperation[]>;
  /** Counts by status and type, and the oldest due operation's age at `now` (default: the store's clock). */
  stats(args?: { now?: number | Date }): Promise<OutboxStats>;
  /**
   * Gives back every claim `owner` holds (a worker known to be dead) at once:
   * pending, due now, lease cleared, fencing token raised so that the
   * worker's late completion is refused. Resolves to the released ids.
   */
  releaseOwner(owner: string, args?: { now?: number | Date }): Promise<string[]>;
  purgeReceipts(args: PurgeArgs): Promise<PurgeResult>;
  purgeOperations(args: PurgeArgs & { status?: 'done' | 'dead' }): Promise<PurgeResult>;
}

export interface HandlerContext {
  /** The operation id: pass it to the downstream provider so a second run has no second effect. */
  readonly idempotencyKey: string;
  /** 1 for the first claim. */
  readonly attempt: number;
  readonly fencingToken: number;
  readonly owner: string;
  /** Aborted when the lease is lost or the consumer stops past its timeout. */
  readonly signal: AbortSignal;
  /** The operation's host metadata (processEvent's `metadata`), or null. */
  readonly metadata: OperationMetadata | null;
  /** The W3C traceparent of the delivery that wrote the operation, or null. */
  readonly traceContext: string | null;
}

/**
 * Runs one operation. Resolve for success. Throw to fail: an error with
 * `retryable: false` (or an IdemflowError whose disposition is reject or
 * reconcile) makes the operation dead at once; any other error is retried
 * after the backoff until maxAttempts.
 */
export type OperationHandler = (operation: ClaimedOperation, context: HandlerContext) => unknown;

export interface OutboxPolicySettings {
  /** Claims an operation may use (default 5, at most 1000). */
  maxAttempts?: number;
  /** Backoff ceiling after the first attempt, doubling per attempt (default 1000). */
  baseDelayMs?: number;
  /** The ceiling's cap (default 300000, at most 7 days). */
  maxDelayMs?: number;
  /** How long a claim holds (default 30000, at most 24 h). */
  leaseMs?: number;
  /**
   * How long after its creation an operation whose handler says the
   * downstream is unavailable is still retried, its attempt given back
   * (default 172800000: two days; 0 to 30 days).
   */
  outageBudgetMs?: number;
}

export interface OutboxConsumerOptions extends OutboxPolicySettings {
  /** The lease owner (default host:pid:random). */
  owner?: string;
  /** Handlers running at once (default 4). */
  concurrency?: number;
  /** How long start()'s loop waits when nothing is due (default 1000). */
  pollIntervalMs?: number;
  /** The clock, ms since the epoch (default store.now(), else Date.now). */
  now?: () => number;
  /** Renew running handlers' leases every renewEveryMs (default true). */
  autoRenew?: boolean;
  /**
   * start()'s loop asks the store's stats() for pending operations of types
   * without a handler on its first poll and then every this many polls
   * (default 60; 0 never), emitting 'unhandled-type' once per type.
   */
  typeCheckPolls?: number;
  /** The backlog gauges read store.stats() at most this often, in ms (default 5000). */
  backlogIntervalMs?: number;
  /** Consecutive "unavailable" failures of one type that open its circuit breaker (default 5; 0: no breaker). */
  breakerThreshold?: number;
  /** How long an open breaker waits before it claims one operation of its type as a probe (default 30000). */
  breakerProbeMs?: number;
  /**
   * The rule sets whose operations this consumer runs: it refuses to start
   * (INVALID_ARGUMENT, disposition fatal, details.types) when they emit a type
   * with no handler that ignoreTypes does not name.
   */
  ruleSets?: ReadonlyArray<RuleSet | BuiltinRuleSetName>;
  /** Emitted types another consumer runs (each must be emitted by one of ruleSets). */
  ignoreTypes?: readonly string[];
}

/** A circuit breaker that is not closed. */
export interface OutboxBreaker {
  state: 'open' | 'half-open';
  failures: number;
  openedAt: number | null;
  probeAt: number | null;
}

/** The policy as the core normalised it. */
export interface OutboxPolicy {
  readonly maxAttempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly leaseMs: number;
  readonly outageBudgetMs: number;
  readonly renewEveryMs: number;
  /** The wait after failed attempt `attempt`: full jitter, fixed by (operationId, attempt). */
  backoffDelay(operationId: string, attempt: number): number;
}

export interface OperationEvent {
  operationId: string;
  type: string;
  attempt: number;
  fencingToken: number;
}

export type DeadReason = 'max-attempts' | 'non-retryable' | 'claims-expired' | 'outage-budget';

export interface OutboxConsumerEvents {
  claimed: OperationEvent & { owner: string; leaseExpiresAt: number };
  done: OperationEvent;
  /** attemptCounted false: an outage retry, its attempt given back. */
  'retry-scheduled': OperationEvent & { delayMs: number; nextAttemptAt: number; attemptCounted: boolean; error: string };
  dead: OperationEvent & { reason: DeadReason; error: string };
  released: OperationEvent;
  'lease-lost': OperationEvent;
  /** A result the store refused: the claim had been taken over; nothing was recorded. */
  'stale-completion': OperationEvent & { verdict: 'done' | 'retry' | 'dead' | 'release' };
  'store-error': Partial<OperationEvent> & { during: string; error: unknown };
  stopped: { abandoned: string[]; claimPending: boolean };
  /** A claimed row the store could not read: set aside as dead (when recorded), the rest of the claim runs. */
  quarantined: QuarantineReport;
  /** Operations of a type this consumer has no handler for are pending in the store (stats()); once per type. */
  'unhandled-type': { type: string; pending: number };
  'breaker-opened': BreakerEvent;
  'breaker-half-open': BreakerEvent;
  'breaker-closed': BreakerEvent;
  /** A handler's fatal error halted its type: not claimed until resume(type); the operation's attempt was given back. */
  'type-halted': OperationEvent & { haltedAt: number; error: string };
  /** resume(type) lifted a halt. */
  'type-resumed': OutboxHalt & { type: string };
}

/** A type a handler's fatal error halted. */
export interface OutboxHalt {
  haltedAt: number;
  /** The operation whose handler threw the fatal error. */
  operationId: string;
  /** Its lastError: `CODE: message`. */
  error: string;
}

export interface BreakerEvent {
  type: string;
  failures: number;
  openedAt: number | null;
  probeAt: number | null;
}

export interface RoundCounts {
  claimed: number;
  done: number;
  retried: number;
  dead: number;
  released: number;
  stale: number;
  errors: number;
}

export interface OutboxConsumer {
  readonly owner: string;
  readonly policy: OutboxPolicy;
  readonly inFlight: number;
  readonly running: boolean;
  stats(): RoundCounts & { leaseLost: number; quarantined: number };
  /** The breakers that are not closed, by operation type. */
  breakers(): Record<string, OutboxBreaker>;
  /** The types a handler's fatal error halted, by operation type. */
  halted(): Record<string, OutboxHalt>;
  /** Claims a halted type again: true when it was halted, false when not. */
  resume(type: string): boolean;
  start(): this;
  /** Resolves within timeoutMs + abortGraceMs: the operations left claimed, and whether a claim was still unanswered (its operations are released when it answers). */
  stop(options?: { timeoutMs?: number; abortGraceMs?: number }): Promise<{ abandoned: string[]; claimPending: boolean }>;
  runOnce(): Promise<RoundCounts>;
  drain(options?: { maxRounds?: number }): Promise<RoundCounts & { rounds: number }>;
  renewLeases(): Promise<{ renewed: number; lost: number }>;
  on<E extends keyof OutboxConsumerEvents>(event: E, listener: (payload: OutboxConsumerEvents[E]) => void): this;
  once<E extends keyof OutboxConsumerEvents>(event: E, listener: (payload: OutboxConsumerEvents[E]) => void): this;
  off<E extends keyof OutboxConsumerEvents>(event: E, listener: (payload: OutboxConsumerEvents[E]) => void): this;
}

export function createOutboxConsumer(
  store: OutboxStore,
  handlers: { [type: string]: OperationHandler } | Map<string, OperationHandler>,
  options?: OutboxConsumerOptions,
): OutboxConsumer;

export interface RetentionOptions {
  /** Purge receipts recorded more than this many ms ago. Keep them longer than any redelivery can arrive (README, "Retention"). */
  receiptsOlderThan?: number;
  /** Purge `done` operations last updated more than this many ms ago. Dead operations are never purged by retention. */
  operationsOlderThan?: number;
  /** Ms between the end of one run and the start of the next. */
  every: number;
  /** Rows per delete statement (default 1000). */
  batchSize?: number;
  /** The lock one runner holds (default `idemflow.retention:<inbox table>`). */
  lockName?: string;
  /** The lease of a lease-based lock (default 10 minutes): longer than a run takes. */
  leaseMs?: number;
  /** false: do not start now; call start() (or runOnce()). */
  start?: boolean;
}

/** One run's counts: null for what this retention does not purge. Times are Date.now() ms. */
export interface RetentionRun {
  receipts: PurgeResult | null;
  operations: PurgeResult | null;
  startedAt: number;
  endedAt: number;
}

/** A purge schedule. Events: 'run' (RetentionRun), 'skipped' ({ reason: 'locked', at }), 'error' (only when listened to). */
export interface Retention {
  readonly settings: Required<Omit<RetentionOptions, 'start' | 'receiptsOlderThan' | 'operationsOlderThan'>> & {
    receiptsOlderThan: number | null;
    operationsOlderThan: number | null;
  };
  start(): Retention;
  /** One run now: its counts, or null when another runner held the lock. */
  runOnce(): Promise<RetentionRun | null>;
  /** Stops the schedule and awaits a running purge. */
  stop(): Promise<void>;
  on(event: 'run', listener: (run: RetentionRun) => void): this;
  on(event: 'skipped', listener: (skip: { reason: 'locked'; at: number }) => void): this;
  on(event: 'error', listener: (error: unknown) => void): this;
  once(event: 'run', listener: (run: RetentionRun) => void): this;
  off(event: 'run' | 'skipped' | 'error', listener: (value: never) => void): this;
}

/**
 * Purges old receipts and done operations on a schedule, in bounded batches,
 * one runner at a time across processes (the store's withExclusiveLock).
 */
export function createRetention(store: OutboxAdmin & ExclusiveLocks & { now?(): number }, options: RetentionOptions): Retention;
/**
 * Reports the outbox backlog of `store` on the OpenTelemetry gauges
 * idemflow.outbox.backlog and idemflow.outbox.oldest_due.age, from
 * store.stats() read at most every `intervalMs` (default 5000). Does nothing
 * without OpenTelemetry or without store.stats(). A running consumer does this itself.
 */
export function observeOutboxBacklog(store: object, options?: { intervalMs?: number }): { close(): void };
