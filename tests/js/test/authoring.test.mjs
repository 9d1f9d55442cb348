// Writing a rule set of your own: the diagram (RuleSet#graph, `rules graph`),
// the simulator (`rules simulate`) and the test helper idemflow/testing, on
// the built-ins and on a rule set whose end state depends on delivery order.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { decide, IdemflowError, RuleSet } from 'idemflow';
import { assertEveryOrder, exploreOrders } from 'idemflow/testing';

const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'idemflow-authoring-'));

function cli(args) {
  const run = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8' });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

function file(name, text) {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

// Inventory holds, numbered by the producer. Not declared reorder-safe (no
// `order` section), and it is not: a change records the new sequence but not
// the new quantity, so HOLD_SET 1, 2, 3 in order keeps quantity 1 while 3 first keeps 3.
const holds = {
  id: 'holds',
  version: 1,
  description: 'a hold per item; planted bug: a change does not record its quantity',
  statuses: [{ name: 'held', description: 'units are held' }],
  fields: [
    { name: 'quantity', kind: 'count', description: 'units held' },
    { name: 'sequence', kind: 'count', description: "the producer's number of this observation" },
  ],
  events: [{ type: 'HOLD_SET', fields: ['quantity', 'sequence'] }],
  rules: [
    { on: 'HOLD_SET', in: '(none)', then: { outcome: 'applied', to: 'held', record: ['quantity', 'sequence'] } },
    {
      on: 'HOLD_SET',
      in: 'held',
      when: ['sequence', '>', 'sequence'],
      then: { outcome: 'applied', to: 'held', record: ['sequence'] },
      else: { outcome: 'stale' },
    },
  ],
};
const fixed = structuredClone(holds);
fixed.version = 2;
fixed.rules[1].then.record = ['quantity', 'sequence'];

const hold = (n, quantity) => ({ eventId: `hold-${n}`, workflowId: 'item-1', type: 'HOLD_SET', quantity, sequence: n });
const history = [hold(1, 10), hold(2, 2), hold(3, 3)];

test('the diagram shows every status and every applying transition, with the operations it emits', () => {
  const mermaid = RuleSet.builtin('deposit-swap').graph();
  assert.match(mermaid, /^stateDiagram-v2\n/);
  for (const status of ['waiting', 'deposit', 'exchange', 'sending', 'success', 'overdue', 'review', 'reversed']) {
    assert.match(mermaid, new RegExp(`state "${status}" as s\\d+`), status);
  }
  const id = (status) => mermaid.match(new RegExp(`state "${status}" as (s\\d+)`))[1];
  assert.match(mermaid, new RegExp(`${id('waiting')} --> ${id('exchange')} : DEPOSIT_CONFIRMED / START_EXCHANGE`));
  assert.match(mermaid, new RegExp(`${id('exchange')} --> ${id('sending')} : EXCHANGE_COMPLETED / SEND_PAYOUT`));
  assert.doesNotMatch(mermaid, /already-applied/, 'answers that change nothing are left out by default');

  const start = RuleSet.builtin('order-shipment').graph({ all: true });
  assert.match(start, /\[\*\] --> s\d+ : SHIPMENT_REQUESTED \/ CREATE_SHIPMENT/, 'no workflow yet is the start state');
  assert.match(start, /(s\d+) --> \1 : SHIPMENT_REQUESTED#58; already-applied/, 'with all, a self-loop (":" escaped for Mermaid)');

  const dot = RuleSet.builtin('deposit-swap').graph({ format: 'dot', conditions: true });
  assert.match(dot, /^digraph "deposit-swap v4" \{/);
  assert.match(
    dot,
    /"waiting" -> "exchange" \[label="DEPOSIT_CONFIRMED \[sequence > recorded sequence and amountUnits >= recorded expectedUnits\] \/ START_EXCHANGE"\]/,
  );
});

test('graph options are checked: a bad format or flag is a fatal INVALID_ARGUMENT', () => {
  for (const options of [{ format: 'svg' }, { all: 'yes' }, { colour: true }]) {
    assert.throws(
      () => RuleSet.builtin('order-shipment').graph(options),
      (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT',
      JSON.stringify(options),
    );
  }
});

test('rules graph prints the same diagram as the API, in either format', () => {
  const mermaid = cli(['rules', 'graph', 'deposit-swap']);
  assert.equal(mermaid.code, 0, mermaid.stderr);
  assert.equal(mermaid.stdout, RuleSet.builtin('deposit-swap').graph());
  const dot = cli(['rules', 'graph', file('holds.json', JSON.stringify(holds)), '--format', 'dot']);
  assert.equal(dot.code, 0, dot.stderr);
  assert.equal(dot.stdout, RuleSet.fromJSON(holds).graph({ format: 'dot' }));
  const wrong = cli(['rules', 'graph', 'deposit-swap', '--format', 'png']);
  assert.equal(wrong.code, 2);
  assert.match(wrong.stderr, /--format must be one of mermaid, dot/);
});

test('exploreOrders finds the planted order bug: two end states, each with an order that reaches it', async () => {
  const result = await exploreOrders({ ruleSet: RuleSet.fromJSON(holds), events: history });
  assert.equal(result.orders, 6, '3 events, 3! orders');
  const quantities = result.endStates.map((end) => end.state.workflows[0].fields.quantity).sort();
  assert.deepEqual(quantities, [10, 2, 3].sort(), 'the quantity of whichever hold came first');
  for (const end of result.endStates) {
    assert.equal(end.example.length, 3);
    assert.equal(end.state.workflows[0].fields.sequence, 3, 'every order ends at sequence 3');
    assert.equal(history.find((e) => e.eventId === end.example[0]).quantity, end.state.workflows[0].fields.quantity);
  }
  assert.equal(
    result.endStates.reduce((sum, end) => sum + end.orders, 0),
    6,
  );
});

test('assertEveryOrder throws an AssertionError on the planted bug and passes the fixed rule set, duplicates included', async () => {
  await assert.rejects(assertEveryOrder({ ruleSet: RuleSet.fromJSON(holds), events: history }), (error) => {
    assert.equal(error.name, 'AssertionError');
    assert.match(error.message, /3 different end states over 6 delivery orders, e\.g\. hold-\d → hold-\d → hold-\d and/);
    return true;
  });
  const state = await assertEveryOrder({
    ruleSet: RuleSet.fromJSON(fixed),
    events: history,
    duplicates: true,
    expected: { workflows: [{ id: 'item-1', status: 'held', fields: { quantity: 3, sequence: 3 } }], operations: [] },
  });
  assert.deepEqual(state.unresolved, []);
  await assert.rejects(
    assertEveryOrder({ ruleSet: RuleSet.fromJSON(fixed), events: history, expected: { workflows: [] } }),
    (error) => error.name === 'AssertionError' && /not with the expected workflows/.test(error.message),
  );
});

test('on the built-ins: deposit-swap exchanges once whatever the order, duplicates and early arrivals included', async () => {
  const swap = { id: 'swap-1', status: 'waiting', revision: 1, expectedUnits: '1000' };
  const confirmed = (eventId, sequence) => ({
    eventId,
    workflowId: 'swap-1',
    type: 'DEPOSIT_CONFIRMED',
    depositRef: 'chain:tx-1:0',
    amountUnits: '1000',
    sequence,
  });
  const detected = {
    eventId: 'det-1',
    workflowId: 'swap-1',
    type: 'DEPOSIT_DETECTED',
    depositRef: 'chain:tx-1:0',
    amountUnits: '1000',
    sequence: 1,
  };
  const exchanged = { eventId: 'ex-1', workflowId: 'swap-1', type: 'EXCHANGE_COMPLETED', payoutUnits: '990' };
  const result = await exploreOrders({
    ruleSet: 'deposit-swap',
    workflows: [swap],
    events: [detected, confirmed('conf-1', 2), confirmed('conf-1b', 2), exchanged],
    duplicates: true,
  });
  assert.ok(result.orders > 1000, `${result.orders} orders`);
  assert.ok(result.states < result.orders, 'branches that meet are merged');
  for (const { state } of result.endStates) {
    assert.deepEqual(
      state.operations.filter((op) => op.type === 'START_EXCHANGE').map((op) => op.id),
      ['start-exchange:swap-1'],
      'one exchange in every order',
    );
  }
  // An event for a workflow that is not there yet is a retry: redelivered, it applies once the workflow exists.
  const shipments = await assertEveryOrder({
    ruleSet: 'subscription',
    events: [
      { eventId: 'signup', workflowId: 'sub-1', type: 'SUBSCRIPTION_STARTED', paidThrough: 1, paymentRef: 'psp:1' },
      { eventId: 'cancel', workflowId: 'sub-1', type: 'SUBSCRIPTION_CANCELLED' },
    ],
    retries: 1,
  });
  assert.equal(shipments.workflows[0].status, 'cancelled');
  assert.deepEqual(shipments.unresolved, []);
});

test('exploreOrders: an event that stays unresolved is reported, the state budget is enforced, and options are checked', async () => {
  const never = await exploreOrders({
    ruleSet: 'subscription',
    events: [{ eventId: 'cancel', workflowId: 'sub-9', type: 'SUBSCRIPTION_CANCELLED' }],
    retries: 2,
  });
  assert.deepEqual(
    never.endStates.map((end) => end.state.unresolved),
    [[{ eventId: 'cancel', code: 'UNKNOWN_WORKFLOW', disposition: 'retry' }]],
  );
  await assert.rejects(
    exploreOrders({ ruleSet: RuleSet.fromJSON(fixed), events: [hold(1, 1), hold(2, 2), hold(3, 3), hold(4, 4)], maxStates: 5 }),
    (error) => error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT' && error.details.field === 'maxStates',
  );
  for (const [options, field] of [
    [{ events: history }, 'ruleSet'],
    [{ ruleSet: 'deposit-swap', events: [] }, 'events'],
    [{ ruleSet: 'deposit-swap', events: history, duplicates: 1 }, 'duplicates'],
    [{ ruleSet: 'deposit-swap', events: history, retries: -1 }, 'retries'],
  ]) {
    await assert.rejects(exploreOrders(options), (error) => error instanceof IdemflowError && error.details.field === field, field);
  }
});

test('rules simulate prints each decision, its write set and the state after it; --orders the distinct end states', () => {
  const events = file('holds.jsonl', `${history.map((e) => JSON.stringify(e)).join('\n')}\n`);
  const definition = file('holds-bug.json', JSON.stringify(holds));
  const run = cli(['rules', 'simulate', definition, events]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stdout,
    /#1 hold-1 HOLD_SET on item-1: applied\n {2}workflow {2}\{"id":"item-1","expect":null,"set":\{[^\n]*"quantity":10/,
  );
  assert.match(run.stdout, /#2 hold-2 HOLD_SET on item-1: applied\n[\s\S]*? {2}after {5}held r2 \{"quantity":10,"sequence":2\}/);
  assert.match(run.stdout, /3 deliveries, 0 answered with an error/);

  const orders = cli(['rules', 'simulate', definition, events, '--orders']);
  assert.equal(orders.code, 1, 'orders that end differently exit 1');
  assert.match(orders.stdout, /^6 delivery orders \(\d+ distinct states\): 3 end states/);
  assert.match(orders.stdout, /the end state depends on the delivery order/);
  const good = cli(['rules', 'simulate', file('holds-fixed.json', JSON.stringify(fixed)), events, '--orders', '--duplicates']);
  assert.equal(good.code, 0, good.stdout);
  assert.match(good.stdout, /: 1 end state\n/);
  assert.match(good.stdout, /workflow {2}item-1: held \{"quantity":3,"sequence":3\}/);

  const early = cli([
    'rules',
    'simulate',
    'subscription',
    file('cancel.jsonl', '{"eventId":"c","workflowId":"sub-1","type":"SUBSCRIPTION_CANCELLED"}\n'),
    '--workflow',
    '{"id":"sub-1","status":"active","revision":1,"paidThrough":1,"paymentRef":"p"}',
  ]);
  assert.equal(early.code, 0, early.stderr);
  assert.match(early.stdout, /#1 c SUBSCRIPTION_CANCELLED on sub-1: applied[\s\S]*after {5}cancelled r2/);
  const unknown = cli([
    'rules',
    'simulate',
    'subscription',
    file('cancel2.jsonl', '{"eventId":"c","workflowId":"sub-2","type":"SUBSCRIPTION_CANCELLED"}\n'),
  ]);
  assert.match(unknown.stdout, /#1 c SUBSCRIPTION_CANCELLED on sub-2: UNKNOWN_WORKFLOW \(retry\)[^\n]*\n {2}nothing written/);
  const bad = cli(['rules', 'simulate', 'subscription', file('bad.jsonl', '{"eventId":\n')]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /bad\.jsonl:1: not JSON/);
});

test("docs/rulesets.md's testing example runs as written", () => {
  const page = readFileSync(fileURLToPath(new URL('../../../docs/rulesets.md', import.meta.url)), 'utf8');
  const block = /<!-- testing: begin -->\n```js\n([\s\S]*?)```\n<!-- testing: end -->/.exec(page);
  assert.ok(block, 'the example is marked in docs/rulesets.md');
  // In the test project, so 'idemflow' resolves as it does for a user.
  const path = fileURLToPath(new URL('../rulesets-testing-example.tmp.mjs', import.meta.url));
  writeFileSync(path, block[1]);
  try {
    const run = spawnSync(process.execPath, [path], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^\d+ orders, one end state\n$/);
  } finally {
    rmSync(path, { force: true });
  }
});

test("the README's diagram is the one rules graph draws for deposit-swap", () => {
  const readme = readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8');
  const block = /```mermaid\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'the README shows a Mermaid diagram');
  assert.equal(block[1], RuleSet.builtin('deposit-swap').graph());
});

test('docs/your-rules.md: its rule set verifies, its diagram is the one drawn, its test passes and its histories replay as it says', () => {
  const page = readFileSync(fileURLToPath(new URL('../../../docs/your-rules.md', import.meta.url)), 'utf8');
  const marked = (marker, lang) => {
    const block = new RegExp(`<!-- ${marker}: begin -->\\n\`\`\`${lang}\\n([\\s\\S]*?)\`\`\`\\n<!-- ${marker}: end -->`).exec(page);
    assert.ok(block, `the guide marks its ${marker}`);
    return block[1];
  };
  const definition = marked('payments rule set', 'json');
  const ruleSet = RuleSet.fromJSON(JSON.parse(definition));
  assert.equal(marked('payments graph', 'mermaid'), ruleSet.graph());

  // The guide's test, run with node --test beside the rule set file, inside the test project.
  const project = fileURLToPath(new URL('../your-rules.tmp/', import.meta.url));
  rmSync(project, { recursive: true, force: true });
  mkdirSync(project);
  try {
    writeFileSync(join(project, 'payments.json'), definition);
    writeFileSync(join(project, 'payments.test.mjs'), marked('payments test', 'js'));
    // Without NODE_TEST_CONTEXT, the child reports as a user's own `node --test` would.
    const { NODE_TEST_CONTEXT: _context, ...env } = process.env;
    const run = spawnSync(process.execPath, ['--test', 'payments.test.mjs'], { cwd: project, encoding: 'utf8', env });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /# pass 1\n/);

    const history = /cat > history\.jsonl <<'EOF'\n([\s\S]*?)\nEOF\n/.exec(page);
    assert.ok(history, 'the guide writes a history file');
    writeFileSync(join(project, 'history.jsonl'), `${history[1]}\n`);
    const start = '{"id":"order-7","status":"open","revision":1}';
    const replay = cli(['rules', 'simulate', join(project, 'payments.json'), join(project, 'history.jsonl'), '--workflow', start]);
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, /#3 evt_1 PAYMENT_SUCCEEDED on order-7: duplicate-delivery\n/);
    const orders = cli([
      'rules',
      'simulate',
      join(project, 'payments.json'),
      join(project, 'history.jsonl'),
      '--workflow',
      start,
      '--orders',
    ]);
    assert.equal(orders.code, 1);
    assert.match(orders.stdout, /: 2 end states\n/);
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});

test('docs/your-rules.md: the counterexample it shows is what the verifier prints for cancelled marked terminal', () => {
  const page = readFileSync(fileURLToPath(new URL('../../../docs/your-rules.md', import.meta.url)), 'utf8');
  const definition = JSON.parse(/<!-- payments rule set: begin -->\n```json\n([\s\S]*?)```/.exec(page)[1]);
  definition.statuses.find((s) => s.name === 'cancelled').terminal = true;
  const run = cli(['rules', 'verify', file('payments-terminal.json', JSON.stringify(definition))]);
  assert.equal(run.code, 1);
  const shown = /```text\n([\s\S]*?)```/.exec(page)[1];
  assert.ok(run.stdout.includes(shown), run.stdout);
});

test('docs/rulesets.md: a rule written with "newer" decides as its three cases written out, and is deposit-swap v3\'s own', () => {
  const v3Rules = RuleSet.builtin('deposit-swap', { version: 3 });
  const page = readFileSync(fileURLToPath(new URL('../../../docs/rulesets.md', import.meta.url)), 'utf8');
  const block = (name) => JSON.parse(new RegExp(`<!-- newer ${name}: begin -->\\n\\s*\`\`\`json\\n([\\s\\S]*?)\`\`\``).exec(page)[1]);
  const [short, long] = [block('short'), block('long')];
  assert.equal(short.newer, 'sequence');
  assert.equal(long.newer, undefined);
  const v3 = v3Rules.definition();
  const at = v3.rules.findIndex((r) => r.on === short.on && JSON.stringify(r.in) === JSON.stringify(short.in));
  const { description, ...own } = v3.rules[at];
  assert.deepEqual(own, short, "the short rule is v3's");
  const written = structuredClone(v3);
  written.rules[at] = long;
  const table = (ruleSet) => ruleSet.tableMarkdown().split('\n').slice(1).join('\n'); // without the hash line
  const longForm = RuleSet.fromJSON(written);
  assert.notEqual(longForm.hash, v3Rules.hash);
  assert.equal(table(longForm), table(v3Rules));
  // The same decision, case by case, through the real decider.
  const swap = {
    id: 'swap-1',
    status: 'deposit',
    revision: 2,
    deposits: { 'btc:tx-1:0': { event: 'DEPOSIT_DETECTED', amountUnits: '10', sequence: 2 } },
  };
  const outcomes = [];
  for (const sequence of [1, 2, 3]) {
    const event = {
      eventId: `e-${sequence}`,
      workflowId: 'swap-1',
      type: 'DEPOSIT_DETECTED',
      depositRef: 'btc:tx-1:0',
      amountUnits: '10',
      sequence,
    };
    const outcome = (ruleSet) => decide({ ruleSet, event, workflow: swap }).outcome;
    assert.equal(outcome(longForm), outcome(v3Rules), `sequence ${sequence}`);
    outcomes.push(outcome(longForm));
  }
  assert.deepEqual(outcomes, ['stale', 'already-applied', 'applied']);
});
