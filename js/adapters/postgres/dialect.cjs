'use strict';
// What PostgreSQL (and PGlite) say differently from the other SQL databases:
// quoting, $n placeholders, ON CONFLICT, the jsonb merge of recorded fields,
// the DDL, the claim statement (FOR UPDATE SKIP LOCKED in a CTE) and which
// SQLSTATE means what. A PostgreSQL-compatible database (CockroachDB, …)
// would be this dialect with the differences it has, as flags or overrides.

const { isNetworkError } = require('../../store/errors.cjs');
const { PORTABLE_TYPES, addedColumns, indexName, portableSchema } = require('../../sql/schema.cjs');

const MIGRATION_LOCK = 'idemflow.migrate';
const UNAVAILABLE_MESSAGE = /Connection terminated|connection error|not queryable|Cannot use a pool after calling end|timeout exceeded when trying to connect|Client was closed|PGlite is closed|closed/i;

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
  if (isNetworkError(error)) {
    return { type: 'unavailable', reason: code === 'ECONNREFUSED' ? 'connection-refused' : 'network-error' };
  }
  if (!/^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_MESSAGE.test(String(error.message))) {
    return { type: 'unavailable', reason: 'connection-lost' };
  }
  return null;
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
  /** The session-level advisory lock of withExclusiveLock, keyed by a hash of its name. */
  tryLock: 'SELECT pg_try_advisory_lock(hashtext($1)) AS acquired',
  unlock: 'SELECT pg_advisory_unlock(hashtext($1))',

  /**
   * The DDL of migrate(), under an advisory lock so that workers starting
   * together do not trip over each other; then the columns an older table lacks.
   */
  schema: (tables) => [
    `SELECT pg_advisory_xact_lock(hashtext('${MIGRATION_LOCK}'))`,
    ...portableSchema(tables, quote, (table, suffix, columns) => `CREATE INDEX IF NOT EXISTS "${indexName(table, suffix)}" ON ${quote(table)} (${columns})`),
    // Tables made by an earlier version lack the columns added since; under the same lock.
    ...addedColumns(tables, PORTABLE_TYPES).map(([table, , definition]) => `ALTER TABLE ${quote(table)} ADD COLUMN IF NOT EXISTS ${definition}`),
  ],

  /**
   * The claim, one statement: a CTE that locks due rows FOR UPDATE SKIP
   * LOCKED (rows another consumer is claiming are skipped, not waited for; a
   * row committed meanwhile is re-checked when it is locked), then UPDATE … RETURNING.
   */
  claim: (statements, request) => statements.statement((bind) => `WITH due AS (
        SELECT id FROM ${statements.quoted.outbox} WHERE ${statements.due(bind, request)}
        ORDER BY next_attempt_at, id LIMIT ${bind(request.limit)} FOR UPDATE SKIP LOCKED)
      UPDATE ${statements.quoted.outbox} AS o SET ${statements.claimSet(bind, request)}
      FROM due WHERE o.id = due.id RETURNING ${statements.columns('outbox', { prefix: 'o.' })}`, true),
});

module.exports = dialect;
