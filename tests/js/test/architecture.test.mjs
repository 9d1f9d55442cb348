// The shape of the package's JavaScript (docs/development.md, "Architecture"): one file
// loads the wasm module, and imports point one way, from the outer folders
// (adapters, outbox, cli) through sql, store and the host cycle to core,
// never back; the type files (.d.ts) too, none of them through the package's barrel.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';

const js = fileURLToPath(new URL('../../../js/', import.meta.url));

/** Every .cjs and .mjs file under js/, examples aside (they import the package by name). */
function sources(dir = js) {
  const files = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (path !== join(js, 'examples')) files.push(...sources(path));
    } else if (/\.(cjs|mjs)$/.test(entry.name)) {
      files.push(path);
    }
  }
  return files;
}

/** The relative specifiers a file requires or imports. */
function specifiers(text) {
  const found = [];
  for (const match of text.matchAll(/(?:require\(\s*|\bfrom\s+|\bimport\(\s*)'(\.{1,2}\/[^']+)'/g)) found.push(match[1]);
  return found;
}

/** The layer of a file: core, host, store, sql, outbox, cli, adapters/<name>, or root (the entry points). */
function layerOf(file) {
  const parts = relative(js, file).split(sep);
  if (parts.length === 1) return 'root';
  return parts[0] === 'adapters' ? `adapters/${parts[1]}` : parts[0];
}

// Which layers each layer may import; an adapter imports no other adapter.
const ALLOWED = {
  core: ['core', 'wasm'],
  host: ['core', 'host'],
  store: ['core', 'host', 'store'],
  sql: ['core', 'host', 'store', 'sql'],
  outbox: ['core', 'outbox'],
  cli: ['core', 'cli', 'root', 'testing'],
  http: ['core', 'host', 'http'],
  // The tools' entry points (Drizzle, Kysely, Knex) wrap onApplied: they build on the host's output check.
  orm: ['core', 'host', 'orm'],
  // Users' test helpers replay histories through the in-memory store.
  testing: ['core', 'host', 'testing', 'adapters/memory'],
};

function allowed(from, to) {
  if (from === 'root') return true;
  if (from.startsWith('adapters/')) return ['core', 'host', 'store', 'sql', from].includes(to);
  // The operator's commands open a store from a URL: the command line is the one shell over every adapter.
  if (from === 'cli' && to.startsWith('adapters/')) return true;
  return (ALLOWED[from] ?? []).includes(to);
}

test('only js/core/wasm.cjs loads the generated wasm module', () => {
  const loaders = sources().filter((file) => /wasm\/idemflow(\.js)?'/.test(readFileSync(file, 'utf8')));
  assert.deepEqual(
    loaders.map((file) => relative(js, file)),
    [join('core', 'wasm.cjs')],
  );
});

test('imports point from adapters, outbox and cli through sql, store and host to core, never back', () => {
  const edges = [];
  for (const file of sources()) {
    for (const specifier of specifiers(readFileSync(file, 'utf8'))) {
      const target = resolve(dirname(file), specifier);
      const to = target.startsWith(join(js, 'wasm')) ? 'wasm' : relative(js, target).startsWith('..') ? 'outside' : layerOf(target);
      edges.push({ file: relative(js, file), specifier, from: layerOf(file), to });
    }
  }
  assert.ok(edges.length > 50, `the import graph was read (${edges.length} edges)`);
  assert.ok(
    edges.some((e) => e.from === 'adapters/postgres' && e.to === 'sql'),
    'an adapter builds on the sql layer',
  );
  const wrong = edges.filter((e) => !allowed(e.from, e.to) && !(e.from === 'cli' && e.specifier === '../package.json'));
  assert.deepEqual(wrong, [], 'imports against the direction of the layers');
});

/** Every .d.ts file under js/ but the package's own index.d.ts (the barrel the package's users import). */
function typeFiles(dir = js) {
  const files = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...typeFiles(path));
    else if (entry.name.endsWith('.d.ts') && path !== join(js, 'index.d.ts')) files.push(path);
  }
  return files;
}

// What a layer's types may name beyond its code's imports: the stores name the outbox's types (the outbox
// store interface every store implements), the outbox the host's ExclusiveLocks (its retention takes them).
const TYPES_ALSO = { store: ['outbox'], adapters: ['outbox'], outbox: ['host'] };

test('type files import their own layer or the layers below it, never the package barrel', () => {
  const edges = [];
  for (const file of typeFiles()) {
    for (const specifier of specifiers(readFileSync(file, 'utf8'))) {
      const target = resolve(dirname(file), specifier);
      edges.push({
        file: relative(js, file),
        specifier,
        from: layerOf(file),
        to: relative(js, target).startsWith('..') ? 'outside' : layerOf(target),
      });
    }
  }
  assert.ok(edges.length > 20, `the type files' imports were read (${edges.length})`);
  const barrel = edges.filter((e) => e.to === 'root');
  assert.deepEqual(barrel, [], "type files that import the package's index.d.ts");
  const also = (from) => TYPES_ALSO[from.startsWith('adapters/') ? 'adapters' : from] ?? [];
  const wrong = edges.filter((e) => e.from !== 'root' && !allowed(e.from, e.to) && !also(e.from).includes(e.to));
  assert.deepEqual(wrong, [], 'type imports against the direction of the layers');
});

/** The first import cycle found among the package's files (lazy requires included), or null. */
function firstCycle(graph) {
  const state = new Map();
  const stack = [];
  const visit = (file) => {
    state.set(file, 'open');
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (state.get(next) === 'open') return [...stack.slice(stack.indexOf(next)), next];
      if (!state.has(next)) {
        const found = visit(next);
        if (found) return found;
      }
    }
    stack.pop();
    state.set(file, 'done');
    return null;
  };
  for (const file of graph.keys()) {
    if (state.has(file)) continue;
    const found = visit(file);
    if (found) return found;
  }
  return null;
}

test('no import cycle among the package files, a lazy require inside a function included', () => {
  const graph = new Map();
  for (const file of sources()) {
    const targets = specifiers(readFileSync(file, 'utf8')).map((specifier) => relative(js, resolve(dirname(file), specifier)));
    graph.set(relative(js, file), targets);
  }
  assert.equal(firstCycle(graph)?.join(' → ') ?? null, null);
  // The check finds what it is there to find.
  assert.deepEqual(
    firstCycle(
      new Map([
        ['a', ['b']],
        ['b', ['c']],
        ['c', ['a']],
      ]),
    ),
    ['a', 'b', 'c', 'a'],
  );
});

test('the layer rule refuses what it is there to refuse', () => {
  assert.equal(allowed('core', 'store'), false);
  assert.equal(allowed('core', 'host'), false);
  assert.equal(allowed('host', 'store'), false);
  assert.equal(allowed('store', 'sql'), false);
  assert.equal(allowed('adapters/sqlite', 'adapters/postgres'), false);
  assert.equal(allowed('outbox', 'store'), false);
  assert.equal(allowed('adapters/sqlite', 'sql'), true);
  assert.equal(allowed('cli', 'adapters/postgres'), true);
  assert.equal(allowed('cli', 'store'), false);
  assert.equal(allowed('adapters/postgres', 'cli'), false);
});
