// docs/http.md's Express and Fastify blocks, run as written (their imports
// given, `store` and the app's `authenticate` and `search` supplied) on
// PostgreSQL: two callers who send the same key at once each get their own
// order, and a retry replays the caller's own.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';

import express from 'express';
import Fastify from 'fastify';
import { idempotency as expressIdempotency } from 'idemflow/express';
import { idempotency as fastifyIdempotency } from 'idemflow/fastify';
import { PG_URL, tablesFor, uniquePrefix } from '../workers/backends.mjs';

const skip = PG_URL ? false : 'set IDEMFLOW_PG_URL to run docs/http.md blocks on PostgreSQL';
if (skip) console.log(`# skip http-docs: ${skip}`);

const DOC = readFileSync(new URL('../../../docs/http.md', import.meta.url), 'utf8');
const blockWith = (marker) => {
  const block = [...DOC.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes(marker));
  assert.ok(block, `a block with ${marker} is in docs/http.md`);
  return block.replace(/^import .*$/gm, '');
};

/** Runs a block with its names given; answers its `app`. */
function runBlock(code, names) {
  const run = new Function(...Object.keys(names), `return (async () => {\n${code}\nreturn app;\n})();`);
  return run(...Object.values(names));
}

/** A store in a schema of its own, where the block's `orders` table is the test's. */
async function openStore() {
  const { default: pg } = await import('pg');
  const { PostgresStore } = await import('idemflow/postgres');
  const schema = `docs_${uniquePrefix()}`;
  const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
  await admin.query(`CREATE SCHEMA "${schema}"`);
  const pool = new pg.Pool({ connectionString: PG_URL, max: 8, options: `-c search_path="${schema}"` });
  await pool.query('CREATE TABLE orders (id SERIAL PRIMARY KEY, body JSONB NOT NULL)');
  const store = new PostgresStore(pool, { tables: tablesFor('t') });
  await store.migrate();
  return {
    store,
    orders: async () => (await pool.query('SELECT id, body FROM orders ORDER BY id')).rows,
    close: async () => {
      await pool.end();
      await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
      await admin.end();
    },
  };
}

const accountOf = (authorization) => String(authorization ?? '').replace(/^Bearer /, '');

async function order(port, { token, key, body }) {
  const response = await fetch(`http://127.0.0.1:${port}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), json: await response.json() };
}

/** Two callers, one key, at once: two orders; each retry replays its caller's own answer. */
async function twoCallers(port, orders) {
  const [alice, bob] = await Promise.all([
    order(port, { token: 'alice', key: 'k-1', body: { sku: 'A-1' } }),
    order(port, { token: 'bob', key: 'k-1', body: { sku: 'A-1' } }),
  ]);
  assert.deepEqual([alice.status, bob.status, alice.replayed, bob.replayed], [201, 201, null, null]);
  const again = await order(port, { token: 'alice', key: 'k-1', body: { sku: 'A-1' } });
  assert.deepEqual([again.status, again.replayed, again.json], [201, 'true', alice.json]);
  assert.equal((await orders()).length, 2);
}

describe("docs/http.md's middleware blocks, as written", { skip }, () => {
  it('Express', async () => {
    const opened = await openStore();
    let server;
    try {
      const authenticate = (req, _res, next) => {
        req.user = { accountId: accountOf(req.headers.authorization) };
        next();
      };
      const app = await runBlock(blockWith("from 'idemflow/express'"), {
        express,
        idempotency: expressIdempotency,
        store: opened.store,
        authenticate,
      });
      server = app.listen(0, '127.0.0.1');
      await new Promise((resolve) => server.once('listening', resolve));
      await twoCallers(server.address().port, opened.orders);
    } finally {
      server?.closeAllConnections();
      await new Promise((resolve) => (server ? server.close(resolve) : resolve()));
      await opened.close();
    }
  });

  it('Fastify (its authentication a preHandler registered after the plugin)', async () => {
    const opened = await openStore();
    let app;
    try {
      const authenticate = async (request) => {
        request.user = { accountId: accountOf(request.headers.authorization) };
      };
      app = await runBlock(blockWith("from 'idemflow/fastify'"), {
        Fastify,
        idempotency: fastifyIdempotency,
        store: opened.store,
        authenticate,
        search: async () => ({ results: [] }),
      });
      await app.listen({ port: 0, host: '127.0.0.1' });
      await twoCallers(app.server.address().port, opened.orders);
    } finally {
      await app?.close();
      await opened.close();
    }
  });
});
