// Issue 37: a sender cannot freeze a swap with dust. Version 3 kept every
// deposit in the swap's bounded deposits map (64 entries), so 64 tiny
// transfers to the deposit address made the customer's covering deposit
// BOUND_EXCEEDED. deposit-swap v4 (the default) never keeps a partial
// deposit (below expectedUnits): it answers it without an entry, and its
// review is written only if absent, so every later word of it (a
// re-publication, a late copy, a reorganisation) writes the same review or
// nothing. The proof states it as the invariant `dust-never-kept`
// (tests/proof.rs plants the bug).
//
// On every store: 1,000 dust deposits, each detected and confirmed, with
// re-publications under new event ids and late copies, shuffled, through
// processBatch and processEvent, with the covering deposit among the last:
// the covering deposit is exchanged once, each dust deposit has exactly one
// REVIEW_DEPOSIT, and the deposits map holds the covering deposit alone.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { InMemoryStore, processBatch, processEvent, RuleSet } from 'idemflow';
import { random } from '../examples/shared/random.mjs';
import { BACKENDS, suiteStore } from '../workers/backends.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const EXPECTED = '12500000';
const DUST = 1000;
const COVER = 'btc-mainnet:tx-customer:vout-0';

function shuffle(list, next) {
  for (let i = list.length - 1; i > 0; i -= 1) {
    const j = Math.floor(next() * (i + 1));
    [list[i], list[j]] = [list[j], list[i]];
  }
  return list;
}

const dustRef = (i) => `btc-mainnet:tx-dust-${String(i).padStart(4, '0')}:vout-0`;

/**
 * The chain watcher's traffic on one swap: each dust deposit detected (1)
 * and confirmed (2); every fifth confirmation re-published by a second
 * watcher (a new event id, the same number), every seventh detection copied
 * late (a new event id); shuffled. The covering deposit is detected and
 * confirmed among the last tenth, and its confirmation re-published.
 */
function traffic(workflowId, seed) {
  const next = random(seed);
  const word = (id, type, depositRef, amountUnits, sequence) => ({
    eventId: id,
    workflowId,
    type,
    depositRef,
    amountUnits,
    sequence,
  });
  const dust = [];
  for (let i = 0; i < DUST; i += 1) {
    const ref = dustRef(i);
    const amount = String(1 + (i % 546));
    dust.push(word(`w1:${i}:d1`, 'DEPOSIT_DETECTED', ref, amount, 1));
    dust.push(word(`w1:${i}:c2`, 'DEPOSIT_CONFIRMED', ref, amount, 2));
    if (i % 5 === 0) dust.push(word(`w2:${i}:c2`, 'DEPOSIT_CONFIRMED', ref, amount, 2));
    if (i % 7 === 0) dust.push(word(`w2:${i}:d1`, 'DEPOSIT_DETECTED', ref, amount, 1));
  }
  shuffle(dust, next);
  const cover = [
    word('w1:cover:d1', 'DEPOSIT_DETECTED', COVER, EXPECTED, 1),
    word('w1:cover:c2', 'DEPOSIT_CONFIRMED', COVER, EXPECTED, 2),
    word('w2:cover:c2', 'DEPOSIT_CONFIRMED', COVER, EXPECTED, 2),
  ];
  // In order, each at a random place in the last tenth.
  const last = Math.floor(dust.length * 0.9);
  const places = cover.map(() => last + Math.floor(next() * (dust.length - last))).sort((a, b) => a - b);
  places.forEach((at, k) => {
    dust.splice(at + k, 0, cover[k]);
  });
  return dust;
}

/** Every operation of one type on a workflow, paged. */
async function operationsOf(store, workflowId, type) {
  const found = [];
  let afterId;
  for (;;) {
    const page = await store.listOperations({ workflowId, type, limit: 500, ...(afterId === undefined ? {} : { afterId }) });
    found.push(...page);
    if (page.length < 500) return found;
    afterId = page.at(-1).id;
  }
}

/** Delivers the traffic: batches of 1 to 64 events through processBatch, every third chunk one processEvent at a time. */
async function deliver(store, events, seed) {
  const next = random(seed);
  const answers = [];
  for (let at = 0, chunk = 0; at < events.length; chunk += 1) {
    const size = 1 + Math.floor(next() * 64);
    const part = events.slice(at, at + size);
    at += size;
    if (chunk % 3 === 2) {
      for (const event of part) answers.push(await processEvent(store, event));
    } else {
      answers.push(...(await processBatch(store, part)));
    }
  }
  return answers;
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`dust on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });

    it('1,000 dust deposits: the covering deposit is exchanged once and each dust deposit is reviewed once', async () => {
      const { store } = suite;
      const workflowId = `swap-dust-${backend.id}`;
      await store.putWorkflow({ id: workflowId, status: 'waiting', revision: 1, expectedUnits: EXPECTED });
      const events = traffic(workflowId, 37);
      const answers = await deliver(store, events, 73);
      const errors = answers.filter((a) => a.error !== undefined);
      assert.deepEqual(
        errors.slice(0, 3).map((a) => a.error.code),
        [],
        'no event is refused',
      );
      const workflow = await store.getWorkflow(workflowId);
      assert.equal(workflow.status, 'exchange');
      assert.equal(workflow.depositRef, COVER);
      assert.deepEqual(Object.keys(workflow.deposits), [COVER], 'the deposits map holds the covering deposit alone');

      const exchanges = await operationsOf(store, workflowId, 'START_EXCHANGE');
      assert.deepEqual(
        exchanges.map((op) => op.payload),
        [{ depositRef: COVER, amountUnits: EXPECTED }],
      );
      const reviews = await operationsOf(store, workflowId, 'REVIEW_DEPOSIT');
      const reviewed = reviews.map((op) => op.payload.depositRef).sort();
      const dust = Array.from({ length: DUST }, (_, i) => dustRef(i));
      assert.equal(reviews.length, DUST, 'one review per dust deposit');
      assert.deepEqual(reviewed, dust);
      assert.ok(
        reviews.every((op) => op.payload.amountUnits !== EXPECTED),
        'the covering deposit is not reviewed',
      );
      // Every event has a receipt; a second delivery of all of them is a duplicate each.
      const again = await processBatch(store, events.slice(0, 64));
      assert.deepEqual(new Set(again.map((a) => a.outcome)), new Set(['duplicate-delivery']));
    });
  });
}

describe('version 3, for contrast', () => {
  it('kept every deposit: the 65th dust deposit and then the covering one are BOUND_EXCEEDED', async () => {
    const store = new InMemoryStore();
    const ruleSet = RuleSet.builtin('deposit-swap', { version: 3 });
    await store.putWorkflow({ id: 'swap-v3', status: 'waiting', revision: 1, expectedUnits: EXPECTED });
    for (let i = 0; i < 64; i += 1) {
      const result = await processEvent(
        store,
        { eventId: `d${i}`, workflowId: 'swap-v3', type: 'DEPOSIT_CONFIRMED', depositRef: dustRef(i), amountUnits: '1', sequence: 2 },
        { ruleSet },
      );
      assert.equal(result.outcome, 'applied');
    }
    const covering = await processEvent(
      store,
      { eventId: 'cover', workflowId: 'swap-v3', type: 'DEPOSIT_CONFIRMED', depositRef: COVER, amountUnits: EXPECTED, sequence: 2 },
      { ruleSet },
    ).then(
      () => null,
      (error) => error,
    );
    assert.equal(covering?.code, 'BOUND_EXCEEDED');
    assert.equal(covering.details.bound, 'maxFacts');
    // v4 over the same stored swap: the dust entries v3 left go as their next words arrive, and the covering deposit is exchanged.
    const exchanged = await processEvent(store, {
      eventId: 'cover-v4',
      workflowId: 'swap-v3',
      type: 'DEPOSIT_CONFIRMED',
      depositRef: COVER,
      amountUnits: EXPECTED,
      sequence: 2,
    }).then(
      (result) => result,
      (error) => error,
    );
    assert.equal(exchanged.code, 'BOUND_EXCEEDED', 'a map v3 filled is full for a new fact whatever the version');
    const cleaned = await processEvent(store, {
      eventId: 'd0-reversed',
      workflowId: 'swap-v3',
      type: 'DEPOSIT_REVERSED',
      depositRef: dustRef(0),
      amountUnits: '1',
      sequence: 3,
    });
    assert.equal(cleaned.outcome, 'applied');
    assert.equal(Object.keys((await store.getWorkflow('swap-v3')).deposits).length, 63);
    const now = await processEvent(store, {
      eventId: 'cover-v4-again',
      workflowId: 'swap-v3',
      type: 'DEPOSIT_CONFIRMED',
      depositRef: COVER,
      amountUnits: EXPECTED,
      sequence: 2,
    });
    assert.equal(now.status, 'exchange');
  });
});
