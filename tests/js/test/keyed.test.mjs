// The keyed mode on every store: idempotent(store, { key, payload }, work)
// runs work once per key, commits the key's record with what work wrote
// through tx.client (a row of the host's shipments table),
// replays the stored output for the same payload, refuses another payload,
// holds the key against a second call, and lets retention expire the key.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { createRetention, fingerprintPayload, IdemflowError, InMemoryStore, idempotent } from 'idemflow';
import { BACKENDS, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const ORDER = { customer: 'c-7', items: [{ sku: 'A-1', quantity: 2 }], totalUnits: '4200' };

/** A clock the test moves: keys age without waiting. */
function clock(start = Date.UTC(2030, 0, 1)) {
  let now = start;
  return {
    now: () => now,
    advance: (ms) => {
      now += ms;
    },
  };
}

async function rejectsWith(promise, code, disposition) {
  let caught;
  await assert.rejects(promise, (error) => {
    caught = error;
    return true;
  });
  assert.ok(caught instanceof IdemflowError, `expected an IdemflowError, got ${caught?.stack ?? caught}`);
  assert.equal(caught.code, code, caught.message);
  if (disposition) assert.equal(caught.disposition, disposition);
  return caught;
}

/** A gate a test opens: `wait()` resolves once `open()` is called. */
function gate() {
  let open;
  const promise = new Promise((resolve) => {
    open = resolve;
  });
  return { wait: () => promise, open };
}

/** A call on `key` whose work has started and waits until `held.open()`; `first` is its answer. */
async function holding(store, key) {
  const held = gate();
  const entered = gate();
  const first = idempotent(store, { key, payload: ORDER }, async () => {
    entered.open();
    await held.wait();
    return 'first';
  });
  await entered.wait();
  return { first, held };
}

/** `work` that counts its runs and answers `output` (what a handler would return). */
function counted(output) {
  const work = async () => {
    work.runs += 1;
    return typeof output === 'function' ? output(work.runs) : output;
  };
  work.runs = 0;
  return work;
}

const cases = [
  [
    'the first call runs work and records its output; the same key and payload replay it without running work',
    async (h) => {
      const work = counted({ orderId: 'o-1', totalUnits: '4200' });
      const writing = async (tx) => {
        await h.shipments.insert(tx, 'order-key-1', 'o-1');
        return work(tx);
      };
      const first = await idempotent(h.store, { key: 'order-key-1', payload: ORDER }, writing);
      assert.deepEqual(first, {
        output: { orderId: 'o-1', totalUnits: '4200' },
        replayed: false,
        recordedAt: first.recordedAt,
        key: 'order-key-1',
        fingerprint: fingerprintPayload(ORDER),
      });
      const again = await idempotent(h.store, { key: 'order-key-1', payload: structuredClone(ORDER) }, writing);
      assert.deepEqual(again, { ...first, replayed: true });
      assert.equal(work.runs, 1);
      assert.equal(await h.count('inbox'), 1);
      assert.equal(await h.shipments.count(), 1, 'the row work wrote through tx.client committed with the key');
    },
  ],

  [
    'a payload that differs only in member order or number spelling is the same payload',
    async (h) => {
      const work = counted('done');
      await idempotent(h.store, { key: 'k-spelling', payload: { a: 1, b: [1.5, 'x'] } }, work);
      const again = await idempotent(h.store, { key: 'k-spelling', payload: { b: [15e-1, 'x'], a: 1.0 } }, work);
      assert.equal(again.replayed, true);
      assert.equal(work.runs, 1);
    },
  ],

  [
    'the same key with another payload is IDEMPOTENCY_KEY_CONFLICT (reconcile) and runs nothing',
    async (h) => {
      const work = counted('first');
      await idempotent(h.store, { key: 'k-conflict', payload: ORDER }, work);
      const other = { ...ORDER, totalUnits: '4300' };
      const error = await rejectsWith(
        idempotent(h.store, { key: 'k-conflict', payload: other }, work),
        'IDEMPOTENCY_KEY_CONFLICT',
        'reconcile',
      );
      assert.deepEqual(error.details, {
        key: 'k-conflict',
        storedFingerprint: fingerprintPayload(ORDER),
        fingerprint: fingerprintPayload(other),
      });
      assert.equal(work.runs, 1);
    },
  ],

  [
    'work that throws leaves no record and none of its rows: the error comes out as thrown and the retry runs work again',
    async (h) => {
      const boom = new Error('payment provider down');
      const failing = async (tx) => {
        await h.shipments.insert(tx, 'k-throws', 'o-lost');
        throw boom;
      };
      await assert.rejects(idempotent(h.store, { key: 'k-throws', payload: ORDER }, failing), (error) => error === boom);
      assert.equal(await h.count('inbox'), 0);
      assert.equal(await h.shipments.count(), 0, 'the row work wrote rolled back with it');
      const work = counted({ ok: true });
      const retried = await idempotent(h.store, { key: 'k-throws', payload: ORDER }, work);
      assert.deepEqual([retried.replayed, retried.output, work.runs], [false, { ok: true }, 1]);
    },
  ],

  [
    "the output is kept as onApplied's is: the first answer and every replay are the same value",
    async (h) => {
      const work = counted({ at: '1970-01-01T00:00:00.000Z', amount: 1.5, nothing: null, list: [1, 'two'] });
      const first = await idempotent(h.store, { key: 'k-json', payload: 1 }, work);
      const replay = await idempotent(h.store, { key: 'k-json', payload: 1 }, work);
      assert.deepEqual(first.output, { at: '1970-01-01T00:00:00.000Z', amount: 1.5, nothing: null, list: [1, 'two'] });
      assert.deepEqual(replay.output, first.output);
      const none = await idempotent(h.store, { key: 'k-undefined', payload: 1 }, async () => undefined);
      assert.equal(none.output, null);
      assert.equal((await idempotent(h.store, { key: 'k-undefined', payload: 1 }, async () => 'never')).output, null);
    },
  ],

  [
    'an output that is not JSON, or too large, is INVALID_ARGUMENT (fatal, as for onApplied) and nothing is recorded',
    async (h) => {
      for (const output of [{ f: () => 1 }, { n: 10n }, { at: new Date(0) }, { x: Number.NaN }]) {
        await rejectsWith(
          idempotent(h.store, { key: 'k-bad-output', payload: 1 }, async () => output),
          'INVALID_ARGUMENT',
          'fatal',
        );
      }
      await rejectsWith(
        idempotent(h.store, { key: 'k-bad-output', payload: 1 }, async () => 'x'.repeat(20_000)),
        'INVALID_ARGUMENT',
      );
      await rejectsWith(
        idempotent(h.store, { key: 'k-bad-output', payload: 1 }, async () => 'x'.repeat(100), { maxOutputBytes: 64 }),
        'INVALID_ARGUMENT',
      );
      assert.equal(
        (await idempotent(h.store, { key: 'k-large-output', payload: 1 }, async () => 'x'.repeat(20_000), { maxOutputBytes: 32_768 }))
          .output.length,
        20_000,
      );
      assert.equal(await h.count('inbox'), 1);
    },
  ],

  [
    '25 concurrent calls with one key run work once and all answer its output (waitMs)',
    async (h) => {
      const work = counted(async (run) => ({ run }));
      const slow = async (tx) => {
        await h.shipments.insert(tx, 'k-25', 'o-25');
        await new Promise((resolve) => setTimeout(resolve, 30));
        return work(tx);
      };
      const results = await Promise.all(
        Array.from({ length: 25 }, () => idempotent(h.store, { key: 'k-25', payload: ORDER }, slow, { waitMs: 20_000 })),
      );
      assert.equal(work.runs, 1);
      assert.equal(results.filter((r) => !r.replayed).length, 1);
      for (const result of results) assert.deepEqual(result.output, { run: 1 });
      assert.equal(await h.shipments.count(), 1);
    },
  ],

  [
    'concurrent calls for a key already recorded all replay at once: none is in progress',
    async (h) => {
      const work = counted('stored');
      await idempotent(h.store, { key: 'k-replays', payload: ORDER }, work);
      const replays = await Promise.all(Array.from({ length: 25 }, () => idempotent(h.store, { key: 'k-replays', payload: ORDER }, work)));
      assert.deepEqual(new Set(replays.map((r) => `${r.replayed}:${r.output}`)), new Set(['true:stored']));
      assert.equal(work.runs, 1);
    },
  ],

  [
    'a call while another holds the key answers IDEMPOTENCY_KEY_IN_PROGRESS (retry) with the retry hint, at once by default',
    async (h) => {
      const { first, held } = await holding(h.store, 'k-held');
      const started = Date.now();
      const error = await rejectsWith(
        idempotent(h.store, { key: 'k-held', payload: ORDER }, counted('second'), { retryAfterMs: 250 }),
        'IDEMPOTENCY_KEY_IN_PROGRESS',
        'retry',
      );
      assert.deepEqual(error.details, { key: 'k-held', retryAfterMs: 250 });
      assert.ok(Date.now() - started < 1000, 'it did not wait');
      // Waiting is bounded: the holder is still running when the bound runs out.
      const waited = Date.now();
      await rejectsWith(
        idempotent(h.store, { key: 'k-held', payload: ORDER }, counted('third'), { waitMs: 150 }),
        'IDEMPOTENCY_KEY_IN_PROGRESS',
      );
      assert.ok(Date.now() - waited >= 140, 'it waited for the bound');
      held.open();
      assert.equal((await first).output, 'first');
      assert.equal((await idempotent(h.store, { key: 'k-held', payload: ORDER }, counted('later'))).output, 'first');
    },
  ],

  [
    'retention expires a key by age: once its receipt is purged the key runs again',
    async (h) => {
      const work = counted((run) => ({ run }));
      await idempotent(h.store, { key: 'k-expires', payload: ORDER }, work);
      h.time.advance(60_000);
      const retention = createRetention(h.store, {
        receiptsOlderThan: 30_000,
        every: 60_000,
        start: false,
        lockName: `keys-${uniquePrefix()}`,
      });
      const run = await retention.runOnce();
      assert.equal(run.receipts.deleted, 1);
      const again = await idempotent(h.store, { key: 'k-expires', payload: ORDER }, work);
      assert.deepEqual([again.replayed, again.output, work.runs], [false, { run: 2 }, 2]);
    },
  ],

  [
    'a key that an event receipt already uses is a conflict, never a replay of the event',
    async (h) => {
      await h.store.transaction((tx) =>
        tx.insertReceipt({
          eventId: 'shared-id',
          fingerprint: `fp1:${'0'.repeat(64)}`,
          workflowId: 'w',
          eventType: 'T',
          outcome: 'applied',
          ruleSet: null,
        }),
      );
      await rejectsWith(idempotent(h.store, { key: 'shared-id', payload: ORDER }, counted('x')), 'IDEMPOTENCY_KEY_CONFLICT');
    },
  ],

  [
    'arguments out of shape are INVALID_ARGUMENT before anything runs',
    async (h) => {
      const work = counted('x');
      await rejectsWith(idempotent(h.store, { key: '', payload: 1 }, work), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k\uD800', payload: 1 }, work), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k'.repeat(513), payload: 1 }, work), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k' }, work), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k', payload: 1, fingerprint: 'pf1:x' }, work), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k', fingerprint: 'pf1:x' }, work), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k', payload: 1 }, 'not a function'), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k', payload: 1 }, work, { waitMs: -1 }), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k', payload: 1 }, work, { wait: 10 }), 'INVALID_ARGUMENT');
      await rejectsWith(idempotent(h.store, { key: 'k', payload: undefined }, work), 'INVALID_PAYLOAD');
      await rejectsWith(idempotent({}, { key: 'k', payload: 1 }, work), 'INVALID_ARGUMENT');
      assert.equal(work.runs, 0);
    },
  ],
];

/** Cases with two stores over the same tables but apart in this process (their own pools): the hold must come from the database. */
const acrossConnections = [
  [
    'a second connection sees the key held by the first and waits for it, or answers in progress',
    async (h) => {
      const other = await h.second();
      const { first, held } = await holding(h.store, 'k-across');
      await rejectsWith(idempotent(other, { key: 'k-across', payload: ORDER }, counted('second')), 'IDEMPOTENCY_KEY_IN_PROGRESS', 'retry');
      const work = counted('third');
      const waiting = idempotent(other, { key: 'k-across', payload: ORDER }, work, { waitMs: 10_000 });
      setTimeout(() => held.open(), 100);
      assert.deepEqual([(await first).output, (await waiting).output, (await waiting).replayed, work.runs], ['first', 'first', true, 0]);
    },
  ],
];

async function memoryHarness() {
  const time = clock();
  const memory = new InMemoryStore([], { now: time.now });
  const shipments = shipmentsOf('memory', { store: memory }, 'shipments');
  return { store: memory, time, shipments, count: async (which) => memory.snapshot()[which].size, close: async () => {} };
}

async function durableHarness(env, kind) {
  const time = clock();
  const tables = tablesFor(uniquePrefix());
  const opened = [];
  const open = async () => {
    const helper = await env.open(tables, { now: time.now });
    opened.push(helper);
    return helper;
  };
  const main = await open();
  await main.store.migrate();
  const shipments = shipmentsOf(kind, main, `${tables.inbox}_shipments`);
  await shipments.create();
  return {
    store: main.store,
    time,
    shipments,
    count: main.count,
    second: async () => (await open()).store,
    async close() {
      await main.drop();
      if (main.query)
        await main
          .query(`DROP TABLE IF EXISTS ${kind === 'mysql' ? `\`${tables.inbox}_shipments\`` : `"${tables.inbox}_shipments"`}`, [])
          .catch(() => {});
      for (const helper of opened.reverse()) await helper.close();
    },
  };
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`keyed mode: ${backend.name}`, { skip: backend.skip }, () => {
    let env;
    before(async () => {
      env = backend.durable ? await backend.setup() : null;
    });
    after(async () => {
      await env?.close();
    });
    // Apart in one process only where a second connection is a second session of a server.
    const apart = ['pg', 'mysql'].includes(backend.id) ? acrossConnections : [];
    for (const [name, run] of [...cases, ...apart]) {
      it(name, async () => {
        const h = env === null ? await memoryHarness() : await durableHarness(env, backend.id);
        try {
          await run(h);
        } finally {
          await h.close();
        }
      });
    }
  });
}
