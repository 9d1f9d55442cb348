// Recurring operations through the installed package: the built-in
// `subscription` rule set charges every renewal under its own operation id
// (`charge-renewal:<revision>:<subscriptionId>`), and the verifier proves
// such ids distinct or says why not.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { fingerprint, IdemflowError, InMemoryStore, processEvent, RuleSet, verifyRuleSet } from 'idemflow';

const subscription = RuleSet.builtin('subscription');
const ruleSet = subscription;
// Version 1 (periods as text), kept for its receipts; its renewal rule charges in `then`.
const v1 = RuleSet.builtin('subscription', { version: 1 });

// Periods are counts: the first period is 1, paid at signup.
const started = { eventId: 'signup:1', workflowId: 'sub-7', type: 'SUBSCRIPTION_STARTED', paidThrough: 1, paymentRef: 'psp:pay-1' };
const due = (eventId, period) => ({ eventId, workflowId: 'sub-7', type: 'RENEWAL_DUE', period, amountUnits: '1500' });
const paid = (eventId, period, paymentRef) => ({
  eventId,
  workflowId: 'sub-7',
  type: 'RENEWAL_PAID',
  period,
  paidThrough: period,
  paymentRef,
});

async function errorOf(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof IdemflowError, String(error));
    return error;
  }
  assert.fail('expected an IdemflowError');
}

test('subscription: RuleSet.builtin and the name as a string both work, and it verifies', () => {
  assert.equal(subscription.id, 'subscription');
  assert.equal(subscription.version, 2);
  assert.equal(RuleSet.builtin('subscription', { version: 2 }).hash, subscription.hash);
  assert.equal(v1.version, 1);
  const report = verifyRuleSet(subscription.definition());
  assert.equal(report.ok, true);
  const reorder = report.properties.find((p) => p.name === 'reorder-safe');
  assert.match(reorder.checked.skipped, /in-order/);
});

test('subscription: two renewals in one workflow give two distinct operation ids', async () => {
  const store = new InMemoryStore();
  assert.equal((await processEvent(store, started, { ruleSet })).outcome, 'applied');
  const firstDue = due('billing:2', 2);
  const first = await processEvent(store, firstDue, { ruleSet: 'subscription' });
  assert.deepEqual(first, {
    outcome: 'applied',
    status: 'renewing',
    revision: 2,
    operationId: 'charge-renewal:2:sub-7',
    operationIds: ['charge-renewal:2:sub-7'],
    attempts: 1,
    fingerprint: fingerprint(firstDue, { ruleSet: 'subscription' }),
  });
  assert.equal((await processEvent(store, paid('psp:1', 2, 'psp:pay-2'), { ruleSet })).status, 'active');
  const second = await processEvent(store, due('billing:3', 3), { ruleSet });
  assert.equal(second.operationId, 'charge-renewal:4:sub-7');
  const { outbox, workflows } = store.snapshot();
  assert.deepEqual([...outbox.keys()].sort(), ['charge-renewal:2:sub-7', 'charge-renewal:4:sub-7']);
  assert.deepEqual(outbox.get('charge-renewal:4:sub-7').payload, { period: 3, amountUnits: '1500' });
  assert.equal(outbox.get('charge-renewal:2:sub-7').type, 'CHARGE_RENEWAL');
  assert.equal(workflows.get('sub-7').revision, 4);
});

test('subscription: a RENEWAL_DUE re-published for the same period is already-applied and charges once', async () => {
  const store = new InMemoryStore();
  await processEvent(store, started, { ruleSet });
  await processEvent(store, due('billing:2', 2), { ruleSet });
  const republished = due('billing:2-retry', 2);
  const again = await processEvent(store, republished, { ruleSet });
  assert.deepEqual(again, { outcome: 'already-applied', attempts: 1, fingerprint: fingerprint(republished, { ruleSet }) });
  const redelivered = due('billing:2', 2);
  const duplicate = await processEvent(store, redelivered, { ruleSet });
  assert.equal(duplicate.outcome, 'duplicate-delivery');
  assert.deepEqual(duplicate.original.operationIds, ['charge-renewal:2:sub-7']);
  assert.deepEqual([duplicate.attempts, duplicate.fingerprint], [1, fingerprint(redelivered, { ruleSet })]);
  // Once that renewal is paid, a late re-publication is for a period already
  // paid (period <= paidThrough): already-applied, never charged (v1 refused
  // it as IDENTITY_MISMATCH).
  await processEvent(store, paid('psp:1', 2, 'psp:pay-2'), { ruleSet });
  const late = await processEvent(store, due('billing:2-late', 2), { ruleSet });
  assert.equal(late.outcome, 'already-applied');
  assert.deepEqual([...store.snapshot().outbox.keys()], ['charge-renewal:2:sub-7']);
  // The next period's renewal while a charge is in flight waits for it (retry).
  await processEvent(store, due('billing:3', 3), { ruleSet });
  const early = await errorOf(processEvent(store, due('billing:4-early', 4), { ruleSet }));
  assert.deepEqual([early.code, early.disposition], ['INVALID_TRANSITION', 'retry']);
});

test('subscription: the CLI prints its table and verifies it, and docs/rulesets.md shows that table', () => {
  const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
  const table = spawnSync(bin, ['rules', 'table', 'subscription'], { encoding: 'utf8' });
  assert.equal(table.status, 0, table.stderr);
  assert.equal(table.stdout, subscription.tableMarkdown());
  assert.ok(table.stdout.includes('emits CHARGE_RENEWAL `charge-renewal:{revision}:{workflowId}`'), table.stdout);
  assert.equal(spawnSync(bin, ['rules', 'verify', 'subscription'], { encoding: 'utf8' }).status, 0);
  const readme = readFileSync(fileURLToPath(new URL('../../../docs/rulesets.md', import.meta.url)), 'utf8');
  const begin = readme.indexOf('<!-- subscription table: begin -->');
  const end = readme.indexOf('<!-- subscription table: end -->');
  assert.ok(begin >= 0 && end > begin, 'docs/rulesets.md has the subscription table markers');
  assert.equal(readme.slice(begin, end).split('\n').slice(1).join('\n').trim(), subscription.tableMarkdown().trim());
});

// A definition that marks or writes a recurring operation inconsistently is
// refused with the path of the bad part.
function withRenewalEmit(emit) {
  const definition = v1.definition();
  definition.rules.find((r) => r.on === 'RENEWAL_DUE' && r.in === 'active').then.emit = [emit];
  return definition;
}

test('recurring: the mark and the id form must agree', () => {
  const cases = [
    [{ type: 'CHARGE_RENEWAL', id: 'charge-renewal:{workflowId}', recurring: true }, '$.rules[3].then.emit[0].id'],
    [{ type: 'CHARGE_RENEWAL', id: 'charge-renewal:{revision}:{workflowId}' }, '$.rules[3].then.emit[0].recurring'],
    [{ type: 'CHARGE_RENEWAL', id: 'charge-renewal:{workflowId}:{revision}', recurring: true }, '$.rules[3].then.emit[0].id'],
  ];
  for (const [emit, path] of cases) {
    assert.throws(
      () => RuleSet.fromJSON(withRenewalEmit(emit)),
      (error) => error instanceof IdemflowError && error.code === 'RULESET_INVALID' && error.details.path === path,
      JSON.stringify(emit),
    );
  }
});

test('recurring: a charge without the revision in its id fails operation-ids-unique on the second renewal', () => {
  const report = verifyRuleSet(withRenewalEmit({ type: 'CHARGE_RENEWAL', id: 'charge-renewal:{workflowId}', payload: ['period'] }));
  const failed = report.properties.filter((p) => !p.ok).map((p) => p.name);
  assert.deepEqual(failed, ['operation-ids-unique']);
  const example = report.properties.find((p) => p.name === 'operation-ids-unique').counterexample;
  assert.deepEqual(
    example.steps.map((s) => s.event),
    ['SUBSCRIPTION_STARTED', 'RENEWAL_DUE', 'RENEWAL_PAID', 'RENEWAL_DUE'],
  );
});

test('recurring: a renewal with revisionStep 0 would repeat its id: operation-ids-unique fails too', () => {
  const definition = v1.definition();
  definition.rules.find((r) => r.on === 'RENEWAL_DUE' && r.in === 'active').then.revisionStep = 0;
  const report = verifyRuleSet(definition);
  const failed = report.properties.filter((p) => !p.ok).map((p) => p.name);
  assert.deepEqual(failed, ['operation-ids-unique', 'revision-increases']);
  assert.match(report.properties.find((p) => p.name === 'operation-ids-unique').counterexample.reason, /revisionStep 0/);
});
