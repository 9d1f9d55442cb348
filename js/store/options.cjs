'use strict';
// The options every store shares: table names, the clock, how often a lost
// race runs again, and the time bounds of a call.

const { numericOption } = require('../core/options.cjs');
const { invalidArgument } = require('./errors.cjs');

const DEFAULT_TABLES = Object.freeze({ workflows: 'workflows', inbox: 'event_inbox', outbox: 'event_outbox' });
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The option names every store accepts (an adapter adds its own). */
const STORE_OPTIONS = Object.freeze(['tables', 'raceRetries', 'now']);
const TIMEOUT_OPTIONS = Object.freeze(['timeoutMs', 'statementTimeoutMs']);

/** `{workflows, inbox, outbox}` from options.tables; each a plain name or `schema.name`. */
function resolveTables(tables) {
  if (tables === undefined || tables === null) return { ...DEFAULT_TABLES };
  if (typeof tables !== 'object') {
    throw invalidArgument('options.tables must be an object {workflows, inbox, outbox}', { field: 'tables', reason: 'not an object' });
  }
  const resolved = {};
  for (const key of Object.keys(DEFAULT_TABLES)) {
    const name = tables[key] ?? DEFAULT_TABLES[key];
    const parts = typeof name === 'string' ? name.split('.') : [];
    if (parts.length === 0 || parts.length > 2 || !parts.every((part) => NAME.test(part))) {
      throw invalidArgument(
        `options.tables.${key} must be a table name of letters, digits and _ (optionally schema.name), at most 63 characters each`,
        {
          field: `tables.${key}`,
          reason: 'not a plain table name',
        },
      );
    }
    resolved[key] = name;
  }
  const names = Object.values(resolved);
  if (new Set(names).size !== names.length) {
    throw invalidArgument('options.tables must name three different tables', { field: 'tables', reason: 'duplicate table name' });
  }
  return resolved;
}

/**
 * How many times a delivery whose transaction lost a race runs again
 * (processEvent's and processBatch's re-runs), from `raceRetries`; undefined
 * when not given (the host cycle's default then holds).
 */
function resolveRaceRetries(options) {
  return numericOption('raceRetries', options.raceRetries);
}

function resolveClock(now) {
  if (now === undefined) return Date.now;
  if (typeof now !== 'function') {
    throw invalidArgument('options.now must be a function returning milliseconds since the epoch', {
      field: 'now',
      reason: 'not a function',
    });
  }
  return now;
}

/** `{ timeoutMs, statementTimeoutMs }` from a store's options, with their defaults. */
function resolveTimeouts(options) {
  const bounded = (field, fallback, min) => {
    const value = options[field];
    if (value === undefined) return fallback;
    if (!Number.isSafeInteger(value) || value < min || value > MAX_TIMER_MS) {
      throw invalidArgument(`options.${field} must be a whole number of milliseconds from ${min} to ${MAX_TIMER_MS}`, {
        field,
        reason: 'out of range',
      });
    }
    return value;
  };
  return {
    timeoutMs: bounded('timeoutMs', DEFAULT_TIMEOUT_MS, 1),
    statementTimeoutMs: bounded('statementTimeoutMs', DEFAULT_STATEMENT_TIMEOUT_MS, 0),
  };
}

module.exports = { DEFAULT_TABLES, STORE_OPTIONS, TIMEOUT_OPTIONS, resolveTables, resolveRaceRetries, resolveClock, resolveTimeouts };
