// What a user receives from npm: the files in the tarball, the manifest, the
// entry points (the same names from require and import) and the README's
// TypeScript, checked against the installed package.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { RuleSet, verifyRuleSet } from 'idemflow';

const require = createRequire(import.meta.url);
const testProject = fileURLToPath(new URL('..', import.meta.url));
const repository = fileURLToPath(new URL('../../..', import.meta.url));
const installed = join(testProject, 'node_modules', 'idemflow');
const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
const readme = readFileSync(join(repository, 'README.md'), 'utf8');

/** The README section under `## <title>`, up to the next `## ` heading. */
function section(title) {
  const start = readme.indexOf(`\n## ${title}\n`);
  assert.ok(start >= 0, `README has a "${title}" section`);
  const end = readme.indexOf('\n## ', start + 1);
  return readme.slice(start, end < 0 ? undefined : end);
}

test('the installed package carries a file for each license the manifest names, as in the repository', () => {
  const files = new Set(readdirSync(installed));
  const licenseFiles = { MIT: 'LICENSE-MIT', 'Apache-2.0': 'LICENSE-APACHE' };
  const named = manifest.license.split(' OR ');
  assert.deepEqual(named, ['MIT', 'Apache-2.0']);
  for (const spdx of named) {
    const file = licenseFiles[spdx];
    assert.ok(files.has(file), `${file} is in the tarball (files: ${[...files].sort().join(', ')})`);
    assert.equal(readFileSync(join(installed, file), 'utf8'), readFileSync(join(repository, file), 'utf8'), file);
  }
  const mit = readFileSync(join(installed, 'LICENSE-MIT'), 'utf8');
  assert.match(mit, /^MIT License\n\nCopyright \(c\) the idemflow authors\n/);
  assert.match(mit, /THE SOFTWARE IS PROVIDED "AS IS"/);
  const apache = readFileSync(join(installed, 'LICENSE-APACHE'), 'utf8');
  assert.match(apache, /Apache License\s+Version 2\.0, January 2004/);
  assert.match(apache, /END OF TERMS AND CONDITIONS/);
});

test('the installed package carries the changelog, which starts with an Unreleased section', () => {
  const changelog = readFileSync(join(installed, 'CHANGELOG.md'), 'utf8');
  assert.equal(changelog, readFileSync(join(repository, 'CHANGELOG.md'), 'utf8'));
  const headings = [...changelog.matchAll(/^## (.+)$/gm)].map((m) => m[1]);
  assert.equal(headings[0], 'Unreleased');
});

test('the manifest names the repository, its homepage and its issue tracker', () => {
  const { repository: repo, homepage, bugs } = manifest;
  assert.equal(repo?.type, 'git');
  const base = /^git\+(https:\/\/github\.com\/[\w.-]+\/[\w.-]+)\.git$/.exec(repo?.url ?? '')?.[1];
  assert.ok(base, `repository.url is a git URL: ${repo?.url}`);
  assert.equal(homepage, `${base}#readme`);
  assert.equal(bugs?.url, `${base}/issues`);
});

test('the better-sqlite3 peer range is the major version that is tested and documented', () => {
  const tested = JSON.parse(readFileSync(require.resolve('better-sqlite3/package.json'), 'utf8')).version;
  const major = tested.split('.')[0];
  assert.equal(manifest.peerDependencies['better-sqlite3'], `^${major}`);
  const devRange = JSON.parse(readFileSync(join(testProject, 'package.json'), 'utf8')).devDependencies['better-sqlite3'];
  assert.match(devRange, new RegExp(`^\\^${major}\\.`), 'the test project installs the same major');
  assert.match(section('Storage adapters'), new RegExp(`better-sqlite3 ${major} `), 'the README names the same major');
  const adapters = readFileSync(join(repository, 'docs', 'adapters.md'), 'utf8');
  assert.match(adapters, new RegExp(`\`better-sqlite3\` ${major}\\.x`), 'docs/adapters.md names the same major');
});

test('every entry point exports the same names, bound to the same objects, from require and import', async () => {
  const entries = Object.keys(manifest.exports).filter((key) => key !== './package.json');
  assert.deepEqual(entries, [
    '.',
    './sqlite',
    './postgres',
    './mysql',
    './mongodb',
    './redis',
    './kafka',
    './express',
    './fastify',
    './drizzle',
    './kysely',
    './knex',
    './typeorm',
    './prisma',
    './testing',
  ]);
  for (const entry of entries) {
    const specifier = entry === '.' ? 'idemflow' : `idemflow/${entry.slice(2)}`;
    const commonjs = require(specifier);
    const esm = await import(specifier);
    const esmNames = Object.keys(esm)
      .filter((name) => name !== 'default')
      .sort();
    assert.deepEqual(esmNames, Object.keys(commonjs).sort(), `${specifier}: import and require export the same names`);
    for (const name of esmNames) assert.equal(esm[name], commonjs[name], `${specifier}: ${name} is the same object`);
    assert.equal(esm.default, commonjs, `${specifier}: the default export is the CommonJS module`);
  }
});

test('every block marked ts in the README and docs/ compiles under strict tsc against the installed package', () => {
  const pages = [
    readme,
    ...readdirSync(join(repository, 'docs'))
      .filter((name) => name.endsWith('.md'))
      .map((name) => readFileSync(join(repository, 'docs', name), 'utf8')),
  ];
  const blocks = pages.flatMap((page) => [...page.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]));
  assert.ok(blocks.length >= 3, `the README and docs have TypeScript blocks (found ${blocks.length})`);
  assert.ok(
    blocks.some((b) => /result\.operationId/.test(b)),
    'one of them shows what operationId is',
  );
  // Inside the test project, so 'idemflow' and the drivers resolve as they do for a user.
  const dir = join(testProject, 'readme-ts.tmp');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  try {
    blocks.forEach((block, i) => writeFileSync(join(dir, `block-${i + 1}.mts`), block));
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ extends: '../tsconfig.json', include: ['*.mts'] }));
    const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json')], {
      encoding: 'utf8',
    });
    assert.equal(tsc.status, 0, `tsc found errors in the README's and docs' blocks:\n${tsc.stdout}${tsc.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('docs/rulesets.md explains every flag a status can carry, initial among them', () => {
  const base = RuleSet.builtin('order-shipment').definition();
  base.statuses[0].bogus = true;
  let reason;
  try {
    verifyRuleSet(base);
  } catch (error) {
    reason = error.details.reason;
  }
  const known = /known: ([^)]*)\)/.exec(reason ?? '')?.[1]?.split(', ');
  assert.ok(known, `the loader lists the known status keys: ${reason}`);
  const flags = known.filter((key) => !['name', 'description'].includes(key));
  assert.ok(flags.includes('initial'));
  const rulesets = readFileSync(join(repository, 'docs', 'rulesets.md'), 'utf8');
  const bullets = rulesets.slice(0, rulesets.indexOf('\n## ')).split('\n- ').slice(1);
  for (const flag of flags) {
    assert.ok(
      bullets.some((b) => b.includes(`\`${flag}\``)),
      `a bullet of docs/rulesets.md explains \`${flag}\``,
    );
  }
  const initial = bullets.find((b) => b.includes('`initial`')).replace(/\s+/g, ' ');
  assert.match(initial, /the host creates/);
  assert.match(initial, /nothing recorded/);
});
