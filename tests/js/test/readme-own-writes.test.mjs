// The README's "Your own writes" block, as written (its TypeScript
// transpiled by the test project's typescript, nothing else changed), run on
// a SQLite file: every outcome answers without throwing: applied answers the
// new shipment, a redelivery the same one with no second row, a second
// message for the order (already-applied) null, and nothing more is shipped.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const readme = readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8');

test("the README's own-writes block handles every outcome: applied, a redelivery, already-applied", () => {
  const section = readme.slice(readme.indexOf('\n## Your own writes\n'));
  const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block?.includes('onShipmentRequested'), 'the section has its block');
  const { outputText } = ts.transpileModule(block, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } });
  const driver = `
const first = await onShipmentRequested({ id: 'm1', orderId: 'o1' });
const again = await onShipmentRequested({ id: 'm1', orderId: 'o1' });
const other = await onShipmentRequested({ id: 'm2', orderId: 'o1' });
const replay = await store.process({ eventId: 'm2', workflowId: 'o1', type: 'SHIPMENT_REQUESTED' }, { ruleSet: RuleSet.builtin('order-shipment') });
const outcome = replay.original?.outcome;
const rows = db.prepare('SELECT COUNT(*) AS n FROM shipments').get().n;
process.stdout.write(JSON.stringify({ first, again, other, outcome, rows }));
`;
  // In the test project, so 'idemflow' and better-sqlite3 resolve as they do for a user; orders.db in a directory of its own.
  const file = fileURLToPath(new URL('../readme-own-writes.tmp.mjs', import.meta.url));
  const cwd = mkdtempSync(join(tmpdir(), 'idemflow-readme-'));
  writeFileSync(file, outputText + driver);
  try {
    const run = spawnSync(process.execPath, [file], { cwd, encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    const seen = JSON.parse(run.stdout);
    assert.equal(typeof seen.first, 'number');
    assert.equal(seen.again, seen.first, 'a redelivery answers the same shipment');
    assert.equal(seen.other, null, 'a second message for a shipped order answers none');
    assert.equal(seen.outcome, 'already-applied', 'the second message was already-applied');
    assert.equal(seen.rows, 1, 'one shipment');
  } finally {
    rmSync(file, { force: true });
    rmSync(cwd, { recursive: true, force: true });
  }
});
