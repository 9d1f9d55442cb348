'use strict';
// Writes pkg/: the package's JS from js/, the README, changelog and licenses,
// and package.json from the pkg.json template with the version taken from
// Cargo.toml.
// Usage: node scripts/assemble-pkg.cjs <repo root> <pkg dir>
const fs = require('node:fs');
const path = require('node:path');

const [root, out] = process.argv.slice(2).map((p) => path.resolve(p));
const cargo = fs.readFileSync(path.join(root, 'Cargo.toml'), 'utf8');
const version = /^version\s*=\s*"([^"]+)"/m.exec(cargo)?.[1];
if (!version) throw new Error('no version in Cargo.toml');

const manifest = JSON.parse(fs.readFileSync(path.join(root, 'pkg.json'), 'utf8'));
manifest.version = version;

const js = path.join(root, 'js');
for (const entry of fs.readdirSync(js, { withFileTypes: true })) {
  if (entry.name === 'examples') continue; // examples are run from the repository, not shipped
  fs.cpSync(path.join(js, entry.name), path.join(out, entry.name), { recursive: true });
}
// Both licenses the manifest names travel with the code, and the changelog with them.
for (const file of ['README.md', 'CHANGELOG.md', 'LICENSE-MIT', 'LICENSE-APACHE']) {
  fs.copyFileSync(path.join(root, file), path.join(out, file));
}
// The core's error codes and default dispositions, for js/core/errors.cjs to
// read without loading the wasm module (and without an import cycle).
const { errorCodes } = require(path.join(out, 'wasm', 'idemflow.js'));
fs.writeFileSync(path.join(out, 'wasm', 'error-codes.json'), `${JSON.stringify(JSON.parse(errorCodes()), null, 2)}\n`);
fs.writeFileSync(path.join(out, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
fs.chmodSync(path.join(out, 'cli', 'idemflow.cjs'), 0o755);
console.log(`pkg/: idemflow ${version}`);
