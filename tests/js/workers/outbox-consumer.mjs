// A consumer process for the crash test. It claims one operation from the
// file-backed store, tells its parent that the handler started (and with
// which idempotency key), then hangs inside the handler until it is killed.
// Usage: node outbox-consumer.mjs <store file> <now ms> <lease ms>
import { createOutboxConsumer } from 'idemflow';
import { FileStore } from './outbox-file-store.mjs';

const [file, now, leaseMs] = process.argv.slice(2);
const store = new FileStore(file, { now: () => Number(now) });
const consumer = createOutboxConsumer(store, {
  START_EXCHANGE: async (operation, { idempotencyKey, fencingToken, owner }) => {
    process.send({ started: idempotencyKey, fencingToken, owner });
    await new Promise(() => {}); // the "provider call" that never returns before the crash
  },
}, { owner: `worker-${process.pid}`, leaseMs: Number(leaseMs), concurrency: 1 });

setInterval(() => {}, 1 << 30); // stay alive until killed
await consumer.runOnce();
