// Reorder safety through the installed package: the verifier's reorder-safe
// property as a JS caller and the command line see it, and the built-in
// versions a worker can load.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { decide, IdemflowError, RuleSet, verifyRuleSet } from 'idemflow';

const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
const current = RuleSet.builtin('deposit-swap');
const v3 = RuleSet.builtin('deposit-swap', { version: 3 });
const v2 = RuleSet.builtin('deposit-swap', { version: 2 });
const v1 = RuleSet.builtin('deposit-swap', { version: 1 });

const reorderSafe = (report) => report.properties.find((p) => p.name === 'reorder-safe');

/** deposit-swap v1's table with v2's declaration of what producers promise (v3's declares a sequence, which v1's events do not carry). */
function v1WithOrder() {
  return { ...v1.definition(), order: v2.definition().order };
}

function cli(args) {
  const run = spawnSync(bin, args, { encoding: 'utf8' });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

test('RuleSet.builtin gives the current version by default and an older one by version', () => {
  assert.equal(current.version, 4);
  assert.equal(current, RuleSet.builtin('deposit-swap', { version: 4 }));
  assert.equal(v3.version, 3);
  assert.notEqual(current.hash, v3.hash);
  assert.equal(v2.version, 2);
  assert.equal(v1.version, 1);
  assert.equal(new Set([v1.hash, v2.hash, v3.hash]).size, 3);
  assert.equal(RuleSet.builtin('order-shipment').version, 2);
  assert.equal(RuleSet.builtin('order-shipment', { version: 1 }).version, 1);
});

test('an unknown version is INVALID_ARGUMENT, a fatal error naming the versions there are', () => {
  for (const version of [5, 0, 1.5, '1']) {
    assert.throws(
      () => RuleSet.builtin('deposit-swap', { version }),
      (error) => {
        assert.ok(error instanceof IdemflowError);
        assert.equal(error.code, 'INVALID_ARGUMENT');
        assert.equal(error.disposition, 'fatal');
        return true;
      },
      String(version),
    );
  }
  assert.throws(() => RuleSet.builtin('deposit-swap', { version: 5 }), /there are: 1, 2, 3, 4/);
});

test('receipts name the version that decided them', () => {
  const event = { eventId: 'e1', workflowId: 'swap-1', type: 'DEADLINE_PASSED' };
  const workflow = { id: 'swap-1', status: 'waiting', revision: 1 };
  for (const ruleSet of [v1, v2, v3]) {
    const { writeSet } = decide({ event, receipt: null, workflow, ruleSet });
    assert.deepEqual(writeSet.receipt.ruleSet, { id: 'deposit-swap', version: ruleSet.version, hash: ruleSet.hash });
  }
});

test('deposit-swap v2 is proven reorder-safe, and the report says what was checked and how long it took', () => {
  const report = verifyRuleSet(v2);
  assert.equal(report.ok, true);
  const property = reorderSafe(report);
  assert.equal(property.ok, true);
  assert.equal(property.checked.bound.events, 6);
  assert.equal(property.checked.bound.copiesPerType, 2);
  assert.match(property.checked.bound.says, /^every history of up to 6 events, each event type at most 2 times/);
  assert.ok(property.checked.histories > 0 && property.checked.configurations > property.checked.histories);
  assert.equal(property.checked.races.length, 6);
  assert.equal(property.checked.follows.length, 4);
  assert.equal(typeof report.elapsedMs, 'number');
  assert.ok(report.elapsedMs >= 0);
});

test('deposit-swap v4, the default, is proven reorder-safe over one and two deposits, and the report says what was checked', () => {
  const report = verifyRuleSet(current);
  assert.equal(report.ok, true);
  const property = reorderSafe(report);
  assert.equal(property.ok, true);
  // Every order through the decider itself: one deposit with up to 4 observations (one type again included,
  // 2 copies each, 8 events), or two with up to 3 each; amounts below, at and above expectedUnits, or none set.
  const { bound } = property.checked;
  assert.match(bound.explorer, /decider/);
  assert.deepEqual(bound.oneFact, { observations: 4, repeats: true, events: 8, copiesPerObservation: 2, copiesPerOtherType: 2 });
  assert.equal(bound.twoFacts.observationsEach, 3);
  assert.deepEqual(bound.amounts, { expected: '10', classes: ['below', 'equal', 'above'], unsetExpected: true });
  assert.match(bound.says, /one fact with up to 4 observations .* and of two facts with up to 3 observations each/);
  const byFacts = Object.fromEntries(property.checked.byFacts.map((f) => [f.facts, f]));
  assert.ok(byFacts.one.histories > 0 && byFacts.two.histories > 0, JSON.stringify(property.checked.byFacts));
  assert.equal(byFacts.one.histories + byFacts.two.histories + byFacts.none.histories, property.checked.histories);
  assert.ok(property.checked.histories > 0 && property.checked.configurations > property.checked.histories);
  // The deadline against each of the 3 deposit events, each of them against each of
  // DEPOSIT_CONFIRMED, EXCHANGE_COMPLETED and PAYOUT_CONFIRMED, and two deposits'
  // confirmations across: 3 + 3 × 3 + 1 pairs.
  assert.equal(property.checked.races.length, 13);
  assert.equal(property.checked.follows.length, 4);
  assert.equal(typeof report.elapsedMs, 'number');
  assert.ok(report.elapsedMs >= 0);
});

test('deposit-swap v1 claims nothing about order: the property is reported as skipped', () => {
  const property = reorderSafe(verifyRuleSet(v1));
  assert.equal(property.ok, true);
  assert.match(property.checked.skipped, /in-order delivery/);
});

test("v1 with the producers' order declared fails reorder-safe on both overtakings, and will not load", () => {
  const definition = v1WithOrder();
  const property = reorderSafe(verifyRuleSet(definition));
  assert.equal(property.ok, false);
  const examples = [property.counterexample, ...property.moreCounterexamples];
  const overtaking = (type) => examples.find((e) => e.history.length === 2 && e.actual.deliveries[0].event === type);
  const confirmation = overtaking('DEPOSIT_CONFIRMED');
  assert.deepEqual(
    confirmation.actual.deliveries.map((d) => d.answer),
    ['INVALID_TRANSITION (reconcile)', 'applied'],
  );
  assert.equal(confirmation.expected.end.status, 'exchange');
  assert.equal(confirmation.actual.end.status, 'deposit');
  assert.equal(confirmation.divergesAt, 0);
  const reversal = overtaking('DEPOSIT_REVERSED');
  assert.deepEqual(
    reversal.actual.deliveries.map((d) => d.answer),
    ['stale', 'applied'],
  );
  assert.equal(reversal.expected.end.status, 'waiting');
  assert.equal(reversal.actual.end.status, 'deposit', 'the reversed deposit is live again');
  assert.throws(
    () => RuleSet.fromJSON(definition),
    (error) => error.code === 'RULESET_INVALID' && error.details.path === 'reorder-safe',
  );
});

test('an order section that names what does not exist is RULESET_INVALID with the path', () => {
  const cases = [
    [{ follows: [{ event: 'NOPE', after: 'DEPOSIT_DETECTED' }] }, '$.order.follows[0].event'],
    [{ follows: [{ event: 'DEPOSIT_CONFIRMED', after: 'SOMETHING' }] }, '$.order.follows[0].after'],
    [{ follows: [{ event: 'DEPOSIT_CONFIRMED', after: 'DEPOSIT_DETECTED', same: ['payoutRef'] }] }, '$.order.follows[0].same[0]'],
    [{ races: [{ between: ['DEADLINE_PASSED'] }] }, '$.order.races[0].between'],
    [{ races: [{ between: ['DEADLINE_PASSED', 'DEADLINE_PASSED'] }] }, '$.order.races[0].between'],
    [{ ordering: [] }, '$.order.ordering'],
  ];
  for (const [order, path] of cases) {
    assert.throws(
      () => RuleSet.fromJSON({ ...current.definition(), order }),
      (error) => {
        assert.equal(error.code, 'RULESET_INVALID');
        assert.equal(error.details.path, path);
        return true;
      },
      path,
    );
  }
});

test('the command line shows the two delivery orders and where they diverge, and exits 1', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemflow-order-'));
  const file = join(dir, 'v1-order.json');
  writeFileSync(file, JSON.stringify(v1WithOrder()));
  const { code, stdout } = cli(['rules', 'verify', file]);
  assert.equal(code, 1);
  assert.match(stdout, /FAIL {2}reorder-safe/);
  assert.match(stdout, /history from waiting: DEPOSIT_DETECTED, DEPOSIT_CONFIRMED/);
  assert.match(stdout, /> DEPOSIT_CONFIRMED: waiting -> waiting \(INVALID_TRANSITION \(reconcile\)\)/);
  assert.match(stdout, /they diverge at delivery 1/);
});

test('the command line verifies a built-in by version and says when order is not claimed', () => {
  const old = cli(['rules', 'verify', 'deposit-swap@1']);
  assert.equal(old.code, 0);
  assert.match(old.stdout, /rule set deposit-swap v1/);
  assert.match(old.stdout, /n\/a +reorder-safe/);
  assert.match(old.stdout, /not claimed: no 'order' section/);
  const latest = cli(['rules', 'verify', 'deposit-swap']);
  assert.equal(latest.code, 0);
  assert.match(latest.stdout, /rule set deposit-swap v4/);
  assert.match(latest.stdout, /pass {2}reorder-safe/);
  assert.match(latest.stdout, /declared races: .*DEADLINE_PASSED/);
  assert.equal(cli(['rules', 'table', 'deposit-swap@1']).stdout, v1.tableMarkdown());
  assert.equal(cli(['rules', 'table', 'deposit-swap@x']).code, 2);
});
