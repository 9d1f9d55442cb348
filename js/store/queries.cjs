'use strict';
// The operator's questions to the outbox (listOperations, requeueOperations,
// stats, releaseOwner), checked and turned into requests every store carries
// out its own way. A filter's fields combine with AND; a key a method does not
// know is INVALID_ARGUMENT, never ignored (a filter silently dropped answers a
// different question). `operationMatches` is the filter as a predicate, for
// the stores that hold their records in process.

const { checkOptionKeys, wholeNumber } = require('../core/options.cjs');
const { invalidArgument } = require('./errors.cjs');
const { OPERATION_STATUSES, checkText } = require('./records.cjs');

const DEFAULT_LIST_LIMIT = 100;
/** The rows one page of a bulk operator command (requeue, release) reads. */
const PAGE_SIZE = 500;
const STATUSES = Object.freeze(['pending', 'claimed', 'done', 'dead']);

/** The filter keys of listOperations (and of requeueOperations, which also takes `limit`). */
const FILTER_KEYS = Object.freeze(['status', 'type', 'workflowId', 'owner', 'olderThan', 'newerThan', 'errorContains']);
const LIST_KEYS = Object.freeze([...FILTER_KEYS, 'limit', 'afterId']);

function namedArgs(args, method, known) {
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw invalidArgument(`${method} takes an object of named arguments`, { reason: 'not an object' });
  }
  checkOptionKeys(args, known, method);
  return args;
}

/** A time in ms since the epoch, from a number or a Date. */
function instant(value, field) {
  return wholeNumber(value instanceof Date ? value.getTime() : value, field);
}

function optionalText(value, field) {
  return value === undefined || value === null ? null : checkText(value, field);
}

function checkStatus(status) {
  if (status !== null && !OPERATION_STATUSES.has(status)) {
    throw invalidArgument('status must be pending, claimed, done or dead', { field: 'status', reason: 'unknown status' });
  }
  return status;
}

/**
 * The filter part of a request: `{ status, type, workflowId, leaseOwner,
 * createdBefore, createdFrom, errorContains }`, null for each field absent.
 * `olderThan`: created before it; `newerThan`: created at or after it (so the
 * two split time without a gap). `errorContains` matches the last error
 * case-insensitively (on SQLite, ASCII letters only); it is kept lower-cased.
 */
function filterOf(args) {
  const { status = null, type, workflowId, owner, olderThan, newerThan, errorContains } = args;
  return {
    status: checkStatus(status),
    type: optionalText(type, 'type'),
    workflowId: optionalText(workflowId, 'workflowId'),
    leaseOwner: optionalText(owner, 'owner'),
    createdBefore: olderThan === undefined || olderThan === null ? null : instant(olderThan, 'olderThan'),
    createdFrom: newerThan === undefined || newerThan === null ? null : instant(newerThan, 'newerThan'),
    errorContains: errorContains === undefined || errorContains === null ? null : checkText(errorContains, 'errorContains').toLowerCase(),
  };
}

/**
 * @typedef {{ status: string | null, type: string | null, workflowId: string | null, leaseOwner: string | null,
 *   createdBefore: number | null, createdFrom: number | null, errorContains: string | null, limit: number, afterId: string | null }} ListRequest
 */

/** The request of listOperations: the filter, `limit` (default 100) and `afterId` (the cursor, null when absent). */
function listRequest(args) {
  const named = namedArgs(args ?? {}, 'listOperations', LIST_KEYS);
  const { limit = DEFAULT_LIST_LIMIT, afterId = null } = named;
  return { ...filterOf(named), limit: wholeNumber(limit, 'limit', 1), afterId: afterId === null ? null : checkText(afterId, 'afterId') };
}

/**
 * The request of requeueOperations: `{ ids, now }`, or `{ filter, limit, now }`
 * where the filter must say `status: 'dead'` (only a dead operation is
 * requeued, and a filter that says so cannot be mistaken for "everything").
 */
function requeueRequest(args, clock) {
  const named = namedArgs(args, 'requeueOperations', ['ids', 'now', 'limit', ...FILTER_KEYS]);
  const now = instant(named.now ?? clock(), 'now');
  if (named.ids !== undefined) {
    const { ids, now: _now, ...rest } = named;
    if (Object.keys(rest).length > 0) {
      throw invalidArgument('requeueOperations takes either ids or a filter, not both', {
        field: Object.keys(rest)[0],
        reason: 'ids and a filter',
      });
    }
    if (!Array.isArray(ids) || ids.length === 0) {
      throw invalidArgument('ids must be a non-empty array of operation ids', { field: 'ids', reason: 'not an array of ids' });
    }
    return { ids: [...new Set(ids.map((id) => checkText(id, 'ids[]')))], now };
  }
  if (named.status !== 'dead') {
    throw invalidArgument("requeueOperations takes ids, or a filter with status: 'dead'", { field: 'status', reason: 'not dead' });
  }
  const limit = named.limit === undefined ? null : wholeNumber(named.limit, 'limit', 1);
  return { filter: filterOf(named), limit, now };
}

/** `{ now }` of stats and releaseOwner: the store's clock when absent. */
function nowRequest(args, method, clock) {
  const { now } = namedArgs(args ?? {}, method, ['now']);
  return { now: instant(now ?? clock(), 'now') };
}

/** True when an operation record (as a store holds it in process) passes the filter part of a request. */
function operationMatches(request, op) {
  return (
    (request.status === null || op.status === request.status) &&
    (request.type === null || op.type === request.type) &&
    (request.workflowId === null || op.workflowId === request.workflowId) &&
    (request.leaseOwner === null || op.leaseOwner === request.leaseOwner) &&
    (request.createdBefore === null || op.createdAt < request.createdBefore) &&
    (request.createdFrom === null || op.createdAt >= request.createdFrom) &&
    (request.errorContains === null || (typeof op.lastError === 'string' && op.lastError.toLowerCase().includes(request.errorContains))) &&
    (request.afterId === undefined || request.afterId === null || op.id > request.afterId)
  );
}

function emptyCounts() {
  return { pending: 0, claimed: 0, done: 0, dead: 0 };
}

/**
 * stats()'s answer from a store's aggregate rows `[{ type, status, count }]`
 * and the time the oldest due operation became due (null when none is).
 */
function statsOf(rows, oldestDueAt, now) {
  const byStatus = emptyCounts();
  const byType = new Map();
  for (const { type, status, count } of rows) {
    const n = Number(count);
    if (!STATUSES.includes(status) || !Number.isSafeInteger(n)) continue; // an unreadable row: getOperation shows it
    byStatus[status] += n;
    if (!byType.has(type)) byType.set(type, emptyCounts());
    byType.get(type)[status] += n;
  }
  const due = oldestDueAt === null || oldestDueAt === undefined ? null : Number(oldestDueAt);
  return {
    byStatus,
    byType: Object.fromEntries([...byType].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
    oldestDueAgeMs: due === null || !Number.isFinite(due) ? null : Math.max(0, now - due),
  };
}

module.exports = { PAGE_SIZE, listRequest, requeueRequest, nowRequest, operationMatches, statsOf };
