'use strict';
// What PostgreSQL (and PGlite) say differently from the other SQL databases:
// quoting, $n placeholders, ON CONFLICT, the jsonb merge of recorded fields,
// the DDL, the claim statement (FOR UPDATE SKIP LOCKED in a CTE) and which
// SQLSTATE means what. A PostgreSQL-compatible database (CockroachDB, …)
// would be this dialect with the differences it has, as flags or overrides.

const { isNetworkError } = require('../../store/errors.cjs');
const { PORTABLE_TYPES, columnDefinition, createTable } = require('../../sql/schema.cjs');

const MIGRATION_LOCK = 'idemflow.migrate';
const UNAVAILABLE_MESSAGE =
  /Connection terminated|connection error|not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Client was closed|PGlite is closed|closed/i;

function quote(name) {
  return name
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

/** An index's name as a relation, in the schema of its table. */
function indexOf(part) {
  return part.name.includes('.') ? `${quote(part.name.slice(0, part.name.indexOf('.')))}."${part.index}"` : `"${part.index}"`;
}

/** What kind of failure a pg or PGlite error is (SQLSTATE in error.code). */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  const code = typeof error.code === 'string' ? error.code : '';
  if (code === '23505') return { type: 'unique' };
  if (code === '42P01' || code === '3F000') return { type: 'schema', reason: 'missing-table' }; // undefined table or schema
  // string_data_right_truncation (a value longer than a varchar(n) column) and program_limit_exceeded
  // (an index row over the btree's 2704 bytes, a value over 1 GB): the same write fails every time.
  if (code === '22001') return { type: 'too-large', reason: 'value-too-long' };
  if (code === '54000') return { type: 'too-large', reason: 'limit-exceeded' };
  if (code === '40001') return { type: 'race', reason: 'serialization-failure' };
  if (code === '40P01') return { type: 'race', reason: 'deadlock' };
  if (code === '55P03') return { type: 'race', reason: 'lock-timeout' };
  // statement_timeout (or a cancel): the server is too slow or a lock is held too long; redeliver later.
  if (code === '57014') return { type: 'unavailable', reason: 'timeout' };
  if (code.startsWith('08')) return { type: 'unavailable', reason: 'connection-lost' };
  if (code === '57P01' || code === '57P02' || code === '57P03') return { type: 'unavailable', reason: 'server-unavailable' };
  if (code.startsWith('53')) return { type: 'unavailable', reason: 'server-out-of-resources' };
  if (isNetworkError(error)) {
    return { type: 'unavailable', reason: code === 'ECONNREFUSED' ? 'connection-refused' : 'network-error' };
  }
  if (!/^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_MESSAGE.test(String(error.message))) {
    return { type: 'unavailable', reason: 'connection-lost' };
  }
  return null;
}

/** pg's and PGlite's own words for a connection that is gone (a host's Error saying "closed" is not one). */
const CONNECTION_MESSAGE =
  /Connection terminated|connection error|not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Client was closed|PGlite is closed/i;

/**
 * Whether an error is pg's or PGlite's (a host's statement on tx.client
 * threw it): the server's error (a SQLSTATE and a severity), a socket's
 * error, or the driver's own for a lost connection.
 */
function fromDriver(error) {
  if (error === null || typeof error !== 'object') return false;
  if (typeof error.code === 'string' && /^[0-9A-Z]{5}$/.test(error.code) && typeof error.severity === 'string') return true;
  return isNetworkError(error) || CONNECTION_MESSAGE.test(String(error.message));
}

const dialect = Object.freeze({
  name: 'postgres',
  quote,
  placeholder: (n) => `$${n}`,
  insertIfAbsent: (key) => ` ON CONFLICT (${key}) DO NOTHING`,
  upsert: (key, columns) => ` ON CONFLICT (${key}) DO UPDATE SET ${columns.map((c) => `${c} = EXCLUDED.${c}`).join(', ')}`,
  // A merge patch: || replaces the fields it names, and the fields set to
  // null are dropped (recorded fields are flat strings, so no nested nulls).
  mergeData: (bind, change) => `jsonb_strip_nulls(data::jsonb || ${bind(JSON.stringify(change.patch))}::jsonb)::text`,
  // Batch statements bind one array per column (sql/statements.cjs): the element type of each kind of column.
  arrayTypes: Object.freeze({ key: 'text', name: 'text', json: 'text', text: 'text', int: 'integer', bigint: 'bigint' }),
  // Many compare-and-sets in one statement: the rows unnested from one array
  // per column (id, status, revision, data, now, expected status, expected
  // revision), joined on id, matched on the expected status and revision.
  updateWorkflows: (table, [id, status, revision, data, now, expectStatus, expectRevision]) => `UPDATE ${table} AS w
      SET status = v.status, revision = v.revision, data = v.data, updated_at = v.updated_at
      FROM unnest(${id}, ${status}, ${revision}, ${data}, ${now}, ${expectStatus}, ${expectRevision})
      AS v (id, status, revision, data, updated_at, expect_status, expect_revision)
      WHERE w.id = v.id AND w.status = v.expect_status AND w.revision = v.expect_revision`,
  purgeBatch: ({ table, key, order, where, limit }) =>
    `DELETE FROM ${table} WHERE ${key} IN (SELECT ${key} FROM ${table} WHERE ${where} ORDER BY ${order} LIMIT ${limit} FOR UPDATE SKIP LOCKED)`,
  // processBatch's locking read, in key order: the lock an UPDATE of a
  // non-key column takes, taken as the sorted rows come out.
  lockInOrder: (key) => ` ORDER BY ${key} FOR NO KEY UPDATE`,
  classify,
  fromDriver,
  /** The session-level advisory lock of withExclusiveLock, keyed by a hash of its name. */
  tryLock: 'SELECT pg_try_advisory_lock(hashtext($1)) AS acquired',
  /** The keyed mode's hold on an idempotency key: a 64-bit hash, freed when the transaction ends. */
  tryHoldKey: "SELECT pg_try_advisory_xact_lock(hashtextextended('idemflow.key:' || $1, 0)) AS held",
  unlock: 'SELECT pg_advisory_unlock(hashtext($1))',

  /**
   * migrate(): whether a part of the schema (sql/schema.cjs schemaParts) is
   * there, a read of the catalog that takes no lock on the table (an index
   * a failed concurrent build left invalid is not there); the statements
   * that make a missing part; and the session lock that serialises
   * migrations.
   */
  present: (part) => {
    const found = (sql, values) => ({ sql: `SELECT 1 AS present FROM ${sql}`, values, returnsRows: true });
    switch (part.kind) {
      case 'table':
        return found('pg_class WHERE oid = to_regclass($1)', [quote(part.name)]);
      case 'column':
        return found('pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped', [
          quote(part.name),
          part.column,
        ]);
      default:
        return found('pg_index WHERE indexrelid = to_regclass($1) AND indisvalid', [indexOf(part)]);
    }
  },
  /**
   * What makes a missing part: `{ sql, inTransaction }`. An index on a table
   * that holds rows already is built CONCURRENTLY (outside a transaction),
   * so writers go on meanwhile; an invalid one a failed build left is
   * dropped first.
   */
  create: (part, { concurrently }) => {
    switch (part.kind) {
      case 'table':
        return [{ sql: createTable(part.table, part.name, quote, PORTABLE_TYPES), inTransaction: true }];
      case 'column':
        return [
          {
            sql: `ALTER TABLE ${quote(part.name)} ADD COLUMN IF NOT EXISTS ${columnDefinition(part.table, part.column, PORTABLE_TYPES)}`,
            inTransaction: true,
          },
        ];
      default: {
        const on = `${quote(part.name)} (${part.columns})`;
        if (!concurrently) return [{ sql: `CREATE INDEX IF NOT EXISTS "${part.index}" ON ${on}`, inTransaction: true }];
        return [
          { sql: `DROP INDEX CONCURRENTLY IF EXISTS ${indexOf(part)}`, inTransaction: false },
          { sql: `CREATE INDEX CONCURRENTLY IF NOT EXISTS "${part.index}" ON ${on}`, inTransaction: false },
        ];
      }
    }
  },
  migrationLock: `SELECT pg_advisory_lock(hashtext('${MIGRATION_LOCK}'))`,
  migrationUnlock: `SELECT pg_advisory_unlock(hashtext('${MIGRATION_LOCK}'))`,
  /**
   * How long one step of a migration waits for its table's lock: a step
   * queued behind a long transaction would hold up every statement queued
   * behind it, so it gives up soon and tries again.
   */
  stepLockTimeout: (ms) => `SET LOCAL lock_timeout = ${ms}`,

  /**
   * The claim, one statement: a CTE that locks due rows FOR UPDATE SKIP
   * LOCKED (rows another consumer is claiming are skipped, not waited for; a
   * row committed meanwhile is re-checked when it is locked), then UPDATE … RETURNING.
   */
  claim: (statements, request) =>
    statements.statement(
      (bind) => `WITH due AS (
        SELECT id FROM ${statements.quoted.outbox} WHERE ${statements.due(bind, request)}
        ORDER BY next_attempt_at, id LIMIT ${bind(request.limit)} FOR UPDATE SKIP LOCKED)
      UPDATE ${statements.quoted.outbox} AS o SET ${statements.claimSet(bind, request)}
      FROM due WHERE o.id = due.id RETURNING ${statements.columns('outbox', { prefix: 'o.' })}`,
      true,
    ),
});

module.exports = dialect;
