'use strict';
// Lists every name a module of the package exports that no other module of the
// package uses: `make lint` fails on any. The entry points that package.json
// exports are the public surface, so their names count as used; every other
// module's export must be read by another file, through one of the ways the
// package's CommonJS reads a module:
//   const { name, other: alias } = require('./file.cjs');
//   const file = require('./file.cjs'); … file.name …
//   require('./file.cjs').name
// Usage: node scripts/unused-exports.cjs [repo root]
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(process.argv[2] ?? '.');
const js = path.join(root, 'js');

/** Every .cjs file under js/, the examples aside (they import the package by name). */
function sources(dir = js) {
  const files = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (full !== path.join(js, 'examples')) files.push(...sources(full));
    } else if (entry.name.endsWith('.cjs')) {
      files.push(full);
    }
  }
  return files;
}

/** The files package.json's `exports` and `bin` name, as paths under js/. */
function entryPoints() {
  const manifest = JSON.parse(fs.readFileSync(path.join(root, 'pkg.json'), 'utf8'));
  const targets = [];
  const walk = (value) => {
    if (typeof value === 'string') targets.push(value);
    else if (value !== null && typeof value === 'object') Object.values(value).forEach(walk);
  };
  walk(manifest.exports);
  walk(manifest.bin);
  return new Set(targets.filter((target) => target.endsWith('.cjs')).map((target) => path.join(js, target)));
}

/** The names of `module.exports = { a, b: c, … }` (the package's one way to export). */
function exportedNames(text) {
  const match = /module\.exports\s*=\s*\{([^}]*)\}/.exec(text);
  if (!match) return [];
  return match[1]
    .split(',')
    .map((part) => part.trim().split(':')[0].trim())
    .filter((name) => /^[A-Za-z_$][\w$]*$/.test(name));
}

/** The names `text` reads from the module at `target`, required from `from`. */
function namesRead(text, from, target) {
  const read = new Set();
  const pointsAt = (specifier) => specifier.startsWith('.') && path.resolve(path.dirname(from), specifier) === target;
  for (const m of text.matchAll(/const\s*\{([^}]*)\}\s*=\s*require\(\s*'([^']+)'\s*\)/g)) {
    if (!pointsAt(m[2])) continue;
    for (const part of m[1].split(',')) {
      const name = part.trim().split(':')[0].trim();
      if (name) read.add(name);
    }
  }
  for (const m of text.matchAll(/const\s+([A-Za-z_$][\w$]*)\s*=\s*require\(\s*'([^']+)'\s*\)\s*;/g)) {
    if (!pointsAt(m[2])) continue;
    for (const use of text.matchAll(new RegExp(`\\b${m[1].replace(/\$/g, '\\$')}\\.([A-Za-z_$][\\w$]*)`, 'g'))) read.add(use[1]);
  }
  for (const m of text.matchAll(/require\(\s*'([^']+)'\s*\)\.([A-Za-z_$][\w$]*)/g)) {
    if (pointsAt(m[1])) read.add(m[2]);
  }
  return read;
}

/**
 * Exports the package's tests read through a module's path (a seam no user
 * reaches): each with the test that reads it.
 */
const TEST_SEAMS = new Set([
  // tests/js/test/hostile-rulesets.test.mjs: a definition is proven once per process.
  'js/core/rules.cjs: proofStats',
]);

function unusedExports() {
  const files = sources();
  const texts = new Map(files.map((file) => [file, fs.readFileSync(file, 'utf8')]));
  const entries = entryPoints();
  const unused = [];
  for (const file of files) {
    if (entries.has(file)) continue;
    const used = new Set();
    for (const [other, text] of texts) {
      if (other !== file) for (const name of namesRead(text, other, file)) used.add(name);
    }
    for (const name of exportedNames(texts.get(file))) {
      const entry = `${path.relative(root, file)}: ${name}`;
      if (!used.has(name) && !TEST_SEAMS.has(entry)) unused.push(entry);
    }
  }
  return unused;
}

if (require.main === module) {
  const unused = unusedExports();
  if (unused.length > 0) {
    console.error(`exported but used by no other module of the package (${unused.length}):\n  ${unused.join('\n  ')}`);
    process.exit(1);
  }
  console.log('unused exports: none');
}

module.exports = { unusedExports };
