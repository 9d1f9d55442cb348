// processBatch: one transaction for many deliveries, with exactly the results
// and the stored state of processing them one by one, on every backend of
// workers/backends.mjs. A property test draws batches with duplicate event
// ids, several events per workflow, re-published facts, conflicting reuses of
// an event id and events the core rejects, and runs each batch through
// processBatch on one set of workflows and through processEvent, one event
// at a time, on a twin set; results and final states must be equal.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { IdemflowError, InMemoryStore, processBatch, processEvent } from 'idemflow';
import { BACKENDS, tablesFor, uniquePrefix } from '../workers/backends.mjs';

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
  else if (drawn.type !== 'DEADLINE_PASSED') Object.assign(event, { depositRef: drawn.ref, amountUnits: drawn.units });
  if (drawn.broken) event.amountUnits = 7; // a number where a decimal string belongs: INVALID_EVENT
  return event;
}

/**
 * A value without its namespace: ids lose their prefix, and fingerprints
 * (which hash the workflow id, so differ between the twins) become `fp1:…`.
 */
function strip(value, ns) {
  return JSON.parse(JSON.stringify(value).replaceAll(`${ns}:`, '').replace(/fp1:[0-9a-f]{64}/g, 'fp1:…')
    .replace(/"decidedAt":\d+/g, '"decidedAt":"(a time)"'));
}

/** A result without its namespace, errors as their code, disposition and details. */
function comparable(result, ns) {
  if (result.error !== undefined) {
    assert.ok(result.error instanceof IdemflowError, 'a batch error is an IdemflowError');
    return { error: strip({ code: result.error.code, disposition: result.error.disposition, details: result.error.details }, ns) };
  }
  return strip(result, ns);
}

async function outcomeOf(promise) {
  try {
    return await promise;
  } catch (error) {
    if (!(error instanceof IdemflowError)) throw error;
    return { error };
  }
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

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`processBatch on ${backend.name}`, { skip: backend.skip }, () => {
    let env = null;
    let helper = null;
    let store;
    let tables;
    before(async () => {
      if (backend.durable) {
        env = await backend.setup();
        tables = tablesFor(uniquePrefix());
        helper = await env.open(tables, {});
        store = helper.store;
        await store.migrate();
      } else {
        store = new InMemoryStore();
      }
    });
    after(async () => {
      await helper?.drop?.();
      await helper?.close?.();
      await env?.close();
    });

    it(`equals processing the events one by one (results and stored state), ${RUNS} random batches`, async () => {
      let run = 0;
      await fc.assert(fc.asyncProperty(fc.array(anEvent, { minLength: 1, maxLength: 12 }), async (drawn) => {
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
        assert.deepEqual(batched.map((r) => comparable(r, batchNs)), single.map((r) => comparable(r, oneNs)));
        assert.deepEqual(await stateOf(store, batchNs, drawn), await stateOf(store, oneNs, drawn));
      }), { numRuns: RUNS });
    });

    it('two batches racing for the same workflows: each workflow applies once, the loser runs again and says so', async () => {
      const ns = uniquePrefix();
      const ids = Array.from({ length: 20 }, (_, i) => `${ns}:w${i}`);
      for (const id of ids) await store.putWorkflow({ id, status: 'waiting', revision: 0 });
      const second = backend.durable ? await env.open(tables, {}) : null;
      const other = second ? second.store : store;
      const batchOf = (source) => ids.map((id, i) => ({ eventId: `${source}:${i}`, workflowId: id, type: 'DEPOSIT_CONFIRMED', depositRef: `r${i}`, amountUnits: '5' }));
      const retries = [];
      const [a, b] = await Promise.all([
        store.processBatch(batchOf(`${ns}:a`), { hooks: { onRaceRetry: (r) => retries.push(r.reason) } }),
        other.processBatch(batchOf(`${ns}:b`), { hooks: { onRaceRetry: (r) => retries.push(r.reason) } }),
      ]);
      for (let i = 0; i < ids.length; i += 1) {
        assert.deepEqual([a[i].outcome, b[i].outcome].sort(), ['already-applied', 'applied'], `workflow ${i}: ${a[i].outcome ?? a[i].error?.code} / ${b[i].outcome ?? b[i].error?.code}`);
        const workflow = await store.getWorkflow(ids[i]);
        assert.deepEqual([workflow.status, workflow.revision], ['exchange', 1]);
      }
      assert.ok(retries.every((reason) => typeof reason === 'string'));
      await second?.close();
    });

    it('a batch of duplicates of one event applies it once; an empty batch writes nothing', async () => {
      const ns = uniquePrefix();
      await store.putWorkflow({ id: `${ns}:w`, status: 'waiting', revision: 0 });
      const event = { eventId: `${ns}:e`, workflowId: `${ns}:w`, type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '5' };
      const results = await processBatch(store, [event, { ...event }, { ...event, eventId: `${ns}:e2` }]);
      assert.deepEqual(results.map((r) => r.outcome), ['applied', 'duplicate-delivery', 'already-applied']);
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
      transaction: (fn) => memory.transaction(async (tx) => {
        await fn(tx);
        throw new IdemflowError('STORE_UNAVAILABLE', 'the database went away', { details: { reason: 'connection-lost' } });
      }),
    };
    const event = { eventId: 'e', workflowId: 'w', type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '5' };
    const results = await processBatch(failing, [event, { ...event, amountUnits: 5 }]);
    assert.equal(results[0].error.code, 'STORE_UNAVAILABLE');
    assert.equal(results[1].error.code, 'INVALID_EVENT', 'an event the core refused keeps its own error');
    assert.equal(memory.snapshot().inbox.size, 0);
  });
});
