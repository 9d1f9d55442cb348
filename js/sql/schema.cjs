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
    id: ['key', 'PRIMARY KEY'], status: ['name', 'NOT NULL'], revision: ['bigint', 'NOT NULL'], data: ['json', 'NOT NULL'],
    created_at: ['bigint', 'NULL'], updated_at: ['bigint', 'NULL'],
  },
  inbox: {
    event_id: ['key', 'PRIMARY KEY'], fingerprint: ['name', 'NOT NULL'], workflow_id: ['key', 'NOT NULL'], event_type: ['name', 'NOT NULL'],
    outcome: ['name', 'NOT NULL'], rule_set_id: ['name', 'NULL'], rule_set_version: ['int', 'NULL'], rule_set_hash: ['name', 'NULL'],
    recorded_at: ['bigint', 'NOT NULL'], result: ['json', 'NULL'],
  },
  outbox: {
    id: ['key', 'PRIMARY KEY'], type: ['name', 'NOT NULL'], workflow_id: ['key', 'NOT NULL'], event_id: ['key', 'NOT NULL'],
    payload: ['json', 'NOT NULL'], status: ['name', 'NOT NULL'], attempts: ['int', 'NOT NULL DEFAULT 0'],
    next_attempt_at: ['bigint', 'NOT NULL'], lease_owner: ['name', 'NULL'], lease_expires_at: ['bigint', 'NULL'],
    fencing_token: ['bigint', 'NOT NULL DEFAULT 0'], last_error: ['text', 'NULL'], created_at: ['bigint', 'NOT NULL'],
    updated_at: ['bigint', 'NOT NULL'], metadata: ['json', 'NULL'], trace_context: ['text', 'NULL'],
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

/** `[table name, column, its definition]` of each added column, the definition in `types`. */
function addedColumns(tables, types) {
  return ADDED_COLUMNS.map(([table, column]) => {
    const [kind, constraint] = DEFINITIONS[table][column];
    return [tables[table], column, `${column} ${types[kind]} ${constraint}`];
  });
}

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
 * CREATE TABLE IF NOT EXISTS for the three tables: `quote(table)` quotes a
 * table name, `types` names each kind of column, `primaryKey` writes the key's
 * constraint and `options` follows the closing parenthesis.
 */
function createTables(tables, quote, types, { primaryKey = 'PRIMARY KEY', options = '' } = {}) {
  return Object.keys(DEFINITIONS).map((table) => {
    const columns = TABLES[table].map(([column]) => {
      const [kind, constraint] = DEFINITIONS[table][column];
      return `${column} ${types[kind]} ${constraint === 'PRIMARY KEY' ? primaryKey : constraint}`;
    });
    return `CREATE TABLE IF NOT EXISTS ${quote(tables[table])} (\n  ${columns.join(',\n  ')}\n)${options}`;
  });
}

/** `[table name, index suffix, columns]` of each index of these tables. */
function indexesOf(tables) {
  return INDEXES.map(([table, suffix, columns]) => [tables[table], suffix, columns]);
}

/**
 * The three tables and their indexes as SQLite and PostgreSQL both write them,
 * one statement each; `createIndex(table, suffix, columns)` writes the
 * dialect's CREATE INDEX IF NOT EXISTS.
 */
function portableSchema(tables, quote, createIndex) {
  return [...createTables(tables, quote, PORTABLE_TYPES), ...indexesOf(tables).map(([table, suffix, columns]) => createIndex(table, suffix, columns))];
}


module.exports = { baseName, indexName, createTables, indexesOf, portableSchema, addedColumns, DEFINITIONS, PORTABLE_TYPES };
