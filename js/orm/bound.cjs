'use strict';
// What the tools' entry points (idemflow/drizzle, idemflow/kysely,
// idemflow/knex) share: the driver behind a transaction's tx.client, the
// tool loaded when first used (an optional peer dependency: the package
// loads without it), and the wrapper that hands a callback the tool's own
// object bound to idemflow's transaction instead of `tx`. The tool's object
// is made here from tx.client and nothing else, so it cannot reach another
// connection (the app's own pool) through the helper; kept past the callback
// it is refused, as tx.client is.

const { AsyncLocalStorage } = require('node:async_hooks');
const { IdemflowError } = require('../core/errors.cjs');
const { outputOf } = require('../host/applied.cjs');

/** The drivers a SQL store's transaction names (`tx._driver`, set by each adapter). */
const DRIVERS = new Set(['pg', 'pglite', 'mysql2', 'better-sqlite3', 'node:sqlite']);

function invalid(message, details) {
  return new IdemflowError('INVALID_ARGUMENT', message, { details });
}

/**
 * The driver behind `tx.client` ('pg', 'pglite', 'mysql2', 'better-sqlite3',
 * 'node:sqlite'), for `tool`: an INVALID_ARGUMENT for anything that is not a
 * SQL store's transaction (the in-memory or the MongoDB store's, a pool, a
 * tool's own object), or a driver the tool has no driver for here.
 */
function driverOf(tx, tool, supported) {
  const driver = tx !== null && typeof tx === 'object' ? tx._driver : undefined;
  if (!DRIVERS.has(driver)) {
    throw invalid(
      `${tool} takes idemflow's transaction (the tx of onApplied, of idempotent()'s work or of store.transaction()) of a SQLite, PostgreSQL or MySQL/MariaDB store; it was given ${describe(tx)}`,
      { field: 'tx', reason: 'not a SQL store transaction' },
    );
  }
  if (!supported.includes(driver)) {
    throw invalid(`${tool} has no driver for ${driver} (it works over ${supported.join(', ')})`, {
      field: 'tx',
      reason: 'driver not supported',
      driver,
    });
  }
  return driver;
}

function describe(value) {
  if (value === null) return 'null';
  if (typeof value !== 'object') return `a ${typeof value}`;
  const name = Object.getPrototypeOf(value)?.constructor?.name;
  return name ? `a ${name}` : 'an object';
}

const loaded = new Map();

/**
 * The module `specifier` of the optional peer `peer`, imported once (ES module
 * or CommonJS alike); not installed, an INVALID_ARGUMENT that names it.
 */
function load(specifier, peer, tool) {
  let module = loaded.get(specifier);
  if (module === undefined) {
    module = import(specifier).catch((error) => {
      loaded.delete(specifier);
      if (error?.code === 'ERR_MODULE_NOT_FOUND' || error?.code === 'MODULE_NOT_FOUND') {
        throw invalid(`${tool} needs the package ${peer}: install it next to idemflow (npm install ${peer})`, {
          field: peer,
          reason: 'peer dependency not installed',
        });
      }
      throw error;
    });
    loaded.set(specifier, module);
  }
  return module;
}

/** Options of the tool's own that the helper sets itself and refuses from the caller: they would point the tool elsewhere. */
function checkConfig(config, tool, owned) {
  if (config === undefined) return {};
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw invalid(`${tool}'s options must be an object`, { field: 'options', reason: 'not an object' });
  }
  for (const key of owned) {
    if (Object.hasOwn(config, key)) {
      throw invalid(
        `${tool} sets ${key} itself, to idemflow's transaction: a ${key} of your own would write outside it (your rows without the receipt)`,
        { field: `options.${key}`, reason: 'set by idemflow' },
      );
    }
  }
  return config;
}

const isThenable = (value) =>
  value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function';

/**
 * Whether `value` is a driver's answer to a write rather than a value of the
 * callback's: pg's Result, mysql2's ResultSetHeader (alone or as the first of
 * [result, fields]). Such an answer is no output (the count of rows written
 * is not kept).
 */
function isDriverResult(value) {
  if (value === null || typeof value !== 'object') return false;
  const name = Object.getPrototypeOf(value)?.constructor?.name;
  if (name === 'ResultSetHeader') return true;
  if (name === 'Result' && Array.isArray(value.rows) && 'command' in value) return true;
  return Array.isArray(value) && value.length === 2 && isDriverResult(value[0]) && !isDriverResult(value[1]);
}

/**
 * The output of what a callback returned. A query of the tool's that it
 * returns unawaited (`tool.run(returned)`: Drizzle's and Knex's thenable
 * builders, Kysely's builder) runs, and its result is the output when it is
 * a JSON value (the rows of a RETURNING), else none. Anything else is
 * awaited; a driver's or the tool's answer to a write (`tool.isResult`) is
 * no output, and every other value is the output, checked as onApplied's.
 */
async function settle(returned, tool) {
  const query = tool.run(returned);
  if (query !== null) {
    const result = await query;
    try {
      outputOf(result, Number.MAX_SAFE_INTEGER);
      return result;
    } catch {
      return undefined;
    }
  }
  const result = await returned;
  return isDriverResult(result) || tool.isResult(result) ? undefined : result;
}

/** The tool's own thenable query (not a promise of the callback's), to run as it is. */
const thenableQuery = {
  run: (returned) => (isThenable(returned) && !(returned instanceof Promise) ? returned : null),
  isResult: () => false,
};

function checkFn(fn, tool, of) {
  if (typeof fn !== 'function') {
    throw invalid(`${tool} takes a function (db, decision) => output; to get the tool's object itself, use ${of}`, {
      field: 'fn',
      reason: 'not a function',
    });
  }
}

/** `fn(bound, decision)` as onApplied or as idempotent()'s work, `bound` made by `make(tx)`; its output as settle() makes it. */
function bind(fn, tool, of, make, kind = thenableQuery) {
  checkFn(fn, tool, of);
  return async function bound(tx, decision) {
    return settle(fn(await make(tx), decision), kind);
  };
}

/**
 * Where a tool's long-lived object (TypeORM's DataSource, Prisma's client)
 * finds the connection of the callback running: `run(client, fn)` runs fn
 * with tx.client as the current one; `now()` answers it, and outside a
 * callback refuses with INVALID_ARGUMENT (`outside`: what the tool's object
 * is called, for the message; `field`: for the details), so the object
 * reaches no connection but idemflow's, and none between callbacks.
 */
function callbackClients(outside, field) {
  const current = new AsyncLocalStorage();
  return {
    run: (client, fn) => current.run(client, fn),
    now() {
      const client = current.getStore();
      if (client === undefined) {
        throw invalid(
          `${outside} reaches the database only inside a callback: outside one there is no transaction of idemflow's to write in`,
          { field, reason: 'outside the transaction' },
        );
      }
      return client;
    },
  };
}

/**
 * A cache of what a helper makes once (TypeORM's DataSource, Prisma's
 * client): `made(options, keys, make)` answers the promise made for the
 * caller's options object (held weakly) and `keys` (the driver, a class),
 * calling `make()` the first time; a make that fails is forgotten, so the
 * next callback tries again.
 */
function madeOnce() {
  const byOptions = new WeakMap();
  return (options, keys, make) => {
    let level = byOptions.get(options);
    if (level === undefined) {
      level = new Map();
      byOptions.set(options, level);
    }
    for (const key of keys.slice(0, -1)) {
      let next = level.get(key);
      if (next === undefined) {
        next = new Map();
        level.set(key, next);
      }
      level = next;
    }
    const last = keys[keys.length - 1];
    let ready = level.get(last);
    if (ready === undefined) {
      const cache = level;
      ready = Promise.resolve().then(make);
      cache.set(last, ready);
      ready.catch(() => cache.delete(last));
    }
    return ready;
  };
}

module.exports = { driverOf, load, checkConfig, bind, checkFn, settle, thenableQuery, invalid, callbackClients, madeOnce };
