// Time to first decision in a fresh Node process: load the package, take the
// built-in deposit-swap rule set, decide one event. Prints milliseconds since
// the process started (performance.now()), for each step.
//
//   node scripts/first-decision.cjs [path to the package, default ./pkg] [runs]
// With runs > 1 it starts that many fresh processes and prints the median.
'use strict';
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const pkg = path.resolve(process.argv[2] ?? 'pkg');
const runs = Number(process.argv[3] ?? 1);

if (runs > 1) {
  const samples = [];
  for (let i = 0; i < runs; i += 1) {
    samples.push(JSON.parse(execFileSync(process.execPath, [__filename, pkg, '1', '--json'], { encoding: 'utf8' })));
  }
  const median = (key) => samples.map((s) => s[key]).sort((a, b) => a - b)[Math.floor(samples.length / 2)];
  const least = (key) => Math.min(...samples.map((s) => s[key]));
  for (const s of samples) s.afterLoad = s.decided - s.loaded;
  console.log(`median of ${runs} fresh processes (ms since process start):`,
    `loaded ${median('loaded').toFixed(1)}, rule set ${median('ruleSet').toFixed(1)}, first decision ${median('decided').toFixed(1)};`,
    `from loaded to first decision ${median('afterLoad').toFixed(1)}`,
    `(fastest: first decision ${least('decided').toFixed(1)}, from loaded ${least('afterLoad').toFixed(1)})`);
  return;
}

const times = {};
// A trailing separator: the directory's package, not a pkg.json beside it.
const { RuleSet, decide } = require(pkg + path.sep);
times.loaded = performance.now();
const ruleSet = RuleSet.builtin('deposit-swap');
times.ruleSet = performance.now();
const decision = decide({
  event: { eventId: 'chain-watcher:event-001', workflowId: 'swap-42', type: 'DEPOSIT_CONFIRMED',
           depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000' },
  receipt: null,
  workflow: { id: 'swap-42', status: 'deposit', revision: 3,
              depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000' },
  ruleSet,
});
times.decided = performance.now();
if (decision.outcome !== 'applied') throw new Error(`unexpected outcome ${decision.outcome}`);
if (process.argv.includes('--json')) console.log(JSON.stringify(times));
else console.log(`ms since process start: loaded ${times.loaded.toFixed(1)}, rule set ${times.ruleSet.toFixed(1)}, first decision ${times.decided.toFixed(1)}`);
