'use strict';
// MySQL and MariaDB over the host's mysql2 Pool or Connection (promise or
// callback flavour). Ids are compared byte for byte: a binary NO PAD
// collation where the server has one, so "a", "A" and "a " are three ids.
// Every write is guarded by a primary key or a compare-and-set on
// (id, status, revision); deadlocks and lock wait timeouts run the whole
// cycle again, like a lost compare-and-set. The outbox claim locks due rows
// FOR UPDATE SKIP LOCKED (MySQL 8, MariaDB 10.6+) and updates them in the
// same short transaction.

const { IdemflowError } = require('./errors.cjs');
const common = require('./adapter-common.cjs');
const { checkOptionKeys, checkHandle } = require('./options.cjs');

const UNAVAILABLE_ERRNO = new Set([1040, 1053, 1077, 1152, 1158, 1159, 1160, 1161, 1927, 2002, 2003, 2006, 2013, 2055]);
const DUPLICATE_INDEX_NAME = 1061;
// What a claim takes, in this order: [status, due column, index suffix].
const DUE = [['claimed', 'lease_expires_at', 'status_lease_expires_idx'], ['pending', 'next_attempt_at', 'status_next_attempt_idx']];
const UNAVAILABLE_CODES = new Set([
  'PROTOCOL_CONNECTION_LOST', 'PROTOCOL_ENQUEUE_AFTER_FATAL_ERROR', 'PROTOCOL_ENQUEUE_AFTER_QUIT',
  'PROTOCOL_SEQUENCE_TIMEOUT', 'POOL_CLOSED', 'POOL_ENQUEUELIMIT',
]);

function quote(name) {
  return name.split('.').map((part) => `\`${part}\``).join('.');
}

/** What kind of failure a mysql2 error is (errno is the server's error number). */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  const errno = typeof error.errno === 'number' ? error.errno : null;
  if (errno === 1062 || error.code === 'ER_DUP_ENTRY') return { type: 'unique' };
  if (errno === 1146 || errno === 1049) return { type: 'schema', reason: 'missing-table' }; // ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR
  if (errno === 1213) return { type: 'race', reason: 'deadlock' };
  if (errno === 1205) return { type: 'race', reason: 'lock-timeout' };
  if (errno === 1020) return { type: 'race', reason: 'serialization-failure' }; // record changed since last read
  // max_statement_time (MariaDB 1969) or max_execution_time (MySQL 3024) ran out: redeliver later.
  if (errno === 1969 || errno === 3024) return { type: 'unavailable', reason: 'timeout' };
  if (common.isNetworkError(error)) {
    return { type: 'unavailable', reason: error.code === 'ECONNREFUSED' ? 'connection-refused' : 'network-error' };
  }
  if (error.fatal === true || UNAVAILABLE_CODES.has(error.code) || UNAVAILABLE_ERRNO.has(errno)
    || /Pool is closed|Can't add new command when connection is in closed state|connection is in closed state/i.test(String(error.message))) {
    return { type: 'unavailable', reason: 'connection-lost' };
  }
  return null;
}

function mapError(error, onUnique) {
  return common.mapDriverError(error, classify, onUnique);
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

class MysqlTransaction extends common.SqlTransaction {
  constructor(store, connection) {
    super(store, (sql, values, onUnique) => run(connection, sql, values, onUnique));
  }

  async writeWorkflow(write) {
    const change = common.workflowPatch(write);
    if (change.expect === null) return super.writeWorkflow(write);
    // JSON_SET and JSON_REMOVE rather than JSON_MERGE_PATCH: MariaDB 10.11's
    // merge patch skips removals whose keys come in another order than the document's.
    const kept = Object.entries(change.kept);
    let data = 'data';
    const paths = [];
    if (kept.length > 0) {
      data = `JSON_SET(${data}, ${kept.map(() => '?, ?').join(', ')})`;
      for (const [field, value] of kept) paths.push(`$."${field}"`, value);
    }
    if (change.removed.length > 0) {
      data = `JSON_REMOVE(${data}, ${change.removed.map(() => '?').join(', ')})`;
      for (const field of change.removed) paths.push(`$."${field}"`);
    }
    const { count } = await this._execute(this._sql('updateWorkflow').replace('data = ?', `data = ${data}`),
      [change.status, change.revision, ...paths, this._store.now(), change.id, change.expect.status, change.expect.revision]);
    if (count !== 1) throw common.workflowChanged(write);
  }
}

/**
 * A store over a mysql2 Pool (a connection per transaction) or a single
 * Connection (transactions queue on it), promise or callback flavour. It is
 * also an outbox store (docs/outbox.md).
 */
class MysqlStore extends common.SqlOutboxStoreBase {
  #kind;
  #serializer = new common.Serializer();
  #clock;
  #collation;
  #timeouts;
  #watch = null;
  #flavour = null;

  /**
   * @param {object} db a mysql2 Pool or Connection
   * @param {{ tables?: object, maxAttempts?: number, now?: () => number, collation?: string, timeoutMs?: number, statementTimeoutMs?: number }} [options]
   */
  constructor(db, options = {}) {
    super();
    checkHandle(db, 'mysql2', (value) => kindOf(promiseFlavour(value)) !== null, 'MysqlStore needs a mysql2 Pool or Connection');
    const client = promiseFlavour(db);
    const kind = kindOf(client);
    checkOptionKeys(options, ['tables', 'maxAttempts', 'now', 'collation', 'timeoutMs', 'statementTimeoutMs'], 'MysqlStore');
    const opts = options ?? {};
    if (opts.collation !== undefined && !/^[A-Za-z0-9_]+$/.test(String(opts.collation))) {
      throw common.invalidArgument('options.collation must be a collation name', { field: 'collation', reason: 'not a collation name' });
    }
    this.#kind = kind;
    /** The mysql2 Pool or Connection (promise flavour) this store works through. */
    this.client = client;
    this.tables = common.resolveTables(opts.tables);
    this.maxAttempts = common.resolveMaxAttempts(opts.maxAttempts);
    this.#clock = common.resolveClock(opts.now);
    this.#collation = opts.collation ?? null;
    this.#timeouts = common.resolveTimeouts(opts);
    // A Connection the host hands in is held for the store's lifetime; pool connections are watched while checked out.
    if (kind === 'connection') this.#watch = common.watchClient(client.connection ?? client);
    /** @internal */
    this._sql = statements(this.tables);
    /** @internal */
    this._outboxSql = new common.OutboxSql(this.tables, quote, { deleteLimit: true });
  }

  now() {
    return this.#clock();
  }

  /**
   * Creates the tables (InnoDB, utf8mb4) and their indexes if they do not
   * exist. Id columns use a binary NO PAD collation: utf8mb4_nopad_bin on
   * MariaDB, utf8mb4_0900_bin on MySQL 8 (options.collation overrides).
   */
  async migrate() {
    const { workflows, inbox, outbox } = this.tables;
    const collation = this.#collation ?? await this.#idCollation();
    const id = `VARCHAR(768) CHARACTER SET utf8mb4 COLLATE ${collation}`;
    const name = `VARCHAR(255) CHARACTER SET utf8mb4 COLLATE ${collation}`;
    const table = `ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=${collation}`;
    const ddl = [
      `CREATE TABLE IF NOT EXISTS ${quote(workflows)} (
        id ${id} NOT NULL PRIMARY KEY,
        status ${name} NOT NULL,
        revision BIGINT NOT NULL,
        data LONGTEXT NOT NULL,
        created_at BIGINT NULL,
        updated_at BIGINT NULL
      ) ${table}`,
      `CREATE TABLE IF NOT EXISTS ${quote(inbox)} (
        event_id ${id} NOT NULL PRIMARY KEY,
        fingerprint ${name} NOT NULL,
        workflow_id ${id} NOT NULL,
        event_type ${name} NOT NULL,
        outcome ${name} NOT NULL,
        rule_set_id ${name} NULL,
        rule_set_version INT NULL,
        rule_set_hash ${name} NULL,
        recorded_at BIGINT NOT NULL,
        INDEX \`${common.indexName(inbox, 'recorded_at_idx')}\` (recorded_at)
      ) ${table}`,
      `CREATE TABLE IF NOT EXISTS ${quote(outbox)} (
        id ${id} NOT NULL PRIMARY KEY,
        type ${name} NOT NULL,
        workflow_id ${id} NOT NULL,
        event_id ${id} NOT NULL,
        payload LONGTEXT NOT NULL,
        status ${name} NOT NULL,
        attempts INT NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        lease_owner ${name} NULL,
        lease_expires_at BIGINT NULL,
        fencing_token BIGINT NOT NULL DEFAULT 0,
        last_error TEXT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        INDEX \`${common.indexName(outbox, 'status_next_attempt_idx')}\` (status, next_attempt_at)
      ) ${table}`,
    ];
    // DDL commits implicitly in MySQL, so it runs statement by statement.
    for (const statement of ddl) await this.#query(statement, []);
    // Indexes added after the first release: MySQL has no CREATE INDEX IF NOT
    // EXISTS, so an index that is there already (1061) is what was wanted.
    const indexes = [['status_lease_expires_idx', 'status, lease_expires_at'], ['status_updated_idx', 'status, updated_at']];
    for (const [suffix, columns] of indexes) {
      try {
        await this.#query(`CREATE INDEX \`${common.indexName(outbox, suffix)}\` ON ${quote(outbox)} (${columns})`, []);
      } catch (error) {
        if (error.cause?.errno !== DUPLICATE_INDEX_NAME) throw error;
      }
    }
  }

  async #idCollation() {
    const { rows } = await this.#query('SELECT VERSION() AS version', []);
    const version = String(rows[0].version);
    if (/mariadb/i.test(version)) return 'utf8mb4_nopad_bin';
    return Number.parseInt(version, 10) >= 8 ? 'utf8mb4_0900_bin' : 'utf8mb4_bin';
  }

  /**
   * Runs fn(tx) between BEGIN and COMMIT on one connection; if fn throws, the
   * transaction rolls back and the error is rethrown as it was.
   */
  async transaction(fn) {
    return this.#inTransaction((connection) => fn(new MysqlTransaction(this, connection)));
  }

  /** work(connection) between START TRANSACTION and COMMIT on one connection (at `isolation` when given). */
  #inTransaction(work, isolation, operation = 'transaction') {
    return this.#onConnection(operation, (connection, raw) => onConnection(connection, raw, work, isolation));
  }

  /**
   * use(connection, raw) on a connection of this store, within
   * options.timeoutMs: `connection` checks the deadline before every
   * statement and carries the server-side statement bound; `raw` is for the
   * rollback after a failure.
   */
  #onConnection(operation, use) {
    return common.withDeadline(this.#timeouts.timeoutMs, operation, async (deadline) => {
      if (this.#kind === 'connection') {
        // The host's Connection is not ours to close: work that ran out of time
        // sends nothing more; the calls queued behind it time out in the queue.
        return this.#serializer.run(async () => {
          deadline.check();
          const bounded = await this.#bounded(this.client, deadline, this.#watch);
          return use(bounded, this.client);
        });
      }
      let connection;
      try {
        connection = await this.client.getConnection();
      } catch (error) {
        throw mapError(error);
      }
      // mysql2 emits 'error' on a pool connection the server closed; its own listener is a once().
      const watch = new common.ConnectionWatch(connection.connection ?? connection);
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
        return await use(await this.#bounded(connection, deadline, watch), connection);
      } catch (error) {
        broken = watch.error !== null || (error instanceof IdemflowError && error.code === common.STORE_UNAVAILABLE);
        throw error;
      } finally {
        release(broken || watch.error !== null);
      }
    });
  }

  /**
   * The connection with this call's deadline and, on MariaDB, its statements
   * bounded on the server: `SET STATEMENT max_statement_time = …,
   * innodb_lock_wait_timeout = … FOR` in front of every read and write, which
   * leaves the session's own settings alone. (MySQL has no such prefix for
   * writes; there only the client-side bound applies.)
   */
  async #bounded(connection, deadline, watch) {
    const guarded = common.guardedConnection(connection, deadline, watch);
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
    return common.guardedConnection(connection, deadline, watch, (sql) => (/^\s*(SELECT|INSERT|UPDATE|DELETE)\b/i.test(sql) ? prefix + sql : sql));
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is OutboxStoreBase)

  /**
   * A short READ COMMITTED transaction: lock due rows FOR UPDATE SKIP LOCKED,
   * update them, read them back. Expired claims (few, and waiting longest)
   * come first, then pending operations. Each select walks its own index in
   * order (forced: on a small table the optimizer would rather sort), so it
   * locks only the rows it returns; ties come in primary key order, which the
   * index holds (naming id in ORDER BY would make the server sort again).
   * @internal
   */
  async _claim(request) {
    const sql = this._outboxSql;
    const { outbox } = this.tables;
    const lockDue = (status, column, index, limit) => sql.statement((bind) => `SELECT id FROM ${sql.outbox}
      FORCE INDEX (\`${common.indexName(outbox, index)}\`)
      WHERE ${sql.typeFilter(bind, request)}status = '${status}' AND ${column} <= ${bind(request.now)}
      ORDER BY ${column} LIMIT ${bind(limit)} FOR UPDATE SKIP LOCKED`, true);
    return this.#inTransaction(async (connection) => {
      const ids = [];
      for (const [status, column, index] of DUE) {
        if (ids.length === request.limit) break;
        const { rows } = await execute(connection, lockDue(status, column, index, request.limit - ids.length));
        ids.push(...rows.map((row) => row.id));
      }
      if (ids.length === 0) return [];
      await execute(connection, sql.statement((bind) => `UPDATE ${sql.outbox} SET ${sql.claimSet(bind, request)} WHERE id IN (${bind(ids)})`));
      const { rows } = await run(connection, `SELECT ${sql.columns} FROM ${sql.outbox} WHERE id IN (?)`, [ids]);
      // Read after COMMIT (OutboxStoreBase): a row that cannot be read must not roll the whole claim back.
      return rows;
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

function execute(connection, { sql, values }) {
  return run(connection, sql, values);
}

/** Statements go through `connection` (bounded); the rollback after a failure goes to `raw`. */
async function onConnection(connection, raw, work, isolation) {
  // SET TRANSACTION (without SESSION) applies to the next transaction only.
  if (isolation) await run(connection, `SET TRANSACTION ISOLATION LEVEL ${isolation}`, []);
  await run(connection, 'START TRANSACTION', []);
  let result;
  try {
    result = await work(connection);
  } catch (error) {
    await common.rollbackQuietly(raw);
    throw error;
  }
  try {
    await run(connection, 'COMMIT', []);
  } catch (error) {
    await common.rollbackQuietly(raw);
    throw error;
  }
  return result;
}

function statements(tables) {
  const workflows = quote(tables.workflows);
  const inbox = quote(tables.inbox);
  const outbox = quote(tables.outbox);
  const marks = (n) => Array.from({ length: n }, () => '?').join(', ');
  return {
    receipt: `SELECT ${common.INBOX_COLUMNS.join(', ')} FROM ${inbox} WHERE event_id = ?`,
    workflow: `SELECT id, status, revision, data FROM ${workflows} WHERE id = ?`,
    operation: `SELECT ${common.OUTBOX_COLUMNS.join(', ')} FROM ${outbox} WHERE id = ?`,
    insertReceipt: `INSERT INTO ${inbox} (${common.INBOX_COLUMNS.join(', ')}) VALUES (${marks(common.INBOX_COLUMNS.length)})`,
    insertWorkflow: `INSERT INTO ${workflows} (id, status, revision, data, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
    // `data = ?` is replaced by the JSON_SET/JSON_REMOVE of each write.
    updateWorkflow: `UPDATE ${workflows} SET status = ?, revision = ?, data = ?, updated_at = ?
      WHERE id = ? AND status = ? AND revision = ?`,
    putWorkflow: `INSERT INTO ${workflows} (id, status, revision, data, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON DUPLICATE KEY UPDATE status = VALUES(status), revision = VALUES(revision), data = VALUES(data),
      updated_at = VALUES(updated_at)`,
    insertOperation: `INSERT INTO ${outbox} (${common.OUTBOX_COLUMNS.join(', ')}) VALUES (${marks(common.OUTBOX_COLUMNS.length)})`,
  };
}

module.exports = {
  MysqlStore,
  MysqlTransaction,
  DEFAULT_TABLES: common.DEFAULT_TABLES,
  STORE_UNAVAILABLE: common.STORE_UNAVAILABLE,
  isStoreUnavailable: common.isStoreUnavailable,
};
