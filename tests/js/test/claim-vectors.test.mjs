// The claim condition is the core's (src/outbox.rs, `claimable`); each store
// writes it in its own query language (the SQL dialects' claim statements,
// MongoDB's filter, the in-memory store's call into the core). Every case of
// tests/vectors/outbox.json (which the native and wasm tests read too) is
// stored as it says and claimed at its `now`, on every backend: the store
// claims it exactly when the core says it is claimable.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { backends } from '../workers/outbox-backends.mjs';

const { cases } = JSON.parse(readFileSync(new URL('../../vectors/outbox.json', import.meta.url), 'utf8'));
const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;
const T0 = Date.UTC(2026, 0, 1);

for (const backend of backends) {
  if (only && !only.has(backend.id)) continue;
  describe(`the claim condition of tests/vectors/outbox.json on ${backend.name}`, { skip: backend.skip }, () => {
    let env;
    before(async () => {
      env = await backend.setup();
    });
    after(async () => {
      await env?.cleanup();
      await env?.close();
    });

    it(`claims exactly the ${cases.length} cases' claimable operations, each at its own now`, async () => {
      const clock = { now: () => T0 };
      let store = await env.open([], clock);
      // One operation per case, of a type of its own: a claim names that type, so it can touch no other case's row.
      await store.transaction(async (tx) => {
        for (const i of cases.keys())
          await tx.insertOperation({ id: `case-${i}`, type: `T${i}`, workflowId: 'wf', eventId: `e-${i}`, payload: {} });
      });
      for (const [i, { operation }] of cases.entries()) {
        store = await env.corrupt(store, 'outbox', `case-${i}`, {
          status: operation.status,
          next_attempt_at: operation.nextAttemptAt,
          lease_expires_at: operation.leaseExpiresAt,
        });
      }
      const answers = [];
      for (const [i, vector] of cases.entries()) {
        const claimed = await store.claimOperations({
          owner: 'vectors',
          now: vector.now,
          leaseExpiresAt: vector.now,
          limit: 10,
          types: [`T${i}`],
        });
        answers.push({ name: vector.name, claimed: claimed.map((op) => op.id) });
      }
      assert.deepEqual(
        answers,
        cases.map((vector, i) => ({ name: vector.name, claimed: vector.claimable ? [`case-${i}`] : [] })),
      );
    });
  });
}
