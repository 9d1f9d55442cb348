// Requests per second through the Idempotency-Key middleware, beside the same
// handler without it, on SQLite and PostgreSQL, Express and Fastify, in one
// run: the server in a process of its own, a keep-alive load generator here
// (CONCURRENCY requests in flight). Each request writes one row of the host's
// `orders` table: /plain in a transaction of its own, /orders in the keyed
// transaction with the key's record and the stored response. "new" sends a
// fresh key each time (the handler runs), "replay" a key answered before (no
// handler). Rounds of the three are interleaved, so a noisy neighbour slows
// all alike; the ratios are against /plain of the same server.
import { fork } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { PG_URL, tablesFor, tempDir, uniquePrefix, writeBenchJson } from '../workers/backends.mjs';

const SERVER = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workers', 'http-server.mjs');
const ROUND_MS = Number(process.env.BENCH_HTTP_ROUND_MS ?? 1000);
const ROUNDS = Number(process.env.BENCH_HTTP_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_HTTP_CONCURRENCY ?? 16);
const REPLAY_KEYS = 200;
const BODY = JSON.stringify({
  customer: 'c-7',
  items: [
    { sku: 'A-1', quantity: 2 },
    { sku: 'B-9', quantity: 1 },
  ],
  totalUnits: '4200',
});

function start(spec) {
  const child = fork(SERVER, [JSON.stringify({ ...spec, quiet: true })], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('message', (message) =>
      resolve({
        port: message.listening,
        stop: () =>
          new Promise((done) => {
            child.once('exit', done);
            child.send('stop');
          }),
      }),
    );
    child.once('exit', (code) => reject(new Error(`the bench server exited (${code})`)));
  });
}

function request(agent, port, pathname, key) {
  return new Promise((resolve, reject) => {
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) };
    if (key !== undefined) headers['idempotency-key'] = key;
    const req = http.request({ host: '127.0.0.1', port, path: pathname, method: 'POST', agent, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end(BODY);
  });
}

/** CONCURRENCY loops for `ms`: `{ requests, failed, latencies }`. */
async function load(agent, port, pathname, keyOf, ms) {
  const end = performance.now() + ms;
  const latencies = [];
  let failed = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < end) {
        const started = performance.now();
        const status = await request(agent, port, pathname, keyOf());
        latencies.push(performance.now() - started);
        if (status !== 201) failed += 1;
      }
    }),
  );
  return { requests: latencies.length, failed, latencies };
}

function quantile(sorted, q) {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

async function measure(framework, store) {
  const prefix = uniquePrefix();
  const spec = { framework, tables: tablesFor(prefix), hostTable: `${prefix}_orders`, ...store.spec() };
  const server = await start(spec);
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  let fresh = 0;
  const cases = {
    plain: { path: '/plain', key: () => undefined },
    new: {
      path: '/orders',
      key: () => {
        fresh += 1;
        return `bench-${prefix}-${fresh}`;
      },
    },
    replay: { path: '/orders', key: () => `replay-${prefix}-${Math.floor(Math.random() * REPLAY_KEYS)}` },
  };
  try {
    for (let i = 0; i < REPLAY_KEYS; i += 1) await request(agent, server.port, '/orders', `replay-${prefix}-${i}`);
    for (const c of Object.values(cases)) await load(agent, server.port, c.path, c.key, 200); // warm-up
    const totals = Object.fromEntries(Object.keys(cases).map((name) => [name, { requests: 0, failed: 0, latencies: [] }]));
    for (let round = 0; round < ROUNDS; round += 1) {
      for (const [name, c] of Object.entries(cases)) {
        const run = await load(agent, server.port, c.path, c.key, ROUND_MS);
        totals[name].requests += run.requests;
        totals[name].failed += run.failed;
        totals[name].latencies.push(...run.latencies);
      }
    }
    const seconds = (ROUNDS * ROUND_MS) / 1000;
    return Object.fromEntries(
      Object.entries(totals).map(([name, t]) => {
        const sorted = t.latencies.sort((a, b) => a - b);
        return [
          name,
          {
            rps: Math.round(t.requests / seconds),
            failed: t.failed,
            p50Ms: +quantile(sorted, 0.5).toFixed(2),
            p99Ms: +quantile(sorted, 0.99).toFixed(2),
          },
        ];
      }),
    );
  } finally {
    agent.destroy();
    await server.stop();
    if (store.drop) await store.drop(spec);
  }
}

async function dropPg(spec) {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  for (const table of [...Object.values(spec.tables), spec.hostTable]) await client.query(`DROP TABLE IF EXISTS "${table}"`);
  await client.end();
}

const STORES = [
  { id: 'sqlite', spec: () => ({ kind: 'sqlite', file: path.join(tempDir('bench-http'), 'api.db') }) },
  ...(PG_URL ? [{ id: 'postgres', spec: () => ({ kind: 'pg', url: PG_URL }), drop: dropPg }] : []),
];

console.log(
  `HTTP: requests/s with and without the Idempotency-Key middleware (${CONCURRENCY} in flight, ${ROUNDS} interleaved rounds of ${ROUND_MS} ms; one row written per request)`,
);
if (!PG_URL) console.log('(PostgreSQL skipped: set IDEMFLOW_PG_URL)');
const figures = {};
console.log('store     framework  plain req/s   keyed new req/s (×plain)   keyed replay req/s (×plain)   p50/p99 ms plain | new | replay');
for (const store of STORES) {
  for (const framework of ['express', 'fastify']) {
    const result = await measure(framework, store);
    figures[`${store.id}/${framework}`] = {
      ...result,
      newRatio: +(result.new.rps / result.plain.rps).toFixed(2),
      replayRatio: +(result.replay.rps / result.plain.rps).toFixed(2),
    };
    const f = figures[`${store.id}/${framework}`];
    const failed = result.plain.failed + result.new.failed + result.replay.failed;
    console.log(
      `${store.id.padEnd(9)} ${framework.padEnd(10)} ${String(result.plain.rps).padStart(11)}   ${String(result.new.rps).padStart(15)} (${f.newRatio.toFixed(2)})   ${String(result.replay.rps).padStart(18)} (${f.replayRatio.toFixed(2)})   ` +
        `${result.plain.p50Ms}/${result.plain.p99Ms} | ${result.new.p50Ms}/${result.new.p99Ms} | ${result.replay.p50Ms}/${result.replay.p99Ms}${failed > 0 ? `  (${failed} not 201!)` : ''}`,
    );
  }
}
writeBenchJson('http', figures);
