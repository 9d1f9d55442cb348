// One worker process with retention enabled, for test/retention.test.mjs:
// argv[2] is JSON {spec, ms, lockName}; it runs retention for `ms` and prints
// {runs: [{startedAt, endedAt, receipts, operations}], skipped} as JSON.
// Each purge is slowed down, so two runners without the lock would overlap.
import { createRetention } from 'idemflow';
import { openStore } from './backends.mjs';

const { spec, ms, lockName } = JSON.parse(process.argv[2]);
const helper = await openStore(spec.kind, { tables: spec.tables, file: spec.file, url: spec.url });
const { store } = helper;
const sleep = (t) => new Promise((resolve) => setTimeout(resolve, t));
const purge = store.purgeReceipts.bind(store);
store.purgeReceipts = async (args) => {
  await sleep(10);
  const result = await purge(args);
  await sleep(10);
  return result;
};
const runs = [];
let skipped = 0;
const retention = createRetention(store, {
  receiptsOlderThan: 1,
  operationsOlderThan: 1,
  every: 3,
  batchSize: 2,
  ...(lockName ? { lockName } : {}),
});
retention.on('run', (run) => runs.push(run));
retention.on('skipped', () => {
  skipped += 1;
});
retention.on('error', (error) => {
  console.error(error);
  process.exitCode = 1;
});
await sleep(ms);
await retention.stop();
await helper.close();
process.stdout.write(JSON.stringify({ runs, skipped }));
