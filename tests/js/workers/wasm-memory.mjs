// The size of the package's wasm linear memory, for tests that pin that
// rejected (and accepted) calls do not make it grow. It is a diagnostic, not
// part of the public API: read from the module the package loads.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const root = process.env.IDEMFLOW_PKG ?? path.dirname(require.resolve('idemflow/package.json'));
const { bindings } = require(path.join(root, 'core', 'wasm.cjs'));

/** Bytes of wasm linear memory (it only ever grows). */
export function wasmMemoryBytes() {
  return bindings.wasmMemory().buffer.byteLength;
}
