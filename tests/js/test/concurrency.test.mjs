// Concurrency proven with processes, not promises: 4 worker processes, each
// with its own connection, share one database and 6,000 deliveries for 150
// workflows (IDEMFLOW_CONCURRENCY_DELIVERIES and IDEMFLOW_CONCURRENCY_WORKFLOWS;
// `make soak` runs 20,000 for 500), in random order, often the same delivery
// to two workers at once; a second run SIGKILLs workers at random points and
// redelivers what they had not acknowledged. The invariants are checked in
// the database.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';

import { MYSQL_URL, openStore, PG_URL, REDIS_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { plan, run } from '../workers/broker.mjs';

const WORKFLOWS = Number(process.env.IDEMFLOW_CONCURRENCY_WORKFLOWS ?? 150);
const DELIVERIES = Number(process.env.IDEMFLOW_CONCURRENCY_DELIVERIES ?? 6_000);
const WORKERS = 4;
const KILLS = 8;

const backends = [
  {
    name: 'SQLite file',
    kind: 'sqlite',
    inFlight: 2,
    // WAL with synchronous=NORMAL survives a killed process (what this run does); FULL is for power loss.
    config: (dir, prefix) => ({ file: path.join(dir, `${prefix}.db`), synchronous: 'NORMAL', busyTimeoutMs: 10_000 }),
  },
  {
    name: 'PostgreSQL',
    kind: 'pg',
    inFlight: 4,
    skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run the multi-process runs on PostgreSQL',
    config: () => ({ url: PG_URL, poolSize: 4 }),
  },
  {
    name: 'MariaDB',
    kind: 'mysql',
    inFlight: 4,
    skip: MYSQL_URL ? false : 'set IDEMFLOW_MYSQL_URL to run the multi-process runs on MariaDB/MySQL',
    config: () => ({ url: MYSQL_URL, poolSize: 4 }),
  },
  {
    name: 'Redis',
    kind: 'redis',
    inFlight: 4,
    skip: REDIS_URL ? false : 'set IDEMFLOW_REDIS_URL to run the multi-process runs on Redis',
    config: () => ({ url: REDIS_URL }),
  },
];

async function seedWorkflows(helper, workflows) {
  await helper.store.migrate();
  for (const workflow of workflows) await helper.store.putWorkflow(workflow);
}

/** Reads the end state and checks every invariant; returns the counts it saw. */
async function verify(helper, planned) {
  const operations = await helper.rows('outbox', 'workflow_id, type');
  const starts = new Map();
  for (const op of operations) if (op.type === 'START_EXCHANGE') starts.set(op.workflow_id, (starts.get(op.workflow_id) ?? 0) + 1);
  assert.equal(starts.size, WORKFLOWS, 'a START_EXCHANGE for every workflow');
  assert.ok(
    [...starts.values()].every((n) => n === 1),
    'exactly one START_EXCHANGE per workflow',
  );
  assert.equal(operations.length, WORKFLOWS, 'no other operation');

  const initial = new Map(planned.workflows.map((w) => [w.id, w.revision]));
  const rows = await helper.rows('workflows', 'id, status, revision');
  assert.equal(rows.length, WORKFLOWS);
  for (const row of rows) {
    assert.equal(row.status, 'exchange', row.id);
    assert.equal(Number(row.revision), initial.get(row.id) + 1, `${row.id} at revision + 1`);
  }

  const receipts = await helper.rows('inbox', 'event_id, outcome');
  const expected = new Set(planned.eventIds);
  assert.equal(receipts.length, expected.size, 'one receipt per distinct event id');
  assert.ok(
    receipts.every((row) => expected.has(row.event_id)),
    'no receipt for an id never delivered',
  );
  const outcomes = {};
  for (const { outcome } of receipts) outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
  assert.equal(outcomes.applied, WORKFLOWS, 'one applied receipt per workflow');
  return { receipts: receipts.length, receiptOutcomes: outcomes };
}

function summary(name, planned, stats, checked, seconds) {
  const c = planned.counts;
  const o = stats.outcomes;
  return (
    `${name}: ${c.deliveries} deliveries of ${c.eventIds} event ids (${c.confirmations} confirmations, ${c.detections} detections; ` +
    `${c.republished} re-published under new ids) for ${WORKFLOWS} workflows, the same delivery handed to two workers at once ${c.pairs} times; ` +
    `acks: applied ${o.applied ?? 0}, already-applied ${o['already-applied'] ?? 0}, duplicate-delivery ${o['duplicate-delivery'] ?? 0}; ` +
    `lost races re-run ${stats.lostRaces}, retry nacks redelivered ${stats.retryNacks}; ` +
    `SIGKILLs ${stats.kills} (${stats.redeliveredAfterKill} unacknowledged deliveries redelivered, ${stats.restarts} restarts); ` +
    `receipts ${checked.receipts} (${Object.entries(checked.receiptOutcomes)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}); ` +
    `START_EXCHANGE ${WORKFLOWS}; unexpected errors ${stats.unexpected.length}; ${seconds.toFixed(1)} s`
  );
}

const dir = tempDir('concurrency');
after(() => fs.rmSync(dir, { recursive: true, force: true }));

for (const backend of backends) {
  describe(`${WORKERS} worker processes on ${backend.name}`, { skip: backend.skip }, () => {
    for (const [label, kills, seed] of [
      ['every delivery', 0, 20_001],
      [`with ${KILLS} SIGKILLs and restarts`, KILLS, 20_002],
    ]) {
      it(`${DELIVERIES} deliveries for ${WORKFLOWS} workflows, ${label}: one START_EXCHANGE each, revision + 1, one receipt per event id`, {
        timeout: 300_000,
      }, async (t) => {
        const prefix = uniquePrefix();
        const tables = tablesFor(prefix);
        const options = { tables, ...backend.config(dir, prefix) };
        const planned = plan({ workflows: WORKFLOWS, deliveries: DELIVERIES, seed });
        assert.equal(planned.counts.deliveries, DELIVERIES);
        const helper = await openStore(backend.kind, options);
        try {
          await seedWorkflows(helper, planned.workflows);
          const started = process.hrtime.bigint();
          const stats = await run(planned, {
            workerConfig: { kind: backend.kind, ...options },
            workers: WORKERS,
            inFlight: backend.inFlight,
            kills,
            seed,
          });
          const seconds = Number(process.hrtime.bigint() - started) / 1e9;
          assert.deepEqual(stats.unexpected, [], 'zero unexpected errors');
          assert.equal(stats.acked, DELIVERIES);
          // A killed worker may have committed without acknowledging: its redelivery is then a duplicate-delivery.
          if (kills === 0) assert.equal(stats.outcomes.applied, WORKFLOWS, 'one applied acknowledgement per workflow');
          else assert.ok(stats.outcomes.applied <= WORKFLOWS);
          assert.equal(stats.kills, kills);
          const checked = await verify(helper, planned);
          const line = summary(`${backend.name}, ${label}`, planned, stats, checked, seconds);
          t.diagnostic(line);
        } finally {
          await helper.drop();
          await helper.close();
        }
      });
    }
  });
}
