'use strict';
// The pure entry points of the core: validation, fingerprints, decisions and
// rule set proofs. Every decision is made in Rust; this file converts values.

const { IdemflowError } = require('./errors.cjs');
const { checkOptionKeys, entry, member } = require('./options.cjs');
const { resolveRuleSet, definitionText, RuleSet } = require('./rules.cjs');
const { bindings: wasm, call, decider } = require('./wasm.cjs');

const RULE_SET_OPTION = Object.freeze(['ruleSet']);
const NORMALIZE_OPTIONS = Object.freeze(['ruleSet', 'type']);
const DECIDE_INPUT = Object.freeze(['event', 'receipt', 'workflow', 'ruleSet']);

/** Throws INVALID_EVENT (with details.field) unless `event` is valid under the rule set. */
function validateEvent(event, opts) {
  checkOptionKeys(opts, RULE_SET_OPTION, 'validateEvent');
  const ruleSet = resolveRuleSet(member(opts, 'ruleSet'));
  call(() => decider().validate(ruleSet.compiled, event));
}

/** A validated plain copy of the event: only its own members and declared fields. */
function normalizeEvent(event, opts) {
  checkOptionKeys(opts, NORMALIZE_OPTIONS, 'normalizeEvent');
  const compiled = resolveRuleSet(member(opts, 'ruleSet')).compiled;
  const type = member(opts, 'type');
  if (type !== undefined && typeof type !== 'string') {
    throw new IdemflowError('INVALID_ARGUMENT', 'type must be a string', { details: { reason: 'type must be a string' } });
  }
  return call(() => decider().normalize(compiled, event, type));
}

/** `fp1:` + hex SHA-256 of the canonical JSON of what the event means. */
function fingerprint(event, opts) {
  checkOptionKeys(opts, RULE_SET_OPTION, 'fingerprint');
  const ruleSet = resolveRuleSet(member(opts, 'ruleSet'));
  return call(() => decider().fingerprint(ruleSet.compiled, event));
}

/**
 * The pure decision: the outcome and the write set to commit atomically.
 * `receipt` is the inbox row stored for event.eventId (or null), `workflow`
 * the stored workflow (or null).
 */
function decide(input) {
  checkOptionKeys(input, DECIDE_INPUT, 'decide');
  const event = member(input, 'event', 'INVALID_EVENT');
  const receipt = member(input, 'receipt') ?? null;
  const workflow = member(input, 'workflow') ?? null;
  const compiled = resolveRuleSet(member(input, 'ruleSet')).compiled;
  return call(() => decider().decide(compiled, event, receipt, workflow));
}

/**
 * The host loops' decision of an event normalizeEvent has already validated
 * (a plain copy of data properties): no option checks. Its errors are decide's.
 */
function decideNormalized(compiled, event, receipt, workflow) {
  return call(() => decider().decide(compiled, event, receipt ?? null, workflow ?? null));
}

/**
 * decideNormalized for many events at once (processBatch), one call to the
 * core: `[{ event, receipt, workflow }]` in, per input its decision or
 * `{ error }` (an IdemflowError) out, in order.
 */
function decideNormalizedBatch(compiled, inputs) {
  return call(() => decider().decideBatch(compiled, inputs));
}

/** The seed's planning step for DEPOSIT_CONFIRMED: 'advance' or 'already-applied'. */
function planDepositConfirmation(workflow, event) {
  return call(() => decider().plan(workflow, event));
}

/**
 * Explores every reachable state of a definition and reports each property
 * with a counterexample where it fails. Throws RULESET_INVALID only when the
 * definition is malformed.
 */
function verifyRuleSet(definition) {
  if (definition instanceof RuleSet) definition = definition.definition();
  const text = definitionText(definition);
  const started = performance.now();
  const report = JSON.parse(call(() => wasm.verifyRuleSet(text)));
  report.elapsedMs = Math.round((performance.now() - started) * 100) / 100;
  return report;
}

/**
 * Proves a definition and returns its proof record, for
 * `RuleSet.fromJSON(definition, { proof })`; a definition that fails a
 * property throws RULESET_INVALID with the report.
 */
function proveRuleSet(definition) {
  if (definition instanceof RuleSet) definition = definition.definition();
  return JSON.parse(call(() => wasm.proveRuleSet(definitionText(definition))));
}

/**
 * The decision table of a definition that may fail verification, laid out
 * by the core as RuleSet#table() and #tableMarkdown() are (a pair two rules
 * claim shows both, a pair no rule answers shows nothing): for inspecting a
 * draft. Throws RULESET_INVALID (with details.path) when it is malformed.
 */
function draftTable(definition) {
  const { id, version, hash, rows, markdown } = JSON.parse(call(() => wasm.draftTableJson(definitionText(definition))));
  return { ruleSet: { id, version, hash }, rows, markdown };
}

module.exports = {
  draftTable: entry(draftTable),
  validateEvent: entry(validateEvent),
  normalizeEvent: entry(normalizeEvent),
  fingerprint: entry(fingerprint),
  decide: entry(decide),
  planDepositConfirmation: entry(planDepositConfirmation),
  verifyRuleSet: entry(verifyRuleSet),
  proveRuleSet: entry(proveRuleSet),
  decideNormalized,
  decideNormalizedBatch,
};
