// The CommonJS entry point exports the same objects as the ES module one.
const test = require('node:test');
const assert = require('node:assert/strict');
const idemflow = require('idemflow');

test('require("idemflow") exposes the API and agrees with import', async () => {
  const esm = await import('idemflow');
  const names = Object.keys(idemflow).sort();
  assert.ok(names.includes('fingerprint') && names.includes('processEvent') && names.includes('RuleSet'));
  for (const name of names) assert.equal(esm[name], idemflow[name], name);
  assert.equal(esm.default, idemflow);
});

test('an error thrown through require is instanceof the class both entry points export', async () => {
  const esm = await import('idemflow');
  assert.throws(
    () => idemflow.validateEvent({}),
    (error) => error instanceof esm.IdemflowError && error.code === 'INVALID_EVENT',
  );
});

test('the CommonJS entry point processes a delivery end to end', async () => {
  const store = new idemflow.InMemoryStore([
    // The watcher's detection applied: deposit-swap v3 keeps the deposit in the swap's deposits map.
    {
      id: 'swap-7',
      status: 'deposit',
      revision: 0,
      deposits: { 'eth:0xabc:log-2': { event: 'DEPOSIT_DETECTED', amountUnits: '1000000000000000000', sequence: 1 } },
    },
  ]);
  const event = {
    eventId: 'e-1',
    workflowId: 'swap-7',
    type: 'DEPOSIT_CONFIRMED',
    depositRef: 'eth:0xabc:log-2',
    amountUnits: '1000000000000000000',
    sequence: 2,
  };
  assert.equal((await idemflow.processEvent(store, event)).outcome, 'applied');
  assert.equal((await idemflow.processEvent(store, event)).outcome, 'duplicate-delivery');
});
