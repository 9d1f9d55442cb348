'use strict';
// The errors a store throws, the same from every store: a lost race
// (CONCURRENT_UPDATE, with details.reason), an existing operation id, an
// unreachable or misconfigured database, a call that ran out of time. A
// driver's error becomes one of them through mapDriverError and the
// adapter's classify() table.

const { IdemflowError } = require('../core/errors.cjs');

/** The code a store throws when the database cannot be reached; the delivery should be retried. */
const STORE_UNAVAILABLE = 'STORE_UNAVAILABLE';
/** The code a store throws when the database refuses a write for its size. */
const WRITE_TOO_LARGE = 'WRITE_TOO_LARGE';

function invalidArgument(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { details });
}

function receiptExists(receipt, cause) {
  return new IdemflowError('CONCURRENT_UPDATE', `a receipt for event ${receipt.eventId} was recorded concurrently`, {
    details: { eventId: receipt.eventId, workflowId: receipt.workflowId, reason: 'receipt-exists' },
    cause,
  });
}

function workflowChanged(write, cause) {
  const expect = write.expect ?? null;
  return new IdemflowError(
    'CONCURRENT_UPDATE',
    expect === null ? `workflow ${write.id} was created concurrently` : `workflow ${write.id} changed since it was read`,
    {
      details: {
        workflowId: write.id,
        expectedStatus: expect ? expect.status : null,
        expectedRevision: expect ? expect.revision : null,
        reason: expect === null ? 'workflow-exists' : 'workflow-changed',
      },
      cause,
    },
  );
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
 * The database refused a write for its size: a value longer than its column,
 * a row, index entry or document over the database's limit. Redelivery
 * writes the same again, so it is not retried (reconcile); nothing of the
 * transaction was written. In a batch it is the event's own error.
 */
function writeTooLarge(cause, reason) {
  const message = cause instanceof Error ? cause.message : String(cause);
  return new IdemflowError(WRITE_TOO_LARGE, `the database refused a write for its size (${reason}): ${message}`, {
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
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'ENOENT',
  'EACCES',
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
 * transaction to serialise it), 'too-large' (a value, row or document over
 * the database's limit), 'unavailable' or null. `onUnique` says what a
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
  if (kind && kind.type === 'too-large') return writeTooLarge(error, kind.reason);
  if (kind && kind.type === 'unavailable') return storeUnavailable(error, kind.reason);
  if (kind && kind.type === 'schema') return schemaMissing(error, kind.reason);
  // Anything else from the driver (a missing table, a permission, a full disk)
  // is not the delivery's fault: keep it for redelivery, and say what it was.
  return storeUnavailable(error, 'database-error');
}

/** The error of a call that ran out of time: redeliver later. */
function timedOut(operation, timeoutMs, cause) {
  return new IdemflowError(STORE_UNAVAILABLE, `the store did not finish ${operation} within ${timeoutMs} ms`, {
    details: { reason: 'timeout', driverCode: driverCode(cause), operation, timeoutMs },
    cause,
  });
}

/** The call a transaction belongs to ran out of time before the transaction began: nothing was sent to the store. */
function callExpired(operation) {
  return new IdemflowError(STORE_UNAVAILABLE, `the call's time ran out before its ${operation} began`, {
    details: { reason: 'timeout', operation },
  });
}

function isStoreUnavailable(error) {
  return error instanceof IdemflowError && error.code === STORE_UNAVAILABLE;
}

module.exports = {
  STORE_UNAVAILABLE,
  invalidArgument,
  receiptExists,
  workflowChanged,
  operationExists,
  lostRace,
  storeUnavailable,
  schemaMissing,
  isNetworkError,
  mapDriverError,
  timedOut,
  callExpired,
  isStoreUnavailable,
};
