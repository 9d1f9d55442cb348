// Types of InMemoryStore (exported by the package's main entry point).

import type { EventInput, OutboxOperation, ProcessResult, PutWorkflowOptions, Receipt, Workflow } from '../../core/types.js';
import type { BatchResult, ExclusiveLocks, ProcessOptions, Store, StoreTransaction, TransactionOptions } from '../../host/types.js';
import type { OutboxAdmin, OutboxStore, StoredOperation } from '../../outbox/types.js';

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
  putWorkflow(workflow: Workflow, options?: PutWorkflowOptions): Promise<void>;
  readonly workflows: Map<string, Workflow>;
  readonly inbox: Map<string, Receipt & { recordedAt?: number }>;
  readonly outbox: Map<string, Partial<StoredOperation> & Pick<OutboxOperation, 'type' | 'workflowId' | 'eventId'>>;
}

/** All-or-nothing transactions serialised within one process; not durable. */
// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the class's outbox, admin and lock methods, typed once by their interfaces below
export class InMemoryStore implements Store {
  /**
   * `options.now`: the clock for recordedAt, createdAt and updatedAt (default Date.now); `options.timeoutMs`: how long a
   * transaction waits for its callback before its writes are dropped and the call fails (default 30000).
   */
  constructor(workflows?: Iterable<Workflow>, options?: { now?: () => number; timeoutMs?: number });
  /** A store holding copies of a snapshot's tables (Maps, or arrays of [key, value] entries). */
  static fromSnapshot(
    snapshot: { [T in keyof MemorySnapshot]?: MemorySnapshot[T] | Iterable<[string, unknown]> },
    options?: { now?: () => number; timeoutMs?: number },
  ): InMemoryStore;
  now(): number;
  transaction<T>(fn: (tx: InMemoryTransaction) => Promise<T>, options?: TransactionOptions): Promise<T>;
  process(event: EventInput, options?: ProcessOptions<InMemoryTransaction>): Promise<ProcessResult>;
  processBatch(events: readonly EventInput[], options?: ProcessOptions<InMemoryTransaction>): Promise<BatchResult[]>;
  snapshot(): MemorySnapshot;
  getWorkflow(id: string): Promise<Workflow | null>;
  putWorkflow(workflow: Workflow, options?: PutWorkflowOptions): Promise<void>;
  getReceipt(eventId: string): Promise<(Receipt & { recordedAt?: number }) | null>;
  getOperation(id: string): Promise<StoredOperation | null>;
}

/** The outbox, admin and lock calls InMemoryStore offers, as every store does. */
export interface InMemoryStore extends OutboxStore, OutboxAdmin, ExclusiveLocks {}
