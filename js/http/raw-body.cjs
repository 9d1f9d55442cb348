'use strict';
// A request's body as the client sent it: the bytes a signature covers and
// a fingerprint hashes, read once and bounded. A framework that parsed the
// body already (express.json()) has thrown those bytes away: that is a
// misconfiguration, said so, rather than a fingerprint of what the parser made.

/** An answer the HTTP layer gives itself, before any handler: `status`, `reason`, a message, extra headers. */
class HttpRefusal extends Error {
  constructor(status, reason, message, headers = {}) {
    super(message);
    this.name = 'HttpRefusal';
    this.status = status;
    this.reason = reason;
    this.headers = headers;
  }
}

function tooLarge(bytes, maxBytes) {
  // The rest of an oversized body is never read: the connection closes after the answer.
  return new HttpRefusal(
    413,
    'too-large',
    `the body is ${bytes === null ? 'more than' : ''}${bytes ?? maxBytes} bytes; at most ${maxBytes} are read`,
    { connection: 'close' },
  );
}

/**
 * The raw body of a Node request (node:http, Express) as a Buffer, at most
 * `maxBytes`: the bytes a body parser kept (`express.raw()`, a string body),
 * or the stream read here. Rejects with an HttpRefusal: 413 past the bound
 * (told by Content-Length before reading when it is given), 400 when the
 * client stops sending, 500 when a parser already turned the body into
 * something else.
 */
function readRawBody(req, maxBytes) {
  if (keptBody(req)) {
    try {
      return Promise.resolve(bodyKept(req.body, maxBytes));
    } catch (refusal) {
      return Promise.reject(refusal);
    }
  }
  if (req.readableEnded || req.complete) {
    return Promise.reject(
      new HttpRefusal(500, 'body-consumed', 'the request body was read before idemflow saw it: mount idemflow before any body parser'),
    );
  }
  const declared = Number(req.headers['content-length']);
  if (Number.isSafeInteger(declared) && declared > maxBytes) return Promise.reject(tooLarge(declared, maxBytes));
  return new Promise((resolve, reject) => {
    const chunks = [];
    let length = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
    };
    const onData = (chunk) => {
      length += chunk.length;
      if (length > maxBytes) {
        cleanup();
        req.pause();
        reject(tooLarge(null, maxBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, length));
    };
    const onError = (error) => {
      cleanup();
      reject(new HttpRefusal(400, 'body-unreadable', `the body could not be read: ${error.message}`));
    };
    const onAborted = () => onError(new Error('the client aborted the request'));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/**
 * Whether a framework read the body already and kept what it made of it. A
 * parser that did not match the content type leaves `{}` and the stream
 * unread (body-parser does): that body is still to be read.
 */
function keptBody(req) {
  const { body } = req;
  if (body === undefined || body === null) return false;
  const untouched = typeof body === 'object' && !(body instanceof Uint8Array) && Object.keys(body).length === 0 && !req.readableEnded;
  return !untouched;
}

/** A body a framework kept: bytes or text are the client's bytes; anything else was parsed. */
function bodyKept(body, maxBytes) {
  let bytes;
  if (body instanceof Uint8Array) bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  else if (typeof body === 'string') bytes = Buffer.from(body, 'utf8');
  else {
    throw new HttpRefusal(
      500,
      'body-parsed',
      'a body parser turned the request body into an object before idemflow saw it, so the bytes the client sent are gone: mount idemflow before express.json(), or use express.raw()',
    );
  }
  if (bytes.length > maxBytes) throw tooLarge(bytes.length, maxBytes);
  return bytes;
}

module.exports = { HttpRefusal, readRawBody };
