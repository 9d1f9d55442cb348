// Deliveries through worker processes (broker.mjs) while faults hit a
// throwaway server (servers.mjs), then the invariants read from the
// database. Shared by test/faults.test.mjs (a bounded slice) and
// fault-campaign.mjs (`make faults`).
import { openStore, tablesFor, uniquePrefix } from './backends.mjs';
import { plan, random, run } from './broker.mjs';

/** What each fault does to a server handle of startPostgres/startMariadb. */
export const FAULTS = {
  terminate: (db) => (db.terminateBackends ? db.terminateBackends() : db.killConnections()),
  restart: (db) => db.server.restart(),
  pause: (db, { pauseMs }) => db.server.pause(pauseMs),
  diskFull: async (db, { diskFullMs }) => {
    await db.fillTablespace();
    await new Promise((resolve) => setTimeout(resolve, diskFullMs));
    await db.freeTablespace();
  },
};

/** Where a disk can fill for `kind`: PostgreSQL's small tablespace, MariaDB's small data directory. */
export function canFillDisk(db) {
  return Boolean(db.tablespace ?? db.smallDir);
}

/** The store's tables (and PostgreSQL's indexes) moved onto the small disk, so that a full disk stops their writes. */
async function placeOnSmallDisk(db, kind, tables) {
  for (const table of Object.values(tables)) {
    if (kind === 'pg') {
      await db.query(`ALTER TABLE "${table}" SET TABLESPACE small`);
      for (const { name } of await db.query('SELECT indexname AS name FROM pg_indexes WHERE tablename = $1', [table])) {
        await db.query(`ALTER INDEX "${name}" SET TABLESPACE small`);
      }
    } else {
      // InnoDB takes DATA DIRECTORY only when a table is made: the empty table is made again there.
      const [{ 'Create Table': ddl }] = await db.query(`SHOW CREATE TABLE \`${table}\``);
      await db.query(`DROP TABLE \`${table}\``);
      await db.query(`${ddl} DATA DIRECTORY='${db.smallDir}'`);
    }
  }
}

/** The store options the workers run with: short bounds, so a stopped server costs seconds. */
export const STORE_BOUNDS = { timeoutMs: 1500, statementTimeoutMs: 1000 };

/**
 * Runs `deliveries` deliveries for `workflows` workflows through `workers`
 * processes on `db` (kind 'pg' or 'mysql') while `faults` (names of FAULTS,
 * in order) are injected at evenly spaced points of the run. Resolves the
 * figures: deliveries, faults injected, crashes, losses, duplicates, orphan
 * receipts, the nacks by code/reason and anything unexpected.
 */
export async function faultRun(
  db,
  kind,
  { faults, deliveries, workflows, seed = 1, workers = 4, pauseMs = 2500, diskFullMs = 2000, timeoutMs = 300_000, batch = 0, kills = 0 },
) {
  const tables = tablesFor(uniquePrefix());
  // Redis has no bound on one command of its own: timeoutMs bounds every call.
  const bounds = kind === 'redis' ? { timeoutMs: STORE_BOUNDS.timeoutMs } : STORE_BOUNDS;
  const options = { url: db.url, tables, poolSize: 4, ...bounds };
  const planned = plan({ workflows, deliveries, seed });
  const helper = await openStore(kind, options);
  try {
    await helper.store.migrate();
    if (faults.includes('diskFull')) await placeOnSmallDisk(db, kind, tables);
    for (const workflow of planned.workflows) await helper.store.putWorkflow(workflow);
    // Faults one after another, each when its share of the deliveries is acknowledged.
    const rand = random(seed ^ 0xfa17);
    const due = faults.map((name, i) => ({ name, at: Math.floor(((deliveries * (i + 1)) / (faults.length + 1)) * (0.9 + 0.2 * rand())) }));
    let injecting = Promise.resolve();
    const injected = [];
    const onAcked = (acked) => {
      while (due.length > 0 && acked >= due[0].at) {
        const { name } = due.shift();
        injecting = injecting.then(async () => {
          await FAULTS[name](db, { pauseMs, diskFullMs });
          injected.push(name);
        });
      }
    };
    // Batch workers hold a batch's worth each; SIGKILLs take whatever a worker holds.
    const stats = await run(planned, {
      workerConfig: { kind, ...options, batch },
      workers,
      inFlight: batch > 0 ? batch : 4,
      kills,
      seed,
      timeoutMs,
      retryDelayMs: 50,
      onAcked,
    });
    await injecting;
    const figures = await verify(helper, planned);
    return {
      deliveries: planned.counts.deliveries,
      eventIds: planned.counts.eventIds,
      faults: injected.length,
      injected,
      crashes: stats.crashes,
      kills: stats.kills,
      nacks: stats.nacks,
      unexpected: stats.unexpected,
      outcomes: stats.outcomes,
      ...figures,
    };
  } finally {
    await helper.drop().catch(() => {});
    await helper.close();
  }
}

/**
 * The invariants, counted rather than asserted: every delivered event has a
 * receipt (else a loss), every workflow that got a confirmation moved once to
 * exchange with exactly one START_EXCHANGE (a missing one is a loss, a second
 * a duplicate), and every applied receipt belongs to that one change (else
 * an orphan receipt).
 */
async function verify(helper, planned) {
  const confirmed = new Set();
  for (const unit of planned.units) {
    for (const { event } of unit) if (event.type === 'DEPOSIT_CONFIRMED') confirmed.add(event.workflowId);
  }
  const receipts = await helper.rows('inbox', 'event_id, workflow_id, outcome');
  const operations = await helper.rows('outbox', 'workflow_id, event_id, type');
  const rows = await helper.rows('workflows', 'id, status, revision');
  const receiptIds = new Set(receipts.map((row) => row.event_id));
  const known = new Set(planned.eventIds);
  let losses = planned.eventIds.filter((id) => !receiptIds.has(id)).length;
  let duplicates = 0;
  let orphanReceipts = receipts.filter((row) => !known.has(row.event_id)).length;
  const initial = new Map(planned.workflows.map((w) => [w.id, w.revision]));
  const workflows = new Map(rows.map((row) => [row.id, row]));
  for (const [id, revision] of initial) {
    const row = workflows.get(id);
    const starts = operations.filter((op) => op.workflow_id === id && op.type === 'START_EXCHANGE');
    const applied = receipts.filter((r) => r.workflow_id === id && r.outcome === 'applied');
    if (confirmed.has(id)) {
      if (row?.status !== 'exchange' || Number(row.revision) !== revision + 1) losses += 1;
      if (starts.length === 0) losses += 1;
      duplicates += Math.max(0, starts.length - 1) + Math.max(0, applied.length - 1);
      if (applied.length === 1 && !starts.some((op) => op.event_id === applied[0].event_id)) orphanReceipts += 1;
    } else {
      if (row?.status !== 'deposit' || Number(row.revision) !== revision) duplicates += 1;
      duplicates += starts.length;
      orphanReceipts += applied.length;
    }
  }
  duplicates += operations.filter((op) => op.type !== 'START_EXCHANGE').length;
  return {
    receipts: receipts.length,
    operations: operations.length,
    confirmedWorkflows: confirmed.size,
    losses,
    duplicates,
    orphanReceipts,
  };
}
