// idemflow/redis: Redis 7+ (or Valkey 7.2+) over node-redis or ioredis.
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

/** What the store needs of a client: node-redis's `sendCommand(args)` or ioredis's `call(...args)`. */
export type RedisClientLike = { sendCommand(args: string[]): Promise<unknown> } | { call(...args: string[]): Promise<unknown> };

export interface RedisStoreOptions extends Omit<StoreOptions, 'statementTimeoutMs'> {
  /**
   * After each commit (and putWorkflow), WAIT until `replicas` replicas have
   * it, for at most `timeoutMs` (less than the store's `timeoutMs`); fewer is
   * STORE_UNAVAILABLE reason `replicas-behind`. Blocks the client's
   * connection meanwhile.
   */
  waitReplicas?: { replicas: number; timeoutMs: number };
}

/**
 * A durable store over one Redis server (not a Redis Cluster). Records are
 * hashes at `<table>:r:<id>`; a transaction commits in one Lua script that
 * checks nothing it read changed. An outbox store too: a claim is one script.
 */
export declare class RedisStore extends StoreBase {
  constructor(client: RedisClientLike, options?: RedisStoreOptions);
  /** The client the store works through (the host owns and closes it). */
  readonly client: RedisClientLike;
  /** Checks the server is Redis 7+ and loads the scripts; nothing to create. */
  migrate(): Promise<void>;
}
/** Every member of the DurableStore contract (declaration merging keeps them in one place). */
export interface RedisStore extends DurableStore<RedisTransaction> {
  now(): number;
}

/**
 * The host's own Redis writes inside idemflow's transaction: queued and run by
 * the commit script after idemflow's checks, so they commit with the receipt
 * or not at all. Arguments are strings or safe integers. Reads are not here:
 * read through your own client (outside the transaction, without the queued writes).
 */
export interface RedisQueuedWrites {
  set(key: string, value: string | number, mode?: 'EX' | 'PX', ttl?: number): void;
  del(...keys: string[]): void;
  incrby(key: string, increment: number | string): void;
  hset(key: string, fields: Record<string, string | number>): void;
  hset(key: string, ...fieldValues: (string | number)[]): void;
  hdel(key: string, ...fields: string[]): void;
  hincrby(key: string, field: string, increment: number | string): void;
  sadd(key: string, ...members: (string | number)[]): void;
  srem(key: string, ...members: (string | number)[]): void;
  zadd(key: string, ...scoreMembers: (string | number)[]): void;
  zrem(key: string, ...members: (string | number)[]): void;
  rpush(key: string, ...elements: (string | number)[]): void;
  lpush(key: string, ...elements: (string | number)[]): void;
  expire(key: string, seconds: number): void;
  pexpire(key: string, milliseconds: number): void;
  /** One of the commands above by name. */
  command(name: string, ...args: (string | number)[]): void;
}

/**
 * The handle `RedisStore.transaction(fn)` passes to `fn`; exported so a host can
 * recognise it (`instanceof`), not to be constructed.
 */
export declare class RedisTransaction {
  private constructor();
}
export interface RedisTransaction extends DurableStoreTransaction {
  readonly client: RedisQueuedWrites;
}
