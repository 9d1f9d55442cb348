'use strict';
// Table definitions the SQL dialects share: index names within the 63
// characters PostgreSQL and MySQL allow, and the three tables as SQLite and
// PostgreSQL both write them.

const { createHash } = require('node:crypto');
const { TABLES } = require('./columns.cjs');

/** The unqualified part of `schema.name`. */
function baseName(table) {
  return table.slice(table.lastIndexOf('.') + 1);
}

/**
 * An index named after its table, `<table>_<suffix>`, kept within the 63
 * characters PostgreSQL and MySQL allow by shortening a long table name and
 * adding a hash of it.
 */
function indexName(table, suffix) {
  const base = baseName(table);
  const name = `${base}_${suffix}`;
  if (name.length <= 63) return name;
  const hash = createHash('sha256').update(base).digest('hex').slice(0, 8);
  return `${base.slice(0, 63 - suffix.length - 10)}_${hash}_${suffix}`;
}

// The SQL type and constraint of every column of sql/columns.cjs: a type is
// a kind the dialect names (`key`: an id, compared byte for byte; `name`: a
// short text; `json`: JSON text; `text`, `int`, `bigint`).
const DEFINITIONS = Object.freeze({
  workflows: {
    id: ['key', 'PRIMARY KEY'],
    status: ['name', 'NOT NULL'],
    revision: ['bigint', 'NOT NULL'],
    data: ['json', 'NOT NULL'],
    created_at: ['bigint', 'NULL'],
    updated_at: ['bigint', 'NULL'],
  },
  inbox: {
    event_id: ['key', 'PRIMARY KEY'],
    fingerprint: ['name', 'NOT NULL'],
    workflow_id: ['key', 'NOT NULL'],
    event_type: ['name', 'NOT NULL'],
    outcome: ['name', 'NOT NULL'],
    rule_set_id: ['name', 'NULL'],
    rule_set_version: ['int', 'NULL'],
    rule_set_hash: ['name', 'NULL'],
    recorded_at: ['bigint', 'NOT NULL'],
    result: ['json', 'NULL'],
  },
  outbox: {
    id: ['key', 'PRIMARY KEY'],
    type: ['name', 'NOT NULL'],
    workflow_id: ['key', 'NOT NULL'],
    event_id: ['key', 'NOT NULL'],
    payload: ['json', 'NOT NULL'],
    status: ['name', 'NOT NULL'],
    attempts: ['int', 'NOT NULL DEFAULT 0'],
    next_attempt_at: ['bigint', 'NOT NULL'],
    lease_owner: ['name', 'NULL'],
    lease_expires_at: ['bigint', 'NULL'],
    fencing_token: ['bigint', 'NOT NULL DEFAULT 0'],
    last_error: ['text', 'NULL'],
    created_at: ['bigint', 'NOT NULL'],
    updated_at: ['bigint', 'NOT NULL'],
    metadata: ['json', 'NULL'],
    trace_context: ['text', 'NULL'],
  },
});

/**
 * Columns added after tables were first created: migrate() adds each one an
 * existing table lacks (every one is nullable, so old rows read as null).
 * [table, column].
 */
const ADDED_COLUMNS = Object.freeze([
  ['inbox', 'result'],
  ['outbox', 'metadata'],
  ['outbox', 'trace_context'],
]);

/** The indexes of the tables: [table, name suffix, columns]. */
const INDEXES = Object.freeze([
  ['inbox', 'recorded_at_idx', 'recorded_at'],
  ['outbox', 'status_next_attempt_idx', 'status, next_attempt_at'],
  ['outbox', 'status_lease_expires_idx', 'status, lease_expires_at'],
  ['outbox', 'status_updated_idx', 'status, updated_at'],
]);

/** The types SQLite and PostgreSQL both take. */
const PORTABLE_TYPES = Object.freeze({ key: 'TEXT', name: 'TEXT', json: 'TEXT', text: 'TEXT', int: 'INTEGER', bigint: 'BIGINT' });

/**
 * CREATE TABLE IF NOT EXISTS for one of the three tables (`workflows`,
 * `inbox`, `outbox`) named `name`: `quote(name)` quotes a table name, `types`
 * names each kind of column, `primaryKey` writes the key's constraint and
 * `options` follows the closing parenthesis.
 */
function createTable(table, name, quote, types, { primaryKey = 'PRIMARY KEY', options = '' } = {}) {
  const columns = TABLES[table].map(([column]) => {
    const [kind, constraint] = DEFINITIONS[table][column];
    return `${column} ${types[kind]} ${constraint === 'PRIMARY KEY' ? primaryKey : constraint}`;
  });
  return `CREATE TABLE IF NOT EXISTS ${quote(name)} (\n  ${columns.join(',\n  ')}\n)${options}`;
}

/** `column type constraint` of an added column, its type named by `types`. */
function columnDefinition(table, column, types) {
  const [kind, constraint] = DEFINITIONS[table][column];
  return `${column} ${types[kind]} ${constraint}`;
}

/**
 * What migrate() makes, part by part, in the order it makes them: the three
 * tables, the columns added since a table was first made (an older table
 * lacks them; a new one has them), and the indexes. Each part names the
 * store's own table (`name`) beside which of the three it is (`table`):
 *   { kind: 'table', table, name }
 *   { kind: 'column', table, name, column }
 *   { kind: 'index', table, name, index, columns }   index: the index's name
 * A dialect says how to see whether a part is there (`present`, a read that
 * takes no lock a transaction holds) and how to make it (`create`).
 */
function schemaParts(tables) {
  return [
    ...Object.keys(DEFINITIONS).map((table) => ({ kind: 'table', table, name: tables[table] })),
    ...ADDED_COLUMNS.map(([table, column]) => ({ kind: 'column', table, name: tables[table], column })),
    ...INDEXES.map(([table, suffix, columns]) => ({
      kind: 'index',
      table,
      name: tables[table],
      index: indexName(tables[table], suffix),
      columns,
    })),
  ];
}

/**
 * The store's migrate(), over what its dialect and driver do: looks at
 * every part of the schema first (`missingOf(parts)`: reads only, answering
 * the parts that are not there), and when every part is there, that is all:
 * a worker starting beside live traffic takes no lock. What is missing is
 * made by `create(missing)`, which serialises concurrent migrations and makes
 * each part in a short step of its own, looking again first (another
 * process may have made it meanwhile).
 */
async function migrateMissing(tables, { missingOf, create }) {
  const missing = await missingOf(schemaParts(tables));
  if (missing.length > 0) await create(missing);
}

module.exports = { baseName, indexName, createTable, columnDefinition, migrateMissing, DEFINITIONS, PORTABLE_TYPES };
