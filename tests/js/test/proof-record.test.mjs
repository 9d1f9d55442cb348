// Issue 31: a definition is proven once, by `idemflow rules prove` (in CI), and
// a worker loads it with the proof record without proving again; a record of
// another definition is refused, one of another engine set aside.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { IdemflowError, proveRuleSet, RuleSet } from 'idemflow';

const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
const rulesModule = fileURLToPath(new URL('../node_modules/idemflow/core/rules.cjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'idemflow-proof-'));

/** The payments rule set of docs/your-rules.md, with an invariant of its own. */
function payments(version = 1) {
  const doc = readFileSync(new URL('../../../docs/your-rules.md', import.meta.url), 'utf8');
  const start = doc.indexOf('```json\n{\n  "id": "payments"') + 8;
  const definition = JSON.parse(doc.slice(start, doc.indexOf('\n```', start)));
  definition.version = version;
  definition.invariants = [{ name: 'no-shipment-after-cancellation', never: { emit: 'SHIP_ORDER', after: 'ORDER_CANCELLED' } }];
  return definition;
}

function idemflow(args) {
  const run = spawnSync(bin, args, { encoding: 'utf8', timeout: 120_000 });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** Loads `definition` with `proof` in a fresh process: how many proofs it ran, and the hash or the error. */
function loadInFreshProcess(definition, proof) {
  const script = `
    const { RuleSet } = require('idemflow');
    const { proofStats } = require(${JSON.stringify(rulesModule)});
    const [definition, proof] = JSON.parse(process.argv[1]);
    try {
      const ruleSet = proof === null ? RuleSet.fromJSON(definition) : RuleSet.fromJSON(definition, { proof });
      console.log(JSON.stringify({ hash: ruleSet.hash, proofsRun: proofStats().proofsRun }));
    } catch (error) {
      console.log(JSON.stringify({ code: error.code, message: error.message, proofsRun: proofStats().proofsRun }));
    }`;
  const run = spawnSync(process.execPath, ['-e', script, JSON.stringify([definition, proof ?? null])], {
    encoding: 'utf8',
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    timeout: 120_000,
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}

test('rules prove writes the record beside the file; a fresh worker loads a v3-sized rule set with it and proves nothing', () => {
  // deposit-swap v4 under a name of its own: not a built-in, so nothing knows it proven.
  const definition = { ...RuleSet.builtin('deposit-swap').definition(), id: 'my-swap' };
  const file = join(dir, 'my-swap.json');
  writeFileSync(file, JSON.stringify(definition));
  const { code, stdout, stderr } = idemflow(['rules', 'prove', file]);
  assert.equal(code, 0, stderr);
  const target = join(dir, 'my-swap.proof.json');
  assert.match(stdout, new RegExp(`proved my-swap v4 \\(sha256:[0-9a-f]{64}\\): ${target}`));
  const record = JSON.parse(readFileSync(target, 'utf8'));
  assert.ok(record.properties.includes('invariants') && record.properties.includes('reorder-safe'));
  assert.match(record.explored.says, /^every history of one fact/);
  assert.deepEqual(loadInFreshProcess(definition, record), { hash: record.ruleSet.hash, proofsRun: 0 });
  // The same record as JSON text.
  assert.equal(loadInFreshProcess(definition, readFileSync(target, 'utf8')).proofsRun, 0);
});

test('without its record a fresh worker proves a definition when it loads it; with it, it does not', () => {
  const record = proveRuleSet(payments(1));
  assert.equal(loadInFreshProcess(payments(1), undefined).proofsRun, 1);
  assert.deepEqual(loadInFreshProcess(payments(1), record), { hash: record.ruleSet.hash, proofsRun: 0 });
});

test('a record of another definition is INVALID_ARGUMENT naming both hashes; one of another engine is set aside and the definition proven', () => {
  const record = proveRuleSet(payments(1));
  const other = payments(2);
  const refused = loadInFreshProcess(other, record);
  assert.equal(refused.code, 'INVALID_ARGUMENT');
  assert.match(refused.message, new RegExp(`proof record is of ${record.ruleSet.hash}, this definition is sha256:`));
  assert.equal(refused.proofsRun, 0);
  assert.deepEqual(loadInFreshProcess(payments(1), { ...record, engine: 'idemflow-search/0' }), {
    hash: record.ruleSet.hash,
    proofsRun: 1,
  });
  // In this process too, even once the definition is compiled: the record must be its own.
  RuleSet.fromJSON(other);
  assert.throws(
    () => RuleSet.fromJSON(other, { proof: record }),
    (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
  );
  for (const proof of [5, null, ['x'], '{not json']) {
    assert.throws(
      () => RuleSet.fromJSON(payments(1), { proof }),
      (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
      String(proof),
    );
  }
  assert.throws(
    () => RuleSet.fromJSON(payments(1), { proven: true }),
    (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
  );
});

test('rules prove of a rule set that breaks its invariant prints the order, writes no record and exits 1', () => {
  const definition = payments(1);
  definition.rules
    .find((r) => r.on === 'PAYMENT_SUCCEEDED' && r.in === 'cancelled')
    .then.emit.push({ type: 'SHIP_ORDER', id: 'ship-order:{workflowId}' });
  const file = join(dir, 'payments-bug.json');
  writeFileSync(file, JSON.stringify(definition));
  const { code, stdout, stderr } = idemflow(['rules', 'prove', file, '--out', join(dir, 'bug.proof.json')]);
  assert.equal(code, 1, stderr);
  assert.match(stdout, /breaks invariant no-shipment-after-cancellation/);
  assert.match(stderr, /not proven, no record written/);
  assert.equal(existsSync(join(dir, 'bug.proof.json')), false);
  assert.throws(
    () => proveRuleSet(definition),
    (error) => error.code === 'RULESET_INVALID' && error.details.path === 'invariants' && error.details.report.ok === false,
  );
});
