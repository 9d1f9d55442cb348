'use strict';
// PostgreSQL over the host's `pg` Pool or Client, or over PGlite in process.
// Transactions run at the server's isolation level (READ COMMITTED by
// default): every write is guarded by a unique key or by a compare-and-set on
// (id, status, revision), so a concurrent writer makes the guard fail and the
// whole cycle runs again; serialisation failures and deadlocks do the same.
// The outbox claim is one statement: a CTE that locks due rows FOR UPDATE
// SKIP LOCKED, then UPDATE … RETURNING.

const { IdemflowError } = require('../../core/errors.cjs');
const { checkOptionKeys, checkHandle } = require('../../core/options.cjs');
const { STORE_UNAVAILABLE, invalidArgument, lostRace, mapDriverError, isStoreUnavailable } = require('../../store/errors.cjs');
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
  rollbackQuietly,
  sessionLock,
  transactionOptions,
  watchClient,
  withDeadline,
} = require('../../store/bounds.cjs');
const { SqlStore } = require('../../sql/store.cjs');
const { SqlTransaction } = require('../../sql/transaction.cjs');
const { migrateMissing } = require('../../sql/schema.cjs');
const { guardPostgres, transactionEnded } = require('../../sql/client-guard.cjs');
const dialect = require('./dialect.cjs');

function mapError(error, onUnique) {
  return mapDriverError(error, dialect.classify, onUnique);
}

// Statements pg prepares once per connection (a named statement), by text: the
// fixed ones of every store (reads, inserts, the compare-and-set), up to a bound;
// a text beyond it (a batch's multi-row insert of one size) runs unnamed.
const MAX_NAMED = 128;
const names = new Map();

/** The query of a statement for pg: named while the bound allows. */
function named(sql, values) {
  let name = names.get(sql);
  if (name === undefined && names.size < MAX_NAMED) {
    name = `idemflow_${names.size}`;
    names.set(sql, name);
  }
  return { name, text: sql, values };
}

/** `{rows, count}` from pg (rowCount) or PGlite (affectedRows). `prepare`: as a named statement (pg only). */
async function run(queryable, sql, params, onUnique, prepare = false) {
  let result;
  try {
    result = await (prepare ? queryable.query(named(sql, params)) : queryable.query(sql, params));
  } catch (error) {
    throw mapError(error, onUnique);
  }
  return { rows: result.rows ?? [], count: Number(result.rowCount ?? result.affectedRows ?? 0), command: result.command };
}

function kindOf(db) {
  if (db === null || typeof db !== 'object' || typeof db.query !== 'function') return null;
  if (typeof db.transaction === 'function' && typeof db.exec === 'function') return 'pglite';
  if (typeof db.connect === 'function' && typeof db.totalCount === 'number') return 'pool';
  return 'client';
}

/** The mark idemflow sets in its transaction (SET LOCAL): gone once that transaction ends, absent from any other. */
const MARK = "SET LOCAL idemflow.tx = 'on'";
const READ_MARK = "SELECT current_setting('idemflow.tx', true) AS mark";

class PostgresTransaction extends SqlTransaction {
  #queryable;
  /** Whether MARK was set in this transaction: with the BEGIN on a server, before the host's first statement on PGlite. */
  #marked;

  /** @param {object} raw the pg PoolClient or Client, or the PGlite transaction: behind `tx.client` */
  constructor(store, queryable, raw) {
    super(store, ({ sql, values }, onUnique) => run(queryable, sql, values, onUnique, store._prepares), raw);
    this.#queryable = queryable;
    this.#marked = store._prepares;
  }

  /** @internal the driver behind tx.client, for the tools' entry points (js/orm) */
  get _driver() {
    return this._store._prepares ? 'pg' : 'pglite';
  }

  /** @internal tx.client: the connection, guarded; on PGlite the mark is set before the host's statements */
  _guardClient(raw, guard) {
    if (this._store._prepares) return guardPostgres(raw, guard);
    const mark = async () => {
      await raw.query(MARK);
      this.#marked = true;
    };
    return guardPostgres(raw, guard, { pglite: true, before: () => (this.#marked ? null : mark()) });
  }

  /** Undoes what was written since savepoint(name); on PGlite that may be the mark too, set again before the host's next statement. */
  async rollbackToSavepoint(name) {
    await super.rollbackToSavepoint(name);
    if (!this._store._prepares) this.#marked = false;
  }

  /**
   * @internal the mark is still there: the transaction is open and idemflow's. An
   * aborted transaction answers the read with 25P02; its COMMIT then answers
   * ROLLBACK, which onConnection reports as it always has.
   */
  async _checkOwn() {
    if (!this.#marked) return;
    let result;
    try {
      result = await this.#queryable.query(READ_MARK, []);
    } catch (error) {
      if (error?.code === '25P02') return;
      throw mapError(error);
    }
    if (result.rows?.[0]?.mark !== 'on') throw transactionEnded('its mark (SET LOCAL idemflow.tx) is gone');
  }

  /** @internal an advisory lock of this transaction (StoreTransaction._tryHoldKey) */
  async _tryHoldKey(key) {
    return (await run(this.#queryable, dialect.tryHoldKey, [key])).rows[0]?.held === true;
  }
}

/**
 * A store over a `pg` Pool (a connection per transaction), a `pg` Client
 * (transactions queue on the one connection) or a PGlite instance. It is
 * also an outbox store (docs/outbox.md).
 */
class PostgresStore extends SqlStore {
  /** What telemetry calls this store (the `idemflow.store` attribute). */
  static kind = 'postgres';

  #kind;
  #serializer = new Serializer();
  #timeouts;
  #watch = null;

  /**
   * @param {object} db a pg Pool, a pg Client (connected) or a PGlite instance
   * @param {{ tables?: object, raceRetries?: number, now?: () => number, timeoutMs?: number, statementTimeoutMs?: number }} [options]
   */
  constructor(db, options = {}) {
    checkHandle(db, 'pg', (value) => kindOf(value) !== null, 'PostgresStore needs a pg Pool, a pg Client or a PGlite instance');
    checkOptionKeys(options, [...STORE_OPTIONS, ...TIMEOUT_OPTIONS], 'PostgresStore');
    const opts = options ?? {};
    const timeouts = resolveTimeouts(opts);
    super(dialect, {
      tables: opts.tables,
      now: resolveClock(opts.now),
      raceRetries: resolveRaceRetries(opts),
      timeoutMs: timeouts.timeoutMs,
    });
    const kind = kindOf(db);
    this.#kind = kind;
    /** The pg Pool, pg Client or PGlite instance this store works through. */
    this.client = db;
    this.#timeouts = timeouts;
    // A Client the host hands in is held for the store's lifetime; pool clients are watched while checked out.
    if (kind === 'client') this.#watch = watchClient(db);
    /** @internal pg prepares named statements once per connection; PGlite runs each as given. */
    this._prepares = kind !== 'pglite';
  }

  /**
   * Creates the tables and indexes if they do not exist, and adds the
   * columns a table made by an earlier version lacks. It looks at the
   * catalog first: on a current schema it changes nothing and takes no lock
   * that waits on traffic, so every worker may run it at start. What is
   * missing is made on one session under an advisory lock (migrations
   * started together queue), one part per short step that gives up waiting
   * for its table's lock soon and tries again; an index on a table that
   * holds rows is built CONCURRENTLY.
   */
  async migrate() {
    await migrateMissing(this.tables, {
      missingOf: (parts) =>
        this.#inTransaction(async (queryable) => {
          const missing = [];
          for (const part of parts) if (!(await present(queryable, part))) missing.push(part);
          return missing;
        }, 'migrate'),
      create: (missing) =>
        withDeadline(this.#timeouts.timeoutMs, 'migrate', (deadline) =>
          this.#onSession(deadline, (session) => this.#create(session, missing)),
        ),
    });
  }

  /** The missing parts made on `session`, under the migration lock, each looked for again first. */
  async #create(session, missing) {
    await run(session, dialect.migrationLock, []);
    try {
      const made = new Set();
      for (const part of missing) {
        if (await present(session, part)) continue;
        const concurrently = part.kind === 'index' && !made.has(part.table) && this.#kind !== 'pglite';
        for (const step of dialect.create(part, { concurrently })) await migrationStep(session, step);
        if (part.kind === 'table') made.add(part.table);
      }
    } finally {
      await run(session, dialect.migrationUnlock, []).catch(() => {});
    }
  }

  /** use(session) on one connection of this store, outside any transaction (migrate's steps), within `deadline`. */
  #onSession(deadline, use) {
    if (this.#kind === 'pglite') return use(guardedConnection(this.client, deadline, new ConnectionWatch(null)));
    // A session that failed or ran out of time may still hold the lock or be building an index: it is discarded.
    return this.#withConnection(
      deadline,
      (session) => use(session),
      () => true,
    );
  }

  /**
   * use(queryable, raw) on one connection of this store, within `deadline`:
   * the host's Client (calls queue behind each other on it), or a client
   * checked out of the Pool and given back when `use` settles, discarded
   * when the time ran out, the server ended it, or `broken(error)` says so.
   */
  async #withConnection(deadline, use, broken) {
    if (this.#kind === 'client') {
      // The host's Client is not ours to close: work that ran out of time
      // sends nothing more and rolls back once the server answers again;
      // the calls queued behind it time out in the queue meanwhile.
      return this.#serializer.run(() => {
        deadline.check();
        checkConnected(this.client);
        return use(guardedConnection(this.client, deadline, this.#watch), this.client);
      });
    }
    let connection;
    let watch;
    try {
      ({ session: connection, watch } = await checkOut(this.client));
    } catch (error) {
      throw mapError(error);
    }
    let released = false;
    const release = (error) => {
      if (released) return;
      released = true;
      watch.stop(error !== undefined);
      // With an error, the pool discards the client instead of handing it out again.
      connection.release(error);
    };
    deadline.onExpire((timeout) => {
      release(timeout);
      // A stopped server would never answer the goodbye that ends the socket.
      connection.connection?.stream?.destroy?.();
    });
    let failure;
    try {
      deadline.check();
      return await use(guardedConnection(connection, deadline, watch), connection);
    } catch (error) {
      if (watch.error !== null || broken(error)) failure = error;
      throw error;
    } finally {
      release(failure ?? (watch.error === null ? undefined : watch.error));
    }
  }

  /**
   * Runs fn(tx) between BEGIN and COMMIT on one connection; if fn throws, the
   * transaction rolls back and the error is rethrown as it was. `options`:
   * see store/bounds.cjs transactionOptions (a batch runs at READ COMMITTED,
   * whatever the server's default, for its locking reads).
   */
  transaction(fn, options) {
    const { batch, deadlineAt } = transactionOptions(options);
    return this.#inTransaction(
      async (queryable, raw, deadline) => {
        const tx = new PostgresTransaction(this, queryable, raw);
        // A callback still running at the deadline is abandoned: what it sends later through tx.client is refused.
        deadline.onExpire(() => tx._end());
        try {
          const result = await fn(tx);
          await tx._beforeCommit();
          return result;
        } finally {
          tx._end();
        }
      },
      'transaction',
      deadlineAt,
      batch ? ' ISOLATION LEVEL READ COMMITTED' : '',
    );
  }

  /** @internal a Client or PGlite is one session: runners sharing it are told apart in process */
  _lockScope() {
    return this.client;
  }

  /**
   * @internal pg_try_advisory_lock, held by a session: a connection of its
   * own from a Pool (so no transaction stays open while the lock is held),
   * the Client or PGlite itself otherwise. A session that ends frees it.
   */
  _tryLock(name) {
    return sessionLock({
      pooled: this.#kind === 'pool',
      open: async () => (this.#kind === 'pool' ? checkOut(this.client) : { session: this.client }),
      tryLock: async (session) => (await session.query(dialect.tryLock, [name])).rows[0]?.acquired === true,
      unlock: (session) => session.query(dialect.unlock, [name]),
      // With an error, the pool discards the client instead of handing it out again.
      giveBack: (session, broken, error) => session.release(broken ? (error ?? true) : undefined),
      mapError,
    });
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is StoreBase)

  /** @internal the dialect's claim statement, in autocommit; the rows are read by StoreBase */
  async _claimRows(request) {
    return (await this._execute(dialect.claim(this._statements, request))).rows;
  }

  /**
   * @internal one statement, in a transaction of its own so that it runs
   * under the same bounds as every other call
   */
  _execute({ sql, values }) {
    return this.#inTransaction((queryable) => run(queryable, sql, values, undefined, this._prepares), 'statement');
  }

  /**
   * work(queryable, raw, deadline) between BEGIN and COMMIT on one connection (`raw`
   * the driver's own handle of it, for tx.client), within
   * options.timeoutMs. Errors thrown by `work` pass through untouched; the
   * driver's own failures (BEGIN, COMMIT, acquiring a connection, a lost
   * connection) come out mapped.
   */
  #inTransaction(work, operation = 'transaction', deadlineAt = null, mode = '') {
    return withDeadline(this.#timeouts.timeoutMs, operation, (deadline) => this.#transactionWithin(deadline, work, mode), deadlineAt);
  }

  async #transactionWithin(deadline, work, mode) {
    const timeouts = mode === '' ? this.#timeouts : { ...this.#timeouts, mode };
    let workError = null;
    const guarded = async (queryable, raw) => {
      try {
        return await work(queryable, raw, deadline);
      } catch (error) {
        workError = error;
        throw error;
      }
    };
    if (this.#kind === 'pglite') {
      // In process: no server to stop and no connection to lose. The bound still
      // holds while another transaction keeps PGlite's lock; work that gets the
      // lock after its caller gave up runs nothing and rolls back. PGlite holds
      // its one connection until the function it runs settles, so that function
      // ends at the deadline too: a callback that never settles is abandoned,
      // PGlite rolls its transaction back, and the next caller gets the lock.
      const watch = new ConnectionWatch(null);
      try {
        return await this.client.transaction((tx) => Promise.race([guarded(guardedConnection(tx, deadline, watch), tx), deadline.promise]));
      } catch (error) {
        if (error === workError) throw error;
        throw mapError(error);
      }
    }
    return this.#withConnection(
      deadline,
      (queryable, raw) => onConnection(raw, queryable, guarded, timeouts),
      (error) => error instanceof IdemflowError && error.code === STORE_UNAVAILABLE,
    );
  }
}

/** Whether a part of the schema is there (dialect.present), read on `queryable`. */
async function present(queryable, part) {
  const { sql, values } = dialect.present(part);
  return (await run(queryable, sql, values)).rows.length > 0;
}

/** How long one step of a migration waits for its table's lock, and how often it tries. */
const STEP_LOCK_MS = 2000;
const STEP_TRIES = 5;

/**
 * One step of a migration on `session`: in a transaction of its own (or,
 * for CREATE INDEX CONCURRENTLY, none), waiting at most STEP_LOCK_MS for
 * its lock; a step that timed out tries again after a pause.
 */
async function migrationStep(session, { sql, inTransaction }) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      if (inTransaction) {
        await run(session, 'BEGIN', []);
        await run(session, dialect.stepLockTimeout(STEP_LOCK_MS), []);
        await run(session, sql, []);
        await run(session, 'COMMIT', []);
      } else {
        await run(session, `SET lock_timeout = ${STEP_LOCK_MS}`, []);
        try {
          await run(session, sql, []);
        } finally {
          await run(session, 'RESET lock_timeout', []).catch(() => {});
        }
      }
      return;
    } catch (error) {
      if (inTransaction) await rollbackQuietly(session);
      const lockTimeout = error instanceof IdemflowError && error.details?.reason === 'lock-timeout';
      if (!lockTimeout || attempt >= STEP_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** attempt * Math.random()));
    }
  }
}

/**
 * A client of the host's Pool, watched from the moment it is handed out.
 * pg-pool takes its own 'error' listener off a client as it hands it out and
 * calls connect()'s callback at once; the same socket read may carry an
 * error next (a server ending the connection just after it opened), which a
 * listener attached after an `await` would miss, ending the process
 * (node-postgres issue 2762). So the watch is attached in the callback.
 * @returns {Promise<{ session: import('pg').PoolClient, watch: ConnectionWatch }>}
 */
function checkOut(pool) {
  return new Promise((resolve, reject) => {
    pool.connect((error, client) => (error ? reject(error) : resolve({ session: client, watch: new ConnectionWatch(client) })));
  });
}

/**
 * A pg Client nobody called connect() on queues every query until it
 * connects, that is forever: refuse it at once instead. Connecting it here
 * would break the host's own later connect() ("Client has already been
 * connected"), so the host does it. Objects without pg's flags pass.
 */
function checkConnected(client) {
  if (client._connecting === false && client._connected === false) {
    throw invalidArgument(
      'PostgresStore was handed a pg Client that is not connected: call `await client.connect()` before using the store (or pass a pg Pool, which connects by itself)',
      {
        reason: 'client not connected',
      },
    );
  }
}

/**
 * BEGIN (with the server-side bounds of this transaction), work, COMMIT.
 * Statements go through `queryable` (bounded by the call's deadline); the
 * rollback after a failure goes to the raw `connection`, so that even an
 * abandoned transaction on a shared Client is rolled back.
 */
async function onConnection(connection, queryable, work, { timeoutMs, statementTimeoutMs, mode = '' }) {
  // One round trip: SET LOCAL lasts until the transaction ends and leaves the
  // connection's own settings as they were. A session that this process leaves
  // idle inside the transaction longer than its own timeout is ended by the server.
  const bounds = statementTimeoutMs > 0 ? `; SET LOCAL statement_timeout = ${statementTimeoutMs}` : '';
  const { result, committed } = await betweenBeginAndCommit(connection, {
    begin: () => run(queryable, `BEGIN${mode}${bounds}; SET LOCAL idle_in_transaction_session_timeout = ${timeoutMs}; ${MARK}`, []),
    work: () => work(queryable, connection),
    commit: () => run(queryable, 'COMMIT', []),
  });
  // COMMIT of a transaction a failed statement had aborted answers ROLLBACK.
  if (committed.command === 'ROLLBACK') {
    throw lostRace(new Error('COMMIT rolled back an aborted transaction'), 'transaction-aborted');
  }
  return result;
}

module.exports = {
  PostgresStore,
  PostgresTransaction,
  DEFAULT_TABLES,
  STORE_UNAVAILABLE,
  isStoreUnavailable,
};
