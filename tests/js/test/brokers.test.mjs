// Real brokers, real chaos: the example RabbitMQ and NATS JetStream workers
// (js/examples) as 3 processes over PostgreSQL, 2 outbox consumers calling the
// example fake provider, about 5,000 messages for 1,000 swaps from several
// publishers in shuffled order, with duplicates, re-publications, reversals,
// conflicts and bodies that are not events, and SIGKILLs of workers holding
// deliveries and of consumers holding claims. After draining, every swap must
// be where its history leads in order (tests/js/workers/chaos.mjs checks
// everything it lists). Deliveries per second are printed, never asserted.
// Needs IDEMFLOW_PG_URL and IDEMFLOW_AMQP_URL / IDEMFLOW_NATS_URL (.ci/run sets them).
import test from 'node:test';
import assert from 'node:assert/strict';
import { BROKERS, brokerSkip, runChaos } from '../workers/chaos.mjs';

const SWAPS = Number(process.env.IDEMFLOW_CHAOS_SWAPS || 1000);
// How long a run may take to drain before it fails (a loaded machine needs more).
const DRAIN_MS = Number(process.env.IDEMFLOW_CHAOS_DRAIN_MS || 240_000);
for (const { name, env } of BROKERS) {
  const url = process.env[env];
  const skip = brokerSkip(env);
  test(`${name}: ${SWAPS} swaps in any order, with kills, end where their histories lead`, { skip, timeout: DRAIN_MS + 90_000 }, async (t) => {
    const { figures, problems } = await runChaos({ brokerName: name, url, swaps: SWAPS, timeoutMs: DRAIN_MS, note: (line) => t.diagnostic(line) });
    t.diagnostic(`${name} chaos (seed ${figures.seed}): ${JSON.stringify(figures)}`);
    console.log(`${name}: ${figures.deliveries} deliveries of ${figures.messages} messages in ${figures.seconds} s = ${figures.deliveriesPerSecond} deliveries/s end to end (information, not asserted)`);
    assert.deepEqual(problems, [], `seed ${figures.seed}`);
  });
}
