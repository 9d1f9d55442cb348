// The command-line tool as installed by npm (node_modules/.bin/idemflow).
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RuleSet, fingerprint } from 'idemflow';

const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
const readme = fileURLToPath(new URL('../../../README.md', import.meta.url));

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
  assert.match(stdout, /\| DEPOSIT_CONFIRMED \| deposit \| depositRef, amountUnits \| applied → exchange; emits START_EXCHANGE `start-exchange:\{workflowId\}` \|/);
});

test('rules table --json prints the rows of a rule set from a file', () => {
  const file = tempFile('order.json', JSON.stringify(RuleSet.builtin('order-shipment').definition()));
  const { code, stdout } = idemflow(['rules', 'table', file, '--json']);
  assert.equal(code, 0);
  assert.deepEqual(JSON.parse(stdout), RuleSet.builtin('order-shipment').table());
});

test('the README shows the deposit-swap table exactly as the rule set defines it', () => {
  const text = readFileSync(readme, 'utf8');
  const begin = text.indexOf('<!-- deposit-swap table: begin -->');
  const end = text.indexOf('<!-- deposit-swap table: end -->');
  assert.ok(begin >= 0 && end > begin, 'README has the table markers');
  const shown = text.slice(begin, end).split('\n').slice(1).join('\n').trim();
  assert.equal(shown, RuleSet.builtin('deposit-swap').tableMarkdown().trim());
});

test('rules verify reports every property and exits 0 for a sound rule set', () => {
  const file = tempFile('swap.json', JSON.stringify(RuleSet.builtin('deposit-swap').definition()));
  const { code, stdout } = idemflow(['rules', 'verify', file]);
  assert.equal(code, 0);
  assert.equal((stdout.match(/^pass /gm) ?? []).length, 7);
  assert.match(stdout, /all properties hold/);
});

test('rules verify prints the counterexample and exits 1 when a property fails', () => {
  const definition = RuleSet.builtin('order-shipment').definition();
  definition.statuses[0].terminal = false;
  definition.rules[1] = { on: 'SHIPMENT_REQUESTED', in: 'shipping', then: { outcome: 'applied', to: 'shipping', emit: [{ type: 'CREATE_SHIPMENT', id: 'create-shipment:{workflowId}' }] } };
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
  assert.match(stderr, /RULESET_INVALID at \$\.statuses/);
});

test('fingerprint reads NDJSON and writes one line per input line', () => {
  const events = [
    { eventId: 'a', workflowId: 'swap-1', type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '5' },
    { eventId: 'b', workflowId: 'swap-2', type: 'DEADLINE_PASSED' },
  ];
  const { code, stdout, stderr } = idemflow(['fingerprint'], `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
  assert.equal(code, 0, stderr);
  assert.deepEqual(stdout.split('\n'), [fingerprint(events[0]), fingerprint(events[1]), '']);
});

test('fingerprint keeps line alignment and exits 1 when a line is invalid', () => {
  const input = ['{"eventId":"a","workflowId":"o-1","type":"SHIPMENT_REQUESTED"}', 'not json', '{"eventId":"","workflowId":"o","type":"SHIPMENT_REQUESTED"}', ''].join('\n');
  const { code, stdout, stderr } = idemflow(['fingerprint', '--rules', 'order-shipment'], input);
  assert.equal(code, 1);
  const lines = stdout.split('\n');
  assert.match(lines[0], /^fp1:[0-9a-f]{64}$/);
  assert.deepEqual(lines.slice(1), ['', '', '']);
  assert.match(stderr, /line 2: not JSON/);
  assert.match(stderr, /line 3: INVALID_EVENT/);
});

test('unknown commands and missing arguments print the usage and exit 2', () => {
  for (const args of [[], ['rules'], ['rules', 'table'], ['frobnicate'], ['rules', 'table', '/no/such/file.json']]) {
    const { code, stderr } = idemflow(args);
    assert.equal(code, 2, args.join(' '));
    assert.match(stderr, /usage:/);
  }
  assert.equal(idemflow(['help']).code, 0);
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
