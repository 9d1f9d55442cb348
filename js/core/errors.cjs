'use strict';
// The one error class of idemflow. Codes and their default dispositions come
// from the Rust core: `make pkg` writes the core's table (errorCodes()) to
// wasm/error-codes.json, so JS keeps no second copy and this module loads
// no wasm.

/** `{ CODE: disposition }` for every code the core knows. */
const dispositions = Object.freeze(require('../wasm/error-codes.json'));

class IdemflowError extends Error {
  /**
   * @param {string} code one of the stable codes (see IdemflowError.codes)
   * @param {string} message
   * @param {{ disposition?: string, details?: object, cause?: unknown }} [options]
   */
  constructor(code, message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    Object.defineProperty(this, 'name', { value: 'IdemflowError', enumerable: false, configurable: true, writable: true });
    this.code = code;
    this.disposition = options.disposition ?? dispositions[code] ?? 'reject';
    this.details = options.details ?? {};
  }

  /** `{ CODE: disposition }` for every code the core knows. */
  static get codes() {
    return dispositions;
  }
}

function isIdemflowError(value) {
  return value instanceof IdemflowError;
}

/** Turns what the wasm threw into an IdemflowError; anything else passes through. */
function fromWasm(thrown) {
  if (thrown !== null && typeof thrown === 'object' && typeof thrown.idemflowCode === 'string') {
    return new IdemflowError(thrown.idemflowCode, thrown.message, {
      disposition: thrown.disposition,
      details: thrown.details,
    });
  }
  return thrown;
}

/**
 * What a host loop holds in place of something it could not read: a stored
 * record that is damaged (INVALID_RECORD), or an element of a batch whose
 * read threw (INVALID_EVENT). It fails the events that need it, not the batch.
 */
class Unreadable {
  constructor(error) {
    this.error = error;
  }
}

module.exports = { IdemflowError, isIdemflowError, fromWasm, Unreadable };
