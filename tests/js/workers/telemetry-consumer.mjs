// A consumer in a process of its own, with OpenTelemetry registered: it runs
// the due operations of a SQLite file and prints, as JSON, the handler spans
// it recorded and what each handler was given (telemetry.test.mjs).
// Usage: node telemetry-consumer.mjs <file> <tables as JSON>
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createOutboxConsumer } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';

const [file, tablesJson] = process.argv.slice(2);
const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));

const store = SqliteStore.open(file, { tables: JSON.parse(tablesJson) });
const given = [];
const consumer = createOutboxConsumer(store, {
  START_EXCHANGE: async (operation, context) => {
    given.push({ id: operation.id, metadata: context.metadata, traceContext: context.traceContext });
  },
});
const tally = await consumer.drain();
await store.close();
const spans = exporter.getFinishedSpans().map((span) => ({
  name: span.name,
  traceId: span.spanContext().traceId,
  spanId: span.spanContext().spanId,
  parentSpanId: span.parentSpanContext?.spanId ?? null,
  parentIsRemote: span.parentSpanContext?.isRemote ?? null,
  attributes: span.attributes,
}));
process.stdout.write(JSON.stringify({ tally, spans, given }));
