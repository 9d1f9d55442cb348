// Issue 37: every id the rules can emit fits every store. A 304-byte
// depositRef on a 505-byte workflow id (both within the 512-byte field
// limits) rendered in full is an 827-byte per-fact operation id, past
// MySQL's VARCHAR(768) key; the core hashes the key of such an id
// (docs/rulesets.md, "Operation id length"), so the deposit commits and its
// operation is claimable on every store the suites run. And a write a
// database refuses for its size is WRITE_TOO_LARGE for that event only.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createOutboxConsumer, IdemflowError, InMemoryStore, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, suiteStore, tablesFor, uniquePrefix } from '../workers/backends.mjs';

const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const ruleSet = RuleSet.builtin('deposit-swap', { version: 3 });
const MAX_ID_BYTES = 768;
const bytes = (text) => Buffer.byteLength(text, 'utf8');
const sha256 = (text) => createHash('sha256').update(text, 'utf8').digest('hex');

/** A swap waiting for 12500000 units, and a partial deposit confirmed on it: the rules review that deposit, once. */
const swap = (id) => ({ id, status: 'waiting', revision: 1, expectedUnits: '12500000' });
const partial = (eventId, workflowId, depositRef) => ({
  eventId,
  workflowId,
  type: 'DEPOSIT_CONFIRMED',
  depositRef,
  amountUnits: '5000000',
  sequence: 1,
});

/** The 505-byte workflow id and the 304-byte depositRef (one colon: 306 bytes escaped) of the issue, made distinct by `tag`. */
const longWorkflow = (tag) => `swap:${tag}:`.padEnd(505, 'w');
const longRef = (tag) => `btc-mainnet:${tag}-`.padEnd(304, 'a');
const hashedId = (ref, workflowId) => `review-deposit:%sha256-${sha256(ref)}:${workflowId}`;

/** Claims `id` (the only REVIEW_DEPOSIT due) and completes it: the operation is the store's like any other. */
async function claimAndComplete(store, id) {
  const now = Date.now() + 60_000;
  const claimed = await store.claimOperations({
    owner: 'id-limits',
    now,
    leaseExpiresAt: now + 30_000,
    limit: 10,
    types: ['REVIEW_DEPOSIT'],
  });
  assert.deepEqual(
    claimed.map((op) => op.id),
    [id],
  );
  const [operation] = claimed;
  assert.equal(operation.type, 'REVIEW_DEPOSIT');
  assert.ok(await store.completeOperation({ id, fencingToken: operation.fencingToken, now }), 'completed');
  assert.equal((await store.getOperation(id)).status, 'done');
}

for (const backend of BACKENDS) {
  if (only && !only.has(backend.id)) continue;
  describe(`operation ids at the field limits on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });

    it("the issue's 827-byte id is written with its key hashed, commits, and is claimable", async () => {
      const { store } = suite;
      const workflowId = longWorkflow('a');
      const ref = longRef('a');
      assert.deepEqual([bytes(workflowId), bytes(ref)], [505, 304]);
      assert.equal(bytes(`review-deposit:${ref.replaceAll(':', '%3A')}:${workflowId}`), 827, 'rendered in full');
      await store.putWorkflow(swap(workflowId));
      const result = await processEvent(store, partial('ids-a1', workflowId, ref), { ruleSet });
      const id = hashedId(ref, workflowId);
      assert.equal(result.outcome, 'applied');
      assert.deepEqual(result.operationIds, [id]);
      assert.ok(bytes(id) <= MAX_ID_BYTES, `${bytes(id)} bytes`);
      const stored = await store.getOperation(id);
      assert.deepEqual(
        { id: stored.id, workflowId: stored.workflowId, status: stored.status, payload: stored.payload },
        { id, workflowId, status: 'pending', payload: { depositRef: ref, amountUnits: '5000000' } },
      );
      const workflow = await store.getWorkflow(workflowId);
      assert.deepEqual(workflow.deposits[ref].operations, ['review-deposit'], 'the map keeps the key as it is');
      // A redelivery is a duplicate that names the same id.
      const again = await processEvent(store, partial('ids-a1', workflowId, ref), { ruleSet });
      assert.equal(again.outcome, 'duplicate-delivery');
      assert.deepEqual(again.original.operationIds, [id]);
      await claimAndComplete(store, id);
    });

    it('an id of exactly 768 bytes is kept whole; one byte more (fewer than 768 characters) is hashed', async () => {
      const { store } = suite;
      // 505 bytes in 255 characters.
      const workflowId = `sw-${'é'.repeat(250)}-b`;
      assert.equal(bytes(workflowId), 505);
      const fits = `btc-mainnet:${'b'.repeat(233)}`;
      const over = `btc-mainnet:${'c'.repeat(234)}`;
      await store.putWorkflow(swap(workflowId));
      const kept = await processEvent(store, partial('ids-b1', workflowId, fits), { ruleSet });
      const keptId = `review-deposit:${fits.replace(':', '%3A')}:${workflowId}`;
      assert.equal(bytes(keptId), MAX_ID_BYTES);
      assert.deepEqual(kept.operationIds, [keptId]);
      const hashed = await processEvent(store, partial('ids-b2', workflowId, over), { ruleSet });
      assert.ok(`review-deposit:${over.replace(':', '%3A')}:${workflowId}`.length < MAX_ID_BYTES, 'fewer UTF-16 units than the limit');
      assert.deepEqual(hashed.operationIds, [hashedId(over, workflowId)]);
      for (const id of [keptId, hashedId(over, workflowId)]) assert.equal((await store.getOperation(id))?.id, id);
    });

    it('processBatch commits long-id deposits of several swaps with the others of the batch', async () => {
      const { store } = suite;
      const swaps = ['c1', 'c2', 'c3'].map(longWorkflow);
      for (const id of swaps) await store.putWorkflow(swap(id));
      await store.putWorkflow(swap('ids-short'));
      const events = [
        ...swaps.map((workflowId, i) => partial(`ids-c${i}`, workflowId, longRef(`c${i}`))),
        partial('ids-c-short', 'ids-short', 'btc:tx-short:0'),
      ];
      const results = await processBatch(store, events, { ruleSet });
      const expected = [
        ...swaps.map((workflowId, i) => hashedId(longRef(`c${i}`), workflowId)),
        'review-deposit:btc%3Atx-short%3A0:ids-short',
      ];
      assert.deepEqual(
        results.map((r) => r.error?.code ?? r.outcome),
        ['applied', 'applied', 'applied', 'applied'],
      );
      assert.deepEqual(
        results.map((r) => r.operationIds),
        expected.map((id) => [id]),
      );
      assert.equal(new Set(expected).size, 4);
      for (const id of expected) assert.equal((await store.getOperation(id))?.status, 'pending', id);
    });
  });
}

// A write the database refuses for its size. idemflow's own writes always fit
// (above); a narrower schema of the host's is where a database still refuses
// one: here the outbox key shrunk to 40 characters.
const NARROWED = [
  ['pglite', (table) => `ALTER TABLE "${table}" ALTER COLUMN id TYPE VARCHAR(40)`],
  ['pg', (table) => `ALTER TABLE "${table}" ALTER COLUMN id TYPE VARCHAR(40)`],
  ['mysql', (table) => `ALTER TABLE \`${table}\` MODIFY id VARCHAR(40) NOT NULL`],
];

for (const [id, narrow] of NARROWED) {
  const backend = BACKENDS.find((b) => b.id === id);
  if (only && !only.has(id)) continue;
  describe(`a write too large for its column on ${backend.name}`, { skip: backend.skip }, () => {
    const tables = tablesFor(uniquePrefix());
    let env;
    let helper;
    before(async () => {
      env = await backend.setup();
      helper = await env.open(tables, {});
      await helper.store.migrate();
      await helper.query(narrow(tables.outbox), []);
    });
    after(async () => {
      await helper?.drop();
      await helper?.close();
      await env?.close();
    });

    it('is WRITE_TOO_LARGE (reconcile) for processEvent, and nothing is written', async () => {
      const { store } = helper;
      await store.putWorkflow(swap('w-too-large-1'));
      const event = partial('too-large-1', 'w-too-large-1', 'btc:tx-too-large:0');
      const error = await processEvent(store, event, { ruleSet }).then(
        () => assert.fail('committed'),
        (e) => e,
      );
      assert.ok(error instanceof IdemflowError, String(error));
      assert.equal(error.code, 'WRITE_TOO_LARGE', error.message);
      assert.equal(error.disposition, 'reconcile');
      assert.equal(error.details.reason, 'value-too-long');
      assert.ok(error.cause !== undefined, "the driver's error is the cause");
      assert.equal(await store.getReceipt('too-large-1'), null);
      assert.equal((await store.getWorkflow('w-too-large-1')).revision, 1);
    });

    it("in processBatch it is that event's answer; the other events commit", async () => {
      const { store } = helper;
      for (const w of ['w2', 'w3', 'w4']) await store.putWorkflow(swap(w));
      const results = await processBatch(
        store,
        [partial('b-2', 'w2', 'r2'), partial('b-3', 'w3', 'btc:tx-far-too-long-for-forty:0'), partial('b-4', 'w4', 'r4')],
        { ruleSet },
      );
      assert.deepEqual(
        results.map((r) => r.error?.code ?? r.outcome),
        ['applied', 'WRITE_TOO_LARGE', 'applied'],
      );
      assert.deepEqual(results[0].operationIds, ['review-deposit:r2:w2']);
      assert.equal((await store.getOperation('review-deposit:r4:w4'))?.status, 'pending');
      assert.equal(await store.getReceipt('b-3'), null);
    });
  });
}

describe("each store's table of the errors that say a write is too large", () => {
  const installed = fileURLToPath(new URL('../node_modules/idemflow/', import.meta.url));
  const load = (...parts) => createRequire(import.meta.url)(path.join(installed, ...parts));
  const { mapDriverError } = load('store', 'errors.cjs');
  const sql = (name) => (error) => mapDriverError(error, load('adapters', name, 'dialect.cjs').classify);
  const mappers = {
    mysql: sql('mysql'),
    postgres: sql('postgres'),
    sqlite: sql('sqlite'),
    mongodb: load('adapters', 'mongodb', 'documents.cjs').mapError,
  };
  const driverError = (fields) => Object.assign(new Error('refused'), fields);
  const cases = [
    ['mysql', { errno: 1406, code: 'ER_DATA_TOO_LONG' }, 'value-too-long'],
    ['mysql', { errno: 1118, code: 'ER_TOO_BIG_ROWSIZE' }, 'row-too-large'],
    ['mysql', { errno: 1153, code: 'ER_NET_PACKET_TOO_LARGE' }, 'packet-too-large'],
    ['postgres', { code: '22001' }, 'value-too-long'],
    ['postgres', { code: '54000' }, 'limit-exceeded'],
    ['sqlite', { code: 'SQLITE_TOOBIG' }, 'value-too-long'],
    ['sqlite', { errcode: 18 }, 'value-too-long'],
    ['mongodb', { code: 10334, codeName: 'BSONObjectTooLarge' }, 'document-too-large'],
    ['mongodb', { code: 17419 }, 'document-too-large'],
  ];
  for (const [store, fields, reason] of cases) {
    it(`${store} ${JSON.stringify(fields)} is WRITE_TOO_LARGE (${reason}), not STORE_UNAVAILABLE`, () => {
      const cause = driverError(fields);
      const error = mappers[store](cause);
      assert.ok(error instanceof IdemflowError, String(error));
      assert.deepEqual(
        { code: error.code, disposition: error.disposition, reason: error.details.reason, cause: error.cause },
        { code: 'WRITE_TOO_LARGE', disposition: 'reconcile', reason, cause },
      );
    });
  }
});

it("an outbox consumer's owner must fit the lease owner column (255 bytes)", () => {
  const handlers = { REVIEW_DEPOSIT: async () => {} };
  const fits = 'é'.repeat(127); // 254 bytes
  assert.equal(createOutboxConsumer(new InMemoryStore(), handlers, { owner: fits }).owner, fits);
  assert.throws(
    () => createOutboxConsumer(new InMemoryStore(), handlers, { owner: 'é'.repeat(128) }),
    (error) =>
      error instanceof IdemflowError &&
      error.code === 'INVALID_ARGUMENT' &&
      error.details.field === 'owner' &&
      error.details.reason === 'too long',
  );
});
