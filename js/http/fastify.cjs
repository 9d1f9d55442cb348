'use strict';
// idemflow/fastify: the Idempotency-Key plugin and the webhook route for
// Fastify. The plugin reaches every route (it is registered with
// skip-override); a route sets `config: { idempotency: { required: true } }`
// or `false`. Fastify keeps its own body parsers: the bytes they read are
// copied on the way (preParsing), so the fingerprint covers what the client
// sent; the reply is held in onSend until the keyed transaction commits.

const { Transform } = require('node:stream');
const { IdemflowError } = require('../core/errors.cjs');
const { createIdempotency } = require('./idempotency.cjs');
const { problem, responseBypassed } = require('./response.cjs');

const RAW = Symbol('idemflow raw body');
const FINISH = Symbol('idemflow finish');
const MIDDLEWARE = Symbol('idemflow route middleware');
const RESTORE = Symbol('idemflow restore reply');

/**
 * A copy of the bytes a parser reads, kept on the request; past maxBytes only
 * their count is kept (preHandler answers 413: the parser read them, the
 * fingerprint would not cover them).
 */
function copyBody(request, payload, maxBytes) {
  const chunks = [];
  let length = 0;
  const copy = new Transform({
    transform(chunk, _encoding, callback) {
      length += chunk.length;
      if (length <= maxBytes) chunks.push(chunk);
      // Fastify compares what arrived with Content-Length through this property.
      copy.receivedEncodedLength = length;
      callback(null, chunk);
    },
    flush(callback) {
      request[RAW] = length <= maxBytes ? Buffer.concat(chunks) : { tooLarge: length };
      callback();
    },
  });
  copy.receivedEncodedLength = 0;
  return payload.pipe(copy);
}

/** Reads a reply payload that is a stream (reply.send(stream)) into a Buffer. */
async function bytesOf(payload) {
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  if (typeof payload === 'string') return Buffer.from(payload, 'utf8');
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload.pipe === 'function') {
    const chunks = [];
    for await (const chunk of payload) chunks.push(Buffer.from(chunk));
    return Buffer.concat(chunks);
  }
  return Buffer.from(String(payload), 'utf8');
}

function tooLarge(maxBytes) {
  return problem(413, 'too-large', `at most ${maxBytes} bytes of body`);
}

const bypassed = (field) => responseBypassed(field, "reply.send (or the handler's return)");

/**
 * While the answer is held, what would send it past onSend is refused with a
 * clear error (the handler's error then rolls back and frees the key):
 * reply.hijack(), and writes to reply.raw. Answers the function that undoes it.
 */
function holdReply(reply) {
  const raw = reply.raw;
  const original = { writeHead: raw.writeHead, write: raw.write, end: raw.end, flushHeaders: raw.flushHeaders };
  const hijack = reply.hijack;
  reply.hijack = () => {
    throw bypassed('reply.hijack()');
  };
  for (const name of Object.keys(original)) {
    raw[name] = () => {
      throw bypassed(`reply.raw.${name}()`);
    };
  }
  return () => {
    Object.assign(raw, original);
    reply.hijack = hijack;
  };
}

function send(reply, { status, headers, body }) {
  reply.code(status);
  for (const [name, value] of Object.entries(headers)) reply.header(name, value);
  return reply.send(body);
}

/**
 * `fastify.register(idempotency, { store, ... })`: options as the Express
 * middleware's (docs/http.md); a route's `config.idempotency` overrides them
 * (`false`: no idempotency on that route). In the handler,
 * `request.idempotency` is `{ key, tx, client, final() }`.
 */
function idempotency(fastify, options, done) {
  let base;
  try {
    base = createIdempotency(options);
  } catch (error) {
    done(error);
    return;
  }
  const routes = new WeakMap();
  const middlewareOf = (request) => {
    const config = request.routeOptions?.config?.idempotency;
    if (config === false) return null;
    if (config === undefined || config === null) return base;
    if (!routes.has(config)) routes.set(config, createIdempotency({ ...config, store: base.settings.store }, base.settings));
    return routes.get(config);
  };
  const applies = (request, middleware) =>
    middleware?.settings.methods.includes(request.method) &&
    (middleware.settings.required || Boolean(request.headers[middleware.settings.header]));

  fastify.addHook('preParsing', async (request, _reply, payload) => {
    const middleware = middlewareOf(request);
    request[MIDDLEWARE] = middleware;
    if (!applies(request, middleware)) return payload;
    return copyBody(request, payload, middleware.settings.maxBodyBytes);
  });

  // The key's step runs last among a route's preHandlers, after every hook of the app (its
  // authentication among them): `scope` reads the request as the handler will.
  async function keyedStep(request, reply) {
    const middleware = request[MIDDLEWARE];
    if (!applies(request, middleware)) return undefined;
    const raw = request[RAW] ?? Buffer.alloc(0);
    if (!(raw instanceof Uint8Array)) return send(reply, tooLarge(middleware.settings.maxBodyBytes));
    const step = await middleware.begin({ method: request.method, url: request.url, headers: request.headers, body: raw, native: request });
    if (step.action === 'answer') return send(reply, step.response);
    if (step.action === 'run') {
      request.idempotency = step.context;
      request[FINISH] = step.finish;
      request[RESTORE] = holdReply(reply);
    }
    return undefined;
  }
  fastify.addHook('onRoute', (route) => {
    const own = route.preHandler === undefined ? [] : [route.preHandler].flat();
    route.preHandler = [...own, keyedStep];
  });

  fastify.addHook('onSend', async (request, reply, payload) => {
    const finish = request[FINISH];
    if (finish === undefined) return payload;
    request[FINISH] = undefined;
    request[RESTORE]();
    const response = { status: reply.statusCode, headers: reply.getHeaders(), body: await bytesOf(payload) };
    const answer = await finish(response);
    if (answer === response) return response.body;
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.code(answer.status);
    for (const [name, value] of Object.entries(answer.headers)) reply.header(name, value);
    return answer.body;
  });
  done();
}
// Registered this way, the hooks reach every route of the instance (what fastify-plugin does).
idempotency[Symbol.for('skip-override')] = true;
idempotency[Symbol.for('fastify.display-name')] = 'idemflow-idempotency';

/**
 * `fastify.register(webhook, { receiver, url })`: a POST route at `url` whose
 * body reaches `receiver` (createWebhookReceiver) as the raw bytes, within
 * receiver.maxBytes (Fastify answers 413 beyond). Its parser is the route's
 * own: the rest of the instance keeps Fastify's.
 */
function webhook(fastify, { receiver, url }, done) {
  if (typeof receiver?.receive !== 'function' || typeof url !== 'string') {
    done(
      new IdemflowError('INVALID_ARGUMENT', 'webhook needs { receiver: createWebhookReceiver(...), url }', {
        disposition: 'fatal',
        details: { field: typeof url !== 'string' ? 'url' : 'receiver', reason: 'webhook options' },
      }),
    );
    return;
  }
  fastify.removeAllContentTypeParsers();
  fastify.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: receiver.maxBytes }, (_request, body, parsed) => parsed(null, body));
  fastify.post(url, async (request, reply) => {
    const answer = await receiver.receive({ method: request.method, headers: request.headers, body: request.body ?? Buffer.alloc(0) });
    return send(reply, { ...answer, body: answer.body });
  });
  done();
}

module.exports = { idempotency, webhook };
