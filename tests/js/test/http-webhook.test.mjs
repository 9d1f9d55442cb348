// The webhook receiver on real servers (node:http, Express, Fastify) over
// SQLite and PostgreSQL: a signature is checked on the raw body before
// anything is parsed or stored, and each verdict of the delivery handler is
// the status the sender acts on.

import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { describe, it } from 'node:test';
import express from 'express';
import Fastify from 'fastify';

import { createDeliveryHandler, createWebhookReceiver, signStripe, stripeSignature } from 'idemflow';
import { webhook } from 'idemflow/fastify';
import { PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { SEED_EVENT as CONFIRMED, SEED_WORKFLOW as WORKFLOW } from '../workers/fixtures.mjs';

const SECRET = 'whsec_test_0123456789';
const STORES = [{ id: 'sqlite' }, { id: 'pg', skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run the webhook tests on PostgreSQL' }];

async function openStore(kind) {
  const tables = tablesFor(uniquePrefix());
  if (kind === 'sqlite') {
    const { SqliteStore } = await import('idemflow/sqlite');
    const store = SqliteStore.open(path.join(tempDir('webhook'), 'hooks.db'), { tables });
    await store.migrate();
    const count = (table) => Number(store.db.prepare(`SELECT COUNT(*) AS n FROM "${tables[table]}"`).get().n);
    return { store, count, close: () => store.close() };
  }
  const { default: pg } = await import('pg');
  const { PostgresStore } = await import('idemflow/postgres');
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
  const store = new PostgresStore(pool, { tables });
  await store.migrate();
  const count = async (table) => Number((await pool.query(`SELECT COUNT(*) AS n FROM "${tables[table]}"`)).rows[0].n);
  return {
    store,
    count,
    close: async () => {
      for (const table of Object.values(tables)) await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.end();
    },
  };
}

/** The receiver on `framework`: `{ port, close }`. */
async function serve(framework, receiver) {
  if (framework === 'fastify') {
    const app = Fastify();
    await app.register(webhook, { receiver, url: '/webhooks' });
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { port: app.server.address().port, close: () => app.close() };
  }
  let server;
  if (framework === 'express') {
    const app = express();
    app.post('/webhooks', receiver);
    app.get('/webhooks', receiver);
    server = http.createServer(app);
  } else {
    server = http.createServer(receiver);
  }
  await new Promise((resolve) => {
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    port: server.address().port,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}

async function deliver(port, body, { signature, method = 'POST', headers = {} } = {}) {
  const raw = typeof body === 'string' ? body : JSON.stringify(body);
  const response = await fetch(`http://127.0.0.1:${port}/webhooks`, {
    method,
    headers: {
      'content-type': 'application/json',
      ...(signature === undefined
        ? { 'stripe-signature': signStripe(raw, { secret: SECRET }) }
        : signature === null
          ? {}
          : { 'stripe-signature': signature }),
      ...headers,
    },
    body: method === 'GET' ? undefined : raw,
  });
  const text = await response.text();
  return { status: response.status, headers: Object.fromEntries(response.headers), json: text ? JSON.parse(text) : null };
}

const cases = [
  [
    'a signed delivery is applied (200); the same delivery again is a duplicate (200), recorded once',
    async (t) => {
      const first = await deliver(t.port, CONFIRMED);
      assert.deepEqual([first.status, first.json], [200, { outcome: 'applied' }]);
      const again = await deliver(t.port, CONFIRMED);
      assert.deepEqual([again.status, again.json], [200, { outcome: 'duplicate-delivery' }]);
      assert.deepEqual([await t.count('inbox'), await t.count('outbox')], [1, 1]);
    },
  ],

  [
    'a forged, tampered, missing or malformed signature is 401 and nothing is written',
    async (t) => {
      const raw = JSON.stringify(CONFIRMED);
      const forged = await deliver(t.port, raw, { signature: signStripe(raw, { secret: 'whsec_someone_else' }) });
      assert.deepEqual([forged.status, forged.json.reason, forged.json.detail], [401, 'signature', 'mismatch']);
      const other = JSON.stringify({ ...CONFIRMED, amountUnits: '99999999' });
      const tampered = await deliver(t.port, other, { signature: signStripe(raw, { secret: SECRET }) });
      assert.deepEqual([tampered.status, tampered.json.detail], [401, 'mismatch']);
      assert.deepEqual(
        [(await deliver(t.port, raw, { signature: null })).status, (await deliver(t.port, raw, { signature: null })).json.detail],
        [401, 'missing'],
      );
      assert.equal((await deliver(t.port, raw, { signature: 't=abc,v1=zz' })).json.detail, 'malformed');
      assert.deepEqual([await t.count('inbox'), await t.count('outbox')], [0, 0]);
      assert.deepEqual(await t.store.getWorkflow('swap-42'), WORKFLOW);
    },
  ],

  [
    'a signature outside the tolerance window (replayed later, or from a clock ahead) is 401 and nothing is written',
    async (t) => {
      const raw = JSON.stringify(CONFIRMED);
      const now = Math.floor(Date.now() / 1000);
      // 10 s past the 300 s window either way: a second that ticks between here and the check cannot bring one inside.
      for (const timestamp of [now - 310, now + 310]) {
        const stale = await deliver(t.port, raw, { signature: signStripe(raw, { secret: SECRET, timestamp }) });
        assert.deepEqual([stale.status, stale.json.detail], [401, 'stale']);
      }
      assert.equal(
        (await deliver(t.port, raw, { signature: signStripe(raw, { secret: SECRET, timestamp: now - 200 }) })).status,
        200,
        'within the window',
      );
      assert.equal(await t.count('inbox'), 1);
    },
  ],

  [
    'a rotated secret: a signature under the old or the new one is accepted',
    async (t) => {
      const raw = JSON.stringify(CONFIRMED);
      const signature = `${signStripe(raw, { secret: 'whsec_old' })},${signStripe(raw, { secret: SECRET }).split(',')[1]}`;
      assert.equal((await deliver(t.port, raw, { signature })).status, 200);
    },
  ],

  [
    'an event for a workflow not there yet is 503 with Retry-After: the sender retries',
    async (t) => {
      const early = await deliver(t.port, { ...CONFIRMED, eventId: 'early-1', workflowId: 'swap-not-yet' });
      assert.equal(early.status, 503);
      assert.equal(early.json.code, 'UNKNOWN_WORKFLOW');
      assert.ok(Number(early.headers['retry-after']) >= 1, early.headers['retry-after']);
      assert.equal(await t.count('inbox'), 0);
    },
  ],

  [
    'an event that can never be valid is 400 (dead-letter)',
    async (t) => {
      const bad = await deliver(t.port, { ...CONFIRMED, amountUnits: '012' });
      assert.deepEqual([bad.status, bad.json.code, bad.json.disposition], [400, 'INVALID_EVENT', 'reject']);
      const notJson = await deliver(t.port, '{"eventId":');
      assert.deepEqual([notJson.status, notJson.json.code], [400, 'INVALID_EVENT']);
      assert.equal(await t.count('inbox'), 0);
    },
  ],

  [
    'a conflict is parked by the park hook and answered 200; a park that fails is 503',
    async (t) => {
      await deliver(t.port, CONFIRMED);
      const conflicting = { ...CONFIRMED, amountUnits: '12500001' };
      const parked = await deliver(t.port, conflicting);
      assert.deepEqual([parked.status, parked.json], [200, { parked: true, code: 'EVENT_ID_CONFLICT' }]);
      assert.equal(t.parked.length, 1);
      assert.equal(t.parked[0].body.toString('utf8'), JSON.stringify(conflicting));
      assert.equal(t.parked[0].error.code, 'EVENT_ID_CONFLICT');
      t.parkFails = true;
      const failed = await deliver(t.port, conflicting);
      assert.equal(failed.status, 503);
      assert.ok(Number(failed.headers['retry-after']) >= 1);
    },
  ],

  [
    'a body over maxBytes is 413 and is not read; a GET is 405',
    async (t) => {
      const large = JSON.stringify({ ...CONFIRMED, padding: 'x'.repeat(5000) });
      assert.equal((await deliver(t.port, large)).status, 413);
      assert.equal(await t.count('inbox'), 0);
      const get = await deliver(t.port, '', { method: 'GET' });
      assert.equal(get.status, t.framework === 'fastify' ? 404 : 405);
    },
  ],
];

for (const kind of STORES) {
  for (const framework of ['node', 'express', 'fastify']) {
    describe(`webhook receiver on ${framework} over ${kind.id}`, { skip: kind.skip }, () => {
      for (const [name, run] of cases) {
        it(name, async () => {
          const opened = await openStore(kind.id);
          await opened.store.putWorkflow(WORKFLOW);
          const t = { ...opened, framework, parked: [], parkFails: false };
          const receiver = createWebhookReceiver(createDeliveryHandler(opened.store, { ruleSet: 'deposit-swap' }), {
            verify: stripeSignature({ secret: [SECRET, 'whsec_old'] }),
            park: async (delivery) => {
              if (t.parkFails) throw new Error('the parking table is down');
              t.parked.push(delivery);
            },
            maxBytes: 4096,
          });
          const server = await serve(framework, receiver);
          t.port = server.port;
          try {
            await run(t);
          } finally {
            await server.close();
            await opened.close();
          }
        });
      }
    });
  }
}

describe('idemflow/fastify webhook options', () => {
  it('a webhook registered without a receiver or a url fails the start with INVALID_ARGUMENT naming the field', async () => {
    for (const [options, field] of [
      [{ url: '/hook' }, 'receiver'],
      [{ receiver: { receive: async () => ({}) } }, 'url'],
    ]) {
      const app = Fastify();
      app.register(webhook, options);
      await assert.rejects(app.ready(), (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === field);
      await app.close().catch(() => {});
    }
  });
});
