// One worker process of the multi-process runs: it opens its own connection,
// takes deliveries from the broker over IPC, runs each through the store and
// acknowledges only after the transaction has committed (at-least-once).
import { IdemflowError, processEvent } from 'idemflow';
import { openStore } from './backends.mjs';

const config = JSON.parse(process.env.IDEMFLOW_WORKER_CONFIG);
const { kind, ...options } = config;
const helper = await openStore(kind, options);
const { store } = helper;

async function deliver({ id, event }) {
  let lostRaces = 0;
  // Counts the cycles processEvent runs again after a lost race.
  const counting = {
    maxAttempts: store.maxAttempts,
    transaction: (fn) => store.transaction(fn).catch((error) => {
      if (error && error.code === 'CONCURRENT_UPDATE') lostRaces += 1;
      throw error;
    }),
  };
  try {
    const result = await processEvent(counting, event, { ruleSet: 'deposit-swap' });
    process.send({ type: 'ack', id, outcome: result.outcome, lostRaces });
  } catch (error) {
    process.send({
      type: 'nack', id, lostRaces,
      code: error?.code ?? null, disposition: error?.disposition ?? null, message: String(error?.message ?? error),
      coded: error instanceof IdemflowError, reason: error?.details?.reason ?? null,
    });
  }
}

process.on('message', (message) => {
  if (message.type === 'deliver') {
    deliver(message);
  } else if (message.type === 'stop') {
    Promise.resolve(helper.close()).finally(() => process.exit(0));
  }
});

process.send({ type: 'ready', pid: process.pid });
