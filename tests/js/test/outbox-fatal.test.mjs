// A handler that fails fatally does not burn attempts (issue 34): an
// IdemflowError of disposition fatal says the worker is misconfigured (here
// idemflow/kafka's relay refusing a topic with the wrong partition count), so
// the consumer halts the operation type (claims none of it until
// resume(type); a new consumer starts with none halted), gives the attempt
// back and records the error, instead of counting the failure until the
// operation is dead. On an injected clock; every loop is bounded by rounds.

import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import { metrics } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { createOutboxConsumer, IdemflowError, InMemoryStore, processEvent } from 'idemflow';
import { createKafkaRelay } from 'idemflow/kafka';
import { numberedConfirmation as confirmation, numberedSwap as swap } from '../workers/fixtures.mjs';
import { backends } from '../workers/outbox-backends.mjs';

const T0 = Date.UTC(2026, 0, 1);
const TOPIC = 'swaps.operations';
const SERVED = new Set(['memory', 'sqlite', 'pg', 'mysql']);

function clock(start = T0) {
  const c = { t: start, now: () => c.t, advance: (ms) => (c.t += ms) };
  return c;
}

/** A kafkajs admin stand-in whose topic has `count` partitions. */
const adminWith = (count) => ({
  fetchTopicMetadata: async ({ topics }) => ({
    topics: topics.map((name) => ({ name, partitions: Array.from({ length: count }, (_, partition) => ({ partitionId: partition })) })),
  }),
});

/** The relay over a producer that records what it sends, checking for 6 partitions against a topic of `count`. */
function relayOn(count, sent) {
  return createKafkaRelay({ send: async (record) => sent.push(record) }, { topic: TOPIC, partitions: 6, admin: adminWith(count) });
}

/** Every event of `consumer`, as [name, payload]. */
function recorder(consumer) {
  const log = [];
  for (const name of ['retry-scheduled', 'dead', 'released', 'done', 'type-halted', 'type-resumed', 'store-error']) {
    consumer.on(name, (payload) => log.push([name, payload]));
  }
  return log;
}

for (const backend of backends) {
  if (!SERVED.has(backend.id)) continue;
  if (backend.skip) {
    test(`fatal handler errors on ${backend.name}`, { skip: backend.skip }, () => {});
    continue;
  }
  describe(`fatal handler errors on ${backend.name}`, { timeout: 120_000 }, () => {
    let env;
    before(async () => {
      env = await backend.setup();
    });
    afterEach(async () => {
      await env?.cleanup();
    });
    after(async () => {
      await env?.close();
    });

    /** Swaps 1…count confirmed (START_EXCHANGE each) and swap 9's payout (SEND_PAYOUT). */
    const scene = async (c, count) => {
      const exchanged = { id: 'swap-9', status: 'exchange', revision: 2, depositRef: 'r', amountUnits: '5' };
      const store = await env.open([...Array.from({ length: count }, (_, i) => swap(i + 1)), exchanged], c);
      for (let i = 1; i <= count; i += 1) assert.equal((await processEvent(store, confirmation(i))).outcome, 'applied');
      await processEvent(store, { eventId: 'x-9', workflowId: 'swap-9', type: 'EXCHANGE_COMPLETED', payoutUnits: '4' });
      return store;
    };
    const exchanges = (store) => store.listOperations({ type: 'START_EXCHANGE', limit: 100 });

    test('a relay refusing its topic halts START_EXCHANGE: no attempt counted, nothing dead, SEND_PAYOUT still runs; resume(type) runs them', async () => {
      const c = clock();
      const store = await scene(c, 3);
      const sent = [];
      let relay = relayOn(4, sent); // the topic came back with the broker's default count
      let exchangeCalls = 0;
      const consumer = createOutboxConsumer(
        store,
        {
          START_EXCHANGE: (operation, context) => {
            exchangeCalls += 1;
            return relay(operation, context);
          },
          SEND_PAYOUT: async () => {},
        },
        { now: c.now, autoRenew: false, maxAttempts: 2, maxDelayMs: 10_000 },
      );
      const log = recorder(consumer);

      // Many times the backoff and maxAttempts: counted, these failures would have left every exchange dead.
      for (let round = 0; round < 20; round += 1) {
        await consumer.runOnce();
        c.advance(60_000);
      }
      assert.equal(exchangeCalls, 3, 'each exchange ran once, in the first round; the halted type was not claimed again');
      assert.deepEqual(sent, []);
      assert.equal((await store.getOperation('send-payout:swap-9')).status, 'done', 'another type keeps running');
      for (const operation of await exchanges(store)) {
        assert.deepEqual([operation.status, operation.attempts, operation.nextAttemptAt], ['pending', 0, T0], operation.id);
        assert.match(operation.lastError, /^INVALID_ARGUMENT: createKafkaRelay: topic swaps\.operations has 4 partitions/);
      }
      assert.deepEqual(await store.listOperations({ status: 'dead' }), []);
      const halts = log.filter(([name]) => name === 'type-halted');
      assert.equal(halts.length, 1, 'halted once');
      const [, halt] = halts[0];
      assert.deepEqual([halt.type, halt.attempt, halt.haltedAt], ['START_EXCHANGE', 1, T0]);
      assert.match(halt.error, /^INVALID_ARGUMENT: .*has 4 partitions/);
      assert.deepEqual(consumer.halted(), { START_EXCHANGE: { haltedAt: T0, operationId: halt.operationId, error: halt.error } });
      const retries = log.filter(([name]) => name === 'retry-scheduled').map(([, e]) => [e.type, e.attemptCounted, e.delayMs]);
      assert.deepEqual(retries, Array(3).fill(['START_EXCHANGE', false, 0]));
      assert.deepEqual(
        log.filter(([name]) => name === 'dead' || name === 'store-error'),
        [],
      );

      // The topic is recreated with 6 partitions and the relay rebuilt; the consumer is told to resume.
      relay = relayOn(6, sent);
      assert.equal(consumer.resume('START_EXCHANGE'), true);
      assert.deepEqual(consumer.halted(), {});
      assert.deepEqual(log.at(-1), [
        'type-resumed',
        { type: 'START_EXCHANGE', haltedAt: T0, operationId: halt.operationId, error: halt.error },
      ]);
      assert.equal(consumer.resume('START_EXCHANGE'), false, 'not halted any more');
      const drained = await consumer.drain({ maxRounds: 10 });
      assert.equal(drained.done, 3);
      for (const operation of await exchanges(store)) {
        assert.deepEqual([operation.status, operation.attempts], ['done', 1], `${operation.id}: the refused attempt was given back`);
      }
      assert.equal(sent.length, 3);
      assert.throws(
        () => consumer.resume('OPEN_REVIEW'),
        (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT' && error.details.field === 'type',
      );
    });

    test("the halt is the consumer's own: a new consumer (a restarted worker) claims the type again", async () => {
      const c = clock();
      const store = await scene(c, 1);
      const sent = [];
      const options = { now: c.now, autoRenew: false, concurrency: 1 };
      const broken = relayOn(4, sent);
      const first = createOutboxConsumer(store, { START_EXCHANGE: broken }, options);
      assert.deepEqual(await first.runOnce(), { claimed: 1, done: 0, retried: 1, dead: 0, released: 0, stale: 0, errors: 0 });
      assert.deepEqual(Object.keys(first.halted()), ['START_EXCHANGE']);
      assert.equal((await first.runOnce()).claimed, 0, 'halted: nothing claimed');

      const restarted = createOutboxConsumer(store, { START_EXCHANGE: relayOn(6, sent) }, options);
      assert.deepEqual(restarted.halted(), {});
      assert.equal((await restarted.drain({ maxRounds: 5 })).done, 1);
      const [operation] = await exchanges(store);
      assert.deepEqual([operation.status, operation.attempts], ['done', 1]);
      assert.equal(sent.length, 1);
    });

    test('a fatal error on the last attempt is given back too; one marked retryable: false is dead and halts nothing', async () => {
      const c = clock();
      const store = await scene(c, 2);
      const fatal = (retryable) =>
        Object.assign(new IdemflowError('INVALID_ARGUMENT', 'the provider key is not set', { disposition: 'fatal' }), retryable);
      const consumer = createOutboxConsumer(
        store,
        {
          START_EXCHANGE: async () => {
            throw fatal({});
          },
          SEND_PAYOUT: async () => {
            throw fatal({ retryable: false });
          },
        },
        { now: c.now, autoRenew: false, maxAttempts: 1 },
      );
      const log = recorder(consumer);
      assert.deepEqual(await consumer.runOnce(), { claimed: 3, done: 0, retried: 2, dead: 1, released: 0, stale: 0, errors: 0 });
      for (const operation of await exchanges(store)) assert.deepEqual([operation.status, operation.attempts], ['pending', 0]);
      const payout = await store.getOperation('send-payout:swap-9');
      assert.deepEqual([payout.status, payout.attempts], ['dead', 1]);
      assert.deepEqual(Object.keys(consumer.halted()), ['START_EXCHANGE']);
      assert.deepEqual(
        log.filter(([name]) => name === 'dead').map(([, e]) => [e.type, e.reason]),
        [['SEND_PAYOUT', 'non-retryable']],
      );
    });
  });
}

/** A reader the test collects from when it wants to. */
class CollectingReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

test('idemflow.outbox.types.halted is 1 for a halted type and 0 once it is resumed', async () => {
  const reader = new CollectingReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  metrics.setGlobalMeterProvider(meterProvider);
  const halted = async () => {
    const { resourceMetrics } = await reader.collect();
    const points = resourceMetrics.scopeMetrics
      .filter((scope) => scope.scope.name === 'idemflow')
      .flatMap((scope) => scope.metrics.filter((metric) => metric.descriptor.name === 'idemflow.outbox.types.halted'))
      .flatMap((metric) => metric.dataPoints);
    return Object.fromEntries(points.map((point) => [point.attributes['idemflow.operation.type'], point.value]));
  };
  try {
    const c = clock();
    const store = new InMemoryStore([swap(1)], { now: c.now });
    await processEvent(store, confirmation(1));
    const consumer = createOutboxConsumer(store, { START_EXCHANGE: relayOn(4, []) }, { now: c.now, autoRenew: false });
    await consumer.runOnce();
    assert.deepEqual(await halted(), { START_EXCHANGE: 1 });
    consumer.resume('START_EXCHANGE');
    assert.deepEqual(await halted(), { START_EXCHANGE: 0 });
  } finally {
    metrics.disable();
    await meterProvider.shutdown();
  }
});
