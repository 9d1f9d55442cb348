// Code and tests written against a draft-of-Maps in-memory model run against
// idemflow's InMemoryStore: the transaction handle carries the draft view
// { workflows, inbox, outbox }, kept or discarded with the transaction.
// These are our own tests in that style, over the seed's workflow and event shapes.

import assert from 'node:assert/strict';
import test from 'node:test';
import { fingerprint, IdemflowError, InMemoryStore, processDepositConfirmed, RuleSet } from 'idemflow';
import { SEED_EVENT as event } from '../workers/fixtures.mjs';

const workflow = Object.freeze({
  id: 'swap-42',
  status: 'deposit',
  revision: 3,
  depositRef: 'btc-mainnet:tx-abc:vout-0',
  amountUnits: '12500000',
});
const operationId = 'start-exchange:swap-42';

function rejectsWith(promise, code, details = {}) {
  return assert.rejects(promise, (error) => {
    assert.ok(error instanceof IdemflowError, `expected IdemflowError, got ${error}`);
    assert.equal(error.code, code, error.message);
    for (const [key, value] of Object.entries(details)) assert.equal(error.details[key], value, `details.${key}`);
    return true;
  });
}

/** The store's tables as plain sizes, to say "nothing was written" in one line. */
function sizes(store) {
  const { workflows, inbox, outbox } = store.snapshot();
  return { workflows: workflows.size, inbox: inbox.size, outbox: outbox.size };
}

test('a replayed event does not create another outbox operation', async () => {
  const store = new InMemoryStore([workflow]);
  const first = await processDepositConfirmed(store, event);
  const replay = await processDepositConfirmed(store, event);
  assert.equal(first.outcome, 'applied');
  assert.equal(first.operationId, operationId);
  assert.equal(replay.outcome, 'duplicate-delivery');
  assert.equal(store.snapshot().outbox.size, 1);
});

test('a new event id cannot repeat the business transition', async () => {
  const store = new InMemoryStore([workflow]);
  await processDepositConfirmed(store, event);
  const second = await processDepositConfirmed(store, { ...event, eventId: 'chain-watcher:event-002' });
  assert.equal(second.outcome, 'already-applied');
  assert.equal(store.snapshot().workflows.get('swap-42').revision, 4);
  assert.equal(store.snapshot().outbox.size, 1);
});

test('25 concurrent deliveries still schedule one operation', async () => {
  const store = new InMemoryStore([workflow]);
  const results = await Promise.all(
    Array.from({ length: 25 }, (_, i) => processDepositConfirmed(store, { ...event, eventId: `source:event-${i}` })),
  );
  assert.equal(results.filter((r) => r.outcome === 'applied').length, 1);
  assert.equal(results.filter((r) => r.outcome === 'already-applied').length, 24);
  assert.equal(store.snapshot().outbox.size, 1);
});

test('a missing workflow writes nothing', async () => {
  const store = new InMemoryStore([]);
  await rejectsWith(processDepositConfirmed(store, event), 'UNKNOWN_WORKFLOW', { workflowId: 'swap-42' });
  assert.deepEqual(sizes(store), { workflows: 0, inbox: 0, outbox: 0 });
});

test('a workflow created through the draft is confirmed like any other', async () => {
  const store = new InMemoryStore([]);
  await store.transaction(async (draft) => {
    draft.workflows.set('swap-42', { ...workflow });
  });
  assert.equal((await processDepositConfirmed(store, event)).outcome, 'applied');
  assert.equal(store.snapshot().workflows.get('swap-42').status, 'exchange');
});

test('a mismatched depositRef needs reconciliation and changes nothing', async () => {
  const store = new InMemoryStore([workflow]);
  await rejectsWith(processDepositConfirmed(store, { ...event, depositRef: 'btc-mainnet:tx-abc:vout-1' }), 'IDENTITY_MISMATCH', {
    field: 'depositRef',
  });
  assert.deepEqual(store.snapshot().workflows.get('swap-42'), workflow);
  assert.deepEqual(sizes(store), { workflows: 1, inbox: 0, outbox: 0 });
});

test('a changed amount needs reconciliation and changes nothing', async () => {
  const store = new InMemoryStore([workflow]);
  await rejectsWith(processDepositConfirmed(store, { ...event, amountUnits: '12500001' }), 'IDENTITY_MISMATCH', { field: 'amountUnits' });
  assert.deepEqual(sizes(store), { workflows: 1, inbox: 0, outbox: 0 });
});

for (const status of ['exchange', 'sending', 'success']) {
  test(`a confirmation in ${status} is already-applied and schedules nothing`, async () => {
    const store = new InMemoryStore([{ ...workflow, status }]);
    assert.equal((await processDepositConfirmed(store, event)).outcome, 'already-applied');
    assert.equal(store.snapshot().outbox.size, 0);
    assert.equal(store.snapshot().workflows.get('swap-42').revision, 3);
  });
}

for (const status of ['waiting', 'overdue']) {
  test(`a confirmation in ${status} is an invalid transition (the seed's rules: no jump to exchange)`, async () => {
    const store = new InMemoryStore([{ ...workflow, status }]);
    await rejectsWith(processDepositConfirmed(store, event), 'INVALID_TRANSITION', { status });
    assert.deepEqual(sizes(store), { workflows: 1, inbox: 0, outbox: 0 });
  });
}

test('the same event id with a different payload is a conflict, and the first receipt stays', async () => {
  const store = new InMemoryStore([workflow]);
  await processDepositConfirmed(store, event);
  await rejectsWith(processDepositConfirmed(store, { ...event, amountUnits: '99' }), 'EVENT_ID_CONFLICT', { eventId: event.eventId });
  // processDepositConfirmed runs the article's rules, deposit-swap v1: its receipt holds the v1 fingerprint.
  const v1 = RuleSet.builtin('deposit-swap', { version: 1 });
  assert.equal(store.snapshot().inbox.get(event.eventId).fingerprint, fingerprint(event, { ruleSet: v1 }));
});

test('an outbox row pre-seeded through the draft is a conflict, and nothing of the event is kept', async () => {
  const store = new InMemoryStore([workflow]);
  await store.transaction(async (draft) => {
    draft.outbox.set(operationId, {
      id: operationId,
      type: 'START_EXCHANGE',
      workflowId: 'swap-42',
      eventId: 'chain-watcher:event-000',
      status: 'pending',
    });
  });
  await rejectsWith(processDepositConfirmed(store, event), 'OUTBOX_CONFLICT', { operationId });
  const { workflows, inbox, outbox } = store.snapshot();
  assert.deepEqual(workflows.get('swap-42'), workflow);
  assert.equal(inbox.size, 0);
  assert.equal(outbox.get(operationId).eventId, 'chain-watcher:event-000');
});

test('a pre-seeded outbox row is a full row the store reads back and the consumer can claim', async () => {
  const store = new InMemoryStore([workflow], { now: () => 1_000 });
  await store.transaction(async (draft) => {
    draft.outbox.set(operationId, { type: 'START_EXCHANGE', workflowId: 'swap-42', eventId: 'chain-watcher:event-000' });
  });
  const stored = await store.getOperation(operationId);
  assert.equal(stored.unreadable, undefined);
  assert.equal(stored.status, 'pending');
  assert.equal(stored.attempts, 0);
  const claimed = await store.claimOperations({ owner: 'worker-1', now: 1_000, leaseExpiresAt: 2_000, limit: 10 });
  assert.deepEqual(
    claimed.map((op) => op.id),
    [operationId],
  );
});

test('a simulated rollback (throw after writing through the draft) leaves nothing', async () => {
  const store = new InMemoryStore([workflow]);
  const before = store.snapshot();
  await assert.rejects(
    store.transaction(async (draft) => {
      draft.workflows.set('swap-42', { ...draft.workflows.get('swap-42'), status: 'exchange', revision: 4 });
      draft.outbox.set(operationId, { type: 'START_EXCHANGE', workflowId: 'swap-42', eventId: event.eventId });
      draft.workflows.set('swap-43', { ...workflow, id: 'swap-43' });
      throw new Error('simulated crash after writing');
    }),
    /simulated crash after writing/,
  );
  assert.deepEqual(store.snapshot(), before);
  // The redelivery after the crash applies normally.
  assert.equal((await processDepositConfirmed(store, event)).outcome, 'applied');
});

test('a rollback discards draft writes and method writes alike, and a delete through the draft', async () => {
  const store = new InMemoryStore([workflow, { ...workflow, id: 'swap-43' }]);
  const before = store.snapshot();
  await assert.rejects(
    store.transaction(async (tx) => {
      await tx.insertReceipt({
        eventId: 'e-1',
        fingerprint: fingerprint(event),
        workflowId: 'swap-42',
        eventType: 'DEPOSIT_CONFIRMED',
        outcome: 'applied',
        ruleSet: null,
      });
      assert.equal(tx.inbox.get('e-1').workflowId, 'swap-42');
      assert.equal(tx.workflows.delete('swap-43'), true);
      assert.equal(tx.workflows.has('swap-43'), false);
      throw new Error('rolled back');
    }),
    /rolled back/,
  );
  assert.deepEqual(store.snapshot(), before);
});

test('the draft and the handle methods share one set of pending writes, committed together', async () => {
  const store = new InMemoryStore([workflow]);
  await store.transaction(async (tx) => {
    tx.workflows.set('swap-42', { ...tx.workflows.get('swap-42'), revision: 7 });
    assert.equal((await tx.getWorkflow('swap-42')).revision, 7);
    await tx.writeWorkflow({ id: 'swap-42', expect: { status: 'deposit', revision: 7 }, set: { status: 'exchange', revision: 8 } });
    assert.equal(tx.workflows.get('swap-42').revision, 8);
    assert.equal(tx.workflows.delete('swap-42'), true);
    assert.equal(await tx.getWorkflow('swap-42'), null);
    assert.equal(tx.workflows.size, 0);
    tx.workflows.set('swap-44', { ...workflow, id: 'swap-44' });
    assert.deepEqual([...tx.workflows.keys()], ['swap-44']);
  });
  assert.deepEqual([...store.snapshot().workflows.keys()], ['swap-44']);
});

test('a row the store could not read back is refused at set() and nothing of the transaction is kept', async () => {
  const store = new InMemoryStore([workflow]);
  const before = store.snapshot();
  await rejectsWith(
    store.transaction(async (draft) => {
      draft.inbox.set('e-1', { fingerprint: 'whatever', outcome: 'applied' });
    }),
    'INVALID_ARGUMENT',
    { table: 'inbox', key: 'e-1' },
  );
  await rejectsWith(
    store.transaction(async (draft) => {
      draft.outbox.set(operationId, { type: 'START_EXCHANGE', workflowId: 'swap-42' });
    }),
    'INVALID_ARGUMENT',
    { table: 'outbox', field: 'eventId' },
  );
  await rejectsWith(
    store.transaction(async (draft) => {
      draft.workflows.set('swap-42', { ...workflow, revision: '4' });
    }),
    'INVALID_ARGUMENT',
    { table: 'workflows', field: 'revision' },
  );
  await rejectsWith(
    store.transaction(async (draft) => {
      draft.workflows.set('swap-42', { ...workflow, id: 'swap-43' });
    }),
    'INVALID_ARGUMENT',
    { field: 'id', reason: 'key mismatch' },
  );
  assert.deepEqual(store.snapshot(), before);
});

test('a row read through the draft is a copy: changing it in place changes nothing', async () => {
  const store = new InMemoryStore([workflow]);
  await store.transaction(async (draft) => {
    draft.workflows.get('swap-42').status = 'success';
    for (const row of draft.workflows.values()) row.revision = 99;
  });
  assert.deepEqual(store.snapshot().workflows.get('swap-42'), workflow);
});
