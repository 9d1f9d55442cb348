'use strict';
// Checks on what a host hands to the public API: option objects hold only
// known keys (a misspelt key would otherwise be ignored and its default kept
// without a word), and a store is handed its own driver's client (another
// driver's client would be accepted and fail only at its first statement).

const { IdemflowError, fromWasm } = require('./errors.cjs');

/** Levenshtein distance: how far a misspelt key is from a known one. */
function editDistance(a, b) {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const current = [i];
    for (let j = 1; j <= b.length; j += 1) {
      const substitution = previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min(previous[j] + 1, current[j - 1] + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length];
}

/** The known key nearest to `key` (case ignored when measuring). */
function nearest(key, known) {
  let best = null;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/**
 * Throws INVALID_ARGUMENT (fatal: the calling code is wrong, retrying cannot
 * help) when `options` has an own key outside `known`, naming the key and the
 * nearest known one. Anything that is not an object is left to the caller's
 * own checks.
 * @param {unknown} options
 * @param {readonly string[]} known
 * @param {string} where the call the options belong to, for the message
 */
function checkOptionKeys(options, known, where) {
  if (options === null || typeof options !== 'object') return;
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const suggestion = nearest(key, known);
    const hint = suggestion === null ? '' : ` (did you mean "${suggestion}"?)`;
    throw new IdemflowError('INVALID_ARGUMENT', `${where}: unknown option "${key}"${hint}`, {
      disposition: 'fatal',
      details: { field: key, reason: 'unknown option', suggestion, known: [...known] },
    });
  }
}

function has(value, method) {
  try {
    return typeof value[method] === 'function';
  } catch {
    return false;
  }
}

/**
 * Which driver a database handle belongs to, told by the methods each
 * driver's objects have: `{ driver, label }`, driver null when unknown.
 * @returns {{ driver: 'pg' | 'mysql2' | 'sqlite' | 'mongodb' | null, label: string }}
 */
function identifyHandle(value) {
  if (value === null) return { driver: null, label: 'null' };
  if (typeof value !== 'object') {
    return {
      driver: null,
      label: typeof value === 'string' ? 'a string' : typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`,
    };
  }
  if (has(value, 'startSession') && has(value, 'db')) return { driver: 'mongodb', label: 'a MongoClient' };
  if (has(value, 'collection') && has(value, 'command')) return { driver: 'mongodb', label: 'a MongoDB Db' };
  if (has(value, 'getConnection') && has(value, 'query')) return { driver: 'mysql2', label: 'a mysql2 Pool' };
  if (has(value, 'beginTransaction') && has(value, 'execute')) return { driver: 'mysql2', label: 'a mysql2 Connection' };
  if (has(value, 'prepare') && has(value, 'pragma')) return { driver: 'sqlite', label: 'a better-sqlite3 Database' };
  if (has(value, 'prepare') && has(value, 'exec') && !has(value, 'query')) return { driver: 'sqlite', label: 'a node:sqlite DatabaseSync' };
  if (has(value, 'query') && has(value, 'transaction') && has(value, 'exec')) return { driver: 'pg', label: 'a PGlite instance' };
  if (has(value, 'query') && has(value, 'connect') && typeof value.totalCount === 'number') return { driver: 'pg', label: 'a pg Pool' };
  if (has(value, 'query') && has(value, 'connect') && typeof value._connecting === 'boolean') return { driver: 'pg', label: 'a pg Client' };
  let name = null;
  try {
    name = Object.getPrototypeOf(value)?.constructor?.name ?? null;
  } catch {
    // A proxy may throw here; the plain label will do.
  }
  if (Array.isArray(value)) return { driver: null, label: 'an array' };
  return { driver: null, label: typeof name === 'string' && name !== '' && name !== 'Object' ? `a ${name}` : 'an object' };
}

/**
 * Throws INVALID_ARGUMENT when `value` is recognisably another driver's
 * handle, naming what was passed; `accepts(value)` decides for the rest.
 */
function checkHandle(value, driver, accepts, needs) {
  const found = identifyHandle(value);
  if ((found.driver !== null && found.driver !== driver) || !accepts(value)) {
    throw new IdemflowError('INVALID_ARGUMENT', `${needs}, not ${found.label}`, {
      disposition: 'fatal',
      details: { reason: 'wrong driver', passed: found.label, driver: found.driver },
    });
  }
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
  // Every entry point takes at most two arguments: passed as such, not gathered into an array per call.
  return function idemflowEntry(first, second) {
    try {
      return fn.call(this, first, second);
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

/**
 * A plain copy of an options object, read as events are: its own keys
 * (each one known, see checkOptionKeys), each read once. A proxy trap or a
 * getter that throws is INVALID_ARGUMENT naming what could not be read, with
 * the original as `cause`; undefined and null are no options. Anything else
 * that is not an object is INVALID_ARGUMENT.
 * @param {unknown} options
 * @param {readonly string[]} known
 * @param {string} where
 * @returns {Record<string, unknown>}
 */
function optionsOf(options, known, where) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object') {
    throw new IdemflowError('INVALID_ARGUMENT', `${where}: options must be an object`, { details: { reason: 'options not an object' } });
  }
  let keys;
  try {
    keys = Object.keys(options);
  } catch (cause) {
    const reason = `options cannot be read: ${messageOf(cause)}`;
    throw new IdemflowError('INVALID_ARGUMENT', `${where}: ${reason}`, { details: { reason }, cause });
  }
  const copy = {};
  for (const key of keys) {
    if (!known.includes(key)) checkOptionKeys({ [key]: true }, known, where);
    copy[key] = member(options, key);
  }
  return copy;
}

/**
 * The one rule of each numeric option that several entry points take, so an
 * option means the same wherever it enters: raceRetries in the store's
 * options, processEvent's, processBatch's, the delivery handler's and
 * idempotent()'s.
 */
const NUMERIC_OPTIONS = Object.freeze({
  // How many more times a delivery whose transaction lost a race runs (each within the call's deadline).
  raceRetries: Object.freeze({ min: 0, max: 100 }),
});

/**
 * `value` of the numeric option `name` (NUMERIC_OPTIONS), checked by its one
 * rule: undefined when not given, else a whole number within its bounds or
 * INVALID_ARGUMENT (fatal: the calling code is wrong) naming the field and
 * the bounds.
 */
function numericOption(name, value) {
  const { min, max } = NUMERIC_OPTIONS[name];
  return wholeNumberOr(value, undefined, name, min, max);
}

/**
 * `value`, a whole number from `min` to `max`, or INVALID_ARGUMENT (fatal)
 * naming `field` and the bounds: the one check of an integer argument or
 * option in the package.
 */
function wholeNumber(value, field, min = 0, max = Number.MAX_SAFE_INTEGER) {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    const upTo = max === Number.MAX_SAFE_INTEGER ? '2^53 - 1' : String(max);
    throw new IdemflowError('INVALID_ARGUMENT', `${field} must be a whole number from ${min} to ${upTo}`, {
      disposition: 'fatal',
      details: { field, reason: 'out of range', min, max },
    });
  }
  return value;
}

/** wholeNumber(value, …), or `fallback` when the value is not given (undefined). */
function wholeNumberOr(value, fallback, field, min = 0, max = Number.MAX_SAFE_INTEGER) {
  return value === undefined ? fallback : wholeNumber(value, field, min, max);
}

module.exports = { optionsOf, checkOptionKeys, checkHandle, entry, member, messageOf, numericOption, wholeNumber, wholeNumberOr };
