'use strict';
// The idiomatic JS face of the wasm core. Every decision is made in Rust;
// this file converts values and errors and caches compiled rule sets.

const { checkOptionKeys } = require('./options.cjs');
const wasm = require('./wasm/idemflow.js');
const { IdemflowError, fromWasm } = require('./errors.cjs');

// Compiled rule sets the cache evicted while a wasm call was running. A
// getter on an event can load rule sets in the middle of a decision; freeing
// the rules that decision is using would make wasm-bindgen throw (it keeps
// them alive, but refuses the free), so frees wait for the outermost call.
let callDepth = 0;
const evicted = [];

function call(fn) {
  callDepth += 1;
  try {
    return fn();
  } catch (thrown) {
    throw fromWasm(thrown);
  } finally {
    callDepth -= 1;
    if (callDepth === 0) {
      while (evicted.length > 0) evicted.pop().free();
    }
  }
}

function freeWhenIdle(compiled) {
  if (callDepth > 0) evicted.push(compiled);
  else compiled.free();
}

const hasOwn = Object.hasOwn;

/** A message read from anything thrown, without letting a hostile value throw again. */
function messageOf(thrown) {
  try {
    if (typeof thrown === 'string') return thrown.slice(0, 200);
    const message = thrown !== null && typeof thrown === 'object' ? thrown.message : undefined;
    return typeof message === 'string' ? message.slice(0, 200) : 'a value without a message was thrown';
  } catch {
    return 'a value that cannot be inspected was thrown';
  }
}

/**
 * A public entry point that answers every input with a result or an
 * IdemflowError. What else can throw here comes from the caller's values (a
 * getter, a proxy trap, a toJSON): it becomes INVALID_ARGUMENT with the
 * original as `cause`. A WebAssembly.RuntimeError is a bug in idemflow, not
 * an input, and is not disguised as one.
 */
function entry(fn) {
  return function idemflowEntry(...args) {
    try {
      return fn.apply(this, args);
    } catch (thrown) {
      const coded = fromWasm(thrown);
      if (coded instanceof IdemflowError || coded instanceof WebAssembly.RuntimeError) throw coded;
      const reason = `an argument could not be read: ${messageOf(thrown)}`;
      throw new IdemflowError('INVALID_ARGUMENT', reason, { details: { reason }, cause: thrown });
    }
  };
}

/**
 * An own member of an options object: an inherited one (say a polluted
 * `Object.prototype.workflow`) is absent. A getter that throws is reported
 * with `code` (INVALID_EVENT names the member as the field).
 */
function member(value, key, code = 'INVALID_ARGUMENT') {
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return undefined;
  try {
    return hasOwn(value, key) ? value[key] : undefined;
  } catch (cause) {
    const reason = `cannot be read: ${messageOf(cause)}`;
    const details = code === 'INVALID_EVENT' ? { field: key, reason } : { reason: `${key} ${reason}` };
    throw new IdemflowError(code, `${key} ${reason}`, { details, cause });
  }
}

const builtins = new Map();
/**
 * Definition text -> the RuleSet loaded from it, least recently used first.
 * The cache is the only owner of a loaded rule set's wasm memory: when it
 * evicts one it frees the compiled rules at once (the collector may not run
 * for a long time, and 40,000 loads held 360 MiB). The RuleSet object a user
 * holds keeps its definition text and compiles it again on its next use, so
 * an evicted RuleSet never points at freed memory.
 */
const loaded = new Map();
const MAX_LOADED = 64;
const CREATE = Symbol('RuleSet.create');

function compile(text) {
  return call(() => wasm.loadRuleSet(text));
}

/** Puts `ruleSet` last (most recently used), freeing the oldest past MAX_LOADED. */
function remember(text, ruleSet) {
  const previous = loaded.get(text);
  loaded.delete(text);
  // An evicted RuleSet compiling again while a newer one holds its text: one
  // owner per text, so the newer one gives its memory back.
  if (previous !== undefined && previous !== ruleSet) previous.release();
  loaded.set(text, ruleSet);
  while (loaded.size > MAX_LOADED) {
    const [oldestText, oldest] = loaded.entries().next().value;
    loaded.delete(oldestText);
    oldest.release();
  }
}

/** A verified rule set, compiled once and held in wasm memory. */
class RuleSet {
  #compiled;
  #text;
  #summary;
  #table;

  constructor(token, compiled, text) {
    if (token !== CREATE) {
      throw new TypeError('use RuleSet.builtin(name) or RuleSet.fromJSON(definition)');
    }
    this.#compiled = compiled;
    this.#text = text;
    this.#summary = Object.freeze({ id: compiled.id, version: compiled.version, hash: compiled.hash });
    Object.freeze(this);
  }

  /**
   * A rule set that ships with idemflow: 'deposit-swap' or 'order-shipment', at
   * its current version, or at `{ version }` (older versions stay loadable to
   * audit the receipts they wrote).
   */
  static builtin(name, options = {}) {
    checkOptionKeys(options ?? {}, ['version'], 'RuleSet.builtin');
    const { version } = options ?? {};
    if (version !== undefined && typeof version !== 'number') {
      throw new IdemflowError('INVALID_ARGUMENT', `version must be a number, not ${typeof version}`, {
        details: { reason: 'version must be a number' },
      });
    }
    const key = version === undefined ? String(name) : `${name}@${version}`;
    let ruleSet = builtins.get(key);
    if (!ruleSet) {
      if (typeof name !== 'string') {
        throw new IdemflowError('INVALID_ARGUMENT', 'a built-in rule set is named by a string', {
          details: { reason: 'name must be a string' },
        });
      }
      const loaded = new RuleSet(CREATE, call(() => wasm.builtinRuleSet(name, version)), undefined);
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
    const ruleSet = loaded.get(text) ?? new RuleSet(CREATE, compile(text), text);
    remember(text, ruleSet);
    return ruleSet;
  }

  get id() { return this.#summary.id; }
  get version() { return this.#summary.version; }
  /** `sha256:` + hex SHA-256 of the definition's RFC 8785 canonical JSON. */
  get hash() { return this.#summary.hash; }

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

  /**
   * @internal The compiled rules, compiled again (and cached again) when the
   * cache evicted them: the text loaded once, so it loads again.
   */
  get compiled() {
    if (this.#compiled === null) {
      this.#compiled = compile(this.#text);
      remember(this.#text, this);
    }
    return this.#compiled;
  }

  /** @internal Frees the compiled rules (only the cache calls this), once no wasm call is running. */
  release() {
    if (this.#text === undefined || this.#compiled === null) return;
    const compiled = this.#compiled;
    this.#compiled = null;
    freeWhenIdle(compiled);
  }
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

/** Throws INVALID_EVENT (with details.field) unless `event` is valid under the rule set. */
function validateEvent(event, opts) {
  checkOptionKeys(opts, ['ruleSet'], 'validateEvent');
  const ruleSet = resolveRuleSet(member(opts, 'ruleSet'));
  call(() => wasm.validateEvent(ruleSet.compiled, event));
}

/** A validated plain copy of the event: only its own members and declared fields. */
function normalizeEvent(event, opts) {
  checkOptionKeys(opts, ['ruleSet', 'type'], 'normalizeEvent');
  const compiled = resolveRuleSet(member(opts, 'ruleSet')).compiled;
  const type = member(opts, 'type');
  if (type !== undefined && typeof type !== 'string') {
    throw new IdemflowError('INVALID_ARGUMENT', 'type must be a string', { details: { reason: 'type must be a string' } });
  }
  return JSON.parse(call(() => wasm.normalizeEvent(compiled, event, type)));
}

/** `fp1:` + hex SHA-256 of the canonical JSON of what the event means. */
function fingerprint(event, opts) {
  checkOptionKeys(opts, ['ruleSet'], 'fingerprint');
  const ruleSet = resolveRuleSet(member(opts, 'ruleSet'));
  return call(() => wasm.fingerprint(ruleSet.compiled, event));
}

/**
 * The pure decision: the outcome and the write set to commit atomically.
 * `receipt` is the inbox row stored for event.eventId (or null), `workflow`
 * the stored workflow (or null).
 */
function decide(input) {
  checkOptionKeys(input, ['event', 'receipt', 'workflow', 'ruleSet'], 'decide');
  const event = member(input, 'event', 'INVALID_EVENT');
  const receipt = member(input, 'receipt') ?? null;
  const workflow = member(input, 'workflow') ?? null;
  const compiled = resolveRuleSet(member(input, 'ruleSet')).compiled;
  return JSON.parse(call(() => wasm.decide(compiled, event, receipt, workflow)));
}

/** The same decision from JSON text `{"event":…,"receipt":…,"workflow":…}`, for hot loops. */
function decideJSON(text, opts) {
  checkOptionKeys(opts, ['ruleSet'], 'decideJSON');
  const compiled = resolveRuleSet(member(opts, 'ruleSet')).compiled;
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

for (const name of ['builtin', 'fromJSON']) {
  Object.defineProperty(RuleSet, name, { value: entry(RuleSet[name]), writable: false, enumerable: false, configurable: false });
}

module.exports = {
  RuleSet,
  resolveRuleSet,
  validateEvent: entry(validateEvent),
  normalizeEvent: entry(normalizeEvent),
  fingerprint: entry(fingerprint),
  decide: entry(decide),
  decideJSON: entry(decideJSON),
  planDepositConfirmation: entry(planDepositConfirmation),
  verifyRuleSet: entry(verifyRuleSet),
  wasmMemoryBytes: () => wasm.memoryBytes(),
};
