// The long fault campaign (`make faults`): many more deliveries and faults
// than the slice in test/faults.test.mjs, on a throwaway PostgreSQL 15 and
// MariaDB of its own, and the figures printed: faults injected, deliveries,
// crashes, losses, duplicates. Exits 1 if any of the last three is not 0.
// IDEMFLOW_FAULTS_DELIVERIES (default 6000 per server) and
// IDEMFLOW_FAULTS_COUNT (default 24 per server) scale it.
import { faultRun } from './fault-runs.mjs';
import { random } from './broker.mjs';
import { mariadbMissing, postgresMissing, startMariadb, startPostgres } from './servers.mjs';

const deliveries = Number(process.env.IDEMFLOW_FAULTS_DELIVERIES || 6000);
const count = Number(process.env.IDEMFLOW_FAULTS_COUNT || 24);

/** `count` faults from `kinds`, each kind about as often, in a seeded random order. */
function schedule(kinds, seed) {
  const rand = random(seed);
  const faults = Array.from({ length: count }, (_, i) => kinds[i % kinds.length]);
  for (let i = faults.length - 1; i > 0; i -= 1) {
    const j = Math.floor(rand() * (i + 1));
    [faults[i], faults[j]] = [faults[j], faults[i]];
  }
  return faults;
}

const servers = [
  {
    name: 'PostgreSQL 15', kind: 'pg', missing: postgresMissing(), seed: 91_001,
    start: () => startPostgres({ smallTablespaceMb: 8 }),
    kinds: (db) => (db.tablespace ? ['terminate', 'pause', 'restart', 'diskFull'] : ['terminate', 'pause', 'restart']),
  },
  {
    name: 'MariaDB', kind: 'mysql', missing: mariadbMissing(), seed: 91_002,
    start: () => startMariadb(),
    kinds: () => ['terminate', 'pause', 'restart'],
  },
];

const totals = { faults: 0, deliveries: 0, crashes: 0, losses: 0, duplicates: 0, orphanReceipts: 0 };
for (const server of servers) {
  if (server.missing) {
    console.log(`${server.name}: skipped (${server.missing})`);
    continue;
  }
  const db = await server.start();
  try {
    if (server.kind === 'pg' && !db.tablespace) console.log(`${server.name}: no small tablespace (${db.tablespaceError}); no disk-full faults`);
    const started = Date.now();
    const figures = await faultRun(db, server.kind, {
      faults: schedule(server.kinds(db), server.seed), deliveries, workflows: Math.max(50, Math.round(deliveries / 20)), seed: server.seed, timeoutMs: 1_800_000,
    });
    const byKind = figures.injected.reduce((tally, name) => ({ ...tally, [name]: (tally[name] ?? 0) + 1 }), {});
    console.log(`${server.name}: ${figures.faults} faults (${Object.entries(byKind).map(([k, v]) => `${k} ${v}`).join(', ')}), `
      + `${figures.deliveries} deliveries of ${figures.eventIds} event ids for ${figures.confirmedWorkflows} confirmed workflows, `
      + `crashes ${figures.crashes}, losses ${figures.losses}, duplicates ${figures.duplicates}, orphan receipts ${figures.orphanReceipts}; `
      + `retry nacks ${JSON.stringify(figures.nacks)}; unexpected ${figures.unexpected.length}; ${((Date.now() - started) / 1000).toFixed(1)} s`);
    for (const line of figures.unexpected.slice(0, 10)) console.log(`  unexpected: ${line}`);
    for (const key of Object.keys(totals)) totals[key] += figures[key];
  } finally {
    await db.close();
  }
}
console.log(`total: faults ${totals.faults}, deliveries ${totals.deliveries}, crashes ${totals.crashes}, losses ${totals.losses}, `
  + `duplicates ${totals.duplicates}, orphan receipts ${totals.orphanReceipts}`);
process.exitCode = totals.crashes + totals.losses + totals.duplicates + totals.orphanReceipts === 0 ? 0 : 1;
