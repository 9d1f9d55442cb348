'use strict';
// OpenTelemetry, when the host has it. idemflow records through the global
// meter and tracer named `idemflow` of @opentelemetry/api, an optional peer
// dependency; it never registers a provider itself. The API module is loaded
// only once something has registered with it (a provider, a propagator, a
// context manager: each leaves the API's global registry on globalThis), so
// a host without OpenTelemetry loads no OpenTelemetry module at all and each
// call here costs one property lookup. Names follow the OpenTelemetry
// messaging conventions where they fit (seconds, `error.type`,
// `messaging.*` on the outbox handler's span and duration); the rest is
// named under `idemflow.` (README, "Observability").

// Where @opentelemetry/api 1.x keeps its registry once anything registers.
const API_REGISTRY = Symbol.for('opentelemetry.js.api.1');
const { IdemflowError } = require('./errors.cjs');

const SCOPE = 'idemflow';
/** How long a backlog reading serves the gauges before the store is asked again. */
const DEFAULT_BACKLOG_INTERVAL_MS = 5000;
const OPERATION_STATUSES = ['pending', 'claimed', 'done', 'dead'];
// W3C trace context, version 00: https://www.w3.org/TR/trace-context/#traceparent-header
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const SPAN_KIND = { INTERNAL: 0, CONSUMER: 4 };
const STATUS_ERROR = 2;

let api; // undefined: not looked for yet; null: not installed; else the module

/** @opentelemetry/api, from the package's own node_modules or the host project's; null when absent or nothing is registered. */
function otel() {
  if (api !== undefined) return api;
  if (globalThis[API_REGISTRY] === undefined) return null; // nothing registered yet: look again next time
  api = null;
  for (const from of [__dirname, process.cwd()]) {
    let path;
    try {
      path = require.resolve('@opentelemetry/api', { paths: [from] });
    } catch {
      continue;
    }
    api = require(path);
    break;
  }
  return api;
}

/** The instruments, made once per meter provider (a provider registered later gets its own). */
let made = { provider: null, instruments: null };

function instruments() {
  const o = otel();
  if (o === null) return null;
  const provider = o.metrics.getMeterProvider();
  if (made.provider !== provider) made = { provider, instruments: createInstruments(o.metrics.getMeter(SCOPE)) };
  return made.instruments;
}

function createInstruments(meter) {
  return {
    meter,
    deliveries: meter.createCounter('idemflow.deliveries', {
      unit: '{delivery}',
      description: 'Deliveries decided by processEvent, by outcome, event type and rule set',
    }),
    errors: meter.createCounter('idemflow.errors', {
      unit: '{error}',
      description: 'Errors idemflow raised, by code (error.type) and disposition',
    }),
    processDuration: meter.createHistogram('idemflow.process.duration', {
      unit: 's',
      description: 'Time processEvent took, every race re-run included, by store',
    }),
    batchDuration: meter.createHistogram('idemflow.batch.duration', {
      unit: 's',
      description: 'Time processBatch took, every race re-run and fallback included, by store',
    }),
    batchSize: meter.createHistogram('idemflow.batch.size', {
      unit: '{delivery}',
      description: 'Deliveries per processBatch call',
    }),
    raceRetries: meter.createCounter('idemflow.race_retries', {
      unit: '{retry}',
      description: 'Transactions run again after a lost race (CONCURRENT_UPDATE), by reason',
    }),
    outboxOperations: meter.createCounter('idemflow.outbox.operations', {
      unit: '{operation}',
      description: 'Outbox handler runs by operation type and what was recorded',
    }),
    breakersOpen: meter.createUpDownCounter('idemflow.outbox.breakers.open', {
      unit: '{breaker}',
      description: 'Operation types whose circuit breaker is open or half-open (the consumer claims none of them but a probe)',
    }),
    typesHalted: meter.createUpDownCounter('idemflow.outbox.types.halted', {
      unit: '{type}',
      description: "Operation types a handler's fatal error halted (the consumer claims none of them until resume(type))",
    }),
    handlerDuration: meter.createHistogram('messaging.process.duration', {
      unit: 's',
      description: 'Time an outbox handler took',
    }),
    purged: meter.createCounter('idemflow.purged', {
      unit: '{record}',
      description: 'Receipts and outbox operations deleted by purgeReceipts and purgeOperations',
    }),
    backlog: meter.createObservableGauge('idemflow.outbox.backlog', {
      unit: '{operation}',
      description: 'Outbox operations by status, read from store.stats()',
    }),
    backlogByType: meter.createObservableGauge('idemflow.outbox.backlog.by_type', {
      unit: '{operation}',
      description: 'Outbox operations by type and status, read from store.stats() (a type no consumer handles shows here)',
    }),
    oldestDueAge: meter.createObservableGauge('idemflow.outbox.oldest_due.age', {
      unit: 's',
      description: 'How long the oldest due outbox operation has waited, read from store.stats()',
    }),
  };
}

/**
 * A store's kind for the `idemflow.store` attribute: what its class declares
 * (`static kind`: sqlite, postgres, mysql, mongodb, memory), else its class name.
 */
function storeKind(store) {
  const kind = store?.constructor?.kind;
  if (typeof kind === 'string' && kind.length > 0) return kind;
  const name = store?.constructor?.name;
  return typeof name === 'string' && name.length > 0 ? name : 'unknown';
}

/** `00-<trace id>-<span id>-<flags>` of a span context. */
function traceparentOf(spanContext) {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}

/** The traceparent of the active span (an outbox handler's, inside one), or null without OpenTelemetry or a valid span. */
function activeTraceparent() {
  const o = otel();
  if (o === null) return null;
  const spanContext = o.trace.getSpanContext(o.context.active());
  return spanContext !== undefined && o.trace.isSpanContextValid(spanContext) ? traceparentOf(spanContext) : null;
}

/** The remote span context a stored traceparent names, or null for none or a malformed one. */
function spanContextOf(traceparent) {
  if (typeof traceparent !== 'string') return null;
  const match = TRACEPARENT.exec(traceparent);
  if (match === null || /^0+$/.test(match[1]) || /^0+$/.test(match[2])) return null;
  return { traceId: match[1], spanId: match[2], traceFlags: Number.parseInt(match[3], 16), isRemote: true };
}

function errorAttributes(error) {
  const code = typeof error?.code === 'string' ? error.code : (error?.constructor?.name ?? 'Error');
  const attributes = { 'error.type': code };
  if (typeof error?.disposition === 'string') attributes['idemflow.error.disposition'] = error.disposition;
  return attributes;
}

function failSpan(span, error) {
  const attributes = errorAttributes(error);
  span.setAttribute('error.type', attributes['error.type']);
  if (error instanceof Error) span.recordException(error);
  span.setStatus({ code: STATUS_ERROR, message: typeof error?.message === 'string' ? error.message.slice(0, 200) : undefined });
}

/** Counts an error idemflow raised: `source` is 'process' or 'outbox'. */
function errorRaised(error, source) {
  const meters = instruments();
  if (meters === null) return;
  meters.errors.add(1, { ...errorAttributes(error), 'idemflow.source': source });
}

/**
 * The telemetry of one processEvent (`event` as normalizeEvent returns it): a span `process <event type>` (its
 * trace context is what the outbox rows of this delivery record) and the
 * instruments. `null` when OpenTelemetry is not there; every method below
 * takes that null and does nothing.
 */
function processStarted({ store, event, ruleSet }) {
  const o = otel();
  if (o === null) return null;
  const kind = storeKind(store);
  const tracer = o.trace.getTracer(SCOPE);
  const span = tracer.startSpan(`process ${event.type}`, {
    kind: SPAN_KIND.INTERNAL,
    attributes: {
      'messaging.message.id': event.eventId,
      'idemflow.event.id': event.eventId,
      'idemflow.event.type': event.type,
      'idemflow.workflow.id': event.workflowId,
      'idemflow.rule_set.id': ruleSet.id,
      'idemflow.rule_set.version': ruleSet.version,
      'idemflow.store': kind,
    },
  });
  const spanContext = span.spanContext();
  const traceparent = o.trace.isSpanContextValid(spanContext) ? traceparentOf(spanContext) : null;
  return { o, span, kind, ruleSet, eventType: event.type, traceparent, started: performance.now() };
}

/**
 * The telemetry of one processBatch: a span `process batch` (its trace
 * context is what the batch's outbox rows record) and the instruments; the
 * deliveries are counted one by one when it ends. Null without OpenTelemetry.
 */
function batchStarted({ store, ruleSet, size }) {
  const o = otel();
  if (o === null) return null;
  const kind = storeKind(store);
  const span = o.trace.getTracer(SCOPE).startSpan('process batch', {
    kind: SPAN_KIND.INTERNAL,
    attributes: {
      'messaging.batch.message_count': size,
      'idemflow.rule_set.id': ruleSet.id,
      'idemflow.rule_set.version': ruleSet.version,
      'idemflow.store': kind,
    },
  });
  const spanContext = span.spanContext();
  const traceparent = o.trace.isSpanContextValid(spanContext) ? traceparentOf(spanContext) : null;
  return { o, span, kind, ruleSet, traceparent, started: performance.now(), size };
}

/**
 * A batch that answered: each delivery counted by outcome (as processEvent
 * counts its one), each refused one as an error, the batch's duration and
 * size, and the outcomes on the span.
 */
function batchEnded(run, valid, results) {
  if (run === null) return;
  const meters = instruments();
  const outcomes = {};
  let refused = 0;
  for (const result of results) {
    if (result?.error === undefined) continue;
    refused += 1;
    meters?.errors.add(1, { ...errorAttributes(result.error), 'idemflow.source': 'process' });
  }
  for (const { index, event } of valid) {
    const result = results[index];
    if (result?.error !== undefined) continue;
    outcomes[result.outcome] = (outcomes[result.outcome] ?? 0) + 1;
    meters?.deliveries.add(1, {
      'idemflow.outcome': result.outcome,
      'idemflow.event.type': event.type,
      'idemflow.rule_set.id': run.ruleSet.id,
      'idemflow.rule_set.version': run.ruleSet.version,
    });
  }
  meters?.batchDuration.record((performance.now() - run.started) / 1000, { 'idemflow.store': run.kind });
  meters?.batchSize.record(run.size, { 'idemflow.store': run.kind });
  for (const [outcome, count] of Object.entries(outcomes)) run.span.setAttribute(`idemflow.outcomes.${outcome}`, count);
  run.span.setAttribute('idemflow.refused', refused);
  run.span.end();
}

function batchFailed(run, error) {
  if (run === null) return;
  instruments()?.batchDuration.record((performance.now() - run.started) / 1000, {
    'idemflow.store': run.kind,
    'error.type': errorAttributes(error)['error.type'],
  });
  failSpan(run.span, error);
  run.span.end();
}

/** Runs fn with the process span active, so that spans the host's instrumentation makes meanwhile are its children. */
function inSpan(run, fn) {
  if (run === null) return fn();
  return run.o.context.with(run.o.trace.setSpan(run.o.context.active(), run.span), fn);
}

/** A lost race that runs again: the counter by reason, an event on the span. */
function raceRetried(run, { attempt, reason }) {
  if (run === null) return;
  const meters = instruments();
  meters?.raceRetries.add(1, { 'idemflow.race.reason': reason, 'idemflow.store': run.kind });
  run.span.addEvent('idemflow.race_retry', { 'idemflow.attempt': attempt, 'idemflow.race.reason': reason });
}

function processEnded(run, result) {
  if (run === null) return;
  const meters = instruments();
  const seconds = (performance.now() - run.started) / 1000;
  meters?.deliveries.add(1, {
    'idemflow.outcome': result.outcome,
    'idemflow.event.type': run.eventType,
    'idemflow.rule_set.id': run.ruleSet.id,
    'idemflow.rule_set.version': run.ruleSet.version,
  });
  meters?.processDuration.record(seconds, { 'idemflow.store': run.kind, 'idemflow.outcome': result.outcome });
  run.span.setAttribute('idemflow.outcome', result.outcome);
  run.span.setAttribute('idemflow.attempts', result.attempts);
  run.span.end();
}

function processFailed(run, error, attempts) {
  if (run === null) return;
  const meters = instruments();
  meters?.processDuration.record((performance.now() - run.started) / 1000, {
    'idemflow.store': run.kind,
    'error.type': errorAttributes(error)['error.type'],
  });
  if (attempts !== undefined) run.span.setAttribute('idemflow.attempts', attempts);
  failSpan(run.span, error);
  run.span.end();
}

/**
 * The telemetry of one outbox handler run: a span `handle <operation type>`
 * continuing the trace of the delivery that wrote the operation (its stored
 * traceparent), and the handler's duration. Null without OpenTelemetry.
 */
function handlerStarted(operation, owner) {
  const o = otel();
  if (o === null) return null;
  const remote = spanContextOf(operation.traceContext);
  const parent = remote === null ? o.context.active() : o.trace.setSpanContext(o.context.active(), remote);
  const span = o.trace.getTracer(SCOPE).startSpan(
    `handle ${operation.type}`,
    {
      kind: SPAN_KIND.CONSUMER,
      attributes: {
        'messaging.system': SCOPE,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'handle',
        'messaging.destination.name': operation.type,
        'messaging.message.id': operation.id,
        'idemflow.operation.id': operation.id,
        'idemflow.operation.type': operation.type,
        'idemflow.operation.attempt': operation.attempts,
        'idemflow.fencing_token': operation.fencingToken,
        'idemflow.workflow.id': operation.workflowId,
        'idemflow.event.id': operation.eventId,
        'idemflow.lease.owner': owner,
      },
    },
    parent,
  );
  return { o, span, type: operation.type, started: null };
}

/** Runs the handler with its span active. */
function inHandlerSpan(run, fn) {
  if (run === null) return fn();
  run.started = performance.now();
  return run.o.context.with(run.o.trace.setSpan(run.o.context.active(), run.span), fn);
}

/** The handler returned (`failure` undefined) or threw (its description): the duration histogram. */
function handlerReturned(run, failure) {
  if (run === null || run.started === null) return;
  const seconds = (performance.now() - run.started) / 1000;
  const attributes = {
    'messaging.system': SCOPE,
    'messaging.operation.name': 'handle',
    'messaging.destination.name': run.type,
  };
  if (failure !== undefined) {
    attributes['error.type'] = failure.code ?? failure.name ?? 'Error';
    run.span.setAttribute('error.type', attributes['error.type']);
    run.span.setStatus({ code: STATUS_ERROR, message: failure.message.slice(0, 200) });
  }
  instruments()?.handlerDuration.record(seconds, attributes);
}

/**
 * What the consumer recorded for an operation: done, retry-scheduled, dead,
 * released, lease-lost or stale-completion. `run` may be null (a lease lost
 * while its span is open is counted without ending it).
 */
function outboxRecorded(type, result, run = null) {
  const meters = instruments();
  meters?.outboxOperations.add(1, { 'idemflow.operation.type': type, 'idemflow.outbox.result': result });
  if (run !== null) run.span.setAttribute('idemflow.outbox.result', result);
}

/** A type's circuit breaker opened (+1) or closed (-1). */
function breakerChanged(type, delta) {
  instruments()?.breakersOpen.add(delta, { 'idemflow.operation.type': type });
}

/** A handler's fatal error halted a type (+1), or resume(type) lifted it (-1). */
function typeHaltChanged(type, delta) {
  instruments()?.typesHalted.add(delta, { 'idemflow.operation.type': type });
}

function handlerEnded(run) {
  if (run === null) return;
  run.span.end();
}

/** Deleted records of a purge: `target` is 'receipts' or 'operations'. */
function purged(target, result, status = null) {
  const meters = instruments();
  if (meters === null || !Number.isSafeInteger(result?.deleted) || result.deleted === 0) return;
  meters.purged.add(result.deleted, { 'idemflow.purge.target': target, ...(status === null ? {} : { 'idemflow.outbox.status': status }) });
}

/** Counts by status from whatever store.stats() says: `byStatus`, `counts` or the statuses at the top. */
function statusCounts(stats) {
  const source = stats?.byStatus ?? stats?.counts ?? stats;
  const counts = {};
  for (const status of OPERATION_STATUSES) {
    const value = source?.[status];
    if (Number.isSafeInteger(value)) counts[status] = value;
  }
  return counts;
}

/** The oldest due operation's age in seconds: `oldestDueAgeMs`, or `oldestDueAt` against now; null when unknown. */
function oldestDueSeconds(stats, now) {
  if (Number.isFinite(stats?.oldestDueAgeMs)) return Math.max(0, stats.oldestDueAgeMs) / 1000;
  const at = stats?.oldestDueAt instanceof Date ? stats.oldestDueAt.getTime() : stats?.oldestDueAt;
  if (Number.isFinite(at)) return Math.max(0, now - at) / 1000;
  if (stats !== null && typeof stats === 'object' && 'oldestDueAgeMs' in stats) return 0; // null: nothing is due
  return null;
}

/**
 * Reports the outbox backlog of `store` on the gauges idemflow.outbox.backlog
 * (by status) and idemflow.outbox.oldest_due.age, from `store.stats()` read
 * at most every `intervalMs`. A store without stats() reports nothing (the
 * gauges are skipped). `{ close() }` stops the reporting.
 */
function observeBacklog(store, options = {}) {
  const { intervalMs = DEFAULT_BACKLOG_INTERVAL_MS } = options ?? {};
  if (!Number.isSafeInteger(intervalMs) || intervalMs < 0) {
    throw new IdemflowError('INVALID_ARGUMENT', 'intervalMs must be a whole number of milliseconds', {
      details: { field: 'intervalMs', reason: 'not a non-negative integer' },
    });
  }
  const meters = instruments();
  if (meters === null || typeof store?.stats !== 'function') return { close() {} };
  const kind = storeKind(store);
  let last = null;
  let lastAt = -Infinity;
  let reading = null;
  const read = async () => {
    if (performance.now() - lastAt < intervalMs && last !== null) return last;
    reading ??= Promise.resolve()
      .then(() => store.stats())
      .then(
        (stats) => {
          last = stats;
          lastAt = performance.now();
          return stats;
        },
        () => last,
      ) // a failed read keeps the last values; the consumer's store-error events say why
      .finally(() => {
        reading = null;
      });
    return reading;
  };
  const clock = typeof store.now === 'function' ? () => store.now() : Date.now;
  const backlog = async (result) => {
    const stats = await read();
    for (const [status, count] of Object.entries(statusCounts(stats)))
      result.observe(count, { 'idemflow.outbox.status': status, 'idemflow.store': kind });
  };
  const byType = async (result) => {
    const types = (await read())?.byType;
    if (types === null || typeof types !== 'object') return;
    for (const [type, counts] of Object.entries(types)) {
      for (const [status, count] of Object.entries(counts ?? {})) {
        if (typeof count === 'number')
          result.observe(count, { 'idemflow.operation.type': type, 'idemflow.outbox.status': status, 'idemflow.store': kind });
      }
    }
  };
  const oldest = async (result) => {
    const seconds = oldestDueSeconds(await read(), clock());
    if (seconds !== null) result.observe(seconds, { 'idemflow.store': kind });
  };
  meters.backlog.addCallback(backlog);
  meters.backlogByType.addCallback(byType);
  meters.oldestDueAge.addCallback(oldest);
  return {
    close() {
      meters.backlog.removeCallback(backlog);
      meters.backlogByType.removeCallback(byType);
      meters.oldestDueAge.removeCallback(oldest);
    },
  };
}

module.exports = {
  processStarted,
  batchStarted,
  batchEnded,
  batchFailed,
  inSpan,
  raceRetried,
  processEnded,
  processFailed,
  errorRaised,
  handlerStarted,
  inHandlerSpan,
  handlerReturned,
  outboxRecorded,
  breakerChanged,
  typeHaltChanged,
  handlerEnded,
  purged,
  observeBacklog,
  activeTraceparent,
};
