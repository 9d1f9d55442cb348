// An example worker: a few thousand deposit confirmations arrive the way a
// real queue delivers them (repeated, re-published under new ids, shuffled, a
// few tampered with) and go through idemflow into a store. At the end it
// checks that every confirmed swap scheduled exactly one exchange.
//
// Run with `make demo`. Options: --swaps N, --seed S, --store sqlite|memory
// (default sqlite: the embedded store, one database file, demo.sqlite).
import fs from 'node:fs';
import path from 'node:path';
import { IdemflowError, InMemoryStore, processEvent, RuleSet } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';
import { startMetrics } from './shared/metrics-summary.mjs';
import { random } from './shared/random.mjs';

const metrics = await startMetrics();

const args = Object.fromEntries(
  process.argv
    .slice(2)
    .map((arg, i, all) => (arg.startsWith('--') ? [arg.slice(2), all[i + 1]] : null))
    .filter(Boolean),
);
const SWAPS = Number(args.swaps ?? 2000);
const SEED = Number(args.seed ?? 42);
const CONCURRENCY = 8;

const rand = random(SEED);
const pick = (n) => Math.floor(rand() * n);

async function openStore(workflows) {
  if ((args.store ?? 'sqlite') === 'memory') {
    return { store: new InMemoryStore(workflows), name: 'in-memory store', counts: async (s) => s.snapshot() };
  }
  const file = path.resolve('demo.sqlite');
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(`${file}${suffix}`, { force: true });
  const store = SqliteStore.open(file);
  await store.migrate();
  // The host stores its swaps; one transaction for all of them.
  await store.transaction(async (tx) => {
    for (const { id, ...set } of workflows) await tx.writeWorkflow({ id, expect: null, set });
  });
  const { tables, db } = store;
  const counts = async () => ({
    workflows: new Map(
      db
        .prepare(`SELECT id, status, revision FROM ${tables.workflows}`)
        .all()
        .map((row) => [row.id, { status: row.status, revision: Number(row.revision) }]),
    ),
    inbox: { size: Number(db.prepare(`SELECT COUNT(*) AS n FROM ${tables.inbox}`).get().n) },
    outbox: new Map(
      db
        .prepare(`SELECT id, type, workflow_id FROM ${tables.outbox}`)
        .all()
        .map((row) => [row.id, { id: row.id, type: row.type, workflowId: row.workflow_id }]),
    ),
  });
  return { store, name: `SQLite file ${path.basename(file)} (WAL, BEGIN IMMEDIATE)`, counts, close: () => store.close() };
}

const ruleSet = RuleSet.builtin('deposit-swap');
const workflows = [];
const deliveries = [];
const story = { confirmations: 0, repeats: 0, republished: 0, tampered: 0, conflicting: 0, orphans: 0 };

for (let i = 1; i <= SWAPS; i += 1) {
  const id = `swap-${String(i).padStart(5, '0')}`;
  const deposit = { depositRef: `btc-mainnet:tx-${(i * 7919).toString(16)}:vout-${i % 3}`, amountUnits: String(100000 + pick(90000000)) };
  // The swap is in `deposit`: the chain watcher's detection was its observation 1 of the deposit, recorded under its
  // depositRef; the confirmation is its observation 2 (`sequence`, which every re-publication keeps).
  workflows.push({
    id,
    status: 'deposit',
    revision: pick(5),
    expectedUnits: deposit.amountUnits,
    deposits: { [deposit.depositRef]: { event: 'DEPOSIT_DETECTED', amountUnits: deposit.amountUnits, sequence: 1 } },
  });
  const confirmation = { eventId: `watcher-a:${id}:confirmed`, workflowId: id, type: 'DEPOSIT_CONFIRMED', ...deposit, sequence: 2 };
  story.confirmations += 1;
  const copies = 1 + pick(3);
  story.repeats += copies - 1;
  for (let c = 0; c < copies; c += 1) deliveries.push(confirmation);
  if (rand() < 0.33) {
    story.republished += 1;
    deliveries.push({ ...confirmation, eventId: `watcher-b:${id}:confirmed` });
  }
  if (rand() < 0.02) {
    story.tampered += 1;
    deliveries.push({ ...confirmation, eventId: `watcher-c:${id}:confirmed`, amountUnits: String(Number(deposit.amountUnits) + 1) });
  }
  if (rand() < 0.01) {
    story.conflicting += 1;
    deliveries.push({ ...confirmation, amountUnits: String(Number(deposit.amountUnits) - 1) });
  }
}
for (let i = 1; i <= Math.ceil(SWAPS / 200); i += 1) {
  story.orphans += 1;
  deliveries.push({
    eventId: `watcher-a:ghost-${i}`,
    workflowId: `swap-ghost-${i}`,
    type: 'DEPOSIT_CONFIRMED',
    depositRef: 'eth:0xdead:log-0',
    amountUnits: '1',
    sequence: 1,
  });
}
for (let i = deliveries.length - 1; i > 0; i -= 1) {
  const j = pick(i + 1);
  [deliveries[i], deliveries[j]] = [deliveries[j], deliveries[i]];
}

const { store, name, counts, close } = await openStore(workflows);
console.log(`idemflow demo: ${SWAPS} swaps waiting for deposit confirmation, rule set ${ruleSet.id} v${ruleSet.version}`);
console.log(`  ${ruleSet.hash}`);
console.log(`  ${deliveries.length} deliveries into the ${name}, ${CONCURRENCY} at a time, in shuffled order:`);
console.log(`    ${story.confirmations} confirmations, ${story.repeats} repeated deliveries of the same event id,`);
console.log(`    ${story.republished} re-published under a second event id, ${story.tampered} re-published with a changed amount,`);
console.log(`    ${story.conflicting} reusing an event id with an edited amount, ${story.orphans} for swaps that do not exist\n`);

const outcomes = new Map();
const errors = new Map();
const started = performance.now();
let next = 0;
async function worker() {
  while (next < deliveries.length) {
    const delivery = deliveries[next];
    next += 1;
    try {
      const result = await processEvent(store, delivery, { ruleSet });
      outcomes.set(result.outcome, (outcomes.get(result.outcome) ?? 0) + 1);
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      const key = `${error.code} (${error.disposition})`;
      errors.set(key, (errors.get(key) ?? 0) + 1);
    }
  }
}
await Promise.all(Array.from({ length: CONCURRENCY }, worker));
const seconds = (performance.now() - started) / 1000;

const explain = {
  applied: 'moved deposit → exchange and scheduled START_EXCHANGE',
  'duplicate-delivery': 'same event id seen before: nothing written',
  'already-applied': 'new event id for a confirmed swap: receipt only',
  stale: 'no longer relevant: receipt only',
};
const why = {
  IDENTITY_MISMATCH: 'amount differs from the one recorded for this depositRef',
  EVENT_ID_CONFLICT: 'event id reused with another payload',
  UNKNOWN_WORKFLOW: 'swap not stored (yet): redeliver later',
};
console.log('outcome                 deliveries');
for (const [outcome, n] of [...outcomes].sort((a, b) => b[1] - a[1])) {
  console.log(`  ${outcome.padEnd(22)}${String(n).padStart(6)}   ${explain[outcome] ?? ''}`);
}
console.log('error (disposition)');
for (const [key, n] of [...errors].sort((a, b) => b[1] - a[1])) {
  console.log(`  ${key.padEnd(32)}${String(n).padStart(6)}   ${why[key.split(' ')[0]] ?? ''}`);
}
console.log(`\n${deliveries.length} deliveries in ${seconds.toFixed(2)} s (${Math.round(deliveries.length / seconds)} per second)`);

// The checks: one START_EXCHANGE per confirmed swap, and nothing else.
const snapshot = await counts(store);
const failures = [];
const perWorkflow = new Map();
for (const op of snapshot.outbox.values()) {
  if (op.type !== 'START_EXCHANGE') failures.push(`unexpected operation ${op.id}`);
  perWorkflow.set(op.workflowId, (perWorkflow.get(op.workflowId) ?? 0) + 1);
}
const original = new Map(workflows.map((w) => [w.id, w]));
for (const [id, before] of original) {
  const after = snapshot.workflows.get(id);
  const ops = perWorkflow.get(id) ?? 0;
  if (ops !== 1) failures.push(`${id} has ${ops} START_EXCHANGE operations`);
  if (after.status !== 'exchange' || after.revision !== before.revision + 1) {
    failures.push(`${id} is ${after.status} at revision ${after.revision} (was ${before.revision})`);
  }
}
const distinctIds = new Set(deliveries.map((d) => d.eventId));
console.log(
  `checks: ${perWorkflow.size} of ${original.size} swaps have exactly one START_EXCHANGE; ` +
    `${snapshot.inbox.size} receipts for ${distinctIds.size} distinct event ids (errors write none)`,
);
if (close) await close();
await metrics.print();
if (failures.length > 0) {
  console.error(`FAILED: ${failures.length} problems, first: ${failures.slice(0, 5).join('; ')}`);
  process.exit(1);
}
console.log('OK: every confirmed swap scheduled exactly one exchange, every swap advanced exactly once');
