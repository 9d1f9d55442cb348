'use strict';
// The embedded store: SQLite through a synchronous handle, better-sqlite3 or
// node:sqlite (both offer prepare/get/run/exec). Every transaction starts with
// BEGIN IMMEDIATE, so it holds the write lock from its first read and no
// other process can change what it read; the busy timeout queues writers
// instead of failing them. Transactions on one handle run one at a time.
// The outbox claim is one UPDATE … RETURNING inside BEGIN IMMEDIATE.

const { IdemflowError } = require('../../core/errors.cjs');
const { checkOptionKeys, checkHandle } = require('../../core/options.cjs');
const { STORE_UNAVAILABLE, invalidArgument, mapDriverError, isStoreUnavailable } = require('../../store/errors.cjs');
const { DEFAULT_TABLES, STORE_OPTIONS, resolveClock, resolveRaceRetries, resolveTimeouts } = require('../../store/options.cjs');
const { Deadline, Serializer, checkTimeLeft, transactionOptions } = require('../../store/bounds.cjs');
const { SqlStore } = require('../../sql/store.cjs');
const { SqlTransaction } = require('../../sql/transaction.cjs');
const { migrateMissing } = require('../../sql/schema.cjs');
const { randomUUID } = require('node:crypto');
const { step } = require('../../core/step.cjs');
const { guardSqlite, transactionEnded } = require('../../sql/client-guard.cjs');
const dialect = require('./dialect.cjs');

const SQLITE_OPTIONS = [...STORE_OPTIONS, 'timeoutMs', 'busyTimeoutMs', 'synchronous', 'wal'];

const DEFAULT_BUSY_TIMEOUT_MS = 5000;
const MAX_PREPARED = 256;
const SYNCHRONOUS = new Set(['OFF', 'NORMAL', 'FULL', 'EXTRA']);

function mapError(error, onUnique) {
  return mapDriverError(error, dialect.classify, onUnique);
}

function isHandle(db) {
  return db !== null && typeof db === 'object' && typeof db.prepare === 'function' && typeof db.exec === 'function';
}

/**
 * One transaction: statements run on the store's handle, synchronously,
 * inside BEGIN IMMEDIATE … COMMIT. Once it is abandoned at its deadline
 * (rolled back, the handle given to the next caller) its statements are
 * refused: they would run in another caller's transaction.
 */
class SqliteTransaction extends SqlTransaction {
  /** @type {Error | null} */
  #abandoned = null;

  constructor(store) {
    super(
      store,
      (statement, onUnique) => {
        if (this.#abandoned !== null) throw this.#abandoned;
        return store._executeNow(statement, onUnique);
      },
      store.db,
    );
  }

  /** @internal the deadline passed with the callback still running: nothing more of this transaction reaches the handle */
  _abandon(error) {
    this.#abandoned = error;
    this._end();
  }

  /** @internal tx.client: the handle, guarded */
  _guardClient(raw, guard) {
    const handle = guardSqlite(raw, guard, () => handle);
    return handle;
  }

  /** @internal the driver behind tx.client, for the tools' entry points (js/orm) */
  get _driver() {
    return typeof this._store.db.inTransaction === 'boolean' ? 'better-sqlite3' : 'node:sqlite';
  }

  /** @internal the handle is still inside a transaction (better-sqlite3 `inTransaction`, node:sqlite `isTransaction`) */
  _checkOwn() {
    const ended = this.#ended();
    if (ended !== null) throw ended;
  }

  /** After each callback too, since it costs nothing here: idemflow writes nothing more outside its transaction. */
  endHostWork(threw = false, eventId = undefined) {
    return super.endHostWork(threw, eventId) ?? (this._clientUsed ? this.#ended() : null);
  }

  #ended() {
    const db = this._store.db;
    return (db.inTransaction ?? db.isTransaction) === false ? transactionEnded('the handle is not inside a transaction') : null;
  }
}

/**
 * A store over one SQLite handle (better-sqlite3 `Database` or node:sqlite
 * `DatabaseSync`). The constructor sets WAL mode and the busy timeout on the
 * handle; migrate() creates the tables. It is also an outbox store
 * (docs/outbox.md).
 */
class SqliteStore extends SqlStore {
  /** What telemetry calls this store (the `idemflow.store` attribute). */
  static kind = 'sqlite';

  #db;
  #owned;
  #statements = new Map();
  #serializer = new Serializer();

  /**
   * @param {object} db a better-sqlite3 Database or a node:sqlite DatabaseSync
   * @param {{ tables?: object, raceRetries?: number, now?: () => number,
   *   busyTimeoutMs?: number, synchronous?: 'OFF'|'NORMAL'|'FULL'|'EXTRA', wal?: boolean }} [options]
   */
  constructor(db, options = {}) {
    checkHandle(db, 'sqlite', isHandle, 'SqliteStore needs a better-sqlite3 Database or a node:sqlite DatabaseSync');
    // `owned` is how open() hands over the handle it opened.
    checkOptionKeys(options, [...SQLITE_OPTIONS, 'owned'], 'SqliteStore');
    const opts = options ?? {};
    // A statement here runs in process and ends by itself; timeoutMs bounds a transaction whose callback does not.
    const { timeoutMs } = resolveTimeouts({ timeoutMs: opts.timeoutMs });
    super(dialect, { tables: opts.tables, now: resolveClock(opts.now), raceRetries: resolveRaceRetries(opts), timeoutMs });
    this.#db = db;
    this.#owned = opts.owned === true;
    const busyTimeoutMs = opts.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw invalidArgument('options.busyTimeoutMs must be a whole number of milliseconds', {
        field: 'busyTimeoutMs',
        reason: 'not a non-negative integer',
      });
    }
    const synchronous = opts.synchronous === undefined ? null : String(opts.synchronous).toUpperCase();
    if (synchronous !== null && !SYNCHRONOUS.has(synchronous)) {
      throw invalidArgument('options.synchronous must be OFF, NORMAL, FULL or EXTRA', { field: 'synchronous', reason: 'unknown level' });
    }
    this.#exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
    // WAL lets readers go on while one writer commits; it is a property of the file.
    if (opts.wal !== false) this.#exec('PRAGMA journal_mode = WAL');
    if (synchronous !== null) this.#exec(`PRAGMA synchronous = ${synchronous}`);
  }

  /**
   * Opens (or creates) a database file and a store that owns it: close()
   * closes the handle. Uses better-sqlite3 when it is installed, otherwise
   * node:sqlite (Node 22.13+); `options.driver` picks one.
   */
  static open(filename, options = {}) {
    checkOptionKeys(options, ['driver', ...SQLITE_OPTIONS], 'SqliteStore.open');
    const { driver: chosen, ...storeOptions } = options ?? {};
    const driver = chosen ?? (canRequire('better-sqlite3') ? 'better-sqlite3' : 'node:sqlite');
    let db;
    try {
      if (driver === 'better-sqlite3') {
        const Database = require('better-sqlite3');
        db = new Database(filename);
      } else if (driver === 'node:sqlite') {
        const { DatabaseSync } = require('node:sqlite');
        db = new DatabaseSync(filename);
      } else {
        throw invalidArgument('options.driver must be "better-sqlite3" or "node:sqlite"', { field: 'driver', reason: 'unknown driver' });
      }
    } catch (error) {
      if (error instanceof IdemflowError) throw error;
      if (error && (error.code === 'MODULE_NOT_FOUND' || error.code === 'ERR_UNKNOWN_BUILTIN_MODULE')) {
        throw invalidArgument(`SQLite driver ${driver} is not available: install better-sqlite3, or use Node 22.13+ for node:sqlite`, {
          field: 'driver',
          reason: 'driver not installed',
        });
      }
      throw mapError(error);
    }
    try {
      return new SqliteStore(db, { ...storeOptions, owned: true });
    } catch (error) {
      db.close();
      throw error;
    }
  }

  /** The handle this store works on. */
  get db() {
    return this.#db;
  }

  /**
   * Creates the three tables and their indexes if they do not exist, and adds
   * the columns a table made by an earlier version lacks. It looks first,
   * without the write lock: on a current schema it writes nothing and waits
   * on nobody. What is missing is made under the write lock (BEGIN
   * IMMEDIATE), so processes migrating together do not trip over each other.
   */
  async migrate() {
    const absent = (part) => this._executeNow(dialect.present(part)).rows.length === 0;
    await migrateMissing(this.tables, {
      missingOf: (parts) => this.#serializer.run(() => parts.filter(absent)),
      create: (missing) =>
        this.#serializer.run(() =>
          this.#immediate(() => {
            for (const part of missing) if (absent(part)) this.#exec(dialect.create(part));
          }),
        ),
    });
  }

  /**
   * Runs fn(tx) inside BEGIN IMMEDIATE … COMMIT; if fn throws, ROLLBACK and
   * rethrow. Calls on one store queue behind each other. A fn still running
   * after timeoutMs (or the call's deadline, when sooner) is abandoned: the
   * transaction rolls back, the call fails with STORE_UNAVAILABLE reason
   * 'timeout', and the handle goes to the next call.
   */
  transaction(fn, options) {
    const { deadlineAt } = transactionOptions(options);
    return this.#serializer.run(() => {
      checkTimeLeft(deadlineAt, 'transaction');
      const tx = new SqliteTransaction(this);
      const work = () => step(fn(tx), (result) => step(tx._beforeCommit(), () => result));
      return this.#immediate(work, { tx, deadlineAt }).finally(() => tx._end());
    });
  }

  /**
   * BEGIN IMMEDIATE, work(), COMMIT; ROLLBACK and rethrow (as it was) if work
   * throws. A work that returns no promise runs to COMMIT without yielding,
   * so it never holds the write lock across an await; one that does is
   * bounded (`bound`: the transaction and its call's deadline).
   */
  async #immediate(work, bound = null) {
    this.#exec('BEGIN IMMEDIATE');
    let result;
    try {
      result = work();
      if (typeof result?.then === 'function') result = await (bound === null ? result : this.#within(result, bound));
    } catch (error) {
      this.#rollback();
      throw error;
    }
    try {
      this.#exec('COMMIT');
    } catch (error) {
      this.#rollback();
      throw error;
    }
    return result;
  }

  /** `pending`, or the timeout error once the transaction's time is up (the transaction abandoned first). */
  async #within(pending, { tx, deadlineAt }) {
    let ms = this.timeoutMs;
    if (deadlineAt !== null) ms = Math.max(1, Math.min(ms, Math.ceil(deadlineAt - performance.now())));
    const deadline = new Deadline(ms, 'transaction');
    deadline.onExpire((error) => tx._abandon(error));
    try {
      return await Promise.race([pending, deadline.promise]);
    } finally {
      deadline.clear();
    }
  }

  /**
   * @internal withExclusiveLock's lock: a lease row taken under the write lock
   * (BEGIN IMMEDIATE, one short statement), so no transaction stays open
   * while it is held; a holder that died loses it when the lease runs out.
   */
  async _tryLock(name, leaseMs) {
    const owner = randomUUID();
    const lock = dialect.lock(this.tables, name, owner);
    const acquired = await this.#serializer.run(() =>
      this.#immediate(() => {
        this.#exec(lock.create);
        const now = this.now();
        return this._executeNow({ ...lock.acquire, values: [...lock.acquire.values, now + leaseMs, now] }).count === 1;
      }),
    );
    if (!acquired) return null;
    return async () => {
      try {
        await this._execute(lock.release);
      } catch {
        // A closed handle or a busy database: the lease runs out by itself.
      }
    };
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is StoreBase)

  /**
   * The dialect's claim inside BEGIN IMMEDIATE: the write lock is taken
   * before the due rows are read, so no other process claims them meanwhile.
   * The rows are read after COMMIT (StoreBase), so one that cannot be read
   * does not roll the claim of the others back.
   * @internal
   */
  async _claimRows(request) {
    const claim = dialect.claim(this._statements, request);
    return this.#serializer.run(() => this.#immediate(() => this._executeNow(claim).rows));
  }

  /**
   * @internal one statement outside a transaction, queued like transactions
   * are, so a read never sees a transaction's uncommitted writes on this
   * shared handle.
   */
  _execute(statement) {
    return this.#serializer.run(async () => this._executeNow(statement));
  }

  /** @internal one statement, now, on the handle: `{ rows, count }` */
  _executeNow({ sql, values, returnsRows }, onUnique) {
    try {
      const prepared = this.#prepared(sql);
      return returnsRows ? { rows: prepared.all(...values), count: 0 } : { rows: [], count: Number(prepared.run(...values).changes) };
    } catch (error) {
      throw mapError(error, onUnique);
    }
  }

  /** Closes the handle if this store opened it (SqliteStore.open); otherwise does nothing. */
  async close() {
    if (this.#owned) this.#db.close();
  }

  #exec(sql) {
    try {
      this.#db.exec(sql);
    } catch (error) {
      throw mapError(error);
    }
  }

  #rollback() {
    try {
      this.#db.exec('ROLLBACK');
    } catch {
      // SQLite rolls back by itself after some errors (SQLITE_FULL, IOERR, BUSY on commit).
    }
  }

  /** A prepared statement, kept by its text (the outbox's vary with the number of types). */
  #prepared(sql) {
    let statement = this.#statements.get(sql);
    if (!statement) {
      // Batches write statements of many sizes: the cache stays bounded, the common ones come back at once.
      if (this.#statements.size >= MAX_PREPARED) this.#statements.clear();
      statement = this.#db.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }
}

function canRequire(name) {
  try {
    require.resolve(name);
    return true;
  } catch {
    return false;
  }
}

module.exports = {
  SqliteStore,
  SqliteTransaction,
  DEFAULT_TABLES,
  STORE_UNAVAILABLE,
  isStoreUnavailable,
};
