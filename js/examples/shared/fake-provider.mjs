// A fake exchange provider: an HTTP server that stands for the real one the
// outbox consumer calls. Like a real provider with idempotency keys it
// carries out each key once and answers a repeated key with the first result,
// and like a real one it sometimes fails with 503, so the consumer's retries
// are exercised. It records every call, so a test (or you) can check that
// each swap was exchanged exactly once.
//
//   node examples/shared/fake-provider.mjs [port]    # default 8085, 503 on 20% of first calls
//
// POST /<kind> (exchanges, payouts, reviews, deposit-reviews) with an Idempotency-Key header
// and a JSON body; GET /effects lists what was carried out.
import http from 'node:http';
import { pathToFileURL } from 'node:url';

/**
 * Starts the provider. `failRate`: share of first calls per key answered 503
 * (decided by the key, so it is reproducible). `onCall({ kind, key, caller, effect })`
 * runs after a call was recorded and before the answer is sent; it may return
 * a promise (a test uses it to kill the caller right there).
 */
export async function startFakeProvider({ port = 0, failRate = 0.2, onCall } = {}) {
  const effects = new Map(); // "kind/key" -> { kind, key, body, calls }
  const calls = { total: 0, failed: 0, repeated: 0 };

  async function handle(request, response) {
    if (request.method === 'GET' && request.url === '/effects') {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ effects: [...effects.values()], calls }));
      return;
    }
    const kind = request.url.replace(/^\//, '');
    const key = request.headers['idempotency-key'];
    if (request.method !== 'POST' || !['exchanges', 'payouts', 'reviews', 'deposit-reviews'].includes(kind) || typeof key !== 'string') {
      response.writeHead(400).end('POST /exchanges|payouts|reviews|deposit-reviews with an Idempotency-Key header');
      return;
    }
    let text = '';
    for await (const chunk of request) text += chunk;
    calls.total += 1;
    const id = `${kind}/${key}`;
    let effect = effects.get(id);
    if (effect) {
      // A repeated key: carried out already, answer as the first time.
      effect.calls += 1;
      calls.repeated += 1;
    } else {
      if (failsNow(key, failRate)) {
        calls.failed += 1;
        response.writeHead(503, { 'retry-after': '1' }).end('try again later');
        return;
      }
      effect = { kind, key, body: JSON.parse(text || '{}'), calls: 1 };
      effects.set(id, effect);
    }
    if (onCall) await onCall({ kind, key, caller: request.headers['x-caller'] ?? null, effect });
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ id, key }));
  }

  const server = http.createServer((request, response) => {
    handle(request, response).catch((error) => {
      if (!response.headersSent) response.writeHead(500);
      response.end(String(error));
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    effects,
    calls,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}

/** 503 on the first attempts of some keys: a fixed share by key, so runs are reproducible. */
const attemptsByKey = new Map();
function failsNow(key, failRate) {
  const attempt = (attemptsByKey.get(key) ?? 0) + 1;
  attemptsByKey.set(key, attempt);
  if (attempt > 3) return false; // a provider that recovers: never more than three 503s in a row per key
  let hash = 2166136261;
  for (const char of `${key}#${attempt}`) hash = Math.imul(hash ^ char.charCodeAt(0), 16777619);
  return (hash >>> 0) / 4294967296 < failRate;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const provider = await startFakeProvider({ port: Number(process.argv[2] ?? 8085) });
  console.log(`fake provider on ${provider.url} (GET ${provider.url}/effects)`);
}
