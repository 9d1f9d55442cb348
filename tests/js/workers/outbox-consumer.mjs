// A consumer process for the crash test. It opens the tables the test shares
// with it (a SQLite file, a PostgreSQL, MariaDB or MongoDB database, a PGlite
// data directory, or the in-memory store's locked file), claims one
// operation, tells its parent that the handler started (and with which
// idempotency key), then hangs inside the handler until it is killed.
// Usage: node outbox-consumer.mjs <spec JSON (outbox-backends.mjs openSpec)> <now ms> <lease ms>
import { createOutboxConsumer } from 'idemflow';
import { openSpec } from './outbox-backends.mjs';

const [spec, now, leaseMs] = process.argv.slice(2);
const { store } = await openSpec(JSON.parse(spec), () => Number(now));
const consumer = createOutboxConsumer(
  store,
  {
    START_EXCHANGE: async (_operation, { idempotencyKey, fencingToken, owner }) => {
      process.send({ started: idempotencyKey, fencingToken, owner });
      await new Promise(() => {}); // the "provider call" that never returns before the crash
    },
  },
  { owner: `worker-${process.pid}`, leaseMs: Number(leaseMs), concurrency: 1 },
);

setInterval(() => {}, 1 << 30); // stay alive until killed
await consumer.runOnce();
