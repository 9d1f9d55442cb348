// One lane of the store-only runs (workers/lanes.mjs): a worker process with
// its own connection pool that asks its parent for the next batch over IPC,
// runs it and answers with one result per item, the time it took and the
// lost races it heard of. What it runs (IDEMFLOW_LANE_CONFIG.mode):
//   handle-batch  handle.batch of the delivery handler over the bodies (as the example workers do)
//   process-batch processBatch over the events
//   hand-written  each body in a transaction of its own (bench/hand-written.mjs),
//                 `concurrency` of them at a time over the pool
import { createDeliveryHandler, IdemflowError, processBatch } from 'idemflow';
import { eventOfBody, handWrittenDelivery, MARKS, statements, TRANSACTIONS } from '../bench/hand-written.mjs';
import { openStore } from './backends.mjs';

const { store: storeConfig, mode, concurrency = 4 } = JSON.parse(process.env.IDEMFLOW_LANE_CONFIG);
const { kind, ...storeOptions } = storeConfig;
const helper = await openStore(kind, storeOptions);
const { store } = helper;

// Lost races heard since the last answer: by the hook (a re-run about to
// happen) and by the store (every transaction that ended in one, the last
// attempt's included).
let races = {};
let failedTransactions = {};
const count = (into, reason) => {
  into[reason] = (into[reason] ?? 0) + 1;
};
const transaction = store.transaction.bind(store);
store.transaction = (...args) =>
  transaction(...args).catch((error) => {
    if (error instanceof IdemflowError && error.code === 'CONCURRENT_UPDATE') count(failedTransactions, error.details?.reason ?? 'unknown');
    throw error;
  });
const hooks = { onRaceRetry: ({ reason }) => count(races, reason) };

function send(message) {
  process.send({ ...message, races, failedTransactions });
  races = {};
  failedTransactions = {};
}

const errorOf = (error) => ({
  code: error.code,
  disposition: error.disposition,
  reason: error.details?.reason ?? null,
  message: error.message,
});

/** One batch, timed: [results, milliseconds]. */
async function timed(run) {
  const started = performance.now();
  const results = await run();
  return [results, performance.now() - started];
}

const run =
  mode === 'hand-written'
    ? null
    : {
        'handle-batch': () => {
          const handle = createDeliveryHandler(store, { ruleSet: 'deposit-swap', baseDelayMs: 20, maxDelayMs: 200, hooks });
          return async (items) => {
            const [verdicts, ms] = await timed(() =>
              handle.batch(
                items.map((item) => item.body),
                { attempts: items.map((item) => item.attempt) },
              ),
            );
            return {
              latencies: [ms],
              results: verdicts.map((v) => ({ action: v.action, outcome: v.outcome, ...(v.error ? errorOf(v.error) : {}) })),
            };
          };
        },
        'process-batch': () => async (items) => {
          const [results, ms] = await timed(() =>
            processBatch(
              store,
              items.map((item) => item.event),
              { ruleSet: 'deposit-swap', hooks },
            ),
          );
          return {
            latencies: [ms],
            results: results.map((r) =>
              r.error
                ? errorOf(r.error)
                : {
                    outcome: r.outcome,
                    fingerprint: r.fingerprint,
                    status: r.status ?? null,
                    revision: r.revision ?? null,
                    operationIds: r.operationIds ?? [],
                  },
            ),
          };
        },
      }[mode]();

/**
 * The hand-written worker takes messages as a broker consumer does: up to
 * `concurrency` transactions at once over the pool, the next batch asked for
 * before the runners run dry (a batch is only how the parent hands them out).
 */
function handWrittenLane() {
  const sql = statements(storeOptions.tables, MARKS[kind]);
  const inTransaction = TRANSACTIONS[kind](store.client);
  const onRace = (reason) => count(failedTransactions, reason);
  const waiting = []; // [batch, position] not started yet
  let asked = true; // the first `next` goes out at start
  let running = 0;
  const one = async (item) => {
    const event = eventOfBody(item.body);
    if (event === null) return { action: 'dead-letter' };
    const { outcome, refused, message, ms } = await handWrittenDelivery(inTransaction, sql, event, { onRace });
    if (outcome) return { action: 'ack', outcome, ms };
    return { action: { reject: 'dead-letter', retry: 'retry', reconcile: 'park' }[refused], message, ms };
  };
  const pump = () => {
    while (running < concurrency && waiting.length > 0) {
      const [batch, i] = waiting.shift();
      running += 1;
      one(batch.items[i])
        .then(
          (result) => {
            batch.results[i] = result;
            batch.left -= 1;
            if (batch.left === 0) {
              send({
                type: 'done',
                id: batch.id,
                results: batch.results,
                latencies: batch.results.filter((r) => r.ms !== undefined).map((r) => r.ms),
              });
            }
          },
          (error) => send({ type: 'failed', id: batch.id, error: String(error?.stack ?? error) }),
        )
        .finally(() => {
          running -= 1;
          pump();
        });
    }
    if (!asked && waiting.length <= concurrency) {
      asked = true;
      process.send({ type: 'next' });
    }
  };
  return (message) => {
    asked = false;
    const batch = { id: message.id, items: message.items, results: new Array(message.items.length), left: message.items.length };
    for (let i = 0; i < batch.items.length; i += 1) waiting.push([batch, i]);
    pump();
  };
}

const onBatch =
  mode === 'hand-written'
    ? handWrittenLane()
    : async (message) => {
        try {
          const { results, latencies } = await run(message.items);
          send({ type: 'done', id: message.id, results, latencies });
        } catch (error) {
          send({ type: 'failed', id: message.id, error: String(error?.stack ?? error) });
        }
        process.send({ type: 'next' });
      };

process.on('message', (message) => {
  if (message.type === 'batch') {
    onBatch(message);
  } else if (message.type === 'stop') {
    Promise.resolve(helper.close()).finally(() => process.exit(0));
  }
});

process.send({ type: 'ready', pid: process.pid });
process.send({ type: 'next' });
