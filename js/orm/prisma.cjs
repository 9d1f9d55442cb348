'use strict';
// idemflow/prisma: Prisma ORM (7, over its driver adapters) inside
// idemflow's transaction. withPrisma(PrismaClient, fn, options) is an
// onApplied (or idempotent()'s work) that hands `fn` a Prisma transaction
// client on idemflow's connection: its writes commit or roll back with the
// receipt, and its own nested $transaction() is a savepoint.
//
// How: one PrismaClient of the caller's generated class per options object
// and driver, made inside the first callback, whose driver adapter is
// Prisma's own (@prisma/adapter-pg, @prisma/adapter-better-sqlite3,
// @prisma/adapter-mariadb) over a stand-in for the driver (on MariaDB and
// MySQL a mariadb-connector pool over idemflow's mysql2 connection): every connection the adapter takes is the
// tx.client of the callback running, and outside a callback there is none.
// Each callback runs as one interactive $transaction of that client: its
// BEGIN, COMMIT and ROLLBACK go through the guarded tx.client, which makes
// them a savepoint of idemflow's transaction. Prisma's packages are optional
// peers, imported when first used.

const { createRequire } = require('node:module');
const { callbackClients, checkConfig, madeOnce, checkFn, driverOf, invalid, load, settle, thenableQuery } = require('./bound.cjs');

/** Prisma's adapter package for each driver of idemflow's stores that Prisma has one for. */
const ADAPTERS = {
  pg: { peer: '@prisma/adapter-pg', provider: 'postgres' },
  'better-sqlite3': { peer: '@prisma/adapter-better-sqlite3', provider: 'sqlite' },
  mysql2: { peer: '@prisma/adapter-mariadb', provider: 'mysql' },
};
const SUPPORTED = Object.keys(ADAPTERS);
/** Why the other drivers of idemflow's SQL stores have none. */
const NONE = {
  pglite: 'Prisma has no adapter for PGlite',
  'node:sqlite': "Prisma's SQLite adapters drive better-sqlite3 or libSQL, not node:sqlite",
};
/** PrismaClient options that would point it at another connection. */
const OWNED = ['adapter', 'datasourceUrl', 'datasources', 'accelerateUrl'];
/**
 * Prisma ends an interactive transaction that runs longer than its timeout
 * (5 s by default) on its own: here idemflow's deadline bounds the callback,
 * so Prisma's bound is set past any store's.
 */
const UNBOUNDED = 2_147_483_647;

/** The guarded tx.client of the callback running, for the stand-in drivers' connections. */
const clients = callbackClients("idemflow/prisma's client (of withPrisma or prismaTransaction)", 'prisma');
const clientNow = clients.now;

/** A pg.Pool (of the pg that @prisma/adapter-pg loads, which it checks with instanceof) whose every connection is tx.client. */
function postgresPool(adapterPath) {
  const pg = createRequire(adapterPath)('pg');
  class CallbackPool extends pg.Pool {
    async connect() {
      const client = clientNow();
      const connection = {
        query: (...args) => client.query(...args),
        on: () => connection,
        removeListener: () => connection,
        release() {},
      };
      return connection;
    }
    query(...args) {
      return clientNow().query(...args);
    }
    async end() {}
  }
  return new CallbackPool({ max: 1 });
}

/**
 * A better-sqlite3 Database as Prisma's adapter calls it (prepare; BEGIN by
 * a prepared statement), answering the running callback's tx.client, with
 * 64-bit integers read as BigInt as the adapter expects of the handles it makes.
 */
const sqliteHandle = {
  prepare(sql) {
    const statement = clientNow().prepare(sql);
    if (statement.reader) statement.safeIntegers(true);
    return statement;
  },
  exec(sql) {
    clientNow().exec(sql);
    return sqliteHandle;
  },
  close() {},
};

/** MySQL's column type codes, by the names the mariadb connector gives them (which Prisma's adapter reads). */
const MYSQL_TYPES = {
  0: 'DECIMAL',
  1: 'TINY',
  2: 'SHORT',
  3: 'INT',
  4: 'FLOAT',
  5: 'DOUBLE',
  6: 'NULL',
  7: 'TIMESTAMP',
  8: 'BIGINT',
  9: 'INT24',
  10: 'DATE',
  11: 'TIME',
  12: 'DATETIME',
  13: 'YEAR',
  14: 'NEWDATE',
  15: 'VARCHAR',
  16: 'BIT',
  17: 'TIMESTAMP2',
  18: 'DATETIME2',
  19: 'TIME2',
  245: 'JSON',
  246: 'NEWDECIMAL',
  247: 'ENUM',
  248: 'SET',
  249: 'TINY_BLOB',
  250: 'MEDIUM_BLOB',
  251: 'LONG_BLOB',
  252: 'BLOB',
  253: 'VAR_STRING',
  254: 'STRING',
  255: 'GEOMETRY',
};

/**
 * Values as Prisma's MariaDB adapter asks the connector for them (its
 * options rowsAsArray, dateStrings, jsonStrings, bitOneIsBoolean false):
 * JSON as its text, 64-bit integers as decimal strings, geometry as bytes.
 */
function mysqlTypeCast(field, next) {
  // MariaDB's JSON is a LONGTEXT that mysql2 parses when it sees its format; Prisma wants the text.
  if (field.type === 'JSON' || field.extendedFormat === 'json' || field.type === 'LONGLONG') return field.string();
  if (field.type === 'GEOMETRY') return field.buffer();
  return next();
}

/**
 * A mariadb-connector connection over the running callback's tx.client (a
 * mysql2 connection): query/execute({ sql }, values) answer rows as arrays
 * carrying `meta` (each column's name(), type, flags, collation), or the
 * write's { affectedRows, insertId }.
 */
function mariadbConnection() {
  const client = clientNow();
  const run = async (request, values) => {
    const sql = typeof request === 'string' ? request : request.sql;
    const [result, fields] = await client.query({ sql, rowsAsArray: true, dateStrings: true, typeCast: mysqlTypeCast }, values ?? []);
    if (!Array.isArray(result))
      return { affectedRows: result.affectedRows, insertId: result.insertId, warningStatus: result.warningStatus };
    const rows = result.slice();
    rows.meta = (fields ?? []).map((field) => ({
      name: () => field.name,
      type: MYSQL_TYPES[field.columnType] ?? String(field.columnType),
      flags: field.flags,
      collation: { index: field.characterSet },
      dataTypeFormat: field.extendedFormat ?? (field.columnType === 245 ? 'json' : undefined),
    }));
    return rows;
  };
  const connection = {
    query: run,
    execute: run,
    on: () => connection,
    off: () => connection,
    release: async () => {},
    end: async () => {},
  };
  return connection;
}

/** A mariadb-connector pool whose every connection is mariadbConnection(). */
const mariadbPool = {
  getConnection: async () => mariadbConnection(),
  query: (request, values) => mariadbConnection().query(request, values),
  end: async () => {},
  on: () => mariadbPool,
};

/** The driver adapter factory Prisma's client is made with, over the stand-in of `driver`; `schema` the PostgreSQL schema of the models. */
async function adapterFor(driver, schema) {
  const { peer, provider } = ADAPTERS[driver];
  const module = await load(peer, peer, 'idemflow/prisma');
  if (driver === 'pg') {
    const PrismaPg = module.PrismaPg ?? module.default?.PrismaPg;
    return new PrismaPg(postgresPool(require.resolve(peer)), schema === undefined ? undefined : { schema });
  }
  if (driver === 'mysql2') {
    const PrismaMariaDb = module.PrismaMariaDb ?? module.default?.PrismaMariaDb;
    return new PrismaMariaDb(mariadbPool);
  }
  const PrismaBetterSqlite3 = module.PrismaBetterSqlite3 ?? module.default?.PrismaBetterSqlite3;
  // Prisma's adapter opens a database of its own from a URL: it is given an
  // in-memory one, closed at once, and the stand-in in its place.
  const own = await new PrismaBetterSqlite3({ url: ':memory:' }).connect();
  own.client.close();
  own.client = sqliteHandle;
  return { provider, adapterName: own.adapterName, connect: async () => own };
}

/** The clients made, by the caller's options object, the PrismaClient class and the driver. */
const made = madeOnce();

function clientFor(PrismaClient, driver, options) {
  return made(options, [PrismaClient, driver], async () => {
    const { schema, ...clientOptions } = options;
    return new PrismaClient({ ...clientOptions, adapter: await adapterFor(driver, schema) });
  });
}

const NO_OPTIONS = Object.freeze({});

function checkClass(PrismaClient, tool) {
  if (typeof PrismaClient !== 'function' || typeof PrismaClient.prototype?.$transaction !== 'function') {
    throw invalid(
      `${tool} takes your generated PrismaClient class first (import { PrismaClient } from your generator's output), not an instance or a client's options`,
      { field: 'PrismaClient', reason: 'not a PrismaClient class' },
    );
  }
}

function optionsOf(config, tool) {
  if (config === undefined) return NO_OPTIONS;
  const options = checkConfig(config, tool, OWNED);
  if (options.transactionOptions !== undefined) {
    throw invalid(
      `${tool}: transactionOptions are idemflow's: the isolation is its transaction's, and its deadline (the store's timeoutMs) bounds the callback`,
      { field: 'options.transactionOptions', reason: 'set by idemflow' },
    );
  }
  if (options.schema !== undefined && (typeof options.schema !== 'string' || options.schema === '')) {
    throw invalid(`${tool}: schema is the name of the PostgreSQL schema your models are in`, {
      field: 'options.schema',
      reason: 'not a name',
    });
  }
  return options;
}

/**
 * Runs `fn(prisma)` with a Prisma transaction client on idemflow's
 * transaction `tx` and answers what fn answers. `PrismaClient` is your
 * generated class; `options` its constructor's options without any of a
 * connection (log, omit, errorFormat) and, on PostgreSQL, `schema`: the
 * schema the models are in when it is not `public` (Prisma names it in
 * every statement). Pass the same object each call: its client is made once.
 */
async function prismaTransaction(tx, PrismaClient, fn, options) {
  checkClass(PrismaClient, 'prismaTransaction');
  checkFn(fn, 'prismaTransaction', 'prismaTransaction(tx, PrismaClient, fn)');
  const checked = optionsOf(options, 'prismaTransaction');
  const none = tx !== null && typeof tx === 'object' ? NONE[tx._driver] : undefined;
  if (none !== undefined) {
    throw invalid(`prismaTransaction has no driver for ${tx._driver}: ${none}`, {
      field: 'tx',
      reason: 'driver not supported',
      driver: tx._driver,
    });
  }
  const driver = driverOf(tx, 'prismaTransaction', SUPPORTED);
  if (driver !== 'pg' && checked.schema !== undefined) {
    throw invalid(`prismaTransaction: schema names a PostgreSQL schema, and this store's driver is ${driver}`, {
      field: 'options.schema',
      reason: 'not PostgreSQL',
    });
  }
  return clients.run(tx.client, async () => {
    const prisma = await clientFor(PrismaClient, driver, checked);
    return prisma.$transaction((db) => fn(db), { maxWait: UNBOUNDED, timeout: UNBOUNDED });
  });
}

/**
 * The database's own error inside a Prisma error (Prisma's adapters keep
 * only its code and message: `meta.driverAdapterError.cause`), shaped as
 * the driver's (pg: a SQLSTATE and a severity; better-sqlite3: a SQLITE_
 * code), with the Prisma error as its cause; or the error as it was. So a
 * unique violation or a deadlock of a Prisma statement is the lost race it
 * is to idemflow (the delivery runs again), a lost connection unavailable.
 */
function driverShaped(error, driver) {
  const original = error?.meta?.driverAdapterError?.cause;
  if (typeof original?.originalCode !== 'string') return error;
  const shaped = new Error(String(original.originalMessage ?? error.message), { cause: error });
  if (driver === 'mysql2') return Object.assign(shaped, { errno: Number(original.originalCode), sqlState: '' });
  return Object.assign(shaped, { code: original.originalCode }, driver === 'pg' ? { severity: 'ERROR' } : {});
}

/** onApplied (or idempotent()'s work) that runs `fn(prisma, decision)` in prismaTransaction(tx, PrismaClient, …, options). */
function withPrisma(PrismaClient, fn, options) {
  checkClass(PrismaClient, 'withPrisma');
  checkFn(fn, 'withPrisma', 'prismaTransaction(tx, PrismaClient, fn)');
  const checked = optionsOf(options, 'withPrisma');
  return async function bound(tx, decision) {
    try {
      return await prismaTransaction(tx, PrismaClient, (db) => settle(fn(db, decision), thenableQuery), checked);
    } catch (error) {
      throw driverShaped(error, tx._driver);
    }
  };
}

module.exports = { withPrisma, prismaTransaction };
