'use strict';
// The idiomatic JS face of the wasm core. Every decision is made in Rust;
// this file converts values and errors and caches compiled rule sets.

const wasm = require('./wasm/idemflow.js');
const { IdemflowError, fromWasm } = require('./errors.cjs');

function call(fn) {
  try {
    return fn();
  } catch (thrown) {
    throw fromWasm(thrown);
  }
}

const builtins = new Map();
const loaded = new Map();
const MAX_LOADED = 64;
const CREATE = Symbol('RuleSet.create');

/** A verified rule set, compiled once and held in wasm memory. */
class RuleSet {
  #compiled;
  #table;

  constructor(token, compiled) {
    if (token !== CREATE) {
      throw new TypeError('use RuleSet.builtin(name) or RuleSet.fromJSON(definition)');
    }
    this.#compiled = compiled;
    Object.freeze(this);
  }

  /**
   * A rule set that ships with idemflow: 'deposit-swap' or 'order-shipment', at
   * its current version, or at `{ version }` (older versions stay loadable to
   * audit the receipts they wrote).
   */
  static builtin(name, { version } = {}) {
    if (version !== undefined && typeof version !== 'number') {
      throw new IdemflowError('INVALID_ARGUMENT', `version must be a number, not ${typeof version}`, {
        details: { reason: 'version must be a number' },
      });
    }
    const key = version === undefined ? String(name) : `${name}@${version}`;
    let ruleSet = builtins.get(key);
    if (!ruleSet) {
      const loaded = new RuleSet(CREATE, call(() => wasm.builtinRuleSet(String(name), version)));
      // One object per version, however it was asked for.
      const exact = `${name}@${loaded.version}`;
      ruleSet = builtins.get(exact) ?? loaded;
      builtins.set(exact, ruleSet);
      builtins.set(key, ruleSet);
    }
    return ruleSet;
  }

  /**
   * Loads a definition (an object or its JSON text), checks it and proves its
   * properties; a definition that fails any of them throws RULESET_INVALID.
   * The same definition is compiled once per process.
   */
  static fromJSON(definition) {
    const text = definitionText(definition);
    let ruleSet = loaded.get(text);
    if (!ruleSet) {
      ruleSet = new RuleSet(CREATE, call(() => wasm.loadRuleSet(text)));
      if (loaded.size >= MAX_LOADED) loaded.delete(loaded.keys().next().value);
      loaded.set(text, ruleSet);
    }
    return ruleSet;
  }

  get id() { return this.#compiled.id; }
  get version() { return this.#compiled.version; }
  /** `sha256:` + hex SHA-256 of the definition's RFC 8785 canonical JSON. */
  get hash() { return this.#compiled.hash; }

  /** The decision table, one row per rule and event type. */
  table() {
    this.#table ??= JSON.parse(this.#compiled.tableJson());
    return structuredClone(this.#table);
  }

  /** The decision table as Markdown, as the README and the CLI show it. */
  tableMarkdown() { return this.#compiled.tableMarkdown(); }

  /** The definition this rule set was loaded from. */
  definition() { return JSON.parse(this.#compiled.definitionJson()); }

  toJSON() { return this.definition(); }

  /** @internal */
  get compiled() { return this.#compiled; }
}

function definitionText(definition) {
  if (typeof definition === 'string') return definition;
  try {
    const text = JSON.stringify(definition);
    if (typeof text === 'string') return text;
  } catch (cause) {
    throw new IdemflowError('RULESET_INVALID', `rule set definition cannot be serialised: ${cause.message}`, {
      details: { path: '$', reason: cause.message }, cause,
    });
  }
  throw new IdemflowError('RULESET_INVALID', 'rule set definition must be an object or JSON text', {
    details: { path: '$', reason: 'must be an object' },
  });
}

function resolveRuleSet(ruleSet) {
  if (ruleSet === undefined || ruleSet === null) return RuleSet.builtin('deposit-swap');
  if (ruleSet instanceof RuleSet) return ruleSet;
  if (typeof ruleSet === 'string') return RuleSet.builtin(ruleSet);
  throw new IdemflowError('INVALID_ARGUMENT', 'ruleSet must be a RuleSet or the name of a built-in rule set', {
    details: { reason: 'ruleSet must be a RuleSet' },
  });
}

function options(value) {
  return value !== null && typeof value === 'object' ? value : {};
}

/** Throws INVALID_EVENT (with details.field) unless `event` is valid under the rule set. */
function validateEvent(event, opts) {
  const ruleSet = resolveRuleSet(options(opts).ruleSet);
  call(() => wasm.validateEvent(ruleSet.compiled, event));
}

/** A validated plain copy of the event: only its own members and declared fields. */
function normalizeEvent(event, opts) {
  const { ruleSet, type } = options(opts);
  const compiled = resolveRuleSet(ruleSet).compiled;
  return JSON.parse(call(() => wasm.normalizeEvent(compiled, event, type)));
}

/** `fp1:` + hex SHA-256 of the canonical JSON of what the event means. */
function fingerprint(event, opts) {
  const ruleSet = resolveRuleSet(options(opts).ruleSet);
  return call(() => wasm.fingerprint(ruleSet.compiled, event));
}

/**
 * The pure decision: the outcome and the write set to commit atomically.
 * `receipt` is the inbox row stored for event.eventId (or null), `workflow`
 * the stored workflow (or null).
 */
function decide(input) {
  const { event, receipt = null, workflow = null, ruleSet } = options(input);
  const compiled = resolveRuleSet(ruleSet).compiled;
  return JSON.parse(call(() => wasm.decide(compiled, event, receipt, workflow)));
}

/** The same decision from JSON text `{"event":…,"receipt":…,"workflow":…}`, for hot loops. */
function decideJSON(text, opts) {
  const compiled = resolveRuleSet(options(opts).ruleSet).compiled;
  if (typeof text !== 'string') {
    throw new IdemflowError('INVALID_ARGUMENT', 'decideJSON takes JSON text', { details: { reason: 'not a string' } });
  }
  return JSON.parse(call(() => wasm.decideJson(compiled, text)));
}

/** The seed's planning step for DEPOSIT_CONFIRMED: 'advance' or 'already-applied'. */
function planDepositConfirmation(workflow, event) {
  return call(() => wasm.planDepositConfirmation(workflow, event));
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

module.exports = {
  RuleSet,
  resolveRuleSet,
  validateEvent,
  normalizeEvent,
  fingerprint,
  decide,
  decideJSON,
  planDepositConfirmation,
  verifyRuleSet,
  wasmMemoryBytes: () => wasm.memoryBytes(),
};
