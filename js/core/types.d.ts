// Types of the rule core: errors, events, decisions, rule sets and their verification, canonical payloads.

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
  | 'IDEMPOTENCY_KEY_IN_PROGRESS'
  | 'WRITE_TOO_LARGE'
  | 'BOUND_EXCEEDED';

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

/** One fact's entry in a workflow's facts map: the last event type applied, its recorded fields, the per-fact operations emitted. */
export interface FactEntry {
  event: string;
  operations?: string[];
  [field: string]: string | number | string[] | undefined;
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
  /** A rule set with `facts` sets its map (`facts.name`) to the whole new map of fact entries. */
  set: { status: string; revision: number; [field: string]: string | number | null | Record<string, FactEntry> };
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
  /** Written only where no operation of this id exists (an untracked fact's per-fact operation: a later word of the fact emits the same id again). */
  ifAbsent?: true;
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
  | ({
      outcome: 'applied';
      operationId: string | null;
      operationIds: string[];
      status: string;
      revision: number;
      output?: JsonValue;
    } & ProcessMeasure)
  | ({ outcome: 'already-applied' | 'stale' } & ProcessMeasure)
  /** `original`: what the first delivery produced; null when its receipt was written by a version that did not keep it. */
  | ({ outcome: 'duplicate-delivery'; original: OriginalResult | null } & ProcessMeasure);

/** Why a transaction lost a race (CONCURRENT_UPDATE's details.reason). */
export type RaceReason =
  | 'receipt-exists'
  | 'workflow-changed'
  | 'workflow-exists'
  | 'database-busy'
  | 'serialization-failure'
  | 'deadlock'
  | 'lock-timeout'
  | (string & {});

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
      /** The fact's entry is not kept; its per-fact operations are written only if absent. */
      untracked?: true;
    }
  | { outcome: 'already-applied' | 'stale' }
  | { error: 'UNKNOWN_WORKFLOW' | 'INVALID_TRANSITION'; disposition: RuleDisposition };

export type TableCondition = [string, string, string] | { other: string[] } | { emitted: string };

export interface TableRow {
  event: string;
  /** Status names; "(none)" stands for "no workflow yet". */
  statuses: string[];
  guard: string[];
  /**
   * A rule with one comparison and an `else` as written, or with cases: the first case whose
   * conditions all hold answers (a case without `when` always does). A condition is
   * `[eventField, op, recordedField]`, `{ other: eventTypes }` or `{ emitted: operationName }`.
   */
  answer: Answer | { when: TableCondition; then: Answer; else: Answer } | { cases: { when?: TableCondition[]; then: Answer }[] };
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
  /** `count`: a safe integer >= 1 sent as a JSON number (an observation's number, a period). */
  fields?: { name: string; kind: 'text' | 'units' | 'count'; description?: string }[];
  events: { type: string; fields?: string[]; identity?: string[]; description?: string }[];
  /**
   * Several facts per workflow (deposits by `depositRef`): `data[name]` maps
   * each fact's key to its entry `{event, <record fields>, operations?}`.
   */
  facts?: { name: string; key: string; events: string[]; record?: string[]; description?: string };
  rules: {
    on: string | string[];
    in: string | string[];
    guard?: string[];
    /** One condition or an array of them (all must hold): `then` when it holds, `else` otherwise. */
    when?: RuleWhen;
    then?: RuleAnswerDefinition;
    else?: RuleAnswerDefinition;
    /** A decision list: the first case whose `when` holds answers; the last has no `when`. */
    cases?: { when?: RuleWhen; then: RuleAnswerDefinition; description?: string }[];
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
    /** Versioned observations: the producer numbers its events about the workflow's fact 1, 2, 3 … in `field` (a count). */
    sequence?: { field: string; events: string[]; description?: string };
    description?: string;
  };
}

/**
 * `[eventField, op, recordedField]` over two counts or two amounts;
 * `{other}`: another fact's entry last saw one of these event types;
 * `{emitted}`: this fact's entry lists that per-fact operation.
 */
export type RuleCondition = [string, '>' | '>=' | '=' | '<=' | '<', string] | { other: string | string[] } | { emitted: string };
export type RuleWhen = RuleCondition | RuleCondition[];

export type RuleAnswerDefinition =
  | {
      outcome: 'applied';
      to: string;
      record?: string[];
      clear?: string[];
      /** `recurring: true` goes with the id `<name>:{revision}:{workflowId}` (and only with it). */
      emit?: { type: string; id: string; payload?: string[]; recurring?: boolean }[];
      revisionStep?: number;
      /** On a fact event: keep no entry for the fact (one already there is removed); its per-fact operations are written only if absent. */
      untracked?: boolean;
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
  | 'invariants'
  | 'reorder-safe';

/** One delivery in a reorder-safe counterexample. */
export interface DeliveryStep {
  event: string;
  from: string;
  /** `applied`, `already-applied`, `stale`, or `CODE (disposition)`. */
  answer: string;
  to: string;
  /** The rule that answered (absent when a guard answered before any rule). */
  rule?: string;
  /** The fact (`A`, `B`) an observation is of. */
  fact?: string;
  /** The observation's number, for an event of `order.sequence`. */
  sequence?: number;
}

/** Where one delivery order of a history ends. */
export interface DeliveryEnd {
  status: string;
  /** The workflow's data (the facts map included), without status and revision. */
  data: Record<string, unknown>;
  /** Operation ids emitted (a recurring one by its name, once per emission). */
  emitted: string[];
  answeredWithError: string[];
  undelivered: string[];
}

/** Two delivery orders of one history that end differently. */
export interface ReorderCounterexample {
  /** The start status (`(none)`: no workflow yet). */
  start: string;
  /** The start workflow's data, when it has any (the host's `expectedUnits`). */
  workflow?: Record<string, unknown>;
  /** Each fact's amount class next to the expected amount: `below`, `equal`, `above` or `free`. */
  amounts?: Record<string, string>;
  /** The history's events (a type; a fact's numbered observation as `DEPOSIT_DETECTED A#3`). */
  history: string[];
  /** The order the workflow saw declared racing types in, in words. */
  races?: string[];
  /** The history in order (or another order the races put first); absent for an invariant or an id emitted twice. */
  expected?: { inOrder: boolean; deliveries: DeliveryStep[]; end: DeliveryEnd };
  actual: { deliveries: DeliveryStep[]; end: DeliveryEnd };
  /** invariants: the one this order's last delivery broke. */
  invariant?: { name: string; says: string };
  /** An operation id this order emits a second time. */
  emittedTwice?: string;
  /** The first delivery at which the two orders differ (the last one for an invariant). */
  divergesAt: number;
}

/** What `idemflow rules prove` writes and `RuleSet.fromJSON(definition, { proof })` reads. */
export interface ProofRecord {
  proof: 1;
  /** The proof engine that made it; a record of another engine is set aside and the definition proven again. */
  engine: string;
  ok: true;
  ruleSet: RuleSetRef;
  properties: PropertyName[];
  explored: null | { says: string; histories: number; configurations: number };
  statesExplored: number;
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
      bound: { events: number; copiesPerType: number; says: string; [key: string]: unknown };
      /** invariants: each one the rule set states, and what it says. */
      invariants?: { name: string; says: string }[];
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
  static fromJSON(definition: RuleSetDefinition | string, options?: { proof?: ProofRecord | string }): RuleSet;
  readonly id: string;
  readonly version: number;
  /** `sha256:` + hex SHA-256 of the definition's RFC 8785 canonical JSON. */
  readonly hash: string;
  table(): TableRow[];
  tableMarkdown(): string;
  /** The operation types its rules can emit, sorted. */
  operationTypes(): string[];
  /**
   * The state diagram, drawn from table(): Mermaid (default) or Graphviz DOT;
   * `all` adds the answers that change nothing as self-loops, `conditions` names
   * the case of each transition. A fatal INVALID_ARGUMENT for bad options.
   */
  graph(options?: { format?: 'mermaid' | 'dot'; all?: boolean; conditions?: boolean }): string;
  definition(): RuleSetDefinition;
  toJSON(): RuleSetDefinition;
}

export interface RuleSetOption {
  /** A RuleSet or a built-in name; default 'deposit-swap'. */
  ruleSet?: RuleSet | BuiltinRuleSetName;
}

/** putWorkflow's options. */
export interface PutWorkflowOptions {
  /**
   * The rule set the workflow runs under: its facts map (when the rule set
   * has one) must be an object the core reads (entries, bounds), never its
   * JSON text as a string (INVALID_ARGUMENT naming the field). No default:
   * without it no facts map is checked.
   */
  ruleSet?: RuleSet | BuiltinRuleSetName;
}

export function validateEvent(event: unknown, options?: RuleSetOption): asserts event is EventInput;
export function normalizeEvent(event: unknown, options?: RuleSetOption & { type?: string }): NormalizedEvent;
export function fingerprint(event: EventInput, options?: RuleSetOption): string;
export function decide(input: { event: EventInput; receipt: StoredReceipt | null; workflow: Workflow | null } & RuleSetOption): Decision;
export function planDepositConfirmation(workflow: Workflow | null, event: DepositConfirmedEvent): 'advance' | 'already-applied';
export function verifyRuleSet(definition: RuleSetDefinition | RuleSet | string): VerificationReport;
/** Proves a definition and returns its proof record; throws RULESET_INVALID (with `details.report`) when a property fails. */
export function proveRuleSet(definition: RuleSetDefinition | RuleSet | string): ProofRecord;

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
