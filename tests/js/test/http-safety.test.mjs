// The HTTP layer's safe defaults, each over Express and Fastify × SQLite and
// PostgreSQL on real servers: keys scoped to the caller the app's own
// authentication found (never one caller's answer to another), no client
// value that can cause a 500, a reply that bypasses the held answer refused
// before anything commits, `waitMs: 0` answering 409 at once, a client that
// goes away mid-handler; and both webhook signature schemes, with the
// Standard Webhooks specification's own vector.

import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';

import express from 'express';
import Fastify from 'fastify';
import { signStandardWebhook, signStripe, standardWebhooksSignature, stripeSignature } from 'idemflow';
import { idempotency as expressIdempotency } from 'idemflow/express';
import { idempotency as fastifyIdempotency } from 'idemflow/fastify';
import { PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';

const STORES = [{ id: 'sqlite' }, { id: 'pg', skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run the HTTP safety tests on PostgreSQL' }];
for (const store of STORES) if (store.skip) console.log(`# skip http-safety on ${store.id}: ${store.skip}`);

const sleep = (ms) =>
  new Promise((resolve) => {
    setTimeout(resolve, ms);
  });

async function openStore(kind) {
  const prefix = uniquePrefix();
  if (kind === 'sqlite') {
    const { SqliteStore } = await import('idemflow/sqlite');
    const store = SqliteStore.open(path.join(tempDir('http-safety'), 'api.db'), { tables: tablesFor(prefix) });
    await store.migrate();
    store.db.exec(`CREATE TABLE "${prefix}_rows" (name TEXT NOT NULL)`);
    const insert = (context, name) => context.client.prepare(`INSERT INTO "${prefix}_rows" (name) VALUES (?)`).run(name);
    const count = async () => Number(store.db.prepare(`SELECT COUNT(*) AS n FROM "${prefix}_rows"`).get().n);
    return { store, insert, count, close: () => store.close() };
  }
  const { default: pg } = await import('pg');
  const { PostgresStore } = await import('idemflow/postgres');
  const pool = new pg.Pool({ connectionString: PG_URL, max: 30 });
  const store = new PostgresStore(pool, { tables: tablesFor(prefix) });
  await store.migrate();
  await pool.query(`CREATE TABLE "${prefix}_rows" (name TEXT NOT NULL)`);
  const insert = (context, name) => context.client.query(`INSERT INTO "${prefix}_rows" (name) VALUES ($1)`, [name]);
  const count = async () => Number((await pool.query(`SELECT COUNT(*) AS n FROM "${prefix}_rows"`)).rows[0].n);
  return {
    store,
    insert,
    count,
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS "${prefix}_rows"`);
      for (const table of Object.values(tablesFor(prefix))) await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.end();
    },
  };
}

/** Bearer tokens of the test's callers: the app's authentication maps each to an account. */
const LONG = 'x'.repeat(200);
const ACCOUNTS = { 'token-alice': 'alice', 'token-bob': 'bob', [`${LONG}-carol`]: `${LONG}-carol`, [`${LONG}-dave`]: `${LONG}-dave` };
const accountOf = (authorization) => ACCOUNTS[String(authorization ?? '').replace(/^Bearer /, '')];

/**
 * An app of `framework` whose authentication (Express middleware before the
 * route, Fastify preHandler hook registered after the plugin) sets `user`;
 * the middleware's scope reads it. Routes:
 *   POST /orders   writes a row, waits x-delay-ms, 201 { run, account }
 *   POST /bypass   answers past the held reply (Fastify reply.hijack() and
 *                  reply.raw, Express res.socket), after writing a row
 *   POST /noscope  its scope answers undefined (the app's bug)
 */
async function createApp(framework, backend, { waitMs = 0 } = {}) {
  const state = { runs: 0 };
  const scope = (request) => request.user?.id;
  const order = async (context, headers, user) => {
    state.runs += 1;
    const run = state.runs;
    await backend.insert(context, `order-${run}`);
    const delay = Number(headers['x-delay-ms'] ?? 0);
    if (delay > 0) await sleep(delay);
    return { run, account: user?.id ?? null };
  };
  if (framework === 'express') {
    const app = express();
    app.use((req, _res, next) => {
      const id = accountOf(req.headers.authorization);
      if (id) req.user = { id };
      next();
    });
    const keyed = expressIdempotency({ store: backend.store, required: true, scope, waitMs });
    app.post('/orders', keyed, async (req, res) => {
      res.status(201).json(await order(req.idempotency, req.headers, req.user));
    });
    app.post('/bypass', keyed, async (req, res) => {
      state.runs += 1;
      await backend.insert(req.idempotency, 'bypass');
      res.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
    });
    app.post('/noscope', expressIdempotency({ store: backend.store, required: true, scope: () => undefined }), (_req, res) => {
      state.runs += 1;
      res.status(201).json({});
    });
    app.use((error, _req, res, _next) => {
      state.errors = [...(state.errors ?? []), error];
      res.status(500).json({ error: error.message });
    });
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    return {
      state,
      port: server.address().port,
      close: () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }
  const app = Fastify();
  app.setErrorHandler((error, _request, reply) => {
    state.errors = [...(state.errors ?? []), error];
    reply.code(500).send({ error: error.message });
  });
  await app.register(fastifyIdempotency, { store: backend.store, required: true, scope, waitMs });
  // The app's authentication, registered after the plugin: the scope still sees what it set.
  app.addHook('preHandler', async (request) => {
    const id = accountOf(request.headers.authorization);
    if (id) request.user = { id };
  });
  app.post('/orders', async (request, reply) => {
    reply.code(201);
    return order(request.idempotency, request.headers, request.user);
  });
  app.post('/bypass', async (request, reply) => {
    state.runs += 1;
    await backend.insert(request.idempotency, 'bypass');
    if (request.headers['x-bypass'] === 'raw') {
      reply.raw.writeHead(200, { 'content-type': 'text/plain' });
      reply.raw.end('ok');
    } else {
      reply.hijack();
      reply.raw.end('ok');
    }
    return reply;
  });
  app.post('/noscope', { config: { idempotency: { scope: () => undefined } } }, async (_request, reply) => {
    state.runs += 1;
    reply.code(201);
    return {};
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { state, port: app.server.address().port, close: () => app.close() };
}

async function post(port, route, { key, token = 'token-alice', body = { item: 'A-1' }, headers = {} } = {}) {
  const response = await fetch(`http://127.0.0.1:${port}${route}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let json = text;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: Object.fromEntries(response.headers), json };
}

const cases = [
  [
    "another caller who sends a caller's key and body runs his own request: never the first caller's stored answer",
    async (t) => {
      const first = await post(t.port, '/orders', { key: 'order-1', token: 'token-alice' });
      assert.deepEqual([first.status, first.json.account], [201, 'alice']);
      const replay = await post(t.port, '/orders', { key: 'order-1', token: 'token-alice' });
      assert.deepEqual([replay.status, replay.headers['idempotent-replayed'], replay.json.run], [201, 'true', first.json.run]);
      const other = await post(t.port, '/orders', { key: 'order-1', token: 'token-bob' });
      assert.equal(other.status, 201);
      assert.equal(other.headers['idempotent-replayed'], undefined);
      assert.equal(other.json.account, 'bob', "the scope read the account the app's authentication set");
      // Another body under the same key: his own new request, not a 422 telling him the key exists.
      const probe = await post(t.port, '/orders', { key: 'order-2', token: 'token-bob', body: { item: 'B-2' } });
      await post(t.port, '/orders', { key: 'order-2', token: 'token-alice' });
      assert.equal(probe.status, 201);
      assert.equal(await t.count(), 4, 'one row per caller and key');
    },
  ],
  [
    'two scopes that share their first 200 characters are two scopes',
    async (t) => {
      const carol = await post(t.port, '/orders', { key: 'k', token: `${LONG}-carol` });
      const dave = await post(t.port, '/orders', { key: 'k', token: `${LONG}-dave` });
      assert.deepEqual([carol.status, dave.status], [201, 201]);
      assert.equal(dave.headers['idempotent-replayed'], undefined);
      assert.equal(dave.json.account, `${LONG}-dave`);
    },
  ],
  [
    "a scope that answers no caller is the app's 500, reported to its error handler; nothing runs or is kept",
    async (t) => {
      const answer = await post(t.port, '/noscope', { key: 'k-1' });
      assert.equal(answer.status, 500);
      assert.equal(t.app.state.runs, 0);
      assert.equal(t.app.state.errors.at(-1).code, 'INVALID_ARGUMENT');
      assert.equal(t.app.state.errors.at(-1).details.reason, 'scope-invalid');
    },
  ],
  [
    'no client-supplied key causes a 500: 255 backslashes or quotes, and the draft quoted form is the bare key',
    async (t) => {
      const slashes = await post(t.port, '/orders', { key: '\\'.repeat(255) });
      assert.equal(slashes.status, 201);
      assert.equal((await post(t.port, '/orders', { key: '\\'.repeat(255) })).headers['idempotent-replayed'], 'true');
      for (const key of ['"'.repeat(255), 'x'.repeat(256), '"unterminated', '"a\\b"']) {
        const refused = await post(t.port, '/orders', { key });
        assert.equal(refused.status, 400, `key ${key.slice(0, 20)}…`);
        assert.equal(refused.headers['content-type'], 'application/problem+json');
        assert.deepEqual([refused.json.status, refused.json.reason, refused.json.type], [400, 'idempotency-key-invalid', 'about:blank']);
      }
      const bare = await post(t.port, '/orders', { key: 'quoted-1' });
      const quoted = await post(t.port, '/orders', { key: '"quoted-1"' });
      assert.deepEqual([quoted.status, quoted.headers['idempotent-replayed'], quoted.json.run], [201, 'true', bare.json.run]);
      assert.equal(t.app.state.runs, 2);
    },
  ],
  [
    'an answer that bypasses the held reply is refused before anything commits, and the key and the store are free at once',
    async (t) => {
      const modes = t.framework === 'fastify' ? ['hijack', 'raw'] : ['socket'];
      for (const mode of modes) {
        const key = `bypass-${mode}`;
        const refused = await post(t.port, '/bypass', { key, headers: { 'x-bypass': mode } });
        assert.equal(refused.status, 500, mode);
        assert.equal(t.app.state.errors.at(-1).details.reason, 'response-bypassed');
        // The key is free (no 409), the store answers other keys at once.
        const again = await post(t.port, '/bypass', { key, headers: { 'x-bypass': mode } });
        assert.equal(again.status, 500);
        assert.equal((await post(t.port, '/orders', { key: `after-${mode}` })).status, 201);
      }
      assert.equal(await t.count(), modes.length, "the bypassing handler's rows rolled back; only the orders after them hold");
    },
  ],
  [
    'waitMs 0: of 20 concurrent requests with one key, one runs and the others get 409 at once, not a replay after waiting',
    async (t) => {
      const all = await Promise.all(
        Array.from({ length: 20 }, () => post(t.port, '/orders', { key: 'busy', headers: { 'x-delay-ms': '1500' } })),
      );
      const statuses = all.map((answer) => answer.status).sort();
      assert.deepEqual(statuses, [201, ...Array(19).fill(409)]);
      const busy = all.find((answer) => answer.status === 409);
      assert.equal(busy.headers['content-type'], 'application/problem+json');
      assert.equal(busy.json.code, 'IDEMPOTENCY_KEY_IN_PROGRESS');
      assert.equal(t.app.state.runs, 1);
    },
  ],
  [
    "a client that goes away mid-handler: the handler's answer commits with its rows, the retry replays it",
    async (t) => {
      const controller = new AbortController();
      const gone = fetch(`http://127.0.0.1:${t.port}/orders`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'idempotency-key': 'gone',
          authorization: 'Bearer token-alice',
          'x-delay-ms': '300',
        },
        body: '{}',
        signal: controller.signal,
      }).catch((error) => error);
      await sleep(100);
      controller.abort();
      await gone;
      let retry;
      for (let i = 0; i < 50; i += 1) {
        retry = await post(t.port, '/orders', { key: 'gone', body: {} });
        if (retry.status !== 409) break;
        await sleep(50);
      }
      assert.deepEqual([retry.status, retry.headers['idempotent-replayed']], [201, 'true']);
      assert.equal(t.app.state.runs, 1);
      assert.equal(await t.count(), 1);
    },
  ],
];

for (const framework of ['express', 'fastify']) {
  for (const backend of STORES) {
    describe(`HTTP safety: ${framework} on ${backend.id}`, { skip: backend.skip }, () => {
      for (const [name, body] of cases) {
        it(name, async () => {
          const opened = await openStore(backend.id);
          const app = await createApp(framework, opened);
          try {
            await body({ framework, port: app.port, app, count: opened.count });
          } finally {
            await app.close();
            await opened.close();
          }
        });
      }
    });
  }
}

describe('the middleware refuses to start without a scope', () => {
  it('Express and Fastify: no scope is a fatal INVALID_ARGUMENT naming scope; a non-function other than "global" too', async () => {
    const { InMemoryStore } = await import('idemflow');
    const store = new InMemoryStore();
    for (const options of [{ store }, { store, scope: 'tenant' }, { store, scope: null }]) {
      assert.throws(
        () => expressIdempotency(options),
        (error) => error.code === 'INVALID_ARGUMENT' && error.disposition === 'fatal' && error.details.field === 'scope',
      );
      const app = Fastify();
      await assert.rejects(
        async () => {
          await app.register(fastifyIdempotency, options);
          await app.ready();
        },
        (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === 'scope',
      );
      await app.close();
    }
    assert.equal(typeof expressIdempotency({ store, scope: 'global' }), 'function');
  });
});

describe('webhook signatures', () => {
  // The Standard Webhooks specification's published example.
  const VECTOR = {
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
    timestamp: 1614265330,
    body: '{"test": 2432232314}',
    signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
  };
  const at = (seconds) => () => seconds * 1000;
  const headersOf = (signature, timestamp = VECTOR.timestamp) => ({
    'webhook-id': VECTOR.id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signature,
  });

  it("Standard Webhooks: the spec's vector signs and verifies; rotation, stale, tampered, malformed and missing are told apart", () => {
    const signed = signStandardWebhook(VECTOR.body, { secret: VECTOR.secret, id: VECTOR.id, timestamp: VECTOR.timestamp });
    assert.deepEqual(signed, headersOf(VECTOR.signature));
    const verify = standardWebhooksSignature({ secret: VECTOR.secret, now: at(VECTOR.timestamp + 10) });
    const body = Buffer.from(VECTOR.body);
    assert.deepEqual(verify({ headers: headersOf(VECTOR.signature), body }), { ok: true });
    // Several signatures in the header (the sender rotating), several secrets here (the receiver rotating).
    assert.deepEqual(verify({ headers: headersOf(`v1,${'A'.repeat(43)}= ${VECTOR.signature}`), body }), { ok: true });
    const rotating = standardWebhooksSignature({ secret: ['whsec_b2xkLXNlY3JldA==', VECTOR.secret], now: at(VECTOR.timestamp) });
    assert.deepEqual(rotating({ headers: headersOf(VECTOR.signature), body }), { ok: true });
    assert.deepEqual(verify({ headers: headersOf(VECTOR.signature), body: Buffer.from('{"test": 2432232315}') }), {
      ok: false,
      reason: 'mismatch',
    });
    const late = standardWebhooksSignature({ secret: VECTOR.secret, now: at(VECTOR.timestamp + 301) });
    assert.deepEqual(late({ headers: headersOf(VECTOR.signature), body }), { ok: false, reason: 'stale' });
    assert.deepEqual(verify({ headers: headersOf('t=1,v1=00'), body }), { ok: false, reason: 'malformed' });
    assert.deepEqual(verify({ headers: { 'webhook-id': VECTOR.id, 'webhook-signature': VECTOR.signature }, body }), {
      ok: false,
      reason: 'missing',
    });
    // The id is signed: the same signature under another id does not verify.
    assert.deepEqual(verify({ headers: { ...headersOf(VECTOR.signature), 'webhook-id': 'msg_other' }, body }), {
      ok: false,
      reason: 'mismatch',
    });
    assert.throws(() => standardWebhooksSignature({ secret: 'whsec_not base64!' }), { code: 'INVALID_ARGUMENT' });
  });

  it("Stripe's scheme by its own name: t=…,v1=… under Stripe-Signature, one v1 per secret while rotating", () => {
    const body = Buffer.from('{"id":"evt_1"}');
    const header = signStripe(body, { secret: ['whsec_old', 'whsec_new'], timestamp: 1700000000 });
    assert.match(header, /^t=1700000000,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
    const verify = stripeSignature({ secret: 'whsec_new', now: at(1700000000) });
    assert.deepEqual(verify({ headers: { 'stripe-signature': header }, body }), { ok: true });
    assert.deepEqual(verify({ headers: { 'webhook-signature': header }, body }), { ok: false, reason: 'missing' });
    // A Standard Webhooks header is not Stripe's: told apart, not accepted.
    const standard = standardWebhooksSignature({ secret: VECTOR.secret, now: at(VECTOR.timestamp) });
    assert.deepEqual(standard({ headers: { 'webhook-signature': header }, body }), { ok: false, reason: 'missing' });
  });
});
