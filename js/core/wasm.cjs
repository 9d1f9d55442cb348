'use strict';
// The one route to the WebAssembly core: the only file of the package that
// loads the generated module. Every call goes through call(), which turns
// what the core threw into an IdemflowError, and frees compiled rule sets the
// cache evicted during a call once the outermost call has returned.

const bindings = require('../wasm/idemflow.js');
const { fromWasm } = require('./errors.cjs');
const { createDecider } = require('./packed.cjs');

// Compiled rule sets the cache evicted while a wasm call was running. A
// getter on an event can load rule sets in the middle of a decision; freeing
// the rules that decision is using would make wasm-bindgen throw (it keeps
// them alive, but refuses the free), so frees wait for the outermost call.
let callDepth = 0;
const evicted = [];

/** fn() (a call into the core), its errors as IdemflowErrors. */
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

/** Frees a compiled value now, or after the running call when one is running. */
function freeWhenIdle(compiled) {
  if (callDepth > 0) evicted.push(compiled);
  else compiled.free();
}

// The decider over these bindings (packed.cjs takes them; it loads nothing
// itself), made at its first use: its regions live in wasm memory.
let theDecider;

/** The module's one decider (see packed.cjs). */
function decider() {
  theDecider ??= createDecider(bindings);
  return theDecider;
}

module.exports = { bindings, call, freeWhenIdle, decider };
