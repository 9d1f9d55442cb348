'use strict';
// What SQLite says differently: quoting, ? placeholders, ON CONFLICT,
// json_patch for recorded fields, index names carrying the schema, the
// claim (one UPDATE … RETURNING, inside BEGIN IMMEDIATE) and the result
// codes of better-sqlite3 and node:sqlite.

const { PORTABLE_TYPES, baseName, columnDefinition, createTable } = require('../../sql/schema.cjs');

// Extended result codes (sqlite3.h), for node:sqlite, which reports numbers.
const PRIMARY = {
  ERROR: 1,
  BUSY: 5,
  LOCKED: 6,
  NOMEM: 7,
  READONLY: 8,
  IOERR: 10,
  CORRUPT: 11,
  FULL: 13,
  CANTOPEN: 14,
  TOOBIG: 18,
  CONSTRAINT: 19,
  NOTADB: 26,
};
const CONSTRAINT_UNIQUE = new Set([1555, 2067]); // SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE

function quote(name) {
  return name
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

/** What kind of failure a better-sqlite3 or node:sqlite error is. */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  let primary = null;
  let unique = false;
  if (typeof error.code === 'string' && error.code.startsWith('SQLITE_')) {
    // better-sqlite3
    primary = error.code.split('_')[1];
    unique = error.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || error.code === 'SQLITE_CONSTRAINT_UNIQUE';
  } else if (typeof error.errcode === 'number') {
    // node:sqlite
    primary = Object.keys(PRIMARY).find((name) => PRIMARY[name] === (error.errcode & 0xff)) ?? null;
    unique = CONSTRAINT_UNIQUE.has(error.errcode);
  } else if (/database (connection )?is not open/i.test(String(error.message))) {
    return { type: 'unavailable', reason: 'connection-closed' };
  }
  if (unique) return { type: 'unique' };
  if (primary === 'ERROR' && /^no such table/i.test(String(error.message))) return { type: 'schema', reason: 'missing-table' };
  switch (primary) {
    case 'BUSY':
    case 'LOCKED':
      return { type: 'race', reason: 'database-busy' };
    case 'CANTOPEN':
      return { type: 'unavailable', reason: 'cannot-open' };
    // A string or blob over SQLITE_MAX_LENGTH (or a statement over its limit): the same write fails every time.
    case 'TOOBIG':
      return { type: 'too-large', reason: 'value-too-long' };
    case 'IOERR':
    case 'FULL':
    case 'NOMEM':
    case 'READONLY':
    case 'CORRUPT':
    case 'NOTADB':
      return { type: 'unavailable', reason: `sqlite-${primary.toLowerCase()}` };
    default:
      return null;
  }
}

/** Whether an error is better-sqlite3's (a SQLITE_ code) or node:sqlite's (an errcode), or a closed handle's. */
function fromDriver(error) {
  if (error === null || typeof error !== 'object') return false;
  if (typeof error.code === 'string' && error.code.startsWith('SQLITE_')) return true;
  if (error.code === 'ERR_SQLITE_ERROR' || typeof error.errcode === 'number') return true;
  return /database (connection )?is not open/i.test(String(error.message));
}

/** The schema part of `schema.name` (null for a plain name). */
function schemaOf(table) {
  return table.includes('.') ? table.slice(0, table.indexOf('.')) : null;
}

/** The catalog of the schema a table is in: `"schema".sqlite_master`, or sqlite_master. */
function catalogOf(table) {
  const schema = schemaOf(table);
  return schema === null ? 'sqlite_master' : `${quote(schema)}.sqlite_master`;
}

const dialect = Object.freeze({
  name: 'sqlite',
  quote,
  placeholder: () => '?',
  insertIfAbsent: (key) => ` ON CONFLICT (${key}) DO NOTHING`,
  upsert: (key, columns) => ` ON CONFLICT (${key}) DO UPDATE SET ${columns.map((c) => `${c} = excluded.${c}`).join(', ')}`,
  // json_patch is RFC 7396 merge patch: a null in the patch removes the field.
  mergeData: (bind, change) => `json_patch(data, ${bind(JSON.stringify(change.patch))})`,
  // Many compare-and-sets in one statement (UPDATE … FROM, SQLite 3.33+): the VALUES columns are column1…column7.
  updateWorkflows: (table, rows) => `UPDATE ${table} SET status = v.column2, revision = v.column3, data = v.column4, updated_at = v.column5
      FROM (VALUES ${rows.map((row) => `(${row.join(', ')})`).join(', ')}) AS v
      WHERE ${table}.id = v.column1 AND ${table}.status = v.column6 AND ${table}.revision = v.column7`,
  purgeBatch: ({ table, key, order, where, limit }) =>
    `DELETE FROM ${table} WHERE ${key} IN (SELECT ${key} FROM ${table} WHERE ${where} ORDER BY ${order} LIMIT ${limit})`,
  classify,
  fromDriver,

  /**
   * Whether a part of the schema (sql/schema.cjs schemaParts) is there: a
   * read of the catalog, which waits on no writer.
   */
  present: (part) => {
    const found = (sql, values) => ({ sql: `SELECT 1 AS present FROM ${sql}`, values, returnsRows: true });
    if (part.kind === 'column') {
      const schema = schemaOf(part.name);
      return found(`pragma_table_info(?${schema === null ? '' : ', ?'}) WHERE name = ?`, [
        baseName(part.name),
        ...(schema === null ? [] : [schema]),
        part.column,
      ]);
    }
    const name = part.kind === 'table' ? baseName(part.name) : part.index;
    return found(`${catalogOf(part.name)} WHERE type = ? AND name = ?`, [part.kind, name]);
  },

  /** The statement that makes a missing part (SQLite puts the schema on the index's name, not on its table). */
  create: (part) => {
    switch (part.kind) {
      case 'table':
        return createTable(part.table, part.name, quote, PORTABLE_TYPES);
      case 'column':
        return `ALTER TABLE ${quote(part.name)} ADD COLUMN ${columnDefinition(part.table, part.column, PORTABLE_TYPES)}`;
      default: {
        const schema = schemaOf(part.name);
        return `CREATE INDEX IF NOT EXISTS ${schema === null ? '' : `${quote(schema)}.`}"${part.index}" ON ${quote(baseName(part.name))} (${part.columns})`;
      }
    }
  },

  /**
   * The lease row of withExclusiveLock, in `<inbox>_locks` beside the inbox
   * (made on first use): taken when absent or expired (one row changes),
   * given back by its owner. acquire's values end with [expiresAt, now].
   */
  lock: (tables, name, owner) => {
    const table = quote(`${tables.inbox}_locks`);
    return {
      create: `CREATE TABLE IF NOT EXISTS ${table} (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at BIGINT NOT NULL)`,
      acquire: {
        sql: `INSERT INTO ${table} (name, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE ${table}.expires_at <= ?`,
        values: [name, owner],
        returnsRows: false,
      },
      release: { sql: `DELETE FROM ${table} WHERE name = ? AND owner = ?`, values: [name, owner], returnsRows: false },
    };
  },

  /** The claim: one UPDATE … RETURNING; run inside BEGIN IMMEDIATE, which takes the write lock before the due rows are read. */
  claim: (statements, request) =>
    statements.statement(
      (bind) => `UPDATE ${statements.quoted.outbox} SET ${statements.claimSet(bind, request)}
      WHERE id IN (SELECT id FROM ${statements.quoted.outbox} WHERE ${statements.due(bind, request)} ORDER BY next_attempt_at, id LIMIT ${bind(request.limit)})
      RETURNING ${statements.columns('outbox')}`,
      true,
    ),
});

module.exports = dialect;
