// What a worker pays to start: the size of the wasm it loads (raw and gzip)
// and the time from `require('idemflow')` to its first decision in a fresh
// process (median of fresh processes, split into loading the package and the
// first decision), beside the start of a bare Node process measured in the
// same run. The figures also go to target/bench.json (key "startup").
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import zlib from 'node:zlib';

import { writeBenchJson } from '../workers/backends.mjs';

const require = createRequire(import.meta.url);
const RUNS = Number(process.env.IDEMFLOW_BENCH_STARTS ?? 9);
const root = path.dirname(require.resolve('idemflow/package.json'));
const wasm = fs.readFileSync(path.join(root, 'wasm', 'idemflow_bg.wasm'));
const gzip = zlib.gzipSync(wasm, { level: 9 }).length;

// The first decision: a swap in deposit as deposit-swap v3 keeps it (the watcher's detection, observation 1, only in
// the deposits map) takes its confirmation (2) and starts the exchange.
const child = `
const t0 = performance.now();
const idemflow = require('idemflow');
const t1 = performance.now();
idemflow.decide({ event: { eventId: 'e-1', workflowId: 'swap-1', type: 'DEPOSIT_CONFIRMED', depositRef: 'ref-a', amountUnits: '100', sequence: 2 },
  receipt: null, workflow: { id: 'swap-1', status: 'deposit', revision: 1, deposits: { 'ref-a': { event: 'DEPOSIT_DETECTED', amountUnits: '100', sequence: 1 } } } });
const t2 = performance.now();
process.stdout.write(JSON.stringify({ load: t1 - t0, first: t2 - t1 }));`;

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const starts = [];
const bare = [];
for (let i = 0; i < RUNS; i += 1) {
  let t = performance.now();
  execFileSync(process.execPath, ['-e', ''], { cwd: process.cwd() });
  bare.push(performance.now() - t);
  t = performance.now();
  const figures = JSON.parse(execFileSync(process.execPath, ['-e', child], { cwd: process.cwd(), encoding: 'utf8' }));
  starts.push({ ...figures, process: performance.now() - t });
}
const load = median(starts.map((s) => s.load));
const first = median(starts.map((s) => s.first));
const total = median(starts.map((s) => s.load + s.first));
const processMs = median(starts.map((s) => s.process));
const bareMs = median(bare);
const kb = (n) => `${(n / 1000).toFixed(0)} KB`;
console.log(`startup, median of ${RUNS} fresh processes (node ${process.version})`);
console.log(`  wasm                          ${kb(wasm.length)} raw, ${kb(gzip)} gzip -9   (goal: 350 KB, 140 KB)`);
console.log(`  require('idemflow')           ${load.toFixed(1)} ms`);
console.log(`  first decision                ${first.toFixed(1)} ms`);
console.log(`  require to first decision     ${total.toFixed(1)} ms   (goal: 40 ms)`);
console.log(
  `  whole process                 ${processMs.toFixed(1)} ms   bare node ${bareMs.toFixed(1)} ms   (${(processMs / bareMs).toFixed(2)}x bare node)`,
);
writeBenchJson('startup', {
  wasmBytes: wasm.length,
  wasmGzipBytes: gzip,
  requireMs: Number(load.toFixed(1)),
  firstDecisionMs: Number(first.toFixed(1)),
  requireToFirstDecisionMs: Number(total.toFixed(1)),
  processMs: Number(processMs.toFixed(1)),
  bareNodeMs: Number(bareMs.toFixed(1)),
});
