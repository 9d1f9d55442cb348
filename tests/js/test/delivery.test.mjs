// The delivery handler: every verdict it gives (ack per outcome, retry with a
// hint, dead-letter, park) and the errors it throws (fatal), over the
// in-memory store and SQLite. No broker here: brokers.test.mjs runs real ones.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { describe } from 'node:test';
import { createDeliveryHandler, IdemflowError, InMemoryStore, RuleSet } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';
import { MYSQL_URL, openStore, PG_URL, REDIS_URL, tablesFor, uniquePrefix } from '../workers/backends.mjs';

// Every deposit event here is the chain watcher's first observation of the deposit, its detection: sequence 1.
const DEPOSIT = { depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000', sequence: 1 };
const detection = (eventId = 'watcher:detect-1', extra = {}) => ({
  eventId,
  workflowId: 'swap-42',
  type: 'DEPOSIT_DETECTED',
  ...DEPOSIT,
  ...extra,
});
const deadline = (eventId = 'timer:deadline-1') => ({ eventId, workflowId: 'swap-42', type: 'DEADLINE_PASSED' });
const waitingSwap = () => ({ id: 'swap-42', status: 'waiting', revision: 1 });

function tempDir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'idemflow-delivery-'));
}

const backends = {
  memory: {
    async open() {
      const store = new InMemoryStore([waitingSwap()]);
      return { store, close() {} };
    },
  },
  sqlite: {
    async open() {
      const dir = tempDir();
      const store = SqliteStore.open(path.join(dir, 'swaps.db'));
      await store.migrate();
      await store.putWorkflow(waitingSwap());
      return {
        store,
        close() {
          try {
            store.close();
          } catch {
            /* closed by the test */
          }
          fs.rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
  ...(REDIS_URL
    ? {
        redis: {
          async open() {
            const helper = await openStore('redis', { tables: tablesFor(uniquePrefix()) });
            await helper.store.migrate();
            await helper.store.putWorkflow(waitingSwap());
            return {
              store: helper.store,
              async close() {
                await helper.drop();
                await helper.close();
              },
            };
          },
        },
      }
    : {}),
};

function assertInvalidBody(verdict, reason) {
  assert.equal(verdict.action, 'dead-letter');
  assert.ok(verdict.error instanceof IdemflowError);
  assert.equal(verdict.error.code, 'INVALID_EVENT');
  assert.equal(verdict.error.disposition, 'reject');
  assert.equal(verdict.error.details.reason, reason);
}

for (const [name, backend] of Object.entries(backends)) {
  describe(`delivery handler over ${name}`, () => {
    async function withHandler(options, fn) {
      const opened = await backend.open();
      try {
        await fn(createDeliveryHandler(opened.store, { ruleSet: 'deposit-swap', ...options }), opened.store);
      } finally {
        await opened.close();
      }
    }

    test('acks every outcome: applied, duplicate-delivery, already-applied, stale', () =>
      withHandler({}, async (handle, store) => {
        const applied = await handle(JSON.stringify(detection()));
        assert.equal(applied.action, 'ack');
        assert.equal(applied.outcome, 'applied');
        assert.equal(applied.result.outcome, 'applied');
        assert.equal(applied.result.status, 'deposit');
        assert.equal(applied.error, undefined);
        assert.equal(applied.retryAfterMs, undefined);

        const duplicate = await handle(Buffer.from(JSON.stringify(detection())));
        assert.deepEqual({ action: duplicate.action, outcome: duplicate.outcome }, { action: 'ack', outcome: 'duplicate-delivery' });

        const republished = await handle(new TextEncoder().encode(JSON.stringify(detection('other-watcher:detect-9'))));
        assert.deepEqual({ action: republished.action, outcome: republished.outcome }, { action: 'ack', outcome: 'already-applied' });

        // A deadline the deposit has already beaten changes nothing.
        const stale = await handle(deadline());
        assert.deepEqual({ action: stale.action, outcome: stale.outcome }, { action: 'ack', outcome: 'stale' });
        assert.equal((await store.getWorkflow('swap-42')).status, 'deposit');
      }));

    test('dead-letters bodies that are not events: not JSON, not UTF-8, not an object, too large, invalid', () =>
      withHandler({ maxBytes: 1024 }, async (handle, store) => {
        assertInvalidBody(await handle('{"eventId": '), 'not-json');
        assertInvalidBody(await handle(Buffer.from('<xml/>')), 'not-json');
        assertInvalidBody(await handle(''), 'not-json');
        assertInvalidBody(await handle(Buffer.from([0x7b, 0xff, 0xfe, 0x7d])), 'not-utf8');
        for (const body of ['42', '"text"', 'null', '[{"eventId":"e"}]', 'true']) {
          assertInvalidBody(await handle(body), 'not-an-object');
        }
        for (const value of [null, 7, [detection()]]) assertInvalidBody(await handle(value), 'not-an-object');
        const large = JSON.stringify({ ...detection(), padding: 'x'.repeat(2000) });
        const tooLarge = await handle(large);
        assertInvalidBody(tooLarge, 'too-large');
        assert.equal(tooLarge.error.details.maxBytes, 1024);
        assertInvalidBody(await handle(Buffer.from(large)), 'too-large');
        // Multi-byte characters count as bytes, not as UTF-16 units.
        assertInvalidBody(await handle(JSON.stringify({ ...detection(), note: '€'.repeat(400) })), 'too-large');

        const invalid = await handle(JSON.stringify(detection('watcher:detect-2', { amountUnits: 12.5 })));
        assert.equal(invalid.action, 'dead-letter');
        assert.equal(invalid.error.code, 'INVALID_EVENT');
        assert.equal(invalid.error.details.field, 'amountUnits');
        // None of them wrote anything.
        assert.equal((await store.getWorkflow('swap-42')).status, 'waiting');
        assert.equal(await store.getReceipt('watcher:detect-2'), null);
      }));

    test('the default maxBytes is 64 KiB', () =>
      withHandler({}, async (handle) => {
        const body = (size) => {
          const base = JSON.stringify({ ...detection(), padding: '' });
          return JSON.stringify({ ...detection(), padding: 'x'.repeat(size - base.length) });
        };
        assert.equal(body(65536).length, 65536);
        assert.equal((await handle(body(65536))).action, 'ack');
        assertInvalidBody(await handle(body(65537)), 'too-large');
      }));

    test('parks genuine conflicts: an event id reused with another payload, a guard that fails', () =>
      withHandler({}, async (handle) => {
        assert.equal((await handle(detection())).action, 'ack');
        const conflict = await handle(detection('watcher:detect-1', { amountUnits: '1' }));
        assert.equal(conflict.action, 'park');
        assert.equal(conflict.error.code, 'EVENT_ID_CONFLICT');
        assert.equal(conflict.error.disposition, 'reconcile');
        const mismatch = await handle(detection('watcher:detect-3', { amountUnits: '1' }));
        assert.equal(mismatch.action, 'park');
        assert.equal(mismatch.error.code, 'IDENTITY_MISMATCH');
      }));

    test('retries an event before its workflow with a hint that grows with the delivery count and stays bounded', () =>
      withHandler({ baseDelayMs: 100, maxDelayMs: 1000 }, async (handle) => {
        const early = { ...detection('watcher:early'), workflowId: 'swap-not-yet' };
        const hints = [];
        for (let attempt = 1; attempt <= 8; attempt += 1) {
          const verdict = await handle(JSON.stringify(early), { attempt });
          assert.equal(verdict.action, 'retry');
          assert.equal(verdict.error.code, 'UNKNOWN_WORKFLOW');
          const ceiling = Math.min(1000, 100 * 2 ** (attempt - 1));
          assert.ok(
            verdict.retryAfterMs >= ceiling / 2 && verdict.retryAfterMs <= ceiling,
            `attempt ${attempt}: ${verdict.retryAfterMs} within [${ceiling / 2}, ${ceiling}]`,
          );
          hints.push(verdict.retryAfterMs);
        }
        // The same event and attempt get the same hint; attempt 1 is the default.
        assert.equal((await handle(early)).retryAfterMs, hints[0]);
        assert.equal((await handle(early, {})).retryAfterMs, hints[0]);
        // Jittered: different events do not all wait the same time.
        const spread = new Set();
        for (let i = 0; i < 20; i += 1)
          spread.add((await handle({ ...early, eventId: `watcher:early-${i}` }, { attempt: 6 })).retryAfterMs);
        assert.ok(spread.size > 1, 'hints are jittered across events');
      }));

    test('refuses a delivery count that is not a positive safe integer: the worker counts wrong and must stop', () =>
      withHandler({}, async (handle) => {
        const early = { ...detection('watcher:early'), workflowId: 'swap-not-yet' };
        for (const attempt of [0, -1, 1.5, '2', NaN, Infinity, undefined, null, 2 ** 53]) {
          await assert.rejects(
            handle(early, { attempt }),
            (error) => {
              assert.ok(error instanceof IdemflowError);
              assert.equal(error.code, 'INVALID_ARGUMENT');
              assert.equal(error.disposition, 'fatal');
              assert.equal(error.details.field, 'attempt');
              return true;
            },
            `attempt ${String(attempt)}`,
          );
        }
      }));

    test('parks a message it would retry once it has been delivered maxDeliveries times, with the last error', () =>
      withHandler({ maxDeliveries: 3 }, async (handle) => {
        const early = { ...detection('watcher:early'), workflowId: 'swap-not-yet' };
        assert.equal((await handle(early, { attempt: 2 })).action, 'retry');
        const parked = await handle(early, { attempt: 3 });
        assert.equal(parked.action, 'park');
        assert.equal(parked.error.code, 'UNKNOWN_WORKFLOW');
        assert.deepEqual([parked.deliveries, parked.maxDeliveries], [3, 3]);
        assert.equal((await handle(early, { attempt: 9 })).action, 'park');
        // A verdict that is not a retry is not touched by the cap.
        assert.equal((await handle('{', { attempt: 9 })).action, 'dead-letter');
      }));

    test('the delivery cap is on by default (20) and can be lifted with Infinity', async () => {
      const early = { ...detection('watcher:early'), workflowId: 'swap-not-yet' };
      await withHandler({}, async (handle) => {
        assert.equal((await handle(early, { attempt: 19 })).action, 'retry');
        assert.equal((await handle(early, { attempt: 20 })).action, 'park');
      });
      await withHandler({ maxDeliveries: Infinity, baseDelayMs: 100, maxDelayMs: 1000 }, async (handle) => {
        const verdict = await handle(early, { attempt: 1e9 });
        assert.equal(verdict.action, 'retry');
        assert.ok(verdict.retryAfterMs <= 1000);
      });
    });

    test('throws fatal when the store has no tables, instead of retrying every message', {
      skip: name === 'sqlite' ? false : `${name} has no schema to miss`,
    }, async () => {
      const dir = tempDir();
      const store = SqliteStore.open(path.join(dir, 'swaps.db'), {
        tables: { workflows: 'missing_workflows', inbox: 'missing_inbox', outbox: 'missing_outbox' },
      });
      try {
        const handle = createDeliveryHandler(store, { ruleSet: 'deposit-swap' });
        await assert.rejects(handle(JSON.stringify(detection())), (error) => {
          assert.ok(error instanceof IdemflowError);
          assert.equal(error.disposition, 'fatal');
          assert.equal(error.details.reason, 'missing-table');
          return true;
        });
      } finally {
        store.close();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    test('answers retry when the database is unreachable', async () => {
      const opened = await backend.open();
      try {
        let store = opened.store;
        if (name === 'memory') {
          // An in-memory store cannot lose its database; a wrapper plays the outage.
          store = {
            transaction: async () => {
              throw new IdemflowError('STORE_UNAVAILABLE', 'connection refused', { details: { reason: 'connection-refused' } });
            },
          };
        } else if (name === 'redis') {
          // A client that has quit: its next command fails as a lost connection does.
          const { createClient } = await import('redis');
          const { RedisStore } = await import('idemflow/redis');
          const client = createClient({ url: REDIS_URL });
          client.on('error', () => {});
          await client.connect();
          await client.quit();
          store = new RedisStore(client, { tables: opened.store.tables });
        } else {
          opened.store.close();
        }
        const handle = createDeliveryHandler(store, { ruleSet: 'deposit-swap' });
        const verdict = await handle(JSON.stringify(detection()), { attempt: 3 });
        assert.equal(verdict.action, 'retry');
        assert.equal(verdict.error.code, 'STORE_UNAVAILABLE');
        assert.ok(verdict.retryAfterMs >= 1000 && verdict.retryAfterMs <= 2000, String(verdict.retryAfterMs));
      } finally {
        await opened.close();
      }
    });
  });
}

describe('delivery handler arguments and worker faults', () => {
  const store = () => new InMemoryStore([waitingSwap()]);

  function assertFatal(fn, reason) {
    assert.throws(fn, (error) => {
      assert.ok(error instanceof IdemflowError, String(error));
      assert.equal(error.disposition, 'fatal');
      if (reason) assert.equal(error.details.reason, reason);
      return true;
    });
  }

  test('refuses at creation anything that is not a store, a bad rule set and bad options, as fatal', () => {
    for (const notAStore of [undefined, null, {}, 'postgres://', { transaction: 'yes' }]) {
      assertFatal(() => createDeliveryHandler(notAStore), 'not a store');
    }
    assertFatal(() => createDeliveryHandler(store(), { ruleSet: 'deposit-swop' }));
    assertFatal(() => createDeliveryHandler(store(), { ruleSet: 42 }));
    assertFatal(() => createDeliveryHandler(store(), null));
    assertFatal(() => createDeliveryHandler(store(), { parse: 'json' }));
    for (const maxBytes of [0, -1, 1.5, Number.NaN, '1024', 2 ** 40]) {
      assertFatal(() => createDeliveryHandler(store(), { maxBytes }), 'out of range');
      assert.throws(
        () => createDeliveryHandler(store(), { maxBytes }),
        (error) => error.details.field === 'maxBytes',
      );
    }
    assertFatal(() => createDeliveryHandler(store(), { baseDelayMs: -5 }));
  });

  test('throws a fatal error the store raises while handling, and an INVALID_ARGUMENT as fatal', async () => {
    const fatalStore = {
      transaction: async () => {
        throw new IdemflowError('STORE_UNAVAILABLE', 'relation does not exist', {
          disposition: 'fatal',
          details: { reason: 'missing-table' },
        });
      },
    };
    await assert.rejects(createDeliveryHandler(fatalStore)(detection()), (error) => error.disposition === 'fatal');

    // A store that answers with another workflow than asked: the core refuses the call itself.
    const wrong = new InMemoryStore([{ id: 'swap-7', status: 'waiting', revision: 1 }]);
    const lying = {
      transaction: (fn) =>
        wrong.transaction((tx) =>
          fn({
            ...tx,
            getReceipt: (id) => tx.getReceipt(id),
            getWorkflow: () => tx.getWorkflow('swap-7'),
            insertReceipt: (r) => tx.insertReceipt(r),
            writeWorkflow: (w) => tx.writeWorkflow(w),
            insertOperation: (o) => tx.insertOperation(o),
          }),
        ),
    };
    await assert.rejects(createDeliveryHandler(lying)(detection()), (error) => {
      assert.equal(error.code, 'INVALID_ARGUMENT');
      assert.equal(error.disposition, 'fatal');
      return true;
    });
  });

  test('lets a non-idemflow error from the store through: a bug, not a verdict', async () => {
    const broken = {
      transaction: async () => {
        throw new TypeError('tx.query is not a function');
      },
    };
    await assert.rejects(createDeliveryHandler(broken)(detection()), TypeError);
  });

  test('never throws for hostile messages', async () => {
    const handle = createDeliveryHandler(store());
    const throwing = new Proxy(
      {},
      {
        get() {
          throw new Error('boom');
        },
        getOwnPropertyDescriptor() {
          throw new Error('boom');
        },
        ownKeys() {
          throw new Error('boom');
        },
      },
    );
    const withGetter = Object.defineProperty({ ...detection('g-1') }, 'amountUnits', {
      enumerable: true,
      get() {
        throw new Error('getter');
      },
    });
    for (const message of [
      throwing,
      withGetter,
      { eventId: 'x'.repeat(10_000), workflowId: 'swap-42', type: 'DEPOSIT_DETECTED' },
      Symbol('s'),
      () => 1,
      10n,
      new Date(),
      new Map(),
    ]) {
      const verdict = await handle(message);
      assert.equal(verdict.action, 'dead-letter', String(typeof message));
      assert.equal(verdict.error.code, 'INVALID_EVENT');
    }
  });

  test('uses a custom parse, sync or async; its throw dead-letters the message', async () => {
    const handle = createDeliveryHandler(store(), {
      ruleSet: RuleSet.builtin('deposit-swap'),
      parse: async (body) => {
        const [eventId, type] = String(body).split('|');
        if (!type) throw new Error('expected eventId|type');
        return { eventId, type, workflowId: 'swap-42', ...DEPOSIT };
      },
    });
    assert.equal((await handle('detect-1|DEPOSIT_DETECTED')).outcome, 'applied');
    const refused = await handle('garbage');
    assert.equal(refused.action, 'dead-letter');
    assert.equal(refused.error.details.reason, 'unparseable');
    assert.match(refused.error.message, /expected eventId\|type/);
  });
});

describe('a server database without the store tables is fatal', () => {
  for (const [kind, url] of [
    ['pg', PG_URL],
    ['mysql', MYSQL_URL],
  ]) {
    test(`${kind}: the handler throws fatal (missing-table) instead of retrying`, {
      skip: url ? false : `IDEMFLOW_${kind === 'pg' ? 'PG' : 'MYSQL'}_URL is not set`,
    }, async () => {
      const db = await openStore(kind, { tables: tablesFor(uniquePrefix()), url }); // never migrated
      try {
        const handle = createDeliveryHandler(db.store, { ruleSet: 'deposit-swap' });
        await assert.rejects(handle(JSON.stringify(detection())), (error) => {
          assert.ok(error instanceof IdemflowError);
          assert.equal(error.code, 'STORE_UNAVAILABLE');
          assert.equal(error.disposition, 'fatal');
          assert.equal(error.details.reason, 'missing-table');
          return true;
        });
      } finally {
        await db.close();
      }
    });
  }
});

test('handle.batch: one verdict per message, in order, from one transaction', async () => {
  const store = new InMemoryStore([waitingSwap(), { id: 'swap-7', status: 'waiting', revision: 0 }]);
  let transactions = 0;
  const counting = {
    transaction: (fn) => {
      transactions += 1;
      return store.transaction(fn);
    },
  };
  const handle = createDeliveryHandler(counting);
  const verdicts = await handle.batch(
    [
      JSON.stringify(detection()),
      Buffer.from(JSON.stringify(detection())),
      '{"eventId": ',
      { ...detection('watcher:detect-2'), amountUnits: 12 },
      { eventId: 'x-1', workflowId: 'swap-missing', type: 'DEPOSIT_DETECTED', ...DEPOSIT },
      { ...detection('watcher:detect-3'), workflowId: 'swap-7' },
    ],
    { attempts: [1, 2, 1, 1, 3, 1] },
  );
  assert.deepEqual(
    verdicts.map((v) => [v.action, v.outcome ?? v.error?.code]),
    [
      ['ack', 'applied'],
      ['ack', 'duplicate-delivery'],
      ['dead-letter', 'INVALID_EVENT'],
      ['dead-letter', 'INVALID_EVENT'],
      ['retry', 'UNKNOWN_WORKFLOW'],
      ['ack', 'applied'],
    ],
  );
  assert.equal(transactions, 1, 'the events shared one transaction');
  assert.equal((await store.getWorkflow('swap-42')).status, 'deposit');
  assert.deepEqual(await handle.batch([]), []);
  await assert.rejects(handle.batch('not an array'), { code: 'INVALID_ARGUMENT', disposition: 'fatal' });
});

test('handle.batch refuses delivery counts of another length, or one that is not a positive safe integer, before any I/O', async () => {
  let transactions = 0;
  const store = new InMemoryStore([waitingSwap()]);
  const counting = {
    transaction: (fn, options) => {
      transactions += 1;
      return store.transaction(fn, options);
    },
  };
  const handle = createDeliveryHandler(counting);
  const bodies = [JSON.stringify(detection()), JSON.stringify(detection('watcher:detect-2'))];
  await assert.rejects(handle.batch(bodies, { attempts: [1] }), { code: 'INVALID_ARGUMENT', disposition: 'fatal' });
  await assert.rejects(handle.batch(bodies, { attempts: [1, 2, 3] }), { code: 'INVALID_ARGUMENT', disposition: 'fatal' });
  for (const bad of [0, '1', undefined, 1.5]) {
    await assert.rejects(handle.batch(bodies, { attempts: [1, bad] }), (error) => {
      assert.equal(error.disposition, 'fatal');
      assert.equal(error.details.field, 'attempts[1]');
      return true;
    });
  }
  assert.equal(transactions, 0);
  assert.equal((await handle.batch(bodies)).length, 2, 'without attempts every message is a first delivery');
});

test('createDeliveryHandler runs onApplied in the transaction: a throw is a retry verdict with nothing written; the redelivery acks with the output', async () => {
  const store = new InMemoryStore([waitingSwap()]);
  let fail = true;
  const handle = createDeliveryHandler(store, {
    onApplied: (tx, decision) => {
      tx.table('ledger').set(decision.event.eventId, { workflowId: decision.event.workflowId });
      if (fail) throw new Error('the ledger is locked');
      return { ledgerKey: decision.event.eventId };
    },
  });
  const body = JSON.stringify(detection());
  const failed = await handle(body, { attempt: 1 });
  assert.equal(failed.action, 'retry');
  assert.equal(failed.error.code, 'HANDLER_FAILED');
  assert.equal(store.snapshot().inbox.size, 0);
  assert.equal(store.snapshot().tables.get('ledger'), undefined, "the callback's write rolled back with the rest");
  fail = false;
  const [acked, again] = await handle.batch([body, body], { attempts: [2, 2] });
  assert.equal(acked.action, 'ack');
  assert.deepEqual(acked.result.output, { ledgerKey: 'watcher:detect-1' });
  assert.deepEqual(again.result.original.output, { ledgerKey: 'watcher:detect-1' });
  assert.equal(store.snapshot().tables.get('ledger').size, 1);
  assert.throws(() => createDeliveryHandler(store, { onApplied: 'yes' }), { code: 'INVALID_ARGUMENT', disposition: 'fatal' });
});
