'use strict';
// What every durable store shares: table names, the row shapes of the three
// tables, checks on what a host hands in, and the errors a store throws. The
// per-database files only say how to talk to their driver.

const { createHash } = require('node:crypto');
const { IdemflowError } = require('./errors.cjs');

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

function invalidRecord(record, field, reason) {
  return new IdemflowError('INVALID_RECORD', `stored ${record} is invalid: ${field} ${reason}`, { details: { record, field, reason } });
}

/** A number from a BIGINT column (drivers hand back numbers, strings or bigints). */
function integerColumn(value, record, field) {
  if (value === null || value === undefined) return null;
  const number = Number(value);
  if (!Number.isSafeInteger(number)) throw invalidRecord(record, field, 'is not a whole number below 2^53');
  return number;
}

function parseObject(text, record, field) {
  if (text !== null && typeof text === 'object') return text; // a driver that already parsed JSON
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw invalidRecord(record, field, 'is not JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalidRecord(record, field, 'is not a JSON object');
  return value;
}

/** `{id, status, revision, ...data}` from a row of the workflows table. */
function workflowFromRow(row) {
  if (!row) return null;
  const workflow = { id: row.id, status: row.status, revision: integerColumn(row.revision, 'workflow', 'revision') };
  for (const [field, value] of Object.entries(parseObject(row.data, 'workflow', 'data'))) {
    if (!RESERVED_FIELDS.has(field)) workflow[field] = value;
  }
  return workflow;
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
  return {
    eventId: row.event_id,
    fingerprint: row.fingerprint,
    workflowId: row.workflow_id,
    eventType: row.event_type,
    outcome: row.outcome,
    ruleSet: row.rule_set_id === null || row.rule_set_id === undefined
      ? null
      : { id: row.rule_set_id, version: integerColumn(row.rule_set_version, 'receipt', 'rule_set_version'), hash: row.rule_set_hash },
    recordedAt: integerColumn(row.recorded_at, 'receipt', 'recorded_at'),
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

function operationFromRow(row) {
  if (!row) return null;
  return {
    id: row.id,
    type: row.type,
    workflowId: row.workflow_id,
    eventId: row.event_id,
    payload: parseObject(row.payload, 'operation', 'payload'),
    status: row.status,
    attempts: integerColumn(row.attempts, 'operation', 'attempts'),
    nextAttemptAt: integerColumn(row.next_attempt_at, 'operation', 'next_attempt_at'),
    leaseOwner: row.lease_owner ?? null,
    leaseExpiresAt: integerColumn(row.lease_expires_at, 'operation', 'lease_expires_at'),
    fencingToken: integerColumn(row.fencing_token, 'operation', 'fencing_token'),
    lastError: row.last_error ?? null,
    createdAt: integerColumn(row.created_at, 'operation', 'created_at'),
    updatedAt: integerColumn(row.updated_at, 'operation', 'updated_at'),
  };
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
  // Anything else from the driver (a missing table, a permission, a full disk)
  // is not the delivery's fault: keep it for redelivery, and say what it was.
  return storeUnavailable(error, 'database-error');
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
  receiptExists,
  workflowChanged,
  operationExists,
  lostRace,
  storeUnavailable,
  isNetworkError,
  mapDriverError,
  Serializer,
  isStoreUnavailable: (error) => error instanceof IdemflowError && error.code === STORE_UNAVAILABLE,
};
