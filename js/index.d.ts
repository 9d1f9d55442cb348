// Types of the idemflow package. Both entry points (import and require) export these names.

/** What the host should do with a delivery that failed. */
/**
 * What to do with a delivery that failed: dead-letter it (`reject`), redeliver it
 * later (`retry`), park it for a person (`reconcile`), or stop the worker, which is
 * itself misconfigured (`fatal`: no delivery can succeed until it is fixed).
 */
export type Disposition = 'reject' | 'retry' | 'reconcile' | 'fatal';
/** The dispositions a rule set's own answers may give. */
export type RuleDisposition = 'reject' | 'retry' | 'reconcile';

export type ErrorCode =
  | 'INVALID_EVENT'
  | 'EVENT_ID_CONFLICT'
  | 'UNKNOWN_WORKFLOW'
  | 'IDENTITY_MISMATCH'
  | 'INVALID_TRANSITION'
  | 'OUTBOX_CONFLICT'
  | 'CONCURRENT_UPDATE'
  | 'STORE_UNAVAILABLE'
  | 'INVALID_RECORD'
  | 'INVALID_ARGUMENT'
  | 'RULESET_INVALID'
  | 'HANDLER_FAILED'
  | 'INVALID_PAYLOAD'
  | 'IDEMPOTENCY_KEY_CONFLICT'
  | 'IDEMPOTENCY_KEY_IN_PROGRESS';

/** The ids and values involved in an error; which keys depend on the code. */
export interface ErrorDetails {
  readonly field?: string;
  readonly reason?: string;
  readonly eventId?: string | null;
  readonly workflowId?: string;
  readonly eventType?: string;
  readonly status?: string;
  readonly operationId?: string;
  readonly path?: string;
  readonly recorded?: string | null;
  readonly actual?: string;
  readonly storedFingerprint?: string;
  readonly fingerprint?: string;
  readonly [key: string]: unknown;
}

export class IdemflowError extends Error {
  constructor(code: ErrorCode, message: string, options?: { disposition?: Disposition; details?: ErrorDetails; cause?: unknown });
  readonly name: 'IdemflowError';
  readonly code: ErrorCode;
  readonly disposition: Disposition;
  readonly details: ErrorDetails;
  /** Every code with its default disposition. */
  static readonly codes: Readonly<Record<ErrorCode, Disposition>>;
}

export function isIdemflowError(value: unknown): value is IdemflowError;

/** An incoming event. Amounts are integer base units in decimal strings, never numbers. */
export interface EventInput {
  eventId: string;
  workflowId: string;
  type: string;
  [field: string]: unknown;
}

export interface DepositConfirmedEvent extends EventInput {
  type: 'DEPOSIT_CONFIRMED';
  depositRef: string;
  amountUnits: string;
}

/** A validated plain copy of an event: its own members and the fields its type declares. */
export interface NormalizedEvent {
  eventId: string;
  workflowId: string;
  type: string;
  [field: string]: string;
}

/** A stored workflow: id, status, revision and the fields the rule set records. */
export interface Workflow {
  id: string;
  status: string;
  revision: number;
  [field: string]: unknown;
}

export type Outcome = 'applied' | 'already-applied' | 'stale' | 'duplicate-delivery';
export type RecordedOutcome = Exclude<Outcome, 'duplicate-delivery'>;

export interface RuleSetRef {
  id: string;
  version: number;
  hash: string;
}

/** The inbox row, keyed uniquely by eventId. */
export interface Receipt {
  eventId: string;
  fingerprint: string;
  workflowId: string;
  eventType: string;
  outcome: RecordedOutcome;
  ruleSet: RuleSetRef;
  /**
   * What this delivery produced, kept for a later duplicate to answer with.
   * Every receipt the core writes has it; a receipt written by an earlier
   * version has none (null when read from a store).
   */
  result?: ReceiptResult | null;
}

/** What a delivery produced beyond its outcome; status and revision are null unless it was applied. */
export interface ReceiptResult {
  operationIds: string[];
  status: string | null;
  revision: number | null;
}

/** What the first delivery of an event id produced, as a duplicate of it answers. */
export interface OriginalResult extends ReceiptResult {
  outcome: RecordedOutcome;
  /** When the first delivery was decided (its receipt's recordedAt, ms since the epoch); null when the receipt has no stamp. */
  decidedAt: number | null;
  /** What the first delivery's onApplied returned (null for nothing); absent when it ran without one. */
  output?: JsonValue;
}

/** A JSON value: what onApplied may return as a delivery's output. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** What decide needs of a stored receipt. */
export interface StoredReceipt {
  fingerprint: string;
  [key: string]: unknown;
}

/**
 * A compare-and-set write of one workflow. `expect: null` means the workflow
 * must not exist yet (insert). `set` holds status, revision and the recorded
 * fields that change; a field set to null is removed.
 */
export interface WorkflowWrite {
  id: string;
  expect: { status: string; revision: number } | null;
  set: { status: string; revision: number; [field: string]: string | number | null };
}

/** An intention to act, committed with the state change. Its id is deterministic. */
export interface OutboxOperation {
  id: string;
  type: string;
  workflowId: string;
  /** The event whose decision emitted it. */
  eventId: string;
  status: 'pending';
  payload: { [field: string]: string };
}

/** Everything the host must commit in one transaction. */
export interface WriteSet {
  receipt: Receipt | null;
  workflow: WorkflowWrite | null;
  outbox: OutboxOperation[];
}

export interface Decision {
  outcome: Outcome;
  eventId: string;
  workflowId: string;
  eventType: string;
  fingerprint: string;
  writeSet: WriteSet;
  /** On duplicate-delivery only, when the stored receipt carries its result. */
  original?: OriginalResult;
}

/** What every processEvent result also says: the cycles it took (1 + race re-runs) and the event's fingerprint. */
export interface ProcessMeasure {
  attempts: number;
  fingerprint: string;
}

export type ProcessResult =
  /** `output`: what onApplied returned (null for nothing), when the call had one. */
  | ({ outcome: 'applied'; operationId: string | null; operationIds: string[]; status: string; revision: number; output?: JsonValue } & ProcessMeasure)
  | ({ outcome: 'already-applied' | 'stale' } & ProcessMeasure)
  /** `original`: what the first delivery produced; null when its receipt was written by a version that did not keep it. */
  | ({ outcome: 'duplicate-delivery'; original: OriginalResult | null } & ProcessMeasure);

/** Why a transaction lost a race (CONCURRENT_UPDATE's details.reason). */
export type RaceReason = 'receipt-exists' | 'workflow-changed' | 'workflow-exists' | 'database-busy' | 'serialization-failure' | 'deadlock' | 'lock-timeout' | (string & {});

/** Observers of processEvent, for hosts that log without OpenTelemetry. A hook's throw is ignored. */
export interface ProcessHooks {
  /** A lost race (CONCURRENT_UPDATE): cycle `attempt` failed and the cycle runs again. */
  onRaceRetry?: (retry: { attempt: number; reason: RaceReason; error: IdemflowError }) => void;
}

/** Host metadata stored beside each outbox operation's payload (a correlation id, a tenant): JSON, at most 16 KiB. */
export type OperationMetadata = { [key: string]: unknown };

export type BuiltinRuleSetName = 'deposit-swap' | 'order-shipment' | 'subscription';

export type Answer =
  | {
      outcome: 'applied';
      to: string;
      record: string[];
      clear: string[];
      /** `recurring`: the id is `<name>:{revision}:{workflowId}`, one per emission. */
      emit: { type: string; id: string; payload: string[]; recurring: boolean }[];
      revisionStep: number;
    }
  | { outcome: 'already-applied' | 'stale' }
  | { error: 'UNKNOWN_WORKFLOW' | 'INVALID_TRANSITION'; disposition: RuleDisposition };

export interface TableRow {
  event: string;
  /** Status names; "(none)" stands for "no workflow yet". */
  statuses: string[];
  guard: string[];
  answer: Answer;
  summary: string;
  /** Where the row was written: "rules[3]" or "otherwise". */
  rule: string;
}

/** A rule-set definition (JSON data). See the README for the format. */
export interface RuleSetDefinition {
  id: string;
  version: number;
  description?: string;
  statuses: { name: string; initial?: boolean; terminal?: boolean; description?: string }[];
  fields?: { name: string; kind: 'text' | 'units'; description?: string }[];
  events: { type: string; fields?: string[]; identity?: string[]; description?: string }[];
  rules: {
    on: string | string[];
    in: string | string[];
    guard?: string[];
    then: RuleAnswerDefinition;
    description?: string;
  }[];
  otherwise?: RuleAnswerDefinition;
  /**
   * What producers promise about the order of a workflow's events. A rule set
   * with this section claims to be reorder-safe, and the verifier proves it.
   */
  order?: {
    /** `event` is emitted only after `after`: an event type, or an operation type the rules emit. */
    follows?: { event: string; after: string; same?: string[]; description?: string }[];
    /** Event types whose order is the meaning: the first the workflow sees wins. */
    races?: { between: [string | string[], string | string[]]; description?: string }[];
    description?: string;
  };
}

export type RuleAnswerDefinition =
  | {
      outcome: 'applied';
      to: string;
      record?: string[];
      clear?: string[];
      /** `recurring: true` goes with the id `<name>:{revision}:{workflowId}` (and only with it). */
      emit?: { type: string; id: string; payload?: string[]; recurring?: boolean }[];
      revisionStep?: number;
    }
  | { outcome: 'already-applied' | 'stale' }
  | { error: 'UNKNOWN_WORKFLOW' | 'INVALID_TRANSITION'; disposition?: RuleDisposition };

export type PropertyName =
  | 'one-answer-per-pair'
  | 'every-status-reachable'
  | 'terminal-statuses-final'
  | 'operation-ids-unique'
  | 'revision-increases'
  | 'guards-read-recorded-fields'
  | 'reorder-safe';

/** One delivery in a reorder-safe counterexample. */
export interface DeliveryStep {
  event: string;
  from: string;
  /** `applied`, `already-applied`, `stale`, or `CODE (disposition)`. */
  answer: string;
  to: string;
  rule: string;
}

/** Where one delivery order of a history ends. */
export interface DeliveryEnd {
  status: string;
  recorded: string[];
  /** Operation-id templates emitted (a recurring one once per emission). */
  emitted: string[];
  answeredWithError: string[];
  undelivered: string[];
}

/** Two delivery orders of one history that end differently. */
export interface ReorderCounterexample {
  start: string;
  /** The history's events (each a type; the same facts throughout). */
  history: string[];
  /** The order the workflow saw declared racing types in, in words. */
  races: string[];
  expected: { inOrder: boolean; deliveries: DeliveryStep[]; end: DeliveryEnd };
  actual: { deliveries: DeliveryStep[]; end: DeliveryEnd };
  /** The first delivery at which the two orders differ. */
  divergesAt: number;
}

export interface PathStep {
  event: string;
  from: string;
  to: string;
  rule: string;
}

export interface VerificationReport {
  ok: boolean;
  ruleSet: RuleSetRef;
  statesExplored: number;
  properties: {
    name: PropertyName;
    description: string;
    ok: boolean;
    /** Where a property fails: the path that breaks it and what it names. */
    counterexample: null | { start?: string; steps?: PathStep[]; [key: string]: unknown };
    /** reorder-safe: further histories that fail, smallest first. */
    moreCounterexamples?: ReorderCounterexample[];
    /** reorder-safe: the bound, the declared order, the work done, or why it was skipped. */
    checked?: {
      bound: { events: number; copiesPerType: number };
      /** (history, start status) pairs explored. */
      histories: number;
      /** Delivery configurations explored over all of them. */
      configurations: number;
      /** How much of the whole verification's budget (`maxReorderHistories`, `maxReorderConfigurations`) this used. */
      budget: {
        histories: { used: number; limit: number };
        configurations: { used: number; limit: number };
      };
      races?: ([string, string] | { between: [string, string]; description: string })[];
      follows?: { event: string; after: string }[];
      skipped?: string;
    };
  }[];
  /** Milliseconds the verification took, measured in JS. */
  elapsedMs: number;
}

/** A verified rule set, compiled once and held in wasm memory. */
export class RuleSet {
  private constructor();
  /** A rule set that ships with idemflow; `version` loads an older one (for audit of stored receipts). */
  static builtin(name: BuiltinRuleSetName, options?: { version?: number }): RuleSet;
  static fromJSON(definition: RuleSetDefinition | string): RuleSet;
  readonly id: string;
  readonly version: number;
  /** `sha256:` + hex SHA-256 of the definition's RFC 8785 canonical JSON. */
  readonly hash: string;
  table(): TableRow[];
  tableMarkdown(): string;
  definition(): RuleSetDefinition;
  toJSON(): RuleSetDefinition;
}

export interface RuleSetOption {
  /** A RuleSet or a built-in name; default 'deposit-swap'. */
  ruleSet?: RuleSet | BuiltinRuleSetName;
}

export function validateEvent(event: unknown, options?: RuleSetOption): asserts event is EventInput;
export function normalizeEvent(event: unknown, options?: RuleSetOption & { type?: string }): NormalizedEvent;
export function fingerprint(event: EventInput, options?: RuleSetOption): string;
export function decide(
  input: { event: EventInput; receipt: StoredReceipt | null; workflow: Workflow | null } & RuleSetOption,
): Decision;
export function planDepositConfirmation(workflow: Workflow | null, event: DepositConfirmedEvent): 'advance' | 'already-applied';
export function verifyRuleSet(definition: RuleSetDefinition | RuleSet | string): VerificationReport;

/** JSON text as received: a string, or its UTF-8 bytes. */
export type JsonText = string | Uint8Array | ArrayBuffer;
/**
 * The RFC 8785 text of a JSON value: members sorted by UTF-16 code units, numbers as
 * ECMAScript writes them. Throws INVALID_PAYLOAD (reject, `details.path`) for what is no
 * JSON value (undefined, a function, a symbol, a BigInt, NaN or an infinity, a Map or
 * any object that is not plain, a cycle, a lone surrogate), nests deeper than 64 or
 * writes more than 1 MiB.
 */
export function canonicalJson(value: unknown): string;
/** canonicalJson of JSON text, read as JSON.parse reads it (a name given twice keeps its last value). */
export function canonicalJsonText(text: JsonText): string;
/** `pf1:` + hex SHA-256 of the UTF-8 of canonicalJson(value): one fingerprint for payloads that mean the same. */
export function fingerprintPayload(value: unknown): string;
/** fingerprintPayload of JSON text. */
export function fingerprintPayloadText(text: JsonText): string;

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
export type KeyedRequest = { key: string; payload: unknown; fingerprint?: undefined } | { key: string; fingerprint: string; payload?: undefined };

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
  ? (Tx extends { readonly client: unknown } ? Tx : KeyedTransaction)
  : KeyedTransaction;

/** What a webhook request is to the receiver: the raw body's bytes and the headers (lowercase names). */
export interface WebhookRequest {
  method?: string;
  headers: Readonly<Record<string, string | string[] | undefined>>;
  body: Uint8Array;
}

/** An answer of the HTTP layer: status, headers and the body to send. */
export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export type SignatureVerdict = boolean | { ok: true } | { ok: false; reason: string };

export interface WebhookReceiverOptions {
  /** Checks the raw body's signature before anything is parsed or stored (hmacSignature gives one); false accepts unsigned requests. */
  verify: ((request: WebhookRequest) => SignatureVerdict | Promise<SignatureVerdict>) | false;
  /** Stores a delivery a person must look at; the receiver answers 200 once it resolves, 503 if it throws. */
  park: (delivery: { body: Uint8Array; headers: WebhookRequest['headers']; error: IdemflowError }) => unknown | Promise<unknown>;
  /** The largest raw body read (default 65536): 413 beyond. */
  maxBytes?: number;
  /** The delivery's context for the handler (its delivery count, metadata). */
  context?: (request: { headers: WebhookRequest['headers'] }) => DeliveryContext;
}

/**
 * A Node request listener (node:http, Express: `app.post(path, receiver)`) that
 * answers ack 200, retry 503 with Retry-After, dead-letter 400, park 200 (after
 * parking), a refused signature 401, too large 413.
 */
export interface WebhookReceiver {
  (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, next?: (error?: unknown) => void): Promise<void>;
  /** The same answer for any framework: the raw body in, `{ status, headers, body }` out. */
  receive(request: WebhookRequest): Promise<HttpAnswer>;
  readonly maxBytes: number;
}

export function createWebhookReceiver(handle: DeliveryHandler, options: WebhookReceiverOptions): WebhookReceiver;

export interface HmacSignatureOptions {
  /** The endpoint's secret, or several while one is rotated. */
  secret: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  /** The header that carries `t=<unix seconds>,v1=<hex>` (default 'webhook-signature'). */
  header?: string;
  /** How far the signed time may be from now, either way (default 300 s). */
  toleranceSeconds?: number;
  now?: () => number;
}

/** A verify hook: HMAC-SHA256 of "<t>.<raw body>", Stripe's scheme, compared in constant time; reasons 'missing', 'malformed', 'stale', 'mismatch'. */
export function hmacSignature(options: HmacSignatureOptions): (request: WebhookRequest) => SignatureVerdict;
/** The header value a sender writes for `body` at `timestamp` (unix seconds, default now). */
export function signPayload(body: string | Uint8Array, options: { secret: HmacSignatureOptions['secret']; timestamp?: number }): string;

/** Options of the Idempotency-Key middleware (idemflow/express, idemflow/fastify); docs/http.md. */
export interface IdempotencyOptions {
  store: Store;
  /** The request header (default 'Idempotency-Key'). */
  header?: string;
  /** 400 without the header (default false: such a request runs as usual). */
  required?: boolean;
  /** The methods it covers (default POST and PATCH). */
  methods?: string[];
  /** Response headers kept with the status and body for replays (default content-type, location). */
  storeHeaders?: string[];
  /** The header a replay carries, `true` (default 'Idempotent-Replayed'). */
  replayHeader?: string;
  /** How long a request waits for another with its key still running before 409 (default 0). */
  waitMs?: number;
  /** The Retry-After of a 409, in ms (rounded up to seconds; default 1000). */
  retryAfterMs?: number;
  /** The largest request body fingerprinted (default 1 MiB): 413 beyond. */
  maxBodyBytes?: number;
  /** The largest response body kept (default 256 KiB): a larger answer is a 500 and nothing is kept. */
  maxResponseBytes?: number;
  /** Whose keys these are (an account, a tenant): the same key under two scopes is two keys. */
  scope?: (request: { method: string; url: string; headers: WebhookRequest['headers']; body: Uint8Array }) => string | Promise<string>;
}

/** What the handler of a request with a key gets (`req.idempotency`, `request.idempotency`). */
export interface IdempotencyContext {
  /** The client's key. */
  readonly key: string;
  /** The keyed transaction: the stored response commits in it. */
  readonly tx: KeyedTransaction;
  /** tx.client: the driver's handle bound to the transaction, for the handler's own writes. */
  readonly client: unknown;
  /** Keep this answer even when it is a 5xx (otherwise a 5xx leaves the key free for the retry). */
  final(): void;
}

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
export type OnApplied<Tx = any> = (tx: Tx, decision: AppliedDecision) => JsonValue | void | Promise<JsonValue | void>;

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

export interface MemorySnapshot {
  workflows: Map<string, Workflow>;
  inbox: Map<string, Receipt & { recordedAt?: number }>;
  outbox: Map<string, StoredOperation>;
  /** The host's own tables (tx.table(name)), by name. */
  tables: Map<string, Map<string, unknown>>;
}

/**
 * An InMemoryStore transaction: the methods, plus the draft view (the test
 * view) as Maps over the same pending writes, kept or discarded with the
 * transaction. set() checks a row with the store's readers; get() returns copies.
 */
export interface InMemoryTransaction extends StoreTransaction {
  /** A table of the host's own, by name: what the host writes in it commits or rolls back with the rest (snapshot().tables). */
  table(name: string): Map<string, unknown>;
  /** Inserts or replaces a workflow in this transaction. */
  putWorkflow(workflow: Workflow): Promise<void>;
  readonly workflows: Map<string, Workflow>;
  readonly inbox: Map<string, Receipt & { recordedAt?: number }>;
  readonly outbox: Map<string, Partial<StoredOperation> & Pick<OutboxOperation, 'type' | 'workflowId' | 'eventId'>>;
}

/** All-or-nothing transactions serialised within one process; not durable. */
export class InMemoryStore implements Store, OutboxStore, OutboxAdmin, ExclusiveLocks {
  /** `options.now`: the clock for recordedAt, createdAt and updatedAt (default Date.now). */
  constructor(workflows?: Iterable<Workflow>, options?: { now?: () => number });
  /** A store holding copies of a snapshot's tables (Maps, or arrays of [key, value] entries). */
  static fromSnapshot(
    snapshot: { [T in keyof MemorySnapshot]?: MemorySnapshot[T] | Iterable<[string, unknown]> },
    options?: { now?: () => number },
  ): InMemoryStore;
  now(): number;
  transaction<T>(fn: (tx: InMemoryTransaction) => Promise<T>, options?: TransactionOptions): Promise<T>;
  process(event: EventInput, options?: ProcessOptions<InMemoryTransaction>): Promise<ProcessResult>;
  processBatch(events: readonly EventInput[], options?: ProcessOptions<InMemoryTransaction>): Promise<BatchResult[]>;
  snapshot(): MemorySnapshot;
  getWorkflow(id: string): Promise<Workflow | null>;
  putWorkflow(workflow: Workflow): Promise<void>;
  getReceipt(eventId: string): Promise<(Receipt & { recordedAt?: number }) | null>;
  getOperation(id: string): Promise<StoredOperation | null>;
  claimOperations(args: ClaimArgs): Promise<ClaimedOperation[]>;
  renewLease(args: RenewArgs): Promise<boolean>;
  completeOperation(args: FencedArgs): Promise<boolean>;
  failOperation(args: FailArgs): Promise<boolean>;
  releaseOperation(args: FencedArgs): Promise<boolean>;
  requeue(operationId: string, options?: { now?: number }): Promise<boolean>;
  requeueOperations(args: RequeueOperationsArgs): Promise<RequeueResult[]>;
  listOperations(args?: ListOperationsArgs): Promise<StoredOperation[]>;
  stats(args?: { now?: number | Date }): Promise<OutboxStats>;
  releaseOwner(owner: string, args?: { now?: number | Date }): Promise<string[]>;
  purgeReceipts(args: PurgeArgs): Promise<PurgeResult>;
  purgeOperations(args: PurgeArgs & { status?: 'done' | 'dead' }): Promise<PurgeResult>;
  withExclusiveLock<T>(name: string, fn: () => Promise<T> | T, options?: { leaseMs?: number }): Promise<LockResult<T>>;
}

// ---- Outbox consumer (docs/outbox.md) ---------------------------------------

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
  | (FencedArgs & { status: 'pending'; nextAttemptAt: number; lastError: string })
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
}

/** The policy as the core normalised it. */
export interface OutboxPolicy {
  readonly maxAttempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly leaseMs: number;
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

export type DeadReason = 'max-attempts' | 'non-retryable' | 'claims-expired';

export interface OutboxConsumerEvents {
  claimed: OperationEvent & { owner: string; leaseExpiresAt: number };
  done: OperationEvent;
  'retry-scheduled': OperationEvent & { delayMs: number; nextAttemptAt: number; error: string };
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

// ---- Delivery handler (README: Delivery handler) -----------------------------

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
  /** Items per batch: a batch goes when it holds this many (a broker's prefetch window). */
  size: number;
  /** …or this long after its first item arrived (default 5 ms). */
  lingerMs?: number;
  /** Items held or in unsettled batches at most; push() waits for room (default `size`). */
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
