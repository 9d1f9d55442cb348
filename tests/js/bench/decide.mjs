// The decider against a plain-JavaScript implementation of the same rule
// (deposit-swap DEPOSIT_CONFIRMED: validate, canonical JSON, SHA-256, decide,
// write set), measured side by side in one run: the package's `decide`, the
// decider one event per call (what processEvent calls, without the public
// entry point's option checks), and batches of 16 and 256 per call (what
// processBatch calls). `make bench` runs it and writes its figures into
// target/bench.json (key "decide").
// Each round runs every contender once, in turn; the figures are medians over
// the rounds of each contender's rate and of its ratio to the reference in
// that round (the machine is shared and noisy). Nothing here passes or fails.
//
// Rates are per CPU second of this process (BENCH_CLOCK=wall for elapsed
// time); BENCH_JSON=1 also prints the figures as one JSON line.
// IDEMFLOW_PKG=<dir> measures a built pkg/ directory instead of the installed
// package. The decider is the package's own, from core/wasm.cjs (the one
// module that loads the wasm).
import { deepStrictEqual } from 'node:assert';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';
import { writeBenchJson } from '../workers/backends.mjs';

const require = createRequire(import.meta.url);
const root = process.env.IDEMFLOW_PKG ?? path.dirname(require.resolve('idemflow/package.json'));
const { decider } = require(path.join(root, 'core', 'wasm.cjs'));
const { decide, RuleSet } = process.env.IDEMFLOW_PKG ? require(`${root}/`) : require('idemflow');

const N = Number(process.env.BENCH_EVENTS ?? 16_384);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);
const ruleSet = RuleSet.builtin('deposit-swap');
const compiled = ruleSet.compiled;
const packed = decider();

// Swaps as deposit-swap v3 keeps them: in deposit the watcher's detection (observation 1) is recorded only in the
// deposits map; in exchange the swap has taken the confirmation (2), recorded on the swap (the deposit it acts on) and
// in its entry. No expectedUnits: any amount covers.
const workflows = Array.from({ length: 1024 }, (_, i) => {
  const depositRef = `btc-mainnet:tx-${i.toString(16)}:vout-0`;
  const amountUnits = String(1_000_000 + i);
  return i % 4 === 0
    ? {
        id: `swap-${i}`,
        status: 'exchange',
        revision: i % 7,
        depositRef,
        amountUnits,
        sequence: 2,
        deposits: { [depositRef]: { event: 'DEPOSIT_CONFIRMED', amountUnits, sequence: 2 } },
      }
    : {
        id: `swap-${i}`,
        status: 'deposit',
        revision: i % 7,
        deposits: { [depositRef]: { event: 'DEPOSIT_DETECTED', amountUnits, sequence: 1 } },
      };
});
const events = workflows.map((w, i) => {
  const [[depositRef, { amountUnits }]] = Object.entries(w.deposits);
  return {
    eventId: `watcher:evt-${i}`,
    workflowId: w.id,
    type: 'DEPOSIT_CONFIRMED',
    depositRef,
    amountUnits,
    sequence: 2, // the watcher's confirmation: applied in deposit, already-applied (a re-publication) in exchange
  };
});
const inputs = workflows.map((workflow, i) => ({ event: events[i], receipt: null, workflow }));

// --- The reference: the same rule written by hand in JavaScript. ---
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what the check refuses
const CONTROL = /[\u0000-\u001f\u007f]/;
function checkText(event, field) {
  const value = event[field];
  if (typeof value !== 'string' || value.trim() === '' || Buffer.byteLength(value) > 512 || CONTROL.test(value) || !value.isWellFormed()) {
    throw new Error(`invalid ${field}`);
  }
  return value;
}
function referenceDecide(event, receipt, workflow) {
  if (event === null || typeof event !== 'object' || event.type !== 'DEPOSIT_CONFIRMED') throw new Error('invalid type');
  const eventId = checkText(event, 'eventId');
  const workflowId = checkText(event, 'workflowId');
  const depositRef = checkText(event, 'depositRef');
  const amountUnits = event.amountUnits;
  if (typeof amountUnits !== 'string' || !/^[1-9][0-9]{0,77}$/.test(amountUnits)) throw new Error('invalid amountUnits');
  const sequence = event.sequence;
  if (typeof sequence !== 'number' || !Number.isSafeInteger(sequence) || sequence < 1) throw new Error('invalid sequence');
  // RFC 8785 over every declared field: keys in code-unit order, a safe integer written as one (2, not 2.0).
  const canonical = JSON.stringify({ amountUnits, depositRef, sequence, type: 'DEPOSIT_CONFIRMED', workflowId });
  const fingerprint = `fp1:${createHash('sha256').update(canonical).digest('hex')}`;
  if (receipt) {
    if (receipt.fingerprint !== fingerprint) throw new Error('EVENT_ID_CONFLICT');
    return { outcome: 'duplicate-delivery', fingerprint, writeSet: { receipt: null, workflow: null, outbox: [] } };
  }
  if (!workflow) throw new Error('UNKNOWN_WORKFLOW');
  // The statuses the bench's swaps are in: deposit (or waiting, reversed: before the exchange), or past it (exchange,
  // then sending, success). The deposit is read from its own entry in the deposits map, keyed by depositRef: its
  // amount must be the entry's, and this observation's number is compared with the entry's (no entry compares as 0).
  const status = workflow.status;
  const before = status === 'waiting' || status === 'deposit' || status === 'reversed';
  if (!before && status !== 'exchange' && status !== 'sending' && status !== 'success') throw new Error(`${status}: not written out here`);
  const deposits = workflow.deposits ?? {};
  const entry = deposits[depositRef];
  if (entry !== undefined && entry.amountUnits !== amountUnits) throw new Error('IDENTITY_MISMATCH');
  const seen = entry?.sequence ?? 0;
  const ref = { id: ruleSet.id, version: ruleSet.version, hash: ruleSet.hash };
  if (sequence <= seen) {
    // The same observation again is already-applied, an older one stale: the entry holds the chain's newer word.
    const outcome = sequence === seen ? 'already-applied' : 'stale';
    const result = { operationIds: [], status: null, revision: null };
    const receiptOut = { eventId, fingerprint, workflowId, eventType: 'DEPOSIT_CONFIRMED', outcome, ruleSet: ref, result };
    return { outcome, fingerprint, writeSet: { receipt: receiptOut, workflow: null, outbox: [] } };
  }
  // A newer observation applies. Before the exchange, one that covers expectedUnits (unset: any amount) starts it and
  // the swap records the deposit it acts on; a partial one gets its own review, once. After it, a newer word on the
  // exchanged deposit goes to a person; another deposit's confirmation gets its own review, once.
  const reviewed = entry?.operations?.includes('review-deposit') ?? false;
  const reviewDeposit = {
    id: `review-deposit:${depositRef.replaceAll('%', '%25').replaceAll(':', '%3A')}:${workflowId}`,
    type: 'REVIEW_DEPOSIT',
    payload: { depositRef, amountUnits },
  };
  const expected = workflow.expectedUnits;
  let to = status;
  let operation = null;
  let top = null;
  if (before) {
    if (
      expected === undefined ||
      amountUnits.length > expected.length ||
      (amountUnits.length === expected.length && amountUnits >= expected)
    ) {
      to = 'exchange';
      operation = { id: `start-exchange:${workflowId}`, type: 'START_EXCHANGE', payload: { depositRef, amountUnits } };
      top = { depositRef, amountUnits, sequence };
    } else {
      to = 'deposit';
      if (!reviewed) operation = reviewDeposit;
    }
  } else if (depositRef === workflow.depositRef) {
    to = 'review';
    operation = { id: `open-review:${workflowId}`, type: 'OPEN_REVIEW', payload: { depositRef, amountUnits } };
    top = { sequence };
  } else if (!reviewed) operation = reviewDeposit;
  // Every applied answer writes the deposit's entry: the whole new map, the other deposits' entries copied unchanged.
  const operations = operation?.type === 'REVIEW_DEPOSIT' ? [...(entry?.operations ?? []), 'review-deposit'] : entry?.operations;
  const written = { event: 'DEPOSIT_CONFIRMED', amountUnits, sequence, ...(operations ? { operations } : {}) };
  const operationIds = operation ? [operation.id] : [];
  const result = { operationIds, status: to, revision: workflow.revision + 1 };
  return {
    outcome: 'applied',
    fingerprint,
    writeSet: {
      receipt: { eventId, fingerprint, workflowId, eventType: 'DEPOSIT_CONFIRMED', outcome: 'applied', ruleSet: ref, result },
      workflow: {
        id: workflowId,
        expect: { status, revision: workflow.revision },
        set: { status: to, revision: workflow.revision + 1, ...top, deposits: { ...deposits, [depositRef]: written } },
      },
      outbox: operation ? [{ ...operation, workflowId, eventId, status: 'pending' }] : [],
    },
  };
}

const batches = (size) => Array.from({ length: inputs.length / size }, (_, b) => inputs.slice(b * size, (b + 1) * size));
/** A contender deciding N events through decideBatch, a group at a time. */
const batched = (groups) => () => {
  let sink = 0;
  for (let n = 0, g = 0; n < N; n += groups[0].length, g += 1) {
    for (const r of packed.decideBatch(compiled, groups[g % groups.length])) sink += r.fingerprint.length;
  }
  return sink;
};

// Each contender decides N events and returns a checksum, so no work is skipped.
const contenders = {
  'plain JavaScript (reference)': () => {
    let sink = 0;
    for (let n = 0; n < N; n += 1) sink += referenceDecide(events[n & 1023], null, workflows[n & 1023]).fingerprint.length;
    return sink;
  },
  'decide (the package)': () => {
    let sink = 0;
    for (let n = 0; n < N; n += 1)
      sink += decide({ event: events[n & 1023], receipt: null, workflow: workflows[n & 1023], ruleSet }).fingerprint.length;
    return sink;
  },
  'decider, one event per call': () => {
    let sink = 0;
    for (let n = 0; n < N; n += 1) sink += packed.decide(compiled, events[n & 1023], null, workflows[n & 1023]).fingerprint.length;
    return sink;
  },
  'decider, 16 events per call': batched(batches(16)),
  'decider, 256 events per call': batched(batches(256)),
};

// Every contender must agree before its speed means anything: on the timed inputs, and on the reference's
// branches they do not take (an older confirmation in deposit, a newer one of the exchanged deposit after the exchange
// started, a swap with no entry for the deposit, a partial deposit, once and already reviewed, a covering one, another
// deposit confirmed on a swap already exchanging).
const entryOf = (w) => Object.values(w.deposits)[0];
const expecting = (w, expectedUnits) => ({ ...w, expectedUnits });
const reviewedOf = (w) => ({ ...w, deposits: { [events[1].depositRef]: { ...entryOf(w), operations: ['review-deposit'] } } });
const other = { ...events[0], depositRef: 'btc-mainnet:tx-other:vout-1', amountUnits: '7' };
const untimed = [
  {
    event: { ...events[1], sequence: 1 },
    workflow: { ...workflows[1], deposits: { [events[1].depositRef]: { ...entryOf(workflows[1]), sequence: 2 } } },
  },
  { event: { ...events[0], sequence: 3 }, workflow: workflows[0] },
  { event: events[2], workflow: { ...workflows[2], deposits: {} } },
  { event: events[1], workflow: expecting(workflows[1], '9000000') },
  { event: events[1], workflow: expecting(reviewedOf(workflows[1]), '9000000') },
  { event: events[1], workflow: expecting(workflows[1], events[1].amountUnits) },
  { event: other, workflow: workflows[0] },
];
for (const { event, workflow } of [...inputs, ...untimed]) {
  const today = decide({ event, receipt: null, workflow, ruleSet });
  deepStrictEqual(packed.decide(compiled, event, null, workflow), today);
  const reference = referenceDecide(event, null, workflow);
  deepStrictEqual([reference.outcome, reference.fingerprint, reference.writeSet], [today.outcome, today.fingerprint, today.writeSet]);
}
deepStrictEqual(
  untimed.map(({ event, workflow }) => referenceDecide(event, null, workflow).writeSet.receipt.result.operationIds.length),
  [0, 1, 1, 1, 0, 1, 1],
);
deepStrictEqual(
  untimed.map(({ event, workflow }) => referenceDecide(event, null, workflow).outcome),
  ['stale', 'applied', 'applied', 'applied', 'applied', 'applied', 'applied'],
);
for (const size of [16, 256])
  deepStrictEqual(
    batches(size).flatMap((b) => packed.decideBatch(compiled, b)),
    inputs.map((x) => decide({ ...x, ruleSet })),
  );

// Rates are per second of this process's CPU time: on a shared machine the
// time another process holds the CPU is not counted against whoever ran then.
// BENCH_CLOCK=wall measures elapsed time instead.
const WALL = process.env.BENCH_CLOCK === 'wall';
function seconds() {
  if (WALL) return Number(process.hrtime.bigint()) / 1e9;
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}
function rate(fn) {
  const started = seconds();
  if (fn() === 0) throw new Error('unreachable');
  return N / (seconds() - started);
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

for (const fn of Object.values(contenders)) rate(fn); // warm every path up first
const rates = Object.fromEntries(Object.keys(contenders).map((name) => [name, []]));
const ratios = Object.fromEntries(Object.keys(contenders).map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round += 1) {
  const names = Object.keys(contenders);
  // Alternate the order so no contender always runs right after another.
  if (round % 2 === 1) names.reverse();
  const measured = Object.fromEntries(names.map((name) => [name, rate(contenders[name])]));
  for (const name of names) {
    rates[name].push(measured[name]);
    ratios[name].push(measured[name] / measured['plain JavaScript (reference)']);
  }
}

const summary = {};
console.log(
  `decide, deposit-swap DEPOSIT_CONFIRMED, ${N} events per contender per round, medians of ${ROUNDS} rounds, ${WALL ? 'wall' : 'CPU'} time (node ${process.version})`,
);
for (const name of Object.keys(contenders)) {
  const r = median(rates[name]);
  const x = median(ratios[name]);
  summary[name] = { decisionsPerSecond: Math.round(r), ratioToPlainJs: Number(x.toFixed(3)) };
  console.log(`  ${name.padEnd(30)} ${Math.round(r).toLocaleString('en-US').padStart(10)} decisions/s   ${x.toFixed(2)}× plain JS`);
}
if (process.env.BENCH_JSON) console.log(JSON.stringify(summary));
writeBenchJson('decide', {
  ruleSet: `${ruleSet.id} v${ruleSet.version}`,
  events: N,
  rounds: ROUNDS,
  clock: WALL ? 'wall' : 'cpu',
  node: process.version,
  contenders: summary,
});
