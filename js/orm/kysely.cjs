'use strict';
// idemflow/kysely: Kysely over idemflow's transaction. withKysely(fn) is an
// onApplied (or idempotent()'s work) that hands `fn` a Kysely instance whose
// dialect holds one connection, tx.client's, and never releases or ends it:
// its queries commit or roll back with the receipt, db.transaction() is a
// savepoint of idemflow's transaction (and a controlled transaction's
// savepoints are savepoints of that). kysely is an optional peer
// dependency, imported when first used.

const { bind, checkConfig, driverOf, invalid, load } = require('./bound.cjs');

const SUPPORTED = ['pg', 'pglite', 'mysql2', 'better-sqlite3'];

/** The command tag pg reports, from a statement's first word (PGlite reports none). */
function commandOf(sql) {
  return /^\s*([A-Za-z]+)/.exec(sql)?.[1]?.toUpperCase() ?? '';
}

/** A pool of one: tx.client, lent to every query, and released to no one. */
function postgresPool(client, pglite) {
  const connection = {
    async query(sql, parameters) {
      if (typeof sql !== 'string') {
        throw invalid('idemflow/kysely does not stream: a cursor would outlive the statement on the connection idemflow holds', {
          field: 'cursor',
          reason: 'not supported',
        });
      }
      const result = await client.query(sql, parameters);
      if (!pglite) return result;
      return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length, command: commandOf(sql) };
    },
    release() {},
  };
  return { connect: async () => connection, end: async () => {} };
}

/** mysql2's callback pool as Kysely's MysqlDialect calls it, of one connection: tx.client's. */
function mysqlPool(client) {
  const connection = {
    query(sql, parameters, callback) {
      client.query(sql, parameters).then(
        ([rows]) => callback(null, rows),
        (error) => callback(error),
      );
    },
    release() {},
  };
  return {
    getConnection: (callback) => callback(null, connection),
    end: (callback) => callback?.(),
  };
}

/** better-sqlite3's handle as Kysely's SqliteDialect calls it, never closed. */
function sqliteDatabase(client) {
  return { prepare: (sql) => client.prepare(sql), close() {} };
}

/**
 * A Kysely over idemflow's transaction `tx`; `config` is Kysely's own
 * (plugins, log) without `dialect`, which is idemflow's connection.
 */
async function kyselyOf(tx, config) {
  const options = checkConfig(config, 'kyselyOf', ['dialect', 'executor']);
  const driver = driverOf(tx, 'kyselyOf', SUPPORTED);
  const kysely = await load('kysely', 'kysely', 'idemflow/kysely');
  const client = tx.client;
  let dialect;
  if (driver === 'pg' || driver === 'pglite') dialect = new kysely.PostgresDialect({ pool: postgresPool(client, driver === 'pglite') });
  else if (driver === 'mysql2') dialect = new kysely.MysqlDialect({ pool: mysqlPool(client) });
  else dialect = new kysely.SqliteDialect({ database: sqliteDatabase(client) });
  return new kysely.Kysely({ ...options, dialect });
}

/** Kysely's answers to a write: no output. */
const RESULTS = ['InsertResult', 'UpdateResult', 'DeleteResult', 'MergeResult'];
function isKyselyResult(value) {
  if (Array.isArray(value)) return value.length > 0 && value.every(isKyselyResult);
  return value !== null && typeof value === 'object' && RESULTS.includes(Object.getPrototypeOf(value)?.constructor?.name);
}

/** A query builder returned unawaited (Kysely's are not thenable): executed, as Drizzle's and Knex's run when awaited. */
const kyselyQuery = {
  run: (returned) =>
    returned !== null && typeof returned === 'object' && typeof returned.execute === 'function' && typeof returned.compile === 'function'
      ? returned.execute()
      : null,
  isResult: isKyselyResult,
};

/** onApplied (or idempotent()'s work) that runs `fn(db, decision)` with `db` from kyselyOf(tx, config). */
function withKysely(fn, config) {
  checkConfig(config, 'withKysely', ['dialect', 'executor']);
  return bind(fn, 'withKysely', 'kyselyOf(tx)', (tx) => kyselyOf(tx, config), kyselyQuery);
}

module.exports = { withKysely, kyselyOf };
