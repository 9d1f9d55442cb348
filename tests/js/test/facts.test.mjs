// Several facts per workflow (spec-facts 1a–1f) through the installed
// package: a small rule set with `facts`, through processEvent and
// processBatch on every store of workers/backends.mjs (the servers when their
// URLs are set). The facts map is written whole into the
// workflow's data; a second deposit's confirmation gets its own per-fact
// operation, whose id escapes ':' and '%' in the key.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import test, { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { decide, IdemflowError, InMemoryStore, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore } from '../workers/backends.mjs';

const review = { type: 'REVIEW_DEPOSIT', id: 'review-deposit:{depositRef}:{workflowId}', payload: ['depositRef', 'amountUnits'] };
const newer = ['sequence', '>', 'sequence'];
const definition = {
  id: 'facts-swap',
  version: 1,
  statuses: [{ name: 'waiting', initial: true }, { name: 'exchange' }, { name: 'review', terminal: true }],
  fields: [
    { name: 'depositRef', kind: 'text' },
    { name: 'amountUnits', kind: 'units' },
    { name: 'sequence', kind: 'count' },
  ],
  events: [
    { type: 'DEPOSIT_DETECTED', fields: ['depositRef', 'amountUnits', 'sequence'] },
    { type: 'DEPOSIT_CONFIRMED', fields: ['depositRef', 'amountUnits', 'sequence'] },
    { type: 'CLOSE' },
  ],
  facts: { name: 'deposits', key: 'depositRef', events: ['DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED'], record: ['amountUnits', 'sequence'] },
  rules: [
    {
      on: 'DEPOSIT_DETECTED',
      in: ['(none)', 'waiting'],
      cases: [
        { when: newer, then: { outcome: 'applied', to: 'waiting' } },
        { when: ['sequence', '=', 'sequence'], then: { outcome: 'already-applied' } },
        { then: { outcome: 'stale' } },
      ],
    },
    { on: 'DEPOSIT_DETECTED', in: 'exchange', then: { outcome: 'stale' } },
    {
      on: 'DEPOSIT_CONFIRMED',
      in: ['(none)', 'waiting'],
      cases: [
        { when: [newer, { other: 'DEPOSIT_CONFIRMED' }], then: { outcome: 'applied', to: 'waiting', emit: [review] } },
        {
          when: newer,
          then: {
            outcome: 'applied',
            to: 'exchange',
            record: ['depositRef'],
            emit: [{ type: 'START_EXCHANGE', id: 'start-exchange:{workflowId}' }],
          },
        },
        { when: ['sequence', '=', 'sequence'], then: { outcome: 'already-applied' } },
        { then: { outcome: 'stale' } },
      ],
    },
    {
      on: 'DEPOSIT_CONFIRMED',
      in: 'exchange',
      cases: [
        { when: [newer, { emitted: 'review-deposit' }], then: { outcome: 'applied', to: 'exchange' } },
        { when: newer, then: { outcome: 'applied', to: 'exchange', emit: [review] } },
        { then: { outcome: 'stale' } },
      ],
    },
    { on: 'CLOSE', in: ['waiting', 'exchange'], then: { outcome: 'applied', to: 'review' } },
  ],
  otherwise: { error: 'INVALID_TRANSITION' },
};
const ruleSet = RuleSet.fromJSON(definition);

const A = 'btc:tx%9f:0';
const B = 'btc:tx-b:1';
const observed = (eventId, type, depositRef, amountUnits, sequence, workflowId = 'swap-1') => ({
  eventId,
  workflowId,
  type,
  depositRef,
  amountUnits,
  sequence,
});

for (const backend of BACKENDS) {
  describe(`facts on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });

    it('writes the facts map whole, and a second deposit gets its own per-fact operation', async () => {
      const { store } = suite;
      const at = (eventId, type, ref, amount, sequence) => observed(`${eventId}`, type, ref, amount, sequence, 'swap-a');
      const first = await processEvent(store, at('e1', 'DEPOSIT_DETECTED', A, '100', 1), { ruleSet });
      assert.equal(first.outcome, 'applied');
      let workflow = await store.getWorkflow('swap-a');
      assert.deepEqual(workflow.deposits, { [A]: { event: 'DEPOSIT_DETECTED', amountUnits: '100', sequence: 1 } });

      const second = await processEvent(store, at('e2', 'DEPOSIT_DETECTED', B, '30', 1), { ruleSet });
      assert.equal(second.outcome, 'applied');
      const exchanged = await processEvent(store, at('e3', 'DEPOSIT_CONFIRMED', A, '100', 2), { ruleSet });
      assert.deepEqual(exchanged.operationIds, ['start-exchange:swap-a']);
      workflow = await store.getWorkflow('swap-a');
      assert.equal(workflow.status, 'exchange');
      assert.equal(workflow.depositRef, A);
      assert.deepEqual(workflow.deposits, {
        [A]: { event: 'DEPOSIT_CONFIRMED', amountUnits: '100', sequence: 2 },
        [B]: { event: 'DEPOSIT_DETECTED', amountUnits: '30', sequence: 1 },
      });

      // A re-publication and a late copy write nothing to the map.
      assert.equal((await processEvent(store, at('e4', 'DEPOSIT_CONFIRMED', A, '100', 2), { ruleSet })).outcome, 'stale');
      assert.equal((await processEvent(store, at('e5', 'DEPOSIT_DETECTED', A, '100', 1), { ruleSet })).outcome, 'stale');

      // The other deposit's confirmation: reviewed once, by an id of its own.
      const reviewed = await processEvent(store, at('e6', 'DEPOSIT_CONFIRMED', B, '30', 2), { ruleSet });
      assert.equal(reviewed.outcome, 'applied');
      assert.deepEqual(reviewed.operationIds, ['review-deposit:btc%3Atx-b%3A1:swap-a']);
      workflow = await store.getWorkflow('swap-a');
      assert.deepEqual(workflow.deposits[B], {
        event: 'DEPOSIT_CONFIRMED',
        amountUnits: '30',
        sequence: 2,
        operations: ['review-deposit'],
      });
      assert.deepEqual(workflow.deposits[A], { event: 'DEPOSIT_CONFIRMED', amountUnits: '100', sequence: 2 });
      const again = await processEvent(store, at('e7', 'DEPOSIT_CONFIRMED', B, '30', 3), { ruleSet });
      assert.equal(again.outcome, 'applied');
      assert.deepEqual(again.operationIds, [], 'emitted: no second review of one deposit');
      workflow = await store.getWorkflow('swap-a');
      assert.deepEqual(workflow.deposits[B].operations, ['review-deposit']);
      assert.equal(workflow.deposits[B].sequence, 3);
    });

    it("renders a key with '%' and ':' one way in the operation id", async () => {
      const { store } = suite;
      await processEvent(store, observed('f1', 'DEPOSIT_CONFIRMED', B, '30', 1, 'swap-b'), { ruleSet });
      const result = await processEvent(store, observed('f2', 'DEPOSIT_CONFIRMED', A, '100', 1, 'swap-b'), { ruleSet });
      // B confirmed first and started the exchange: A is reviewed.
      assert.deepEqual(result.operationIds, ['review-deposit:btc%3Atx%259f%3A0:swap-b']);
      const workflow = await store.getWorkflow('swap-b');
      assert.deepEqual(Object.keys(workflow.deposits).sort(), [A, B].sort());
    });

    it('processBatch writes the facts map as processEvent does', async () => {
      const { store } = suite;
      const events = (workflowId) => [
        observed(`${workflowId}-1`, 'DEPOSIT_DETECTED', A, '100', 1, workflowId),
        observed(`${workflowId}-2`, 'DEPOSIT_CONFIRMED', B, '30', 1, workflowId),
        observed(`${workflowId}-3`, 'DEPOSIT_CONFIRMED', A, '100', 2, workflowId),
      ];
      for (const event of events('swap-c')) await processEvent(store, event, { ruleSet });
      await processBatch(store, events('swap-d'), { ruleSet });
      const one = await store.getWorkflow('swap-c');
      const batched = await store.getWorkflow('swap-d');
      assert.deepEqual({ ...batched, id: one.id }, one);
      assert.deepEqual(one.deposits[A].operations, ['review-deposit']);
    });
  });
}

test('a malformed facts map is INVALID_RECORD naming the entry, and nothing is written', async () => {
  // Stored behind putWorkflow's check (which refuses it), as another program could leave it.
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 1, deposits: { [A]: { event: 'CLOSE', sequence: 1 } } }]);
  await assert.rejects(
    processEvent(store, observed('g1', 'DEPOSIT_DETECTED', A, '100', 2), { ruleSet }),
    (error) =>
      error instanceof IdemflowError && error.code === 'INVALID_RECORD' && error.details.field === `deposits[${JSON.stringify(A)}].event`,
  );
  const workflow = await store.getWorkflow('swap-1');
  assert.equal(workflow.revision, 1);
});

test('a new fact on a full facts map is BOUND_EXCEEDED (reconcile), not INVALID_RECORD, and nothing is written', async () => {
  const store = new InMemoryStore();
  const deposits = Object.fromEntries(
    Array.from({ length: 64 }, (_, i) => [`dust-${i}`, { event: 'DEPOSIT_DETECTED', amountUnits: '1', sequence: 1 }]),
  );
  await store.putWorkflow({ id: 'swap-1', status: 'waiting', revision: 1, deposits });
  await assert.rejects(processEvent(store, observed('b1', 'DEPOSIT_DETECTED', A, '100', 1), { ruleSet }), (error) => {
    assert.ok(error instanceof IdemflowError);
    assert.deepEqual(
      [error.code, error.disposition, error.details.bound, error.details.eventId],
      ['BOUND_EXCEEDED', 'reconcile', 'maxFacts', 'b1'],
    );
    return true;
  });
  assert.equal((await store.getWorkflow('swap-1')).revision, 1);
  // A fact the map already holds still moves on.
  assert.equal((await processEvent(store, observed('b2', 'DEPOSIT_DETECTED', 'dust-3', '1', 2), { ruleSet })).outcome, 'applied');
});

test('decide fills the facts map and the per-fact id as the core renders them', () => {
  const workflow = {
    id: 'swap-1',
    status: 'waiting',
    revision: 2,
    deposits: { [A]: { event: 'DEPOSIT_CONFIRMED', amountUnits: '100', sequence: 2 } },
  };
  const late = decide({ ruleSet, event: observed('h1', 'DEPOSIT_DETECTED', A, '100', 1), receipt: null, workflow });
  assert.equal(late.outcome, 'stale');
  assert.equal(late.writeSet.workflow, null);
  const other = decide({ ruleSet, event: observed('h2', 'DEPOSIT_CONFIRMED', B, '30', 1), receipt: null, workflow });
  assert.deepEqual(
    other.writeSet.outbox.map((op) => op.id),
    ['review-deposit:btc%3Atx-b%3A1:swap-1'],
  );
  assert.deepEqual(other.writeSet.workflow.set.deposits, {
    [A]: { event: 'DEPOSIT_CONFIRMED', amountUnits: '100', sequence: 2 },
    [B]: { event: 'DEPOSIT_CONFIRMED', amountUnits: '30', sequence: 1, operations: ['review-deposit'] },
  });
  // The map read is not changed in place.
  assert.deepEqual(Object.keys(workflow.deposits), [A]);
});

test("the CLI's draft table is the core's for a rule set with cases and fact conditions", () => {
  const installed = fileURLToPath(new URL('../node_modules/idemflow/', import.meta.url));
  const { draftTable } = createRequire(import.meta.url)(path.join(installed, 'core', 'decide.cjs'));
  // The when/then/else sugar with a condition list is a decision list too.
  const sugar = structuredClone(definition);
  sugar.rules[1] = {
    on: 'DEPOSIT_DETECTED',
    in: 'exchange',
    when: [newer, { emitted: 'review-deposit' }],
    then: { outcome: 'stale' },
    else: { outcome: 'stale' },
  };
  for (const d of [definition, sugar]) {
    const draft = draftTable(d);
    const compiled = RuleSet.fromJSON(d);
    assert.deepEqual(draft.rows, compiled.table());
    assert.equal(draft.markdown, compiled.tableMarkdown());
  }
});
