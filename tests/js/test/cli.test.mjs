// The command-line tool as installed by npm (node_modules/.bin/idemflow).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { decide, fingerprint, IdemflowError, RuleSet, validateEvent, verifyRuleSet } from 'idemflow';

const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
const readme = fileURLToPath(new URL('../../../README.md', import.meta.url));
const installed = fileURLToPath(new URL('../node_modules/idemflow/', import.meta.url));
// The CLI's table of an unverified draft; not an entry point, so loaded by its path.
const { draftTable } = createRequire(import.meta.url)(join(installed, 'core', 'decide.cjs'));

function idemflow(args, input) {
  const run = spawnSync(bin, args, { input, encoding: 'utf8' });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

function tempFile(name, content) {
  const path = join(mkdtempSync(join(tmpdir(), 'idemflow-cli-')), name);
  writeFileSync(path, content);
  return path;
}

test('rules table prints the built-in decision table as Markdown', () => {
  const { code, stdout } = idemflow(['rules', 'table', 'deposit-swap']);
  assert.equal(code, 0);
  assert.equal(stdout, RuleSet.builtin('deposit-swap').tableMarkdown());
  assert.match(stdout, /^Rule set `deposit-swap` v4 /);
  // Before the exchange a confirmation that covers expectedUnits starts it, and records the deposit it acts on.
  assert.match(
    stdout,
    /\| DEPOSIT_CONFIRMED \| waiting \| amountUnits \| sequence > recorded sequence and amountUnits >= recorded expectedUnits \| applied → exchange; records depositRef, amountUnits, sequence; emits START_EXCHANGE `start-exchange:\{workflowId\}` \|\n/,
  );
  // A decision list takes a line per case, so no line holds a whole rule.
  assert.match(stdout, /\n\| \| \| \| sequence = recorded sequence \| already-applied \|\n/);
  const longest = Math.max(...stdout.split('\n').map((line) => line.length));
  assert.ok(longest < 300, `the longest line has ${longest} characters`);
});

test('rules table --json prints the rows of a rule set from a file', () => {
  const file = tempFile('order.json', JSON.stringify(RuleSet.builtin('order-shipment').definition()));
  const { code, stdout } = idemflow(['rules', 'table', file, '--json']);
  assert.equal(code, 0);
  assert.deepEqual(JSON.parse(stdout), RuleSet.builtin('order-shipment').table());
});

test('docs/rulesets.md shows the deposit-swap tables exactly as the rule sets define them', () => {
  const text = readFileSync(fileURLToPath(new URL('../../../docs/rulesets.md', import.meta.url)), 'utf8');
  const shownBetween = (marker) => {
    const begin = text.indexOf(`<!-- ${marker}: begin -->`);
    const end = text.indexOf(`<!-- ${marker}: end -->`);
    assert.ok(begin >= 0 && end > begin, `docs/rulesets.md has the ${marker} markers`);
    return text.slice(begin, end).split('\n').slice(1).join('\n').trim();
  };
  assert.equal(shownBetween('deposit-swap v2 table'), RuleSet.builtin('deposit-swap', { version: 2 }).tableMarkdown().trim());
  assert.equal(shownBetween('deposit-swap v3 table'), RuleSet.builtin('deposit-swap', { version: 3 }).tableMarkdown().trim());
  assert.equal(shownBetween('deposit-swap v4 table'), RuleSet.builtin('deposit-swap').tableMarkdown().trim(), 'v4, the default');
});

test('rules verify reports every property and exits 0 for a sound rule set', () => {
  // order-shipment: quick to prove (rules prove in proof-record.test.mjs runs the CLI over a deposit-swap copy).
  const definition = {
    ...RuleSet.builtin('order-shipment').definition(),
    invariants: [{ name: 'one-shipment', atMost: { operation: 'CREATE_SHIPMENT', count: 1 } }],
  };
  const file = tempFile('shipment.json', JSON.stringify(definition));
  const { code, stdout } = idemflow(['rules', 'verify', file]);
  assert.equal(code, 0);
  const properties = verifyRuleSet(definition).properties.length;
  assert.equal((stdout.match(/^pass /gm) ?? []).length, properties);
  assert.match(stdout, /all properties hold/);
});

test('rules verify prints the counterexample and exits 1 when a property fails', () => {
  const definition = RuleSet.builtin('order-shipment').definition();
  definition.statuses[0].terminal = false;
  definition.rules[1] = {
    on: 'SHIPMENT_REQUESTED',
    in: 'shipping',
    then: { outcome: 'applied', to: 'shipping', emit: [{ type: 'CREATE_SHIPMENT', id: 'create-shipment:{workflowId}' }] },
  };
  const { code, stdout } = idemflow(['rules', 'verify', tempFile('bad.json', JSON.stringify(definition))]);
  assert.equal(code, 1);
  assert.match(stdout, /FAIL {2}operation-ids-unique/);
  assert.match(stdout, /SHIPMENT_REQUESTED: \(none\) -> shipping/);
  assert.match(stdout, /SHIPMENT_REQUESTED: shipping -> shipping/);
  assert.match(stdout, /verification failed/);
});

test('rules verify exits 2 with the path when the definition is malformed', () => {
  const { code, stderr } = idemflow(['rules', 'verify', tempFile('x.json', '{"id":"x","version":1,"statuses":[],"events":[],"rules":[]}')]);
  assert.equal(code, 2);
  assert.match(stderr, /^idemflow: RULESET_INVALID: \$\.statuses/);
});

/** order-shipment with a rule that emits its operation a second time: well-formed, fails operation-ids-unique. */
function unsoundDraft() {
  const definition = RuleSet.builtin('order-shipment').definition();
  definition.statuses[0].terminal = false;
  definition.rules[1] = {
    on: 'SHIPMENT_REQUESTED',
    in: 'shipping',
    then: { outcome: 'applied', to: 'shipping', emit: [{ type: 'CREATE_SHIPMENT', id: 'create-shipment:{workflowId}' }] },
  };
  return definition;
}

test('rules table prints the table of a well-formed draft that fails verification, the failing properties under it, and exits 1', () => {
  const { code, stdout, stderr } = idemflow(['rules', 'table', tempFile('draft.json', JSON.stringify(unsoundDraft()))]);
  assert.equal(code, 1, stderr);
  const [table, failures] = stdout.split('\nNOT VERIFIED: ');
  assert.match(table, /^Rule set `order-shipment` v2 \(`sha256:[0-9a-f]{64}`\)\n\n\| Event \| In status \| Guard \| When \| Answer \|/);
  assert.match(
    table,
    /\| SHIPMENT_REQUESTED \| shipping \| {2}\| {2}\| applied → shipping; emits CREATE_SHIPMENT `create-shipment:\{workflowId\}` \|/,
  );
  // The search emits the operation twice too, on the history of two requests.
  assert.match(failures, /^2 of 8 properties fail\n/);
  assert.match(failures, /^FAIL {2}reorder-safe/m);
  assert.match(failures, /emits create-shipment:wf twice/);
  assert.match(failures, /^FAIL {2}operation-ids-unique/m);
  assert.match(failures, /SHIPMENT_REQUESTED: shipping -> shipping/);
  assert.doesNotMatch(failures, /^pass /m);
});

test('rules table --json prints the draft rows on stdout and names the failing properties on stderr', () => {
  const { code, stdout, stderr } = idemflow(['rules', 'table', '--json', tempFile('draft.json', JSON.stringify(unsoundDraft()))]);
  assert.equal(code, 1);
  const rows = JSON.parse(stdout);
  assert.deepEqual(
    rows.find((r) => r.rule === 'rules[1]'),
    {
      event: 'SHIPMENT_REQUESTED',
      statuses: ['shipping'],
      guard: [],
      rule: 'rules[1]',
      answer: {
        outcome: 'applied',
        to: 'shipping',
        record: [],
        clear: [],
        emit: [{ type: 'CREATE_SHIPMENT', id: 'create-shipment:{workflowId}', payload: [], recurring: false }],
        revisionStep: 1,
      },
      summary: 'applied → shipping; emits CREATE_SHIPMENT `create-shipment:{workflowId}`',
    },
  );
  assert.equal(stderr, "idemflow: not verified, failing: operation-ids-unique, reorder-safe (see 'idemflow rules verify')\n");
});

test('rules table still exits 2 for a malformed definition', () => {
  const definition = unsoundDraft();
  definition.rules[1].then.to = 'shiping';
  const { code, stdout, stderr } = idemflow(['rules', 'table', tempFile('bad.json', JSON.stringify(definition))]);
  assert.equal(code, 2);
  assert.equal(stdout, '');
  assert.equal(stderr, 'idemflow: RULESET_INVALID: $.rules[1].then.to: "shiping" is not a declared status\n');
});

test('a draft table shows a pair two rules claim, and a pair no rule answers, as written', () => {
  const definition = RuleSet.builtin('order-shipment').definition();
  delete definition.otherwise;
  definition.rules.push({ on: '*', in: 'shipping', then: { outcome: 'stale' } });
  const { rows } = draftTable(definition);
  const shipping = rows.filter((r) => r.event === 'SHIPMENT_REQUESTED' && r.statuses.includes('shipping'));
  assert.deepEqual(
    shipping.map((r) => r.rule),
    ['rules[1]', `rules[${definition.rules.length - 1}]`],
  );
});

test('the draft table is the core table for every built-in rule set at every version', () => {
  for (const [name, versions] of [
    ['deposit-swap', [1, 2, 3]],
    ['order-shipment', [1, 2]],
    ['subscription', [1, 2]],
  ]) {
    for (const version of versions) {
      const ruleSet = RuleSet.builtin(name, { version });
      const draft = draftTable(ruleSet.definition());
      assert.deepEqual(draft.ruleSet, { id: name, version, hash: ruleSet.hash }, `${name} v${version}`);
      assert.deepEqual(draft.rows, ruleSet.table(), `${name} v${version} rows`);
      assert.equal(draft.markdown, ruleSet.tableMarkdown(), `${name} v${version} Markdown`);
    }
  }
});

test('error messages say each thing once: the code is not restated in words, the path appears once', () => {
  const errors = [];
  const capture = (fn) => {
    try {
      fn();
    } catch (error) {
      assert.ok(error instanceof IdemflowError, String(error));
      errors.push(error);
    }
  };
  const badTarget = unsoundDraft();
  badTarget.rules[1].then.to = 'aproved';
  capture(() => RuleSet.fromJSON(badTarget));
  capture(() => RuleSet.fromJSON(unsoundDraft()));
  capture(() => RuleSet.builtin('no-such-rules'));
  capture(() => validateEvent({ eventId: '', workflowId: 'w', type: 'DEPOSIT_DETECTED' }));
  capture(() =>
    decide({
      event: { eventId: 'e', workflowId: 'w', type: 'DEADLINE_PASSED' },
      workflow: { id: 'other', status: 'waiting', revision: 1 },
    }),
  );
  assert.deepEqual(
    errors.map((e) => e.code),
    ['RULESET_INVALID', 'RULESET_INVALID', 'INVALID_ARGUMENT', 'INVALID_EVENT', 'INVALID_ARGUMENT'],
  );
  const squash = (text) => text.toLowerCase().replace(/[\s_]/g, '');
  for (const error of errors) {
    assert.ok(!squash(error.message).includes(squash(error.code)), `${error.code}: ${error.message}`);
    if (error.details.path) assert.equal(error.message.split(error.details.path).length, 2, error.message);
  }
  assert.equal(errors[0].message, '$.rules[1].then.to: "aproved" is not a declared status');

  const { stderr } = idemflow(['rules', 'verify', tempFile('typo.json', JSON.stringify(badTarget))]);
  assert.equal(stderr, 'idemflow: RULESET_INVALID: $.rules[1].then.to: "aproved" is not a declared status\n');
  const line = idemflow(['fingerprint'], '{"eventId":"","workflowId":"w","type":"DEADLINE_PASSED"}\n').stderr.split('\n')[0];
  assert.equal(line, 'line 1: INVALID_EVENT: eventId must not be empty');
});

test('fingerprint reads NDJSON and writes one line per input line', () => {
  const events = [
    { eventId: 'a', workflowId: 'swap-1', type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '5', sequence: 1 },
    { eventId: 'b', workflowId: 'swap-2', type: 'DEADLINE_PASSED' },
  ];
  const { code, stdout, stderr } = idemflow(['fingerprint'], `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
  assert.equal(code, 0, stderr);
  assert.deepEqual(stdout.split('\n'), [fingerprint(events[0]), fingerprint(events[1]), '']);
});

test('fingerprint keeps line alignment and exits 1 when a line is invalid', () => {
  const input = [
    '{"eventId":"a","workflowId":"o-1","type":"SHIPMENT_REQUESTED"}',
    'not json',
    '{"eventId":"","workflowId":"o","type":"SHIPMENT_REQUESTED"}',
    '',
  ].join('\n');
  const { code, stdout, stderr } = idemflow(['fingerprint', '--rules', 'order-shipment'], input);
  assert.equal(code, 1);
  const lines = stdout.split('\n');
  assert.match(lines[0], /^fp1:[0-9a-f]{64}$/);
  assert.deepEqual(lines.slice(1), ['', '', '']);
  assert.match(stderr, /line 2: not JSON/);
  assert.match(stderr, /line 3: INVALID_EVENT/);
});

test('fingerprint says on stderr that a line is blank, keeps the alignment and exits 1', () => {
  const event = { eventId: 'a', workflowId: 'swap-1', type: 'DEADLINE_PASSED' };
  const { code, stdout, stderr } = idemflow(['fingerprint'], `${JSON.stringify(event)}\n\n  \n${JSON.stringify(event)}\n`);
  assert.equal(code, 1);
  assert.deepEqual(stdout.split('\n'), [fingerprint(event), '', '', fingerprint(event), '']);
  assert.equal(stderr, 'line 2: blank line, no event\nline 3: blank line, no event\n2 of 4 lines could not be fingerprinted\n');
});

test('--version and version print the package version', () => {
  const { version } = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
  for (const args of [['--version'], ['version']]) {
    const { code, stdout, stderr } = idemflow(args);
    assert.equal(code, 0, stderr);
    assert.equal(stdout, `${version}\n`);
  }
});

test('a usage error is one line and a hint, not the whole usage text, and exits 2', () => {
  const cases = [
    [[], 'no command given'],
    [['rules'], "rules needs 'table', 'verify', 'prove', 'graph' or 'simulate'"],
    [['rules', 'prove'], 'rules prove takes one rule set file'],
    [['rules', 'table'], 'rules table takes one rule set'],
    [['rules', 'frob', 'x'], 'unknown command: rules frob'],
    [['frobnicate', '--now'], 'unknown command: frobnicate'],
    [['rules', 'table', '/no/such/file.json'], 'cannot read /no/such/file.json: no such file'],
    [['rules', 'table', 'deposit-swap', '--csv'], 'unknown option --csv'],
    [['--version', 'x'], '--version takes no arguments'],
  ];
  for (const [args, message] of cases) {
    const { code, stdout, stderr } = idemflow(args);
    assert.equal(code, 2, args.join(' '));
    assert.equal(stdout, '');
    assert.equal(stderr, `idemflow: ${message}\nrun 'idemflow help' for usage\n`, args.join(' '));
  }
  const help = idemflow(['help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^usage:\n/);
  assert.match(help.stdout, /idemflow --version/);
});

test('the README quick start runs as written and prints what its comments say', () => {
  const text = readFileSync(readme, 'utf8');
  const block = /<!-- quick start: begin -->\n```js\n([\s\S]*?)```\n<!-- quick start: end -->/.exec(text);
  assert.ok(block, 'README has the quick start block');
  const file = fileURLToPath(new URL('../quick-start.tmp.mjs', import.meta.url));
  writeFileSync(file, block[1]);
  const run = spawnSync(process.execPath, [file], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const promised = [...block[1].matchAll(/^ {2}(?:confirmation|\{).*\/\/ (.+)$/gm)].map((m) => m[1]);
  assert.equal(promised.length, 6);
  assert.deepEqual(run.stdout.trim().split('\n'), promised);
});

/** Holds numbered by version whose change forgets the new quantity (a bug planted for issue 31). */
const FORGETFUL_HOLDS = {
  id: 'holds',
  version: 1,
  statuses: [
    {
      name: 'open',
      initial: true,
    },
    {
      name: 'held',
    },
    {
      name: 'released',
    },
  ],
  fields: [
    {
      name: 'version',
      kind: 'count',
    },
    {
      name: 'quantityUnits',
      kind: 'units',
    },
  ],
  events: [
    {
      type: 'HOLD_SET',
      fields: ['version', 'quantityUnits'],
    },
    {
      type: 'HOLD_RELEASED',
      fields: ['version'],
    },
  ],
  order: {
    sequence: {
      field: 'version',
      events: ['HOLD_SET', 'HOLD_RELEASED'],
    },
  },
  rules: [
    {
      on: '*',
      in: '(none)',
      then: {
        error: 'UNKNOWN_WORKFLOW',
        disposition: 'retry',
      },
    },
    {
      on: 'HOLD_SET',
      in: ['open', 'released'],
      newer: 'version',
      then: {
        outcome: 'applied',
        to: 'held',
        record: ['version', 'quantityUnits'],
      },
    },
    {
      on: 'HOLD_SET',
      in: 'held',
      newer: 'version',
      then: {
        outcome: 'applied',
        record: ['version'],
      },
    },
    {
      on: 'HOLD_RELEASED',
      in: ['open', 'held'],
      newer: 'version',
      then: {
        outcome: 'applied',
        to: 'released',
        record: ['version'],
        clear: ['quantityUnits'],
      },
    },
    {
      on: 'HOLD_RELEASED',
      in: 'released',
      newer: 'version',
      then: {
        outcome: 'applied',
        record: ['version'],
      },
    },
  ],
};

test('rules verify names the fields in which two orders end apart, the rule to change, and exits 1', () => {
  const { code, stdout } = idemflow(['rules', 'verify', tempFile('holds.json', JSON.stringify(FORGETFUL_HOLDS))]);
  assert.equal(code, 1, stdout);
  assert.match(stdout, /FAIL {2}reorder-safe/);
  assert.match(stdout, /explored: every history of one fact with up to 4 observations/);
  assert.match(stdout, /end apart in: .*data\.quantityUnits "1\d" vs "1\d"/);
  assert.match(stdout, /fix: make rules\[\d\]/);
});

test('rules verify shows the order that breaks an invariant, and a claim on amounts under an order section is proven', () => {
  const definition = structuredClone(FORGETFUL_HOLDS);
  definition.rules[2].then.record = ['version', 'quantityUnits'];
  definition.invariants = [{ name: 'never-released-twice', never: { reach: 'released', after: 'HOLD_RELEASED' } }];
  const { code, stdout } = idemflow(['rules', 'verify', tempFile('holds-invariant.json', JSON.stringify(definition))]);
  assert.equal(code, 1, stdout);
  assert.match(stdout, /FAIL {2}invariants/);
  assert.match(stdout, /breaks invariant never-released-twice: "released" is never entered once HOLD_RELEASED was applied/);
  assert.match(stdout, /fix: the last delivery broke it: change rules\[\d\]/);
  assert.match(stdout, /pass {2}reorder-safe/);
});
