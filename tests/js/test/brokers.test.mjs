// Real brokers, real chaos: the example RabbitMQ, NATS JetStream and Kafka
// workers (js/examples) as 3 processes over PostgreSQL (the Kafka ones in one
// consumer group on a 6-partition topic), 2 outbox consumers calling the
// example fake provider, about 2,000 messages for 400 swaps (IDEMFLOW_CHAOS_SWAPS;
// `make soak` runs 1,000) from several
// publishers in shuffled order, with duplicates, re-publications, reversals,
// conflicts and bodies that are not events, and SIGKILLs of workers holding
// deliveries and of consumers holding claims (in Kafka, each kill after the
// group rebalanced from the last). After draining, every swap must be where
// its history leads in order (tests/js/workers/chaos.mjs checks everything it
// lists). Deliveries per second are printed, never asserted. Needs
// IDEMFLOW_PG_URL and IDEMFLOW_AMQP_URL / IDEMFLOW_NATS_URL /
// IDEMFLOW_KAFKA_BROKERS (.ci/run sets them; `make kafka-broker` starts Kafka's).
// IDEMFLOW_CHAOS_BROKERS (say "kafka") runs only those brokers.
// IDEMFLOW_CHAOS_REINCLUSIONS (a share, 0.1 by default) makes that share of
// the swaps re-included deposits (workers/chaos.mjs): each must be exchanged
// exactly once. IDEMFLOW_CHAOS_SECOND_DEPOSITS (a share, 0.1 by default) gives
// that share of the swaps a second deposit, alternately covering (it races
// the first: one exchange, the other deposit reviewed once) and partial
// (reviewed, never exchanged).

import assert from 'node:assert/strict';
import test from 'node:test';
import { BROKERS, brokerSkip, runChaos } from '../workers/chaos.mjs';

const SWAPS = Number(process.env.IDEMFLOW_CHAOS_SWAPS || 400);
// How long a run may take to drain before it fails (a loaded machine needs more).
const DRAIN_MS = Number(process.env.IDEMFLOW_CHAOS_DRAIN_MS || 240_000);
const WORKER_KILLS = Number(process.env.IDEMFLOW_CHAOS_WORKER_KILLS || 6);
// In Kafka each kill waits for the group to rebalance from the last (seconds each on the broker of the
// tests): 3 in make test; `make kafka-chaos` runs 20 (IDEMFLOW_CHAOS_KAFKA_WORKER_KILLS).
const KAFKA_WORKER_KILLS = Number(process.env.IDEMFLOW_CHAOS_KAFKA_WORKER_KILLS || process.env.IDEMFLOW_CHAOS_WORKER_KILLS || 3);
const REINCLUSIONS = Number(process.env.IDEMFLOW_CHAOS_REINCLUSIONS ?? 0.1);
const SECOND_DEPOSITS = Number(process.env.IDEMFLOW_CHAOS_SECOND_DEPOSITS ?? 0.1);
const ONLY = process.env.IDEMFLOW_CHAOS_BROKERS ? new Set(process.env.IDEMFLOW_CHAOS_BROKERS.split(',')) : null;

for (const { name, env } of BROKERS.filter((broker) => ONLY === null || ONLY.has(broker.name))) {
  const url = process.env[env];
  const skip = brokerSkip(env);
  test(`${name}: ${SWAPS} swaps in any order, with kills, end where their histories lead`, {
    skip,
    timeout: DRAIN_MS + 90_000,
  }, async (t) => {
    const { figures, problems } = await runChaos({
      brokerName: name,
      url,
      swaps: SWAPS,
      workerKills: name === 'kafka' ? KAFKA_WORKER_KILLS : WORKER_KILLS,
      timeoutMs: DRAIN_MS,
      planOptions: { reinclusions: REINCLUSIONS, secondDeposits: SECOND_DEPOSITS },
      note: (line) => t.diagnostic(line),
    });
    t.diagnostic(`${name} chaos (seed ${figures.seed}): ${JSON.stringify(figures)}`);
    const rebalances = figures.rebalances === undefined ? '' : `, ${figures.rebalances} rebalances`;
    console.log(
      `${name}: ${figures.deliveries} deliveries of ${figures.messages} messages in ${figures.seconds} s = ${figures.deliveriesPerSecond} deliveries/s end to end` +
        ` (information, not asserted); ${figures.workerKills} worker and ${figures.consumerKills} consumer kills${rebalances}, ${figures.exchanges} exchanges, ${figures.reincluded} re-included swaps (${figures.reincludedExchanged} exchanged), ` +
        `${figures.secondDeposits} swaps with a second deposit (${figures.secondFull} covering, ${figures.secondPartial} partial; ${figures.secondDepositsOk} exchanged once and reviewed once, ${figures.secondExchanged} of them from the second deposit), ` +
        `${figures.depositReviews} deposit reviews, ${figures.stuck} stuck`,
    );
    assert.deepEqual(problems, [], `seed ${figures.seed}`);
    assert.ok(REINCLUSIONS === 0 || figures.reincluded > 0, 'the plan holds re-included deposits');
    assert.ok(
      SECOND_DEPOSITS === 0 || (figures.secondFull > 0 && figures.secondPartial > 0),
      'the plan holds covering and partial second deposits',
    );
    // One review per extra confirmed deposit, and none for any other swap.
    assert.equal(figures.depositReviews, figures.secondDeposits);
  });
}
