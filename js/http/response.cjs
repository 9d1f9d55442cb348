'use strict';
// Answers written by the HTTP layer: an error as JSON the client can act on
// (its code and disposition, never a stack), and a prepared answer written
// to a Node response.

/** `{ error: { code, disposition, message, ...extra } }` of an IdemflowError. */
function errorBody(error, extra = {}) {
  return { error: { code: error.code, disposition: error.disposition, message: error.message, ...extra } };
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

module.exports = { errorBody, sendNode };
