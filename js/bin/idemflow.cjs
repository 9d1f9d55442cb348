#!/usr/bin/env node
'use strict';
// The idemflow command line: print and verify rule sets, fingerprint events.

const fs = require('node:fs');
const readline = require('node:readline');
const { RuleSet, verifyRuleSet, fingerprint, IdemflowError } = require('../index.cjs');

const USAGE = `usage:
  idemflow rules table <builtin|file.json> [--json]
      print the decision table (built-ins: deposit-swap, order-shipment)
  idemflow rules verify <builtin|file.json> [--json]
      prove the rule set's properties; exit 1 if any fails, 2 if it is malformed
  idemflow fingerprint [--rules <builtin|file.json>]
      read events as NDJSON on stdin, write one fingerprint per input line
      (an empty line for an invalid event, with the reason on stderr; exit 1 then)
  idemflow help`;

const BUILTINS = ['deposit-swap', 'order-shipment'];

class UsageError extends Error {}

function readDefinition(source) {
  if (BUILTINS.includes(source)) return RuleSet.builtin(source).definition();
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
  return BUILTINS.includes(source) ? RuleSet.builtin(source) : RuleSet.fromJSON(readDefinition(source));
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
    out.write(`rule set ${id} v${version} (${hash})\nexplored ${report.statesExplored} states\n`);
    for (const property of report.properties) {
      out.write(`${property.ok ? 'pass' : 'FAIL'}  ${property.name}: ${property.description}\n`);
      if (!property.ok) out.write(describeCounterexample(property.counterexample));
    }
    out.write(report.ok ? 'all properties hold\n' : 'verification failed\n');
  }
  return report.ok ? 0 : 1;
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
