// Sample traffic for the example workers: swaps created in `waiting`, and
// the events a chain watcher, a timer and the exchange would publish for
// them, with redeliveries, re-publications under new ids and a bad message,
// in shuffled order (a reorder-safe rule set makes the order irrelevant).
// A chain watcher numbers the events it emits about one depositRef with
// `sequence`, 1, 2, 3 … in the order it emits them: the detection is 1, the
// confirmation 2; another observer re-publishing an observation under its own
// event id keeps the number. Every fifth swap is paid twice.
import { randomUUID } from 'node:crypto';
import { openStore } from './store.mjs';

export function sampleSwaps(count = 10) {
  const run = randomUUID().slice(0, 8);
  const swaps = [];
  const messages = [];
  for (let i = 0; i < count; i += 1) {
    const id = `swap-${run}-${i}`;
    const expectedUnits = String(1_000_000 * (i + 1));
    swaps.push({ id, status: 'waiting', revision: 1, expectedUnits });
    const deposit = { depositRef: `btc-mainnet:tx-${run}${i}:vout-0`, amountUnits: expectedUnits };
    const detected = { eventId: `watcher-a:${id}:detected`, workflowId: id, type: 'DEPOSIT_DETECTED', ...deposit, sequence: 1 };
    const confirmed = { eventId: `watcher-a:${id}:confirmed`, workflowId: id, type: 'DEPOSIT_CONFIRMED', ...deposit, sequence: 2 };
    messages.push(detected, confirmed, confirmed); // the confirmation is delivered twice
    messages.push({ ...confirmed, eventId: `watcher-b:${id}:confirmed` }); // another observer saw it too: the same sequence
    if (i % 5 === 4) {
      // The customer paid twice: a second transfer, counted from 1 by the watcher. One of the two is exchanged,
      // the other gets its own REVIEW_DEPOSIT operation.
      const second = { depositRef: `btc-mainnet:tx-${run}${i}b:vout-1`, amountUnits: expectedUnits };
      messages.push({ eventId: `watcher-a:${id}:second-detected`, workflowId: id, type: 'DEPOSIT_DETECTED', ...second, sequence: 1 });
      messages.push({ eventId: `watcher-a:${id}:second-confirmed`, workflowId: id, type: 'DEPOSIT_CONFIRMED', ...second, sequence: 2 });
    }
  }
  messages.push({ eventId: `bad-${run}`, workflowId: swaps[0].id, type: 'DEPOSIT_CONFIRMED', amountUnits: 12.5 });
  for (let i = messages.length - 1; i > 0; i -= 1) {
    const j = Math.floor(Math.random() * (i + 1));
    [messages[i], messages[j]] = [messages[j], messages[i]];
  }
  return { swaps, bodies: [...messages.map((m) => JSON.stringify(m)), 'not json at all'] };
}

/** Creates `count` sample swaps in `waiting` in the store (the host creates each before its events can matter); their messages to publish. */
export async function createSampleSwaps(count) {
  const sample = sampleSwaps(count);
  const { store, close } = openStore({ poolSize: 1 });
  await store.migrate();
  for (const swap of sample.swaps) await store.putWorkflow(swap);
  await close();
  return sample;
}
