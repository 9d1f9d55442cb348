// migrate() beside live traffic, as a worker restarted after a crash runs it
// while the others deliver: 3 processes (workers/lane.mjs) deliver through
// handle.batch while this process calls migrate() on the current schema in a
// loop. No migration may fail, none may wait on the traffic (no delivery call
// and no migration longer than STALL_MS) and no delivery may lose a race to
// it. Each delivery touches a workflow of its own, so only migrate() can
// make deliveries wait on each other. PostgreSQL and MariaDB run when their
// URLs are set; SQLite (a file the processes share) always runs.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { BACKENDS, uniquePrefix } from '../workers/backends.mjs';
import { laneTables, runLanes } from '../workers/lanes.mjs';

const EVENTS = Number(process.env.IDEMFLOW_MIGRATE_LIVE_EVENTS ?? 2000);
const BATCH = 16;
const LANES = 3;
/** A generous bound on one call on a loaded machine; a migration that waits on traffic waits for its transactions. */
const STALL_MS = 5000;

/** The servers (when their URLs are set) and a SQLite file the processes share; `options` what each store opens with. */
const backends = BACKENDS.filter((b) => ['pg', 'mysql', 'sqlite'].includes(b.id)).map((b) => ({
  ...b,
  options: b.id === 'sqlite' ? { synchronous: 'NORMAL' } : { poolSize: 2 },
}));

/** One confirmation per workflow, each for a workflow of its own: a receipt, a compare-and-set and an operation per delivery. */
function traffic(ns) {
  const workflows = [];
  const items = [];
  for (let i = 0; i < EVENTS; i += 1) {
    const id = `${ns}-w${i}`;
    workflows.push({ id, status: 'waiting', revision: 1 });
    items.push({
      body: JSON.stringify({
        eventId: `${ns}-e${i}`,
        workflowId: id,
        type: 'DEPOSIT_CONFIRMED',
        depositRef: `btc:tx-${i}:vout-0`,
        amountUnits: `${i + 1}000`,
        sequence: 1,
      }),
    });
  }
  return { workflows, items };
}

/**
 * A transaction on a connection of its own that has written to each of the
 * three tables (deleted a row that does not exist: the locks a delivery takes
 * on a table, without changing it), held open until `release()`.
 */
async function holdTables(helper, kind, tables) {
  const absent = { workflows: 'id', inbox: 'event_id', outbox: 'id' };
  if (kind === 'pg') {
    const client = await helper.store.client.connect();
    await client.query('BEGIN');
    for (const [table, key] of Object.entries(absent)) await client.query(`DELETE FROM "${tables[table]}" WHERE ${key} = $1`, ['absent']);
    return async () => {
      await client.query('ROLLBACK');
      client.release();
    };
  }
  const connection = await helper.store.client.getConnection();
  await connection.query('START TRANSACTION');
  for (const [table, key] of Object.entries(absent))
    await connection.query(`DELETE FROM \`${tables[table]}\` WHERE ${key} = ?`, ['absent']);
  return async () => {
    await connection.query('ROLLBACK');
    connection.release();
  };
}

const HOLD_MS = 3000;

describe('migrate() on a current schema beside an open transaction', () => {
  for (const backend of backends.filter((b) => b.id !== 'sqlite')) {
    it(`${backend.name}: returns while a transaction that wrote to every table is still open`, {
      skip: backend.skip,
      timeout: 30_000,
    }, async (t) => {
      const { tables, helper, close } = await laneTables(backend, backend.options);
      try {
        const release = await holdTables(helper, backend.id, tables);
        const started = performance.now();
        const migrated = helper.store.migrate().then(
          () => ({ ms: performance.now() - started }),
          (error) => ({ ms: performance.now() - started, error }),
        );
        const first = await Promise.race([migrated, new Promise((resolve) => setTimeout(() => resolve(null), HOLD_MS))]);
        await release();
        const outcome = await migrated;
        t.diagnostic(
          `${backend.name}: migrate() ${first ? 'returned' : 'was still waiting'} after ${Math.round(first?.ms ?? HOLD_MS)} ms with the transaction open; ` +
            `${outcome.error ? `failed: ${outcome.error.message}` : `done ${Math.round(outcome.ms)} ms after it started`}`,
        );
        assert.ok(first !== null, `migrate() waited for the open transaction (more than ${HOLD_MS} ms)`);
        assert.equal(first.error, undefined);
      } finally {
        await close();
      }
    });
  }
});

describe('migrate() in a loop while 3 processes deliver', () => {
  for (const backend of backends) {
    it(`${backend.name}: no migration fails or stalls, no delivery waits on one or loses a race to it`, {
      skip: backend.skip,
      timeout: 120_000,
    }, async (t) => {
      const { workflows, items } = traffic(uniquePrefix());
      const { helper, spec, close } = await laneTables(backend, backend.options, workflows);
      try {
        const migrations = [];
        let delivering = true;
        let firstBatch = null;
        const migrating = (async () => {
          while (delivering) {
            const started = performance.now();
            try {
              await helper.store.migrate();
              migrations.push({ ms: performance.now() - started, during: firstBatch !== null && delivering });
            } catch (error) {
              migrations.push({ ms: performance.now() - started, during: firstBatch !== null && delivering, error });
            }
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
        })();
        let run;
        try {
          run = await runLanes({
            lanes: LANES,
            config: { mode: 'handle-batch', store: spec },
            items,
            batchSize: BATCH,
            timeoutMs: 90_000,
            onBatch: () => {
              firstBatch ??= performance.now();
            },
          });
        } finally {
          delivering = false;
          await migrating;
        }

        const failed = migrations.filter((m) => m.error);
        const slowest = (values) => Math.round(Math.max(0, ...values));
        const during = migrations.filter((m) => m.during);
        t.diagnostic(
          `${backend.name}: ${items.length} deliveries in ${run.batches} batches over ${run.seconds.toFixed(1)} s, ` +
            `${migrations.length} migrations (${during.length} while delivering, ${failed.length} failed), slowest migration ${slowest(migrations.map((m) => m.ms))} ms, ` +
            `slowest delivery call ${slowest(run.latencies)} ms, re-runs ${JSON.stringify(run.races)}, failed transactions ${JSON.stringify(run.failedTransactions)}`,
        );
        assert.ok(during.length >= 5, `only ${during.length} migrations ran while the processes delivered`);
        assert.deepEqual(
          failed.map((m) => `${m.error.code ?? ''} ${m.error.details?.driverCode ?? ''} ${m.error.message}`.trim()).slice(0, 3),
          [],
          `${failed.length} of ${migrations.length} migrations failed`,
        );
        assert.ok(slowest(migrations.map((m) => m.ms)) < STALL_MS, `a migration took ${slowest(migrations.map((m) => m.ms))} ms`);
        assert.ok(slowest(run.latencies) < STALL_MS, `a delivery call took ${slowest(run.latencies)} ms`);

        const verdicts = {};
        for (const item of run.items) {
          const last = item.results[item.results.length - 1];
          const label = last.action === 'ack' ? `ack ${last.outcome}` : `${last.action} ${last.code} (${last.reason})`;
          verdicts[label] = (verdicts[label] ?? 0) + 1;
        }
        assert.deepEqual(verdicts, { 'ack applied': items.length }, 'every delivery applied the first time');
        // Deliveries share nothing, so a lost race can only be a lock the migration took.
        const lost = Object.entries(run.failedTransactions).filter(([reason]) =>
          ['deadlock', 'lock-timeout', 'serialization-failure'].includes(reason),
        );
        assert.deepEqual(Object.fromEntries(lost), {}, 'deliveries lost races to the migration');
        assert.equal(await helper.count('inbox'), items.length);
        assert.equal(await helper.count('outbox'), items.length);
      } finally {
        await close();
      }
    });
  }
});
