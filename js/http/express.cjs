'use strict';
// idemflow/express: the Idempotency-Key middleware for Express (and any
// connect-style stack over Node's own request and response: node:http, see
// docs/http.md). The response is held until the keyed transaction commits,
// so the client never sees an answer whose writes rolled back.

const { createIdempotency, isJson } = require('./idempotency.cjs');
const { HttpRefusal, readRawBody } = require('./raw-body.cjs');
const { problemOfRefusal, responseBypassed, sendNode } = require('./response.cjs');

/**
 * A body parser's `verify` option that keeps the bytes the client sent:
 * `express.json({ verify: rawBody })` when the parser runs before the
 * middleware (the fingerprint then covers those bytes, not the parsed object).
 */
function rawBody(req, _res, buffer) {
  req.rawBody = buffer;
}

/**
 * The body's bytes: what a parser kept (`rawBody`), or the stream, read here
 * (then `req.body` is what express.json() would have made of it, or the
 * Buffer for another type, and later parsers skip the request).
 */
async function bodyOf(req, maxBytes) {
  if (req.rawBody instanceof Uint8Array) return Buffer.from(req.rawBody);
  const bytes = await readRawBody(req, maxBytes);
  if (req.body === undefined || (typeof req.body === 'object' && !(req.body instanceof Uint8Array) && Object.keys(req.body).length === 0)) {
    req.body = bytes;
    if (isJson(req.headers['content-type']) && bytes.length > 0) {
      try {
        req.body = JSON.parse(bytes.toString('utf8'));
      } catch {
        throw new HttpRefusal(400, 'invalid-json', 'the body is not JSON');
      }
    }
    // body-parser's own mark: a parser after this one leaves the body alone.
    req._body = true; // eslint-disable-line no-underscore-dangle
  }
  req.rawBody = bytes;
  return bytes;
}

function toBuffer(chunk, encoding) {
  if (chunk === undefined || chunk === null) return Buffer.alloc(0);
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return Buffer.from(String(chunk), typeof encoding === 'string' ? encoding : 'utf8');
}

/**
 * Holds what the handler writes on `res` until `finish(response)` says what
 * to send: nothing reaches the socket before the keyed transaction has
 * committed (or rolled back).
 */
function holdResponse(res, finish) {
  const original = { write: res.write, end: res.end, writeHead: res.writeHead, flushHeaders: res.flushHeaders };
  const chunks = [];
  // Bytes written to the socket itself would reach the client before the commit: refused while held.
  const { socket } = res;
  const socketOriginal = socket ? { write: socket.write, end: socket.end } : null;
  if (socket) {
    const refuse = () => {
      throw responseBypassed('res.socket', 'res (res.end, res.json)');
    };
    socket.write = refuse;
    // Node ends the socket itself when the client goes away: an end without bytes is no answer.
    socket.end = function end(data, ...rest) {
      if (data !== undefined && data !== null && typeof data !== 'function' && data.length > 0) refuse();
      return socketOriginal.end.call(socket, data, ...rest);
    };
  }
  const restore = () => {
    Object.assign(res, original);
    if (socket) Object.assign(socket, socketOriginal);
  };
  res.writeHead = function writeHead(status, reason, headers) {
    const fields = typeof reason === 'string' ? headers : reason;
    res.statusCode = status;
    if (typeof reason === 'string') res.statusMessage = reason;
    if (Array.isArray(fields)) {
      for (let i = 0; i + 1 < fields.length; i += 2) res.setHeader(fields[i], fields[i + 1]);
    } else if (fields) {
      for (const [name, value] of Object.entries(fields)) res.setHeader(name, value);
    }
    return res;
  };
  res.flushHeaders = () => {};
  res.write = function write(chunk, encoding, callback) {
    chunks.push(toBuffer(chunk, encoding));
    const done = typeof encoding === 'function' ? encoding : callback;
    if (typeof done === 'function') process.nextTick(done);
    return true;
  };
  res.end = function end(chunk, encoding, callback) {
    const done = [chunk, encoding, callback].find((arg) => typeof arg === 'function');
    if (typeof chunk !== 'function') chunks.push(toBuffer(chunk, typeof encoding === 'function' ? undefined : encoding));
    restore();
    const response = { status: res.statusCode, headers: res.getHeaders(), body: Buffer.concat(chunks) };
    finish(response).then(
      (answer) => {
        if (answer !== response) {
          for (const name of res.getHeaderNames()) res.removeHeader(name);
          for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
          res.setHeader('content-length', answer.body.length);
        }
        res.statusCode = answer.status;
        res.end(answer.body, done);
      },
      (error) => {
        res.destroy(error);
      },
    );
    return res;
  };
}

/**
 * The Idempotency-Key middleware: `app.post('/orders', idempotency({ store,
 * required: true }), handler)`. In the handler, `req.idempotency` is `{ key,
 * tx, client, final() }`: write through `client` (the driver's handle in the
 * keyed transaction) and those writes commit with the stored response; call
 * `final()` to keep a 5xx answer. Options: docs/http.md.
 */
function idempotency(options) {
  const middleware = createIdempotency(options);
  const { header, required, methods, maxBodyBytes } = middleware.settings;
  return async function idempotencyMiddleware(req, res, next) {
    // Requests the middleware leaves alone are not read here: their body stays for the parsers.
    if (!methods.includes(String(req.method).toUpperCase()) || (!required && !req.headers[header])) {
      next();
      return;
    }
    let step;
    try {
      const body = await bodyOf(req, maxBodyBytes);
      step = await middleware.begin({ method: req.method, url: req.originalUrl ?? req.url, headers: req.headers, body, native: req });
    } catch (error) {
      if (error instanceof HttpRefusal) {
        sendNode(res, problemOfRefusal(error));
        return;
      }
      // The app's own bug (a scope that answered no caller) or the store's: the app's error handler answers 500 and logs it.
      next(error);
      return;
    }
    if (step.action === 'pass') {
      next();
    } else if (step.action === 'answer') {
      sendNode(res, step.response);
    } else {
      req.idempotency = step.context;
      holdResponse(res, step.finish);
      next();
    }
  };
}

module.exports = { idempotency, rawBody };
