// The same small API on node:http, Express and Fastify, with the
// Idempotency-Key middleware of idemflow/express or idemflow/fastify, for the
// HTTP tests (in process and in a child process: workers/http-server.mjs) and
// the bench. Routes:
//   POST /orders    key required; writes a row of the host's `orders` table in
//                   the keyed transaction when the app has one (`hostTable`),
//                   waits `x-delay-ms`, then 201 { orderId, run, received }
//                   with Location (stored) and X-Trace (not stored)
//   POST /optional  key optional; 200 { run }
//   POST /unavailable  503 unless `x-final: 1`, which keeps it (final())
//   POST /throws    the handler throws (500)
//   POST /plain     no middleware: the order's row in a transaction of its own,
//                   201 { orderId, run, received } (the bench's reference)
import http from 'node:http';
import express from 'express';
import Fastify from 'fastify';
import { idempotency as expressIdempotency } from 'idemflow/express';
import { idempotency as fastifyIdempotency } from 'idemflow/fastify';

export const FRAMEWORKS = ['node', 'express', 'fastify'];

const sleep = (ms) =>
  new Promise((resolve) => {
    setTimeout(resolve, ms);
  });

/**
 * The host's own table, written in the keyed transaction through the
 * context the middleware hands the handler (its `client`, or the in-memory
 * store's `tx.table`): `create()` makes it, `insert(context, orderId)` writes,
 * `count()` reads what committed. One per store kind.
 */
export function hostTable(kind, store, name) {
  switch (kind) {
    case 'memory':
      return {
        create: async () => {},
        insert: async (context, orderId) => {
          context.tx.table(name).set(orderId, { requestKey: context.key });
        },
        count: async () => store.snapshot().tables.get(name)?.size ?? 0,
        drop: async () => {},
      };
    case 'sqlite':
      return {
        create: async () => store.db.exec(`CREATE TABLE IF NOT EXISTS "${name}" (order_id TEXT PRIMARY KEY, request_key TEXT NOT NULL)`),
        insert: async (context, orderId) => {
          context.client.prepare(`INSERT INTO "${name}" (order_id, request_key) VALUES (?, ?)`).run(orderId, context.key);
        },
        count: async () => Number(store.db.prepare(`SELECT COUNT(*) AS n FROM "${name}"`).get().n),
        drop: async () => {},
      };
    case 'pg':
      return {
        create: async () =>
          store.client.query(`CREATE TABLE IF NOT EXISTS "${name}" (order_id TEXT PRIMARY KEY, request_key TEXT NOT NULL)`),
        insert: async (context, orderId) => {
          await context.client.query(`INSERT INTO "${name}" (order_id, request_key) VALUES ($1, $2)`, [orderId, context.key]);
        },
        count: async () => Number((await store.client.query(`SELECT COUNT(*) AS n FROM "${name}"`)).rows[0].n),
        drop: async () => {
          await store.client.query(`DROP TABLE IF EXISTS "${name}"`);
        },
      };
    case 'redis':
      // A hash per order and a set of their ids, queued through tx.client into the commit.
      return {
        create: async () => {},
        insert: async (context, orderId) => {
          context.client.hset(`${name}:${orderId}`, { requestKey: context.key });
          context.client.sadd(name, orderId);
        },
        count: async () => Number(await store.client.sCard(name)),
        drop: async () => {
          const members = await store.client.sMembers(name);
          await store.client.unlink([name, ...members.map((id) => `${name}:${id}`)]);
        },
      };
    default:
      return null;
  }
}

/** The /plain handler: what /orders does, without a key, in the store's own transaction. */
function plainHandler(state, store) {
  return async (received) => {
    state.runs += 1;
    const run = state.runs;
    const orderId = `order-${run}`;
    if (state.host) await store.transaction((tx) => state.host.insert({ tx, client: tx.client, key: `plain-${run}` }, orderId));
    return { status: 201, headers: { location: `/orders/${orderId}` }, body: { orderId, run, received } };
  };
}

function orderHandler(state) {
  return async (context, headers, received) => {
    state.runs += 1;
    const run = state.runs;
    const orderId = `order-${run}`;
    // The host's row first, then the wait: a process killed while it waits has written it, uncommitted.
    if (state.host) await state.host.insert(context, orderId);
    state.onRun?.(run);
    const delay = Number(headers['x-delay-ms'] ?? 0);
    if (delay > 0) await sleep(delay);
    return { status: 201, headers: { location: `/orders/${orderId}`, 'x-trace': `trace-${run}` }, body: { orderId, run, received } };
  };
}

/** Reads a JSON body the middleware did not read (a request it let pass). */
async function jsonOf(req) {
  if (req.body !== undefined) return req.body;
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : null;
}

function answerNode(res, { status, headers, body }) {
  res.statusCode = status;
  for (const [name, value] of Object.entries(headers ?? {})) res.setHeader(name, value);
  res.setHeader('content-type', 'application/json; charset=utf-8');
  res.end(JSON.stringify(body));
}

/**
 * An app of `framework` over `store`: `{ listen() → port, close(), state }`;
 * `state.runs` counts the handler's runs. Options go to the middleware.
 */
export function createApp(framework, store, { host = null, middleware: given = {} } = {}) {
  // One tenant unless a test says otherwise: the tests of scoping give their own.
  const middleware = { scope: 'global', ...given };
  const state = { runs: 0, host, onRun: null };
  const order = orderHandler(state);
  const plain = plainHandler(state, store);
  const required = { store, required: true, ...middleware };
  const optional = { store, required: false, ...middleware };
  if (framework === 'fastify') return fastifyApp(store, state, order, plain, middleware);
  if (framework === 'express') {
    const app = express();
    app.post('/orders', expressIdempotency(required), express.json(), async (req, res) => {
      const answer = await order(req.idempotency, req.headers, req.body);
      res.status(answer.status).set(answer.headers).json(answer.body);
    });
    app.post('/optional', expressIdempotency(optional), express.json(), (_req, res) => {
      state.runs += 1;
      res.json({ run: state.runs });
    });
    app.post('/unavailable', expressIdempotency(required), (req, res) => {
      state.runs += 1;
      if (req.headers['x-final'] === '1') req.idempotency.final();
      res.status(503).json({ run: state.runs });
    });
    app.post('/throws', expressIdempotency(required), () => {
      state.runs += 1;
      throw new Error('the handler failed');
    });
    app.post('/plain', express.json(), async (req, res) => {
      const answer = await plain(req.body);
      res.status(answer.status).set(answer.headers).json(answer.body);
    });
    // Express's own error page is HTML with the stack: a JSON 500 instead.
    app.use((error, _req, res, _next) => {
      // eslint-disable-line no-unused-vars
      res.status(500).json({ error: error.message });
    });
    return nodeServer(http.createServer(app), state);
  }
  const requiredMw = expressIdempotency(required);
  const optionalMw = expressIdempotency(optional);
  const routes = {
    '/orders': [requiredMw, async (req, res) => answerNode(res, await order(req.idempotency, req.headers, await jsonOf(req)))],
    '/optional': [
      optionalMw,
      async (req, res) => {
        await jsonOf(req);
        state.runs += 1;
        answerNode(res, { status: 200, body: { run: state.runs } });
      },
    ],
    '/unavailable': [
      requiredMw,
      async (req, res) => {
        state.runs += 1;
        if (req.headers['x-final'] === '1') req.idempotency.final();
        answerNode(res, { status: 503, body: { run: state.runs } });
      },
    ],
    '/throws': [
      requiredMw,
      async () => {
        state.runs += 1;
        throw new Error('the handler failed');
      },
    ],
    '/plain': [(_req, _res, next) => next(), async (req, res) => answerNode(res, await plain(await jsonOf(req)))],
  };
  return nodeServer(
    http.createServer((req, res) => {
      const route = req.method === 'POST' ? routes[req.url] : undefined;
      if (!route) {
        res.statusCode = 404;
        res.end();
        return;
      }
      const [mw, handler] = route;
      const fail = (error) => answerNode(res, { status: 500, body: { error: error.message } });
      mw(req, res, (error) => {
        if (error) fail(error);
        else Promise.resolve(handler(req, res)).catch(fail);
      });
    }),
    state,
  );
}

function nodeServer(server, state) {
  return {
    state,
    listen: (port = 0) =>
      new Promise((resolve) => {
        server.listen(port, '127.0.0.1', () => resolve(server.address().port));
      }),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

function fastifyApp(store, state, order, plain, middleware) {
  const app = Fastify();
  app.register(fastifyIdempotency, { store, ...middleware });
  app.register(async (routes) => {
    routes.post('/orders', { config: { idempotency: { required: true } } }, async (request, reply) => {
      const answer = await order(request.idempotency, request.headers, request.body);
      reply.code(answer.status).headers(answer.headers);
      return answer.body;
    });
    routes.post('/optional', async () => {
      state.runs += 1;
      return { run: state.runs };
    });
    routes.post('/unavailable', { config: { idempotency: { required: true } } }, async (request, reply) => {
      state.runs += 1;
      if (request.headers['x-final'] === '1') request.idempotency.final();
      reply.code(503);
      return { run: state.runs };
    });
    routes.post('/throws', { config: { idempotency: { required: true } } }, async () => {
      state.runs += 1;
      throw new Error('the handler failed');
    });
    routes.post('/plain', { config: { idempotency: false } }, async (request, reply) => {
      const answer = await plain(request.body);
      reply.code(answer.status).headers(answer.headers);
      return answer.body;
    });
  });
  return {
    state,
    listen: async (port = 0) => {
      await app.listen({ port, host: '127.0.0.1' });
      return app.server.address().port;
    },
    close: () => app.close(),
  };
}

/** A POST of JSON (or of `raw` text) with an optional Idempotency-Key: `{ status, headers, json }`. */
export async function post(port, path, { key, body, raw, headers = {} } = {}) {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers },
    body: raw ?? JSON.stringify(body ?? {}),
  });
  const text = await response.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: response.status, headers: Object.fromEntries(response.headers), json };
}
