'use strict';
// The host's own writes in idemflow's transaction: `onApplied(tx, decision)`
// runs when a decision is applied, inside the transaction that commits the
// receipt, the compare-and-set and the outbox rows, before the commit. What
// it returns is the delivery's output: a JSON value kept in the receipt's
// result, answered as `output` now and as `original.output` to every later
// duplicate of the event id. If it throws, the transaction rolls back.

const { IdemflowError } = require('../core/errors.cjs');
const { messageOf } = require('../core/options.cjs');

/** The most an output may take as JSON text (UTF-8 bytes): a shipment id, a row's key, a small record. */
const MAX_OUTPUT_BYTES = 16 * 1024;
const MAX_OUTPUT_DEPTH = 64;

/** `onApplied` of a call's options: a function, or undefined. */
function appliedHookOf(onApplied) {
  if (onApplied !== undefined && typeof onApplied !== 'function') {
    throw new IdemflowError('INVALID_ARGUMENT', 'onApplied must be a function (tx, decision) => output', {
      details: { field: 'onApplied', reason: 'not a function' },
    });
  }
  return onApplied;
}

function badOutput(reason) {
  return new IdemflowError('INVALID_ARGUMENT', `onApplied returned what cannot be kept as its output: ${reason}`, {
    details: { field: 'output', reason },
  });
}

/**
 * A plain copy of a JSON value: null, a boolean, a finite number, a
 * well-formed string, an array or a plain object of those (no functions,
 * symbols, BigInts, cycles, class instances such as Date or Map, getters
 * run more than once). Anything else is a fatal INVALID_ARGUMENT: the
 * handler is wrong, and retrying cannot change what it returns.
 */
function jsonCopy(value, depth, seen) {
  switch (typeof value) {
    case 'string':
      if (!value.isWellFormed()) throw badOutput('a string with a lone surrogate');
      return value;
    case 'boolean':
      return value;
    case 'number':
      if (!Number.isFinite(value)) throw badOutput(`a number that is not finite (${value})`);
      return value;
    case 'object': {
      if (value === null) return null;
      if (depth > MAX_OUTPUT_DEPTH) throw badOutput(`nested deeper than ${MAX_OUTPUT_DEPTH}`);
      if (seen.has(value)) throw badOutput('a cycle');
      seen.add(value);
      let copy;
      if (Array.isArray(value)) {
        copy = Array.from({ length: value.length }, (_, i) => jsonCopy(value[i], depth + 1, seen));
      } else {
        const prototype = Object.getPrototypeOf(value);
        if (prototype !== Object.prototype && prototype !== null)
          throw badOutput('an object that is not a plain object (a Date, a Map, a class instance)');
        copy = {};
        for (const key of Object.keys(value)) {
          if (key === '__proto__') throw badOutput('a "__proto__" key');
          copy[key] = jsonCopy(value[key], depth + 1, seen);
        }
      }
      seen.delete(value);
      return copy;
    }
    default:
      throw badOutput(`a ${typeof value}`);
  }
}

/**
 * The output a callback returned, checked and copied; null for none
 * (undefined). `maxBytes`: the keyed mode's bound (an HTTP response is larger
 * than a delivery's output).
 */
function outputOf(value, maxBytes = MAX_OUTPUT_BYTES) {
  if (value === undefined) return null;
  let copy;
  try {
    copy = jsonCopy(value, 0, new Set());
  } catch (error) {
    if (error instanceof IdemflowError) throw error;
    throw badOutput(`it cannot be read (${messageOf(error)})`);
  }
  const bytes = Buffer.byteLength(JSON.stringify(copy), 'utf8');
  if (bytes > maxBytes) throw badOutput(`${bytes} bytes of JSON, more than ${maxBytes}`);
  return copy;
}

/**
 * What a throwing callback becomes: an IdemflowError as it was thrown (it
 * keeps its code); a driver error of the host's own statement on
 * `tx.client` what the store makes of the same failure of its own (a lost
 * connection, a full disk: STORE_UNAVAILABLE with its reason; a deadlock: a
 * lost race, run again); anything else HANDLER_FAILED (retry), the original
 * as `cause`, so the event stays deliverable.
 */
function handlerError(thrown, eventId, tx) {
  if (thrown instanceof IdemflowError) return thrown;
  const stored = tx.driverErrorOf(thrown);
  if (stored !== null) return stored;
  return new IdemflowError('HANDLER_FAILED', `onApplied failed for event ${eventId}: ${messageOf(thrown)}`, {
    details: { eventId, reason: 'onApplied threw' },
    cause: thrown,
  });
}

/**
 * Runs `onApplied(tx, decision)` and answers its output (checked), or throws
 * its error as handlerError makes it. A statement tx.client refused fails
 * the delivery with that refusal even when the callback caught it and
 * returned (tx.endHostWork()): what the callback meant to commit or undo
 * did not happen. `decision` is what the caller of
 * processEvent gets (outcome, operation ids, status, revision, fingerprint),
 * with the event itself.
 */
async function runApplied(onApplied, tx, decision) {
  let returned;
  try {
    returned = await onApplied(tx, decision);
  } catch (thrown) {
    // A refusal of tx.client is the delivery's answer, whatever the callback made of it.
    throw tx.endHostWork(true) ?? handlerError(thrown, decision.event?.eventId ?? decision.eventId, tx);
  }
  const misuse = tx.endHostWork(false, decision.event?.eventId ?? decision.eventId);
  if (misuse !== null) throw misuse;
  return outputOf(returned);
}

/**
 * A stored receipt as the core reads it (its result without the host's
 * output: the core decides on what it wrote) and the output it keeps
 * (undefined when none was kept).
 */
function splitOutput(receipt) {
  const result = receipt?.result;
  if (result === null || result === undefined || typeof result !== 'object' || !Object.hasOwn(result, 'output'))
    return { receipt, output: undefined };
  const { output, ...rest } = result;
  return { receipt: { ...receipt, result: rest }, output };
}

/** A duplicate's result, its `original` answering the first delivery's output when the receipt kept one. */
function withOriginalOutput(result, output) {
  if (output === undefined || !result.original) return result;
  return { ...result, original: { ...result.original, output } };
}

module.exports = { appliedHookOf, runApplied, outputOf, splitOutput, withOriginalOutput, MAX_OUTPUT_BYTES };
