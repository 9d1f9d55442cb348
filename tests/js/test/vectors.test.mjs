// Layer 3 of the shared vectors (tests/vectors/*.json): the same cases the
// native and wasm layers run, through the installed package.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import test from 'node:test';
import { decide, fingerprint, IdemflowError, InMemoryStore, processEvent, RuleSet, validateEvent, verifyRuleSet } from 'idemflow';

const load = (name) => JSON.parse(readFileSync(new URL(`../../vectors/${name}.json`, import.meta.url), 'utf8'));
// A case names its built-in rule set (deposit-swap when absent) and may pin its
// version (`ruleSetVersion`); without one, the current version answers.
const rules = (name, version) => RuleSet.builtin(name ?? 'deposit-swap', version === undefined ? {} : { version });

function subset(actual, expected, path = '') {
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
    assert.ok(actual !== null && typeof actual === 'object', `${path} is an object`);
    for (const [key, value] of Object.entries(expected)) subset(actual[key], value, `${path}.${key}`);
  } else if (Array.isArray(expected)) {
    assert.equal(actual.length, expected.length, `${path} length`);
    expected.forEach((value, i) => subset(actual[i], value, `${path}[${i}]`));
  } else {
    assert.deepEqual(actual, expected, path);
  }
}

function caught(fn) {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof IdemflowError, `not an IdemflowError: ${error}`);
    return error;
  }
  assert.fail('expected an IdemflowError');
}

function matchesError(error, expected) {
  assert.equal(error.code, expected.code);
  if (expected.disposition) assert.equal(error.disposition, expected.disposition);
  if (expected.details) subset(error.details, expected.details, 'details');
  if (expected.field) assert.equal(error.details.field, expected.field);
  if (expected.path) assert.equal(error.details.path, expected.path);
}

for (const c of load('fingerprint').cases) {
  test(`fingerprint vector: ${c.name}`, () => {
    assert.equal(fingerprint(c.event, { ruleSet: rules(c.ruleSet, c.ruleSetVersion) }), c.fingerprint);
    assert.equal(`fp1:${createHash('sha256').update(c.canonical, 'utf8').digest('hex')}`, c.fingerprint);
  });
}

for (const c of load('validation').cases) {
  test(`validation vector: ${c.name}`, () => {
    const ruleSet = rules(c.ruleSet, c.ruleSetVersion);
    if (c.valid) {
      validateEvent(c.event, { ruleSet });
      assert.match(fingerprint(c.event, { ruleSet }), /^fp1:[0-9a-f]{64}$/);
      return;
    }
    for (const fn of [
      () => validateEvent(c.event, { ruleSet }),
      () => fingerprint(c.event, { ruleSet }),
      () => decide({ event: c.event, receipt: null, workflow: null, ruleSet }),
    ]) {
      matchesError(caught(fn), c.error);
    }
  });
}

for (const c of load('decisions').cases) {
  // v1 and v2 cell cases share their names: the title says which version.
  const version = c.ruleSetVersion === undefined ? '' : ` (v${c.ruleSetVersion})`;
  test(`decision vector: ${c.name}${version}`, () => {
    const ruleSet = rules(c.ruleSet, c.ruleSetVersion);
    if (c.ruleSetVersion !== undefined) assert.equal(ruleSet.version, c.ruleSetVersion);
    const input = { event: c.event, receipt: c.receipt, workflow: c.workflow, ruleSet };
    if (c.expect.error) {
      matchesError(
        caught(() => decide(input)),
        c.expect.error,
      );
      return;
    }
    assert.deepEqual(decide(input), {
      outcome: c.expect.outcome,
      eventId: c.event.eventId,
      workflowId: c.event.workflowId,
      eventType: c.event.type,
      fingerprint: c.expect.fingerprint,
      writeSet: c.expect.writeSet,
      ...(c.expect.original === undefined ? {} : { original: c.expect.original }),
    });
  });
}

const rulesets = load('rulesets');

test('rule-set vectors: the built-ins have the recorded ids, versions and hashes', () => {
  for (const b of rulesets.builtins) {
    const ruleSet = RuleSet.builtin(b.name, { version: b.version });
    assert.deepEqual([ruleSet.id, ruleSet.version, ruleSet.hash], [b.id, b.version, b.hash]);
    if (b.current) assert.equal(RuleSet.builtin(b.name), ruleSet, `${b.name}: v${b.version} is the current version`);
    // A rule set with facts takes seconds to prove in wasm: cargo test proves every built-in
    // (builtin_proofs.rs), and rules-order.test.mjs proves the current deposit-swap here.
    if (ruleSet.definition().facts !== undefined) continue;
    const report = verifyRuleSet(ruleSet);
    assert.equal(report.ok, true);
    assert.deepEqual(
      report.properties.map((p) => p.name),
      rulesets.properties,
    );
  }
});

for (const c of rulesets.broken) {
  test(`rule-set vector (broken): ${c.name}`, () => {
    const report = verifyRuleSet(c.definition);
    assert.deepEqual(
      report.properties.filter((p) => !p.ok).map((p) => p.name),
      [c.failing],
    );
    const failing = report.properties.find((p) => p.name === c.failing);
    subset(failing.counterexample, c.counterexample, 'counterexample');
    for (const more of c.moreCounterexamples ?? []) {
      const found = (failing.moreCounterexamples ?? []).some((example) => {
        try {
          subset(example, more);
          return true;
        } catch {
          return false;
        }
      });
      assert.ok(found, `a counterexample like ${JSON.stringify(more)}`);
    }
    matchesError(
      caught(() => RuleSet.fromJSON(c.definition)),
      c.loadError,
    );
  });
}

// Reordered deliveries through the real in-memory store: an answer with
// disposition retry sends the event to the back of the queue.
for (const c of rulesets.reorderings) {
  test(`rule-set vector (reordering): ${c.name}`, async () => {
    const ruleSet = RuleSet.builtin(c.ruleSet, c.ruleSetVersion === undefined ? {} : { version: c.ruleSetVersion });
    const store = new InMemoryStore(c.workflow ? [c.workflow] : []);
    const queue = [...c.deliveries];
    const answers = [];
    for (let budget = 100; queue.length > 0; budget -= 1) {
      assert.ok(budget > 0, 'deliveries settle');
      const event = queue.shift();
      try {
        answers.push((await processEvent(store, event, { ruleSet })).outcome);
      } catch (error) {
        assert.ok(error instanceof IdemflowError, String(error));
        answers.push({ error: error.code, disposition: error.disposition });
        if (error.disposition === 'retry') queue.push(event);
      }
    }
    assert.deepEqual(answers, c.answers);
    const { workflows, outbox } = store.snapshot();
    const workflowId = c.deliveries[0].workflowId;
    const { id, ...end } = workflows.get(workflowId);
    assert.equal(id, workflowId);
    assert.deepEqual(end, c.end);
    assert.deepEqual([...outbox.keys()].sort(), [...c.operations].sort());
  });
}

for (const c of rulesets.malformed) {
  test(`rule-set vector (malformed): ${c.name}`, () => {
    const definition = c.definitionText ?? c.definition;
    matchesError(
      caught(() => verifyRuleSet(definition)),
      c.error,
    );
    matchesError(
      caught(() => RuleSet.fromJSON(definition)),
      c.error,
    );
  });
}

for (const c of rulesets.hashes) {
  test(`rule-set vector (hash): ${c.name}`, () => {
    assert.equal(RuleSet.fromJSON(c.definitionText).hash, c.hash);
  });
}
