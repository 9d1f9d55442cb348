'use strict';
// What every durable store shares: table names, the row shapes of the three
// tables, checks on what a host hands in, and the errors a store throws. The
// per-database files only say how to talk to their driver.

const { createHash } = require('node:crypto');
const { IdemflowError } = require('./errors.cjs');
const { processEvent } = require('./host.cjs');
const { checkOptionKeys } = require('./options.cjs');

const DEFAULT_TABLES = Object.freeze({ workflows: 'workflows', inbox: 'event_inbox', outbox: 'event_outbox' });

/** The code a store throws when the database cannot be reached; the delivery should be retried. */
const STORE_UNAVAILABLE = 'STORE_UNAVAILABLE';

const RESERVED_FIELDS = new Set(['id', 'status', 'revision']);
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
// The shape of a rule set's field names; it keeps them safe in JSON paths and MongoDB dotted paths.
const FIELD_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

function invalidArgument(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { details });
}

/** `{workflows, inbox, outbox}` from options.tables; each a plain name or `schema.name`. */
function resolveTables(tables) {
  if (tables === undefined || tables === null) return { ...DEFAULT_TABLES };
  if (typeof tables !== 'object') {
    throw invalidArgument('options.tables must be an object {workflows, inbox, outbox}', { field: 'tables', reason: 'not an object' });
  }
  const resolved = {};
  for (const key of Object.keys(DEFAULT_TABLES)) {
    const name = tables[key] ?? DEFAULT_TABLES[key];
    const parts = typeof name === 'string' ? name.split('.') : [];
    if (parts.length === 0 || parts.length > 2 || !parts.every((part) => NAME.test(part))) {
      throw invalidArgument(`options.tables.${key} must be a table name of letters, digits and _ (optionally schema.name), at most 63 characters each`, {
        field: `tables.${key}`, reason: 'not a plain table name',
      });
    }
    resolved[key] = name;
  }
  const names = Object.values(resolved);
  if (new Set(names).size !== names.length) {
    throw invalidArgument('options.tables must name three different tables', { field: 'tables', reason: 'duplicate table name' });
  }
  return resolved;
}

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

function resolveMaxAttempts(value) {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw invalidArgument('options.maxAttempts must be a whole number of at least 1', { field: 'maxAttempts', reason: 'not a positive integer' });
  }
  return value;
}

function resolveClock(now) {
  if (now === undefined) return Date.now;
  if (typeof now !== 'function') {
    throw invalidArgument('options.now must be a function returning milliseconds since the epoch', { field: 'now', reason: 'not a function' });
  }
  return now;
}

function checkText(value, field) {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidArgument(`${field} must be a non-empty string`, { field, reason: 'not a non-empty string' });
  }
  if (!value.isWellFormed()) {
    throw invalidArgument(`${field} must be well-formed Unicode (it contains a lone surrogate)`, { field, reason: 'lone surrogate' });
  }
  return value;
}

/**
 * Splits a workflow a host wants stored into its columns. Recorded fields are
 * strings (amounts are decimal strings, never numbers); null or undefined
 * leaves a field out. Throws INVALID_ARGUMENT before anything is written.
 */
function workflowColumns(workflow) {
  if (workflow === null || typeof workflow !== 'object' || Array.isArray(workflow)) {
    throw invalidArgument('a workflow must be an object {id, status, revision, ...fields}', { reason: 'not an object' });
  }
  const id = checkText(workflow.id, 'id');
  const status = checkText(workflow.status, 'status');
  const { revision } = workflow;
  if (!Number.isSafeInteger(revision) || revision < 0) {
    throw invalidArgument('revision must be a whole number from 0 to 2^53 - 1', { field: 'revision', workflowId: id, reason: 'not a safe integer' });
  }
  const data = {};
  for (const [field, value] of Object.entries(workflow)) {
    if (RESERVED_FIELDS.has(field) || value === null || value === undefined) continue;
    if (!FIELD_NAME.test(field)) {
      throw invalidArgument(`workflow field ${JSON.stringify(field)} is not a field name (a letter, then letters, digits, '_' or '-')`, {
        field, workflowId: id, reason: 'not a field name',
      });
    }
    if (typeof value !== 'string') {
      throw invalidArgument(`workflow field ${field} must be a string (amounts are decimal strings), not ${typeof value}`, {
        field, workflowId: id, reason: 'not a string',
      });
    }
    checkText(value, field);
    data[field] = value;
  }
  return { id, status, revision, data: JSON.stringify(data) };
}

/**
 * Splits a WorkflowWrite's `set` into the status and revision columns and a
 * merge patch for the recorded fields (RFC 7396: a null removes the field).
 */
function workflowPatch(write) {
  if (write === null || typeof write !== 'object' || write.set === null || typeof write.set !== 'object') {
    throw invalidArgument('a workflow write must be {id, expect, set}', { reason: 'not a workflow write' });
  }
  const id = checkText(write.id, 'id');
  const { status, revision, ...fields } = write.set;
  checkText(status, 'set.status');
  if (!Number.isSafeInteger(revision) || revision < 0) {
    throw invalidArgument('set.revision must be a whole number from 0 to 2^53 - 1', { field: 'set.revision', workflowId: id, reason: 'not a safe integer' });
  }
  const patch = {};
  const removed = [];
  for (const [field, value] of Object.entries(fields)) {
    if (!FIELD_NAME.test(field)) {
      throw invalidArgument(`set.${field} is not a field name (a letter, then letters, digits, '_' or '-')`, {
        field: `set.${field}`, workflowId: id, reason: 'not a field name',
      });
    }
    if (value === null) {
      patch[field] = null;
      removed.push(field);
    } else if (typeof value === 'string') {
      patch[field] = value;
    } else {
      throw invalidArgument(`set.${field} must be a string or null`, { field: `set.${field}`, workflowId: id, reason: 'not a string' });
    }
  }
  const kept = Object.fromEntries(Object.entries(patch).filter(([, value]) => value !== null));
  const expect = write.expect ?? null;
  return { id, status, revision, expect, patch, removed, kept };
}

function invalidRecord(record, field, reason, id) {
  const which = typeof id === 'string' ? ` ${id}` : '';
  return new IdemflowError('INVALID_RECORD', `stored ${record}${which} is invalid: ${field} ${reason}`, {
    details: { record, field, reason, ...(typeof id === 'string' ? { id } : {}) },
  });
}

// Readers of stored rows. A row is read column by column, each with what it
// must hold; a value that does not fit is INVALID_RECORD naming the column,
// never a guess (a guessed revision turns into a compare-and-set that can
// never match, retried forever). Objects are rebuilt from their own keys, so
// nothing in stored JSON (a "__proto__" key) reaches a prototype.

const CANONICAL_WHOLE = /^(0|[1-9][0-9]{0,15})$/;
const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * An exact whole number from 0 to 2^53 - 1 from an integer column: a number,
 * a bigint, or the canonical decimal text some drivers hand back for BIGINT
 * (pg, mysql2 with bigNumberStrings). '', ' 3', '3e0', '0x3', 3.5 and -1 are refused.
 */
function wholeColumn(value, record, field, id, text = true) {
  let number = Number.NaN;
  if (typeof value === 'number') number = value;
  else if (typeof value === 'bigint') number = value >= 0n && value <= MAX_SAFE_BIGINT ? Number(value) : Number.NaN;
  else if (text && typeof value === 'string' && CANONICAL_WHOLE.test(value)) number = Number(value);
  if (!Number.isSafeInteger(number) || number < 0) {
    throw invalidRecord(record, field, `is not a whole number from 0 to 2^53 - 1 (${describeValue(value)})`, id);
  }
  return number === 0 ? 0 : number; // not -0
}

/** wholeColumn, or null for a NULL column. */
function optionalWholeColumn(value, record, field, id) {
  return value === null || value === undefined ? null : wholeColumn(value, record, field, id);
}

function textColumn(value, record, field, id) {
  if (typeof value !== 'string') throw invalidRecord(record, field, `is not text (${describeValue(value)})`, id);
  return value;
}

function optionalTextColumn(value, record, field, id) {
  return value === null || value === undefined ? null : textColumn(value, record, field, id);
}

/** What a refused value was, short and safe to put in a message. */
function describeValue(value) {
  if (typeof value === 'string') return value.length > 40 ? `text of ${value.length} characters` : JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return `${typeof value} ${String(value)}`;
  if (value === null || value === undefined) return String(value);
  return Array.isArray(value) ? 'an array' : typeof value;
}

/**
 * A copy of parsed JSON built from own keys only: a "__proto__" key is
 * refused (it can only have been written by hand), arrays stay arrays.
 */
function ownJson(value, record, field, id, depth = 0) {
  if (value === null || typeof value !== 'object') return value;
  if (depth > 64) throw invalidRecord(record, field, 'is nested too deeply', id);
  if (Array.isArray(value)) return value.map((item) => ownJson(item, record, field, id, depth + 1));
  const copy = {};
  for (const key of Object.keys(value)) {
    if (key === '__proto__') throw invalidRecord(record, field, 'has a "__proto__" key', id);
    copy[key] = ownJson(value[key], record, field, id, depth + 1);
  }
  return copy;
}

/** A JSON object column (text, or an object a driver already parsed), copied by own keys. */
function objectColumn(value, record, field, id) {
  let parsed = value;
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value);
    } catch {
      throw invalidRecord(record, field, 'is not JSON', id);
    }
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw invalidRecord(record, field, 'is not a JSON object', id);
  return ownJson(parsed, record, field, id);
}

/**
 * `{id, status, revision, ...data}` from a row of the workflows table. The
 * recorded fields must be what a store writes: field names holding strings.
 * `numbers`: the store holds numbers as numbers (MongoDB, memory), so a
 * revision held as text, even '3', is damage: a compare-and-set on the number
 * would never match it.
 */
function workflowFromRow(row, { numbers = false } = {}) {
  if (!row) return null;
  const id = textColumn(row.id, 'workflow', 'id');
  const revision = wholeColumn(row.revision, 'workflow', 'revision', id, !numbers);
  const workflow = { id, status: textColumn(row.status, 'workflow', 'status', id), revision };
  const data = objectColumn(row.data, 'workflow', 'data', id);
  for (const field of Object.keys(data)) {
    if (RESERVED_FIELDS.has(field)) continue;
    if (!FIELD_NAME.test(field)) throw invalidRecord('workflow', `data.${field.slice(0, 64)}`, 'is not a field name', id);
    if (typeof data[field] !== 'string') throw invalidRecord('workflow', `data.${field}`, `is not a string (${describeValue(data[field])})`, id);
    workflow[field] = data[field];
  }
  return workflow;
}

/**
 * A workflow an in-memory store holds (`{id, status, revision, ...fields}`),
 * checked like a row and copied by own keys.
 */
function workflowFromRecord(record) {
  if (record === null || record === undefined) return null;
  if (typeof record !== 'object') throw invalidRecord('workflow', '(record)', 'is not an object');
  // Null prototype: a "__proto__" key stays a key, and the data reader refuses it.
  const data = Object.create(null);
  for (const key of Object.keys(record)) if (!RESERVED_FIELDS.has(key)) data[key] = record[key];
  return workflowFromRow({ id: record.id, status: record.status, revision: record.revision, data }, { numbers: true });
}

/** A receipt an in-memory store holds (as receiptRecord names it, ruleSet nested), read like a row. */
function receiptFromRecord(record) {
  if (record === null || record === undefined) return null;
  if (typeof record !== 'object') throw invalidRecord('receipt', '(record)', 'is not an object');
  const ruleSet = record.ruleSet !== null && typeof record.ruleSet === 'object' ? record.ruleSet : null;
  // A snapshot from before receipts were stamped holds none: left out, as it was.
  const stamped = record.recordedAt !== undefined && record.recordedAt !== null;
  const receipt = receiptFromRow({
    event_id: record.eventId, fingerprint: record.fingerprint, workflow_id: record.workflowId, event_type: record.eventType,
    outcome: record.outcome, rule_set_id: ruleSet ? ruleSet.id : record.ruleSet, rule_set_version: ruleSet?.version,
    rule_set_hash: ruleSet?.hash, recorded_at: stamped ? record.recordedAt : 0,
  });
  if (!stamped) delete receipt.recordedAt;
  return receipt;
}

/** A new inbox receipt's fields, named as in MongoDB and in INBOX_COLUMNS order. */
function receiptRecord(receipt, now) {
  if (receipt === null || typeof receipt !== 'object') {
    throw invalidArgument('a receipt must be an object', { reason: 'not a receipt' });
  }
  const ruleSet = receipt.ruleSet ?? null;
  return {
    eventId: checkText(receipt.eventId, 'eventId'),
    fingerprint: checkText(receipt.fingerprint, 'fingerprint'),
    workflowId: checkText(receipt.workflowId, 'workflowId'),
    eventType: checkText(receipt.eventType, 'eventType'),
    outcome: checkText(receipt.outcome, 'outcome'),
    ruleSetId: ruleSet ? ruleSet.id : null,
    ruleSetVersion: ruleSet ? ruleSet.version : null,
    ruleSetHash: ruleSet ? ruleSet.hash : null,
    recordedAt: now,
  };
}

/** The inbox columns of a receipt, in INBOX_COLUMNS order. */
function receiptValues(receipt, now) {
  return Object.values(receiptRecord(receipt, now));
}

const INBOX_COLUMNS = ['event_id', 'fingerprint', 'workflow_id', 'event_type', 'outcome', 'rule_set_id', 'rule_set_version', 'rule_set_hash', 'recorded_at'];

function receiptFromRow(row) {
  if (!row) return null;
  const eventId = textColumn(row.event_id, 'receipt', 'event_id');
  const text = (column) => textColumn(row[column], 'receipt', column, eventId);
  const ruleSetId = optionalTextColumn(row.rule_set_id, 'receipt', 'rule_set_id', eventId);
  return {
    eventId,
    fingerprint: text('fingerprint'),
    workflowId: text('workflow_id'),
    eventType: text('event_type'),
    outcome: text('outcome'),
    ruleSet: ruleSetId === null
      ? null
      : {
        id: ruleSetId,
        version: wholeColumn(row.rule_set_version, 'receipt', 'rule_set_version', eventId),
        hash: optionalTextColumn(row.rule_set_hash, 'receipt', 'rule_set_hash', eventId),
      },
    recordedAt: wholeColumn(row.recorded_at, 'receipt', 'recorded_at', eventId),
  };
}

const OUTBOX_COLUMNS = [
  'id', 'type', 'workflow_id', 'event_id', 'payload', 'status', 'attempts', 'next_attempt_at',
  'lease_owner', 'lease_expires_at', 'fencing_token', 'last_error', 'created_at', 'updated_at',
];

/** A new outbox operation's fields, named as in MongoDB and in OUTBOX_COLUMNS order: pending, due now. */
function operationRecord(operation, now) {
  if (operation === null || typeof operation !== 'object') {
    throw invalidArgument('an outbox operation must be an object', { reason: 'not an operation' });
  }
  const payload = operation.payload ?? {};
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) {
    throw invalidArgument('operation payload must be an object', { field: 'payload', operationId: operation.id, reason: 'not an object' });
  }
  return {
    id: checkText(operation.id, 'id'),
    type: checkText(operation.type, 'type'),
    workflowId: checkText(operation.workflowId, 'workflowId'),
    eventId: checkText(operation.eventId, 'eventId'),
    payload: { ...payload },
    status: 'pending',
    attempts: 0,
    nextAttemptAt: now,
    leaseOwner: null,
    leaseExpiresAt: null,
    fencingToken: 0,
    lastError: null,
    createdAt: now,
    updatedAt: now,
  };
}

/** The outbox columns of a new operation, in OUTBOX_COLUMNS order (payload as JSON text). */
function operationValues(operation, now) {
  const record = operationRecord(operation, now);
  return Object.values({ ...record, payload: JSON.stringify(record.payload) });
}

const OPERATION_STATUSES = new Set(['pending', 'claimed', 'done', 'dead']);

function statusColumn(value, record, field, id) {
  const status = textColumn(value, record, field, id);
  if (!OPERATION_STATUSES.has(status)) throw invalidRecord(record, field, `is not pending, claimed, done or dead (${describeValue(status)})`, id);
  return status;
}

// Each field of an operation: [field, column, reader].
const OPERATION_FIELDS = [
  ['type', 'type', textColumn],
  ['workflowId', 'workflow_id', textColumn],
  ['eventId', 'event_id', textColumn],
  ['payload', 'payload', objectColumn],
  ['status', 'status', statusColumn],
  ['attempts', 'attempts', wholeColumn],
  ['nextAttemptAt', 'next_attempt_at', wholeColumn],
  ['leaseOwner', 'lease_owner', optionalTextColumn],
  ['leaseExpiresAt', 'lease_expires_at', optionalWholeColumn],
  ['fencingToken', 'fencing_token', wholeColumn],
  ['lastError', 'last_error', optionalTextColumn],
  ['createdAt', 'created_at', wholeColumn],
  ['updatedAt', 'updated_at', wholeColumn],
];

/** An operation from a row of the outbox table; INVALID_RECORD naming the first column that cannot be read. */
function operationFromRow(row) {
  if (!row) return null;
  const id = textColumn(row.id, 'operation', 'id');
  const operation = { id };
  for (const [field, column, read] of OPERATION_FIELDS) operation[field] = read(row[column], 'operation', column, id);
  return operation;
}

/** An operation an in-memory store holds (as operationRecord names it), as a row of the outbox table. */
function operationRowFromRecord(record) {
  if (record === null || record === undefined) return null;
  const row = {};
  for (const column of OUTBOX_COLUMNS) row[column] = typeof record === 'object' ? record[fieldOf(column)] : undefined;
  return row;
}

/**
 * An operation as an operator sees it (getOperation, listOperations): every
 * column that can be read, null for those that cannot, and `unreadable`
 * naming them (only when there are some). One bad row must not hide the others,
 * and a quarantined row must show in the dead list with its reason.
 */
function operationView(row) {
  if (!row) return null;
  const unreadable = [];
  const attempt = (field, column, read, id) => {
    try {
      return read(row[column], 'operation', column, id);
    } catch (error) {
      if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
      unreadable.push(field);
      return null;
    }
  };
  const id = attempt('id', 'id', textColumn);
  const operation = { id };
  for (const [field, column, read] of OPERATION_FIELDS) operation[field] = attempt(field, column, read, id ?? undefined);
  if (unreadable.length > 0) operation.unreadable = unreadable;
  return operation;
}

/**
 * The three tables and their indexes as SQLite and PostgreSQL both write them
 * (MySQL needs its own types and collations), one statement each.
 * `quote(table)` quotes a table name; `createIndex(table, suffix, columns)`
 * writes the dialect's CREATE INDEX IF NOT EXISTS.
 */
function portableSchema({ workflows, inbox, outbox }, quote, createIndex) {
  return [
    `CREATE TABLE IF NOT EXISTS ${quote(workflows)} (
      id TEXT PRIMARY KEY,
      status TEXT NOT NULL,
      revision BIGINT NOT NULL,
      data TEXT NOT NULL,
      created_at BIGINT,
      updated_at BIGINT
    )`,
    `CREATE TABLE IF NOT EXISTS ${quote(inbox)} (
      event_id TEXT PRIMARY KEY,
      fingerprint TEXT NOT NULL,
      workflow_id TEXT NOT NULL,
      event_type TEXT NOT NULL,
      outcome TEXT NOT NULL,
      rule_set_id TEXT,
      rule_set_version INTEGER,
      rule_set_hash TEXT,
      recorded_at BIGINT NOT NULL
    )`,
    createIndex(inbox, 'recorded_at_idx', 'recorded_at'),
    `CREATE TABLE IF NOT EXISTS ${quote(outbox)} (
      id TEXT PRIMARY KEY,
      type TEXT NOT NULL,
      workflow_id TEXT NOT NULL,
      event_id TEXT NOT NULL,
      payload TEXT NOT NULL,
      status TEXT NOT NULL,
      attempts INTEGER NOT NULL DEFAULT 0,
      next_attempt_at BIGINT NOT NULL,
      lease_owner TEXT NULL,
      lease_expires_at BIGINT NULL,
      fencing_token BIGINT NOT NULL DEFAULT 0,
      last_error TEXT NULL,
      created_at BIGINT NOT NULL,
      updated_at BIGINT NOT NULL
    )`,
    createIndex(outbox, 'status_next_attempt_idx', 'status, next_attempt_at'),
    createIndex(outbox, 'status_lease_expires_idx', 'status, lease_expires_at'),
    createIndex(outbox, 'status_updated_idx', 'status, updated_at'),
  ];
}

// ---- The outbox store interface (docs/outbox.md) ---------------------------
// The arguments of every outbox method are checked here, once for every
// store, and turned into requests a subclass of OutboxStoreBase carries out on
// its driver. Times come from the caller (the core computed them): a store
// compares and records them and does no clock arithmetic of its own.

const DEFAULT_LIST_LIMIT = 100;
const DEFAULT_BATCH_SIZE = 1000;
const MAX_BATCH_SIZE = 100000;

/** `args` when it is an object (with only the `known` keys, when given). */
function namedArgs(args, method, known) {
  if (args === null || typeof args !== 'object') {
    throw invalidArgument(`${method} takes an object of named arguments`, { reason: 'not an object' });
  }
  if (known !== undefined) checkOptionKeys(args, known, method);
  return args;
}

function wholeNumber(value, field, min = 0) {
  if (!Number.isSafeInteger(value) || value < min) {
    throw invalidArgument(`${field} must be a whole number from ${min} to 2^53 - 1`, { field, reason: 'not a safe integer' });
  }
  return value;
}

/** A time in ms since the epoch, from a number or a Date. */
function instant(value, field) {
  return wholeNumber(value instanceof Date ? value.getTime() : value, field);
}

/** `{ owner, now, leaseExpiresAt, limit, types }` of claimOperations; `types` null for every type. */
function claimRequest(args) {
  const { owner, now, leaseExpiresAt, limit, types = null } = namedArgs(args, 'claimOperations');
  if (types !== null && !(Array.isArray(types) && types.every((type) => typeof type === 'string'))) {
    throw invalidArgument('types must be an array of operation types', { field: 'types', reason: 'not an array of strings' });
  }
  return {
    owner: checkText(owner, 'owner'),
    now: instant(now, 'now'),
    leaseExpiresAt: instant(leaseExpiresAt, 'leaseExpiresAt'),
    limit: wholeNumber(limit, 'limit', 1),
    types: types === null ? null : [...new Set(types)],
  };
}

/**
 * One guarded write to one operation: `set` (columns to values; null clears)
 * where the row still has `id`, `status` and, for a claim's own writes,
 * `fencingToken`. `giveBackAttempt` takes one off attempts.
 */
function guardedChange(id, status, fencingToken, set, giveBackAttempt = false) {
  return { id, status, fencingToken, set, giveBackAttempt };
}

const LEASE_CLEARED = Object.freeze({ lease_owner: null, lease_expires_at: null });

/** The claim's own write: fenced on status 'claimed' and the claim's token. */
function fencedChange(args, method, changes, giveBackAttempt = false) {
  const { id, fencingToken, now } = namedArgs(args, method);
  checkText(id, 'id');
  wholeNumber(fencingToken, 'fencingToken', 1);
  instant(now, 'now');
  return guardedChange(id, 'claimed', fencingToken, { ...changes(args), updated_at: now }, giveBackAttempt);
}

function failure({ status, nextAttemptAt, lastError }) {
  if (status !== 'pending' && status !== 'dead') {
    throw invalidArgument("failOperation status must be 'pending' (retry) or 'dead'", { field: 'status', reason: 'unknown status' });
  }
  if (typeof lastError !== 'string') throw invalidArgument('lastError must be a string', { field: 'lastError', reason: 'not a string' });
  const retry = status === 'pending' ? { next_attempt_at: instant(nextAttemptAt, 'nextAttemptAt') } : {};
  return { status, ...retry, last_error: lastError, ...LEASE_CLEARED };
}

/** What each fenced method of the store interface writes (docs/outbox.md, "The store interface"). */
const FENCED = {
  renewLease: (args) => fencedChange(args, 'renewLease', ({ leaseExpiresAt }) => ({ lease_expires_at: instant(leaseExpiresAt, 'leaseExpiresAt') })),
  completeOperation: (args) => fencedChange(args, 'completeOperation', () => ({ status: 'done', ...LEASE_CLEARED })),
  failOperation: (args) => fencedChange(args, 'failOperation', failure),
  releaseOperation: (args) => fencedChange(args, 'releaseOperation', ({ now }) => ({ status: 'pending', next_attempt_at: now, ...LEASE_CLEARED }), true),
};

/** An operator's requeue: a dead operation back to pending, due now, attempts 0 (lastError kept). */
function requeueChange(operationId, options, clock) {
  const now = instant(namedArgs(options ?? {}, 'requeue', ['now']).now ?? clock(), 'now');
  return guardedChange(checkText(operationId, 'operationId'), 'dead', undefined,
    { status: 'pending', attempts: 0, next_attempt_at: now, ...LEASE_CLEARED, updated_at: now });
}

/** `{ status, limit, afterId }` of listOperations; status and afterId null when absent. */
function listRequest(args) {
  const { status = null, limit = DEFAULT_LIST_LIMIT, afterId = null } = namedArgs(args ?? {}, 'listOperations', ['status', 'limit', 'afterId']);
  if (status !== null && !OPERATION_STATUSES.has(status)) {
    throw invalidArgument('status must be pending, claimed, done or dead', { field: 'status', reason: 'unknown status' });
  }
  return { status, limit: wholeNumber(limit, 'limit', 1), afterId: afterId === null ? null : checkText(afterId, 'afterId') };
}

/** `{ olderThan, batchSize, status }` of purgeReceipts (status null) and purgeOperations (done or dead). */
function purgeRequest(args, method) {
  const { olderThan, batchSize = DEFAULT_BATCH_SIZE, status = 'done' } = namedArgs(args, method,
    method === 'purgeOperations' ? ['olderThan', 'batchSize', 'status'] : ['olderThan', 'batchSize']);
  if (!Number.isSafeInteger(batchSize) || batchSize < 1 || batchSize > MAX_BATCH_SIZE) {
    throw invalidArgument(`batchSize must be a whole number from 1 to ${MAX_BATCH_SIZE}`, { field: 'batchSize', reason: 'out of range' });
  }
  if (method === 'purgeOperations' && status !== 'done' && status !== 'dead') {
    throw invalidArgument("purgeOperations status must be 'done' or 'dead'", { field: 'status', reason: 'not a finished status' });
  }
  return { olderThan: instant(olderThan, 'olderThan'), batchSize, status: method === 'purgeOperations' ? status : null };
}

function byId(a, b) {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** The camelCase field of an outbox column (MongoDB documents and operation objects). */
function fieldOf(column) {
  return column.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
}

/**
 * The outbox store interface over a database. A subclass says how its driver
 * claims (`_claim(request)` → rows), applies a guarded change
 * (`_update(change)` → matched), lists (`_list(request)` → rows), reads one
 * row (`_row(id)` → row or null) and deletes one purge batch
 * (`_purgeBatch('receipts' | 'operations', request)` → rows deleted); the
 * checks and the semantics live here. Rows are handed back as stored, named
 * by OUTBOX_COLUMNS, and read here, so every store reads them alike.
 */
class OutboxStoreBase {
  /**
   * Claims up to `limit` due operations for `owner`, returned oldest due
   * first. A claimed row that cannot be read is quarantined instead of
   * returned (see #quarantine); `onQuarantine(report)`, when given, hears of each.
   */
  async claimOperations(args) {
    const request = claimRequest(args);
    const { onQuarantine } = args;
    if (onQuarantine !== undefined && typeof onQuarantine !== 'function') {
      throw invalidArgument('onQuarantine must be a function', { field: 'onQuarantine', reason: 'not a function' });
    }
    if (request.types !== null && request.types.length === 0) return [];
    // The claim has committed when the rows are read: an unreadable row is set
    // aside on its own, and the rest of the batch runs.
    const rows = await this._claim(request);
    const claimed = [];
    for (const row of rows) {
      let operation;
      try {
        operation = operationFromRow(row);
      } catch (error) {
        if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
        const report = await this.#quarantine(row, error, request);
        if (onQuarantine) {
          try {
            onQuarantine(report);
          } catch {
            // A listener's failure must not cost the claims that were read.
          }
        }
        continue;
      }
      claimed.push(operation);
    }
    return claimed.sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || byId(a, b));
  }

  /**
   * Marks a claimed row that cannot be read dead, its reason as last error,
   * in a statement of its own (so it holds whatever happens to the rest),
   * fenced on the token of this claim. If that write fails too, the claim is
   * left to expire and the row is tried again later.
   * `{ operationId, error, lastError, recorded, storeError? }`.
   */
  async #quarantine(row, error, request) {
    const operationId = typeof row.id === 'string' ? row.id : null;
    const lastError = `${error.code}: ${error.message}`;
    const token = row.fencing_token;
    const fenced = typeof token === 'number' || typeof token === 'bigint' || typeof token === 'string' ? token : undefined;
    const change = guardedChange(row.id, 'claimed', fenced, { status: 'dead', last_error: lastError, ...LEASE_CLEARED, updated_at: request.now });
    try {
      return { operationId, error, lastError, recorded: row.id !== null && row.id !== undefined && await this._update(change) };
    } catch (storeError) {
      return { operationId, error, lastError, recorded: false, storeError };
    }
  }

  /** The operation with this id as an operator sees it (see operationView), or null. */
  async getOperation(id) {
    return operationView(await this._row(id));
  }

  /** Extends a claim to `leaseExpiresAt`; false when the claim is no longer this token's. */
  async renewLease(args) {
    return this._update(FENCED.renewLease(args));
  }

  /** Marks the operation done; false (nothing recorded) when the token is stale. */
  async completeOperation(args) {
    return this._update(FENCED.completeOperation(args));
  }

  /** A retry (`status: 'pending'`, `nextAttemptAt`) or a dead letter; false (nothing recorded) when the token is stale. */
  async failOperation(args) {
    return this._update(FENCED.failOperation(args));
  }

  /** Gives a claim back unfinished: pending and due now, the attempt not counted. */
  async releaseOperation(args) {
    return this._update(FENCED.releaseOperation(args));
  }

  /** A dead operation back to pending, due now, attempts 0; false unless it was dead. */
  async requeue(operationId, options) {
    return this._update(requeueChange(operationId, options, () => this.now()));
  }

  /** Operations with `status` (all when absent), by id, at most `limit`, after `afterId` when given. */
  async listOperations(args) {
    return (await this._list(listRequest(args))).map(operationView);
  }

  /** Deletes receipts recorded before `olderThan`, `batchSize` per statement; `{ deleted, batches }`. */
  async purgeReceipts(args) {
    return this.#purge('receipts', purgeRequest(args, 'purgeReceipts'));
  }

  /** Deletes `done` (or `dead`) operations last updated before `olderThan`, in batches; `{ deleted, batches }`. */
  async purgeOperations(args) {
    return this.#purge('operations', purgeRequest(args, 'purgeOperations'));
  }

  async #purge(target, request) {
    let deleted = 0;
    let batches = 0;
    for (;;) {
      const removed = await this._purgeBatch(target, request);
      deleted += removed;
      if (removed > 0) batches += 1;
      if (removed < request.batchSize) return { deleted, batches };
    }
  }
}

/**
 * The outbox statements the SQL stores share, for one dialect: `numbered`
 * placeholders ($1, $2… for PostgreSQL; `?` otherwise), a `purgeLock` clause
 * for the purge's inner select, and `deleteLimit` where DELETE takes its own
 * ORDER BY … LIMIT (MySQL, which refuses LIMIT in an IN subquery).
 * statement() and the methods built on it return `{ sql, values, returnsRows }`;
 * typeFilter(), due() and claimSet() write fragments through a caller's bind.
 */
class OutboxSql {
  constructor(tables, quote, { numbered = false, purgeLock = '', deleteLimit = false } = {}) {
    this.outbox = quote(tables.outbox);
    this.inbox = quote(tables.inbox);
    this.columns = OUTBOX_COLUMNS.join(', ');
    this.dialect = { numbered, purgeLock, deleteLimit };
  }

  /**
   * `{ sql, values, returnsRows }` from `write(bind)`, where bind(value)
   * returns the value's placeholder.
   */
  statement(write, returnsRows = false) {
    const values = [];
    const bind = (value) => {
      values.push(value);
      return this.dialect.numbered ? `$${values.length}` : '?';
    };
    return { sql: write(bind), values, returnsRows };
  }

  /** `type IN (…) AND ` when the claim names its types, else nothing. */
  typeFilter(bind, { types }) {
    return types === null ? '' : `type IN (${types.map(bind).join(', ')}) AND `;
  }

  /** The core's claim condition (and the types filter), for a WHERE. */
  due(bind, request) {
    const { now } = request;
    return `${this.typeFilter(bind, request)}((status = 'pending' AND next_attempt_at <= ${bind(now)}) OR (status = 'claimed' AND lease_expires_at <= ${bind(now)}))`;
  }

  /** The SET list of a claim. */
  claimSet(bind, { owner, now, leaseExpiresAt }) {
    return `status = 'claimed', lease_owner = ${bind(owner)}, lease_expires_at = ${bind(leaseExpiresAt)}, `
      + `fencing_token = fencing_token + 1, attempts = attempts + 1, updated_at = ${bind(now)}`;
  }

  /** The guarded UPDATE of one operation; its matched row count is the answer. */
  update(change) {
    return this.statement((bind) => {
      const set = Object.entries(change.set).map(([column, value]) => `${column} = ${value === null ? 'NULL' : bind(value)}`);
      if (change.giveBackAttempt) set.push('attempts = attempts - 1');
      const where = [`id = ${bind(change.id)}`, `status = ${bind(change.status)}`];
      if (change.fencingToken !== undefined) where.push(`fencing_token = ${bind(change.fencingToken)}`);
      return `UPDATE ${this.outbox} SET ${set.join(', ')} WHERE ${where.join(' AND ')}`;
    });
  }

  list({ status, limit, afterId }) {
    return this.statement((bind) => {
      const where = [status === null ? null : `status = ${bind(status)}`, afterId === null ? null : `id > ${bind(afterId)}`].filter(Boolean);
      return `SELECT ${this.columns} FROM ${this.outbox}${where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY id LIMIT ${bind(limit)}`;
    }, true);
  }

  /** One batch of a purge: at most batchSize rows, oldest first. */
  purgeBatch(target, { olderThan, batchSize, status }) {
    return this.statement((bind) => {
      const [table, key, order, where] = target === 'receipts'
        ? [this.inbox, 'event_id', 'recorded_at', `recorded_at < ${bind(olderThan)}`]
        : [this.outbox, 'id', 'updated_at', `status = ${bind(status)} AND updated_at < ${bind(olderThan)}`];
      if (this.dialect.deleteLimit) return `DELETE FROM ${table} WHERE ${where} ORDER BY ${order} LIMIT ${bind(batchSize)}`;
      return `DELETE FROM ${table} WHERE ${key} IN (SELECT ${key} FROM ${table} WHERE ${where} ORDER BY ${order} LIMIT ${bind(batchSize)}${this.dialect.purgeLock})`;
    });
  }
}

/**
 * One transaction of a server SQL store (PostgreSQL, MySQL). `execute(sql,
 * values, onUnique)` runs a statement on the transaction's connection and
 * resolves `{ rows, count }`; `onUnique(cause)` is what a unique-key violation
 * becomes. The statements come from the store's `_sql`; a dialect that writes
 * a workflow patch its own way overrides `writeWorkflow`.
 */
class SqlTransaction {
  constructor(store, execute) {
    this._store = store;
    this._execute = execute;
  }

  _sql(name) {
    return this._store._sql[name];
  }

  async #one(name, key) {
    return (await this._execute(this._sql(name), [key])).rows[0];
  }

  async getReceipt(eventId) {
    return receiptFromRow(await this.#one('receipt', eventId));
  }

  async getWorkflow(id) {
    return workflowFromRow(await this.#one('workflow', id));
  }

  async getOperation(id) {
    return operationView(await this.#one('operation', id));
  }

  async insertReceipt(receipt) {
    const values = receiptValues(receipt, this._store.now());
    const { count } = await this._execute(this._sql('insertReceipt'), values, (e) => receiptExists(receipt, e));
    if (count === 0) throw receiptExists(receipt);
  }

  async writeWorkflow(write) {
    const change = workflowPatch(write);
    const now = this._store.now();
    if (change.expect === null) {
      const { count } = await this._execute(this._sql('insertWorkflow'),
        [change.id, change.status, change.revision, JSON.stringify(change.kept), now, now], (e) => workflowChanged(write, e));
      if (count !== 1) throw workflowChanged(write);
      return;
    }
    const { count } = await this._execute(this._sql('updateWorkflow'),
      [change.status, change.revision, JSON.stringify(change.patch), now, change.id, change.expect.status, change.expect.revision]);
    if (count !== 1) throw workflowChanged(write);
  }

  async insertOperation(operation) {
    const values = operationValues(operation, this._store.now());
    const { count } = await this._execute(this._sql('insertOperation'), values, (e) => operationExists(operation, e));
    if (count === 0) throw operationExists(operation);
  }
}

/**
 * The outbox over SQL: a subclass sets `_outboxSql` (an OutboxSql) and
 * implements `_claim(request)` and `_execute(statement)` → `{ rows, count }`,
 * count being the rows a write matched.
 */
class SqlOutboxStoreBase extends OutboxStoreBase {
  /** processEvent(this, event, options). */
  process(event, options) {
    return processEvent(this, event, options);
  }

  /** Inserts or replaces a workflow, for hosts that create workflows and for tests. */
  async putWorkflow(workflow) {
    const row = workflowColumns(workflow);
    const now = this.now();
    await this._execute({ sql: this._sql.putWorkflow, values: [row.id, row.status, row.revision, row.data, now, now] });
  }

  async getWorkflow(id) {
    return workflowFromRow(await this.#one('workflow', id));
  }

  /** The inbox receipt stored for an event id, or null. */
  async getReceipt(eventId) {
    return receiptFromRow(await this.#one('receipt', eventId));
  }

  /** @internal the outbox row with this id, or undefined */
  async _row(id) {
    return this.#one('operation', id);
  }

  async #one(statement, key) {
    return (await this._execute({ sql: this._sql[statement], values: [key], returnsRows: true })).rows[0];
  }

  async _update(change) {
    return (await this._execute(this._outboxSql.update(change))).count === 1;
  }

  async _list(request) {
    return (await this._execute(this._outboxSql.list(request))).rows;
  }

  async _purgeBatch(target, request) {
    return (await this._execute(this._outboxSql.purgeBatch(target, request))).count;
  }
}

// ---- Errors a store throws -------------------------------------------------

function receiptExists(receipt, cause) {
  return new IdemflowError('CONCURRENT_UPDATE', `a receipt for event ${receipt.eventId} was recorded concurrently`, {
    details: { eventId: receipt.eventId, workflowId: receipt.workflowId, reason: 'receipt-exists' },
    cause,
  });
}

function workflowChanged(write, cause) {
  const expect = write.expect ?? null;
  return new IdemflowError('CONCURRENT_UPDATE', expect === null
    ? `workflow ${write.id} was created concurrently`
    : `workflow ${write.id} changed since it was read`, {
    details: {
      workflowId: write.id,
      expectedStatus: expect ? expect.status : null,
      expectedRevision: expect ? expect.revision : null,
      reason: expect === null ? 'workflow-exists' : 'workflow-changed',
    },
    cause,
  });
}

function operationExists(operation, cause) {
  return new IdemflowError('OUTBOX_CONFLICT', `outbox operation ${operation.id} already exists`, {
    details: { operationId: operation.id, workflowId: operation.workflowId, eventId: operation.eventId },
    cause,
  });
}

/** The database refused to go on with this transaction (deadlock, serialisation, lock wait): run it again. */
function lostRace(cause, reason) {
  return new IdemflowError('CONCURRENT_UPDATE', `the database aborted the transaction (${reason}); it can run again`, {
    details: { reason, driverCode: driverCode(cause) },
    cause,
  });
}

/** The database cannot be reached or cannot work right now: redeliver later. */
function storeUnavailable(cause, reason) {
  const message = cause instanceof Error ? cause.message : String(cause);
  return new IdemflowError(STORE_UNAVAILABLE, `the store is unavailable (${reason}): ${message}`, {
    details: { reason, driverCode: driverCode(cause) },
    cause,
  });
}

/**
 * The store's tables (or schema, or database) do not exist: migrate() was not
 * run or the table names are wrong. No redelivery can fix that, so the
 * disposition is fatal: the worker must stop and be fixed.
 */
function schemaMissing(cause, reason) {
  const message = cause instanceof Error ? cause.message : String(cause);
  return new IdemflowError(STORE_UNAVAILABLE, `the store is misconfigured (${reason}): ${message}`, {
    disposition: 'fatal',
    details: { reason, driverCode: driverCode(cause) },
    cause,
  });
}

function driverCode(error) {
  if (error === null || typeof error !== 'object') return null;
  const code = error.code ?? error.errno ?? null;
  return code === null ? null : String(code);
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN',
  'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN', 'ENOENT', 'EACCES',
]);

/** True for a Node socket error (ECONNREFUSED and friends), whatever driver wrapped it. */
function isNetworkError(error) {
  for (let e = error, depth = 0; e && typeof e === 'object' && depth < 4; e = e.cause, depth += 1) {
    if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return true;
    if (Array.isArray(e.errors) && e.errors.some((inner) => inner && NETWORK_CODES.has(inner.code))) return true; // AggregateError from happy eyeballs
  }
  return false;
}

/**
 * Turns what a driver threw into an IdemflowError. `classify(error)` names the
 * kind: 'unique' (a unique key held), 'race' (the database aborted the
 * transaction to serialise it), 'unavailable' or null. `onUnique` says what a
 * unique violation means at this call site. Errors that are already
 * IdemflowErrors pass through.
 */
function mapDriverError(error, classify, onUnique) {
  if (error instanceof IdemflowError) return error;
  const kind = classify(error);
  if (kind && kind.type === 'unique') {
    return onUnique ? onUnique(error) : lostRace(error, 'unique-violation');
  }
  if (kind && kind.type === 'race') return lostRace(error, kind.reason);
  if (kind && kind.type === 'unavailable') return storeUnavailable(error, kind.reason);
  if (kind && kind.type === 'schema') return schemaMissing(error, kind.reason);
  // Anything else from the driver (a missing table, a permission, a full disk)
  // is not the delivery's fault: keep it for redelivery, and say what it was.
  return storeUnavailable(error, 'database-error');
}

/** ROLLBACK on a server connection; a connection that is gone rolls back by itself. */
async function rollbackQuietly(connection) {
  try {
    await connection.query('ROLLBACK');
  } catch {
    // The connection is gone; the server rolls the transaction back itself.
  }
}

// ---- Bounds and connections ------------------------------------------------
// A store call never waits forever: the server ends a statement that runs past
// statementTimeoutMs, and a timer ends the call after timeoutMs whatever the
// server does (a stopped server answers nothing, so only a client-side bound
// helps there). A connection the store holds has an 'error' listener for as
// long as it holds it: a driver emits 'error' when the server ends the
// session, and Node ends the process on an 'error' nobody listens to.

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;
const MAX_TIMER_MS = 2 ** 31 - 1;

/** `{ timeoutMs, statementTimeoutMs }` from a store's options, with their defaults. */
function resolveTimeouts(options) {
  const bounded = (field, fallback, min) => {
    const value = options[field];
    if (value === undefined) return fallback;
    if (!Number.isSafeInteger(value) || value < min || value > MAX_TIMER_MS) {
      throw invalidArgument(`options.${field} must be a whole number of milliseconds from ${min} to ${MAX_TIMER_MS}`, { field, reason: 'out of range' });
    }
    return value;
  };
  return {
    timeoutMs: bounded('timeoutMs', DEFAULT_TIMEOUT_MS, 1),
    statementTimeoutMs: bounded('statementTimeoutMs', DEFAULT_STATEMENT_TIMEOUT_MS, 0),
  };
}

/** The error of a call that ran out of time: redeliver later. */
function timedOut(operation, timeoutMs, cause) {
  return new IdemflowError(STORE_UNAVAILABLE, `the store did not finish ${operation} within ${timeoutMs} ms`, {
    details: { reason: 'timeout', driverCode: driverCode(cause), operation, timeoutMs },
    cause,
  });
}

/**
 * The time left to one store call. When it runs out, the call fails with
 * STORE_UNAVAILABLE (reason 'timeout'), the handlers given to onExpire run
 * (they discard the connection), and check() throws from then on, so the
 * abandoned work sends no further statement.
 */
class Deadline {
  #error;
  #expired = false;
  #handlers = [];
  #timer;
  #reject;

  constructor(timeoutMs, operation) {
    this.#error = timedOut(operation, timeoutMs);
    this.promise = new Promise((_, reject) => { this.#reject = reject; });
    this.promise.catch(() => {}); // raced by withDeadline; nobody else awaits it
    this.#timer = setTimeout(() => this.#expire(), timeoutMs);
  }

  get expired() {
    return this.#expired;
  }

  check() {
    if (this.#expired) throw this.#error;
  }

  /** Runs `handler(error)` when the time runs out (at once if it has). */
  onExpire(handler) {
    if (this.#expired) handler(this.#error);
    else this.#handlers.push(handler);
  }

  clear() {
    clearTimeout(this.#timer);
    this.#handlers = [];
  }

  #expire() {
    this.#expired = true;
    this.#reject(this.#error);
    for (const handler of this.#handlers) {
      try {
        handler(this.#error);
      } catch {
        // Discarding a connection is best effort; the caller has its answer.
      }
    }
    this.#handlers = [];
  }
}

/** body(deadline), settled within `timeoutMs`: a timeout error once the time is up. */
async function withDeadline(timeoutMs, operation, body) {
  const deadline = new Deadline(timeoutMs, operation);
  try {
    return await Promise.race([Promise.resolve().then(() => body(deadline)), deadline.promise]);
  } finally {
    deadline.clear();
  }
}

/**
 * An 'error' listener on a connection while a store holds it. It keeps the
 * first error (the server's reason, e.g. SQLSTATE 57P01 or a lost
 * connection) so that the failure the store reports carries it, rather than
 * the driver's "not queryable" that follows.
 */
class ConnectionWatch {
  error = null;
  #connection;
  #listener = (error) => {
    if (this.error === null) this.error = error;
  };

  constructor(connection) {
    this.#connection = connection;
    if (connection !== null && typeof connection === 'object' && typeof connection.on === 'function') connection.on('error', this.#listener);
  }

  /** Stops listening; a broken connection keeps the listener, for what it emits while it is torn down. */
  stop(broken) {
    if (!broken && typeof this.#connection.removeListener === 'function') this.#connection.removeListener('error', this.#listener);
  }
}

const watchedClients = new WeakMap();

/** One watch for the store's lifetime on a client the host hands in whole (a pg Client, a mysql2 Connection, a MongoClient). */
function watchClient(client) {
  let watch = watchedClients.get(client);
  if (watch === undefined) {
    watch = new ConnectionWatch(client);
    watchedClients.set(client, watch);
  }
  return watch;
}

/**
 * A connection seen through its deadline and its watch: every statement
 * first checks the time, and a statement that fails after the connection
 * emitted 'error' fails with that error (which the store then maps).
 * `prefix(sql)` may rewrite a statement (MariaDB's per-statement timeout).
 */
function guardedConnection(connection, deadline, watch, prefix = (sql) => sql) {
  return {
    query(sql, params) {
      deadline.check();
      if (watch.error !== null) return Promise.reject(watch.error);
      return Promise.resolve(connection.query(prefix(sql), params)).catch((error) => {
        throw watch.error ?? error;
      });
    },
  };
}

/** Runs transactions one after another on one connection, in call order. */
class Serializer {
  #tail = Promise.resolve();

  async run(fn) {
    const previous = this.#tail;
    let release;
    this.#tail = new Promise((resolve) => { release = resolve; });
    await previous;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}

module.exports = {
  DEFAULT_TABLES,
  STORE_UNAVAILABLE,
  INBOX_COLUMNS,
  OUTBOX_COLUMNS,
  resolveTables,
  portableSchema,
  resolveMaxAttempts,
  resolveClock,
  baseName,
  indexName,
  invalidArgument,
  workflowColumns,
  workflowPatch,
  workflowFromRow,
  receiptRecord,
  receiptValues,
  receiptFromRow,
  operationRecord,
  operationValues,
  operationFromRow,
  operationView,
  operationRowFromRecord,
  workflowFromRecord,
  receiptFromRecord,
  OutboxStoreBase,
  SqlOutboxStoreBase,
  SqlTransaction,
  OutboxSql,
  fieldOf,
  receiptExists,
  workflowChanged,
  operationExists,
  lostRace,
  storeUnavailable,
  isNetworkError,
  mapDriverError,
  Serializer,
  rollbackQuietly,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  resolveTimeouts,
  timedOut,
  Deadline,
  withDeadline,
  ConnectionWatch,
  watchClient,
  guardedConnection,
  isStoreUnavailable: (error) => error instanceof IdemflowError && error.code === STORE_UNAVAILABLE,
};
