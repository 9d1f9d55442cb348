// The long fault campaign (`make faults`): many more deliveries and faults
// than the slice in test/faults.test.mjs, on a throwaway PostgreSQL 15,
// MariaDB and Redis (appendfsync always; its restart a SIGKILL) of its own, and the figures printed: faults injected, deliveries,
// crashes, losses, duplicates. Exits 1 if any of the last three is not 0.
// Each server gets two campaigns: workers calling processEvent per delivery,
// and workers calling processBatch on batches of IDEMFLOW_FAULTS_BATCH (64),
// SIGKILLed IDEMFLOW_FAULTS_KILLS (8) times on top of the server's faults.
// IDEMFLOW_FAULTS_DELIVERIES (default 6000 per campaign) and
// IDEMFLOW_FAULTS_COUNT (default 24 per campaign) scale it;
// IDEMFLOW_FAULTS_ONLY (pg, mysql, redis: a comma list) picks servers.

import { random } from './broker.mjs';
import { canFillDisk, faultRun } from './fault-runs.mjs';
import { mariadbMissing, postgresMissing, redisMissing, startMariadb, startPostgres, startRedis } from './servers.mjs';

const deliveries = Number(process.env.IDEMFLOW_FAULTS_DELIVERIES || 6000);
const count = Number(process.env.IDEMFLOW_FAULTS_COUNT || 24);
const batchSize = Number(process.env.IDEMFLOW_FAULTS_BATCH || 64);
const batchKills = Number(process.env.IDEMFLOW_FAULTS_KILLS || 8);

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
    name: 'PostgreSQL 15',
    kind: 'pg',
    missing: postgresMissing(),
    seed: 91_001,
    start: () => startPostgres({ smallTablespaceMb: 8 }),
  },
  {
    name: 'MariaDB',
    kind: 'mysql',
    missing: mariadbMissing(),
    seed: 91_002,
    start: () => startMariadb({ smallDirMb: 64 }),
  },
  {
    name: 'Redis (appendfsync always)',
    kind: 'redis',
    missing: redisMissing(),
    seed: 91_003,
    start: () => startRedis({ appendfsync: 'always' }),
  },
];
const kindsOf = (db) => (canFillDisk(db) ? ['terminate', 'pause', 'restart', 'diskFull'] : ['terminate', 'pause', 'restart']);
const campaigns = [
  { name: 'processEvent', batch: 0, kills: 0 },
  { name: `processBatch (batches of ${batchSize}, ${batchKills} SIGKILLs)`, batch: batchSize, kills: batchKills },
];

const only = process.env.IDEMFLOW_FAULTS_ONLY ? new Set(process.env.IDEMFLOW_FAULTS_ONLY.split(',')) : null;
const totals = { faults: 0, deliveries: 0, crashes: 0, losses: 0, duplicates: 0, orphanReceipts: 0 };
for (const server of servers) {
  if (only && !only.has(server.kind)) continue;
  if (server.missing) {
    console.log(`${server.name}: skipped (${server.missing})`);
    continue;
  }
  const db = await server.start();
  try {
    if (!canFillDisk(db) && server.kind !== 'redis')
      console.log(`${server.name}: no small disk (${db.tablespaceError ?? db.smallDirError}); no disk-full faults`);
    for (const [c, campaign] of campaigns.entries()) {
      const started = Date.now();
      const seed = server.seed + 1000 * c;
      const figures = await faultRun(db, server.kind, {
        faults: schedule(kindsOf(db), seed),
        deliveries,
        workflows: Math.max(50, Math.round(deliveries / 20)),
        seed,
        timeoutMs: 1_800_000,
        batch: campaign.batch,
        kills: campaign.kills,
      });
      const byKind = {};
      for (const name of figures.injected) byKind[name] = (byKind[name] ?? 0) + 1;
      console.log(
        `${server.name}, ${campaign.name}: ${figures.faults} faults (${Object.entries(byKind)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}), ` +
          `${figures.kills} SIGKILLs, ${figures.deliveries} deliveries of ${figures.eventIds} event ids for ${figures.confirmedWorkflows} confirmed workflows, ` +
          `crashes ${figures.crashes}, losses ${figures.losses}, duplicates ${figures.duplicates}, orphan receipts ${figures.orphanReceipts}; ` +
          `retry nacks ${JSON.stringify(figures.nacks)}; unexpected ${figures.unexpected.length}; ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );
      for (const line of figures.unexpected.slice(0, 10)) console.log(`  unexpected: ${line}`);
      for (const key of Object.keys(totals)) totals[key] += figures[key];
    }
  } finally {
    await db.close();
  }
}
console.log(
  `total: faults ${totals.faults}, deliveries ${totals.deliveries}, crashes ${totals.crashes}, losses ${totals.losses}, ` +
    `duplicates ${totals.duplicates}, orphan receipts ${totals.orphanReceipts}`,
);
process.exitCode = totals.crashes + totals.losses + totals.duplicates + totals.orphanReceipts === 0 ? 0 : 1;
