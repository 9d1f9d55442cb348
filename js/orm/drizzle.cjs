'use strict';
// idemflow/drizzle: Drizzle ORM over idemflow's transaction. withDrizzle(fn)
// is an onApplied (or idempotent()'s work) that hands `fn` a Drizzle db made
// over tx.client with the driver the store uses (node-postgres, PGlite,
// mysql2, better-sqlite3): its statements commit or roll back with the
// receipt, its db.transaction() is a savepoint of idemflow's transaction and
// a nested one a savepoint of that. drizzle-orm is an optional peer
// dependency, imported when first used.

const { bind, checkConfig, driverOf, load } = require('./bound.cjs');

/** Drizzle's driver module for each driver behind tx.client. */
const MODULES = {
  pg: 'drizzle-orm/node-postgres',
  pglite: 'drizzle-orm/pglite',
  mysql2: 'drizzle-orm/mysql2',
  'better-sqlite3': 'drizzle-orm/better-sqlite3',
};
const SUPPORTED = Object.keys(MODULES);

/**
 * A Drizzle db over idemflow's transaction `tx`; `config` is Drizzle's own
 * (schema, casing, logger, mode on MySQL) without `client` or `connection`,
 * which are idemflow's connection.
 */
async function drizzleOf(tx, config) {
  const options = checkConfig(config, 'drizzleOf', ['client', 'connection']);
  const driver = driverOf(tx, 'drizzleOf', SUPPORTED);
  const { drizzle } = await load(MODULES[driver], 'drizzle-orm', 'idemflow/drizzle');
  const client = tx.client;
  // drizzle-orm 0.45 reads a config with `mode` as no config (its isConfig): the client and the config apart.
  if (driver === 'mysql2') return drizzle(client, { mode: 'default', ...options });
  return drizzle({ ...options, client });
}

/** onApplied (or idempotent()'s work) that runs `fn(db, decision)` with `db` from drizzleOf(tx, config). */
function withDrizzle(fn, config) {
  checkConfig(config, 'withDrizzle', ['client', 'connection']);
  return bind(fn, 'withDrizzle', 'drizzleOf(tx)', (tx) => drizzleOf(tx, config));
}

module.exports = { withDrizzle, drizzleOf };
