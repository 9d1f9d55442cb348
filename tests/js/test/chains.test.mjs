// Versioned observations through the installed package (issue 21):
// deposit-swap v3's numbered chain-watcher events, its several deposits per
// swap (each numbered on its own, kept in the workflow's deposits map; a
// second or partial one reviewed once with review-deposit:<ref>:<swap>) and
// subscription v2's counted periods, through processEvent over InMemoryStore
// and SQLite.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { IdemflowError, InMemoryStore, processEvent, RuleSet } from 'idemflow';
import { SqliteStore } from 'idemflow/sqlite';

const v3 = RuleSet.builtin('deposit-swap', { version: 3 });
const subscription = RuleSet.builtin('subscription');

const dir = mkdtempSync(path.join(tmpdir(), 'idemflow-chains-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));
let opened = 0;

const STORES = {
  InMemoryStore: async (workflows) => new InMemoryStore(workflows),
  SqliteStore: async (workflows) => {
    opened += 1;
    const store = SqliteStore.open(path.join(dir, `chains-${opened}.db`));
    await store.migrate();
    for (const workflow of workflows) await store.putWorkflow(workflow);
    return store;
  },
};

const REF = 'btc-mainnet:tx-abc:vout-0';
const SECOND_REF = 'btc-mainnet:tx-50%:vout-1';
const swap = { id: 'swap-9', status: 'waiting', revision: 1 };
const observed = (eventId, type, sequence) => ({ eventId, workflowId: 'swap-9', type, depositRef: REF, amountUnits: '12500000', sequence });
const detected = (eventId, sequence) => observed(eventId, 'DEPOSIT_DETECTED', sequence);
const confirmed = (eventId, sequence) => observed(eventId, 'DEPOSIT_CONFIRMED', sequence);
const reversed = (eventId, sequence) => observed(eventId, 'DEPOSIT_REVERSED', sequence);

/** Each event's outcome (or error code), and every operation id the applied ones scheduled. */
async function deliver(store, ruleSet, events) {
  const answers = [];
  const operations = [];
  for (const event of events) {
    try {
      const result = await processEvent(store, event, { ruleSet });
      answers.push(result.outcome);
      if (result.outcome === 'applied') operations.push(...result.operationIds);
    } catch (error) {
      assert.ok(error instanceof IdemflowError, String(error));
      answers.push(error.code);
    }
  }
  return { answers, operations };
}

test('deposit-swap v4 is the default and the same rule set when selected by version; v3 stays selectable', () => {
  const v4 = RuleSet.builtin('deposit-swap');
  assert.equal(v4.version, 4);
  assert.equal(RuleSet.builtin('deposit-swap', { version: 4 }), v4);
  assert.equal(v3.version, 3);
  assert.notEqual(v3.hash, v4.hash);
  // Its proof and what it explored: rules-order.test.mjs (one proof in wasm, seconds).
});

test('deposit-swap v3 loads in a fresh process in under 50 ms: its proof was made at build time', () => {
  // The wasm module is compiled by the first call (v2, not the default: v3 would be loaded and
  // cached by it), so the time is v3's loading alone.
  const script =
    "const { RuleSet } = require('idemflow'); RuleSet.builtin('deposit-swap', { version: 2 }); const t = performance.now(); RuleSet.builtin('deposit-swap', { version: 3 }); console.log(performance.now() - t);";
  const run = spawnSync(process.execPath, ['-e', script], { cwd: fileURLToPath(new URL('..', import.meta.url)), encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  assert.ok(Number(run.stdout) < 50, `${run.stdout} ms`);
});

for (const [name, open] of Object.entries(STORES)) {
  test(`deposit-swap v3 through ${name}: a re-inclusion is exchanged exactly once, in order and reordered`, async () => {
    for (const events of [
      [detected('w:d1', 1), reversed('w:r2', 2), detected('w:d3', 3), confirmed('w:c4', 4)],
      [confirmed('w:c4', 4), detected('w:d3', 3), reversed('w:r2', 2), detected('w:d1', 1)],
      [reversed('w:r2', 2), confirmed('w:c4', 4), detected('w:d1', 1), detected('w:d3', 3)],
    ]) {
      const store = await open([swap]);
      const { operations } = await deliver(store, v3, events);
      assert.deepEqual(operations, ['start-exchange:swap-9'], JSON.stringify(events.map((e) => e.eventId)));
      const stored = await store.getWorkflow('swap-9');
      assert.equal(stored.status, 'exchange');
      assert.equal(stored.sequence, 4, 'the recorded count is a number');
    }
  });

  test(`deposit-swap v3 through ${name}: v2 answers the same history applied, applied, stale, stale`, async () => {
    const store = await open([swap]);
    const unnumbered = [detected('w:d1'), reversed('w:r2'), detected('w:d3'), confirmed('w:c4')].map(({ sequence, ...e }) => e);
    const v2 = await deliver(store, RuleSet.builtin('deposit-swap', { version: 2 }), unnumbered);
    assert.deepEqual(v2, { answers: ['applied', 'applied', 'stale', 'stale'], operations: [] });
  });

  test(`deposit-swap v3 through ${name}: a late copy of observation 1 is stale, a re-publication already-applied`, async () => {
    const store = await open([swap]);
    const { answers } = await deliver(store, v3, [
      detected('w:d1', 1),
      reversed('w:r2', 2),
      detected('other:d1', 1), // a late copy of observation 1, under another event id
      reversed('other:r2', 2), // the reversal re-published
      reversed('w:r2', 2), // the same delivery again
    ]);
    assert.deepEqual(answers, ['applied', 'applied', 'stale', 'already-applied', 'duplicate-delivery']);
    assert.equal((await store.getWorkflow('swap-9')).status, 'reversed');
  });

  test(`deposit-swap v3 through ${name}: a reversal after the exchange started opens a review, which records newer observations`, async () => {
    const store = await open([swap]);
    const { answers, operations } = await deliver(store, v3, [
      detected('w:d1', 1),
      confirmed('w:c2', 2),
      reversed('w:r3', 3),
      detected('w:d4', 4),
      confirmed('w:c2-late', 2),
    ]);
    assert.deepEqual(answers, ['applied', 'applied', 'applied', 'applied', 'stale']);
    assert.deepEqual(operations, ['start-exchange:swap-9', 'open-review:swap-9']);
    const stored = await store.getWorkflow('swap-9');
    assert.deepEqual([stored.status, stored.sequence], ['review', 4]);
  });

  test(`deposit-swap v3 through ${name}: a missing or invalid sequence is INVALID_EVENT naming it, and nothing is written`, async () => {
    const store = await open([swap]);
    const { sequence, ...unnumbered } = detected('w:d1', 1);
    for (const event of [
      unnumbered,
      detected('w:d1', '1'),
      detected('w:d1', 0),
      detected('w:d1', 1.5),
      detected('w:d1', -3),
      detected('w:d1', 2 ** 53),
    ]) {
      await assert.rejects(
        processEvent(store, event, { ruleSet: v3 }),
        (error) => error instanceof IdemflowError && error.code === 'INVALID_EVENT' && error.details.field === 'sequence',
        JSON.stringify(event),
      );
    }
    const stored = await store.getWorkflow('swap-9');
    assert.deepEqual([stored.status, stored.revision, stored.sequence], ['waiting', 1, undefined]);
  });

  test(`deposit-swap v3 through ${name}: before the exchange a deposit lives only in deposits; another amount for its depositRef is IDENTITY_MISMATCH`, async () => {
    const store = await open([swap]);
    await deliver(store, v3, [detected('w:d1', 1)]);
    const stored = await store.getWorkflow('swap-9');
    assert.deepEqual(stored, {
      id: 'swap-9',
      status: 'deposit',
      revision: 2,
      deposits: { [REF]: { event: 'DEPOSIT_DETECTED', amountUnits: '12500000', sequence: 1 } },
    });
    const other = { ...confirmed('w:c2', 2), amountUnits: '12500001' };
    await assert.rejects(
      processEvent(store, other, { ruleSet: v3 }),
      (error) => error instanceof IdemflowError && error.code === 'IDENTITY_MISMATCH' && error.details.field === 'amountUnits',
    );
  });

  test(`deposit-swap v3 through ${name}: a second deposit is recorded and reviewed once, never exchanged twice`, async () => {
    const store = await open([swap]);
    // Its ref has ':' and '%': the operation id escapes both (% → %25, : → %3A).
    const second = (eventId, type, sequence) => ({ ...observed(eventId, type, sequence), depositRef: SECOND_REF });
    const { answers, operations } = await deliver(store, v3, [
      detected('w:d1', 1),
      confirmed('w:c2', 2),
      second('w:b-d1', 'DEPOSIT_DETECTED', 1),
      second('w:b-c2', 'DEPOSIT_CONFIRMED', 2),
      second('w:b-c2-again', 'DEPOSIT_CONFIRMED', 2), // re-published
      second('w:b-r3', 'DEPOSIT_REVERSED', 3),
      second('w:b-c4', 'DEPOSIT_CONFIRMED', 4), // re-organised and confirmed again
    ]);
    assert.deepEqual(answers, ['applied', 'applied', 'applied', 'applied', 'already-applied', 'applied', 'applied']);
    assert.deepEqual(operations, ['start-exchange:swap-9', 'review-deposit:btc-mainnet%3Atx-50%25%3Avout-1:swap-9']);
    const stored = await store.getWorkflow('swap-9');
    assert.deepEqual(
      [stored.status, stored.depositRef, stored.sequence],
      ['exchange', REF, 2],
      'the exchanged deposit is recorded on the swap',
    );
    assert.deepEqual(stored.deposits, {
      [REF]: { event: 'DEPOSIT_CONFIRMED', amountUnits: '12500000', sequence: 2 },
      [SECOND_REF]: { event: 'DEPOSIT_CONFIRMED', amountUnits: '12500000', sequence: 4, operations: ['review-deposit'] },
    });
    const review = await store.getOperation('review-deposit:btc-mainnet%3Atx-50%25%3Avout-1:swap-9');
    assert.deepEqual([review.type, review.payload], ['REVIEW_DEPOSIT', { depositRef: SECOND_REF, amountUnits: '12500000' }]);
  });

  test(`deposit-swap v3 through ${name}: partial deposits are reviewed each once and never summed; one that covers is exchanged`, async () => {
    const store = await open([{ ...swap, expectedUnits: '12500000' }]);
    const deposit = (ref, amountUnits) => (eventId, type, sequence) => ({
      ...observed(eventId, type, sequence),
      depositRef: ref,
      amountUnits,
    });
    const a = deposit('btc-mainnet:tx-a:vout-0', '7000000');
    const b = deposit('btc-mainnet:tx-b:vout-0', '6000000'); // with a's, more than expected: still not exchanged
    const c = deposit('btc-mainnet:tx-c:vout-0', '12500000');
    const first = await deliver(store, v3, [
      a('a:d1', 'DEPOSIT_DETECTED', 1),
      a('a:c2', 'DEPOSIT_CONFIRMED', 2),
      b('b:c1', 'DEPOSIT_CONFIRMED', 1),
      a('a:r3', 'DEPOSIT_REVERSED', 3),
      a('a:c4', 'DEPOSIT_CONFIRMED', 4), // confirmed again after a reorganisation: no second review
    ]);
    assert.deepEqual(first.answers, ['applied', 'applied', 'applied', 'applied', 'applied']);
    assert.deepEqual(first.operations, [
      'review-deposit:btc-mainnet%3Atx-a%3Avout-0:swap-9',
      'review-deposit:btc-mainnet%3Atx-b%3Avout-0:swap-9',
    ]);
    // Under review, the partial deposits leave the swap waiting in deposit for one that covers the amount.
    const waiting = await store.getWorkflow('swap-9');
    assert.equal(waiting.status, 'deposit');
    assert.equal(waiting.depositRef, undefined, 'no deposit is acted on');
    assert.equal(await store.getOperation('start-exchange:swap-9'), null);
    const covering = await deliver(store, v3, [c('c:c1', 'DEPOSIT_CONFIRMED', 1)]);
    assert.deepEqual(covering.operations, ['start-exchange:swap-9']);
    const exchanged = await store.getWorkflow('swap-9');
    assert.deepEqual([exchanged.status, exchanged.depositRef, exchanged.amountUnits], ['exchange', 'btc-mainnet:tx-c:vout-0', '12500000']);
    assert.deepEqual(Object.keys(exchanged.deposits).sort(), [
      'btc-mainnet:tx-a:vout-0',
      'btc-mainnet:tx-b:vout-0',
      'btc-mainnet:tx-c:vout-0',
    ]);
  });

  test(`subscription v2 through ${name}: a renewal for a paid period is already-applied, the next period charges once`, async () => {
    const store = await open([]);
    const sub = (eventId, type, fields) => ({ eventId, workflowId: 'sub-7', type, ...fields });
    const due = (eventId, period) => sub(eventId, 'RENEWAL_DUE', { period, amountUnits: '1500' });
    const paid = (eventId, period, paymentRef) => sub(eventId, 'RENEWAL_PAID', { period, paidThrough: period, paymentRef });
    const { answers, operations } = await deliver(store, subscription, [
      sub('signup:1', 'SUBSCRIPTION_STARTED', { paidThrough: 1, paymentRef: 'psp:pay-1' }),
      due('billing:2', 2),
      due('billing:2-again', 2),
      due('billing:3-early', 3),
      paid('psp:2', 2, 'psp:pay-2'),
      due('billing:2-late', 2), // a copy of the paid period's renewal, after its payment
      due('billing:3', 3),
      due('billing:3-again', 3),
    ]);
    assert.deepEqual(answers, [
      'applied',
      'applied',
      'already-applied',
      'INVALID_TRANSITION',
      'applied',
      'already-applied',
      'applied',
      'already-applied',
    ]);
    assert.deepEqual(operations, ['charge-renewal:2:sub-7', 'charge-renewal:4:sub-7']);
    const stored = await store.getWorkflow('sub-7');
    assert.deepEqual([stored.status, stored.paidThrough, stored.period], ['renewing', 2, 3]);
  });
}
