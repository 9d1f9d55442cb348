// processBatch: one transaction for many deliveries, with exactly the results
// and the stored state of processing them one by one, on every backend of
// workers/backends.mjs. A property test draws batches with duplicate event
// ids, several events per workflow, re-published facts, conflicting reuses of
// an event id and events the core rejects, and runs each batch through
// processBatch on one set of workflows and through processEvent, one event
// at a time, on a twin set; results and final states must be equal.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { IdemflowError, InMemoryStore, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf, WATCHER_SEQUENCE } from '../workers/fixtures.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const RUNS = Number(process.env.IDEMFLOW_BATCH_RUNS ?? 60);
const WORKFLOWS = 3;
const TYPES = ['DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED', 'DEPOSIT_CONFIRMED', 'DEPOSIT_REVERSED', 'DEADLINE_PASSED', 'EXCHANGE_COMPLETED'];

/** An event of the pool: a few event ids (so duplicates and reuses), a few facts. */
const anEvent = fc.record({
  id: fc.integer({ min: 0, max: 7 }),
  workflow: fc.integer({ min: 0, max: WORKFLOWS - 1 }),
  type: fc.constantFrom(...TYPES),
  ref: fc.constantFrom('r1', 'r2'),
  units: fc.constantFrom('100', '250'),
  broken: fc.constantFrom(false, false, false, false, false, false, false, true),
});

/** The concrete event of a drawn one, in the namespace of one side of one run. */
function eventOf(drawn, ns) {
  const event = { eventId: `${ns}:e${drawn.id}`, workflowId: `${ns}:w${drawn.workflow}`, type: drawn.type };
  if (drawn.type === 'EXCHANGE_COMPLETED') event.payoutUnits = drawn.units;
  else if (drawn.type !== 'DEADLINE_PASSED')
    Object.assign(event, { depositRef: drawn.ref, amountUnits: drawn.units, sequence: WATCHER_SEQUENCE[drawn.type] });
  if (drawn.broken) event.amountUnits = 7; // a number where a decimal string belongs: INVALID_EVENT
  return event;
}

/**
 * A value without its namespace: ids lose their prefix, and fingerprints
 * (which hash the workflow id, so differ between the twins) become `fp1:…`.
 */
function strip(value, ns) {
  return JSON.parse(
    JSON.stringify(value)
      .replaceAll(`${ns}:`, '')
      .replace(/fp1:[0-9a-f]{64}/g, 'fp1:…')
      .replace(/"decidedAt":\d+/g, '"decidedAt":"(a time)"'),
  );
}

/** A result without its namespace, errors as their code, disposition and details. */
function comparable(result, ns) {
  if (result.error !== undefined) {
    assert.ok(result.error instanceof IdemflowError, 'a batch error is an IdemflowError');
    return { error: strip({ code: result.error.code, disposition: result.error.disposition, details: result.error.details }, ns) };
  }
  return strip(result, ns);
}

/** What the store holds for the run's workflows, receipts and operations (timestamps aside). */
async function stateOf(store, ns, drawnEvents) {
  const workflows = [];
  for (let w = 0; w < WORKFLOWS; w += 1) workflows.push(await store.getWorkflow(`${ns}:w${w}`));
  const receipts = [];
  for (const id of new Set(drawnEvents.map((e) => e.id))) {
    const receipt = await store.getReceipt(`${ns}:e${id}`);
    if (receipt) delete receipt.recordedAt;
    receipts.push(receipt);
  }
  const operations = [];
  for (let w = 0; w < WORKFLOWS; w += 1) {
    for (const name of ['start-exchange', 'send-payout', 'open-review']) {
      const op = await store.getOperation(`${name}:${ns}:w${w}`);
      if (op) operations.push({ id: op.id, type: op.type, payload: op.payload, status: op.status, eventId: op.eventId });
    }
  }
  return strip({ workflows, receipts, operations }, ns);
}

/** The backends whose transactions have savepoints (the SQL stores). */
const SAVEPOINTS = new Set(['sqlite', 'sqlite-node', 'pglite', 'pg', 'mysql']);
/** The backends where the batch's workflows are row-locked as it reads them, and other connections write meanwhile. */
const LOCKS = new Set(['pg', 'mysql']);

/**
 * `store`, counting its transactions (`counted()` per call), whose
 * transactions run `first(tx)` once, just before processBatch's savepoint.
 */
function interceptSavepoint(store, counted, first) {
  let pending = true;
  const forward = (target, key) => {
    const value = Reflect.get(target, key, target);
    return typeof value === 'function' ? value.bind(target) : value;
  };
  const txOf = (tx) =>
    new Proxy(tx, {
      get(target, key) {
        if (key !== 'savepoint') return forward(target, key);
        return async (name) => {
          if (pending) {
            pending = false;
            await first(target);
          }
          return target.savepoint(name);
        };
      },
    });
  return new Proxy(store, {
    get(target, key) {
      if (key !== 'transaction') return forward(target, key);
      return (fn, options) => {
        counted();
        return target.transaction((tx) => fn(txOf(tx)), options);
      };
    },
  });
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`processBatch on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    let store;
    let env;
    let tables;
    before(() => ({ store, env, tables } = suite));

    it(`equals processing the events one by one (results and stored state), ${RUNS} random batches`, async () => {
      let run = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(anEvent, { minLength: 1, maxLength: 12 }), async (drawn) => {
          run += 1;
          const batchNs = `b${run}-${uniquePrefix()}`;
          const oneNs = `s${run}-${uniquePrefix()}`;
          for (const ns of [batchNs, oneNs]) {
            for (let w = 0; w < WORKFLOWS; w += 1) await store.putWorkflow({ id: `${ns}:w${w}`, status: 'waiting', revision: 0 });
          }
          const batched = await store.processBatch(drawn.map((d) => eventOf(d, batchNs)));
          const single = [];
          for (const d of drawn) single.push(await outcomeOf(processEvent(store, eventOf(d, oneNs))));
          assert.equal(batched.length, drawn.length);
          assert.deepEqual(
            batched.map((r) => comparable(r, batchNs)),
            single.map((r) => comparable(r, oneNs)),
          );
          assert.deepEqual(await stateOf(store, batchNs, drawn), await stateOf(store, oneNs, drawn));
        }),
        { numRuns: RUNS },
      );
    });

    it('two batches racing for the same workflows: each workflow applies once, the loser runs again and says so', async () => {
      const ns = uniquePrefix();
      const ids = Array.from({ length: 20 }, (_, i) => `${ns}:w${i}`);
      for (const id of ids) await store.putWorkflow({ id, status: 'waiting', revision: 0 });
      const second = backend.durable ? await env.open(tables, {}) : null;
      const other = second ? second.store : store;
      const batchOf = (source) =>
        ids.map((id, i) => ({
          eventId: `${source}:${i}`,
          workflowId: id,
          type: 'DEPOSIT_CONFIRMED',
          depositRef: `r${i}`,
          amountUnits: '5',
          sequence: 1,
        }));
      const retries = [];
      const [a, b] = await Promise.all([
        store.processBatch(batchOf(`${ns}:a`), { hooks: { onRaceRetry: (r) => retries.push(r.reason) } }),
        other.processBatch(batchOf(`${ns}:b`), { hooks: { onRaceRetry: (r) => retries.push(r.reason) } }),
      ]);
      for (let i = 0; i < ids.length; i += 1) {
        assert.deepEqual(
          [a[i].outcome, b[i].outcome].sort(),
          ['already-applied', 'applied'],
          `workflow ${i}: ${a[i].outcome ?? a[i].error?.code} / ${b[i].outcome ?? b[i].error?.code}`,
        );
        const workflow = await store.getWorkflow(ids[i]);
        assert.deepEqual([workflow.status, workflow.revision], ['exchange', 1]);
      }
      assert.ok(retries.every((reason) => typeof reason === 'string'));
      await second?.close();
    });

    it('a write lost inside a batch: back to the savepoint, only the events on what was lost decided again, one transaction', {
      skip: !SAVEPOINTS.has(backend.id)
        ? 'no savepoints here: a lost race runs the whole batch again (the test above)'
        : LOCKS.has(backend.id)
          ? 'the batch locks its workflows here: another writer waits (the tests below)'
          : false,
    }, async () => {
      const batchNs = `lost-${uniquePrefix()}`;
      const oneNs = `lost1-${uniquePrefix()}`;
      // The batch: w0 twice, w1, w2. After the batch has read, another writer
      // commits event 1 (the batch's event 1 becomes a duplicate) and the
      // fact of event 0 re-published under event id 4 (w0 moves on: the
      // batch's event 0 becomes already-applied, its event 3 applies after it).
      const drawn = [
        { id: 0, workflow: 0, type: 'DEPOSIT_CONFIRMED', ref: 'r1', units: '100' },
        { id: 1, workflow: 1, type: 'DEPOSIT_CONFIRMED', ref: 'r1', units: '100' },
        { id: 2, workflow: 2, type: 'DEPOSIT_CONFIRMED', ref: 'r1', units: '100' },
        { id: 3, workflow: 0, type: 'EXCHANGE_COMPLETED', units: '100' },
      ];
      const winner = [drawn[1], { id: 4, workflow: 0, type: 'DEPOSIT_CONFIRMED', ref: 'r1', units: '100' }];
      for (const ns of [batchNs, oneNs]) {
        for (let w = 0; w < WORKFLOWS; w += 1) await store.putWorkflow({ id: `${ns}:w${w}`, status: 'waiting', revision: 0 });
      }
      // In process, the winner commits through the batch's own transaction
      // before its savepoint: the state a commit in between would leave.
      let transactions = 0;
      const wrapped = interceptSavepoint(
        store,
        () => {
          transactions += 1;
        },
        async (tx) => {
          for (const d of winner) await processEvent({ transaction: (fn) => fn(tx) }, eventOf(d, batchNs));
        },
      );
      const heard = [];
      const batched = await processBatch(
        wrapped,
        drawn.map((d) => eventOf(d, batchNs)),
        { hooks: { onRaceRetry: (r) => heard.push(r.reason) } },
      );
      // The reference: the winner's events, then the batch's, one by one.
      for (const d of winner) await processEvent(store, eventOf(d, oneNs));
      const single = [];
      for (const d of drawn) single.push(await outcomeOf(processEvent(store, eventOf(d, oneNs))));

      assert.equal(transactions, 1, 'one transaction for the batch');
      assert.equal(heard.length, 1, `one lost write heard: ${heard}`);
      assert.ok(['receipt-exists', 'workflow-changed'].includes(heard[0]), heard[0]);
      // Events on w0 and w1 were decided again; the event on w2 was decided once.
      assert.deepEqual(
        batched.map((r) => r.attempts),
        [2, 2, 1, 2],
      );
      assert.deepEqual(
        batched.map((r) => r.outcome),
        ['already-applied', 'duplicate-delivery', 'applied', 'applied'],
      );
      const withoutAttempts = (r, ns) => {
        const { attempts, ...rest } = comparable(r, ns);
        return rest;
      };
      assert.deepEqual(
        batched.map((r) => withoutAttempts(r, batchNs)),
        single.map((r) => withoutAttempts(r, oneNs)),
      );
      const all = [...winner, ...drawn];
      assert.deepEqual(await stateOf(store, batchNs, all), await stateOf(store, oneNs, all));
    });

    it('a workflow another transaction creates after the batch read it missing: back to the savepoint, that event decided again, one transaction', {
      skip: SAVEPOINTS.has(backend.id) ? false : 'no savepoints here: a lost race runs the whole batch again (the test above)',
    }, async () => {
      const ns = uniquePrefix();
      const ruleSet = RuleSet.builtin('order-shipment');
      const request = (id, order) => ({ eventId: `${ns}:${id}`, workflowId: `${ns}:${order}`, type: 'SHIPMENT_REQUESTED' });
      // A new workflow is not locked by the batch's read (there is no row):
      // another connection creates o1 between the batch's read and its writes.
      const second = LOCKS.has(backend.id) ? await env.open(tables, {}) : null;
      let transactions = 0;
      const wrapped = interceptSavepoint(
        store,
        () => {
          transactions += 1;
        },
        async (tx) => {
          await processEvent(second ? second.store : { transaction: (fn) => fn(tx) }, request('winner', 'o1'), { ruleSet });
        },
      );
      const heard = [];
      const results = await processBatch(wrapped, [request('a', 'o1'), request('b', 'o2')], {
        ruleSet,
        hooks: { onRaceRetry: (r) => heard.push(r.reason) },
      });
      await second?.close();
      assert.equal(transactions, 1, 'one transaction for the batch');
      assert.deepEqual(heard, ['workflow-exists']);
      assert.deepEqual(
        results.map((r) => [r.outcome, r.attempts]),
        [
          ['already-applied', 2],
          ['applied', 1],
        ],
      );
      assert.equal((await store.getOperation(`create-shipment:${ns}:o1`)).eventId, `${ns}:winner`);
      assert.equal((await store.getOperation(`create-shipment:${ns}:o2`)).eventId, `${ns}:b`);
    });

    it('a writer that needs a workflow the batch holds waits for the batch and is decided after it: no lost write on either side', {
      skip: LOCKS.has(backend.id) ? false : 'one writer at a time here (or no row locks)',
    }, async () => {
      const ns = uniquePrefix();
      const ids = [0, 1, 2].map((i) => `${ns}:w${i}`);
      for (const id of ids) await store.putWorkflow({ id, status: 'waiting', revision: 0 });
      const second = await env.open(tables, {});
      const confirm = (eventId, workflowId) => ({
        eventId: `${ns}:${eventId}`,
        workflowId,
        type: 'DEPOSIT_CONFIRMED',
        depositRef: 'r',
        amountUnits: '5',
        sequence: 1,
      });
      const heard = [];
      let other;
      const wrapped = interceptSavepoint(
        store,
        () => {},
        async () => {
          // The batch holds w1 now: the other writer's event on it waits.
          other = processEvent(second.store, confirm('other', ids[1]), { hooks: { onRaceRetry: (r) => heard.push(r.reason) } });
          await new Promise((resolve) => setTimeout(resolve, 200));
        },
      );
      const results = await processBatch(
        wrapped,
        ids.map((id, i) => confirm(`b${i}`, id)),
        { hooks: { onRaceRetry: (r) => heard.push(r.reason) } },
      );
      const late = await other;
      await second.close();
      assert.deepEqual(
        results.map((r) => [r.outcome, r.attempts]),
        [
          ['applied', 1],
          ['applied', 1],
          ['applied', 1],
        ],
      );
      assert.equal(late.outcome, 'already-applied', 'decided on what the batch committed');
      assert.ok(
        heard.every((reason) => reason !== 'deadlock'),
        `no deadlock: ${heard}`,
      );
      assert.equal((await store.getWorkflow(ids[1])).revision, 1);
    });

    it('a batch of duplicates of one event applies it once; an empty batch writes nothing', async () => {
      const ns = uniquePrefix();
      await store.putWorkflow({ id: `${ns}:w`, status: 'waiting', revision: 0 });
      const event = {
        eventId: `${ns}:e`,
        workflowId: `${ns}:w`,
        type: 'DEPOSIT_CONFIRMED',
        depositRef: 'r',
        amountUnits: '5',
        sequence: 1,
      };
      const results = await processBatch(store, [event, { ...event }, { ...event, eventId: `${ns}:e2` }]);
      assert.deepEqual(
        results.map((r) => r.outcome),
        ['applied', 'duplicate-delivery', 'already-applied'],
      );
      assert.deepEqual(await processBatch(store, []), []);
      assert.equal((await store.getWorkflow(`${ns}:w`)).revision, 1);
    });
  });
}

describe('processBatch arguments', () => {
  it('refuses what is not an array of events, and batches past the limit, before any I/O', async () => {
    const store = new InMemoryStore();
    await assert.rejects(processBatch(store, 'events'), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(processBatch(store, new Array(10_001).fill({})), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(processBatch(store, [], { maxBatch: 3 }), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(processBatch({}, []), { code: 'INVALID_ARGUMENT' });
  });

  it('a store that fails answers every event with its error, and nothing is kept', async () => {
    const memory = new InMemoryStore([{ id: 'w', status: 'waiting', revision: 0 }]);
    const failing = {
      transaction: (fn) =>
        memory.transaction(async (tx) => {
          await fn(tx);
          throw new IdemflowError('STORE_UNAVAILABLE', 'the database went away', { details: { reason: 'connection-lost' } });
        }),
    };
    const event = { eventId: 'e', workflowId: 'w', type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '5', sequence: 1 };
    const results = await processBatch(failing, [event, { ...event, amountUnits: 5 }]);
    assert.equal(results[0].error.code, 'STORE_UNAVAILABLE');
    assert.equal(results[1].error.code, 'INVALID_EVENT', 'an event the core refused keeps its own error');
    assert.equal(memory.snapshot().inbox.size, 0);
  });
});
