// One worker process of the multi-process runs: it opens its own connection,
// takes deliveries from the broker over IPC, runs each through the store and
// acknowledges only after the transaction has committed (at-least-once).
// With `batch` in its config it gathers what it holds (createBatcher, up to
// `batch` deliveries or 5 ms) and runs them through processBatch, one
// transaction, acknowledging each after that commit.
import { createBatcher, IdemflowError, processBatch, processEvent } from 'idemflow';
import { openStore } from './backends.mjs';

const config = JSON.parse(process.env.IDEMFLOW_WORKER_CONFIG);
const { kind, batch: batchSize = 0, ...options } = config;
const helper = await openStore(kind, options);
const { store } = helper;

async function deliver({ id, event }) {
  let lostRaces = 0;
  // Counts the cycles processEvent runs again after a lost race.
  const counting = {
    raceRetries: store.raceRetries,
    transaction: (fn) =>
      store.transaction(fn).catch((error) => {
        if (error && error.code === 'CONCURRENT_UPDATE') lostRaces += 1;
        throw error;
      }),
  };
  try {
    const result = await processEvent(counting, event, { ruleSet: 'deposit-swap' });
    process.send({ type: 'ack', id, outcome: result.outcome, lostRaces });
  } catch (error) {
    process.send({
      type: 'nack',
      id,
      lostRaces,
      code: error?.code ?? null,
      disposition: error?.disposition ?? null,
      message: String(error?.message ?? error),
      coded: error instanceof IdemflowError,
      reason: error?.details?.reason ?? null,
    });
  }
}

/** The broker's verdict on one delivery's error: nack with its code, disposition and reason. */
function nackOf(id, error, lostRaces) {
  return {
    type: 'nack',
    id,
    lostRaces,
    code: error?.code ?? null,
    disposition: error?.disposition ?? null,
    message: String(error?.message ?? error),
    coded: error instanceof IdemflowError,
    reason: error?.details?.reason ?? null,
  };
}

async function deliverBatch(deliveries) {
  let lostRaces = 0;
  try {
    const results = await processBatch(
      store,
      deliveries.map(({ event }) => event),
      {
        ruleSet: 'deposit-swap',
        hooks: {
          onRaceRetry: () => {
            lostRaces += 1;
          },
        },
      },
    );
    for (const [i, { id }] of deliveries.entries()) {
      const result = results[i];
      process.send(
        result.error === undefined
          ? { type: 'ack', id, outcome: result.outcome, lostRaces: i === 0 ? lostRaces : 0 }
          : nackOf(id, result.error, 0),
      );
    }
  } catch (error) {
    for (const { id } of deliveries) process.send(nackOf(id, error, 0));
  }
}

const batcher = batchSize > 0 ? createBatcher({ size: batchSize, run: deliverBatch }) : null;

process.on('message', (message) => {
  if (message.type === 'deliver') {
    if (batcher) batcher.push(message);
    else deliver(message);
  } else if (message.type === 'stop') {
    Promise.resolve(helper.close()).finally(() => process.exit(0));
  }
});

process.send({ type: 'ready', pid: process.pid });
