'use strict';
// MySQL and MariaDB over the host's mysql2 Pool or Connection (promise or
// callback flavour). Ids are compared byte for byte: a binary NO PAD
// collation where the server has one, so "a", "A" and "a " are three ids.
// Every write is guarded by a primary key or a compare-and-set on
// (id, status, revision); deadlocks and lock wait timeouts run the whole
// cycle again, like a lost compare-and-set. The outbox claim locks due rows
// FOR UPDATE SKIP LOCKED (MySQL 8, MariaDB 10.6+) and updates them in the
// same short transaction.

const { IdemflowError } = require('../../core/errors.cjs');
const { checkOptionKeys, checkHandle } = require('../../core/options.cjs');
const { STORE_UNAVAILABLE, invalidArgument, mapDriverError, isStoreUnavailable, timedOut } = require('../../store/errors.cjs');
const {
  DEFAULT_TABLES,
  STORE_OPTIONS,
  TIMEOUT_OPTIONS,
  resolveClock,
  resolveRaceRetries,
  resolveTimeouts,
} = require('../../store/options.cjs');
const {
  ConnectionWatch,
  Serializer,
  betweenBeginAndCommit,
  guardedConnection,
  sessionLock,
  transactionOptions,
  watchClient,
  withDeadline,
} = require('../../store/bounds.cjs');
const { SqlStore } = require('../../sql/store.cjs');
const { SqlTransaction } = require('../../sql/transaction.cjs');
const { migrateMissing } = require('../../sql/schema.cjs');
const { guardMysql, transactionEnded } = require('../../sql/client-guard.cjs');
const dialect = require('./dialect.cjs');

/** ER_UNKNOWN_SYSTEM_VARIABLE: MySQL has no @@in_transaction. */
const UNKNOWN_SYSTEM_VARIABLE = 1193;

function mapError(error, onUnique) {
  return mapDriverError(error, dialect.classify, onUnique);
}

async function run(connection, sql, params, onUnique) {
  let result;
  try {
    [result] = await connection.query(sql, params);
  } catch (error) {
    throw mapError(error, onUnique);
  }
  return Array.isArray(result) ? { rows: result, count: result.length } : { rows: [], count: Number(result.affectedRows ?? 0) };
}

/** The promise flavour of a mysql2 Pool or Connection. */
function promiseFlavour(db) {
  if (db !== null && typeof db === 'object' && typeof db.promise === 'function' && typeof db.query === 'function') {
    const wrapped = db.promise();
    if (wrapped && typeof wrapped.query === 'function') return wrapped;
  }
  return db;
}

function kindOf(db) {
  if (db === null || typeof db !== 'object' || typeof db.query !== 'function') return null;
  if (typeof db.getConnection === 'function') return 'pool';
  if (typeof db.beginTransaction === 'function') return 'connection';
  return null;
}

class MysqlTransaction extends SqlTransaction {
  #connection;
  #heldKeys = [];

  /** @param {object} raw the mysql2 connection (promise flavour): behind `tx.client` */
  constructor(store, connection, raw) {
    super(store, ({ sql, values }, onUnique) => run(connection, sql, values, onUnique), raw);
    this.#connection = connection;
  }

  /** @internal the driver behind tx.client, for the tools' entry points (js/orm) */
  get _driver() {
    return 'mysql2';
  }

  /** @internal tx.client: the connection, guarded */
  _guardClient(raw, guard) {
    return guardMysql(raw, guard);
  }

  /**
   * @internal the session is still inside a transaction (MariaDB's
   * @@in_transaction; MySQL has no such variable, and there the guard alone
   * stands)
   */
  async _checkOwn() {
    let rows;
    try {
      [rows] = await this.#connection.query('SELECT @@in_transaction AS open');
    } catch (error) {
      if (error?.errno === UNKNOWN_SYSTEM_VARIABLE) return;
      throw mapError(error);
    }
    if (Number(rows[0]?.open) !== 1) throw transactionEnded('the session is not inside a transaction');
  }

  /**
   * @internal GET_LOCK(name, 0) on this transaction's session
   * (StoreTransaction._tryHoldKey); a session lock, so the store releases it
   * after COMMIT or ROLLBACK (_releaseKeys)
   */
  async _tryHoldKey(key) {
    const name = dialect.keyLockName(key);
    const held = Number((await run(this.#connection, dialect.tryLock, [name])).rows[0]?.acquired) === 1;
    if (held) this.#heldKeys.push(name);
    return held;
  }

  /** @internal frees the keys held, on `raw` (the session itself); a session that is gone has freed them */
  async _releaseKeys(raw) {
    for (const name of this.#heldKeys.splice(0)) {
      try {
        await raw.query(dialect.unlock, [name]);
      } catch {
        // The session ended: the server freed its locks with it.
      }
    }
  }
}

/**
 * A store over a mysql2 Pool (a connection per transaction) or a single
 * Connection (transactions queue on it), promise or callback flavour. It is
 * also an outbox store (docs/outbox.md).
 */
class MysqlStore extends SqlStore {
  /** What telemetry calls this store (the `idemflow.store` attribute). */
  static kind = 'mysql';

  #kind;
  #serializer = new Serializer();
  #collation;
  #timeouts;
  #watch = null;
  #flavour = null;

  /**
   * @param {object} db a mysql2 Pool or Connection
   * @param {{ tables?: object, raceRetries?: number, now?: () => number, collation?: string, timeoutMs?: number, statementTimeoutMs?: number }} [options]
   */
  constructor(db, options = {}) {
    checkHandle(db, 'mysql2', (value) => kindOf(promiseFlavour(value)) !== null, 'MysqlStore needs a mysql2 Pool or Connection');
    checkOptionKeys(options, [...STORE_OPTIONS, 'collation', ...TIMEOUT_OPTIONS], 'MysqlStore');
    const opts = options ?? {};
    if (opts.collation !== undefined && !/^[A-Za-z0-9_]+$/.test(String(opts.collation))) {
      throw invalidArgument('options.collation must be a collation name', { field: 'collation', reason: 'not a collation name' });
    }
    const timeouts = resolveTimeouts(opts);
    super(dialect, {
      tables: opts.tables,
      now: resolveClock(opts.now),
      raceRetries: resolveRaceRetries(opts),
      timeoutMs: timeouts.timeoutMs,
    });
    const client = promiseFlavour(db);
    const kind = kindOf(client);
    this.#kind = kind;
    /** The mysql2 Pool or Connection (promise flavour) this store works through. */
    this.client = client;
    this.#collation = opts.collation ?? null;
    this.#timeouts = timeouts;
    // A Connection the host hands in is held for the store's lifetime; pool connections are watched while checked out.
    if (kind === 'connection') this.#watch = watchClient(client.connection ?? client);
  }

  /**
   * Creates the tables (InnoDB, utf8mb4) and their indexes if they do not
   * exist, and adds the columns a table made by an earlier version lacks.
   * Id columns use a binary NO PAD collation: utf8mb4_nopad_bin on MariaDB,
   * utf8mb4_0900_bin on MySQL 8 (options.collation overrides). It looks at
   * information_schema first: on a current schema it changes nothing and
   * takes no lock that waits on traffic, so every worker may run it at
   * start. What is missing is made under a named lock (migrations started
   * together queue), one part per statement, each giving up soon when its
   * table's metadata lock is held (MariaDB) and trying again.
   */
  async migrate() {
    await migrateMissing(this.tables, {
      missingOf: (parts) =>
        this.#onConnection('migrate', async (connection) => {
          const missing = [];
          for (const part of parts) if (!(await present(connection, part))) missing.push(part);
          return missing;
        }),
      create: (missing) => this.#onConnection('migrate', (connection, raw) => this.#create(connection, raw, missing)),
    });
  }

  /**
   * The missing parts made on `connection`, under the migration lock, each
   * looked for again first. The lock is taken on `raw`, past the server-side
   * statement bound, which would end the wait for a long migration; the
   * call's deadline still bounds it.
   */
  async #create(connection, raw, missing) {
    const {
      rows: [server],
    } = await run(connection, 'SELECT VERSION() AS version', []);
    const mariadb = /mariadb/i.test(String(server.version));
    const collation =
      this.#collation ??
      (mariadb ? 'utf8mb4_nopad_bin' : Number.parseInt(String(server.version), 10) >= 8 ? 'utf8mb4_0900_bin' : 'utf8mb4_bin');
    const waitSeconds = Math.max(1, Math.ceil(this.#timeouts.timeoutMs / 1000));
    const {
      rows: [lock],
    } = await run(raw, 'SELECT GET_LOCK(?, ?) AS acquired', [dialect.migrationLock, waitSeconds]);
    if (Number(lock.acquired) !== 1) throw timedOut('migrate', this.#timeouts.timeoutMs);
    try {
      // MariaDB bounds one statement's wait for a metadata lock; MySQL has no such prefix for DDL.
      const bounded = mariadb ? `SET STATEMENT lock_wait_timeout = ${dialect.stepLockWaitSeconds} FOR ` : '';
      for (const part of missing) {
        if (await present(connection, part)) continue;
        await migrationStep(connection, bounded + dialect.create(part, collation));
      }
    } finally {
      await run(raw, 'SELECT RELEASE_LOCK(?)', [dialect.migrationLock]).catch(() => {});
    }
  }

  /** @internal a Connection is one session: runners sharing it are told apart in process */
  _lockScope() {
    return this.client;
  }

  /**
   * @internal GET_LOCK(name, 0), held by a session: a connection of its own
   * from a Pool (so no transaction stays open while the lock is held), the
   * Connection itself otherwise. A session that ends frees it.
   */
  _tryLock(name) {
    const lockName = dialect.lockName(name);
    return sessionLock({
      pooled: this.#kind === 'pool',
      open: async () => {
        if (this.#kind !== 'pool') return { session: this.client };
        const session = await this.client.getConnection();
        // mysql2 emits 'error' on the connection beneath the promise wrapper.
        return { session, watch: new ConnectionWatch(session.connection ?? session) };
      },
      tryLock: async (session) => Number((await session.query(dialect.tryLock, [lockName]))[0][0]?.acquired) === 1,
      unlock: (session) => session.query(dialect.unlock, [lockName]),
      giveBack: (session, broken) => (broken ? session.destroy?.() : session.release()),
      mapError,
    });
  }

  /**
   * Runs fn(tx) between BEGIN and COMMIT on one connection; if fn throws, the
   * transaction rolls back and the error is rethrown as it was.
   */
  async transaction(fn, options) {
    // A batch's locking reads take no gap locks at READ COMMITTED (see the dialect's lockInOrder).
    const { batch, deadlineAt } = transactionOptions(options);
    return this.#onConnection(
      'transaction',
      async (connection, raw, deadline) => {
        const tx = new MysqlTransaction(this, connection, raw);
        // A callback still running at the deadline is abandoned: what it sends later through tx.client is refused.
        deadline.onExpire(() => tx._end());
        try {
          return await onConnection(
            connection,
            raw,
            async () => {
              const result = await fn(tx);
              await tx._beforeCommit();
              return result;
            },
            batch ? dialect.batchIsolation : undefined,
          );
        } finally {
          tx._end();
          // After COMMIT or ROLLBACK: a key held to the end of the transaction, not of the session.
          await tx._releaseKeys(raw);
        }
      },
      deadlineAt,
    );
  }

  /** work(connection) between START TRANSACTION and COMMIT on one connection (at `isolation` when given). */
  #inTransaction(work, isolation, operation = 'transaction', deadlineAt = null) {
    return this.#onConnection(operation, (connection, raw) => onConnection(connection, raw, work, isolation), deadlineAt);
  }

  /**
   * use(connection, raw, deadline) on a connection of this store, within
   * options.timeoutMs: `connection` checks the deadline before every
   * statement and carries the server-side statement bound; `raw` is for the
   * rollback after a failure.
   */
  #onConnection(operation, use, deadlineAt = null) {
    return withDeadline(
      this.#timeouts.timeoutMs,
      operation,
      async (deadline) => {
        if (this.#kind === 'connection') {
          // The host's Connection is not ours to close: work that ran out of time
          // sends nothing more; the calls queued behind it time out in the queue.
          return this.#serializer.run(async () => {
            deadline.check();
            const bounded = await this.#bounded(this.client, deadline, this.#watch);
            return use(bounded, this.client, deadline);
          });
        }
        let connection;
        try {
          connection = await this.client.getConnection();
        } catch (error) {
          throw mapError(error);
        }
        // mysql2 emits 'error' on a pool connection the server closed; its own listener is a once().
        const watch = new ConnectionWatch(connection.connection ?? connection);
        let released = false;
        const release = (broken) => {
          if (released) return;
          released = true;
          watch.stop(broken);
          if (broken) connection.destroy();
          else connection.release();
        };
        deadline.onExpire(() => release(true));
        let broken = false;
        try {
          deadline.check();
          return await use(await this.#bounded(connection, deadline, watch), connection, deadline);
        } catch (error) {
          // A full disk leaves the connection whole (the statement failed, the
          // transaction rolled back); anything else unavailable may not have.
          broken =
            watch.error !== null ||
            (error instanceof IdemflowError && error.code === STORE_UNAVAILABLE && error.details?.reason !== 'server-out-of-resources');
          throw error;
        } finally {
          release(broken || watch.error !== null);
        }
      },
      deadlineAt,
    );
  }

  /**
   * The connection with this call's deadline and, on MariaDB, its statements
   * bounded on the server: `SET STATEMENT max_statement_time = …,
   * innodb_lock_wait_timeout = … FOR` in front of every read and write, which
   * leaves the session's own settings alone. (MySQL has no such prefix for
   * writes; there only the client-side bound applies.)
   */
  async #bounded(connection, deadline, watch) {
    const guarded = guardedConnection(connection, deadline, watch);
    const { statementTimeoutMs } = this.#timeouts;
    if (statementTimeoutMs === 0) return guarded;
    if (this.#flavour === null) {
      const { rows } = await run(guarded, 'SELECT VERSION() AS version', []);
      this.#flavour = /mariadb/i.test(String(rows[0].version)) ? 'mariadb' : 'mysql';
    }
    if (this.#flavour !== 'mariadb') return guarded;
    const seconds = (statementTimeoutMs / 1000).toFixed(3);
    const lockWait = Math.max(1, Math.ceil(statementTimeoutMs / 1000));
    const prefix = `SET STATEMENT max_statement_time = ${seconds}, innodb_lock_wait_timeout = ${lockWait} FOR `;
    return guardedConnection(connection, deadline, watch, (sql) => (/^\s*(SELECT|INSERT|UPDATE|DELETE)\b/i.test(sql) ? prefix + sql : sql));
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is StoreBase)

  /**
   * A short READ COMMITTED transaction: lock due rows FOR UPDATE SKIP LOCKED,
   * update them, read them back. Expired claims (few, and waiting longest)
   * come first, then pending operations. Each select walks its own index in
   * order (forced: on a small table the optimizer would rather sort), so it
   * locks only the rows it returns; ties come in primary key order, which the
   * index holds (naming id in ORDER BY would make the server sort again).
   * @internal
   */
  async _claimRows(request) {
    const { claim } = dialect;
    return this.#inTransaction(async (connection) => {
      const ids = [];
      for (const kind of claim.kinds) {
        if (ids.length === request.limit) break;
        const { rows } = await execute(connection, claim.lockDue(this._statements, request, kind, request.limit - ids.length));
        ids.push(...rows.map((row) => row.id));
      }
      if (ids.length === 0) return [];
      await execute(connection, claim.update(this._statements, request, ids));
      // Read after COMMIT (StoreBase): a row that cannot be read must not roll the whole claim back.
      return (await execute(connection, claim.read(this._statements, ids))).rows;
    }, 'READ COMMITTED');
  }

  /** @internal one outbox statement in autocommit */
  _execute({ sql, values }) {
    return this.#query(sql, values);
  }

  /** One statement in autocommit, under the same bounds as a transaction. */
  #query(sql, params, operation = 'statement') {
    return this.#onConnection(operation, (connection) => run(connection, sql, params));
  }
}

/** Whether a part of the schema is there (dialect.present), read on `connection`. */
async function present(connection, part) {
  const { sql, values } = dialect.present(part);
  return (await run(connection, sql, values)).rows.length > 0;
}

const STEP_TRIES = 5;

/**
 * One statement of a migration; one that timed out waiting for its table's
 * lock tries again after a pause. A part another migration made meanwhile
 * (a duplicate index or column) is what was wanted.
 */
async function migrationStep(connection, sql) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await run(connection, sql, []);
      return;
    } catch (error) {
      const errno = error.cause?.errno;
      if (errno === dialect.DUPLICATE_INDEX_NAME || errno === dialect.DUPLICATE_COLUMN_NAME) return;
      const lockTimeout = error instanceof IdemflowError && error.details?.reason === 'lock-timeout';
      if (!lockTimeout || attempt >= STEP_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** attempt * Math.random()));
    }
  }
}

function execute(connection, { sql, values }) {
  return run(connection, sql, values);
}

/** Statements go through `connection` (bounded); the rollback after a failure goes to `raw`. */
async function onConnection(connection, raw, work, isolation) {
  // SET TRANSACTION (without SESSION) applies to the next transaction only.
  if (isolation) await run(connection, `SET TRANSACTION ISOLATION LEVEL ${isolation}`, []);
  const { result } = await betweenBeginAndCommit(raw, {
    begin: () => run(connection, 'START TRANSACTION', []),
    work: () => work(connection, raw),
    commit: () => run(connection, 'COMMIT', []),
  });
  return result;
}

module.exports = {
  MysqlStore,
  MysqlTransaction,
  DEFAULT_TABLES,
  STORE_UNAVAILABLE,
  isStoreUnavailable,
};
