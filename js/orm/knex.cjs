'use strict';
// idemflow/knex: Knex over idemflow's transaction. withKnex(fn) is an
// onApplied (or idempotent()'s work) that runs `fn(trx, decision)` inside
// knex.transaction(…, { connection: tx.client }): `trx` is Knex's own
// transaction on idemflow's connection (a savepoint of idemflow's
// transaction), so every query built on it runs there, it commits or rolls
// back with the receipt, and trx.transaction() nests as Knex's savepoint.
// Knex here has no pool and no connection of its own: a query through it
// that is not on `trx` cannot reach another connection. knex is an optional
// peer dependency, imported when first used.

const { checkConfig, checkFn, driverOf, load, settle, thenableQuery } = require('./bound.cjs');

/** Knex's client for each driver behind tx.client (PGlite has none). */
const CLIENTS = { pg: 'pg', mysql2: 'mysql2', 'better-sqlite3': 'better-sqlite3' };
const SUPPORTED = Object.keys(CLIENTS);
const OWNED = ['client', 'connection', 'pool', 'dialect'];

/** The Knex instances made, by driver: for the default config, and for each config of the caller's while it is held. */
const defaults = new Map();
const byConfig = new WeakMap();

async function knexFor(driver, config) {
  let byDriver = config === undefined ? defaults : byConfig.get(config);
  if (byDriver === undefined) {
    byDriver = new Map();
    byConfig.set(config, byDriver);
  }
  let made = byDriver.get(driver);
  if (made === undefined) {
    const { default: createKnex } = await load('knex', 'knex', 'idemflow/knex');
    made = createKnex({ useNullAsDefault: driver === 'better-sqlite3' ? true : undefined, ...config, client: CLIENTS[driver] });
    byDriver.set(driver, made);
  }
  return made;
}

/**
 * Runs `fn(trx)` in a Knex transaction on idemflow's transaction `tx` (a
 * savepoint of it) and answers what fn answers; `config` is Knex's own
 * (postProcessResponse, wrapIdentifier, useNullAsDefault) without client,
 * connection or pool.
 */
async function knexTransaction(tx, fn, config) {
  checkFn(fn, 'knexTransaction', 'knexTransaction(tx, fn)');
  const options = checkConfig(config, 'knexTransaction', OWNED);
  const driver = driverOf(tx, 'knexTransaction', SUPPORTED);
  const knex = await knexFor(driver, config === undefined ? undefined : options);
  return knex.transaction((trx) => fn(trx), { connection: tx.client });
}

/** onApplied (or idempotent()'s work) that runs `fn(trx, decision)` in knexTransaction(tx, …, config). */
function withKnex(fn, config) {
  checkFn(fn, 'withKnex', 'knexTransaction(tx, fn)');
  checkConfig(config, 'withKnex', OWNED);
  return async function bound(tx, decision) {
    return knexTransaction(tx, (trx) => settle(fn(trx, decision), thenableQuery), config);
  };
}

module.exports = { withKnex, knexTransaction };
