// @ts-check
'use strict';
// Redis (and Valkey) over node-redis or ioredis. A transaction reads without
// locking, keeps what it read, queues its writes, and commits them in one
// Lua script that first checks that nothing it read has been written since
// (each record counts its writes in `_v`) and that nothing it expected absent
// exists: optimistic, so no transaction waits on another's decide, and a
// lost check is a lost race (CONCURRENT_UPDATE) the host cycle runs again.
// The script checks everything before its first write, so a commit is all or
// nothing. Outbox claims and changes are scripts of their own (scripts.cjs).

const { randomUUID } = require('node:crypto');
const { IdemflowError } = require('../../core/errors.cjs');
const { checkHandle, checkOptionKeys, wholeNumber } = require('../../core/options.cjs');
const {
  STORE_UNAVAILABLE,
  isStoreUnavailable: isUnavailable,
  receiptExists,
  workflowChanged,
  operationExists,
  lostRace,
  storeUnavailable,
  schemaMissing,
  invalidArgument,
} = require('../../store/errors.cjs');
const {
  DEFAULT_TABLES,
  STORE_OPTIONS,
  resolveClock,
  resolveRaceRetries,
  resolveTables,
  resolveTimeouts,
} = require('../../store/options.cjs');
const { transactionOptions, watchClient, withDeadline } = require('../../store/bounds.cjs');
const { StoreBase } = require('../../store/base.cjs');
const { StoreTransaction } = require('../../store/transaction.cjs');
const { operationMatches } = require('../../store/queries.cjs');
const { SCRIPTS } = require('./scripts.cjs');
const { HostCommands, hostClient } = require('./commands.cjs');

/**
 * @typedef {'workflows' | 'inbox' | 'outbox'} Table
 * @typedef {{ record: Record<string, any> | null, v: string }} Seen  what a transaction holds of a key: the record (null: absent) and its `_v`
 * @typedef {(command: string[]) => Promise<any>} Send
 */

/** The scan bound of one claim: due entries looked at (types filtered out included). */
const CLAIM_SCAN = 10_000;
/** Up to this many keys a read sends as HGETALLs in one write (one round trip); more, one script. */
const PIPELINED_READS = 4;
/** Ids one listOperations page reads at a time. */
const LIST_PAGE = 200;

/** The server errors that say the server cannot work now (redeliver later), by their first word. */
const UNAVAILABLE_REPLIES = {
  OOM: 'out-of-memory',
  READONLY: 'read-only-replica',
  LOADING: 'loading',
  BUSY: 'busy',
  MASTERDOWN: 'primary-down',
  CLUSTERDOWN: 'cluster-down',
  TRYAGAIN: 'try-again',
  NOREPLICAS: 'no-replicas',
  MISCONF: 'persistence-failing',
};

/**
 * A value of a record as a hash holds it: text; null leaves the field out.
 * @param {unknown} value
 * @returns {string | null}
 */
function fieldText(value) {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  return JSON.stringify(value);
}

/**
 * A record's fields as [field, text, ...], the nulls left out.
 * @param {Record<string, unknown>} record
 */
function flatFields(record) {
  /** @type {string[]} */
  const flat = [];
  for (const [field, value] of Object.entries(record)) {
    const text = fieldText(value);
    if (text !== null) flat.push(field, text);
  }
  return flat;
}

/**
 * [field, value, ...] as an object, `_v` apart. A plain object (V8 reads
 * it fast); a stored field named "__proto__" (only a hand could write one)
 * is left out rather than becoming the prototype.
 * @param {unknown[]} flat
 */
function hashOf(flat) {
  /** @type {Record<string, any>} */
  const hash = {};
  let v = '0';
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const field = String(flat[i]);
    if (field === '_v') v = String(flat[i + 1]);
    else if (field !== '__proto__') hash[field] = String(flat[i + 1]);
  }
  return { hash, v };
}

/**
 * HGETALL's reply as [field, value, ...]: RESP2 gives a list, RESP3 a map (node-redis: a Map or an object).
 * @param {unknown} reply
 * @returns {unknown[]}
 */
function flatOf(reply) {
  if (Array.isArray(reply)) return reply;
  if (reply instanceof Map) return [...reply].flat();
  if (reply !== null && typeof reply === 'object') return Object.entries(reply).flat();
  return [];
}

/**
 * A read reply for one key: `{ record, v }`. A key holding something else
 * than a hash reads as a record that cannot be read (INVALID_RECORD when used).
 * @param {unknown} reply
 * @returns {Seen}
 */
function seenOf(reply) {
  if (!Array.isArray(reply) || reply.length === 0) return { record: null, v: '' };
  if (reply[0] === '!') return { record: { id: undefined, eventId: undefined, data: `a ${reply[1]}, not a hash` }, v: '!' };
  const { hash: record, v } = hashOf(reply);
  return { record, v };
}

/**
 * The message of a server's error reply, or null for anything else (a lost connection).
 * @param {unknown} error
 * @returns {string | null}
 */
function replyOf(error) {
  if (!(error instanceof Error)) return null;
  // ioredis: ReplyError; node-redis: ErrorReply and its subclasses (SimpleError, BlobError in v5).
  for (let proto = Object.getPrototypeOf(error); proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    const name = proto.constructor?.name;
    if (name === 'ReplyError' || name === 'ErrorReply') return error.message;
  }
  return error.name === 'ReplyError' ? error.message : null;
}

/**
 * What a client threw, as the store's error: a server that cannot work now or a lost connection is STORE_UNAVAILABLE.
 * @param {unknown} error
 */
function mapError(error) {
  if (error instanceof IdemflowError) return error;
  const reply = replyOf(error);
  if (reply !== null) {
    const word = reply.split(' ')[0];
    if (word === 'NOSCRIPT') return storeUnavailable(error, 'script-missing');
    if (word in UNAVAILABLE_REPLIES)
      return storeUnavailable(error, UNAVAILABLE_REPLIES[/** @type {keyof typeof UNAVAILABLE_REPLIES} */ (word)]);
    if (/unknown command|Unknown command|Error compiling script|unexpected symbol/.test(reply)) {
      return schemaMissing(error, 'redis-7-needed');
    }
    return storeUnavailable(error, 'database-error');
  }
  // As the SQL stores name them: a server that refused the connection, or a connection that was lost or closed.
  const refused = /** @type {any} */ (error)?.code === 'ECONNREFUSED' || /ECONNREFUSED/.test(String(/** @type {any} */ (error)?.message));
  return storeUnavailable(error, refused ? 'connection-refused' : 'connection-lost');
}

/**
 * The one call the store makes of a client: a command as a list of strings.
 * node-redis: client.sendCommand(args); ioredis: client.call(...args).
 * @param {any} client
 * @returns {Send}
 */
function senderOf(client) {
  if (typeof client.call === 'function') return (command) => client.call(...command);
  return (command) => client.sendCommand(command);
}

class RedisTransaction extends StoreTransaction {
  /** key → what this transaction holds of it (read, or written by it) @type {Map<string, Seen>} */
  #seen = new Map();
  /** key → [the `_v` the commit expects ('' : absent), the error when it is not so] @type {Map<string, [string, () => Error]>} */
  #guards = new Map();
  /** @type {string[][]} */
  #writes = [];
  #host;
  #client;
  /** savepoint name → where to go back to: the writes queued, the undo log, the host's queue @type {Map<string, { writes: number, undo: number, host: any }>} */
  #marks = new Map();
  /** While a savepoint is open: what each write changed in #seen and #guards, to undo [map, key, had, old] @type {[Map<string, any>, string, boolean, any][]} */
  #undo = [];
  /** @type {{ check(): void }} */
  #deadline;
  /** keys this transaction holds (the keyed mode), given back when it ends: [key, token] @type {[string, string][]} */
  holds = [];

  /**
   * @param {RedisStore} store
   * @param {{ check(): void }} deadline
   */
  constructor(store, deadline) {
    super(store);
    this.#deadline = deadline;
    this.#host = new HostCommands((/** @type {string} */ key) => store._protect(key));
    this.#client = hostClient(this.#host);
  }

  /** @returns {RedisStore} */
  get #store() {
    return /** @type {RedisStore} */ (this._store);
  }

  /**
   * The host's own writes, queued into this transaction's commit: set, del,
   * incrby, hset, hdel, hincrby, sadd, srem, zadd, zrem, rpush, lpush,
   * expire, pexpire, and command(name, ...args). Reads are not here.
   */
  get client() {
    return this.#client;
  }

  get savepoints() {
    return true;
  }

  /** @param {string} name */
  async savepoint(name) {
    this.#marks.set(name, { writes: this.#writes.length, undo: this.#undo.length, host: this.#host.mark() });
  }

  /**
   * The writes since the savepoint are undone, not the reads: a key read
   * since stays as read (and is checked at commit).
   * @param {string} name
   */
  async rollbackToSavepoint(name) {
    const mark = this.#marks.get(name);
    if (mark === undefined) throw invalidArgument(`no savepoint ${name}`, { reason: 'no savepoint' });
    this.#writes.length = mark.writes;
    while (this.#undo.length > mark.undo) {
      const [map, key, had, old] = /** @type {[Map<string, any>, string, boolean, any]} */ (this.#undo.pop());
      if (had) map.set(key, old);
      else map.delete(key);
    }
    this.#host.restore(mark.host);
  }

  /** @param {string} name */
  async releaseSavepoint(name) {
    this.#marks.delete(name);
    if (this.#marks.size === 0) this.#undo.length = 0;
  }

  /**
   * A write's change of #seen or #guards, kept to be undone while a savepoint is open.
   * @template V
   * @param {Map<string, V>} map
   * @param {string} key
   * @param {V} value
   */
  #change(map, key, value) {
    if (this.#marks.size > 0) this.#undo.push([map, key, map.has(key), map.get(key)]);
    map.set(key, value);
  }

  /**
   * @param {Table} table
   * @param {string} key
   */
  async _read(table, key) {
    const [seen] = await this.#readAll(table, [key]);
    return seen.record;
  }

  /**
   * The receipt a decision reads, and with it, in the same round trip, the
   * workflow it reads next when the receipt is absent (`workflowId`, the
   * host cycle's hint).
   * @param {string} eventId
   * @param {string} [workflowId]
   */
  async getReceiptToDecide(eventId, workflowId) {
    if (typeof workflowId === 'string')
      await this.#readKeys([this.#store._key('inbox', eventId), this.#store._key('workflows', workflowId)]);
    return super.getReceiptToDecide(eventId);
  }

  /** Many receipts in one round trip. @param {string[]} eventIds */
  async getReceipts(eventIds) {
    await this.#readAll('inbox', eventIds);
    return super.getReceipts(eventIds);
  }

  /** Many workflows in one round trip. @param {string[]} ids */
  async getWorkflows(ids) {
    await this.#readAll('workflows', ids);
    return super.getWorkflows(ids);
  }

  /**
   * What this transaction holds of each key, reading in one script those it has not seen.
   * @param {Table} table
   * @param {string[]} ids
   * @returns {Promise<Seen[]>}
   */
  async #readAll(table, ids) {
    return this.#readKeys(ids.map((id) => this.#store._key(table, id)));
  }

  /**
   * @param {string[]} keys
   * @returns {Promise<Seen[]>}
   */
  async #readKeys(keys) {
    const missing = [...new Set(keys.filter((key) => !this.#seen.has(key)))];
    if (missing.length > 0) {
      this.#deadline.check();
      const read = await this.#store._readKeys(missing);
      missing.forEach((key, i) => {
        const seen = read[i];
        this.#seen.set(key, seen);
        // A key that holds no hash is unreadable to its event, which writes nothing there: nothing to guard.
        if (seen.v !== '!' && !this.#guards.has(key)) {
          this.#guards.set(key, [seen.v, () => lostRace(new Error(`${key} was written`), 'read-changed')]);
        }
      });
    }
    return keys.map((key) => /** @type {Seen} */ (this.#seen.get(key)));
  }

  /**
   * Queues an insert: false when this transaction knows the key exists; else
   * the commit checks it is absent.
   * @param {Table} table
   * @param {any} record
   */
  _insert(table, record) {
    const id = table === 'inbox' ? record.eventId : record.id;
    const key = this.#store._key(table, id);
    if (this.#seen.get(key)?.record) return false;
    const guard = this.#guards.get(key);
    const error =
      table === 'inbox'
        ? () => receiptExists(record)
        : table === 'workflows'
          ? () => workflowChanged({ id, expect: null })
          : () => operationExists(record);
    if (guard === undefined || guard[0] === '') this.#change(this.#guards, key, ['', error]);
    this.#queue(table, key, record, false);
    return true;
  }

  /** An operation written only where its id is absent: the commit script skips it when it exists. @param {any} record */
  _insertIfAbsent(record) {
    const key = this.#store._key('outbox', record.id);
    if (this.#seen.get(key)?.record) return false;
    this.#queue('outbox', key, record, true);
    return true;
  }

  /**
   * @param {Table} table
   * @param {string} key
   * @param {any} record
   * @param {boolean} ifAbsent
   */
  #queue(table, key, record, ifAbsent) {
    /** @type {string[]} */
    let fields;
    if (table === 'workflows') {
      const { createdAt, ...rest } = record;
      fields = flatFields(rest);
      this.#writes.push(['wf', key, String(createdAt), ...fields]);
      fields.push('createdAt', String(createdAt));
    } else {
      fields = flatFields(record);
      this.#writes.push(
        table === 'inbox'
          ? ['rc', key, record.eventId, String(record.recordedAt), ...fields]
          : ['op', key, record.id, ifAbsent ? '1' : '', ...fields],
      );
    }
    if (!ifAbsent) this.#change(this.#seen, key, { record: hashOf(fields).hash, v: 'queued' });
  }

  /**
   * The compare-and-set of a workflow: against what this transaction read
   * (reading it first when it has not), then the whole new record queued;
   * the commit checks the stored one is still what was read.
   * @param {{ id: string, status: string, revision: number, kept: Record<string, unknown>, removed: string[], expect: { status: string, revision: number }, now: number }} change
   */
  async _updateWorkflow(change) {
    const key = this.#store._key('workflows', change.id);
    const [seen] = await this.#readAll('workflows', [change.id]);
    const current = seen.record;
    if (current === null || current.status !== change.expect.status || String(current.revision) !== String(change.expect.revision)) {
      return false;
    }
    /** @type {Record<string, unknown>} */
    let data;
    try {
      data = typeof current.data === 'string' ? JSON.parse(current.data) : { ...current.data };
    } catch {
      return false;
    }
    for (const field of change.removed) delete data[field];
    Object.assign(data, change.kept);
    const guard = this.#guards.get(key);
    if (guard !== undefined) this.#change(this.#guards, key, [guard[0], () => workflowChanged({ id: change.id, expect: change.expect })]);
    this.#queue(
      'workflows',
      key,
      { id: change.id, status: change.status, revision: change.revision, data, createdAt: change.now, updatedAt: change.now },
      false,
    );
    return true;
  }

  /**
   * @internal a workflow inserted or replaced in this transaction (tx.putWorkflow)
   * @param {{ id: string, status: string, revision: number, data: Record<string, unknown> }} record
   * @param {number} now
   */
  _putWorkflow(record, now) {
    const key = this.#store._key('workflows', record.id);
    this.#queue('workflows', key, { ...record, createdAt: now, updatedAt: now }, false);
  }

  /**
   * The keyed mode's hold on an idempotency key across processes, to the end
   * of this transaction: a key with a token, set only when absent, given back
   * by its token (and expiring with the call's bound if the process dies).
   * @param {string} key
   */
  async _tryHoldKey(key) {
    const name = this.#store._holdKey(key);
    const token = await this.#store._take(name);
    if (token === null) return false;
    this.holds.push([name, token]);
    return true;
  }

  /** @internal commits what was queued: one script, all or nothing; nothing when nothing was written. */
  async _commit() {
    if (this.#writes.length === 0 && this.#host.writes.length === 0) return;
    this.#deadline.check();
    const guards = [...this.#guards];
    const plan = {
      i: this.#store.tables.inbox,
      o: this.#store.tables.outbox,
      g: guards.map(([key, [v]]) => [key, v]),
      t: this.#host.checks,
      w: [...this.#writes, ...this.#host.writes.map((command) => ['h', ...command])],
    };
    const keys = [...new Set([...guards.map(([key]) => key), ...this.#writes.map((write) => write[1])])];
    const answer = await this.#store._script(SCRIPTS.COMMIT, keys, [JSON.stringify(plan)]);
    if (answer[0] === 'guard') throw guards[Number(answer[1]) - 1][1][1]();
    if (answer[0] === 'host') {
      throw new IdemflowError('HANDLER_FAILED', `a write of onApplied through tx.client cannot run: ${answer[2]}; nothing was written`, {
        details: { reason: 'host-command-refused', check: this.#host.checks[Number(answer[1]) - 1] },
      });
    }
    await this.#store._awaitReplicas();
  }
}

/**
 * A store over a Redis client (node-redis's createClient() or an ioredis
 * Redis), connected. Redis 7 or later (Valkey 7.2 or later): the scripts use
 * `#!lua` flags. Keys are named after options.tables: `<table>:r:<id>` for a
 * record, `<table>:i:…` for an index. It is also an outbox store.
 */
class RedisStore extends StoreBase {
  /** What telemetry calls this store (the `idemflow.store` attribute). */
  static kind = 'redis';

  /** options.timeoutMs: every call's bound, and a hold's expiry */
  #timeoutMs;
  /** @type {Send} */
  #send;
  /** The key prefixes the host's commands may not write. @type {string[]} */
  #owned;
  /** options.waitReplicas as WAIT's arguments, or null. @type {[string, string] | null} */
  #wait;

  /**
   * @param {any} client a connected node-redis client or ioredis Redis
   * @param {{ tables?: { workflows?: string, inbox?: string, outbox?: string }, raceRetries?: number,
   *   now?: () => number, timeoutMs?: number, waitReplicas?: { replicas: number, timeoutMs: number } }} [options]
   */
  constructor(client, options = {}) {
    checkHandle(
      client,
      'redis',
      (/** @type {any} */ value) =>
        value !== null && typeof value === 'object' && (typeof value.sendCommand === 'function' || typeof value.call === 'function'),
      'RedisStore needs a node-redis client (createClient) or an ioredis Redis',
    );
    if (client.isCluster === true || typeof client.getSlotMaster === 'function') {
      throw invalidArgument('RedisStore runs on one Redis server (a primary, with replicas if you like), not on a Redis Cluster client', {
        field: 'client',
        reason: 'cluster not supported',
      });
    }
    // A server has no bound on one command of its own to set: timeoutMs bounds every call.
    checkOptionKeys(options, [...STORE_OPTIONS, 'timeoutMs', 'waitReplicas'], 'RedisStore');
    const opts = options ?? {};
    const timeouts = resolveTimeouts(opts);
    super({ now: resolveClock(opts.now), raceRetries: resolveRaceRetries(opts), timeoutMs: timeouts.timeoutMs });
    /** The client this store works through. */
    this.client = client;
    /** @type {{ workflows: string, inbox: string, outbox: string }} */
    this.tables = /** @type {{ workflows: string, inbox: string, outbox: string }} */ (resolveTables(opts.tables));
    this.#timeoutMs = timeouts.timeoutMs;
    this.#send = senderOf(client);
    this.#owned = Object.values(this.tables).map((table) => `${table}:`);
    this.#wait = waitReplicasOf(opts.waitReplicas, timeouts.timeoutMs);
    // A client emits 'error' when its connection drops; with no listener Node would end the process.
    watchClient(client);
  }

  /**
   * @internal After a commit: with options.waitReplicas, WAIT until that
   * many replicas have the commit; fewer within its bound is
   * STORE_UNAVAILABLE reason replicas-behind (the commit stands on the
   * primary: the redelivery answers duplicate-delivery).
   */
  async _awaitReplicas() {
    if (this.#wait === null) return;
    const [replicas, timeoutMs] = this.#wait;
    const acknowledged = Number(await this._send(['WAIT', replicas, timeoutMs]));
    if (acknowledged < Number(replicas)) {
      const error = storeUnavailable(
        new Error(`${acknowledged} of ${replicas} replicas acknowledged the commit within ${timeoutMs} ms`),
        'replicas-behind',
      );
      Object.assign(error.details, { acknowledged, replicas: Number(replicas) });
      throw error;
    }
  }

  /**
   * @internal A key set to a fresh token only where absent, expiring after
   * `ms` (a hold or a lock): the token, or null when another holds it.
   * @param {string} key
   * @param {number} [ms]
   */
  async _take(key, ms = this.#timeoutMs) {
    const token = randomUUID();
    return (await this._send(['SET', key, token, 'NX', 'PX', String(ms)])) === null ? null : token;
  }

  /**
   * @internal The key deleted if it still holds `token`: a hold or lock given back by its owner only.
   * @param {string} key
   * @param {string} token
   */
  _giveBack(key, token) {
    return this._script(SCRIPTS.RELEASE, [key], [token]);
  }

  /** @internal the key of a record */
  _key(/** @type {Table} */ table, /** @type {string} */ id) {
    return `${this.tables[table]}:r:${id}`;
  }

  /** @internal the key of the keyed mode's hold on an idempotency key */
  _holdKey(/** @type {string} */ key) {
    return `${this.tables.inbox}:h:${key}`;
  }

  /** @internal throws for a key the host may not write: one of the store's own */
  _protect(/** @type {string} */ key) {
    if (this.#owned.some((prefix) => key.startsWith(prefix))) {
      throw invalidArgument(`tx.client: ${key} is one of idemflow's own keys`, { reason: 'store key', key });
    }
  }

  /**
   * @internal one command, its error mapped
   * @param {string[]} command
   */
  async _send(command) {
    try {
      return await this.#send(command);
    } catch (error) {
      throw mapError(error);
    }
  }

  /**
   * @internal What the server holds at each key, in one round trip: a few
   * HGETALLs sent together (a key of another type answers WRONGTYPE, read as
   * a record that cannot be read), or the read script for many.
   * @param {string[]} keys
   * @returns {Promise<Seen[]>}
   */
  async _readKeys(keys) {
    if (keys.length > PIPELINED_READS) return (await this._script(SCRIPTS.READ, keys, [])).map(seenOf);
    return Promise.all(
      keys.map(async (key) => {
        try {
          return seenOf(flatOf(await this.#send(['HGETALL', key])));
        } catch (error) {
          if (replyOf(error)?.startsWith('WRONGTYPE')) return seenOf(['!', 'key of another type']);
          throw mapError(error);
        }
      }),
    );
  }

  /**
   * @internal a script by its SHA-1, loaded when the server does not have it
   * @param {{ source: string, sha: string }} script
   * @param {string[]} keys
   * @param {string[]} args
   */
  async _script(script, keys, args) {
    const tail = [String(keys.length), ...keys, ...args];
    try {
      return await this.#send(['EVALSHA', script.sha, ...tail]);
    } catch (error) {
      const reply = replyOf(error);
      if (reply === null || !reply.startsWith('NOSCRIPT')) throw mapError(error);
    }
    return this._send(['EVAL', script.source, ...tail]);
  }

  /**
   * @internal one call outside a transaction, within options.timeoutMs
   * @template T
   * @param {string} operation
   * @param {() => Promise<T>} call
   * @returns {Promise<T>}
   */
  _call(operation, call) {
    return withDeadline(this.#timeoutMs, operation, () => call());
  }

  /**
   * Checks the server runs Redis 7 or later (or Valkey) and loads the
   * scripts; there is nothing to create. Calls work without it (a script the
   * server lacks is loaded on first use), but a server too old fails here
   * first, and loudly.
   */
  async migrate() {
    return this._call('migrate', async () => {
      const info = String(await this._send(['INFO', 'server']));
      const version = /(?:redis|valkey)_version:(\d+)/.exec(info);
      if (version !== null && Number(version[1]) < 7) {
        throw schemaMissing(new Error(`the server runs version ${version[1]}`), 'redis-7-needed');
      }
      for (const script of Object.values(SCRIPTS)) await this._send(['SCRIPT', 'LOAD', script.source]);
    });
  }

  /**
   * Runs fn(tx): reads as they come, writes queued and committed by one
   * script when fn returns. If fn throws, nothing is written and the error is
   * rethrown as it was; a record read or expected absent that changed
   * meanwhile is CONCURRENT_UPDATE (a lost race, run again).
   * @template T
   * @param {(tx: RedisTransaction) => Promise<T>} fn
   * @param {{ batch?: boolean, deadlineAt?: number }} [options]
   * @returns {Promise<T>}
   */
  transaction(fn, options) {
    const { deadlineAt } = transactionOptions(options);
    return withDeadline(
      this.#timeoutMs,
      'transaction',
      async (deadline) => {
        const tx = new RedisTransaction(this, deadline);
        try {
          const value = await fn(tx);
          await tx._commit();
          return value;
        } finally {
          for (const [name, token] of tx.holds) await this._giveBack(name, token).catch(() => {});
        }
      },
      deadlineAt,
    );
  }

  /**
   * @internal the stored record, or null
   * @param {Table} table
   * @param {string} key
   */
  async _read(table, key) {
    const [seen] = await this._call('read', () => this._readKeys([this._key(table, key)]));
    return seen.record;
  }

  /**
   * @internal Inserts or replaces a workflow record.
   * @param {{ id: string, status: string, revision: number, data: Record<string, unknown> }} record
   */
  async _putWorkflow(record) {
    const now = this.now();
    await this._call('putWorkflow', async () => {
      await this._script(SCRIPTS.PUT, [this._key('workflows', record.id)], [String(now), ...flatFields({ ...record, updatedAt: now })]);
      await this._awaitReplicas();
    });
  }

  /**
   * @internal withExclusiveLock's lock: a key with a token, set only when absent, expiring after leaseMs, given back by its token.
   * @param {string} name
   * @param {number} leaseMs
   */
  async _tryLock(name, leaseMs) {
    const key = `${this.tables.inbox}:l:${name}`;
    const token = await this._call('lock', () => this._take(key, leaseMs));
    if (token === null) return null;
    return async () => {
      try {
        await this._call('lock', () => this._giveBack(key, token));
      } catch {
        // The lease runs out by itself.
      }
    };
  }

  /**
   * @internal Brings an operation's indexes (due times, status lists, counts)
   * up to its record after the record was changed by hand, not by this store:
   * `before` is its status and type as they were.
   * @param {string} id
   * @param {{ status: string | null, type: string | null }} before
   */
  async _reindexOperation(id, before) {
    await this._call('reindex', () =>
      this._script(SCRIPTS.REINDEX, [this._key('outbox', id)], [this.tables.outbox, id, before.status ?? '', before.type ?? '']),
    );
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is StoreBase)

  /**
   * @internal claims due operations, oldest due first, in one script
   * @param {{ owner: string, now: number, leaseExpiresAt: number, limit: number, types: string[] | null }} request
   */
  async _claim({ owner, now, leaseExpiresAt, limit, types }) {
    const claimed = await this._call('claimOperations', () =>
      this._script(
        SCRIPTS.CLAIM,
        [],
        [
          this.tables.outbox,
          String(now),
          String(leaseExpiresAt),
          owner,
          String(limit),
          types === null ? '' : JSON.stringify(types),
          String(CLAIM_SCAN),
        ],
      ),
    );
    return claimed.map((/** @type {unknown[]} */ flat) => seenOf(flat).record);
  }

  /**
   * @internal a guarded change of one operation
   * @param {{ id: string, status: string, fencingToken: number | undefined, set: Record<string, unknown>, giveBackAttempt: boolean }} change
   */
  async _update(change) {
    /** @type {[string, string][]} */
    const set = [];
    /** @type {string[]} */
    const removed = [];
    for (const [field, value] of Object.entries(change.set)) {
      const text = fieldText(value);
      if (text === null) removed.push(field);
      else set.push([field, text]);
    }
    const matched = await this._call('update', () =>
      this._script(
        SCRIPTS.UPDATE,
        [this._key('outbox', change.id)],
        [
          this.tables.outbox,
          change.id,
          change.status,
          change.fencingToken === undefined ? '' : String(change.fencingToken),
          change.giveBackAttempt ? '1' : '',
          JSON.stringify(set),
          JSON.stringify(removed),
        ],
      ),
    );
    return Number(matched) === 1;
  }

  /**
   * @internal listOperations: ids in order from the status's index (or all), read a page at a time, filtered here
   * @param {import('../../store/queries.cjs').ListRequest} request
   */
  async _list(request) {
    return this._call('listOperations', async () => {
      const index = `${this.tables.outbox}:i:${request.status === null ? 'ids' : `s:${request.status}`}`;
      const found = [];
      let after = request.afterId;
      while (found.length < request.limit) {
        /** @type {string[]} */
        const ids = await this._send(['ZRANGEBYLEX', index, after === null ? '-' : `(${after}`, '+', 'LIMIT', '0', String(LIST_PAGE)]);
        if (ids.length === 0) break;
        const replies = await this._script(
          SCRIPTS.READ,
          ids.map((id) => this._key('outbox', id)),
          [],
        );
        for (const reply of replies) {
          const { record } = seenOf(reply);
          if (record === null) continue;
          const comparable = { ...record, createdAt: Number(record.createdAt) };
          if (operationMatches({ ...request, afterId: null }, comparable)) found.push(record);
          if (found.length >= request.limit) break;
        }
        after = ids[ids.length - 1];
        if (ids.length < LIST_PAGE) break;
      }
      return found;
    });
  }

  /**
   * @internal counts by type and status (kept by every write) and the oldest due time
   * @param {{ now: number }} request
   */
  async _stats({ now }) {
    const [flat, oldest] = await this._call('stats', () => this._script(SCRIPTS.STATS, [], [this.tables.outbox, String(now)]));
    const counts = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const [status, type] = String(flat[i]).split('\0');
      counts.push({ type, status, count: Number(flat[i + 1]) });
    }
    return { counts, oldestDueAt: oldest === null || oldest === undefined ? null : Number(oldest) };
  }

  /**
   * @internal one purge batch; how many were deleted
   * @param {'receipts' | 'operations'} target
   * @param {{ olderThan: number, batchSize: number, status: string | null }} request
   */
  async _purgeBatch(target, { olderThan, batchSize, status }) {
    const deleted = await this._call('purge', () =>
      target === 'receipts'
        ? this._script(SCRIPTS.PURGE_RECEIPTS, [], [this.tables.inbox, String(olderThan), String(batchSize)])
        : this._script(SCRIPTS.PURGE_OPERATIONS, [], [this.tables.outbox, String(status), String(olderThan), String(batchSize)]),
    );
    return Number(deleted);
  }
}

/**
 * options.waitReplicas `{ replicas, timeoutMs }` as WAIT's arguments, or
 * null when not given. Its bound must leave time inside the call's.
 * @param {any} value
 * @param {number} callTimeoutMs
 * @returns {[string, string] | null}
 */
function waitReplicasOf(value, callTimeoutMs) {
  if (value === undefined) return null;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalidArgument('options.waitReplicas must be { replicas, timeoutMs }', { field: 'waitReplicas', reason: 'not an object' });
  }
  checkOptionKeys(value, ['replicas', 'timeoutMs'], 'options.waitReplicas');
  const replicas = wholeNumber(value.replicas, 'waitReplicas.replicas', 1, 64);
  const timeoutMs = wholeNumber(value.timeoutMs, 'waitReplicas.timeoutMs', 1, callTimeoutMs - 1);
  return [String(replicas), String(timeoutMs)];
}

/** @type {(error: unknown) => boolean} */
const isStoreUnavailable = isUnavailable;

module.exports = { RedisStore, RedisTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable };
