// What only the Redis store has: tx.client, which queues the host's own
// Redis writes into the commit script (they commit with the receipt or not
// at all, a write that would fail is refused before anything is written,
// reads and idemflow's own keys are refused loudly); the same store over
// ioredis; the clients it refuses; and docs/adapters.md's Redis block, run
// on a Redis of its own. The contract every store shares runs
// on Redis in the shared suites (BACKENDS); faults.test.mjs kills a Redis of
// its own. Skips with one line without IDEMFLOW_REDIS_URL.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { IdemflowError, processBatch, RuleSet } from 'idemflow';
import { REDIS_URL, redisHelpers, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { redisMissing, startRedis } from '../workers/servers.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });
const skip = REDIS_URL ? false : 'set IDEMFLOW_REDIS_URL=redis://host:6379 to run the Redis store tests';

/** The clients of one suite: node-redis's or ioredis's, connected, and a RedisStore over it. */
async function open(which) {
  const { RedisStore } = await import('idemflow/redis');
  let client;
  if (which === 'ioredis') {
    const { Redis } = await import('ioredis');
    client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    await client.connect();
  } else {
    const { createClient } = await import('redis');
    client = createClient({ url: REDIS_URL });
    client.on('error', () => {});
    await client.connect();
  }
  const tables = tablesFor(uniquePrefix());
  const store = new RedisStore(client, { tables });
  await store.migrate();
  // The helpers (SCAN, drop) speak node-redis: over ioredis they get a node-redis client of their own.
  let admin = client;
  if (which === 'ioredis') {
    const { createClient } = await import('redis');
    admin = createClient({ url: REDIS_URL });
    admin.on('error', () => {});
    await admin.connect();
  }
  return { client, store, tables, helper: redisHelpers(store, admin, tables) };
}

/** A key of the host's, apart from every other test's. */
const hostKey = (name) => `${uniquePrefix()}:host:${name}`;

describe('tx.client on Redis: the host’s writes in idemflow’s commit', { skip }, () => {
  let redis;
  let client;
  let store;
  let tables;
  before(async () => {
    ({ client, store, tables } = redis = await open('node-redis'));
  });
  after(async () => {
    await redis?.helper.drop();
    await redis?.client.quit();
  });
  const get = (key) => client.get(key);

  it('queued writes commit with the receipt, and a duplicate does not run them again', async () => {
    const ns = uniquePrefix();
    const [counter, shipment, ids] = [hostKey('count'), hostKey('shipment'), hostKey('ids')];
    const onApplied = (tx, decision) => {
      tx.client.incrby(counter, 1);
      tx.client.hset(shipment, { orderId: decision.event.workflowId, eventId: decision.event.eventId });
      tx.client.sadd(ids, decision.event.eventId);
      tx.client.zadd(hostKey('by-time'), 5, 'x');
      tx.client.rpush(hostKey('log'), 'shipped');
      tx.client.expire(shipment, 3600);
      return { shipment };
    };
    const event = request(`${ns}:e1`, `${ns}:o1`);
    const first = await store.process(event, { ruleSet, onApplied });
    assert.equal(first.outcome, 'applied');
    const again = await store.process(event, { ruleSet, onApplied });
    assert.equal(again.outcome, 'duplicate-delivery');
    assert.deepEqual(again.original.output, { shipment });
    assert.equal(await get(counter), '1');
    assert.deepEqual({ ...(await client.hGetAll(shipment)) }, { orderId: event.workflowId, eventId: event.eventId });
    assert.ok((await client.ttl(shipment)) > 3000, 'the expire ran');
    assert.deepEqual(await client.sMembers(ids), [event.eventId]);
    assert.notEqual(await store.getReceipt(event.eventId), null);
  });

  it('20 concurrent deliveries of one event run the host writes once', async () => {
    const ns = uniquePrefix();
    const counter = hostKey('concurrent');
    const event = request(`${ns}:e1`, `${ns}:o1`);
    const onApplied = (tx) => {
      tx.client.incrby(counter, 1);
    };
    const outcomes = await Promise.all(Array.from({ length: 20 }, () => outcomeOf(store.process(event, { ruleSet, onApplied }))));
    const answers = outcomes.map((o) => o.outcome ?? o.error?.code);
    assert.equal(answers.filter((answer) => answer === 'applied').length, 1, JSON.stringify(answers));
    assert.deepEqual(new Set(answers), new Set(['applied', 'duplicate-delivery']), 'the others answer duplicate');
    assert.equal(await get(counter), '1');
  });

  it('a callback that throws after queuing leaves nothing, and its retry writes once', async () => {
    const ns = uniquePrefix();
    const counter = hostKey('thrown');
    const event = request(`${ns}:e1`, `${ns}:o1`);
    const injected = new Error('injected after the writes were queued');
    const failed = await outcomeOf(
      store.process(event, {
        ruleSet,
        onApplied: (tx) => {
          tx.client.incrby(counter, 1);
          throw injected;
        },
      }),
    );
    assert.equal(failed.error?.code, 'HANDLER_FAILED');
    assert.equal(failed.error.cause, injected);
    assert.equal(await get(counter), null, 'no host write');
    assert.equal(await store.getReceipt(event.eventId), null, 'no receipt');
    assert.equal(await store.getWorkflow(event.workflowId), null, 'no workflow');
    const retried = await store.process(event, { ruleSet, onApplied: (tx) => tx.client.incrby(counter, 1) });
    assert.equal(retried.outcome, 'applied');
    assert.equal(await get(counter), '1');
  });

  it('reads, unknown commands and idemflow’s own keys are refused at the call, loudly', async () => {
    const ns = uniquePrefix();
    const attempts = [
      ['a read', (tx) => tx.client.get(hostKey('x')), 'command not queued'],
      ['multi', (tx) => tx.client.multi(), 'command not queued'],
      ['a command by name that is not queued', (tx) => tx.client.command('FLUSHALL'), 'command not queued'],
      ['a store record', (tx, e) => tx.client.del(`${tables.inbox}:r:${e.eventId}`), 'store key'],
      ['a store index', (tx) => tx.client.zadd(`${tables.outbox}:i:due`, 0, 'forged'), 'store key'],
      ['a number that is not an integer', (tx) => tx.client.incrby(hostKey('n'), 1.5), 'not a string'],
      ['a malformed set', (tx) => tx.client.set(hostKey('s'), 'v', 'KEEPTTL'), 'wrong arguments'],
      ['an odd hset', (tx) => tx.client.hset(hostKey('h'), 'field'), 'wrong arguments'],
    ];
    for (const [what, write, reason] of attempts) {
      const event = request(`${ns}:${reason}:${what}`, `${ns}:o:${what}`);
      const marker = hostKey('marker');
      const outcome = await outcomeOf(
        store.process(event, {
          ruleSet,
          onApplied: (tx, decision) => {
            tx.client.set(marker, '1');
            write(tx, decision.event);
          },
        }),
      );
      assert.ok(outcome.error instanceof IdemflowError, `${what}: ${outcome.error ?? outcome.outcome}`);
      assert.equal(outcome.error.code, 'INVALID_ARGUMENT', what);
      assert.equal(outcome.error.details.reason, reason, what);
      assert.equal(await get(marker), null, `${what}: nothing queued before it was written`);
      assert.equal(await store.getReceipt(event.eventId), null, `${what}: no receipt`);
    }
  });

  it('a write the queue shows would fail is refused at the call', async () => {
    const ns = uniquePrefix();
    const key = hostKey('typed');
    const cases = [
      [
        'a set over a string it queued',
        (tx) => {
          tx.client.set(key, '1');
          tx.client.sadd(key, 'm');
        },
        'wrong type',
      ],
      [
        'an incrby over text it queued',
        (tx) => {
          tx.client.set(key, 'abc');
          tx.client.incrby(key, 2);
        },
        'not a whole number',
      ],
      [
        'an hincrby over a field it queued',
        (tx) => {
          tx.client.hset(key, { f: 'x' });
          tx.client.hincrby(key, 'f', 1);
        },
        'not a whole number',
      ],
    ];
    for (const [what, write, reason] of cases) {
      const event = request(`${ns}:${what}`, `${ns}:o:${what}`);
      const outcome = await outcomeOf(store.process(event, { ruleSet, onApplied: (tx) => void write(tx) }));
      assert.equal(outcome.error?.code, 'INVALID_ARGUMENT', what);
      assert.equal(outcome.error.details.reason, reason, what);
      assert.equal(await client.exists(key), 0, `${what}: nothing written`);
      assert.equal(await store.getReceipt(event.eventId), null, `${what}: no receipt`);
    }
    // What the queue made a whole number stays one: counted on a key set in the same transaction.
    const event = request(`${ns}:ok`, `${ns}:o:ok`);
    const applied = await store.process(event, {
      ruleSet,
      onApplied: (tx) => {
        tx.client.set(key, '40');
        tx.client.incrby(key, 2);
      },
    });
    assert.equal(applied.outcome, 'applied');
    assert.equal(await get(key), '42');
  });

  it('a stored key of another type, or text where a count is, refuses the whole commit before any write', async () => {
    const ns = uniquePrefix();
    const [text, hash, other] = [hostKey('text'), hostKey('hash'), hostKey('other')];
    await client.set(text, 'not a number');
    await client.hSet(hash, 'f', 'x');
    const cases = [
      ['sadd on a string', (tx) => tx.client.sadd(text, 'm')],
      ['incrby on text', (tx) => tx.client.incrby(text, 1)],
      ['hincrby on a text field', (tx) => tx.client.hincrby(hash, 'f', 1)],
      ['rpush on a hash', (tx) => tx.client.rpush(hash, 'e')],
    ];
    for (const [what, write] of cases) {
      const event = request(`${ns}:${what}`, `${ns}:o:${what}`);
      const outcome = await outcomeOf(
        store.process(event, {
          ruleSet,
          onApplied: (tx) => {
            tx.client.hset(other, { written: 'yes' });
            write(tx);
          },
        }),
      );
      assert.equal(outcome.error?.code, 'HANDLER_FAILED', `${what}: ${outcome.error?.code ?? outcome.outcome}`);
      assert.equal(outcome.error.details.reason, 'host-command-refused', what);
      assert.equal(await client.exists(other), 0, `${what}: the host write queued before it is not there`);
      assert.equal(await store.getReceipt(event.eventId), null, `${what}: no receipt`);
      assert.equal(await store.getWorkflow(event.workflowId), null, `${what}: no workflow`);
      assert.equal(await store.getOperation(`create-shipment:${event.workflowId}`), null, `${what}: no operation`);
    }
    assert.equal(await get(text), 'not a number');
    assert.equal(await client.hGet(hash, 'f'), 'x');
  });

  it('in a batch a callback that throws loses its own queued writes only', async () => {
    const ns = uniquePrefix();
    const events = ['a', 'b', 'c'].map((name) => request(`${ns}:${name}`, `${ns}:o-${name}`));
    const shipped = hostKey('batch');
    const onApplied = (tx, decision) => {
      tx.client.sadd(shipped, decision.event.eventId);
      if (decision.event.eventId.endsWith(':b')) throw new Error('b fails after queuing');
    };
    const results = await processBatch(store, events, { ruleSet, onApplied });
    assert.deepEqual(
      results.map((r) => r.outcome ?? r.error?.code),
      ['applied', 'HANDLER_FAILED', 'applied'],
    );
    assert.deepEqual((await client.sMembers(shipped)).sort(), [events[0].eventId, events[2].eventId].sort());
    assert.equal(await store.getReceipt(events[1].eventId), null);
  });
});

describe('RedisStore over ioredis', { skip }, () => {
  let redis;
  before(async () => {
    redis = await open('ioredis');
  });
  after(async () => {
    await redis?.helper.drop();
    await redis?.helper.close();
    await redis?.client.quit();
  });

  it('decides, answers duplicates, commits host writes and runs the outbox as over node-redis', async () => {
    const { store, client } = redis;
    const ns = uniquePrefix();
    const counter = hostKey('io');
    const event = request(`${ns}:e1`, `${ns}:o1`);
    const onApplied = (tx) => {
      tx.client.incrby(counter, 1);
      return { ok: true };
    };
    assert.equal((await store.process(event, { ruleSet, onApplied })).outcome, 'applied');
    assert.equal((await store.process(event, { ruleSet, onApplied })).outcome, 'duplicate-delivery');
    assert.equal(await client.get(counter), '1');
    const conflict = await outcomeOf(store.process(request(event.eventId, `${ns}:other`), { ruleSet }));
    assert.equal(conflict.error?.code, 'EVENT_ID_CONFLICT');

    const now = Date.now();
    const [claimed] = await store.claimOperations({ owner: 'w1', now, leaseExpiresAt: now + 10_000, limit: 5 });
    assert.equal(claimed?.id, `create-shipment:${event.workflowId}`);
    assert.equal(await store.completeOperation({ id: claimed.id, fencingToken: claimed.fencingToken + 1, now }), false, 'a stale token');
    assert.equal(await store.completeOperation({ id: claimed.id, fencingToken: claimed.fencingToken, now }), true);
    assert.equal((await store.getOperation(claimed.id)).status, 'done');
    assert.deepEqual(await store.claimOperations({ owner: 'w2', now, leaseExpiresAt: now + 10_000, limit: 5 }), []);
  });

  it('a batch of 50 over ioredis commits in one script and replays', async () => {
    const { store } = redis;
    const ns = uniquePrefix();
    const events = Array.from({ length: 50 }, (_, i) => request(`${ns}:e${i}`, `${ns}:o${i % 20}`));
    const results = await processBatch(store, events, { ruleSet });
    assert.equal(results.filter((r) => r.outcome === 'applied').length, 20);
    const replay = await processBatch(store, events, { ruleSet });
    assert.equal(replay.filter((r) => r.outcome === 'duplicate-delivery').length, 50);
  });

  it('a server error reply is a coded error, never a raw one', async () => {
    const { client, tables } = redis;
    const { RedisStore } = await import('idemflow/redis');
    const store = new RedisStore(client, { tables });
    // A string where a receipt's hash should be: the read answers INVALID_RECORD, nothing is written over it.
    const ns = uniquePrefix();
    await client.set(`${tables.inbox}:r:${ns}:e1`, 'not a hash');
    const outcome = await outcomeOf(store.process(request(`${ns}:e1`, `${ns}:o1`), { ruleSet }));
    assert.ok(outcome.error instanceof IdemflowError, String(outcome.error));
    assert.equal(await client.get(`${tables.inbox}:r:${ns}:e1`), 'not a hash');
    assert.equal(await store.getWorkflow(`${ns}:o1`), null);
  });

  it('in a batch, a receipt key that holds no hash fails its own event (INVALID_RECORD); the others commit', async () => {
    const { client, store, tables } = redis;
    const ns = uniquePrefix();
    await client.set(`${tables.inbox}:r:${ns}:bad`, 'not a hash');
    const results = await processBatch(store, [request(`${ns}:bad`, `${ns}:o1`), request(`${ns}:good`, `${ns}:o2`)], { ruleSet });
    assert.deepEqual(
      results.map((r) => r.outcome ?? r.error?.code),
      ['INVALID_RECORD', 'applied'],
    );
    assert.equal(await client.get(`${tables.inbox}:r:${ns}:bad`), 'not a hash', 'never written over');
    assert.equal(await store.getWorkflow(`${ns}:o1`), null);
    assert.notEqual(await store.getReceipt(`${ns}:good`), null);
  });
});

describe('a client that cannot reach its server', () => {
  it('closed, or never connected: STORE_UNAVAILABLE reason connection-lost within the bound, never a raw error', async () => {
    const { RedisStore } = await import('idemflow/redis');
    const { createClient } = await import('redis');
    const { Redis } = await import('ioredis');
    const neverConnected = createClient({ url: 'redis://127.0.0.1:1' });
    const ioredis = new Redis({ port: 1, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    ioredis.on('error', () => {});
    for (const [name, client, reasons] of [
      ['node-redis, never connected', neverConnected, ['connection-lost']],
      ['ioredis, nothing listening', ioredis, ['connection-lost', 'connection-refused']],
    ]) {
      const store = new RedisStore(client, { timeoutMs: 2000 });
      const outcome = await outcomeOf(store.process(request('e1', 'o1'), { ruleSet }));
      assert.equal(outcome.error?.code, 'STORE_UNAVAILABLE', name);
      assert.ok(reasons.includes(outcome.error.details.reason), `${name}: ${outcome.error.details.reason}`);
      assert.equal(outcome.error.disposition, 'retry');
    }
    ioredis.disconnect();
  });
});

describe('the clients RedisStore refuses', () => {
  it('no client, a client of another kind, and a cluster client are INVALID_ARGUMENT', async () => {
    const { RedisStore } = await import('idemflow/redis');
    for (const client of [undefined, null, {}, { query() {} }]) {
      assert.throws(
        () => new RedisStore(client),
        (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
      );
    }
    const { Redis } = await import('ioredis');
    const cluster = new Redis.Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    assert.throws(
      () => new RedisStore(cluster),
      (error) => error.code === 'INVALID_ARGUMENT' && error.details.reason === 'cluster not supported',
    );
    const { createCluster } = await import('redis');
    const nodeCluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:1' }] });
    assert.throws(
      () => new RedisStore(nodeCluster),
      (error) => error.code === 'INVALID_ARGUMENT' && error.details.reason === 'cluster not supported',
    );
    assert.throws(
      () => new RedisStore({ sendCommand() {} }, { statementTimeoutMs: 100 }),
      (error) => error.code === 'INVALID_ARGUMENT',
      'a bound Redis cannot keep is refused, not ignored',
    );
    for (const waitReplicas of [
      null,
      1,
      { replicas: 0, timeoutMs: 100 },
      { replicas: 1 },
      { replicas: 1, timeoutMs: 30_000 },
      { replicas: 1, timeoutMs: 100, quorum: true },
    ]) {
      assert.throws(
        () => new RedisStore({ sendCommand() {} }, { waitReplicas }),
        (error) => error.code === 'INVALID_ARGUMENT',
        `waitReplicas ${JSON.stringify(waitReplicas)} is refused (its bound must end inside timeoutMs)`,
      );
    }
    assert.doesNotThrow(() => new RedisStore({ sendCommand() {} }, { waitReplicas: { replicas: 2, timeoutMs: 500 } }));
  });
});

describe("docs/adapters.md's Redis block", { skip: redisMissing() ?? false }, () => {
  it('runs as written on a Redis of its own: the shipment is written with the receipt, a redelivery answers it again', async () => {
    const docs = readFileSync(fileURLToPath(new URL('../../../docs/adapters.md', import.meta.url)), 'utf8');
    const section = docs.slice(docs.indexOf('\n### Redis (and Valkey)\n'));
    const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
    assert.ok(block?.includes('new RedisStore'), 'the section has its block');
    const driver = `
const again = await store.process({ eventId: 'evt-1', workflowId: 'order-1', type: 'SHIPMENT_REQUESTED' }, { ruleSet: 'order-shipment' });
const shipment = await client.hGetAll('shipment:order-1');
const members = await client.sMembers('shipments');
process.stdout.write(JSON.stringify({ outcome: result.outcome, output: result.output, again: again.outcome, original: again.original.output, shipment, members }));
await client.quit();
`;
    // In the test project, so 'idemflow/redis' and 'redis' resolve as they do for a user.
    const file = fileURLToPath(new URL('../docs-redis.tmp.mjs', import.meta.url));
    const db = await startRedis({ appendfsync: 'no-aof' });
    writeFileSync(file, block + driver);
    try {
      const run = spawnSync(process.execPath, [file], { env: { ...process.env, REDIS_URL: db.url }, encoding: 'utf8', timeout: 30_000 });
      assert.equal(run.status, 0, run.stderr);
      const seen = JSON.parse(run.stdout);
      assert.equal(seen.outcome, 'applied');
      assert.deepEqual(seen.output, { shipment: 'shipment:order-1' });
      assert.equal(seen.again, 'duplicate-delivery');
      assert.deepEqual(seen.original, seen.output, 'the redelivery answers what onApplied returned');
      assert.deepEqual(seen.shipment, { eventId: 'evt-1', status: 'requested' });
      assert.deepEqual(seen.members, ['order-1']);
      assert.equal(Number(await db.command('EXISTS', 'shop_inbox:r:evt-1')), 1, 'the receipt is under the tables the block names');
    } finally {
      rmSync(file, { force: true });
      await db.close();
    }
  });
});
