// One of several consumer processes racing for the same operations. It opens
// the shared tables and a connection, tells its parent it is ready, and on
// 'go' drains the outbox. Its first handlers wait until the parent says
// 'release' (once every racer has claimed something), so every racer takes
// work whatever their start-up times. The handler appends
// `start <id> <pid>` and `end <id> <pid>` to a shared log (O_APPEND writes of
// one short line do not interleave), yielding in between, so the parent can
// see whether two runs of one operation overlapped or one ran twice. The
// clock is fixed: no lease ever expires, so every operation must run once.
// Usage: node outbox-racer.mjs <spec JSON (outbox-backends.mjs openSpec)> <now ms> <log file>
// Messages to the parent: { ready }, { claimed: true } (or false if it claimed nothing), the drain's counts.
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createOutboxConsumer } from 'idemflow';
import { openSpec } from './outbox-backends.mjs';

const [spec, now, log] = process.argv.slice(2);
const { store, close } = await openSpec(JSON.parse(spec), () => Number(now));
const signals = { go: null, release: null };
const go = new Promise((resolve) => {
  signals.go = resolve;
});
const released = new Promise((resolve) => {
  signals.release = resolve;
});
process.on('message', (message) => signals[message]?.());

const consumer = createOutboxConsumer(
  store,
  {
    START_EXCHANGE: async (operation) => {
      await released;
      fs.appendFileSync(log, `start ${operation.id} ${process.pid}\n`);
      await sleep(1 + Math.floor(Math.random() * 3));
      fs.appendFileSync(log, `end ${operation.id} ${process.pid}\n`);
    },
  },
  { owner: `racer-${process.pid}`, leaseMs: 60_000, concurrency: 4, autoRenew: false },
);
let announced = false;
const announce = (claimed) => {
  if (!announced) process.send({ claimed });
  announced = true;
};
consumer.once('claimed', () => announce(true));

await store.listOperations({ limit: 1 }); // connected before the race starts
process.send({ ready: true });
await go;
const counts = await consumer.drain();
announce(false); // it never claimed: the parent must not wait for it
await close();
process.send(counts);
process.disconnect();
