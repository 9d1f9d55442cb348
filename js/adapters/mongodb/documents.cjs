// @ts-check
'use strict';
// MongoDB's documents and errors, as the store reads and writes them: a
// driver error classified, a record as its document and back, the filter of
// listOperations.

const { mapDriverError, isNetworkError } = require('../../store/errors.cjs');

/**
 * @typedef {import('mongodb').MongoClient} MongoClient
 * @typedef {import('mongodb').Db} Db
 * @typedef {import('mongodb').ClientSession} ClientSession
 *  * @typedef {{ _id: string, status: string, revision: number, data: Record<string, string>, createdAt: number, updatedAt: number }} WorkflowDocument
 * @typedef {{ _id: string, fingerprint: string, workflowId: string, eventType: string, outcome: string,
 *   ruleSetId: string | null, ruleSetVersion: number | null, ruleSetHash: string | null, recordedAt: number,
 *   result?: { operationIds: string[], status: string | null, revision: number | null } | null }} ReceiptDocument
 * @typedef {{ _id: string, type: string, workflowId: string, eventId: string, payload: Record<string, unknown>, status: string,
 *   attempts: number, nextAttemptAt: number, leaseOwner: string | null, leaseExpiresAt: number | null, fencingToken: number,
 *   lastError: string | null, createdAt: number, updatedAt: number, metadata?: Record<string, unknown> | null,
 *   traceContext?: string | null }} OperationDocument
 */

const NAMESPACE_EXISTS = 48;
const DUPLICATE_KEY = 11000;
const WRITE_CONFLICT = 112;
// A write over a size limit: BSONObjectTooLarge (10334), a document grown past 16 MiB by an update
// (17419, 17420), an index key over 1024 bytes (KeyTooLong, 17280, before 4.2). The same write fails every time.
const TOO_LARGE_CODES = new Set([10334, 17419, 17420, 17280]);
const UNAVAILABLE_NAMES = new Set([
  'MongoNetworkError',
  'MongoNetworkTimeoutError',
  'MongoServerSelectionError',
  'MongoNotConnectedError',
  'MongoTopologyClosedError',
  'MongoPoolClosedError',
  'MongoWaitQueueTimeoutError',
  'PoolClearedError',
  'PoolClosedError',
]);

/**
 * What kind of failure a driver error is.
 * @param {any} error
 * @returns {{ type: string, reason?: string } | null}
 */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  if (error.code === DUPLICATE_KEY) return { type: 'unique' };
  if (TOO_LARGE_CODES.has(error.code) || error.codeName === 'BSONObjectTooLarge')
    return { type: 'too-large', reason: 'document-too-large' };
  const labelled = (/** @type {string} */ label) => typeof error.hasErrorLabel === 'function' && error.hasErrorLabel(label);
  if (UNAVAILABLE_NAMES.has(error.name) || isNetworkError(error)) {
    return { type: 'unavailable', reason: error.name === 'MongoServerSelectionError' ? 'no-server-selectable' : 'connection-lost' };
  }
  if (error.code === WRITE_CONFLICT || labelled('TransientTransactionError')) return { type: 'race', reason: 'write-conflict' };
  if (labelled('UnknownTransactionCommitResult') || labelled('RetryableWriteError'))
    return { type: 'unavailable', reason: 'commit-unknown' };
  return null;
}

/**
 * @param {unknown} error
 * @param {(error: unknown) => Error} [onUnique]
 */
function mapError(error, onUnique) {
  return mapDriverError(error, classify, onUnique);
}

/**
 * Runs one driver call and maps what it throws. With a deadline, a call that
 * would start after the time ran out fails at once (the caller has given up).
 * @template T
 * @param {() => Promise<T>} call
 * @param {(error: unknown) => Error} [onUnique]
 * @param {{ check(): void }} [deadline]
 * @returns {Promise<T>}
 */
async function run(call, onUnique, deadline) {
  deadline?.check();
  try {
    return await call();
  } catch (error) {
    throw mapError(error, onUnique);
  }
}

// Documents as the records of store/records.cjs: the key is `_id`, the rest
// has the records' own field names.

/**
 * @param {WorkflowDocument | null} doc
 * @returns {{ id: unknown, status: unknown, revision: unknown, data: unknown } | null}
 */
function workflowRecord(doc) {
  return doc ? { id: doc._id, status: doc.status, revision: doc.revision, data: doc.data ?? {} } : null;
}

/**
 * @param {ReceiptDocument | null} doc
 * @returns {Record<string, unknown> | null}
 */
function receiptRecord(doc) {
  if (!doc) return null;
  const { _id, ...fields } = doc;
  return { eventId: _id, ...fields };
}

/**
 * @param {OperationDocument | null} doc
 * @returns {Record<string, unknown> | null}
 */
function operationRecord(doc) {
  if (!doc) return null;
  const { _id, ...fields } = doc;
  return { id: _id, ...fields, payload: doc.payload ?? {} };
}

/**
 * An insert that reports a key that exists as false.
 * @param {() => Promise<unknown>} insert
 * @returns {Promise<boolean>}
 */
async function inserted(insert) {
  try {
    await insert();
    return true;
  } catch (error) {
    if (error === KEY_EXISTS) return false;
    throw error;
  }
}
const KEY_EXISTS = new Error('key exists');

/** @type {{ workflows: (doc: any) => any, inbox: (doc: any) => any, outbox: (doc: any) => any }} */
const RECORD_OF = { workflows: workflowRecord, inbox: receiptRecord, outbox: operationRecord };
/** The operation a read outside a transaction is named by when it times out. */
const READ_CALL = { workflows: 'getWorkflow', inbox: 'getReceipt', outbox: 'getOperation' };

/**
 * A record as a document: its key as `_id`.
 * @param {'workflows' | 'inbox' | 'outbox'} table
 * @param {any} record
 */
function documentOf(table, record) {
  const { [table === 'inbox' ? 'eventId' : 'id']: key, ...fields } = record;
  return { _id: key, ...fields };
}
const keyExists = () => KEY_EXISTS;

/**
 * A listOperations request (store/queries.cjs) as a MongoDB filter.
 * @param {import('../../store/queries.cjs').ListRequest} request
 * @returns {import('mongodb').Filter<OperationDocument>}
 */
function operationFilter(request) {
  /** @type {Record<string, unknown>} */
  const filter = {};
  if (request.status !== null) filter.status = request.status;
  if (request.type !== null) filter.type = request.type;
  if (request.workflowId !== null) filter.workflowId = request.workflowId;
  if (request.leaseOwner !== null) filter.leaseOwner = request.leaseOwner;
  if (request.createdBefore !== null || request.createdFrom !== null) {
    filter.createdAt = {
      ...(request.createdBefore === null ? {} : { $lt: request.createdBefore }),
      ...(request.createdFrom === null ? {} : { $gte: request.createdFrom }),
    };
  }
  if (request.errorContains !== null)
    filter.lastError = { $regex: new RegExp(request.errorContains.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i') };
  if (request.afterId !== null) filter._id = { $gt: request.afterId };
  return /** @type {import('mongodb').Filter<OperationDocument>} */ (filter);
}

module.exports = {
  NAMESPACE_EXISTS,
  DUPLICATE_KEY,
  mapError,
  run,
  operationRecord,
  inserted,
  RECORD_OF,
  READ_CALL,
  documentOf,
  keyExists,
  operationFilter,
};
