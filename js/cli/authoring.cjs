'use strict';
// The commands that help a team write a rule set: `rules graph` draws it,
// `rules simulate` replays a history through it (in the given order, or in
// every order with --orders). Every decision comes from the core.

const fs = require('node:fs');
const { IdemflowError, InMemoryStore, decide, processEvent } = require('../index.cjs');
const { exploreOrders } = require('../testing/orders.cjs');
const { FORMATS } = require('../core/graph.cjs');
const { UsageError, flags } = require('./args.cjs');

const USAGE = `  idemflow rules graph <builtin|file.json> [--format mermaid|dot] [--all] [--conditions]
      print the state diagram: statuses, transitions labelled by event and
      emitted operations; --conditions names each transition's case, --all
      adds the answers that change nothing
  idemflow rules simulate <builtin|file.json> <events.jsonl> [--workflow JSON|@file] [--orders] [--duplicates]
      deliver the events (one JSON object per line) in file order and print
      each decision, its write set and the workflow after it; --orders tries
      every delivery order instead (--duplicates: each event twice) and
      prints the distinct end states; exit 1 when orders end differently`;

function graph(args, out, loadRuleSet) {
  const { positional, options } = flags(args, { format: 'value', all: 'flag', conditions: 'flag' });
  if (positional.length !== 1) throw new UsageError('rules graph takes one rule set');
  const format = options.format ?? 'mermaid';
  if (!FORMATS.includes(format)) throw new UsageError(`--format must be one of ${FORMATS.join(', ')}`);
  out.write(loadRuleSet(positional[0]).graph({ format, all: options.all === true, conditions: options.conditions === true }));
  return 0;
}

function readJsonArgument(value, what) {
  const text = value.startsWith('@') ? readFile(value.slice(1), what) : value;
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${what} is not JSON: ${error.message}`);
  }
}

function readFile(path, what) {
  try {
    return fs.readFileSync(path, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${what} ${path}: ${error.code ?? error.message}`);
  }
}

/** The events of a JSON Lines file; a line that is not a JSON object is a usage error naming it. */
function readEvents(path) {
  const events = [];
  readFile(path, 'events file')
    .split('\n')
    .forEach((line, i) => {
      if (line.trim() === '') return;
      let event;
      try {
        event = JSON.parse(line);
      } catch (error) {
        throw new UsageError(`${path}:${i + 1}: not JSON: ${error.message}`);
      }
      if (event === null || typeof event !== 'object' || Array.isArray(event)) throw new UsageError(`${path}:${i + 1}: not a JSON object`);
      events.push(event);
    });
  if (events.length === 0) throw new UsageError(`${path} holds no events`);
  return events;
}

function workflowsOf(value) {
  if (value === undefined) return [];
  const parsed = readJsonArgument(value, '--workflow');
  return Array.isArray(parsed) ? parsed : [parsed];
}

const json = (value) => JSON.stringify(value);

function stateText(workflow) {
  if (workflow === null) return '(no workflow)';
  const { id: _id, status, revision, ...fields } = workflow;
  return `${status} r${revision} ${json(fields)}`;
}

async function simulate(args, out, loadRuleSet) {
  const { positional, options } = flags(args, { workflow: 'value', orders: 'flag', duplicates: 'flag' });
  if (positional.length !== 2) throw new UsageError('rules simulate takes a rule set and an events file');
  const ruleSet = loadRuleSet(positional[0]);
  const events = readEvents(positional[1]);
  const workflows = workflowsOf(options.workflow);
  if (options.orders) return simulateOrders(out, { ruleSet, events, workflows, duplicates: options.duplicates === true });
  if (options.duplicates) throw new UsageError('--duplicates goes with --orders');

  const store = new InMemoryStore();
  for (const workflow of workflows) await store.putWorkflow(workflow);
  let failed = 0;
  for (const [i, event] of events.entries()) {
    const label = `#${i + 1} ${event.eventId ?? '?'} ${event.type ?? '?'} on ${event.workflowId ?? '?'}`;
    try {
      const workflow = typeof event.workflowId === 'string' ? await store.getWorkflow(event.workflowId) : null;
      const receipt = typeof event.eventId === 'string' ? await store.getReceipt(event.eventId) : null;
      const decision = decide({ event, receipt, workflow, ruleSet });
      await processEvent(store, event, { ruleSet });
      out.write(`${label}: ${decision.outcome}\n`);
      const { writeSet } = decision;
      if (writeSet.workflow) out.write(`  workflow  ${json(writeSet.workflow)}\n`);
      if (writeSet.receipt)
        out.write(`  receipt   ${writeSet.receipt.outcome}${writeSet.receipt.result ? ` ${json(writeSet.receipt.result)}` : ''}\n`);
      for (const operation of writeSet.outbox) out.write(`  operation ${operation.id} ${operation.type} ${json(operation.payload)}\n`);
      out.write(`  after     ${stateText(await store.getWorkflow(decision.workflowId))}\n`);
    } catch (error) {
      if (!(error instanceof IdemflowError)) throw error;
      failed += 1;
      out.write(`${label}: ${error.code} (${error.disposition}): ${error.message}\n  nothing written\n`);
    }
  }
  out.write(`${events.length} deliveries, ${failed} answered with an error\n`);
  return 0;
}

async function simulateOrders(out, options) {
  const result = await exploreOrders(options);
  const { endStates } = result;
  out.write(
    `${result.orders} delivery orders (${result.states} distinct states): ${endStates.length} end state${endStates.length === 1 ? '' : 's'}\n`,
  );
  endStates.forEach(({ state, orders, example }, i) => {
    out.write(`\nend state ${i + 1}, reached by ${orders} order${orders === 1 ? '' : 's'}, e.g. ${example.join(' → ')}\n`);
    for (const workflow of state.workflows) out.write(`  workflow  ${workflow.id}: ${workflow.status} ${json(workflow.fields)}\n`);
    for (const operation of state.operations) out.write(`  operation ${operation.id} ${operation.type}\n`);
    for (const left of state.unresolved) out.write(`  unresolved ${left.eventId}: ${left.code} (${left.disposition})\n`);
  });
  if (endStates.length > 1) out.write('\nthe end state depends on the delivery order\n');
  return endStates.length > 1 ? 1 : 0;
}

module.exports = { graph, simulate, USAGE };
