// OpenTelemetry through the installed package: with the SDK's in-memory
// exporters registered, every metric and span of docs/observability.md is
// checked by name, attributes and value for a run through SQLite (and
// PostgreSQL when IDEMFLOW_PG_URL is set); a handler in another process
// continues the delivery's trace from the stored traceparent; and without a
// registered provider (or without the API installed) no OpenTelemetry module
// is loaded at all.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { metrics, trace } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createOutboxConsumer, fingerprint, observeOutboxBacklog, processEvent } from 'idemflow';
import { openStore, PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { detectedSwap } from '../workers/fixtures.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const project = path.resolve(here, '..');

/** A reader the test collects from when it wants to. */
class CollectingReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

const reader = new CollectingReader();
const spans = new InMemorySpanExporter();
const meterProvider = new MeterProvider({ readers: [reader] });
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });

before(() => {
  metrics.setGlobalMeterProvider(meterProvider);
  trace.setGlobalTracerProvider(tracerProvider);
});

after(async () => {
  await meterProvider.shutdown();
  await tracerProvider.shutdown();
});

/** Every data point of the scope `idemflow`: [{ name, unit, attributes, value }] (value: a number, or { count, sum } for histograms). */
async function collect() {
  const { resourceMetrics, errors } = await reader.collect();
  assert.deepEqual(errors, []);
  const points = [];
  for (const scope of resourceMetrics.scopeMetrics) {
    if (scope.scope.name !== 'idemflow') continue;
    for (const metric of scope.metrics) {
      for (const point of metric.dataPoints) {
        const value = typeof point.value === 'number' ? point.value : { count: point.value.count, sum: point.value.sum };
        points.push({ name: metric.descriptor.name, unit: metric.descriptor.unit, attributes: point.attributes, value });
      }
    }
  }
  return points;
}

/** The data points of `name` whose attributes include `match`. */
function pointsOf(points, name, match = {}) {
  return points.filter((p) => p.name === name && Object.entries(match).every(([key, value]) => p.attributes[key] === value));
}

/** The one value of `name` with attributes including `match` (0 when there is no such point). */
function pointValue(points, name, match) {
  const found = pointsOf(points, name, match);
  assert.ok(found.length <= 1, `${name} ${JSON.stringify(match)}: one point, got ${found.length}`);
  return found.length === 0 ? 0 : found[0].value;
}

function sumOf(points, name, match) {
  return pointsOf(points, name, match).reduce((total, p) => total + (typeof p.value === 'number' ? p.value : p.value.count), 0);
}

const WORKFLOW = Object.freeze(detectedSwap({ id: 'swap-42', revision: 3, depositRef: 'btc:tx-1:0', amountUnits: '12500000' }));
const CONFIRMED = Object.freeze({
  eventId: 'chain-watcher:event-1',
  workflowId: 'swap-42',
  type: 'DEPOSIT_CONFIRMED',
  depositRef: 'btc:tx-1:0',
  amountUnits: '12500000',
  sequence: 2,
});
const shipment = (order) => ({ eventId: `shop:${order}`, workflowId: order, type: 'SHIPMENT_REQUESTED' });

/** A view of `store` whose first transaction reads the workflow as it was before the last commit: one lost race. */
function racingOnce(store, stale) {
  const view = Object.create(store);
  let calls = 0;
  view.transaction = (fn) =>
    store.transaction((tx) => {
      calls += 1;
      if (calls === 1) {
        // processEvent reads through the store's own internal read where there is one.
        tx.getWorkflow = async () => ({ ...stale });
        tx.getWorkflowToDecide = () => ({ ...stale });
      }
      return fn(tx);
    });
  return view;
}

/** A stats() counted from listOperations: the by-status gauge checked against a reading of its own. */
function withStats(store, clock) {
  store.stats = async () => {
    const byStatus = { pending: 0, claimed: 0, done: 0, dead: 0 };
    let oldestDueAt = null;
    for (const operation of await store.listOperations({ limit: 1000 })) {
      byStatus[operation.status] += 1;
      if (operation.status === 'pending' && operation.nextAttemptAt <= clock.now)
        oldestDueAt = Math.min(oldestDueAt ?? Infinity, operation.nextAttemptAt);
    }
    return { byStatus, oldestDueAgeMs: oldestDueAt === null ? null : clock.now - oldestDueAt };
  };
  return store;
}

async function until(condition, what) {
  for (let i = 0; i < 2000; i += 1) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.fail(`timed out waiting for ${what}`);
}

const BACKENDS = [
  { name: 'SQLite', kind: 'sqlite', store: 'sqlite', options: () => ({ file: path.join(tempDir('telemetry'), 'idemflow.db') }) },
  { name: 'PostgreSQL', kind: 'pg', store: 'postgres', skip: PG_URL ? false : 'IDEMFLOW_PG_URL is not set', options: () => ({}) },
];

for (const backend of BACKENDS) {
  describe(`OpenTelemetry through ${backend.name}`, { skip: backend.skip }, () => {
    it('records every metric and span of a run: deliveries, errors, races, durations, the outbox results, backlog and purges', async () => {
      const clock = { now: 1_800_000_000_000 };
      const tables = tablesFor(uniquePrefix());
      const opened = await openStore(backend.kind, { tables, now: () => clock.now, ...backend.options() });
      const { store } = opened;
      try {
        await store.migrate();
        const before = await collect();
        spans.reset();

        // ---- Deliveries: applied (with metadata), duplicate, a lost race, an invalid event.
        await store.putWorkflow(WORKFLOW);
        const metadata = { correlationId: 'corr-7', tenant: 'acme' };
        const applied = await processEvent(store, CONFIRMED, { metadata });
        assert.deepEqual(applied, {
          outcome: 'applied',
          operationId: 'start-exchange:swap-42',
          operationIds: ['start-exchange:swap-42'],
          status: 'exchange',
          revision: 4,
          attempts: 1,
          fingerprint: fingerprint(CONFIRMED),
        });
        assert.equal((await processEvent(store, CONFIRMED)).outcome, 'duplicate-delivery');
        const retries = [];
        const second = { ...CONFIRMED, eventId: 'observer-b:event-2' };
        const raced = await processEvent(racingOnce(store, WORKFLOW), second, { hooks: { onRaceRetry: (r) => retries.push(r.reason) } });
        assert.deepEqual({ outcome: raced.outcome, attempts: raced.attempts }, { outcome: 'already-applied', attempts: 2 });
        assert.deepEqual(retries, ['workflow-changed']);
        await assert.rejects(processEvent(store, { ...CONFIRMED, eventId: 'bad:1', amountUnits: 12 }), { code: 'INVALID_EVENT' });
        for (const order of ['order-1', 'order-2', 'order-3']) {
          assert.equal((await processEvent(store, shipment(order), { ruleSet: 'order-shipment' })).outcome, 'applied');
        }

        // ---- The stored correlation: metadata beside the payload, the traceparent of the process span.
        const operation = await store.getOperation('start-exchange:swap-42');
        assert.deepEqual(operation.metadata, metadata);
        assert.deepEqual(operation.payload, { depositRef: 'btc:tx-1:0', amountUnits: '12500000' });
        const processSpans = spans.getFinishedSpans().filter((s) => s.name === 'process DEPOSIT_CONFIRMED');
        assert.equal(processSpans.length, 3);
        const [appliedSpan, duplicateSpan, racedSpan] = processSpans;
        assert.equal(operation.traceContext, `00-${appliedSpan.spanContext().traceId}-${appliedSpan.spanContext().spanId}-01`);
        assert.equal((await store.getOperation('create-shipment:order-1')).metadata, null);
        assert.match((await store.getOperation('create-shipment:order-1')).traceContext, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
        assert.deepEqual(appliedSpan.attributes, {
          'messaging.message.id': CONFIRMED.eventId,
          'idemflow.event.id': CONFIRMED.eventId,
          'idemflow.event.type': 'DEPOSIT_CONFIRMED',
          'idemflow.workflow.id': 'swap-42',
          'idemflow.rule_set.id': 'deposit-swap',
          'idemflow.rule_set.version': appliedSpan.attributes['idemflow.rule_set.version'],
          'idemflow.store': backend.store,
          'idemflow.outcome': 'applied',
          'idemflow.attempts': 1,
        });
        assert.equal(typeof appliedSpan.attributes['idemflow.rule_set.version'], 'number');
        assert.equal(duplicateSpan.attributes['idemflow.outcome'], 'duplicate-delivery');
        assert.deepEqual([racedSpan.attributes['idemflow.outcome'], racedSpan.attributes['idemflow.attempts']], ['already-applied', 2]);
        assert.deepEqual(
          racedSpan.events.map((e) => [e.name, e.attributes['idemflow.race.reason'], e.attributes['idemflow.attempt']]),
          [['idemflow.race_retry', 'workflow-changed', 1]],
        );

        // ---- The outbox: done, retry-scheduled, dead, released, and a taken-over claim (lease-lost, stale-completion).
        const given = [];
        const gate = {};
        gate.promise = new Promise((resolve) => {
          gate.resolve = resolve;
        });
        const a = createOutboxConsumer(
          store,
          {
            START_EXCHANGE: async (op, context) => {
              given.push({ id: op.id, metadata: context.metadata, traceContext: context.traceContext });
            },
            CREATE_SHIPMENT: async (op) => {
              if (op.workflowId === 'order-1') throw new Error('carrier down');
              if (op.workflowId === 'order-2') throw Object.assign(new Error('no such address'), { retryable: false, code: 'BAD_ADDRESS' });
              if (op.workflowId === 'order-3') await gate.promise;
            },
          },
          { owner: 'worker-a', now: () => clock.now, leaseMs: 1000, baseDelayMs: 60_000, autoRenew: false, concurrency: 5 },
        );
        let recorded = 0;
        for (const name of ['done', 'retry-scheduled', 'dead'])
          a.on(name, () => {
            recorded += 1;
          });
        const roundA = a.runOnce();
        await until(() => recorded === 3, 'consumer a to record start-exchange, order-1 and order-2');
        assert.equal(a.inFlight, 1);
        // order-3's handler is still running; its lease expires and worker-b takes the claim over.
        clock.now += 5000;
        const b = createOutboxConsumer(
          store,
          { CREATE_SHIPMENT: async () => {} },
          { owner: 'worker-b', now: () => clock.now, concurrency: 1 },
        );
        const roundB = await b.runOnce();
        assert.equal(roundB.done, 1);
        assert.deepEqual(await a.renewLeases(), { renewed: 0, lost: 1 });
        gate.resolve();
        const tallyA = await roundA;
        assert.deepEqual(
          { done: tallyA.done, retried: tallyA.retried, dead: tallyA.dead, stale: tallyA.stale },
          { done: 1, retried: 1, dead: 1, stale: 1 },
        );
        assert.deepEqual(given, [{ id: 'start-exchange:swap-42', metadata, traceContext: operation.traceContext }]);
        // order-4 is released: its handler is aborted by stop() and fails while stopping.
        assert.equal((await processEvent(store, shipment('order-4'), { ruleSet: 'order-shipment' })).outcome, 'applied');
        const c = createOutboxConsumer(
          store,
          {
            CREATE_SHIPMENT: (_op, { signal }) =>
              new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
          },
          { owner: 'worker-c', now: () => clock.now, pollIntervalMs: 10 },
        );
        const claimed = new Promise((resolve) => c.once('claimed', resolve));
        c.start();
        await claimed;
        const stopped = await c.stop({ timeoutMs: 0 });
        assert.deepEqual(stopped.abandoned, []);
        assert.equal(c.stats().released, 1);

        const handlerSpans = spans.getFinishedSpans().filter((s) => s.name.startsWith('handle '));
        const exchange = handlerSpans.find((s) => s.name === 'handle START_EXCHANGE');
        assert.equal(exchange.spanContext().traceId, appliedSpan.spanContext().traceId, 'the handler continues the trace of the delivery');
        assert.equal(exchange.parentSpanContext.spanId, appliedSpan.spanContext().spanId);
        assert.equal(exchange.kind, 4); // CONSUMER
        assert.deepEqual(exchange.attributes, {
          'messaging.system': 'idemflow',
          'messaging.operation.type': 'process',
          'messaging.operation.name': 'handle',
          'messaging.destination.name': 'START_EXCHANGE',
          'messaging.message.id': 'start-exchange:swap-42',
          'idemflow.operation.id': 'start-exchange:swap-42',
          'idemflow.operation.type': 'START_EXCHANGE',
          'idemflow.operation.attempt': 1,
          'idemflow.fencing_token': 1,
          'idemflow.workflow.id': 'swap-42',
          'idemflow.event.id': CONFIRMED.eventId,
          'idemflow.lease.owner': 'worker-a',
          'idemflow.outbox.result': 'done',
        });
        const results = handlerSpans
          .filter((s) => s.name === 'handle CREATE_SHIPMENT')
          .map((s) => [
            s.attributes['idemflow.workflow.id'],
            s.attributes['idemflow.lease.owner'],
            s.attributes['idemflow.fencing_token'],
            s.attributes['idemflow.outbox.result'],
          ])
          .sort((x, y) => (x.join() < y.join() ? -1 : 1));
        assert.deepEqual(results, [
          ['order-1', 'worker-a', 1, 'retry-scheduled'],
          ['order-2', 'worker-a', 1, 'dead'],
          ['order-3', 'worker-a', 1, 'stale-completion'], // lease-lost first (counted below), then the late completion refused
          ['order-3', 'worker-b', 2, 'done'],
          ['order-4', 'worker-c', 1, 'released'],
        ]);
        const failed = handlerSpans.find((s) => s.attributes['idemflow.workflow.id'] === 'order-2');
        assert.equal(failed.attributes['error.type'], 'BAD_ADDRESS');
        assert.equal(failed.status.code, 2); // ERROR

        // ---- Purges, and the backlog gauges over store.stats().
        clock.now += 60_000;
        const purgedOperations = await store.purgeOperations({ olderThan: clock.now, status: 'done' });
        const purgedReceipts = await store.purgeReceipts({ olderThan: clock.now });
        assert.ok(
          purgedOperations.deleted === 2 && purgedReceipts.deleted === 6,
          `${purgedOperations.deleted} operations, ${purgedReceipts.deleted} receipts`,
        );
        const realStats = await store.stats();
        const backlog = observeOutboxBacklog(withStats(store, clock), { intervalMs: 0 });
        const points = await collect();
        backlog.close();
        // The store's own stats() counts by type too: a type no consumer handles shows on the by-type gauge.
        store.stats = async () => ({
          ...realStats,
          byType: { ...realStats.byType, UNHANDLED_TYPE: { pending: 3, claimed: 0, done: 0, dead: 0 } },
        });
        const typed = observeOutboxBacklog(store, { intervalMs: 0 });
        const typedPoints = await collect();
        typed.close();
        assert.equal(
          pointValue(typedPoints, 'idemflow.outbox.backlog.by_type', {
            'idemflow.operation.type': 'UNHANDLED_TYPE',
            'idemflow.outbox.status': 'pending',
            'idemflow.store': backend.store,
          }),
          3,
        );
        for (const [type, counts] of Object.entries(realStats.byType)) {
          for (const [status, n] of Object.entries(counts)) {
            assert.equal(
              pointValue(typedPoints, 'idemflow.outbox.backlog.by_type', {
                'idemflow.operation.type': type,
                'idemflow.outbox.status': status,
                'idemflow.store': backend.store,
              }),
              n,
              `${type} ${status}`,
            );
          }
        }
        const listed = await store.listOperations({ limit: 1000 });
        const count = (status) => listed.filter((op) => op.status === status).length;

        const delta = (name, match) => sumOf(points, name, match) - sumOf(before, name, match);
        const deposit = { 'idemflow.event.type': 'DEPOSIT_CONFIRMED', 'idemflow.rule_set.id': 'deposit-swap' };
        assert.equal(delta('idemflow.deliveries', { ...deposit, 'idemflow.outcome': 'applied' }), 1);
        assert.equal(delta('idemflow.deliveries', { ...deposit, 'idemflow.outcome': 'duplicate-delivery' }), 1);
        assert.equal(delta('idemflow.deliveries', { ...deposit, 'idemflow.outcome': 'already-applied' }), 1);
        assert.equal(
          delta('idemflow.deliveries', {
            'idemflow.event.type': 'SHIPMENT_REQUESTED',
            'idemflow.rule_set.id': 'order-shipment',
            'idemflow.outcome': 'applied',
          }),
          4,
        );
        assert.equal(
          delta('idemflow.errors', { 'error.type': 'INVALID_EVENT', 'idemflow.error.disposition': 'reject', 'idemflow.source': 'process' }),
          1,
        );
        assert.equal(delta('idemflow.race_retries', { 'idemflow.race.reason': 'workflow-changed', 'idemflow.store': backend.store }), 1);
        assert.equal(delta('idemflow.process.duration', { 'idemflow.store': backend.store }), 7);
        const durations = pointsOf(points, 'idemflow.process.duration', { 'idemflow.store': backend.store, 'idemflow.outcome': 'applied' });
        assert.equal(durations[0].unit, 's');
        assert.ok(durations[0].value.sum > 0 && durations[0].value.sum < 60, `${durations[0].value.sum} s`);
        const outbox = (type, result) =>
          delta('idemflow.outbox.operations', { 'idemflow.operation.type': type, 'idemflow.outbox.result': result });
        assert.equal(outbox('START_EXCHANGE', 'done'), 1);
        assert.equal(outbox('CREATE_SHIPMENT', 'done'), 1);
        assert.equal(outbox('CREATE_SHIPMENT', 'retry-scheduled'), 1);
        assert.equal(outbox('CREATE_SHIPMENT', 'dead'), 1);
        assert.equal(outbox('CREATE_SHIPMENT', 'lease-lost'), 1);
        assert.equal(outbox('CREATE_SHIPMENT', 'stale-completion'), 1);
        assert.equal(outbox('CREATE_SHIPMENT', 'released'), 1);
        assert.equal(
          delta('messaging.process.duration', { 'messaging.system': 'idemflow', 'messaging.destination.name': 'START_EXCHANGE' }),
          1,
        );
        assert.equal(
          delta('messaging.process.duration', { 'messaging.destination.name': 'CREATE_SHIPMENT', 'error.type': 'BAD_ADDRESS' }),
          1,
        );
        assert.equal(pointsOf(points, 'messaging.process.duration')[0].unit, 's');
        assert.equal(
          delta('idemflow.purged', { 'idemflow.purge.target': 'operations', 'idemflow.outbox.status': 'done' }),
          purgedOperations.deleted,
        );
        assert.equal(delta('idemflow.purged', { 'idemflow.purge.target': 'receipts' }), purgedReceipts.deleted);
        for (const status of ['pending', 'claimed', 'done', 'dead']) {
          assert.equal(
            pointValue(points, 'idemflow.outbox.backlog', { 'idemflow.outbox.status': status, 'idemflow.store': backend.store }),
            count(status),
            status,
          );
        }
        assert.deepEqual([count('pending'), count('dead'), count('done'), count('claimed')], [2, 1, 0, 0]);
        const due = listed.filter((op) => op.status === 'pending' && op.nextAttemptAt <= clock.now);
        const oldestDue = Math.min(...due.map((op) => op.nextAttemptAt));
        assert.equal(
          pointValue(points, 'idemflow.outbox.oldest_due.age', { 'idemflow.store': backend.store }),
          (clock.now - oldestDue) / 1000,
        );
      } finally {
        await opened.drop();
        await opened.close();
      }
    });
  });
}

describe('the trace crosses processes', () => {
  it('a consumer in another process continues the trace of the delivery that wrote the operation', async () => {
    const file = path.join(tempDir('telemetry-cross'), 'idemflow.db');
    const tables = tablesFor(uniquePrefix());
    const opened = await openStore('sqlite', { tables, file });
    const { store } = opened;
    await store.migrate();
    await store.putWorkflow(WORKFLOW);
    spans.reset();
    await processEvent(store, CONFIRMED, { metadata: { correlationId: 'corr-9' } });
    const [processSpan] = spans.getFinishedSpans().filter((s) => s.name === 'process DEPOSIT_CONFIRMED');
    await opened.close();
    const output = execFileSync(process.execPath, [path.join(project, 'workers', 'telemetry-consumer.mjs'), file, JSON.stringify(tables)], {
      cwd: project,
      encoding: 'utf8',
    });
    const child = JSON.parse(output);
    assert.equal(child.tally.done, 1);
    assert.deepEqual(child.given, [
      {
        id: 'start-exchange:swap-42',
        metadata: { correlationId: 'corr-9' },
        traceContext: `00-${processSpan.spanContext().traceId}-${processSpan.spanContext().spanId}-01`,
      },
    ]);
    assert.equal(child.spans.length, 1);
    const [handler] = child.spans;
    assert.equal(handler.name, 'handle START_EXCHANGE');
    assert.equal(handler.traceId, processSpan.spanContext().traceId);
    assert.equal(handler.parentSpanId, processSpan.spanContext().spanId);
    assert.equal(handler.parentIsRemote, true);
  });
});

describe('without OpenTelemetry nothing is loaded', () => {
  // Each runs in a fresh process: this one has registered providers.
  const script = `
    const { InMemoryStore, processEvent, createOutboxConsumer } = require('idemflow');
    (async () => {
      const store = new InMemoryStore([${JSON.stringify(WORKFLOW)}]);
      const event = { eventId: 'e-1', workflowId: 'swap-42', type: 'DEPOSIT_CONFIRMED', depositRef: 'btc:tx-1:0', amountUnits: '12500000', sequence: 2 };
      const first = await processEvent(store, event, { metadata: { tenant: 'acme' } });
      const again = await processEvent(store, event);
      const consumer = createOutboxConsumer(store, { START_EXCHANGE: async (op, context) => { if (context.traceContext !== null) throw new Error('a trace context without OpenTelemetry'); } });
      const tally = await consumer.drain();
      consumer.start();
      await consumer.stop();
      await store.purgeReceipts({ olderThan: Date.now() + 1 });
      const loaded = Object.keys(require.cache).filter((key) => key.includes('@opentelemetry'));
      process.stdout.write(JSON.stringify({ outcomes: [first.outcome, again.outcome], done: tally.done, loaded }));
    })().catch((error) => { console.error(error); process.exit(1); });
  `;

  it('with the API installed but no provider registered, the package loads no @opentelemetry module', () => {
    assert.ok(fs.existsSync(path.join(project, 'node_modules', '@opentelemetry', 'api')), 'the API is installed here');
    const result = JSON.parse(execFileSync(process.execPath, ['-e', script], { cwd: project, encoding: 'utf8' }));
    assert.deepEqual(result, { outcomes: ['applied', 'duplicate-delivery'], done: 1, loaded: [] });
  });

  it('in a project without the API, even after a host registered with another copy, nothing is loaded and nothing fails', () => {
    const dir = tempDir('telemetry-absent');
    fs.cpSync(path.join(project, 'node_modules', 'idemflow'), path.join(dir, 'node_modules', 'idemflow'), {
      recursive: true,
      dereference: true,
    });
    fs.writeFileSync(path.join(dir, 'package.json'), '{"private":true}');
    // The global registry @opentelemetry/api 1.x leaves behind when something registers.
    const registered = `globalThis[Symbol.for('opentelemetry.js.api.1')] = { version: '1.9.1' };\n${script}`;
    const result = JSON.parse(
      execFileSync(process.execPath, ['-e', registered], { cwd: dir, encoding: 'utf8', env: { ...process.env, NODE_PATH: '' } }),
    );
    assert.deepEqual(result, { outcomes: ['applied', 'duplicate-delivery'], done: 1, loaded: [] });
  });
});
