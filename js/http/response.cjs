'use strict';
// Answers written by the HTTP layer: a refusal as RFC 9457 problem details
// the client can act on (a `reason`, and an IdemflowError's code and
// disposition; never a stack), and a prepared answer written to a Node
// response.

const { STATUS_CODES } = require('node:http');
const { IdemflowError } = require('../core/errors.cjs');

const PROBLEM_TYPE = 'application/problem+json';

/**
 * `{ status, headers, body }` of a problem: `type` about:blank (the status
 * says what kind), `title` the status's phrase, `detail` what happened, and
 * the members a client branches on: `reason` always, `code` and
 * `disposition` for an IdemflowError, anything in `extra`.
 */
function problem(status, reason, detail, { error = null, extra = {}, headers = {} } = {}) {
  const body = {
    type: 'about:blank',
    title: STATUS_CODES[status] ?? 'Error',
    status,
    detail,
    reason,
    ...(error === null ? {} : { code: error.code, disposition: error.disposition }),
    ...extra,
  };
  return { status, headers: { 'content-type': PROBLEM_TYPE, ...headers }, body: Buffer.from(JSON.stringify(body)) };
}

/** The problem of an IdemflowError: its message as the detail, `reason` from its details when it has one. */
function problemOfError(status, error, { reason, extra, headers } = {}) {
  const given =
    reason ?? (typeof error.details?.reason === 'string' ? error.details.reason : error.code.toLowerCase().replaceAll('_', '-'));
  return problem(status, given, error.message, { error, extra, headers });
}

/** The problem of the layer's own refusal (raw-body.cjs HttpRefusal: a body too large, unreadable, not JSON). */
function problemOfRefusal(refusal) {
  return problem(refusal.status, refusal.reason, refusal.message, { headers: refusal.headers });
}

/**
 * The error a handler meets when it answers past the held response (Fastify
 * reply.hijack() or reply.raw, Express res.socket): it would reach the client
 * before its writes commit. Thrown, it rolls them back and frees the key.
 */
function responseBypassed(field, through) {
  return new IdemflowError(
    'INVALID_ARGUMENT',
    `under Idempotency-Key the answer goes through ${through}: ${field} would reach the client before its writes commit`,
    { disposition: 'fatal', details: { field, reason: 'response-bypassed' } },
  );
}

/** Writes `{ status, headers, body }` to a Node ServerResponse (unless it was written already). */
function sendNode(res, { status, headers, body }) {
  if (res.headersSent) {
    if (!res.writableEnded) res.end();
    return;
  }
  res.statusCode = status;
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.end(body);
}

module.exports = { problem, problemOfError, problemOfRefusal, responseBypassed, sendNode };
