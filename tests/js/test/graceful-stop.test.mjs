// The example workers stop gracefully: on SIGTERM a worker holding batches
// takes no more messages, lets what it holds commit and settle, and exits 0.
// Every message it acknowledged has its receipt, every receipt's message was
// acknowledged (none committed and then handed back to the broker), and the
// broker still holds every message the worker did not settle.
// Needs IDEMFLOW_PG_URL and IDEMFLOW_AMQP_URL / IDEMFLOW_NATS_URL / IDEMFLOW_KAFKA_BROKERS.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import test from 'node:test';
import { openStore, PG_URL, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { BROKERS, brokerHarness, brokerSkip, supervise } from '../workers/chaos.mjs';

const SWAPS = 600;

for (const { name, env } of BROKERS) {
  const url = process.env[env];
  const skip = brokerSkip(env);
  test(`${name}: SIGTERM while batches are in flight settles them, acknowledges what committed and exits 0`, {
    skip,
    timeout: 90_000,
  }, async () => {
    const runId = uniquePrefix();
    const tables = tablesFor(runId);
    const db = await openStore('pg', { tables, url: PG_URL, poolSize: 2 });
    await db.store.migrate();
    const ids = Array.from({ length: SWAPS }, (_, i) => `${runId}:swap-${i}`);
    for (const id of ids) await db.store.putWorkflow({ id, status: 'waiting', revision: 1 });
    const broker = await brokerHarness(name, url, `idemflow-${runId}`);
    try {
      const publisher = await broker.publisher();
      for (let i = 0; i < ids.length; i += 50) {
        await Promise.all(
          ids.slice(i, i + 50).map((id, k) =>
            publisher.publish(
              Buffer.from(
                JSON.stringify({
                  eventId: `${runId}:e${i + k}`,
                  workflowId: id,
                  type: 'DEPOSIT_DETECTED',
                  depositRef: `ref-${i + k}`,
                  amountUnits: '100',
                  sequence: 1,
                }),
              ),
            ),
          ),
        );
      }
      await publisher.close();

      let acked = 0;
      let stopped = false;
      const worker = supervise(
        broker.worker,
        {
          ...broker.env,
          IDEMFLOW_PG_URL: PG_URL,
          IDEMFLOW_TABLE_PREFIX: runId,
          PREFETCH: '128',
        },
        (line, self) => {
          if (line.role !== 'worker') return;
          if (line.event === 'stopped') stopped = true;
          if (line.action !== 'ack') return;
          acked += 1;
          // Stop it in the middle of its work: it has settled some and holds more.
          if (acked === 40) self.kill('SIGTERM');
        },
      );
      const exit = once(worker, 'exit');
      const timer = setTimeout(() => worker.kill('SIGKILL'), 30_000);
      const [code, signal] = await exit;
      clearTimeout(timer);
      assert.equal(signal, null, `the worker ended by itself, not by ${signal}: ${worker.stderrTail()}`);
      assert.equal(code, 0, `exit code: ${worker.stderrTail()}`);
      assert.ok(stopped, 'it said it stopped');
      assert.ok(acked >= 40, `${acked} acknowledged`);

      const receipts = await db.count('inbox');
      assert.equal(receipts, acked, 'every batch it held committed and was acknowledged, and nothing else committed');
      // Whatever the worker did not settle is still in the broker, none of it
      // lost. (The broker may also hand back an acked message whose ack it had
      // not settled when the channel closed: a duplicate delivery, harmless.)
      let waiting = null;
      for (let i = 0; i < 50; i += 1) {
        waiting = await broker.pending();
        if (waiting === SWAPS - acked) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.ok(waiting >= SWAPS - acked, `the broker holds every message the worker did not settle: ${waiting} of ${SWAPS - acked}`);
      if (waiting !== SWAPS - acked) console.log(`${name}: ${waiting - (SWAPS - acked)} acknowledged messages handed back (information)`);
    } finally {
      await broker.teardown();
      await db.drop();
      await db.close();
    }
  });
}
