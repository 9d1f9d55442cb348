// The Idempotency-Key middleware on real servers (node:http, Express,
// Fastify) over the in-memory store, SQLite, PostgreSQL and Redis: Stripe's
// semantics, and the handler's own row committed with the stored response.

import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';

import { InMemoryStore } from 'idemflow';
import { PG_URL, REDIS_URL, redisHelpers, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { createApp, FRAMEWORKS, hostTable, post } from '../workers/http-apps.mjs';

const STORES = [
  { id: 'memory' },
  { id: 'sqlite' },
  { id: 'pg', skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run the HTTP tests on PostgreSQL' },
  { id: 'redis', skip: REDIS_URL ? false : 'set IDEMFLOW_REDIS_URL to run the HTTP tests on Redis' },
];
const ORDER = { customer: 'c-7', items: [{ sku: 'A-1', quantity: 2 }], totalUnits: '4200' };

/** A fresh store of `kind` (own tables), its host table, and how to close both. */
async function openStore(kind) {
  const prefix = uniquePrefix();
  if (kind === 'memory') {
    const store = new InMemoryStore();
    return { store, host: hostTable('memory', store, 'orders'), close: async () => {} };
  }
  if (kind === 'sqlite') {
    const { SqliteStore } = await import('idemflow/sqlite');
    const dir = tempDir('http');
    const store = SqliteStore.open(path.join(dir, 'api.db'), { tables: tablesFor(prefix) });
    await store.migrate();
    const host = hostTable('sqlite', store, `${prefix}_orders`);
    await host.create();
    return { store, host, close: () => store.close() };
  }
  if (kind === 'redis') {
    const { createClient } = await import('redis');
    const { RedisStore } = await import('idemflow/redis');
    const client = createClient({ url: REDIS_URL });
    client.on('error', () => {});
    await client.connect();
    const store = new RedisStore(client, { tables: tablesFor(prefix) });
    await store.migrate();
    const host = hostTable('redis', store, `${prefix}_orders`);
    const helpers = redisHelpers(store, client, tablesFor(prefix));
    return {
      store,
      host,
      close: async () => {
        await host.drop();
        await helpers.drop();
        await helpers.close();
      },
    };
  }
  const { default: pg } = await import('pg');
  const { PostgresStore } = await import('idemflow/postgres');
  const pool = new pg.Pool({ connectionString: PG_URL, max: 8 });
  const store = new PostgresStore(pool, { tables: tablesFor(prefix) });
  await store.migrate();
  const host = hostTable('pg', store, `${prefix}_orders`);
  await host.create();
  return {
    store,
    host,
    close: async () => {
      await host.drop();
      for (const table of Object.values(tablesFor(prefix))) await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.end();
    },
  };
}

const cases = [
  [
    'the first request runs the handler; a retry with the same key and body gets the same response with the replay header',
    async (t) => {
      const first = await post(t.port, '/orders', { key: 'key-1', body: ORDER });
      assert.equal(first.status, 201);
      assert.deepEqual(first.json, { orderId: 'order-1', run: 1, received: ORDER });
      assert.equal(first.headers.location, '/orders/order-1');
      assert.equal(first.headers['idempotent-replayed'], undefined);
      const retry = await post(t.port, '/orders', { key: 'key-1', body: ORDER });
      assert.equal(retry.status, 201);
      assert.deepEqual(retry.json, first.json);
      assert.equal(retry.headers['idempotent-replayed'], 'true');
      assert.equal(retry.headers.location, '/orders/order-1', 'an allowlisted header is stored');
      assert.equal(retry.headers['x-trace'], undefined, 'a header off the allowlist is not');
      assert.equal(t.app.state.runs, 1);
      if (t.host) assert.equal(await t.host.count(), 1, 'one row of the host table');
    },
  ],

  [
    'the same key with another body, or on another URL, is 422 and the handler does not run',
    async (t) => {
      await post(t.port, '/orders', { key: 'key-2', body: ORDER });
      const other = await post(t.port, '/orders', { key: 'key-2', body: { ...ORDER, totalUnits: '4300' } });
      assert.equal(other.status, 422);
      assert.equal(other.json.code, 'IDEMPOTENCY_KEY_CONFLICT');
      assert.match(other.json.detail, /key-2/);
      const elsewhere = await post(t.port, '/unavailable', { key: 'key-2', body: ORDER });
      assert.equal(elsewhere.status, 422);
      assert.equal(t.app.state.runs, 1);
    },
  ],

  [
    'JSON that differs only in whitespace and member order is the same request',
    async (t) => {
      await post(t.port, '/orders', { key: 'key-3', raw: '{"customer":"c-7","totalUnits":"4200","items":[{"sku":"A-1","quantity":2}]}' });
      const again = await post(t.port, '/orders', {
        key: 'key-3',
        raw: '{ "items": [ { "quantity": 2.0, "sku": "A-1" } ],\n  "totalUnits": "4200", "customer": "c-7" }',
      });
      assert.equal(again.status, 201);
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(t.app.state.runs, 1);
    },
  ],

  [
    '25 concurrent identical requests run the handler once and all get the same response (waiting)',
    async (t) => {
      const responses = await Promise.all(
        Array.from({ length: 25 }, () => post(t.waitingPort, '/orders', { key: 'key-25', body: ORDER, headers: { 'x-delay-ms': '50' } })),
      );
      assert.equal(t.waiting.state.runs, 1);
      for (const response of responses) {
        assert.equal(response.status, 201);
        assert.deepEqual(response.json, responses[0].json);
      }
      assert.equal(responses.filter((r) => r.headers['idempotent-replayed'] === 'true').length, 24);
      if (t.host) assert.equal(await t.host.count(), 1);
    },
  ],

  [
    'a request still in flight is 409 with Retry-After, by default; the handler runs once',
    async (t) => {
      const first = post(t.port, '/orders', { key: 'key-409', body: ORDER, headers: { 'x-delay-ms': '300' } });
      await new Promise((resolve) => {
        t.app.state.onRun = resolve;
      });
      const during = await post(t.port, '/orders', { key: 'key-409', body: ORDER });
      assert.equal(during.status, 409);
      assert.equal(during.json.code, 'IDEMPOTENCY_KEY_IN_PROGRESS');
      assert.equal(during.headers['retry-after'], '1');
      assert.equal((await first).status, 201);
      assert.equal((await post(t.port, '/orders', { key: 'key-409', body: ORDER })).headers['idempotent-replayed'], 'true');
      assert.equal(t.app.state.runs, 1);
    },
  ],

  [
    'a missing key is 400 where it is required; where it is optional the request runs each time',
    async (t) => {
      const missing = await post(t.port, '/orders', { body: ORDER });
      assert.equal(missing.status, 400);
      assert.equal(missing.json.reason, 'idempotency-key-missing');
      const tooLong = await post(t.port, '/orders', { key: 'k'.repeat(256), body: ORDER });
      assert.equal(tooLong.status, 400);
      assert.equal(t.app.state.runs, 0);
      assert.deepEqual((await post(t.port, '/optional', { body: ORDER })).json, { run: 1 });
      assert.deepEqual((await post(t.port, '/optional', { body: ORDER })).json, { run: 2 });
      assert.deepEqual((await post(t.port, '/optional', { key: 'opt', body: ORDER })).json, { run: 3 });
      assert.deepEqual((await post(t.port, '/optional', { key: 'opt', body: ORDER })).json, { run: 3 });
    },
  ],

  [
    'a 5xx leaves the key free (the retry runs again); a 5xx the handler calls final is stored',
    async (t) => {
      assert.equal((await post(t.port, '/unavailable', { key: 'key-503', body: {} })).status, 503);
      const again = await post(t.port, '/unavailable', { key: 'key-503', body: {} });
      assert.deepEqual([again.status, again.json, again.headers['idempotent-replayed']], [503, { run: 2 }, undefined]);
      await post(t.port, '/unavailable', { key: 'key-final', body: {}, headers: { 'x-final': '1' } });
      const replay = await post(t.port, '/unavailable', { key: 'key-final', body: {}, headers: { 'x-final': '1' } });
      assert.deepEqual([replay.status, replay.json, replay.headers['idempotent-replayed']], [503, { run: 3 }, 'true']);
      assert.equal(t.app.state.runs, 3);
    },
  ],

  [
    'a body over maxBodyBytes is 413 and the handler does not run',
    async (t) => {
      const small = createApp(t.framework, t.store, { host: t.host, middleware: { maxBodyBytes: 1000 } });
      const port = await small.listen();
      try {
        const large = await post(port, '/orders', { key: 'key-large', body: { ...ORDER, note: 'x'.repeat(2000) } });
        assert.equal(large.status, 413);
        assert.equal((await post(port, '/orders', { key: 'key-small', body: ORDER })).status, 201);
        assert.equal(small.state.runs, 1);
      } finally {
        await small.close();
      }
    },
  ],

  [
    'a handler that throws answers 500 and keeps nothing: the retry runs it again',
    async (t) => {
      assert.equal((await post(t.port, '/throws', { key: 'key-throws', body: {} })).status, 500);
      assert.equal((await post(t.port, '/throws', { key: 'key-throws', body: {} })).status, 500);
      assert.equal(t.app.state.runs, 2);
    },
  ],
];

for (const kind of STORES) {
  for (const framework of FRAMEWORKS) {
    describe(`Idempotency-Key on ${framework} over ${kind.id}`, { skip: kind.skip }, () => {
      for (const [name, run] of cases) {
        it(name, async () => {
          const opened = await openStore(kind.id);
          const t = { host: opened.host, store: opened.store, framework };
          t.app = createApp(framework, opened.store, { host: opened.host });
          t.waiting = createApp(framework, opened.store, { host: opened.host, middleware: { waitMs: 20_000 } });
          t.port = await t.app.listen();
          t.waitingPort = await t.waiting.listen();
          try {
            await run(t);
          } finally {
            await t.app.close();
            await t.waiting.close();
            await opened.close();
          }
        });
      }
    });
  }
}

describe('Idempotency-Key when a driver runs the transaction again', () => {
  it('a keyed transaction run a second time after the handler answered is a 503, and nothing is kept', async () => {
    const memory = new InMemoryStore();
    // What MongoDB's withTransaction does after a transient error: the function again, in a new transaction.
    const retrying = {
      now: () => memory.now(),
      _lockScope: () => memory,
      transaction: async (fn) => {
        await memory
          .transaction(async (first) => {
            await fn(first);
            throw new Error('a transient transaction error: the commit did not happen');
          })
          .catch(() => {});
        return memory.transaction(fn);
      },
    };
    const app = createApp('express', retrying, { host: hostTable('memory', memory, 'orders') });
    const port = await app.listen();
    try {
      const answer = await post(port, '/orders', { key: 'key-retried', body: ORDER });
      assert.equal(answer.status, 503);
      assert.equal(answer.json.code, 'CONCURRENT_UPDATE');
      assert.equal(memory.snapshot().inbox.size, 0);
    } finally {
      await app.close();
    }
  });
});
