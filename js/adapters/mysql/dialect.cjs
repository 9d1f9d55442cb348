'use strict';
// What MySQL and MariaDB say differently: backquotes, ? placeholders, a plain
// INSERT whose duplicate key is the answer (INSERT IGNORE would hide other
// errors too), ON DUPLICATE KEY UPDATE, JSON_SET/JSON_REMOVE for recorded
// fields, DELETE … ORDER BY … LIMIT, the DDL with its binary NO PAD
// collations, the claim's two index-forced SKIP LOCKED selects and the
// server's error numbers.

const { isNetworkError } = require('../../store/errors.cjs');
const { createHash } = require('node:crypto');
const { columnDefinition, createTable, indexName } = require('../../sql/schema.cjs');

const UNAVAILABLE_ERRNO = new Set([1053, 1077, 1152, 1158, 1159, 1160, 1161, 1927, 2002, 2003, 2006, 2013, 2055]);
// The server is out of something (PostgreSQL's class 53): a full disk (ER_DISK_FULL, ER_RECORD_FILE_FULL), memory
// (ER_OUTOFMEMORY, ER_OUT_OF_SORTMEMORY, ER_OUT_OF_RESOURCES), threads (ER_CANT_CREATE_THREAD), connections (ER_CON_COUNT_ERROR).
const OUT_OF_RESOURCES_ERRNO = new Set([1021, 1114, 1037, 1038, 1041, 1135, 1040]);
/** A storage engine's OS error 28 (ENOSPC), e.g. ER_GET_ERRNO "Got error 28 …" or "Errcode: 28". */
const NO_SPACE = /\b(error|errcode:?) 28\b|No space left on device/i;
// A write over a size limit: ER_DATA_TOO_LONG (a value longer than its column), ER_TOO_BIG_ROWSIZE,
// ER_NET_PACKET_TOO_LARGE (a statement over max_allowed_packet). The same write fails every time.
const TOO_LARGE_ERRNO = new Map([
  [1406, 'value-too-long'],
  [1118, 'row-too-large'],
  [1153, 'packet-too-large'],
]);
const UNAVAILABLE_CODES = new Set([
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_ENQUEUE_AFTER_FATAL_ERROR',
  'PROTOCOL_ENQUEUE_AFTER_QUIT',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'POOL_CLOSED',
  'POOL_ENQUEUELIMIT',
]);
// What a claim takes, in this order: [status, due column, index suffix].
const DUE = [
  ['claimed', 'lease_expires_at', 'status_lease_expires_idx'],
  ['pending', 'next_attempt_at', 'status_next_attempt_idx'],
];

function quote(name) {
  return name
    .split('.')
    .map((part) => `\`${part}\``)
    .join('.');
}

/** What kind of failure a mysql2 error is (errno is the server's error number). */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  const errno = typeof error.errno === 'number' ? error.errno : null;
  if (errno === 1062 || error.code === 'ER_DUP_ENTRY') return { type: 'unique' };
  if (errno === 1146 || errno === 1049) return { type: 'schema', reason: 'missing-table' }; // ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR
  if (TOO_LARGE_ERRNO.has(errno)) return { type: 'too-large', reason: TOO_LARGE_ERRNO.get(errno) };
  if (errno === 1213) return { type: 'race', reason: 'deadlock' };
  if (errno === 1205) return { type: 'race', reason: 'lock-timeout' };
  if (errno === 1020) return { type: 'race', reason: 'serialization-failure' }; // record changed since last read
  // max_statement_time (MariaDB 1969) or max_execution_time (MySQL 3024) ran out, or the statement was
  // cancelled (KILL QUERY: ER_QUERY_INTERRUPTED 1317): redeliver later, as for PostgreSQL's 57014.
  if (errno === 1969 || errno === 3024 || errno === 1317) return { type: 'unavailable', reason: 'timeout' };
  if (OUT_OF_RESOURCES_ERRNO.has(errno) || ((errno === 1030 || errno === 3) && NO_SPACE.test(String(error.message)))) {
    return { type: 'unavailable', reason: 'server-out-of-resources' };
  }
  if (isNetworkError(error)) {
    return { type: 'unavailable', reason: error.code === 'ECONNREFUSED' ? 'connection-refused' : 'network-error' };
  }
  if (
    error.fatal === true ||
    UNAVAILABLE_CODES.has(error.code) ||
    UNAVAILABLE_ERRNO.has(errno) ||
    /Pool is closed|Can't add new command when connection is in closed state|connection is in closed state/i.test(String(error.message))
  ) {
    return { type: 'unavailable', reason: 'connection-lost' };
  }
  return null;
}

/**
 * Whether an error is mysql2's (a host's statement on tx.client threw it):
 * the server's (a SQLSTATE), the driver's own (ER_…, PROTOCOL_…, a fatal
 * one) or a socket's.
 */
function fromDriver(error) {
  if (error === null || typeof error !== 'object') return false;
  if (typeof error.sqlState === 'string' || error.fatal === true) return true;
  if (typeof error.code === 'string' && /^(ER_|PROTOCOL_)/.test(error.code)) return true;
  return isNetworkError(error);
}

/**
 * JSON_SET and JSON_REMOVE rather than JSON_MERGE_PATCH: MariaDB 10.11's
 * merge patch skips removals whose keys come in another order than the document's.
 */
function mergeData(bind, change) {
  let data = 'data';
  const kept = Object.entries(change.kept);
  // A facts map (an object) goes in as JSON, not as a string holding it.
  const jsonOrBound = (value) =>
    value !== null && typeof value === 'object' ? `JSON_EXTRACT(${bind(JSON.stringify(value))}, '$')` : bind(value);
  if (kept.length > 0)
    data = `JSON_SET(${data}, ${kept.map(([field, value]) => `${bind(`$."${field}"`)}, ${jsonOrBound(value)}`).join(', ')})`;
  if (change.removed.length > 0) data = `JSON_REMOVE(${data}, ${change.removed.map((field) => bind(`$."${field}"`)).join(', ')})`;
  return data;
}

function columnTypes(collation) {
  return {
    key: `VARCHAR(768) CHARACTER SET utf8mb4 COLLATE ${collation}`,
    name: `VARCHAR(255) CHARACTER SET utf8mb4 COLLATE ${collation}`,
    json: 'LONGTEXT',
    text: 'TEXT',
    int: 'INT',
    bigint: 'BIGINT',
  };
}

/** `[schema or null, table]` of a store's table name, for information_schema. */
function schemaAndName(name) {
  const dot = name.indexOf('.');
  return dot < 0 ? [null, name] : [name.slice(0, dot), name.slice(dot + 1)];
}

/**
 * migrate(): whether a part of the schema (sql/schema.cjs schemaParts) is
 * there, read from information_schema (no lock a transaction holds).
 */
function present(part) {
  const where = 'TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?';
  const values = schemaAndName(part.name);
  switch (part.kind) {
    case 'table':
      return { sql: `SELECT 1 AS present FROM information_schema.TABLES WHERE ${where}`, values };
    case 'column':
      return {
        sql: `SELECT 1 AS present FROM information_schema.COLUMNS WHERE ${where} AND COLUMN_NAME = ?`,
        values: [...values, part.column],
      };
    default:
      return {
        sql: `SELECT 1 AS present FROM information_schema.STATISTICS WHERE ${where} AND INDEX_NAME = ? LIMIT 1`,
        values: [...values, part.index],
      };
  }
}

/**
 * The statement that makes a missing part (InnoDB, utf8mb4; ids and names in
 * `collation`). DDL commits implicitly here. An index is built in place
 * without blocking writers (LOCK=NONE). The columns added since a table was
 * first made are none of them an id or a name, so none needs the id collation.
 */
function create(part, collation) {
  switch (part.kind) {
    case 'table':
      return createTable(part.table, part.name, quote, columnTypes(collation), {
        primaryKey: 'NOT NULL PRIMARY KEY',
        options: ` ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=${collation}`,
      });
    case 'column':
      return `ALTER TABLE ${quote(part.name)} ADD COLUMN ${columnDefinition(part.table, part.column, columnTypes(collation))}`;
    default:
      return `CREATE INDEX \`${part.index}\` ON ${quote(part.name)} (${part.columns}) ALGORITHM=INPLACE LOCK=NONE`;
  }
}

/**
 * The claim's statements: lock due rows FOR UPDATE SKIP LOCKED, expired
 * claims first (few, and waiting longest), then pending operations; each
 * select walks its own index in order (forced: on a small table the
 * optimizer would rather sort), so it locks only the rows it returns. Then
 * one UPDATE of the ids and a read of them.
 */
const claim = {
  /** The select of one kind of due row: [status, column, index suffix] of DUE. */
  lockDue: (statements, request, [status, column, index], limit) =>
    statements.statement(
      (bind) => `SELECT id FROM ${statements.quoted.outbox}
      FORCE INDEX (\`${indexName(statements.tables.outbox, index)}\`)
      WHERE ${statements.typeFilter(bind, request)}status = '${status}' AND ${column} <= ${bind(request.now)}
      ORDER BY ${column} LIMIT ${bind(limit)} FOR UPDATE SKIP LOCKED`,
      true,
    ),
  update: (statements, request, ids) =>
    statements.statement(
      (bind) => `UPDATE ${statements.quoted.outbox} SET ${statements.claimSet(bind, request)} WHERE id IN (${bind(ids)})`,
    ),
  read: (statements, ids) =>
    statements.statement(
      (bind) => `SELECT ${statements.columns('outbox')} FROM ${statements.quoted.outbox} WHERE id IN (${bind(ids)})`,
      true,
    ),
  kinds: DUE,
};

const dialect = Object.freeze({
  name: 'mysql',
  quote,
  placeholder: () => '?',
  insertIfAbsent: () => '',
  // processBatch's locking read, in key order. It runs at READ COMMITTED
  // (batchIsolation), where a locking read takes no gap lock for a key that
  // is missing: two batches that both create a workflow then meet at its
  // insert instead of deadlocking on each other's gap locks.
  lockInOrder: (key) => ` ORDER BY ${key} FOR UPDATE`,
  batchIsolation: 'READ COMMITTED',
  upsert: (_key, columns) => ` ON DUPLICATE KEY UPDATE ${columns.map((c) => `${c} = VALUES(${c})`).join(', ')}`,
  mergeData,
  // MySQL refuses LIMIT in an IN subquery; DELETE takes its own ORDER BY … LIMIT.
  purgeBatch: ({ table, order, where, limit }) => `DELETE FROM ${table} WHERE ${where} ORDER BY ${order} LIMIT ${limit}`,
  classify,
  fromDriver,
  present,
  create,
  /** Migrations queue on this named lock (GET_LOCK), each waiting at most its deadline. */
  migrationLock: 'idemflow.migrate',
  /** How long a step of a migration waits for its table's metadata lock (seconds): a DDL queued behind a long transaction holds up every statement behind it. */
  stepLockWaitSeconds: 2,
  /** The named lock of withExclusiveLock (GET_LOCK names hold at most 64 characters: a longer one is hashed). */
  tryLock: 'SELECT GET_LOCK(?, 0) AS acquired',
  /** The keyed mode's hold on an idempotency key: a named lock (the key hashed, within 64 characters), released after COMMIT or ROLLBACK. */
  keyLockName: (key) => `idemflow.key:${createHash('sha256').update(key).digest('hex').slice(0, 40)}`,
  unlock: 'SELECT RELEASE_LOCK(?)',
  lockName: (name) => (name.length <= 64 ? name : `idemflow:${createHash('sha256').update(name).digest('hex').slice(0, 40)}`),
  claim,
  // What a migration that lost to another one meets: the part is there, as wanted.
  DUPLICATE_INDEX_NAME: 1061,
  DUPLICATE_COLUMN_NAME: 1060,
});

module.exports = dialect;
