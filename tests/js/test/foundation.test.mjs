// The foundation's behaviour through the installed package, imported by name.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import test from 'node:test';
import {
  decide,
  fingerprint,
  IdemflowError,
  InMemoryStore,
  planDepositConfirmation,
  processDepositConfirmed,
  processEvent,
  RuleSet,
  validateEvent,
} from 'idemflow';
import { SEED_EVENT as event, SEED_EXCHANGING, SEED_WORKFLOW } from '../workers/fixtures.mjs';

// The article's workflow, as processDepositConfirmed (deposit-swap v1) stores it: no sequence.
const workflow = Object.freeze({
  id: 'swap-42',
  status: 'deposit',
  revision: 3,
  depositRef: 'btc-mainnet:tx-abc:vout-0',
  amountUnits: '12500000',
});
/** The article's rules, which processDepositConfirmed runs unless told otherwise. */
const v1 = RuleSet.builtin('deposit-swap', { version: 1 });
/** What every result of processDepositConfirmed also says: one cycle (no race here) and the event's fingerprint under deposit-swap v1. */
const measured = (e) => ({ attempts: 1, fingerprint: fingerprint(e, { ruleSet: v1 }) });

function rejectsWith(promise, code, extra = {}) {
  return assert.rejects(promise, (error) => {
    assert.ok(error instanceof IdemflowError, `expected IdemflowError, got ${error}`);
    assert.equal(error.code, code);
    for (const [key, value] of Object.entries(extra)) {
      if (key === 'details') {
        for (const [dk, dv] of Object.entries(value)) assert.equal(error.details[dk], dv, `details.${dk}`);
      } else {
        assert.equal(error[key], value, key);
      }
    }
    return true;
  });
}

function throwsWith(fn, code, field) {
  assert.throws(fn, (error) => {
    assert.ok(error instanceof IdemflowError, `expected IdemflowError, got ${error}`);
    assert.equal(error.code, code);
    if (field !== undefined) assert.equal(error.details.field, field);
    return true;
  });
}

test('a replayed event id is a duplicate delivery and leaves one outbox row', async () => {
  const store = new InMemoryStore([workflow]);
  const first = await processDepositConfirmed(store, event);
  const replay = await processDepositConfirmed(store, event);
  assert.deepEqual(first, {
    outcome: 'applied',
    operationId: 'start-exchange:swap-42',
    operationIds: ['start-exchange:swap-42'],
    status: 'exchange',
    revision: 4,
    ...measured(event),
  });
  const { outbox, inbox } = store.snapshot();
  // The replay answers what the first delivery did, as its receipt records it.
  assert.deepEqual(replay, {
    outcome: 'duplicate-delivery',
    original: {
      outcome: 'applied',
      operationIds: ['start-exchange:swap-42'],
      status: 'exchange',
      revision: 4,
      decidedAt: inbox.get(event.eventId).recordedAt,
    },
    ...measured(event),
  });
  assert.equal(outbox.size, 1);
  assert.equal(inbox.size, 1);
  const operation = outbox.get('start-exchange:swap-42');
  assert.deepEqual(
    {
      id: operation.id,
      type: operation.type,
      workflowId: operation.workflowId,
      eventId: operation.eventId,
      status: operation.status,
      payload: operation.payload,
    },
    {
      id: 'start-exchange:swap-42',
      type: 'START_EXCHANGE',
      workflowId: 'swap-42',
      eventId: 'chain-watcher:event-001',
      status: 'pending',
      payload: { depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000' },
    },
  );
});

test('a new event id for the same deposit is already-applied and the revision stays 4', async () => {
  const store = new InMemoryStore([workflow]);
  await processDepositConfirmed(store, event);
  const again = { ...event, eventId: 'chain-watcher:event-002' };
  const second = await processDepositConfirmed(store, again);
  assert.deepEqual(second, { outcome: 'already-applied', ...measured(again) });
  const { workflows, outbox, inbox } = store.snapshot();
  assert.equal(workflows.get('swap-42').revision, 4);
  assert.equal(workflows.get('swap-42').status, 'exchange');
  assert.equal(outbox.size, 1);
  assert.equal(inbox.get('chain-watcher:event-002').outcome, 'already-applied');
});

test('25 concurrent deliveries under different ids apply once and schedule one operation', async () => {
  const store = new InMemoryStore([workflow]);
  const results = await Promise.all(
    Array.from({ length: 25 }, (_, i) => processDepositConfirmed(store, { ...event, eventId: `source:event-${i}` })),
  );
  assert.equal(results.filter((r) => r.outcome === 'applied').length, 1);
  assert.equal(results.filter((r) => r.outcome === 'already-applied').length, 24);
  assert.equal(store.snapshot().outbox.size, 1);
  assert.equal(store.snapshot().inbox.size, 25);
});

test('a confirmation for a workflow that does not exist is UNKNOWN_WORKFLOW, to retry', async () => {
  const store = new InMemoryStore([]);
  await rejectsWith(processDepositConfirmed(store, event), 'UNKNOWN_WORKFLOW', {
    disposition: 'retry',
    details: { workflowId: 'swap-42', eventId: 'chain-watcher:event-001' },
  });
  assert.equal(store.snapshot().inbox.size, 0);
});

test('a mismatched depositRef is IDENTITY_MISMATCH naming depositRef, to reconcile', async () => {
  const store = new InMemoryStore([workflow]);
  await rejectsWith(processDepositConfirmed(store, { ...event, depositRef: 'btc-mainnet:tx-abc:vout-1' }), 'IDENTITY_MISMATCH', {
    disposition: 'reconcile',
    details: { field: 'depositRef', recorded: 'btc-mainnet:tx-abc:vout-0', actual: 'btc-mainnet:tx-abc:vout-1' },
  });
  assert.equal(store.snapshot().workflows.get('swap-42').revision, 3);
});

test('a changed amount is IDENTITY_MISMATCH naming amountUnits', async () => {
  const store = new InMemoryStore([workflow]);
  await rejectsWith(processDepositConfirmed(store, { ...event, amountUnits: '12500001' }), 'IDENTITY_MISMATCH', {
    details: { field: 'amountUnits' },
  });
  const { inbox, outbox } = store.snapshot();
  assert.equal(inbox.size + outbox.size, 0);
});

for (const status of ['exchange', 'sending', 'success']) {
  test(`a confirmation in ${status} is already-applied and writes only the receipt`, async () => {
    const store = new InMemoryStore([{ ...workflow, status }]);
    assert.deepEqual(await processDepositConfirmed(store, event), { outcome: 'already-applied', ...measured(event) });
    const { workflows, inbox, outbox } = store.snapshot();
    assert.equal(workflows.get('swap-42').revision, 3);
    assert.equal(inbox.size, 1);
    assert.equal(outbox.size, 0);
  });
}

for (const status of ['waiting', 'overdue', 'review']) {
  test(`a confirmation in ${status} is INVALID_TRANSITION, to reconcile`, async () => {
    const store = new InMemoryStore([{ ...workflow, status }]);
    await rejectsWith(processDepositConfirmed(store, event), 'INVALID_TRANSITION', {
      disposition: 'reconcile',
      details: { status },
    });
    assert.equal(store.snapshot().inbox.size, 0);
  });
}

test('the same event id with a different payload is EVENT_ID_CONFLICT', async () => {
  const store = new InMemoryStore([workflow]);
  await processDepositConfirmed(store, event);
  // The receipt was written under v1, so it holds the event's v1 fingerprint.
  const stored = fingerprint(event, { ruleSet: v1 });
  await rejectsWith(processDepositConfirmed(store, { ...event, amountUnits: '99' }), 'EVENT_ID_CONFLICT', {
    disposition: 'reconcile',
    details: { eventId: 'chain-watcher:event-001', storedFingerprint: stored },
  });
  assert.equal(store.snapshot().inbox.get('chain-watcher:event-001').fingerprint, stored);
});

test('a transaction that throws midway leaves no receipt, no update and no outbox row', async () => {
  const store = new InMemoryStore([workflow]);
  // A store whose transaction crashes after the receipt and the update, before the outbox insert.
  const crashing = {
    transaction: (fn) =>
      store.transaction((tx) =>
        fn({
          getReceipt: (id) => tx.getReceipt(id),
          getWorkflow: (id) => tx.getWorkflow(id),
          insertReceipt: (r) => tx.insertReceipt(r),
          writeWorkflow: (w) => tx.writeWorkflow(w),
          insertOperation: async () => {
            throw new Error('process died between statements');
          },
        }),
      ),
  };
  await assert.rejects(processDepositConfirmed(crashing, event), /process died between statements/);
  const { workflows, inbox, outbox } = store.snapshot();
  assert.equal(inbox.size, 0);
  assert.equal(outbox.size, 0);
  assert.deepEqual(workflows.get('swap-42'), workflow);
  // The redelivery after the crash applies normally.
  assert.equal((await processDepositConfirmed(store, event)).outcome, 'applied');
});

test('an outbox id that already exists is OUTBOX_CONFLICT and nothing of the event is kept', async () => {
  const store = new InMemoryStore([workflow]);
  await store.transaction(async (tx) => {
    await tx.insertOperation({
      id: 'start-exchange:swap-42',
      type: 'START_EXCHANGE',
      workflowId: 'swap-42',
      eventId: 'old',
      status: 'pending',
      payload: {},
    });
  });
  await rejectsWith(processDepositConfirmed(store, event), 'OUTBOX_CONFLICT', {
    disposition: 'reconcile',
    details: { operationId: 'start-exchange:swap-42' },
  });
  const { workflows, inbox } = store.snapshot();
  assert.equal(inbox.size, 0);
  assert.equal(workflows.get('swap-42').revision, 3);
});

/**
 * A host-written view of `store` where another writer bumps the workflow's
 * revision between every read and write (`onRead()` hears each read), so every
 * cycle loses its compare-and-set; `settings` are the view's own options.
 */
function contendedView(store, onRead, settings = {}) {
  return {
    ...settings,
    transaction: (fn) =>
      store.transaction((tx) =>
        fn({
          getReceipt: (id) => tx.getReceipt(id),
          getWorkflow: async (id) => {
            onRead();
            const wf = await tx.getWorkflow(id);
            await tx.writeWorkflow({
              id,
              expect: { status: wf.status, revision: wf.revision },
              set: { status: wf.status, revision: wf.revision + 1 },
            });
            return wf;
          },
          insertReceipt: (r) => tx.insertReceipt(r),
          writeWorkflow: (w) => tx.writeWorkflow(w),
          insertOperation: (op) => tx.insertOperation(op),
        }),
      ),
  };
}

test('a compare-and-set that keeps failing is CONCURRENT_UPDATE, to retry', async () => {
  const store = new InMemoryStore([workflow]);
  let attempts = 0;
  const contended = contendedView(store, () => {
    attempts += 1;
  });
  await rejectsWith(processDepositConfirmed(contended, event, { raceRetries: 2 }), 'CONCURRENT_UPDATE', { disposition: 'retry' });
  assert.equal(attempts, 3);
  assert.equal(store.snapshot().workflows.get('swap-42').revision, 3);
});

test('raceRetries: how often a lost race runs the cycle again, from the call or the store (maxAttempts is not a name of it)', async () => {
  const store = new InMemoryStore([workflow]);
  let cycles = 0;
  const contended = (settings = {}) =>
    contendedView(
      store,
      () => {
        cycles += 1;
      },
      settings,
    );
  const runs = async (store, options) => {
    cycles = 0;
    await rejectsWith(processDepositConfirmed(store, event, options), 'CONCURRENT_UPDATE');
    return cycles;
  };
  assert.equal(await runs(contended(), { raceRetries: 0 }), 1);
  assert.equal(await runs(contended(), { raceRetries: 2 }), 3);
  assert.equal(await runs(contended({ raceRetries: 1 }), {}), 2, "the store's own setting");
  assert.equal(await runs(contended({ raceRetries: 1 }), { raceRetries: 3 }), 4, 'the call overrides the store');
  await rejectsWith(processDepositConfirmed(contended(), event, { maxAttempts: 2 }), 'INVALID_ARGUMENT');
  assert.equal(await runs(contended(), {}), 5, 'default: four re-runs');
  await rejectsWith(processDepositConfirmed(contended(), event, { raceRetries: -1 }), 'INVALID_ARGUMENT');
  // A store resolves its option once.
  const { SqliteStore } = await import('idemflow/sqlite');
  const Database = (await import('better-sqlite3')).default;
  const sqlite = new SqliteStore(new Database(':memory:'), { raceRetries: 2 });
  assert.equal(sqlite.raceRetries, 2);
  assert.throws(() => new SqliteStore(new Database(':memory:'), { maxAttempts: 7 }), { code: 'INVALID_ARGUMENT' });
});

test('raceRetries has one rule wherever it enters: a whole number from 0 to 100 (the store, processEvent, processBatch, the delivery handler, idempotent)', async () => {
  const { SqliteStore } = await import('idemflow/sqlite');
  const { createDeliveryHandler, idempotent, processBatch } = await import('idemflow');
  const Database = (await import('better-sqlite3')).default;
  const ruleSet = RuleSet.builtin('order-shipment');
  const shipment = (id) => ({ eventId: id, workflowId: id, type: 'SHIPMENT_REQUESTED' });
  const entries = {
    store: async (raceRetries) => new SqliteStore(new Database(':memory:'), { raceRetries }),
    processEvent: (raceRetries) => processEvent(new InMemoryStore(), shipment(`pe-${raceRetries}`), { ruleSet, raceRetries }),
    processBatch: async (raceRetries) => {
      const [result] = await processBatch(new InMemoryStore(), [shipment(`pb-${raceRetries}`)], { ruleSet, raceRetries });
      if (result.error) throw result.error;
      return result;
    },
    deliveryHandler: async (raceRetries) => createDeliveryHandler(new InMemoryStore(), { ruleSet, raceRetries }),
    idempotent: (raceRetries) => idempotent(new InMemoryStore(), { key: `k-${raceRetries}`, payload: 1 }, () => null, { raceRetries }),
  };
  for (const [name, enter] of Object.entries(entries)) {
    for (const good of [0, 100]) await enter(good);
    for (const bad of [-1, 101, 1.5, '3', 5000]) {
      await assert.rejects(
        (async () => enter(bad))(),
        (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === 'raceRetries' && error.details.reason === 'out of range',
        `${name}: raceRetries ${JSON.stringify(bad)}`,
      );
    }
  }
});

// decide runs the default rule set, deposit-swap v3: the swap in `deposit` holds the detected deposit (sequence 1) in its deposits map.
test('decide returns the complete write set for applied', () => {
  const decision = decide({ event, receipt: null, workflow: SEED_WORKFLOW });
  assert.equal(decision.outcome, 'applied');
  assert.equal(decision.fingerprint, fingerprint(event));
  // The exchange acts on the deposit: recorded on the swap, and its entry in the map confirmed.
  const { id, status, revision, ...recorded } = SEED_EXCHANGING;
  assert.deepEqual(decision.writeSet.workflow, {
    id: 'swap-42',
    expect: { status: 'deposit', revision: 3 },
    set: { status: 'exchange', revision: 4, ...recorded },
  });
  assert.deepEqual(
    { ...decision.writeSet.receipt, ruleSet: undefined },
    {
      eventId: event.eventId,
      fingerprint: fingerprint(event),
      workflowId: 'swap-42',
      eventType: 'DEPOSIT_CONFIRMED',
      outcome: 'applied',
      ruleSet: undefined,
      result: { operationIds: ['start-exchange:swap-42'], status: 'exchange', revision: 4 },
    },
  );
  assert.equal(decision.writeSet.receipt.ruleSet.id, 'deposit-swap');
  assert.match(decision.writeSet.receipt.ruleSet.hash, /^sha256:[0-9a-f]{64}$/);
  assert.deepEqual(
    decision.writeSet.outbox.map((op) => [op.id, op.type, op.status]),
    [['start-exchange:swap-42', 'START_EXCHANGE', 'pending']],
  );
});

test('decide writes only the receipt for already-applied and nothing for a duplicate delivery', () => {
  // The swap exchanging since this confirmation (sequence 2) applied under another event id.
  const already = decide({ event, receipt: null, workflow: SEED_EXCHANGING });
  assert.equal(already.outcome, 'already-applied');
  assert.equal(already.writeSet.workflow, null);
  assert.deepEqual(already.writeSet.outbox, []);
  assert.equal(already.writeSet.receipt.outcome, 'already-applied');

  const duplicate = decide({ event, receipt: { fingerprint: fingerprint(event) }, workflow: SEED_WORKFLOW });
  assert.equal(duplicate.outcome, 'duplicate-delivery');
  assert.deepEqual(duplicate.writeSet, { receipt: null, workflow: null, outbox: [] });
});

test('planDepositConfirmation answers advance, already-applied and the three errors', () => {
  assert.equal(planDepositConfirmation(workflow, event), 'advance');
  assert.equal(planDepositConfirmation({ ...workflow, status: 'sending' }, event), 'already-applied');
  throwsWith(() => planDepositConfirmation(null, event), 'UNKNOWN_WORKFLOW');
  throwsWith(() => planDepositConfirmation({ ...workflow, amountUnits: '1' }, event), 'IDENTITY_MISMATCH', 'amountUnits');
  throwsWith(() => planDepositConfirmation({ ...workflow, status: 'overdue' }, event), 'INVALID_TRANSITION');
  throwsWith(() => planDepositConfirmation(workflow, { ...event, type: 'DEPOSIT_DETECTED' }), 'INVALID_EVENT', 'type');
});

test('fingerprint is SHA-256 of the canonical JSON, recomputed independently with node:crypto', () => {
  const samples = [
    event,
    { ...event, depositRef: 'quote " and backslash \\ inside', workflowId: 'swap-é-日本-🦀' },
    { ...event, eventId: 'another-id' },
    { ...event, sequence: Number.MAX_SAFE_INTEGER },
  ];
  for (const sample of samples) {
    // The default rule set (deposit-swap v3) fingerprints every declared field, sequence too: a safe
    // integer, which JSON.stringify writes as RFC 8785 does. Members sorted by name.
    const canonical = JSON.stringify({
      amountUnits: sample.amountUnits,
      depositRef: sample.depositRef,
      sequence: sample.sequence,
      type: sample.type,
      workflowId: sample.workflowId,
    });
    const expected = `fp1:${createHash('sha256').update(canonical, 'utf8').digest('hex')}`;
    assert.equal(fingerprint(sample), expected);
  }
  assert.equal(fingerprint(event), fingerprint({ ...event, eventId: 'another-id', extra: 'ignored' }));
});

test('errors from the wasm are real Errors with name, code, disposition, details and a stack', () => {
  try {
    validateEvent({ ...event, depositRef: '' });
    assert.fail('validateEvent accepted an empty depositRef');
  } catch (error) {
    assert.ok(error instanceof IdemflowError);
    assert.ok(error instanceof Error);
    assert.equal(error.name, 'IdemflowError');
    assert.equal(error.code, 'INVALID_EVENT');
    assert.equal(error.disposition, 'reject');
    assert.equal(error.details.field, 'depositRef');
    assert.equal(error.details.eventId, 'chain-watcher:event-001');
    assert.match(error.message, /depositRef/);
    assert.equal(typeof error.stack, 'string');
    assert.equal(Object.getPrototypeOf(error.details), Object.prototype);
  }
});

test('IdemflowError.codes gives every code its default disposition', () => {
  const expected = {
    INVALID_EVENT: 'reject',
    EVENT_ID_CONFLICT: 'reconcile',
    UNKNOWN_WORKFLOW: 'retry',
    IDENTITY_MISMATCH: 'reconcile',
    INVALID_TRANSITION: 'reconcile',
    OUTBOX_CONFLICT: 'reconcile',
    CONCURRENT_UPDATE: 'retry',
    INVALID_RECORD: 'reconcile',
    INVALID_ARGUMENT: 'fatal',
    RULESET_INVALID: 'fatal',
  };
  for (const [code, disposition] of Object.entries(expected)) assert.equal(IdemflowError.codes[code], disposition, code);
  for (const disposition of Object.values(IdemflowError.codes)) assert.ok(['reject', 'retry', 'reconcile', 'fatal'].includes(disposition));
  assert.equal(new IdemflowError('UNKNOWN_WORKFLOW', 'm').disposition, 'retry');
});

test('duplicate workflow ids in the InMemoryStore constructor throw', () => {
  throwsWith(() => new InMemoryStore([workflow, { ...workflow }]), 'INVALID_ARGUMENT');
});

test('processEvent validates before it opens a transaction', async () => {
  let opened = 0;
  const store = {
    transaction: async () => {
      opened += 1;
    },
  };
  await rejectsWith(processEvent(store, { ...event, amountUnits: 12500000 }), 'INVALID_EVENT', { details: { field: 'amountUnits' } });
  assert.equal(opened, 0);
});
