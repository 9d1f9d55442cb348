// idemflow/mongodb: MongoDB (replica set or sharded cluster) over the official driver.
import type { ClientSession, Db, MongoClient } from 'mongodb';
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

export interface MongoStoreOptions extends StoreOptions {
  /** The database: a Db or its name (default: the database of the connection string). */
  db?: Db | string;
}

/**
 * A durable store over MongoDB. Documents: workflows {_id, status, revision,
 * data, createdAt, updatedAt}; inbox {_id: eventId, fingerprint, workflowId,
 * eventType, outcome, ruleSetId, ruleSetVersion, ruleSetHash, recordedAt, result};
 * outbox {_id, type, workflowId, eventId, payload, status, attempts,
 * nextAttemptAt, leaseOwner, leaseExpiresAt, fencingToken, lastError,
 * createdAt, updatedAt}. An outbox store too: a claim is one findOneAndUpdate per operation.
 */
export declare class MongoStore extends StoreBase {
  constructor(client: MongoClient, options?: MongoStoreOptions);
  /** The MongoClient the store works through (the host owns and closes it). */
  readonly client: MongoClient;
  readonly db: Db;
}
/** Every member of the DurableStore contract (declaration merging keeps them in one place). */
export interface MongoStore extends DurableStore<MongoTransaction> {
  now(): number;
}

/**
 * The handle `MongoStore.transaction(fn)` passes to `fn`; exported so a host can
 * recognise it (`instanceof`), not to be constructed.
 */
export declare class MongoTransaction {
  private constructor();
}
export interface MongoTransaction extends DurableStoreTransaction {
  /** The MongoClient: the host's own operations pass `{ session: tx.session }` to commit with idemflow's. */
  readonly client: MongoClient;
  /** The transaction's session. */
  readonly session: ClientSession;
}
