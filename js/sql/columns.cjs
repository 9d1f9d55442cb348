'use strict';
// The columns of the three SQL tables, one [column, field, kind] table per
// table: the column lists, a row read back as a record and a record written
// as values are all derived from these, so nothing relies on the order of an
// object's keys. The receipt and operation columns are the stored names of
// their records' fields (store/records.cjs); `json` columns hold JSON text.

const { DECISION_FIELDS, RECORD_FIELDS } = require('../store/records.cjs');

const JSON_FIELDS = new Set(['data', 'payload', 'result', 'metadata']);
const fromRecord = (fields) =>
  Object.freeze(fields.map(([field, name]) => Object.freeze([name, field, JSON_FIELDS.has(field) ? 'json' : 'plain'])));

const TABLES = Object.freeze({
  workflows: Object.freeze([
    ...fromRecord(RECORD_FIELDS.workflow),
    Object.freeze(['created_at', 'createdAt', 'plain']),
    Object.freeze(['updated_at', 'updatedAt', 'plain']),
  ]),
  inbox: fromRecord(RECORD_FIELDS.receipt),
  outbox: fromRecord(RECORD_FIELDS.operation),
});

// What a read of each table selects: a workflow's timestamps are written, never read.
const READ = Object.freeze({
  workflows: Object.freeze(TABLES.workflows.filter(([column]) => column !== 'created_at' && column !== 'updated_at')),
  inbox: TABLES.inbox,
  outbox: TABLES.outbox,
  // The inbox as a decision reads it (receipts for processEvent and processBatch).
  decision: Object.freeze(TABLES.inbox.filter(([, field]) => DECISION_FIELDS.includes(field))),
});

const COLUMN_OF = new Map(
  Object.entries(TABLES).map(([table, columns]) => [table, new Map(columns.map(([column, field]) => [field, column]))]),
);

/** `a, b, c`: the columns of `table` (those a read selects, with `read`), each after `prefix` (`o.`). */
function columnList(table, { read = false, prefix = '' } = {}) {
  return (read ? READ : TABLES)[table].map(([column]) => `${prefix}${column}`).join(', ');
}

/** The column holding `field` of `table`'s records. */
function columnOf(table, field) {
  const column = COLUMN_OF.get(table).get(field);
  if (column === undefined) throw new Error(`idemflow: ${table} has no column for ${field}`); // a bug, never an input
  return column;
}

/** A row of `table` (named by column) as a record (named by field); null for no row. */
function recordOf(table, row) {
  if (row === undefined || row === null) return null;
  const record = {};
  for (const [column, field] of READ[table]) record[field] = row[column];
  return record;
}

/** The values of a record in `table`'s column order, JSON columns as text. */
function valuesOf(table, record) {
  return TABLES[table].map(([, field, kind]) => {
    const value = record[field];
    if (kind !== 'json') return value;
    return value === null || value === undefined ? null : JSON.stringify(value); // a nullable JSON column holds SQL NULL, not 'null'
  });
}

module.exports = { TABLES, columnList, columnOf, recordOf, valuesOf };
