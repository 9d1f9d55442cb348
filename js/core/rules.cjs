'use strict';
// Rule sets: built-in ones and definitions a host loads, compiled once in the
// wasm core and held there, with a bounded cache of loaded definitions.

const { IdemflowError } = require('./errors.cjs');
const { checkOptionKeys, entry } = require('./options.cjs');
const { bindings: wasm, call, freeWhenIdle } = require('./wasm.cjs');

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

function compile(text, proof) {
  if (proof === undefined) return call(() => wasm.loadRuleSet(text));
  return call(() => wasm.loadRuleSetWithProof(text, proofText(proof)));
}

/** A proof record (`idemflow rules prove`) as the core reads it: its JSON text. */
function proofText(proof) {
  if (typeof proof === 'string') return proof;
  if (proof !== null && typeof proof === 'object' && !Array.isArray(proof)) return JSON.stringify(proof);
  throw new IdemflowError('INVALID_ARGUMENT', 'proof must be the record `idemflow rules prove` writes (an object or its JSON text)', {
    details: { field: 'proof', reason: 'must be an object' },
  });
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
      const loaded = new RuleSet(
        CREATE,
        call(() => wasm.builtinRuleSet(name, version)),
        undefined,
      );
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
   * The same definition is compiled once per process. With `{ proof }`, the
   * record `idemflow rules prove` wrote for this definition, nothing is
   * proven again (a record of another definition is INVALID_ARGUMENT).
   */
  static fromJSON(definition, options = {}) {
    checkOptionKeys(options ?? {}, ['proof'], 'RuleSet.fromJSON');
    const text = definitionText(definition);
    const cached = loaded.get(text);
    // A compiled definition was proven; a record given for it must still be its own.
    if (cached !== undefined && options?.proof !== undefined) compile(text, options.proof).free();
    const ruleSet = cached ?? new RuleSet(CREATE, compile(text, options?.proof), text);
    remember(text, ruleSet);
    return ruleSet;
  }

  get id() {
    return this.#summary.id;
  }
  get version() {
    return this.#summary.version;
  }
  /** `sha256:` + hex SHA-256 of the definition's RFC 8785 canonical JSON. */
  get hash() {
    return this.#summary.hash;
  }

  /** The decision table, one row per rule and event type. */
  table() {
    this.#table ??= JSON.parse(this.#compiled.tableJson());
    return structuredClone(this.#table);
  }

  /** The operation types this rule set's rules can emit, sorted (the core's answer). */
  operationTypes() {
    return JSON.parse(this.#compiled.emittedTypesJson());
  }

  /** The decision table as Markdown, as the README and the CLI show it. */
  tableMarkdown() {
    return this.#compiled.tableMarkdown();
  }

  /** The state diagram as Mermaid or DOT text (graph.cjs). */
  graph(options) {
    return require('./graph.cjs').ruleSetGraph(this, options);
  }

  /** The definition this rule set was loaded from. */
  definition() {
    return JSON.parse(this.#compiled.definitionJson());
  }

  toJSON() {
    return this.definition();
  }

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
      details: { path: '$', reason: cause.message },
      cause,
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

for (const name of ['builtin', 'fromJSON']) {
  Object.defineProperty(RuleSet, name, { value: entry(RuleSet[name]), writable: false, enumerable: false, configurable: false });
}

/**
 * `{ proofsRun, provenRemembered }` of this process's core: a definition is
 * proven once, and compiling it again (after the cache above evicted it)
 * does not prove it again.
 */
function proofStats() {
  return JSON.parse(wasm.proofStatsJson());
}

module.exports = { RuleSet, resolveRuleSet, definitionText, proofStats };
