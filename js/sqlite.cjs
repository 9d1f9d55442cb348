'use strict';
// The embedded store: SQLite through a synchronous handle, better-sqlite3 or
// node:sqlite (both offer prepare/get/run/exec). Every transaction starts with
// BEGIN IMMEDIATE, so it holds the write lock from its first read and no
// other process can change what it read; the busy timeout queues writers
// instead of failing them. Transactions on one handle run one at a time.
// The outbox claim is one UPDATE … RETURNING inside BEGIN IMMEDIATE.

const { IdemflowError } = require('./errors.cjs');
const common = require('./adapter-common.cjs');
const { checkOptionKeys, checkHandle } = require('./options.cjs');

const STORE_OPTIONS = ['tables', 'maxAttempts', 'now', 'busyTimeoutMs', 'synchronous', 'wal'];

const DEFAULT_BUSY_TIMEOUT_MS = 5000;
const SYNCHRONOUS = new Set(['OFF', 'NORMAL', 'FULL', 'EXTRA']);

// Extended result codes (sqlite3.h), for node:sqlite, which reports numbers.
const PRIMARY = { ERROR: 1, BUSY: 5, LOCKED: 6, NOMEM: 7, READONLY: 8, IOERR: 10, CORRUPT: 11, FULL: 13, CANTOPEN: 14, CONSTRAINT: 19, NOTADB: 26 };
const CONSTRAINT_UNIQUE = new Set([1555, 2067]); // SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE

function quote(name) {
  return name.split('.').map((part) => `"${part}"`).join('.');
}

/** What kind of failure a better-sqlite3 or node:sqlite error is. */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  let primary = null;
  let unique = false;
  if (typeof error.code === 'string' && error.code.startsWith('SQLITE_')) { // better-sqlite3
    primary = error.code.split('_')[1];
    unique = error.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || error.code === 'SQLITE_CONSTRAINT_UNIQUE';
  } else if (typeof error.errcode === 'number') { // node:sqlite
    primary = Object.keys(PRIMARY).find((name) => PRIMARY[name] === (error.errcode & 0xff)) ?? null;
    unique = CONSTRAINT_UNIQUE.has(error.errcode);
  } else if (/database (connection )?is not open/i.test(String(error.message))) {
    return { type: 'unavailable', reason: 'connection-closed' };
  }
  if (unique) return { type: 'unique' };
  if (primary === 'ERROR' && /^no such table/i.test(String(error.message))) return { type: 'schema', reason: 'missing-table' };
  switch (primary) {
    case 'BUSY': case 'LOCKED': return { type: 'race', reason: 'database-busy' };
    case 'CANTOPEN': return { type: 'unavailable', reason: 'cannot-open' };
    case 'IOERR': case 'FULL': case 'NOMEM': case 'READONLY': case 'CORRUPT': case 'NOTADB':
      return { type: 'unavailable', reason: `sqlite-${primary.toLowerCase()}` };
    default: return null;
  }
}

function mapError(error, onUnique) {
  return common.mapDriverError(error, classify, onUnique);
}

function isHandle(db) {
  return db !== null && typeof db === 'object' && typeof db.prepare === 'function' && typeof db.exec === 'function';
}

/** One transaction: statements run on the store's handle inside BEGIN IMMEDIATE … COMMIT. */
class SqliteTransaction {
  #store;

  constructor(store) {
    this.#store = store;
  }

  async getReceipt(eventId) {
    return common.receiptFromRow(this.#store._get('receipt', eventId));
  }

  async getWorkflow(id) {
    return common.workflowFromRow(this.#store._get('workflow', id));
  }

  async getOperation(id) {
    return common.operationView(this.#store._get('operation', id));
  }

  async insertReceipt(receipt) {
    const values = common.receiptValues(receipt, this.#store.now());
    const inserted = this.#store._run('insertReceipt', values, (e) => common.receiptExists(receipt, e));
    if (inserted === 0) throw common.receiptExists(receipt);
  }

  async writeWorkflow(write) {
    const change = common.workflowPatch(write);
    const now = this.#store.now();
    const changed = change.expect === null
      ? this.#store._run('insertWorkflow', [change.id, change.status, change.revision, JSON.stringify(change.kept), now, now],
        (e) => common.workflowChanged(write, e))
      : this.#store._run('updateWorkflow', [change.status, change.revision, JSON.stringify(change.patch), now,
        change.id, change.expect.status, change.expect.revision]);
    if (changed !== 1) throw common.workflowChanged(write);
  }

  async insertOperation(operation) {
    const values = common.operationValues(operation, this.#store.now());
    const inserted = this.#store._run('insertOperation', values, (e) => common.operationExists(operation, e));
    if (inserted === 0) throw common.operationExists(operation);
  }
}

/**
 * A store over one SQLite handle (better-sqlite3 `Database` or node:sqlite
 * `DatabaseSync`). The constructor sets WAL mode and the busy timeout on the
 * handle; migrate() creates the tables. It is also an outbox store
 * (docs/outbox.md).
 */
class SqliteStore extends common.SqlOutboxStoreBase {
  #db;
  #owned;
  #statements = new Map();
  #serializer = new common.Serializer();
  #clock;

  /**
   * @param {object} db a better-sqlite3 Database or a node:sqlite DatabaseSync
   * @param {{ tables?: object, maxAttempts?: number, now?: () => number,
   *   busyTimeoutMs?: number, synchronous?: 'OFF'|'NORMAL'|'FULL'|'EXTRA', wal?: boolean }} [options]
   */
  constructor(db, options = {}) {
    super();
    checkHandle(db, 'sqlite', isHandle, 'SqliteStore needs a better-sqlite3 Database or a node:sqlite DatabaseSync');
    // `owned` is how open() hands over the handle it opened.
    checkOptionKeys(options, [...STORE_OPTIONS, 'owned'], 'SqliteStore');
    const opts = options ?? {};
    this.#db = db;
    this.#owned = opts.owned === true;
    this.tables = common.resolveTables(opts.tables);
    this.maxAttempts = common.resolveMaxAttempts(opts.maxAttempts);
    this.#clock = common.resolveClock(opts.now);
    const busyTimeoutMs = opts.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    if (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw common.invalidArgument('options.busyTimeoutMs must be a whole number of milliseconds', { field: 'busyTimeoutMs', reason: 'not a non-negative integer' });
    }
    const synchronous = opts.synchronous === undefined ? null : String(opts.synchronous).toUpperCase();
    if (synchronous !== null && !SYNCHRONOUS.has(synchronous)) {
      throw common.invalidArgument('options.synchronous must be OFF, NORMAL, FULL or EXTRA', { field: 'synchronous', reason: 'unknown level' });
    }
    this._sql = statements(this.tables);
    /** @internal */
    this._outboxSql = new common.OutboxSql(this.tables, quote);
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
    checkOptionKeys(options, ['driver', ...STORE_OPTIONS], 'SqliteStore.open');
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
        throw common.invalidArgument('options.driver must be "better-sqlite3" or "node:sqlite"', { field: 'driver', reason: 'unknown driver' });
      }
    } catch (error) {
      if (error instanceof IdemflowError) throw error;
      if (error && (error.code === 'MODULE_NOT_FOUND' || error.code === 'ERR_UNKNOWN_BUILTIN_MODULE')) {
        throw common.invalidArgument(`SQLite driver ${driver} is not available: install better-sqlite3, or use Node 22.13+ for node:sqlite`, {
          field: 'driver', reason: 'driver not installed',
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

  now() {
    return this.#clock();
  }

  /** Creates the three tables and their indexes if they do not exist. */
  async migrate() {
    const ddl = common.portableSchema(this.tables, quote, (table, suffix, columns) =>
      `CREATE INDEX IF NOT EXISTS ${indexName(table, suffix)} ON ${quote(common.baseName(table))} (${columns})`).join(';\n');
    await this.#serializer.run(() => this.#immediate(() => this.#exec(ddl)));
  }

  /**
   * Runs fn(tx) inside BEGIN IMMEDIATE … COMMIT; if fn throws, ROLLBACK and
   * rethrow. Calls on one store queue behind each other.
   */
  transaction(fn) {
    return this.#serializer.run(() => this.#immediate(() => fn(new SqliteTransaction(this))));
  }

  /**
   * BEGIN IMMEDIATE, work(), COMMIT; ROLLBACK and rethrow (as it was) if work
   * throws. A work that returns no promise runs to COMMIT without yielding,
   * so it never holds the write lock across an await.
   */
  async #immediate(work) {
    this.#exec('BEGIN IMMEDIATE');
    let result;
    try {
      result = work();
      if (typeof result?.then === 'function') result = await result;
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

  // ---- The outbox store interface (docs/outbox.md; the rest is OutboxStoreBase)

  /**
   * One UPDATE … RETURNING inside BEGIN IMMEDIATE: the write lock is taken
   * before the due rows are read, so no other process claims them meanwhile.
   * The rows are read after COMMIT (OutboxStoreBase), so one that cannot be
   * read does not roll the claim of the others back.
   * @internal
   */
  async _claim(request) {
    const sql = this._outboxSql;
    const claim = sql.statement((bind) => `UPDATE ${sql.outbox} SET ${sql.claimSet(bind, request)}
      WHERE id IN (SELECT id FROM ${sql.outbox} WHERE ${sql.due(bind, request)} ORDER BY next_attempt_at, id LIMIT ${bind(request.limit)})
      RETURNING ${sql.columns}`, true);
    return this.#serializer.run(() => this.#immediate(() => this.#execute(claim).rows));
  }

  /**
   * @internal one statement outside a transaction, queued like transactions
   * are, so a read never sees a transaction's uncommitted writes on this
   * shared handle.
   */
  _execute(statement) {
    return this.#serializer.run(async () => this.#execute(statement));
  }

  #execute({ sql, values, returnsRows }) {
    try {
      const prepared = this.#prepared(sql);
      return returnsRows ? { rows: prepared.all(...values), count: 0 } : { rows: [], count: Number(prepared.run(...values).changes) };
    } catch (error) {
      throw mapError(error);
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
      statement = this.#db.prepare(sql);
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  #statement(name) {
    return this.#prepared(this._sql[name]);
  }

  /** @internal one row by key, or undefined */
  _get(name, key) {
    try {
      return this.#statement(name).get(key);
    } catch (error) {
      throw mapError(error);
    }
  }

  /** @internal runs a write and returns how many rows it changed */
  _run(name, values, onUnique) {
    try {
      return Number(this.#statement(name).run(...values).changes);
    } catch (error) {
      throw mapError(error, onUnique);
    }
  }
}

/** SQLite puts the schema on the index name, not on its table. */
function indexName(table, suffix) {
  const schema = table.includes('.') ? `${quote(table.slice(0, table.indexOf('.')))}.` : '';
  return `${schema}"${common.indexName(table, suffix)}"`;
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
    insertReceipt: `INSERT INTO ${inbox} (${common.INBOX_COLUMNS.join(', ')}) VALUES (${marks(common.INBOX_COLUMNS.length)})
      ON CONFLICT (event_id) DO NOTHING`,
    insertWorkflow: `INSERT INTO ${workflows} (id, status, revision, data, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT (id) DO NOTHING`,
    // json_patch is RFC 7396 merge patch: a null in the patch removes the field.
    updateWorkflow: `UPDATE ${workflows} SET status = ?, revision = ?, data = json_patch(data, ?), updated_at = ?
      WHERE id = ? AND status = ? AND revision = ?`,
    putWorkflow: `INSERT INTO ${workflows} (id, status, revision, data, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT (id) DO UPDATE SET status = excluded.status, revision = excluded.revision, data = excluded.data,
      updated_at = excluded.updated_at`,
    insertOperation: `INSERT INTO ${outbox} (${common.OUTBOX_COLUMNS.join(', ')}) VALUES (${marks(common.OUTBOX_COLUMNS.length)})
      ON CONFLICT (id) DO NOTHING`,
  };
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
  DEFAULT_TABLES: common.DEFAULT_TABLES,
  STORE_UNAVAILABLE: common.STORE_UNAVAILABLE,
  isStoreUnavailable: common.isStoreUnavailable,
};
