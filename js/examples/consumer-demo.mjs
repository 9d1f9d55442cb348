// An outbox consumer draining START_EXCHANGE operations into a simulated
// exchange provider that fails sometimes and honours idempotency keys.
//
// Swaps are confirmed through idemflow (one START_EXCHANGE operation each).
// A first worker claims a batch, calls the provider and crashes before it
// records anything. Two more workers drain the outbox: the crashed worker's
// claims expire and are taken over, failures are retried with backoff, a
// poison operation and a rejected one end as dead letters, and an operator
// requeues one after the provider's outage. Time is simulated (an injected
// clock jumps to the next due time), so a run takes milliseconds and every
// run with the same seed prints the same story.
//
// Run with `make demo` (or from tests/js after `make examples`):
//   node examples/consumer-demo.mjs [--swaps N] [--seed S] [--verbose]
import { createOutboxConsumer, InMemoryStore, processEvent } from 'idemflow';
import { startMetrics } from './shared/metrics-summary.mjs';
import { random } from './shared/random.mjs';

const metrics = await startMetrics();

const argv = process.argv.slice(2);
const option = (name, fallback) => {
  const at = argv.indexOf(`--${name}`);
  return at >= 0 && at + 1 < argv.length ? Number(argv[at + 1]) : fallback;
};
const SWAPS = option('swaps', 40);
const SEED = option('seed', 42);
const VERBOSE = argv.includes('--verbose');
const T0 = Date.UTC(2026, 0, 1);
const POLICY = { maxAttempts: 5, baseDelayMs: 1_000, maxDelayMs: 60_000, leaseMs: 30_000 };
const PROVIDER_MINIMUM_UNITS = 20_000;

const rand = random(SEED);

const clock = { t: T0, now: () => clock.t };

/**
 * An exchange provider with an idempotency contract: a request whose key it
 * has seen returns the first result and executes nothing. It fails like real
 * ones do: unavailable before doing anything, or timing out after executing
 * (the caller cannot tell it happened), or rejecting for good.
 */
class SimulatedExchangeProvider {
  executions = new Map(); // idempotency key -> exchange
  exchangesPerSwap = new Map();
  requests = 0;
  replays = 0;
  outage = new Set(); // swaps whose market is down

  async startExchange({ idempotencyKey, swapId, amountUnits }) {
    this.requests += 1;
    await Promise.resolve();
    if (this.outage.has(swapId) || rand() < 0.12) {
      throw Object.assign(new Error('503 service unavailable'), { code: 'PROVIDER_UNAVAILABLE' });
    }
    const earlier = this.executions.get(idempotencyKey);
    if (earlier) {
      this.replays += 1;
      return earlier;
    }
    if (BigInt(amountUnits) < BigInt(PROVIDER_MINIMUM_UNITS)) {
      throw Object.assign(new Error(`amount ${amountUnits} is below the minimum ${PROVIDER_MINIMUM_UNITS}`), {
        code: 'PROVIDER_REJECTED',
        retryable: false,
      });
    }
    const exchange = { exchangeId: `ex-${this.executions.size + 1}`, swapId, amountUnits };
    this.executions.set(idempotencyKey, exchange);
    this.exchangesPerSwap.set(swapId, (this.exchangesPerSwap.get(swapId) ?? 0) + 1);
    if (rand() < 0.1) {
      throw Object.assign(new Error('timed out after 30 s (the exchange may have started)'), { code: 'PROVIDER_TIMEOUT' });
    }
    return exchange;
  }
}

const provider = new SimulatedExchangeProvider();

// ---- Confirm the swaps: one START_EXCHANGE operation each -------------------
const workflows = [];
for (let i = 1; i <= SWAPS; i += 1) {
  const amount = i % 17 === 7 ? 9_000 + i : 100_000 + Math.floor(rand() * 9_000_000);
  const depositRef = `btc-mainnet:tx-${(i * 7919).toString(16)}:vout-${i % 3}`;
  // Detected (the watcher's observation 1 of the deposit), waiting for its confirmation.
  workflows.push({
    id: `swap-${String(i).padStart(4, '0')}`,
    status: 'deposit',
    revision: 1,
    deposits: { [depositRef]: { event: 'DEPOSIT_DETECTED', amountUnits: String(amount), sequence: 1 } },
  });
}
const store = new InMemoryStore(workflows, { now: clock.now });
for (const workflow of workflows) {
  const [[depositRef, { amountUnits }]] = Object.entries(workflow.deposits);
  const event = {
    eventId: `watcher:${workflow.id}`,
    workflowId: workflow.id,
    type: 'DEPOSIT_CONFIRMED',
    depositRef,
    amountUnits,
    sequence: 2,
  };
  await processEvent(store, event);
  await processEvent(store, event); // the queue redelivers: a duplicate, no second operation
}
const poison = workflows[Math.min(4, workflows.length - 1)].id;
provider.outage.add(poison);

const handler = async (operation, { idempotencyKey }) => {
  await provider.startExchange({ idempotencyKey, swapId: operation.workflowId, amountUnits: operation.payload.amountUnits });
};

// What the summary counts: a host would wire the same events to its logger or metrics.
const counts = { claims: 0, firstAttempts: 0, retries: 0, takenOver: 0, dead: [], retryCodes: {} };
const crashedHeld = new Set();
function observe(consumer, name) {
  consumer.on('claimed', (e) => {
    counts.claims += 1;
    if (e.attempt === 1) counts.firstAttempts += 1;
    if (crashedHeld.has(e.operationId)) {
      counts.takenOver += 1;
      crashedHeld.delete(e.operationId);
    }
  });
  consumer.on('retry-scheduled', (e) => {
    counts.retries += 1;
    const code = e.error.split(':')[0];
    counts.retryCodes[code] = (counts.retryCodes[code] ?? 0) + 1;
  });
  consumer.on('dead', (e) => counts.dead.push(e));
  if (VERBOSE) {
    for (const event of ['claimed', 'done', 'retry-scheduled', 'dead', 'released', 'lease-lost', 'stale-completion', 'store-error']) {
      consumer.on(event, (e) => console.log(`  +${String((clock.t - T0) / 1000).padStart(7)}s ${name} ${event} ${JSON.stringify(e)}`));
    }
  }
}

// ---- worker-1 claims a batch, calls the provider, and crashes ---------------
let reachedCrash = 0;
let allReached;
const crashPoint = new Promise((resolve) => {
  allReached = resolve;
});
const crashing = createOutboxConsumer(
  store,
  {
    START_EXCHANGE: async (operation, context) => {
      try {
        await handler(operation, context);
      } catch {
        // the crash comes before the result is recorded, whatever it was
      } finally {
        crashedHeld.add(operation.id);
        reachedCrash += 1;
        if (reachedCrash === Math.min(4, SWAPS)) allReached();
        await new Promise(() => {}); // the process dies here: nothing is recorded, the lease is never renewed
      }
    },
  },
  { ...POLICY, owner: 'worker-1', concurrency: 4, autoRenew: false },
);
observe(crashing, 'worker-1');
crashing.runOnce();
await crashPoint;
const crashedAt = clock.t;

// ---- worker-2 and worker-3 drain the outbox ----------------------------------
// Virtual time: the workers drain what is due, then the clock jumps to the
// next due time (a pending operation's next attempt, or an expired lease).
const workers = ['worker-2', 'worker-3'].map((owner) => {
  const consumer = createOutboxConsumer(store, { START_EXCHANGE: handler }, { ...POLICY, owner, concurrency: 4, autoRenew: false });
  observe(consumer, owner);
  return consumer;
});

async function drainUntilQuiet() {
  let rounds = 0;
  for (;;) {
    const results = await Promise.all(workers.map((w) => w.drain()));
    rounds += results.reduce((sum, r) => sum + r.rounds, 0);
    const waiting = [
      ...(await store.listOperations({ status: 'pending', limit: 100_000 })).map((op) => op.nextAttemptAt),
      ...(await store.listOperations({ status: 'claimed', limit: 100_000 })).map((op) => op.leaseExpiresAt),
    ];
    if (waiting.length === 0) return rounds;
    clock.t = Math.max(clock.t, Math.min(...waiting));
  }
}

let rounds = await drainUntilQuiet();
const drainedAt = clock.t;

// ---- an operator requeues the poison operation once the outage is over ------
provider.outage.clear();
const deadBeforeRequeue = await store.listOperations({ status: 'dead', limit: 100_000 });
const requeued = [];
for (const operation of deadBeforeRequeue) {
  if (operation.lastError.startsWith('PROVIDER_UNAVAILABLE') && (await store.requeue(operation.id))) requeued.push(operation.id);
}
rounds += await drainUntilQuiet();

// ---- Summary ------------------------------------------------------------------
const all = await store.listOperations({ limit: 100_000 });
const byStatus = (status) => all.filter((op) => op.status === status);
const done = byStatus('done');
const deadLetters = byStatus('dead');
const twice = [...provider.exchangesPerSwap].filter(([, n]) => n > 1);
const doneWithoutOneExchange = done.filter((op) => provider.exchangesPerSwap.get(op.workflowId) !== 1);
const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;
const retryBreakdown = Object.entries(counts.retryCodes)
  .map(([code, n]) => `${code} ${n}`)
  .join(', ');

console.log(`idemflow consumer demo (seed ${SEED}): ${SWAPS} swaps confirmed twice each -> ${all.length} START_EXCHANGE operations`);
console.log(
  `policy        maxAttempts ${POLICY.maxAttempts}, backoff full jitter from ${POLICY.baseDelayMs} ms doubling to ${POLICY.maxDelayMs} ms, lease ${POLICY.leaseMs} ms`,
);
console.log(
  `crash         worker-1 claimed ${reachedCrash}, called the provider and died at +${seconds(crashedAt - T0)}; ${counts.takenOver} claims taken over after their leases expired`,
);
console.log(`drain         worker-2 and worker-3, ${rounds} claim rounds, quiet at +${seconds(drainedAt - T0)} of simulated time`);
console.log(
  `attempts      ${counts.claims} claims: ${counts.firstAttempts} first attempts, ${counts.claims - counts.firstAttempts} later ones`,
);
console.log(`retries       ${counts.retries} scheduled${retryBreakdown ? ` (${retryBreakdown})` : ''}`);
console.log(`dead letters  ${counts.dead.length}`);
for (const e of counts.dead) {
  const mark = requeued.includes(e.operationId) ? '  -> requeued by the operator' : '';
  console.log(
    `  ${e.operationId.padEnd(26)} ${e.reason.padEnd(14)} after ${e.attempt} attempt${e.attempt === 1 ? '' : 's'}: ${e.error}${mark}`,
  );
}
console.log(
  `provider      ${provider.requests} requests, ${provider.executions.size} exchanges executed, ${provider.replays} answered from idempotency keys`,
);
console.log(
  `outcome       ${done.length} done, ${deadLetters.length} dead, ${all.length - done.length - deadLetters.length} unfinished; swaps exchanged twice: ${twice.length}`,
);

await metrics.print();

const ok =
  twice.length === 0 && doneWithoutOneExchange.length === 0 && done.length + deadLetters.length === all.length && all.length === SWAPS;
console.log(
  ok
    ? 'check         every done operation has exactly one exchange at the provider, though handlers ran more than once'
    : `check         FAILED: ${JSON.stringify({ twice, doneWithoutOneExchange: doneWithoutOneExchange.map((op) => op.id) })}`,
);
process.exitCode = ok ? 0 : 1;
