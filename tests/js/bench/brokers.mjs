// End-to-end deliveries per second through real brokers: the chaos run of
// test/brokers.test.mjs (example workers over PostgreSQL, kills included),
// reported as information. Runs for each broker whose URL is set, with
// IDEMFLOW_PG_URL: IDEMFLOW_AMQP_URL (RabbitMQ), IDEMFLOW_NATS_URL (NATS JetStream).

import { PG_URL } from '../workers/backends.mjs';
import { runChaos } from '../workers/chaos.mjs';

const SWAPS = Number(process.env.BENCH_CHAOS_SWAPS ?? 1000);

console.log('broker chaos run: example workers (3) and outbox consumers (2) over PostgreSQL, with SIGKILLs');
for (const [name, env] of [
  ['rabbitmq', 'IDEMFLOW_AMQP_URL'],
  ['nats', 'IDEMFLOW_NATS_URL'],
]) {
  const url = process.env[env];
  if (!PG_URL || !url) {
    console.log(`  ${name.padEnd(9)} skipped: ${!PG_URL ? 'IDEMFLOW_PG_URL' : env} is not set`);
    continue;
  }
  const { figures, problems } = await runChaos({ brokerName: name, url, swaps: SWAPS });
  console.log(
    `  ${name.padEnd(9)} ${String(figures.deliveriesPerSecond).padStart(6)} deliveries/s end to end  ` +
      `(${figures.deliveries} deliveries of ${figures.messages} messages in ${figures.seconds} s; ` +
      `${figures.workerKills} worker and ${figures.consumerKills} consumer kills; ${figures.exchanges} exchanges; ` +
      `${figures.stuck} stuck${problems.length ? `; ${problems.length} PROBLEMS: ${problems[0]}` : ''})`,
  );
}
