'use strict';
// How the in-memory store holds its rows (workflows flat, receipts with their
// rule set nested, as a snapshot shows them) and reads them as the durable
// stores read theirs; and a row written through a transaction's draft view,
// checked as it is set.

const { IdemflowError } = require('../../core/errors.cjs');
const { isClaimable } = require('../../core/policy.cjs');
const { invalidArgument } = require('../../store/errors.cjs');
const { fieldOfName, operationView, receiptFromStore, workflowFromStore } = require('../../store/records.cjs');

function copy(value) {
  return value === undefined ? null : structuredClone(value);
}

// The store holds workflows flat ({id, status, revision, ...fields}) and
// receipts with their rule set nested, as a snapshot shows them; these turn
// them into the records of store/records.cjs and back.

/** A held workflow as a record {id, status, revision, data}. */
function workflowRecord(held) {
  if (held === null || held === undefined) return null;
  if (typeof held !== 'object') return { id: undefined, status: undefined, revision: undefined, data: held };
  // Null prototype: a "__proto__" key stays a key, and the data reader refuses it.
  const data = Object.create(null);
  for (const key of Object.keys(held)) if (key !== 'id' && key !== 'status' && key !== 'revision') data[key] = held[key];
  return { id: held.id, status: held.status, revision: held.revision, data };
}

/** A held receipt as a record: its rule set flat. */
function receiptRecord(held) {
  if (held === null || held === undefined) return null;
  if (typeof held !== 'object') return { eventId: undefined };
  const ruleSet = held.ruleSet !== null && typeof held.ruleSet === 'object' ? held.ruleSet : null;
  return {
    eventId: held.eventId,
    fingerprint: held.fingerprint,
    workflowId: held.workflowId,
    eventType: held.eventType,
    outcome: held.outcome,
    ruleSetId: ruleSet ? ruleSet.id : held.ruleSet,
    ruleSetVersion: ruleSet?.version,
    ruleSetHash: ruleSet?.hash,
    recordedAt: held.recordedAt,
    result: held.result,
  };
}

/** A receipt as the store holds it: the record's rule set nested. */
function heldReceipt({ ruleSetId, ruleSetVersion, ruleSetHash, ...fields }) {
  return { ...fields, ruleSet: ruleSetId === null ? null : { id: ruleSetId, version: ruleSetVersion, hash: ruleSetHash } };
}

/** A held workflow read like a durable store's row. */
function readWorkflow(held) {
  return workflowFromStore(workflowRecord(held), { numbers: true });
}

/** A receipt record read like a durable store's row; a snapshot's receipt from before receipts were stamped stays unstamped. */
function readReceiptRecord(record) {
  if (record === null) return null;
  const unstamped = record.recordedAt === undefined || record.recordedAt === null;
  const receipt = receiptFromStore(unstamped ? { ...record, recordedAt: 0 } : record);
  if (unstamped) delete receipt.recordedAt;
  return receipt;
}

function readReceipt(held) {
  return readReceiptRecord(receiptRecord(held));
}

/** A held operation (or anything held under an operation id), as a record. */
function operationRecord(held) {
  if (held === null || held === undefined) return null;
  return typeof held === 'object' ? { ...held } : { id: undefined };
}

/** Each table's held form as a record, and a record as the store holds it. */
const RECORD_OF = { workflows: workflowRecord, inbox: receiptRecord, outbox: operationRecord };
const HELD_OF = {
  workflows: ({ id, status, revision, data }) => ({ id, status, revision, ...data }),
  inbox: heldReceipt,
  outbox: (record) => record,
};

/**
 * The core's claim condition; a held operation whose status or times cannot
 * be read is not due (as a SQL comparison with a malformed value is false),
 * so it cannot stop the others being claimed.
 */
function claimable(operation, now) {
  try {
    return isClaimable(operation, now);
  } catch (error) {
    if (error instanceof IdemflowError && error.code === 'INVALID_RECORD') return false;
    throw error;
  }
}

function byId(a, b) {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

// A key the transaction deleted through its draft view: reads see nothing,
// and commit removes the row.
const DELETED = Symbol('deleted');

const RECORD_KEYS = { workflows: 'id', inbox: 'eventId', outbox: 'id' };

/**
 * A row written through the draft view, checked now by the same reader the
 * store uses to read it back, so a row the handle's methods or the outbox
 * consumer could not read is refused at set() and never committed.
 * Bookkeeping fields the handle's own insert methods stamp (recordedAt; an
 * operation's status, attempts, times, lease and fencing token) are filled
 * as those methods fill them when left out; what the row means is not guessed.
 */
function draftRecord(table, key, value, now) {
  if (typeof key !== 'string' || key.length === 0) {
    throw invalidArgument(`draft ${table} keys are non-empty strings`, { table, reason: 'key not a non-empty string' });
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalidArgument(`draft ${table} row ${key} must be an object`, { table, key, reason: 'not an object' });
  }
  let record;
  try {
    record = structuredClone(value);
  } catch (cause) {
    throw new IdemflowError('INVALID_ARGUMENT', `draft ${table} row ${key} cannot be copied: ${cause.message}`, {
      details: { table, key, reason: 'not cloneable' },
      cause,
    });
  }
  const keyField = RECORD_KEYS[table];
  if (record[keyField] === undefined) record[keyField] = key;
  if (record[keyField] !== key) {
    throw invalidArgument(`draft ${table} row stored under ${key} has ${keyField} ${JSON.stringify(record[keyField])}`, {
      table,
      key,
      field: keyField,
      reason: 'key mismatch',
    });
  }
  try {
    if (table === 'workflows') {
      readWorkflow(record);
    } else if (table === 'inbox') {
      record.recordedAt ??= now;
      readReceipt(record);
    } else {
      const defaults = {
        payload: {},
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
      for (const [field, fill] of Object.entries(defaults)) if (record[field] === undefined) record[field] = fill;
      const view = operationView(operationRecord(record));
      if (view.unreadable) {
        throw new IdemflowError('INVALID_RECORD', `${view.unreadable.join(', ')} cannot be read`, {
          details: { field: view.unreadable[0], reason: 'unreadable' },
        });
      }
    }
  } catch (error) {
    if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
    // The readers name stored names (event_id); the draft's rows have fields (eventId).
    const field = typeof error.details.field === 'string' ? fieldOfName(error.details.field) : undefined;
    throw new IdemflowError('INVALID_ARGUMENT', `draft ${table} row ${key} is not a row the store can read: ${error.message}`, {
      details: { table, key, field, reason: error.details.reason },
      cause: error,
    });
  }
  return record;
}

module.exports = { copy, readReceiptRecord, operationRecord, RECORD_OF, HELD_OF, claimable, byId, DELETED, draftRecord };
