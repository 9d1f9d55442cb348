#!/usr/bin/env node
'use strict';
// The idemflow command line: print and verify rule sets, fingerprint events,
// and the operator's commands on a store's outbox and receipts (operator.cjs).

const fs = require('node:fs');
const readline = require('node:readline');
const { RuleSet, verifyRuleSet, proveRuleSet, fingerprint, IdemflowError } = require('../index.cjs');
const { draftTable: tableOfDraft } = require('../core/decide.cjs');
const { UsageError, flags } = require('./args.cjs');
const { operatorCommand, USAGE: OPERATOR_USAGE } = require('./operator.cjs');
const authoring = require('./authoring.cjs');
const { version: VERSION } = require('../package.json');

const USAGE = `usage:
  idemflow rules table <builtin|file.json> [--json]
      print the decision table (built-ins: deposit-swap, order-shipment,
      subscription; name@version for an older one, e.g. deposit-swap@1); a
      rule set that fails verification is printed with its failing
      properties, exit 1
  idemflow rules verify <builtin|file.json> [--json]
      prove the rule set's properties; exit 1 if any fails, 2 if it is malformed
  idemflow rules prove <file.json> [--out <proof.json>]
      prove it and write its proof record (default <file>.proof.json), which
      RuleSet.fromJSON(definition, { proof }) loads without proving again;
      exit 1 (and no record) if a property fails
${authoring.USAGE}
  idemflow fingerprint [--rules <builtin|file.json>]
      read events as NDJSON on stdin, write one fingerprint per input line
      (an empty line for an invalid or blank line, with the reason on stderr;
      exit 1 then)
${OPERATOR_USAGE}
  idemflow --version
  idemflow help
exit status: 0 done, 1 failed, 2 the command cannot run as given (usage, a coded error), 3 a bug in idemflow (its stack is printed)`;

const BUILTINS = ['deposit-swap', 'order-shipment', 'subscription'];

/** `deposit-swap` (the current version) or `deposit-swap@1`; null for a file name. */
function builtin(source) {
  const [name, version, extra] = source.split('@');
  if (!BUILTINS.includes(name) || extra !== undefined) return null;
  if (version === undefined) return RuleSet.builtin(name);
  if (!/^[1-9][0-9]*$/.test(version)) throw new UsageError(`${source}: the version after @ must be a positive whole number`);
  return RuleSet.builtin(name, { version: Number(version) });
}

function readDefinition(source) {
  const known = builtin(source);
  if (known) return known.definition();
  let text;
  try {
    text = fs.readFileSync(source, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${source}: ${error.code === 'ENOENT' ? 'no such file' : error.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${source} is not JSON: ${error.message}`);
  }
}

function loadRuleSet(source) {
  return builtin(source) ?? RuleSet.fromJSON(readDefinition(source));
}

function table(args, out, err) {
  const { positional, options } = flags(args, { json: 'flag' });
  if (positional.length !== 1) throw new UsageError('rules table takes one rule set');
  const definition = readDefinition(positional[0]);
  let ruleSet;
  try {
    ruleSet = builtin(positional[0]) ?? RuleSet.fromJSON(definition);
  } catch (error) {
    // A well-formed draft that fails a property: show its table so it can be
    // inspected, then what fails. A malformed one has no table (exit 2).
    if (!(error instanceof IdemflowError && error.code === 'RULESET_INVALID' && error.details.report)) throw error;
    return draftTable(definition, error.details.report, options.json, out, err);
  }
  out.write(options.json ? `${JSON.stringify(ruleSet.table(), null, 2)}\n` : ruleSet.tableMarkdown());
  return 0;
}

/** The table of a rule set that fails verification, and the properties that fail; exit 1. */
function draftTable(definition, report, json, out, err) {
  const draft = tableOfDraft(definition);
  const failing = report.properties.filter((p) => !p.ok);
  if (json) {
    out.write(`${JSON.stringify(draft.rows, null, 2)}\n`);
    err.write(`idemflow: not verified, failing: ${failing.map((p) => p.name).join(', ')} (see 'idemflow rules verify')\n`);
    return 1;
  }
  out.write(draft.markdown);
  out.write(`\nNOT VERIFIED: ${failing.length} of ${report.properties.length} properties fail\n`);
  for (const property of failing) out.write(describeFailure(property));
  return 1;
}

function verify(args, out) {
  const { positional, options } = flags(args, { json: 'flag' });
  if (positional.length !== 1) throw new UsageError('rules verify takes one rule set');
  const report = verifyRuleSet(readDefinition(positional[0]));
  if (options.json) {
    out.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    const { id, version, hash } = report.ruleSet;
    out.write(`rule set ${id} v${version} (${hash})\nexplored ${report.statesExplored} states in ${report.elapsedMs} ms\n`);
    for (const property of report.properties) {
      if (!property.ok) {
        out.write(describeFailure(property));
        continue;
      }
      out.write(`${property.checked?.skipped ? 'n/a ' : 'pass'}  ${property.name}: ${property.description}\n`);
      if (property.checked) out.write(describeChecked(property.checked));
    }
    out.write(report.ok ? 'all properties hold\n' : 'verification failed\n');
  }
  return report.ok ? 0 : 1;
}

/** `rules prove`: the proof record beside the definition, or the failures and exit 1. */
function prove(args, out, err) {
  const { positional, options } = flags(args, { out: 'value' });
  if (positional.length !== 1) throw new UsageError('rules prove takes one rule set file');
  const definition = readDefinition(positional[0]);
  let record;
  try {
    record = proveRuleSet(definition);
  } catch (error) {
    if (!(error instanceof IdemflowError) || !error.details?.report) throw error;
    for (const property of error.details.report.properties.filter((p) => !p.ok)) out.write(describeFailure(property));
    err.write(`idemflow: not proven, no record written (see 'idemflow rules verify')\n`);
    return 1;
  }
  const target = options.out ?? `${positional[0].replace(/\.json$/, '')}.proof.json`;
  fs.writeFileSync(target, `${JSON.stringify(record, null, 2)}\n`);
  out.write(`proved ${record.ruleSet.id} v${record.ruleSet.version} (${record.ruleSet.hash}): ${target}\n`);
  return 0;
}

/** A failing property: its FAIL line, what was checked and its counterexamples. */
function describeFailure(property) {
  const examples = [property.counterexample, ...(property.moreCounterexamples ?? [])].filter(Boolean);
  const searched = property.name === 'reorder-safe' || property.name === 'invariants';
  return [
    `FAIL  ${property.name}: ${property.description}\n`,
    property.checked ? describeChecked(property.checked) : '',
    searched ? examples.map(describeOrder).join('') : describeCounterexample(property.counterexample),
  ].join('');
}

function describeChecked(checked) {
  if (checked.skipped && !checked.bound) return `      not claimed: ${checked.skipped}\n`;
  const lines = [];
  if (checked.skipped) lines.push(`      not claimed: ${checked.skipped}`);
  if (checked.bound?.says) lines.push(`      explored: ${checked.bound.says}`);
  if (checked.budget) {
    lines.push(
      `      histories: ${checked.histories} of ${checked.budget.histories.limit}, delivery configurations: ${checked.configurations} of ${checked.budget.configurations.limit}`,
    );
  }
  if (checked.races) {
    const races = checked.races.map((r) => (Array.isArray(r) ? r : r.between).flat().join(' vs '));
    lines.push(`      declared races: ${races.length ? races.join('; ') : 'none'}`);
  }
  for (const invariant of checked.invariants ?? []) lines.push(`      invariant ${invariant.name}: ${invariant.says}`);
  return `${lines.join('\n')}\n`;
}

/** Where two end states differ: `status`, `data.quantityUnits "10" vs "11"`, … */
function endsDiffer(a, b) {
  const differences = [];
  const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);
  if (a.status !== b.status) differences.push(`status ${a.status} vs ${b.status}`);
  const keys = new Set([...Object.keys(a.data ?? {}), ...Object.keys(b.data ?? {})]);
  for (const key of [...keys].sort()) {
    const [x, y] = [a.data?.[key], b.data?.[key]];
    if (!same(x, y)) differences.push(`data.${key} ${JSON.stringify(x) ?? 'unset'} vs ${JSON.stringify(y) ?? 'unset'}`);
  }
  for (const key of ['emitted', 'answeredWithError', 'undelivered']) {
    if (!same(a[key], b[key])) differences.push(`${key} [${(a[key] ?? []).join(', ')}] vs [${(b[key] ?? []).join(', ')}]`);
  }
  return differences;
}

/** One counterexample of the search: a history, the order(s) that break it, and a hint at the fix. */
function describeOrder(example) {
  if (!example.history) {
    // A claim the search could not evaluate: its reason names the rule or the event.
    return `      not proven: ${example.reason ?? JSON.stringify(example)}\n`;
  }
  const step = (d, i) =>
    `${i === example.divergesAt ? '>' : ' '} ${d.event}${d.fact ? ` ${d.fact}` : ''}${d.sequence ? `#${d.sequence}` : ''}: ${d.from} -> ${d.to} (${d.answer}${d.rule ? `, ${d.rule}` : ''})`;
  const order = (run) => run.deliveries.map(step).map((l) => `       ${l}`);
  const end = (e) =>
    `ends in ${e.status}; data ${JSON.stringify(e.data ?? {})}; operations [${e.emitted.join(', ')}]; errors [${e.answeredWithError.join(', ')}]; undelivered [${e.undelivered.join(', ')}]`;
  const from = `${example.start}${example.workflow ? ` ${JSON.stringify(example.workflow)}` : ''}${example.amounts ? `, amounts ${JSON.stringify(example.amounts)}` : ''}`;
  const lines = [
    `      history from ${from}: ${example.history.join(', ')}${example.races?.length ? ` (${example.races.join('; ')})` : ''}`,
  ];
  const last = example.actual.deliveries.at(-1);
  if (example.invariant) {
    lines.push(`      breaks invariant ${example.invariant.name}: ${example.invariant.says}`, '      in the order:');
    lines.push(...order(example.actual), `        ${end(example.actual.end)}`);
    lines.push(
      `      fix: the last delivery broke it: change ${last?.rule ?? 'the rule that answered it'}, or the invariant if it forbids too much`,
    );
  } else if (example.emittedTwice) {
    lines.push(`      emits ${example.emittedTwice} twice, in the order:`, ...order(example.actual), `        ${end(example.actual.end)}`);
    lines.push(`      fix: ${last?.rule ?? 'the last rule'} emits it again: answer already-applied there, or make the operation recurring`);
  } else {
    lines.push(
      `      ${example.expected.inOrder ? 'in order' : 'one order'}:`,
      ...order(example.expected),
      `        ${end(example.expected.end)}`,
    );
    lines.push('      another order:', ...order(example.actual), `        ${end(example.actual.end)}`);
    lines.push(
      `      they diverge at delivery ${example.divergesAt + 1} and end apart in: ${endsDiffer(example.expected.end, example.actual.end).join('; ')}`,
    );
    const at = example.actual.deliveries[example.divergesAt];
    lines.push(
      `      fix: make ${at?.rule ?? 'the rule that answers that delivery'} end as the order above does (record what it says, or answer stale/already-applied), or declare the pair in order.races if the order the workflow saw should decide`,
    );
  }
  return `${lines.join('\n')}\n`;
}

function describeCounterexample(example) {
  const lines = [];
  const { start, steps, ...rest } = example ?? {};
  if (steps) {
    lines.push(`      path from ${start}:`);
    if (steps.length === 0) lines.push('        (the start itself)');
    for (const step of steps) lines.push(`        ${step.event}: ${step.from} -> ${step.to}   (${step.rule})`);
  }
  for (const [key, value] of Object.entries(rest)) {
    if (key === 'path' && value && value.steps) {
      lines.push(
        `      reached by: ${value.steps.map((s) => `${s.event} (${s.from} -> ${s.to})`).join(', ') || `starting in ${value.start}`}`,
      );
    } else {
      lines.push(`      ${key}: ${JSON.stringify(value)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

async function fingerprints(args, input, out, err) {
  const { positional, options } = flags(args, { rules: 'value' });
  if (positional.length > 0) throw new UsageError('fingerprint reads events from stdin and takes no file');
  const ruleSet = loadRuleSet(options.rules ?? 'deposit-swap');
  let failures = 0;
  let line = 0;
  for await (const text of readline.createInterface({ input, crlfDelay: Infinity })) {
    line += 1;
    if (text.trim() === '') {
      // Keep the alignment, but say so: a blank line is usually a broken export.
      failures += 1;
      out.write('\n');
      err.write(`line ${line}: blank line, no event\n`);
      continue;
    }
    try {
      out.write(`${fingerprint(JSON.parse(text), { ruleSet })}\n`);
    } catch (error) {
      failures += 1;
      out.write('\n');
      const reason = error instanceof IdemflowError ? describeError(error) : `not JSON: ${error.message}`;
      err.write(`line ${line}: ${reason}\n`);
    }
  }
  if (failures > 0) err.write(`${failures} of ${line} lines could not be fingerprinted\n`);
  return failures > 0 ? 1 : 0;
}

async function main(argv, io) {
  const [command, sub, ...rest] = argv;
  if (command === '--version' || command === 'version') {
    if (argv.length > 1) throw new UsageError(`${command} takes no arguments`);
    io.out.write(`${VERSION}\n`);
    return 0;
  }
  if (command === 'rules' && sub === 'table') return table(rest, io.out, io.err);
  if (command === 'rules' && sub === 'verify') return verify(rest, io.out);
  if (command === 'rules' && sub === 'prove') return prove(rest, io.out, io.err);
  if (command === 'rules' && sub === 'graph') return authoring.graph(rest, io.out, loadRuleSet);
  if (command === 'rules' && sub === 'simulate') return authoring.simulate(rest, io.out, loadRuleSet);
  if (command === 'fingerprint') return fingerprints(argv.slice(1), io.input, io.out, io.err);
  if (command === 'outbox' || command === 'receipts') return operatorCommand(command, sub, rest, io);
  if (command === 'help' || command === '--help' || command === '-h') {
    io.out.write(`${USAGE}\n`);
    return 0;
  }
  if (command === 'rules')
    throw new UsageError(sub ? `unknown command: rules ${sub}` : "rules needs 'table', 'verify', 'prove', 'graph' or 'simulate'");
  throw new UsageError(command ? `unknown command: ${command}` : 'no command given');
}

/**
 * `CODE: message`. Messages do not restate their code, and a rule set's says
 * its path once, so this is the whole story on one line.
 */
function describeError(error) {
  return `${error.code}: ${error.message}`;
}

main(process.argv.slice(2), { input: process.stdin, out: process.stdout, err: process.stderr }).then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    if (error instanceof UsageError) {
      process.stderr.write(`idemflow: ${error.message}\nrun 'idemflow help' for usage\n`);
      process.exitCode = 2;
    } else if (error instanceof IdemflowError) {
      process.stderr.write(`idemflow: ${describeError(error)}\n`);
      process.exitCode = 2;
    } else {
      process.stderr.write(`idemflow: ${error?.stack ? error.stack : error}\n`);
      process.exitCode = 3;
    }
  },
);
