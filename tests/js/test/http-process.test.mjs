// The Idempotency-Key middleware across processes, on SQLite and
// PostgreSQL: a server SIGKILLed in the middle of a request (its handler's
// row written, uncommitted) and restarted answers the client's retry by
// running the handler once more, leaving one row; a retry after a restart
// replays the stored response.

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { post } from '../workers/http-apps.mjs';

const SERVER = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workers', 'http-server.mjs');
const ORDER = { customer: 'c-9', items: [{ sku: 'B-2', quantity: 1 }], totalUnits: '990' };

/** A server process: resolves once it listens; `next(kind)` waits for its next message with that key. */
function start(spec) {
  const child = fork(SERVER, [JSON.stringify(spec)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const waiting = [];
  child.on('message', (message) => {
    for (const [i, entry] of waiting.entries()) {
      if (Object.hasOwn(message, entry.kind)) {
        waiting.splice(i, 1);
        entry.resolve(message[entry.kind]);
        return;
      }
    }
  });
  const next = (kind) =>
    new Promise((resolve, reject) => {
      waiting.push({ kind, resolve });
      child.once('exit', (code, signal) => reject(new Error(`the server exited (${code ?? signal}) before ${kind}`)));
    });
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve(signal ?? code));
  });
  return next('listening').then((port) => ({
    port,
    next,
    kill: async () => {
      child.kill('SIGKILL');
      return exited;
    },
    stop: async () => {
      child.send('stop');
      return exited;
    },
  }));
}

const STORES = [
  { id: 'sqlite', spec: () => ({ kind: 'sqlite', file: path.join(tempDir('http-process'), 'api.db') }) },
  {
    id: 'pg',
    skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run the process tests on PostgreSQL',
    spec: () => ({ kind: 'pg', url: PG_URL }),
  },
];

async function hostRows(spec) {
  if (spec.kind === 'sqlite') {
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(spec.file, { readonly: true });
    try {
      return db.prepare(`SELECT order_id, request_key FROM "${spec.hostTable}" ORDER BY order_id`).all();
    } finally {
      db.close();
    }
  }
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: spec.url });
  await client.connect();
  try {
    return (await client.query(`SELECT order_id, request_key FROM "${spec.hostTable}" ORDER BY order_id`)).rows;
  } finally {
    await client.end();
  }
}

async function dropTables(spec) {
  if (spec.kind !== 'pg') return;
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: spec.url });
  await client.connect();
  for (const table of [...Object.values(spec.tables), spec.hostTable]) await client.query(`DROP TABLE IF EXISTS "${table}"`);
  await client.end();
}

for (const store of STORES) {
  for (const framework of ['node', 'express', 'fastify']) {
    describe(`Idempotency-Key across processes: ${framework} over ${store.id}`, { skip: store.skip }, () => {
      it('a server killed in the middle of a request and restarted answers the retry: the handler runs again, one row is left', async () => {
        const prefix = uniquePrefix();
        const spec = { ...store.spec(), framework, tables: tablesFor(prefix), hostTable: `${prefix}_orders` };
        try {
          const first = await start(spec);
          const request = post(first.port, '/orders', { key: 'order-key-kill', body: ORDER, headers: { 'x-delay-ms': '60000' } }).then(
            (response) => ({ response }),
            (error) => ({ error }),
          );
          assert.equal(await first.next('ran'), 1, 'the handler wrote its row and waits');
          assert.equal(await first.kill(), 'SIGKILL');
          const lost = await request;
          assert.ok(lost.error, 'the client saw the connection end, not an answer');
          assert.deepEqual(await hostRows(spec), [], "the killed handler's row rolled back with the key");

          const second = await start(spec);
          const retry = await post(second.port, '/orders', { key: 'order-key-kill', body: ORDER });
          assert.equal(retry.status, 201);
          assert.equal(retry.headers['idempotent-replayed'], undefined, 'the key was free: the handler ran');
          assert.deepEqual(retry.json, { orderId: 'order-1', run: 1, received: ORDER });
          const again = await post(second.port, '/orders', { key: 'order-key-kill', body: ORDER });
          assert.deepEqual([again.json, again.headers['idempotent-replayed']], [retry.json, 'true']);
          await second.stop();
          assert.deepEqual(await hostRows(spec), [{ order_id: 'order-1', request_key: 'order-key-kill' }]);
        } finally {
          await dropTables(spec);
        }
      });

      it('a retry after a restart replays the stored response without running the handler', async () => {
        const prefix = uniquePrefix();
        const spec = { ...store.spec(), framework, tables: tablesFor(prefix), hostTable: `${prefix}_orders` };
        try {
          const first = await start(spec);
          const answered = await post(first.port, '/orders', { key: 'order-key-restart', body: ORDER });
          assert.equal(answered.status, 201);
          await first.stop();
          const second = await start(spec);
          const replay = await post(second.port, '/orders', { key: 'order-key-restart', body: ORDER });
          assert.equal(replay.status, 201);
          assert.equal(replay.headers['idempotent-replayed'], 'true');
          assert.equal(replay.headers.location, answered.headers.location);
          assert.deepEqual(replay.json, answered.json);
          const conflict = await post(second.port, '/orders', { key: 'order-key-restart', body: { ...ORDER, totalUnits: '991' } });
          assert.equal(conflict.status, 422);
          await second.stop();
          assert.equal((await hostRows(spec)).length, 1);
        } finally {
          await dropTables(spec);
        }
      });
    });
  }
}
