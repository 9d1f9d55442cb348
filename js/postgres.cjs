'use strict';
// PostgreSQL over the host's `pg` Pool or Client, or over PGlite in process.
// Transactions run at the server's isolation level (READ COMMITTED by
// default): every write is guarded by a unique key or by a compare-and-set on
// (id, status, revision), so a concurrent writer makes the guard fail and the
// whole cycle runs again; serialisation failures and deadlocks do the same.
// The outbox claim is one statement: a CTE that locks due rows FOR UPDATE
// SKIP LOCKED, then UPDATE … RETURNING.

const { IdemflowError } = require('./errors.cjs');
const common = require('./adapter-common.cjs');
const { checkOptionKeys, checkHandle } = require('./options.cjs');

const MIGRATION_LOCK = 'idemflow.migrate';
const UNAVAILABLE_MESSAGE = /Connection terminated|connection error|not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Client was closed|PGlite is closed|closed/i;

const STORE_OPTIONS = ['tables', 'maxAttempts', 'now', 'timeoutMs', 'statementTimeoutMs'];

function quote(name) {
  return name.split('.').map((part) => `"${part}"`).join('.');
}

/** What kind of failure a pg or PGlite error is (SQLSTATE in error.code). */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  const code = typeof error.code === 'string' ? error.code : '';
  if (code === '23505') return { type: 'unique' };
  if (code === '42P01' || code === '3F000') return { type: 'schema', reason: 'missing-table' }; // undefined table or schema
  if (code === '40001') return { type: 'race', reason: 'serialization-failure' };
  if (code === '40P01') return { type: 'race', reason: 'deadlock' };
  if (code === '55P03') return { type: 'race', reason: 'lock-timeout' };
  // statement_timeout (or a cancel): the server is too slow or a lock is held too long; redeliver later.
  if (code === '57014') return { type: 'unavailable', reason: 'timeout' };
  if (code.startsWith('08')) return { type: 'unavailable', reason: 'connection-lost' };
  if (code === '57P01' || code === '57P02' || code === '57P03') return { type: 'unavailable', reason: 'server-unavailable' };
  if (code.startsWith('53')) return { type: 'unavailable', reason: 'server-out-of-resources' };
  if (common.isNetworkError(error)) {
    return { type: 'unavailable', reason: code === 'ECONNREFUSED' ? 'connection-refused' : 'network-error' };
  }
  if (!/^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_MESSAGE.test(String(error.message))) {
    return { type: 'unavailable', reason: 'connection-lost' };
  }
  return null;
}

function mapError(error, onUnique) {
  return common.mapDriverError(error, classify, onUnique);
}

/** `{rows, count}` from pg (rowCount) or PGlite (affectedRows). */
async function run(queryable, sql, params, onUnique) {
  let result;
  try {
    result = await queryable.query(sql, params);
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

class PostgresTransaction extends common.SqlTransaction {
  constructor(store, queryable) {
    super(store, (sql, values, onUnique) => run(queryable, sql, values, onUnique));
  }
}

/**
 * A store over a `pg` Pool (a connection per transaction), a `pg` Client
 * (transactions queue on the one connection) or a PGlite instance. It is
 * also an outbox store (docs/outbox.md).
 */
class PostgresStore extends common.SqlOutboxStoreBase {
  #kind;
  #serializer = new common.Serializer();
  #clock;
  #timeouts;
  #watch = null;

  /**
   * @param {object} db a pg Pool, a pg Client (connected) or a PGlite instance
   * @param {{ tables?: object, maxAttempts?: number, now?: () => number, timeoutMs?: number, statementTimeoutMs?: number }} [options]
   */
  constructor(db, options = {}) {
    super();
    checkHandle(db, 'pg', (value) => kindOf(value) !== null, 'PostgresStore needs a pg Pool, a pg Client or a PGlite instance');
    const kind = kindOf(db);
    checkOptionKeys(options, STORE_OPTIONS, 'PostgresStore');
    const opts = options ?? {};
    this.#kind = kind;
    /** The pg Pool, pg Client or PGlite instance this store works through. */
    this.client = db;
    this.tables = common.resolveTables(opts.tables);
    this.maxAttempts = common.resolveMaxAttempts(opts.maxAttempts);
    this.#clock = common.resolveClock(opts.now);
    this.#timeouts = common.resolveTimeouts(opts);
    // A Client the host hands in is held for the store's lifetime; pool clients are watched while checked out.
    if (kind === 'client') this.#watch = common.watchClient(db);
    /** @internal */
    this._sql = statements(this.tables);
    /** @internal */
    this._outboxSql = new common.OutboxSql(this.tables, quote, { numbered: true, purgeLock: ' FOR UPDATE SKIP LOCKED' });
  }

  now() {
    return this.#clock();
  }

  /**
   * Creates the tables and indexes if they do not exist, under an advisory
   * lock so that workers starting together do not trip over each other.
   */
  async migrate() {
    const ddl = [
      `SELECT pg_advisory_xact_lock(hashtext('${MIGRATION_LOCK}'))`,
      ...common.portableSchema(this.tables, quote, (table, suffix, columns) =>
        `CREATE INDEX IF NOT EXISTS "${common.indexName(table, suffix)}" ON ${quote(table)} (${columns})`),
    ];
    await this.#inTransaction(async (queryable) => {
      for (const statement of ddl) await run(queryable, statement, []);
    }, 'migrate');
  }

  /**
   * Runs fn(tx) between BEGIN and COMMIT on one connection; if fn throws, the
   * transaction rolls back and the error is rethrown as it was.
   */
  transaction(fn) {
    return this.#inTransaction((queryable) => fn(new PostgresTransaction(this, queryable)));
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is OutboxStoreBase)

  /**
   * One statement in autocommit: rows another consumer is claiming right now
   * are locked and skipped, not waited for; a row committed meanwhile is
   * re-checked against the condition when it is locked.
   * @internal
   */
  async _claim(request) {
    const sql = this._outboxSql;
    const { rows } = await this._execute(sql.statement((bind) => `WITH due AS (
        SELECT id FROM ${sql.outbox} WHERE ${sql.due(bind, request)}
        ORDER BY next_attempt_at, id LIMIT ${bind(request.limit)} FOR UPDATE SKIP LOCKED)
      UPDATE ${sql.outbox} AS o SET ${sql.claimSet(bind, request)}
      FROM due WHERE o.id = due.id RETURNING o.*`));
    return rows; // read by OutboxStoreBase, which sets aside a row that cannot be read
  }

  /**
   * @internal one statement, in a transaction of its own so that it runs
   * under the same bounds as every other call
   */
  _execute({ sql, values }) {
    return this.#inTransaction((queryable) => run(queryable, sql, values), 'statement');
  }

  /**
   * work(queryable) between BEGIN and COMMIT on one connection, within
   * options.timeoutMs. Errors thrown by `work` pass through untouched; the
   * driver's own failures (BEGIN, COMMIT, acquiring a connection, a lost
   * connection) come out mapped.
   */
  #inTransaction(work, operation = 'transaction') {
    return common.withDeadline(this.#timeouts.timeoutMs, operation, (deadline) => this.#transactionWithin(deadline, work));
  }

  async #transactionWithin(deadline, work) {
    let workError = null;
    const guarded = async (queryable) => {
      try {
        return await work(queryable);
      } catch (error) {
        workError = error;
        throw error;
      }
    };
    if (this.#kind === 'pglite') {
      // In process: no server to stop and no connection to lose. The bound still
      // holds while another transaction keeps PGlite's lock; work that gets the
      // lock after its caller gave up runs nothing and rolls back.
      const watch = new common.ConnectionWatch(null);
      try {
        return await this.client.transaction((tx) => guarded(common.guardedConnection(tx, deadline, watch)));
      } catch (error) {
        if (error === workError) throw error;
        throw mapError(error);
      }
    }
    if (this.#kind === 'client') {
      // The host's Client is not ours to close: a transaction that ran out of
      // time sends nothing more and rolls back once the server answers again;
      // the transactions queued behind it time out in the queue meanwhile.
      return this.#serializer.run(() => {
        deadline.check();
        checkConnected(this.client);
        return onConnection(this.client, common.guardedConnection(this.client, deadline, this.#watch), guarded, this.#timeouts);
      });
    }
    let connection;
    try {
      connection = await this.client.connect();
    } catch (error) {
      throw mapError(error);
    }
    // pg-pool removes its own 'error' listener while a client is checked out.
    const watch = new common.ConnectionWatch(connection);
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
    let broken;
    try {
      deadline.check();
      return await onConnection(connection, common.guardedConnection(connection, deadline, watch), guarded, this.#timeouts);
    } catch (error) {
      if (watch.error !== null || (error instanceof IdemflowError && error.code === common.STORE_UNAVAILABLE)) broken = error;
      throw error;
    } finally {
      release(broken ?? (watch.error === null ? undefined : watch.error));
    }
  }
}

/**
 * A pg Client nobody called connect() on queues every query until it
 * connects, that is forever: refuse it at once instead. Connecting it here
 * would break the host's own later connect() ("Client has already been
 * connected"), so the host does it. Objects without pg's flags pass.
 */
function checkConnected(client) {
  if (client._connecting === false && client._connected === false) {
    throw common.invalidArgument('PostgresStore was handed a pg Client that is not connected: call `await client.connect()` before using the store (or pass a pg Pool, which connects by itself)', {
      reason: 'client not connected',
    });
  }
}

/**
 * BEGIN (with the server-side bounds of this transaction), work, COMMIT.
 * Statements go through `queryable` (bounded by the call's deadline); the
 * rollback after a failure goes to the raw `connection`, so that even an
 * abandoned transaction on a shared Client is rolled back.
 */
async function onConnection(connection, queryable, work, { timeoutMs, statementTimeoutMs }) {
  // One round trip: SET LOCAL lasts until the transaction ends and leaves the
  // connection's own settings as they were. A session that this process leaves
  // idle inside the transaction longer than its own timeout is ended by the server.
  const bounds = statementTimeoutMs > 0 ? `; SET LOCAL statement_timeout = ${statementTimeoutMs}` : '';
  await run(queryable, `BEGIN${bounds}; SET LOCAL idle_in_transaction_session_timeout = ${timeoutMs}`, []);
  let result;
  try {
    result = await work(queryable);
  } catch (error) {
    await common.rollbackQuietly(connection);
    throw error;
  }
  let committed;
  try {
    committed = await run(queryable, 'COMMIT', []);
  } catch (error) {
    await common.rollbackQuietly(connection);
    throw error;
  }
  // COMMIT of a transaction a failed statement had aborted answers ROLLBACK.
  if (committed.command === 'ROLLBACK') {
    throw common.lostRace(new Error('COMMIT rolled back an aborted transaction'), 'transaction-aborted');
  }
  return result;
}

function statements(tables) {
  const workflows = quote(tables.workflows);
  const inbox = quote(tables.inbox);
  const outbox = quote(tables.outbox);
  const marks = (n) => Array.from({ length: n }, (_, i) => `$${i + 1}`).join(', ');
  return {
    receipt: `SELECT ${common.INBOX_COLUMNS.join(', ')} FROM ${inbox} WHERE event_id = $1`,
    workflow: `SELECT id, status, revision, data FROM ${workflows} WHERE id = $1`,
    operation: `SELECT ${common.OUTBOX_COLUMNS.join(', ')} FROM ${outbox} WHERE id = $1`,
    insertReceipt: `INSERT INTO ${inbox} (${common.INBOX_COLUMNS.join(', ')}) VALUES (${marks(common.INBOX_COLUMNS.length)})
      ON CONFLICT (event_id) DO NOTHING`,
    insertWorkflow: `INSERT INTO ${workflows} (id, status, revision, data, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
      ON CONFLICT (id) DO NOTHING`,
    // A merge patch: || replaces the fields it names, and the fields set to
    // null are dropped (recorded fields are flat strings, so no nested nulls).
    updateWorkflow: `UPDATE ${workflows} SET status = $1, revision = $2, data = jsonb_strip_nulls(data::jsonb || $3::jsonb)::text,
      updated_at = $4 WHERE id = $5 AND status = $6 AND revision = $7`,
    putWorkflow: `INSERT INTO ${workflows} (id, status, revision, data, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
      ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, revision = EXCLUDED.revision, data = EXCLUDED.data,
      updated_at = EXCLUDED.updated_at`,
    insertOperation: `INSERT INTO ${outbox} (${common.OUTBOX_COLUMNS.join(', ')}) VALUES (${marks(common.OUTBOX_COLUMNS.length)})
      ON CONFLICT (id) DO NOTHING`,
  };
}

module.exports = {
  PostgresStore,
  PostgresTransaction,
  DEFAULT_TABLES: common.DEFAULT_TABLES,
  STORE_UNAVAILABLE: common.STORE_UNAVAILABLE,
  isStoreUnavailable: common.isStoreUnavailable,
};
