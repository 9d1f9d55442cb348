#!/usr/bin/env node
'use strict';
// The idemflow command line: print and verify rule sets, fingerprint events.

const fs = require('node:fs');
const readline = require('node:readline');
const { RuleSet, verifyRuleSet, fingerprint, IdemflowError } = require('../index.cjs');

const USAGE = `usage:
  idemflow rules table <builtin|file.json> [--json]
      print the decision table (built-ins: deposit-swap, order-shipment, subscription;
      name@version for an older one, e.g. deposit-swap@1)
  idemflow rules verify <builtin|file.json> [--json]
      prove the rule set's properties; exit 1 if any fails, 2 if it is malformed
  idemflow fingerprint [--rules <builtin|file.json>]
      read events as NDJSON on stdin, write one fingerprint per input line
      (an empty line for an invalid event, with the reason on stderr; exit 1 then)
  idemflow help`;

const BUILTINS = ['deposit-swap', 'order-shipment', 'subscription'];

class UsageError extends Error {}

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

function flags(args, known) {
  const positional = [];
  const options = {};
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const name = arg.slice(2);
    if (!(name in known)) throw new UsageError(`unknown option ${arg}`);
    if (known[name] === 'value') {
      if (i + 1 >= args.length) throw new UsageError(`${arg} needs a value`);
      options[name] = args[(i += 1)];
    } else {
      options[name] = true;
    }
  }
  return { positional, options };
}

function table(args, out) {
  const { positional, options } = flags(args, { json: 'flag' });
  if (positional.length !== 1) throw new UsageError('rules table takes one rule set');
  const ruleSet = loadRuleSet(positional[0]);
  out.write(options.json ? `${JSON.stringify(ruleSet.table(), null, 2)}\n` : ruleSet.tableMarkdown());
  return 0;
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
      const mark = property.checked?.skipped ? 'n/a ' : property.ok ? 'pass' : 'FAIL';
      out.write(`${mark}  ${property.name}: ${property.description}\n`);
      if (property.checked) out.write(describeChecked(property.checked));
      if (!property.ok) {
        const examples = [property.counterexample, ...(property.moreCounterexamples ?? [])];
        out.write(property.name === 'reorder-safe' ? examples.map(describeReordering).join('') : describeCounterexample(property.counterexample));
      }
    }
    out.write(report.ok ? 'all properties hold\n' : 'verification failed\n');
  }
  return report.ok ? 0 : 1;
}

function describeChecked(checked) {
  if (checked.skipped) return `      not claimed: ${checked.skipped}\n`;
  const races = (checked.races ?? []).map((r) => (Array.isArray(r) ? r : r.between).join(' vs '));
  return [
    `      histories of up to ${checked.bound.events} events (each type at most ${checked.bound.copiesPerType} times): ${checked.histories}, delivery configurations: ${checked.configurations}`,
    `      declared races: ${races.length ? races.join('; ') : 'none'}`,
  ].join('\n') + '\n';
}

/** Two delivery orders of one history and where they part. */
function describeReordering(example) {
  const order = (run) => run.deliveries.map((d, i) => `${i === example.divergesAt ? '>' : ' '} ${d.event}: ${d.from} -> ${d.to} (${d.answer})`);
  const end = (e) => `ends in ${e.status}; operations [${e.emitted.join(', ')}]; errors [${e.answeredWithError.join(', ')}]; undelivered [${e.undelivered.join(', ')}]`;
  return [
    `      history from ${example.start}: ${example.history.join(', ')}${example.races.length ? ` (${example.races.join('; ')})` : ''}`,
    `      ${example.expected.inOrder ? 'in order' : 'one order'}:`,
    ...order(example.expected).map((l) => `       ${l}`),
    `        ${end(example.expected.end)}`,
    '      another order:',
    ...order(example.actual).map((l) => `       ${l}`),
    `        ${end(example.actual.end)}`,
    `      they diverge at delivery ${example.divergesAt + 1}`,
  ].join('\n') + '\n';
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
      lines.push(`      reached by: ${value.steps.map((s) => `${s.event} (${s.from} -> ${s.to})`).join(', ') || `starting in ${value.start}`}`);
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
      out.write('\n');
      continue;
    }
    try {
      out.write(`${fingerprint(JSON.parse(text), { ruleSet })}\n`);
    } catch (error) {
      failures += 1;
      out.write('\n');
      const reason = error instanceof IdemflowError ? `${error.code}: ${error.message}` : `not JSON: ${error.message}`;
      err.write(`line ${line}: ${reason}\n`);
    }
  }
  if (failures > 0) err.write(`${failures} of ${line} lines could not be fingerprinted\n`);
  return failures > 0 ? 1 : 0;
}

async function main(argv, io) {
  const [command, sub, ...rest] = argv;
  if (command === 'rules' && sub === 'table') return table(rest, io.out);
  if (command === 'rules' && sub === 'verify') return verify(rest, io.out);
  if (command === 'fingerprint') return fingerprints(argv.slice(1), io.input, io.out, io.err);
  if (command === 'help' || command === '--help' || command === '-h') {
    io.out.write(`${USAGE}\n`);
    return 0;
  }
  throw new UsageError(command ? `unknown command: ${argv.join(' ')}` : 'no command given');
}

main(process.argv.slice(2), { input: process.stdin, out: process.stdout, err: process.stderr }).then(
  (code) => { process.exitCode = code; },
  (error) => {
    if (error instanceof UsageError) {
      process.stderr.write(`idemflow: ${error.message}\n${USAGE}\n`);
      process.exitCode = 2;
    } else if (error instanceof IdemflowError) {
      const where = error.details && error.details.path ? ` at ${error.details.path}` : '';
      process.stderr.write(`idemflow: ${error.code}${where}: ${error.message}\n`);
      process.exitCode = 2;
    } else {
      process.stderr.write(`idemflow: ${error && error.stack ? error.stack : error}\n`);
      process.exitCode = 3;
    }
  },
);
