// Lets the benchmark measure an example worker as it is, without a line of
// it changed: `node --import ./workers/instrumented-idemflow.mjs
// examples/rabbitmq-worker/worker.mjs`. The example's import of 'idemflow'
// resolves to this module (workers/instrument-hooks.mjs), which is idemflow
// with one difference: the delivery handler it creates reports, as JSON lines
// on stdout beside the example's own,
//   {"role":"bench","event":"batch","size":n,"ms":t}   each handle.batch call and its time
//   {"role":"bench","event":"race","reason":r}         each race re-run (hooks.onRaceRetry)
//   {"role":"bench","event":"failed-transaction","reason":r}
//                                                      each store transaction that ended in a lost race
import { register } from 'node:module';
import * as idemflow from 'idemflow';

export * from 'idemflow';

register('./instrument-hooks.mjs', import.meta.url);

const report = (fields) => process.stdout.write(`${JSON.stringify({ role: 'bench', ...fields })}\n`);

export function createDeliveryHandler(store, options = {}) {
  const transaction = store.transaction.bind(store);
  store.transaction = (...args) =>
    transaction(...args).catch((error) => {
      if (error instanceof idemflow.IdemflowError && error.code === 'CONCURRENT_UPDATE')
        report({ event: 'failed-transaction', reason: error.details?.reason ?? 'unknown' });
      throw error;
    });
  const own = options.hooks?.onRaceRetry;
  const hooks = {
    ...options.hooks,
    onRaceRetry: (retry) => {
      report({ event: 'race', reason: retry.reason });
      own?.(retry);
    },
  };
  const handle = idemflow.createDeliveryHandler(store, { ...options, hooks });
  const instrumented = (message, context) => handle(message, context);
  Object.defineProperty(instrumented, 'batch', {
    enumerable: true,
    value: async (messages, context) => {
      const started = performance.now();
      const verdicts = await handle.batch(messages, context);
      report({ event: 'batch', size: messages.length, ms: Number((performance.now() - started).toFixed(2)) });
      return verdicts;
    },
  });
  return instrumented;
}
