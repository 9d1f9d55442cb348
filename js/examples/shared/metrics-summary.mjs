// The demos' metrics summary: when the OpenTelemetry SDK is installed (it is
// in tests/js, where `make demo` runs), a MeterProvider is registered with a
// reader the demo collects from at the end, and the summary is read from the
// same instruments a host's exporter would see. Without the SDK it prints one
// line saying so, and idemflow loads no OpenTelemetry module.

/** Registers an in-memory meter provider if the SDK can be imported; `{ print(title) }` prints the summary. */
export async function startMetrics() {
  let api;
  let sdk;
  try {
    api = await import('@opentelemetry/api');
    sdk = await import('@opentelemetry/sdk-metrics');
  } catch {
    return { print: async () => console.log('metrics       (install @opentelemetry/api and @opentelemetry/sdk-metrics to see them)') };
  }
  class Reader extends sdk.MetricReader {
    async onForceFlush() {}
    async onShutdown() {}
  }
  const reader = new Reader();
  const provider = new sdk.MeterProvider({ readers: [reader] });
  api.metrics.setGlobalMeterProvider(provider);
  return {
    async print() {
      const { resourceMetrics } = await reader.collect();
      const lines = [];
      for (const scope of resourceMetrics.scopeMetrics.filter((s) => s.scope.name === 'idemflow')) {
        for (const metric of scope.metrics) {
          const { name, unit } = metric.descriptor;
          const parts = metric.dataPoints.map((point) => {
            const label = Object.entries(point.attributes)
              .filter(
                ([key]) => !['idemflow.rule_set.version', 'idemflow.store', 'messaging.system', 'messaging.operation.name'].includes(key),
              )
              .map(([, value]) => value)
              .join(' ');
            if (typeof point.value === 'number') return `${label || 'all'} ${point.value}`;
            const mean = point.value.count === 0 ? 0 : point.value.sum / point.value.count;
            return `${label || 'all'} ${point.value.count}× mean ${unit === 's' ? `${(mean * 1000).toFixed(2)} ms` : mean.toFixed(2)}`;
          });
          if (parts.length > 0) lines.push(`  ${name.padEnd(28)} ${parts.join(', ')}`);
        }
      }
      console.log(`metrics       from the OpenTelemetry instruments (meter "idemflow")${lines.length === 0 ? ': none recorded' : ''}`);
      for (const line of lines) console.log(line);
      await provider.shutdown();
    },
  };
}
