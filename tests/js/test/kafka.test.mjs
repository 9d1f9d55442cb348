// Kafka: the outbox relay (idemflow/kafka) over a producer that records what
// it is asked to send, and, against the Kafka-protocol broker of
// `make kafka-broker` (IDEMFLOW_KAFKA_BROKERS, with IDEMFLOW_PG_URL), the
// example relay killed after the broker acknowledged a record and before the
// operation was marked done, and the example worker stopped with SIGTERM
// leaving its group (graceful-stop.test.mjs checks its commits as for the
// other brokers).
// The worker's eachBatch (examples/kafka-worker/consume.mjs) is also run over
// stand-ins for kafkajs's callbacks, to pin the order of settle, resolve,
// commit and heartbeat.
// The chaos run of the Kafka worker is in brokers.test.mjs.

import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createOutboxConsumer, IdemflowError, InMemoryStore, processEvent } from 'idemflow';
import { createKafkaRelay, kafkaRecord, RELAY_HEADERS } from 'idemflow/kafka';
import { openStore, PG_URL, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { brokerSkip, EXAMPLES, supervise } from '../workers/chaos.mjs';
import { detectedSwap } from '../workers/fixtures.mjs';
import { KAFKA_BROKERS, kafkaFor, watchTopics } from '../workers/kafka.mjs';

const T0 = Date.UTC(2026, 0, 1);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The smallest context manager there is, so that an active span is active inside the consumer's handler. */
class StorageContextManager {
  #storage = new AsyncLocalStorage();
  active() {
    return this.#storage.getStore() ?? ROOT_CONTEXT;
  }
  with(ctx, fn, thisArg, ...args) {
    return this.#storage.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind(_ctx, target) {
    return target;
  }
  enable() {
    return this;
  }
  disable() {
    this.#storage.disable();
    return this;
  }
}

const spans = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
before(() => {
  trace.setGlobalTracerProvider(tracerProvider);
  context.setGlobalContextManager(new StorageContextManager());
});
after(() => tracerProvider.shutdown());

const waiting = (i) => ({ id: `swap-${i}`, status: 'waiting', revision: 1 });
const confirmation = (i) => ({
  eventId: `watcher:swap-${i}:confirmed`,
  workflowId: `swap-${i}`,
  type: 'DEPOSIT_CONFIRMED',
  depositRef: `btc:tx-${i}:vout-0`,
  amountUnits: String(1000 + i),
  sequence: 1,
});

/** A producer that keeps what it is asked to send; `fail` makes the next sends throw. */
function recordingProducer() {
  const producer = {
    sent: [],
    fail: 0,
    async send(record) {
      if (producer.fail > 0) {
        producer.fail -= 1;
        throw Object.assign(new Error('KafkaJSNumberOfRetriesExceeded: connection refused'), { name: 'KafkaJSNumberOfRetriesExceeded' });
      }
      producer.sent.push(structuredClone(record));
      return [{ topicName: record.topic, partition: 0, errorCode: 0 }];
    },
  };
  return producer;
}

async function confirmedStore(count, options) {
  const store = new InMemoryStore(
    Array.from({ length: count }, (_, i) => waiting(i + 1)),
    { now: () => T0 },
  );
  for (let i = 1; i <= count; i += 1) assert.equal((await processEvent(store, confirmation(i), options)).outcome, 'applied');
  return store;
}

/** A swap whose exchange completed: a START_EXCHANGE and a SEND_PAYOUT in its outbox, at T0. */
async function exchangedSwap() {
  const store = new InMemoryStore([detectedSwap({ id: 'swap-9', revision: 3, depositRef: 'btc:tx-9:vout-0', amountUnits: '900' })], {
    now: () => T0,
  });
  for (const event of [
    {
      eventId: 'e-confirm',
      workflowId: 'swap-9',
      type: 'DEPOSIT_CONFIRMED',
      depositRef: 'btc:tx-9:vout-0',
      amountUnits: '900',
      sequence: 2,
    },
    { eventId: 'e-done', workflowId: 'swap-9', type: 'EXCHANGE_COMPLETED', payoutUnits: '880' },
  ])
    assert.equal((await processEvent(store, event)).outcome, 'applied');
  return store;
}

describe('the outbox relay to Kafka', () => {
  it('sends each operation as one record keyed by its workflow id, the operation id in a header, and marks it done', async () => {
    const store = await confirmedStore(2, { metadata: { correlationId: 'corr-7' } });
    const producer = recordingProducer();
    const relay = createKafkaRelay(producer, { topic: 'swaps.operations' });
    const consumer = createOutboxConsumer(store, { START_EXCHANGE: relay }, { now: () => T0, autoRenew: false });
    assert.equal((await consumer.runOnce()).done, 2);
    const records = producer.sent.sort((a, b) => a.messages[0].key.localeCompare(b.messages[0].key));
    assert.deepEqual(
      records.map((r) => [r.topic, r.messages.length, r.messages[0].key, r.acks]),
      [
        ['swaps.operations', 1, 'swap-1', -1],
        ['swaps.operations', 1, 'swap-2', -1],
      ],
      'one record per operation, each send asking every in-sync replica (acks -1)',
    );
    const [first] = records[0].messages;
    const stored = await store.getOperation('start-exchange:swap-1');
    assert.deepEqual(
      { ...first.headers, traceparent: undefined },
      {
        'idemflow-operation-id': 'start-exchange:swap-1',
        'idemflow-operation-type': 'START_EXCHANGE',
        'idemflow-workflow-id': 'swap-1',
        'idemflow-event-id': 'watcher:swap-1:confirmed',
        traceparent: undefined,
      },
    );
    assert.deepEqual(JSON.parse(first.value), {
      id: 'start-exchange:swap-1',
      type: 'START_EXCHANGE',
      workflowId: 'swap-1',
      eventId: 'watcher:swap-1:confirmed',
      payload: stored.payload,
      metadata: { correlationId: 'corr-7' },
    });
    assert.equal(stored.status, 'done');
  });

  it('sends each operation type to the topic the topic function names', async () => {
    const store = await exchangedSwap();
    const producer = recordingProducer();
    const relay = createKafkaRelay(producer, { topic: (operation) => `swaps.${operation.type.toLowerCase()}` });
    const consumer = createOutboxConsumer(store, { START_EXCHANGE: relay, SEND_PAYOUT: relay }, { now: () => T0, autoRenew: false });
    await consumer.drain();
    assert.deepEqual(producer.sent.map((r) => [r.topic, r.messages[0].headers['idemflow-operation-id']]).sort(), [
      ['swaps.send_payout', 'send-payout:swap-9'],
      ['swaps.start_exchange', 'start-exchange:swap-9'],
    ]);
  });

  it('a failed send leaves the operation to retry, and the next claim sends it again under the same operation id', async () => {
    let t = T0;
    const store = await confirmedStore(1);
    const producer = recordingProducer();
    producer.fail = 1;
    const consumer = createOutboxConsumer(
      store,
      { START_EXCHANGE: createKafkaRelay(producer, { topic: 'ops' }) },
      { now: () => t, autoRenew: false, baseDelayMs: 1000 },
    );
    const first = await consumer.runOnce();
    assert.deepEqual([first.retried, first.done, producer.sent.length], [1, 0, 0]);
    const pending = await store.getOperation('start-exchange:swap-1');
    assert.equal(pending.status, 'pending');
    assert.match(pending.lastError, /connection refused/);
    t = pending.nextAttemptAt;
    assert.equal((await consumer.runOnce()).done, 1);
    assert.deepEqual(
      producer.sent.map((r) => r.messages[0].headers['idemflow-operation-id']),
      ['start-exchange:swap-1'],
    );
    assert.equal((await store.getOperation('start-exchange:swap-1')).attempts, 2);
  });

  it('carries the stored trace context in traceparent, continued by the handler span when OpenTelemetry runs', async () => {
    spans.reset();
    const store = await confirmedStore(1);
    const [processSpan] = spans.getFinishedSpans().filter((s) => s.name === 'process DEPOSIT_CONFIRMED');
    const stored = (await store.getOperation('start-exchange:swap-1')).traceContext;
    assert.equal(stored, `00-${processSpan.spanContext().traceId}-${processSpan.spanContext().spanId}-01`);
    // Outside any span (a relay without OpenTelemetry sees only the context): the stored traceparent as it is.
    const operation = await store.getOperation('start-exchange:swap-1');
    assert.equal(kafkaRecord(operation, { traceContext: stored }, { topic: 'ops' }).message.headers.traceparent, stored);
    assert.equal(kafkaRecord(operation, { traceContext: null }, { topic: 'ops' }).message.headers.traceparent, undefined);
    // Inside the consumer: the handler span, a child of the delivery's span in the same trace.
    const producer = recordingProducer();
    await createOutboxConsumer(
      store,
      { START_EXCHANGE: createKafkaRelay(producer, { topic: 'ops' }) },
      { now: () => T0, autoRenew: false },
    ).runOnce();
    const [handler] = spans.getFinishedSpans().filter((s) => s.name === 'handle START_EXCHANGE');
    assert.equal(handler.parentSpanContext?.spanId ?? handler.parentSpanId, processSpan.spanContext().spanId);
    assert.equal(
      producer.sent[0].messages[0].headers.traceparent,
      `00-${processSpan.spanContext().traceId}-${handler.spanContext().spanId}-01`,
    );
  });

  it('refuses a producer without send, a missing or misspelt topic, and a topic function that names no topic', async () => {
    const code = (fn) => {
      try {
        fn();
      } catch (error) {
        return [error instanceof IdemflowError, error.code, error.details.field, error.details.suggestion ?? null];
      }
      return null;
    };
    assert.deepEqual(
      code(() => createKafkaRelay({}, { topic: 'ops' })),
      [true, 'INVALID_ARGUMENT', 'producer', null],
    );
    assert.deepEqual(
      code(() => createKafkaRelay(recordingProducer(), {})),
      [true, 'INVALID_ARGUMENT', 'topic', null],
    );
    assert.deepEqual(
      code(() => createKafkaRelay(recordingProducer(), { topic: '' })),
      [true, 'INVALID_ARGUMENT', 'topic', null],
    );
    assert.deepEqual(
      code(() => createKafkaRelay(recordingProducer(), { topic: 'ops', topics: 'x' })),
      [true, 'INVALID_ARGUMENT', 'topics', 'topic'],
    );
    const store = await confirmedStore(1);
    const operation = await store.getOperation('start-exchange:swap-1');
    assert.deepEqual(
      code(() => kafkaRecord(operation, null, { topic: () => undefined })),
      [true, 'INVALID_ARGUMENT', 'topic', null],
    );
  });
});

/** A producer whose sends wait until `release()`; `started` resolves with each send's record. */
function heldProducer() {
  const producer = {
    sent: [],
    acknowledged: [],
    pending: [],
    send(record) {
      producer.sent.push(structuredClone(record));
      return new Promise((resolve) => {
        producer.pending.push(() => {
          producer.acknowledged.push(record.messages[0].headers['idemflow-operation-id']);
          resolve([{ topicName: record.topic, partition: 0, errorCode: 0 }]);
        });
      });
    },
    release() {
      for (const acknowledge of producer.pending.splice(0)) acknowledge();
    },
  };
  return producer;
}

describe("the relay honours the handler's abort signal", () => {
  it('a signal already aborted sends nothing and rejects with its reason', async () => {
    const store = await confirmedStore(1);
    const operation = await store.getOperation('start-exchange:swap-1');
    const producer = recordingProducer();
    const relay = createKafkaRelay(producer, { topic: 'ops' });
    const controller = new AbortController();
    const reason = new DOMException('the lease was lost', 'AbortError');
    controller.abort(reason);
    await assert.rejects(relay(operation, { traceContext: null, signal: controller.signal }), (error) => error === reason);
    assert.deepEqual(producer.sent, [], 'nothing was sent');
  });

  it('an abort during the send rejects at once with its reason, and the acknowledgement that comes after it changes nothing', async () => {
    const store = await confirmedStore(1);
    const operation = await store.getOperation('start-exchange:swap-1');
    const producer = heldProducer();
    const relay = createKafkaRelay(producer, { topic: 'ops' });
    const controller = new AbortController();
    const sending = relay(operation, { traceContext: null, signal: controller.signal });
    assert.equal(producer.sent.length, 1, 'the send is in flight');
    const reason = new DOMException('the outbox consumer is stopping', 'AbortError');
    controller.abort(reason);
    await assert.rejects(sending, (error) => error === reason);
    assert.deepEqual(producer.acknowledged, [], 'rejected before the broker answered');
    producer.release();
    assert.deepEqual(producer.acknowledged, ['start-exchange:swap-1']);
  });

  it('the consumer stopping past its timeout: the relay gives the operation back at once, never done, though the broker acknowledges it later', async () => {
    const store = await confirmedStore(1);
    const producer = heldProducer();
    const consumer = createOutboxConsumer(
      store,
      { START_EXCHANGE: createKafkaRelay(producer, { topic: 'ops' }) },
      { now: () => T0, autoRenew: false, pollIntervalMs: 10 },
    );
    const released = [];
    consumer.on('released', ({ operationId }) => released.push(operationId));
    consumer.start();
    try {
      await until('the relay is sending', () => producer.sent.length === 1, 5000);
      // Without the signal the handler would hold stop() for the grace period and be abandoned, still claimed.
      const { abandoned } = await consumer.stop({ timeoutMs: 50, abortGraceMs: 10_000 });
      assert.deepEqual(abandoned, [], 'the handler ended on the abort');
      assert.deepEqual(released, ['start-exchange:swap-1'], 'released: the attempt not counted');
      producer.release();
      assert.deepEqual(producer.acknowledged, ['start-exchange:swap-1']);
      const operation = await store.getOperation('start-exchange:swap-1');
      assert.deepEqual([operation.status, operation.attempts], ['pending', 0], 'not done: the next claim sends it again');
    } finally {
      producer.release();
      await consumer.stop({ timeoutMs: 1000 });
    }
  });
});

/** An admin that answers fetchTopicMetadata from `partitions` (topic -> count; absent: no such topic), or throws `fail`. */
function fakeAdmin(partitions) {
  const admin = {
    calls: [],
    fail: null,
    async connect() {
      admin.calls.push('connect');
    },
    async disconnect() {
      admin.calls.push('disconnect');
    },
    async fetchTopicMetadata({ topics }) {
      admin.calls.push(`metadata ${topics}`);
      if (admin.fail) {
        const error = admin.fail;
        admin.fail = null;
        throw error;
      }
      const [topic] = topics;
      if (!(topic in partitions))
        throw Object.assign(new Error('This server does not host this topic-partition'), {
          name: 'KafkaJSProtocolError',
          type: 'UNKNOWN_TOPIC_OR_PARTITION',
        });
      return { topics: [{ name: topic, partitions: Array.from({ length: partitions[topic] }, (_, partitionId) => ({ partitionId })) }] };
    },
  };
  return admin;
}

describe("the relay checks each topic's partition count before its first send to it", () => {
  const operations = async (count) => {
    const store = await confirmedStore(count);
    return Promise.all(Array.from({ length: count }, (_, i) => store.getOperation(`start-exchange:swap-${i + 1}`)));
  };
  const refusal = (error) => [error instanceof IdemflowError, error.code, error.disposition, error.details];

  it('the count it was given: metadata read once, then every send goes out', async () => {
    const producer = recordingProducer();
    const admin = fakeAdmin({ ops: 6 });
    const relay = createKafkaRelay(producer, { topic: 'ops', partitions: 6, admin });
    await Promise.all((await operations(3)).map((operation) => relay(operation, { traceContext: null })));
    assert.deepEqual(admin.calls, ['connect', 'metadata ops', 'disconnect']);
    assert.equal(producer.sent.length, 3);
    await relay.ready();
    assert.equal(admin.calls.length, 3, 'ready() after the check reads nothing again');
  });

  it('another count or a missing topic: nothing is sent, every send and ready() refuse with a fatal INVALID_ARGUMENT naming topic, expected and actual', async () => {
    const [first, second] = await operations(2);
    for (const [partitions, reason, actual] of [
      [{ ops: 4 }, 'partition count mismatch', 4],
      [{}, 'no such topic', null],
    ]) {
      const producer = recordingProducer();
      const admin = fakeAdmin(partitions);
      const relay = createKafkaRelay(producer, { topic: 'ops', partitions: 6, admin });
      const expected = [true, 'INVALID_ARGUMENT', 'fatal', { field: 'partitions', reason, topic: 'ops', expected: 6, actual }];
      await assert.rejects(relay.ready(), (error) => assert.deepEqual(refusal(error), expected) ?? true);
      for (const operation of [first, second])
        await assert.rejects(relay(operation, { traceContext: null }), (error) => assert.deepEqual(refusal(error), expected) ?? true);
      assert.deepEqual(producer.sent, [], 'nothing sent to the wrong topic');
      assert.deepEqual(admin.calls, ['connect', 'metadata ops', 'disconnect'], 'the refusal is kept: metadata read once');
    }
  });

  it('a read that fails is no answer: that send fails with the error as it is, the next one reads again', async () => {
    const [operation] = await operations(1);
    const producer = recordingProducer();
    const admin = fakeAdmin({ ops: 6 });
    admin.fail = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9092'), { code: 'ECONNREFUSED' });
    const relay = createKafkaRelay(producer, { topic: 'ops', partitions: 6, admin });
    await assert.rejects(relay(operation, { traceContext: null }), /ECONNREFUSED/);
    assert.equal(producer.sent.length, 0);
    await relay(operation, { traceContext: null });
    assert.equal(producer.sent.length, 1);
    assert.deepEqual(admin.calls, ['connect', 'metadata ops', 'disconnect', 'connect', 'metadata ops', 'disconnect']);
  });

  it('an abort while the metadata is read rejects at once with its reason and sends nothing; the answer serves the next send', async () => {
    const [operation] = await operations(1);
    const producer = recordingProducer();
    const admin = fakeAdmin({ ops: 6 });
    let answer;
    const read = admin.fetchTopicMetadata;
    admin.fetchTopicMetadata = (request) =>
      new Promise((resolve) => {
        answer = () => resolve(read(request));
      });
    const relay = createKafkaRelay(producer, { topic: 'ops', partitions: 6, admin });
    const controller = new AbortController();
    const sending = relay(operation, { traceContext: null, signal: controller.signal });
    await until('the metadata is being read', () => answer !== undefined, 5000);
    const reason = new DOMException('the lease was lost', 'AbortError');
    controller.abort(reason);
    await assert.rejects(sending, (error) => error === reason);
    answer();
    await relay(operation, { traceContext: null });
    assert.equal(producer.sent.length, 1, 'only the second send went out');
    assert.deepEqual(admin.calls, ['connect', 'metadata ops', 'disconnect'], 'read once');
  });

  it('with a topic function, each topic is checked once, on its first send or by ready(topics)', async () => {
    const store = await exchangedSwap();
    const producer = recordingProducer();
    const admin = fakeAdmin({ 'swaps.start_exchange': 6, 'swaps.send_payout': 3 });
    const relay = createKafkaRelay(producer, { topic: (operation) => `swaps.${operation.type.toLowerCase()}`, partitions: 6, admin });
    await relay.ready(['swaps.start_exchange']);
    const stats = await createOutboxConsumer(
      store,
      { START_EXCHANGE: relay, SEND_PAYOUT: relay },
      { now: () => T0, autoRenew: false },
    ).runOnce();
    assert.deepEqual([stats.done, stats.retried], [1, 1]);
    assert.deepEqual(
      producer.sent.map((r) => r.topic),
      ['swaps.start_exchange'],
    );
    assert.match((await store.getOperation('send-payout:swap-9')).lastError, /swaps\.send_payout has 3 partitions, not the 6/);
    assert.deepEqual(
      admin.calls.filter((call) => call.startsWith('metadata')),
      ['metadata swaps.start_exchange', 'metadata swaps.send_payout'],
    );
  });

  it('refuses partitions that are not a count, partitions without an admin, and an admin without partitions', () => {
    const field = (options) => {
      try {
        createKafkaRelay(recordingProducer(), { topic: 'ops', ...options });
      } catch (error) {
        return [error instanceof IdemflowError, error.code, error.disposition, error.details.field];
      }
      return null;
    };
    for (const partitions of [0, -1, 1.5, '6', Number.NaN])
      assert.deepEqual(field({ partitions, admin: fakeAdmin({}) }), [true, 'INVALID_ARGUMENT', 'fatal', 'partitions'], String(partitions));
    assert.deepEqual(field({ partitions: 6 }), [true, 'INVALID_ARGUMENT', 'fatal', 'admin']);
    assert.deepEqual(field({ partitions: 6, admin: {} }), [true, 'INVALID_ARGUMENT', 'fatal', 'admin']);
    assert.deepEqual(field({ admin: fakeAdmin({}) }), [true, 'INVALID_ARGUMENT', 'fatal', 'admin']);
    assert.equal(field({ partitions: 6, admin: fakeAdmin({}) }), null);
  });
});

// ---- The worker's eachBatch --------------------------------------------------

const skipExamples = fs.existsSync(EXAMPLES) ? false : 'tests/js/examples is missing: run `make examples`';

describe('the Kafka worker takes a batch in chunks', { skip: skipExamples }, () => {
  const message = (offset, notBefore) => ({
    offset: String(offset),
    key: null,
    value: Buffer.from('{}'),
    headers: notBefore === undefined ? {} : { 'idemflow-not-before': Buffer.from(String(notBefore)) },
  });

  /** kafkajs's eachBatch arguments, each call written to `calls`. */
  function callbacks(topic, messages, { running = () => true } = {}) {
    const calls = [];
    const resumed = [];
    return {
      calls,
      resumed,
      args: {
        batch: { topic, partition: 3, messages },
        resolveOffset: (offset) => calls.push(`resolve ${offset}`),
        uncommittedOffsets: () => ({ topics: [{ topic, partitions: [{ partition: 3, offset: 'resolved' }] }] }),
        commitOffsetsIfNecessary: async (offsets) => {
          calls.push(offsets ? 'commit resolved' : 'commit nothing');
        },
        heartbeat: async () => {
          calls.push('heartbeat');
        },
        isRunning: running,
        isStale: () => false,
        pause: () => {
          calls.push('pause');
          return () => resumed.push(Date.now());
        },
      },
    };
  }

  it('settles a chunk, then resolves its last offset, commits and heartbeats, chunk after chunk', async () => {
    const { inChunks } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    const { calls, args } = callbacks(
      'swaps',
      [10, 11, 12, 13, 14].map((o) => message(o)),
    );
    await inChunks({
      size: 2,
      retryTopic: 'swaps.retry',
      settle: async (topic, partition, chunk) => {
        calls.push(`settle ${topic}/${partition} ${chunk.map((m) => m.offset)}`);
      },
    })(args);
    assert.deepEqual(calls, [
      'settle swaps/3 10,11',
      'resolve 11',
      'commit resolved',
      'heartbeat',
      'settle swaps/3 12,13',
      'resolve 13',
      'commit resolved',
      'heartbeat',
      'settle swaps/3 14',
      'resolve 14',
      'commit resolved',
      'heartbeat',
    ]);
  });

  it('a chunk whose settling fails is neither resolved nor committed', async () => {
    const { inChunks } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    const { calls, args } = callbacks(
      'swaps',
      [10, 11, 12, 13].map((o) => message(o)),
    );
    const settle = async (_topic, _partition, chunk) => {
      calls.push(`settle ${chunk.map((m) => m.offset)}`);
      if (chunk[0].offset === '12') throw new Error('the broker refused a dead letter');
    };
    await assert.rejects(inChunks({ size: 2, retryTopic: 'swaps.retry', settle })(args), /refused a dead letter/);
    assert.deepEqual(calls, ['settle 10,11', 'resolve 11', 'commit resolved', 'heartbeat', 'settle 12,13']);
  });

  it('takes no further chunk once the consumer is stopping', async () => {
    const { inChunks } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    let chunks = 0;
    const { calls, args } = callbacks(
      'swaps',
      [10, 11, 12, 13].map((o) => message(o)),
      { running: () => chunks < 1 },
    );
    await inChunks({
      size: 2,
      retryTopic: 'swaps.retry',
      settle: async (_topic, _partition, chunk) => {
        chunks += 1;
        calls.push(`settle ${chunk.map((m) => m.offset)}`);
      },
    })(args);
    assert.deepEqual(calls, ['settle 10,11', 'resolve 11', 'commit resolved', 'heartbeat']);
  });

  it('on the retry topic, settles the copies that are due and pauses the partition until the next one is', async () => {
    const { inChunks } = await import(path.join(EXAMPLES, 'kafka-worker/consume.mjs'));
    const now = Date.now();
    const due = now + 300;
    const { calls, resumed, args } = callbacks('swaps.retry', [
      message(20, now - 1000),
      message(21),
      message(22, due),
      message(23, now - 1000),
    ]);
    await inChunks({
      size: 16,
      retryTopic: 'swaps.retry',
      settle: async (_topic, _partition, chunk) => {
        calls.push(`settle ${chunk.map((m) => m.offset)}`);
      },
    })(args);
    assert.deepEqual(calls, ['settle 20,21', 'resolve 21', 'commit resolved', 'heartbeat', 'pause']);
    assert.deepEqual(resumed, [], 'paused, not resumed yet');
    await until('the partition is resumed', () => resumed.length === 1, 5000);
    assert.ok(resumed[0] >= due, 'resumed once the copy was due');
  });
});

// ---- Against the broker ------------------------------------------------------

const skipBroker = brokerSkip('IDEMFLOW_KAFKA_BROKERS');

/** Resolves once `done()` is true, polling; rejects after `ms`. */
async function until(what, done, ms) {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

async function exited(child) {
  if (child.exitCode !== null || child.signalCode !== null) return [child.exitCode, child.signalCode];
  const [code, signal] = await once(child, 'exit');
  return [code, signal];
}

describe('the Kafka example against the broker', { skip: skipBroker }, () => {
  it('a relay killed after the broker acknowledged a record, before marking the operation done: the next relay sends the same operation id again', {
    timeout: 120_000,
  }, async () => {
    const prefix = uniquePrefix();
    const tables = tablesFor(prefix);
    const db = await openStore('pg', { tables, url: PG_URL, poolSize: 2 });
    await db.store.migrate();
    const topic = `idemflow-${prefix}.operations`;
    const kafka = kafkaFor(`relay-test-${prefix}`);
    // Created first, with the example's 6 partitions: the reader's subscription would otherwise auto-create
    // it with the broker's default, and the relay would refuse to start on it.
    const { ensureTopic } = await import(path.join(EXAMPLES, 'kafka-worker/topology.mjs'));
    await ensureTopic(kafka, [topic]);
    const watcher = await watchTopics(kafka, [topic]);
    const children = [];
    try {
      spans.reset();
      for (let i = 1; i <= 3; i += 1) {
        await db.store.putWorkflow(waiting(i));
        assert.equal((await processEvent(db.store, confirmation(i))).outcome, 'applied');
      }
      const ids = [1, 2, 3].map((i) => `start-exchange:swap-${i}`);
      const traceContexts = new Map();
      for (const id of ids) traceContexts.set(id, (await db.store.getOperation(id)).traceContext);
      assert.ok(
        [...traceContexts.values()].every((tc) => /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/.test(tc)),
        'the deliveries stored their trace context',
      );

      const env = {
        IDEMFLOW_KAFKA_BROKERS: KAFKA_BROKERS,
        IDEMFLOW_PG_URL: PG_URL,
        IDEMFLOW_TABLE_PREFIX: prefix,
        RELAY_TOPIC: topic,
        OUTBOX_LEASE_MS: '2000',
        OUTBOX_POLL_MS: '100',
        OUTBOX_BASE_DELAY_MS: '100',
      };
      const acknowledged = new Set();
      const held = supervise(
        path.join(EXAMPLES, 'kafka-worker/relay.mjs'),
        env,
        (line) => {
          if (line.role === 'hold') for (const id of line.acknowledged) acknowledged.add(id);
        },
        ['--import', fileURLToPath(new URL('../workers/kafka-hold-after-send.mjs', import.meta.url))],
      );
      children.push(held);
      await until('the first relay sends every operation', () => acknowledged.size === ids.length, 60_000);
      await watcher.caughtUp();
      assert.equal(watcher.messages(topic).length, 3, 'the broker holds one record per operation');
      for (const id of ids) assert.equal((await db.store.getOperation(id)).status, 'claimed', `${id} is not done before the kill`);
      held.kill('SIGKILL');
      await exited(held);

      const done = [];
      const relay = supervise(path.join(EXAMPLES, 'kafka-worker/relay.mjs'), env, (line) => {
        if (line.role === 'relay' && line.event === 'done') done.push(line.operationId);
      });
      children.push(relay);
      await until(
        'the second relay marks every operation done',
        async () => {
          const statuses = await Promise.all(ids.map(async (id) => (await db.store.getOperation(id)).status));
          return statuses.every((status) => status === 'done');
        },
        60_000,
      );
      relay.kill('SIGTERM');
      assert.deepEqual(await exited(relay), [0, null], 'the relay stops on SIGTERM with exit code 0');
      assert.deepEqual(done.sort(), ids);

      await watcher.caughtUp();
      const records = watcher.messages(topic);
      const byId = new Map();
      for (const record of records) {
        const id = record.headers[RELAY_HEADERS.operationId].toString();
        byId.set(id, [...(byId.get(id) ?? []), record]);
      }
      assert.deepEqual([...byId.keys()].sort(), ids);
      for (const [id, copies] of byId) {
        assert.equal(copies.length, 2, `${id}: sent before the kill and again after it`);
        const operation = await db.store.getOperation(id);
        assert.equal(operation.attempts, 2);
        for (const copy of copies) {
          assert.equal(copy.key.toString(), operation.workflowId, 'keyed by the workflow id');
          assert.equal(copy.headers.traceparent.toString(), traceContexts.get(id), 'the stored trace context travels along');
        }
        assert.equal(copies[0].value.toString(), copies[1].value.toString(), 'the second copy is the same record');
        assert.equal(copies[0].partition, copies[1].partition, 'in the same partition');
      }
    } finally {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await watcher.close();
      const admin = kafka.admin();
      await admin.connect();
      await admin.deleteTopics({ topics: [topic] }).catch(() => {});
      await admin.disconnect();
      await db.drop();
      await db.close();
    }
  });

  it('a worker stopped with SIGTERM leaves the group, and the member that takes over gets nothing it settled again', {
    timeout: 150_000,
  }, async () => {
    const prefix = uniquePrefix();
    const base = `idemflow-${prefix}`;
    const tables = tablesFor(prefix);
    const db = await openStore('pg', { tables, url: PG_URL, poolSize: 2 });
    await db.store.migrate();
    const kafka = kafkaFor(`sigterm-test-${prefix}`);
    const { createProducer, ensureTopics, keyOf, topicNames } = await import(path.join(EXAMPLES, 'kafka-worker/topology.mjs'));
    const names = topicNames(base);
    await ensureTopics(kafka, names);
    const watcher = await watchTopics(kafka, [names.main, names.retry]);
    const workers = [];
    try {
      const count = 150;
      const events = [];
      for (let i = 1; i <= count; i += 1) {
        await db.store.putWorkflow(waiting(i));
        events.push(confirmation(i), { ...confirmation(i), eventId: `watcher-b:swap-${i}:confirmed` });
      }
      // A member that dies without leaving stays in the group for this long (the broker's join window is half of it).
      const env = {
        IDEMFLOW_KAFKA_BROKERS: KAFKA_BROKERS,
        IDEMFLOW_PG_URL: PG_URL,
        IDEMFLOW_TABLE_PREFIX: prefix,
        SWAPS_TOPIC: base,
        SESSION_TIMEOUT_MS: '20000',
        BATCH_SIZE: '4',
        PARTITIONS_CONCURRENTLY: '1',
      };
      const start = (name) => {
        const worker = { name, joins: [], settled: [], stopped: false };
        worker.child = supervise(path.join(EXAMPLES, 'kafka-worker/worker.mjs'), env, (line) => {
          if (line.event === 'group-join')
            worker.joins.push({ memberId: line.memberId, partitions: Object.values(line.assignment).flat().length });
          if (line.event === 'stopped') worker.stopped = true;
          if (line.action && line.topic === names.main) worker.settled.push(`${line.partition}/${line.offset}`);
        });
        workers.push(worker);
        return worker;
      };
      const [leaving, staying] = [start('leaving'), start('staying')];
      // Both members in one generation: each holds some of the 12 partitions (main and retry).
      await until(
        'both workers join one generation',
        () => {
          const [a, b] = [leaving.joins.at(-1), staying.joins.at(-1)];
          return a && b && a.partitions > 0 && b.partitions > 0 && a.partitions + b.partitions === 12;
        },
        60_000,
      );

      const producer = createProducer(kafka);
      await producer.connect();
      await producer.send({
        topic: names.main,
        messages: events.map((event) => {
          const value = JSON.stringify(event);
          return { key: keyOf(value), value };
        }),
      });
      await producer.disconnect();

      await until('the leaving worker settles some messages', () => leaving.settled.length >= 20, 60_000);
      const joinsBefore = staying.joins.length;
      const stoppedAt = Date.now();
      leaving.child.kill('SIGTERM');
      assert.deepEqual(await exited(leaving.child), [0, null], 'SIGTERM ends the worker with exit code 0');
      assert.equal(leaving.stopped, true, 'it logged that it stopped');
      // Gone from the group as soon as it exits; a member that died without leaving would stay listed for its session timeout.
      const admin = kafka.admin();
      await admin.connect();
      const {
        groups: [group],
      } = await admin.describeGroups([names.group]);
      await admin.disconnect();
      assert.ok(Date.now() - stoppedAt < 20_000, 'read within the session timeout');
      assert.deepEqual(
        group.members.map((m) => m.memberId),
        [staying.joins.at(-1).memberId],
        'the stopped worker left the group',
      );
      await until(
        'the staying worker takes every partition',
        () => staying.joins.length > joinsBefore && staying.joins.at(-1).partitions === 12,
        60_000,
      );

      await until(
        'every event has its receipt and the group committed everything',
        async () => {
          const receipts = Number((await db.query(`SELECT COUNT(*) AS n FROM "${tables.inbox}"`, []))[0].n);
          return receipts === events.length && (await watcher.backlog(names.group, [names.main, names.retry])) === 0;
        },
        90_000,
      );
      const again = staying.settled.filter((offset) => leaving.settled.includes(offset));
      assert.deepEqual(again, [], 'nothing the leaving worker settled was delivered again: it committed before it left');
      assert.equal(leaving.settled.length + staying.settled.length, events.length, 'each message settled once');
    } finally {
      for (const { child } of workers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await Promise.all(workers.map(({ child }) => exited(child)));
      await watcher.close();
      const admin = kafka.admin();
      await admin.connect();
      await admin.deleteGroups([names.group]).catch(() => {});
      await admin.deleteTopics({ topics: [names.main, names.retry, names.dead, names.parked] }).catch(() => {});
      await admin.disconnect();
      await db.drop();
      await db.close();
    }
  });
});

if (skipBroker) console.log(`kafka broker tests: skipped (${skipBroker}; make kafka-broker starts the broker)`);
