// `make bench`: validate + fingerprint + decide through the package, against a
// straightforward pure-JavaScript implementation of the same DEPOSIT_CONFIRMED
// rule (same canonical JSON, SHA-256 via node:crypto), measured in one run.
// Prints events per second and the ratio; nothing here passes or fails.
import { deepStrictEqual } from 'node:assert';
import { createHash } from 'node:crypto';
import { decide, decideJSON, RuleSet } from 'idemflow';

const N = Number(process.env.BENCH_EVENTS ?? 50_000);
const ROUNDS = 5;
const ruleSet = RuleSet.builtin('deposit-swap');

const workflows = Array.from({ length: 1000 }, (_, i) => ({
  id: `swap-${i}`,
  status: i % 4 === 0 ? 'exchange' : 'deposit',
  revision: i % 7,
  depositRef: `btc-mainnet:tx-${i.toString(16)}:vout-0`,
  amountUnits: String(1_000_000 + i),
}));
const events = workflows.map((w, i) => ({
  eventId: `watcher:evt-${i}`,
  workflowId: w.id,
  type: 'DEPOSIT_CONFIRMED',
  depositRef: w.depositRef,
  amountUnits: w.amountUnits,
}));

// --- The reference: the same rule written by hand in JavaScript. ---
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
  const canonical = JSON.stringify({ amountUnits, depositRef, type: 'DEPOSIT_CONFIRMED', workflowId });
  const fingerprint = `fp1:${createHash('sha256').update(canonical).digest('hex')}`;
  if (receipt) {
    if (receipt.fingerprint !== fingerprint) throw new Error('EVENT_ID_CONFLICT');
    return { outcome: 'duplicate-delivery', fingerprint, writeSet: { receipt: null, workflow: null, outbox: [] } };
  }
  if (!workflow) throw new Error('UNKNOWN_WORKFLOW');
  const applies = workflow.status === 'deposit';
  if (!applies && !['exchange', 'sending', 'success'].includes(workflow.status)) throw new Error('INVALID_TRANSITION');
  if (workflow.depositRef !== depositRef || workflow.amountUnits !== amountUnits) throw new Error('IDENTITY_MISMATCH');
  const outcome = applies ? 'applied' : 'already-applied';
  const ref = { id: ruleSet.id, version: ruleSet.version, hash: ruleSet.hash };
  const receiptOut = { eventId, fingerprint, workflowId, eventType: 'DEPOSIT_CONFIRMED', outcome, ruleSet: ref };
  if (!applies) return { outcome, fingerprint, writeSet: { receipt: receiptOut, workflow: null, outbox: [] } };
  return {
    outcome,
    fingerprint,
    writeSet: {
      receipt: receiptOut,
      workflow: { id: workflowId, expect: { status: 'deposit', revision: workflow.revision }, set: { status: 'exchange', revision: workflow.revision + 1 } },
      outbox: [{ id: `start-exchange:${workflowId}`, type: 'START_EXCHANGE', workflowId, eventId, status: 'pending', payload: { depositRef, amountUnits } }],
    },
  };
}

const contenders = {
  'pure JavaScript (reference)': (i) => referenceDecide(events[i], null, workflows[i]),
  'idemflow decide(objects)': (i) => decide({ event: events[i], receipt: null, workflow: workflows[i], ruleSet }),
  'idemflow decideJSON(text)': (i) => decideJSON(JSON.stringify({ event: events[i], receipt: null, workflow: workflows[i] }), { ruleSet }),
};

// The two must agree before their speed means anything.
for (let i = 0; i < workflows.length; i += 1) {
  const a = contenders['pure JavaScript (reference)'](i);
  const b = contenders['idemflow decide(objects)'](i);
  deepStrictEqual([a.outcome, a.fingerprint, a.writeSet], [b.outcome, b.fingerprint, b.writeSet], `reference and idemflow disagree on ${events[i].eventId}`);
}

function measure(fn) {
  const started = process.hrtime.bigint();
  let sink = 0;
  for (let n = 0; n < N; n += 1) sink += fn(n % workflows.length).fingerprint.length;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (sink === 0) throw new Error('unreachable');
  return N / seconds;
}

for (const fn of Object.values(contenders)) measure(fn); // warm up every path first
const best = Object.fromEntries(Object.keys(contenders).map((name) => [name, 0]));
for (let round = 0; round < ROUNDS; round += 1) {
  for (const [name, fn] of Object.entries(contenders)) best[name] = Math.max(best[name], measure(fn));
}

const reference = best['pure JavaScript (reference)'];
console.log(`validate + fingerprint + decide, DEPOSIT_CONFIRMED, ${N} events per round, best of ${ROUNDS} rounds (node ${process.version})`);
for (const [name, rate] of Object.entries(best)) {
  console.log(`  ${name.padEnd(30)} ${Math.round(rate).toLocaleString('en-US').padStart(10)} events/s   ${(rate / reference).toFixed(2)}× reference`);
}
