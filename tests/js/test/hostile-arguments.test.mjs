// Every value a caller hands to a host entry point is read as events are: a
// getter or a proxy trap that throws, anywhere in the events array, the
// options object, the hooks, the delivery context or the attempts list, is
// answered with an IdemflowError (or, for one event of a batch, that event's
// error), never with the thrown value itself, and a refused call writes nothing.

import assert from 'node:assert/strict';
import test from 'node:test';
import fc from 'fast-check';
import { createBatcher, createDeliveryHandler, IdemflowError, InMemoryStore, processBatch, processEvent } from 'idemflow';
import { detectedSwap } from '../workers/fixtures.mjs';

const RUNS = Number(process.env.IDEMFLOW_HOSTILE_RUNS ?? 300);
const TRAPS = ['get', 'has', 'ownKeys', 'getOwnPropertyDescriptor', 'getPrototypeOf', 'isExtensible', 'defineProperty', 'set', 'apply'];

const swap = (i) => detectedSwap({ id: `swap-${i}`, revision: 1, depositRef: `ref-${i}`, amountUnits: '100' });
const confirmed = (i) => ({
  eventId: `e-${i}`,
  workflowId: `swap-${i}`,
  type: 'DEPOSIT_CONFIRMED',
  depositRef: `ref-${i}`,
  amountUnits: '100',
  sequence: 2,
});

class Thrown extends Error {}

/**
 * `value` made hostile as drawn: behind a proxy whose trap `trap` throws
 * (after `after` calls of it, so a check that reads once can pass), a
 * revoked proxy, or with a getter on `key` that throws.
 */
function hostile(value, { how, trap, after, key }) {
  if (how === 'revoked') {
    const { proxy, revoke } = Proxy.revocable(value, {});
    revoke();
    return proxy;
  }
  if (how === 'getter') {
    const copy = Array.isArray(value) ? [...value] : { ...value };
    const name = Array.isArray(copy) ? String(Math.min(Number(key) || 0, Math.max(copy.length - 1, 0))) : key;
    Object.defineProperty(copy, name, {
      enumerable: true,
      configurable: true,
      get() {
        throw new Thrown(`getter ${name}`);
      },
    });
    return copy;
  }
  let calls = 0;
  return new Proxy(value, {
    [trap](...args) {
      calls += 1;
      if (calls > after) throw new Thrown(`trap ${trap}`);
      return Reflect[trap](...args);
    },
  });
}

const aHostility = fc.record({
  how: fc.constantFrom('proxy', 'proxy', 'revoked', 'getter'),
  trap: fc.constantFrom(...TRAPS),
  after: fc.integer({ min: 0, max: 6 }),
  key: fc.constantFrom('0', '1', 'ruleSet', 'hooks', 'metadata', 'raceRetries', 'attempt', 'attempts', 'onRaceRetry', 'type'),
});

/** The call's outcome is a value or an IdemflowError; never the thrown value, never another error. */
async function settles(call) {
  try {
    return { value: await call() };
  } catch (error) {
    assert.ok(!(error instanceof Thrown), `the caller's own throw escaped: ${error.message}`);
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error?.stack ?? error}`);
    return { error };
  }
}

async function storeOf() {
  const store = new InMemoryStore([swap(0), swap(1), swap(2)]);
  return store;
}

/** Each entry point, given the hostile value where `where` says. */
const ENTRY_POINTS = {
  'processEvent options': (store, h) =>
    processEvent(store, confirmed(0), hostile({ ruleSet: 'deposit-swap', raceRetries: 2, hooks: {} }, h)),
  'processEvent hooks': (store, h) => processEvent(store, confirmed(0), { hooks: hostile({ onRaceRetry: () => {} }, h) }),
  'store.process options': (store, h) => store.process(confirmed(0), hostile({ ruleSet: 'deposit-swap', metadata: { tenant: 't' } }, h)),
  'processBatch events': (store, h) => processBatch(store, hostile([confirmed(0), confirmed(1), confirmed(2)], h)),
  'processBatch options': (store, h) =>
    processBatch(store, [confirmed(0), confirmed(1)], hostile({ ruleSet: 'deposit-swap', type: 'DEPOSIT_CONFIRMED' }, h)),
  'store.processBatch events': (store, h) => store.processBatch(hostile([confirmed(0), confirmed(1)], h)),
  'createDeliveryHandler options': async (store, h) =>
    createDeliveryHandler(store, hostile({ ruleSet: 'deposit-swap', maxDeliveries: 5 }, h)),
  'handle context': (store, h) => createDeliveryHandler(store)(JSON.stringify(confirmed(0)), hostile({ attempt: 1, metadata: {} }, h)),
  'handle message': (store, h) => createDeliveryHandler(store)(hostile(confirmed(0), h)),
  'handle.batch messages': (store, h) =>
    createDeliveryHandler(store).batch(hostile([JSON.stringify(confirmed(0)), JSON.stringify(confirmed(1))], h)),
  'handle.batch context': (store, h) => createDeliveryHandler(store).batch([JSON.stringify(confirmed(0))], hostile({ attempts: [1] }, h)),
  'handle.batch attempts': (store, h) =>
    createDeliveryHandler(store).batch([JSON.stringify(confirmed(0)), JSON.stringify(confirmed(1))], { attempts: hostile([1, 2], h) }),
  'createBatcher options': async (_store, h) => createBatcher(hostile({ size: 2, run: () => {} }, h)),
};

for (const [where, call] of Object.entries(ENTRY_POINTS)) {
  test(`${where}: a throwing getter or proxy trap is an IdemflowError, and a refused call writes nothing`, async () => {
    await fc.assert(
      fc.asyncProperty(aHostility, async (h) => {
        const store = await storeOf();
        const outcome = await settles(() => call(store, h));
        const written = store.snapshot().inbox.size;
        if (outcome.error) assert.equal(written, 0, `${where}: refused with ${outcome.error.code}, yet ${written} receipts were written`);
        // A batch answers per event: an event that could not be read has its own IdemflowError.
        if (Array.isArray(outcome.value)) {
          for (const result of outcome.value) {
            const error = result.error;
            if (error !== undefined) assert.ok(error instanceof IdemflowError, `${where}: a result's error is an IdemflowError`);
          }
        }
      }),
      { numRuns: RUNS },
    );
  });
}
