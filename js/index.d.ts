// Types of the idemflow package. Both entry points (import and require) export these names.

/** What the host should do with a delivery that failed. */
export type Disposition = 'reject' | 'retry' | 'reconcile';

export type ErrorCode =
  | 'INVALID_EVENT'
  | 'EVENT_ID_CONFLICT'
  | 'UNKNOWN_WORKFLOW'
  | 'IDENTITY_MISMATCH'
  | 'INVALID_TRANSITION'
  | 'OUTBOX_CONFLICT'
  | 'CONCURRENT_UPDATE'
  | 'INVALID_RECORD'
  | 'INVALID_ARGUMENT'
  | 'RULESET_INVALID';

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
}

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
}

export type ProcessResult =
  | { outcome: 'applied'; operationId: string | null; operationIds: string[]; status: string; revision: number }
  | { outcome: 'already-applied' | 'stale' | 'duplicate-delivery' };

export type BuiltinRuleSetName = 'deposit-swap' | 'order-shipment';

export type Answer =
  | {
      outcome: 'applied';
      to: string;
      record: string[];
      clear: string[];
      emit: { type: string; id: string; payload: string[] }[];
      revisionStep: number;
    }
  | { outcome: 'already-applied' | 'stale' }
  | { error: 'UNKNOWN_WORKFLOW' | 'INVALID_TRANSITION'; disposition: Disposition };

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
}

export type RuleAnswerDefinition =
  | {
      outcome: 'applied';
      to: string;
      record?: string[];
      clear?: string[];
      emit?: { type: string; id: string; payload?: string[] }[];
      revisionStep?: number;
    }
  | { outcome: 'already-applied' | 'stale' }
  | { error: 'UNKNOWN_WORKFLOW' | 'INVALID_TRANSITION'; disposition?: Disposition };

export type PropertyName =
  | 'one-answer-per-pair'
  | 'every-status-reachable'
  | 'terminal-statuses-final'
  | 'operation-ids-unique'
  | 'revision-increases'
  | 'guards-read-recorded-fields';

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
  }[];
}

/** A verified rule set, compiled once and held in wasm memory. */
export class RuleSet {
  private constructor();
  static builtin(name: BuiltinRuleSetName): RuleSet;
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
/** decide over JSON text `{"event":…,"receipt":…,"workflow":…}`, for hot loops. */
export function decideJSON(text: string, options?: RuleSetOption): Decision;
export function planDepositConfirmation(workflow: Workflow | null, event: DepositConfirmedEvent): 'advance' | 'already-applied';
export function verifyRuleSet(definition: RuleSetDefinition | RuleSet | string): VerificationReport;

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

/** What processEvent needs of a store. */
export interface Store {
  transaction<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T>;
  maxAttempts?: number;
}

export interface ProcessOptions extends RuleSetOption {
  /** Whole read-decide-write cycles to try when a concurrent writer wins (default 5). */
  maxAttempts?: number;
  /** Refuse events of any other type (INVALID_EVENT, field "type"). */
  type?: string;
}

export function processEvent(store: Store, event: EventInput, options?: ProcessOptions): Promise<ProcessResult>;
export function processDepositConfirmed(store: Store, event: DepositConfirmedEvent, options?: ProcessOptions): Promise<ProcessResult>;
export function commitWriteSet(tx: StoreTransaction, writeSet: WriteSet): Promise<void>;

export interface MemorySnapshot {
  workflows: Map<string, Workflow>;
  inbox: Map<string, Receipt>;
  outbox: Map<string, OutboxOperation>;
}

/** All-or-nothing transactions serialised within one process; not durable. */
export class InMemoryStore implements Store {
  constructor(workflows?: Iterable<Workflow>);
  transaction<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T>;
  process(event: EventInput, options?: ProcessOptions): Promise<ProcessResult>;
  snapshot(): MemorySnapshot;
  getWorkflow(id: string): Promise<Workflow | null>;
  putWorkflow(workflow: Workflow): Promise<void>;
}

/** Size of the wasm linear memory in bytes (diagnostics: it only grows). */
export function wasmMemoryBytes(): number;
