// Retention that runs itself (createRetention): one runner at a time across
// processes, what it purges and keeps, and what replay protection is left
// after a receipt is purged.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { createRetention, fingerprint, IdemflowError, InMemoryStore } from 'idemflow';
import { openStore, PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { SEED_EVENT as CONFIRMED, detectedSwap } from '../workers/fixtures.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);

const DEPOSIT_REF = 'btc-mainnet:tx-abc:vout-0';
const WORKFLOW = detectedSwap({ id: 'swap-42', revision: 3, depositRef: DEPOSIT_REF, amountUnits: '12500000' });

/** A clock the test moves. */
function clock(start = 1_700_000_000_000) {
  let now = start;
  return {
    now: () => now,
    advance: (ms) => {
      now += ms;
    },
  };
}

/** Pairs of runs (from any workers) whose [startedAt, endedAt] intervals overlap. */
function overlaps(runs) {
  const sorted = [...runs].sort((a, b) => a.startedAt - b.startedAt);
  const found = [];
  for (let i = 1; i < sorted.length; i += 1) {
    if (sorted[i].startedAt < sorted[i - 1].endedAt) found.push([sorted[i - 1], sorted[i]]);
  }
  return found;
}

async function workers(spec, { ms = 1500, lockNames = [null, null] } = {}) {
  const worker = path.join(here, '..', 'workers', 'retention-worker.mjs');
  const outputs = await Promise.all(
    lockNames.map((lockName) => run(process.execPath, [worker, JSON.stringify({ spec, ms, lockName })], { timeout: 60_000 })),
  );
  return outputs.map(({ stdout }) => JSON.parse(stdout));
}

async function seedReceipts(store, count) {
  await store.putWorkflow({ id: 'order-0', status: 'shipping', revision: 1 });
  for (let i = 0; i < count; i += 1) {
    await store.process({ eventId: `evt-${i}`, workflowId: 'order-0', type: 'SHIPMENT_REQUESTED' }, { ruleSet: 'order-shipment' });
  }
}

describe('createRetention', () => {
  it('purges old receipts and done operations in batches, keeps dead ones, and reports each run', async () => {
    const time = clock();
    const store = InMemoryStore.fromSnapshot(
      {
        outbox: [
          ['op-done', { id: 'op-done', type: 'T', workflowId: 'w', eventId: 'e', status: 'done', updatedAt: time.now() }],
          ['op-dead', { id: 'op-dead', type: 'T', workflowId: 'w', eventId: 'e', status: 'dead', updatedAt: time.now() }],
          ['op-pending', { id: 'op-pending', type: 'T', workflowId: 'w', eventId: 'e', status: 'pending', updatedAt: time.now() }],
        ],
      },
      { now: time.now },
    );
    await seedReceipts(store, 5);
    time.advance(60_000);
    await store.process({ eventId: 'evt-new', workflowId: 'order-0', type: 'SHIPMENT_REQUESTED' }, { ruleSet: 'order-shipment' });
    const retention = createRetention(store, {
      receiptsOlderThan: 30_000,
      operationsOlderThan: 30_000,
      every: 60_000,
      batchSize: 2,
      start: false,
    });
    const reported = [];
    retention.on('run', (r) => reported.push(r));
    const report = await retention.runOnce();
    assert.deepEqual(report.receipts, { deleted: 5, batches: 3 });
    assert.deepEqual(report.operations, { deleted: 1, batches: 1 });
    assert.ok(report.endedAt >= report.startedAt);
    assert.deepEqual(reported, [report]);
    const { inbox, outbox } = store.snapshot();
    assert.deepEqual([...inbox.keys()], ['evt-new']);
    assert.deepEqual([...outbox.keys()].sort(), ['op-dead', 'op-pending']);
    await retention.stop();
  });

  it('a replay after its receipt was purged is still already-applied: the rule set guard remains', async () => {
    const time = clock();
    const store = new InMemoryStore([WORKFLOW], { now: time.now });
    assert.equal((await store.process(CONFIRMED)).outcome, 'applied');
    time.advance(8 * 24 * 3600 * 1000);
    const retention = createRetention(store, { receiptsOlderThan: 7 * 24 * 3600 * 1000, every: 3600_000, start: false });
    assert.equal((await retention.runOnce()).receipts.deleted, 1);
    assert.equal(await store.getReceipt(CONFIRMED.eventId), null);
    // What is lost with the receipt: the same event id with another payload is no longer
    // EVENT_ID_CONFLICT; the rule set's guard (the deposit's amount) refuses it instead (nothing written).
    await assert.rejects(
      store.process({ ...CONFIRMED, amountUnits: '12500001' }),
      (error) => error instanceof IdemflowError && error.code === 'IDENTITY_MISMATCH' && error.details.field === 'amountUnits',
    );
    // The workflow still records the deposit: the rule set answers the replay from it.
    assert.deepEqual(await store.process(CONFIRMED), { outcome: 'already-applied', attempts: 1, fingerprint: fingerprint(CONFIRMED) });
    assert.equal(store.snapshot().outbox.size, 1, 'no second START_EXCHANGE');
    await retention.stop();
  });

  it('stop() waits for a running purge and no run starts after it', async () => {
    const store = new InMemoryStore();
    let release;
    const gate = new Promise((resolve) => {
      release = resolve;
    });
    const purge = store.purgeReceipts.bind(store);
    let purges = 0;
    store.purgeReceipts = async (args) => {
      purges += 1;
      await gate;
      return purge(args);
    };
    const retention = createRetention(store, { receiptsOlderThan: 1, every: 1 });
    while (purges === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    let stopped = false;
    const stopping = retention.stop().then(() => {
      stopped = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(stopped, false, 'stop() waits for the running purge');
    release();
    await stopping;
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(purges, 1);
  });

  it('a second runner in the same process is skipped while the first holds the lock', async () => {
    const store = new InMemoryStore();
    let release;
    const gate = new Promise((resolve) => {
      release = resolve;
    });
    const held = store.withExclusiveLock('idemflow.retention:inbox', () => gate);
    const retention = createRetention(store, { receiptsOlderThan: 1, every: 1000, start: false });
    const skips = [];
    retention.on('skipped', (s) => skips.push(s.reason));
    assert.equal(await retention.runOnce(), null);
    assert.deepEqual(skips, ['locked']);
    release();
    assert.deepEqual(await held, { acquired: true, value: undefined });
    assert.notEqual(await retention.runOnce(), null);
  });

  it('refuses options it does not know, no purge at all, and a store without the hooks', () => {
    const store = new InMemoryStore();
    const refused = (fn, field) =>
      assert.throws(fn, (e) => e instanceof IdemflowError && e.code === 'INVALID_ARGUMENT' && e.details.field === field);
    refused(() => createRetention(store, { receiptsOlderThan: 1, every: 1, evry: 2 }), 'evry');
    refused(() => createRetention(store, { every: 1000 }), 'receiptsOlderThan');
    refused(() => createRetention(store, { receiptsOlderThan: 1 }), 'every');
    refused(() => createRetention(store, { receiptsOlderThan: -5, every: 1 }), 'receiptsOlderThan');
    refused(() => createRetention({}, { receiptsOlderThan: 1, every: 1 }), 'store');
  });
});

/** Two worker processes over one database: their runs never overlap (and, without the shared lock, they do). */
async function neverAtTheSameTime(spec, seed) {
  await seed();
  const results = await workers(spec);
  const runs = results.flatMap((r) => r.runs);
  assert.ok(
    results.every((r) => r.runs.length > 0),
    `both workers ran: ${results.map((r) => r.runs.length)}`,
  );
  assert.ok(
    results.some((r) => r.skipped > 0),
    'a worker was skipped while the other held the lock',
  );
  assert.deepEqual(overlaps(runs), []);
  assert.ok(
    runs.some((r) => r.receipts.deleted > 0),
    'the runs purged what was there',
  );
  return runs;
}

describe('two worker processes with retention enabled never purge at the same time', () => {
  it('SQLite: one file, two processes', async () => {
    const dir = tempDir('retention');
    const tables = tablesFor(uniquePrefix());
    const spec = { kind: 'sqlite', tables, file: path.join(dir, 'db.sqlite') };
    const helper = await openStore('sqlite', { tables, file: spec.file });
    await helper.store.migrate();
    try {
      await neverAtTheSameTime(spec, () => seedReceipts(helper.store, 20));
      // The check can fail: two runners holding different locks do overlap.
      await seedReceipts(helper.store, 20).catch(() => {});
      const unlocked = await workers(spec, { lockNames: ['lock-a', 'lock-b'] });
      assert.ok(overlaps(unlocked.flatMap((r) => r.runs)).length > 0, 'runners under different locks overlap');
    } finally {
      await helper.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('PostgreSQL: the same tables, two processes', { skip: PG_URL ? false : 'needs IDEMFLOW_PG_URL' }, async () => {
    const tables = tablesFor(uniquePrefix());
    const spec = { kind: 'pg', tables, url: PG_URL };
    const helper = await openStore('pg', { tables, url: PG_URL });
    await helper.store.migrate();
    try {
      await neverAtTheSameTime(spec, () => seedReceipts(helper.store, 20));
    } finally {
      await helper.drop();
      await helper.close();
    }
  });
});
