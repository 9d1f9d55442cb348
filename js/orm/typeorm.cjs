'use strict';
// idemflow/typeorm: TypeORM over idemflow's transaction. withTypeorm(fn,
// options) is an onApplied (or idempotent()'s work) that hands `fn` an
// EntityManager of a QueryRunner on idemflow's connection: its writes commit
// or roll back with the receipt, manager.transaction() is a savepoint of
// idemflow's transaction (TypeORM's nested ones its own savepoints). The
// DataSource (one per options object and driver, initialized inside the
// first callback) has no pool of its own: its driver is a stand-in whose
// every connection is the tx.client of the callback running, so the
// DataSource reaches no other connection, and outside a callback none at
// all. typeorm is an optional peer dependency, imported when first used.

const { callbackClients, checkConfig, madeOnce, checkFn, driverOf, invalid, load, settle, thenableQuery } = require('./bound.cjs');

const SUPPORTED = ['pg', 'pglite', 'mysql2', 'better-sqlite3'];
/** DataSource options that would point TypeORM at another connection, or run DDL inside idemflow's transaction. */
const OWNED = [
  'driver',
  'url',
  'host',
  'port',
  'username',
  'password',
  'socketPath',
  'database',
  'nativeBinding',
  'prepareDatabase',
  'key',
  'enableWAL',
  'statementCacheSize',
  'ssl',
  'extra',
  'replication',
  'poolSize',
  'connectorPackage',
  'synchronize',
  'migrationsRun',
  'dropSchema',
];

/** The guarded tx.client of the callback running, for the stand-in drivers' connections. */
const clients = callbackClients("idemflow/typeorm's DataSource (of withTypeorm or typeormManager)", 'dataSource');
const clientNow = clients.now;

/** The running callback's tx.client, or null after handing `callback` the refusal (a driver's callback style). */
function clientOr(callback) {
  try {
    return clientNow();
  } catch (error) {
    callback(error);
    return null;
  }
}

/** node-postgres as TypeORM's PostgresDriver calls it: a Pool whose every connection is tx.client, released to no one. */
const postgresStandIn = {
  defaults: {},
  Pool: class Pool {
    connect(callback) {
      const client = clientOr(callback);
      if (client === null) return;
      const connection = {
        query: (...args) => client.query(...args),
        on: () => connection,
        removeListener: () => connection,
        release() {},
      };
      callback(null, connection, () => {});
    }
    on() {
      return this;
    }
    end(callback) {
      callback?.();
    }
  },
};

/**
 * PGlite, which TypeORM has no driver for, behind the node-postgres of
 * postgresStandIn: each answer in pg's shape (rows, rowCount, command), a
 * callback's or a promise's.
 */
const COMMAND = /^\s*(INSERT|UPDATE|DELETE|SELECT|MERGE)\b/i;
function pgShaped(client, text, values) {
  return client.query(text, values ?? []).then((result) => ({
    rows: result.rows,
    rowCount: result.affectedRows ?? result.rows.length,
    command: COMMAND.exec(text)?.[1].toUpperCase() ?? null,
    fields: result.fields,
  }));
}
const pgliteStandIn = {
  defaults: {},
  Pool: class Pool extends postgresStandIn.Pool {
    connect(callback) {
      const client = clientOr(callback);
      if (client === null) return;
      const connection = {
        query(text, values, done) {
          const cb = typeof values === 'function' ? values : done;
          const answer = pgShaped(client, text, typeof values === 'function' ? undefined : values);
          if (cb === undefined) return answer;
          answer.then((result) => cb(null, result), cb);
        },
        on: () => connection,
        removeListener: () => connection,
        release() {},
      };
      callback(null, connection, () => {});
    }
  },
};

/** mysql2 as TypeORM's MysqlDriver calls it: a pool whose every connection is tx.client, released to no one. */
const mysqlStandIn = {
  createPool: () => ({
    getConnection(callback) {
      const client = clientOr(callback);
      if (client === null) return;
      const connection = {
        promise: () => ({ query: (sql, values) => client.query(sql, values) }),
        query: (sql, values, cb) => client.query(sql, values, cb),
        listeners: () => [() => {}],
        on: () => connection,
        release() {},
      };
      callback(null, connection);
    },
    on() {
      return this;
    },
    end(callback) {
      callback?.();
    },
  }),
};

/**
 * better-sqlite3 as TypeORM's BetterSqlite3Driver calls it: a Database class
 * whose one handle answers the running callback's tx.client (SQLite stores
 * run one transaction at a time, as TypeORM's driver runs one QueryRunner),
 * closed by no one.
 */
function sqliteStandIn() {
  const handle = {
    prepare: (sql) => clientNow().prepare(sql),
    exec: (sql) => {
      clientNow().exec(sql);
      return handle;
    },
    pragma: (...args) => clientNow().pragma(...args),
    close() {},
  };
  return handle;
}

/** The DataSource types each driver's store takes. */
const TYPES = { pg: ['postgres'], pglite: ['postgres'], mysql2: ['mysql', 'mariadb'], 'better-sqlite3': ['better-sqlite3'] };

/** What each driver's DataSource is made with. */
const DRIVERS = {
  pg: { type: 'postgres', driver: postgresStandIn },
  pglite: { type: 'postgres', driver: pgliteStandIn },
  mysql2: { driver: mysqlStandIn },
  // A statement TypeORM kept would be of an earlier callback's transaction (and refused): none is kept.
  'better-sqlite3': { type: 'better-sqlite3', driver: sqliteStandIn, database: ':memory:', statementCacheSize: 0 },
};

/** The DataSources made, by the caller's options object and the driver. */
const made = madeOnce();

function dataSourceFor(driver, options) {
  return made(options, [driver], async () => {
    const { DataSource } = await load('typeorm', 'typeorm', 'idemflow/typeorm');
    const { type = options.type ?? 'mysql', ...settings } = DRIVERS[driver];
    return new DataSource({ ...options, ...settings, type, installExtensions: false }).initialize();
  });
}

function optionsOf(config, tool) {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw invalid(`${tool} takes TypeORM's DataSource options ({ entities, … }), without any of a connection`, {
      field: 'options',
      reason: 'not an object',
    });
  }
  const options = checkConfig(config, tool, OWNED);
  if (options.type !== undefined && !['postgres', 'mysql', 'mariadb', 'better-sqlite3'].includes(options.type)) {
    throw invalid(`${tool}: type ${options.type} is none of idemflow's stores' (postgres, mysql, mariadb, better-sqlite3)`, {
      field: 'options.type',
      reason: 'not supported',
    });
  }
  return options;
}

/**
 * Runs `fn(manager)` with a TypeORM EntityManager on idemflow's transaction
 * `tx` and answers what fn answers; `options` are TypeORM's DataSource
 * options (entities, namingStrategy, logging; `type: 'mariadb'` on MariaDB)
 * without any of a connection, and the same object each call (its
 * DataSource is made once).
 */
async function typeormManager(tx, options, fn) {
  checkFn(fn, 'typeormManager', 'typeormManager(tx, options, fn)');
  const checked = optionsOf(options, 'typeormManager');
  const driver = driverOf(tx, 'typeormManager', SUPPORTED);
  if (checked.type !== undefined && !TYPES[driver].includes(checked.type)) {
    throw invalid(`typeormManager: type ${checked.type} over a store of ${driver} (${TYPES[driver].join(' or ')})`, {
      field: 'options.type',
      reason: 'not the store',
    });
  }
  return clients.run(tx.client, async () => {
    const dataSource = await dataSourceFor(driver, checked);
    const runner = dataSource.createQueryRunner();
    await runner.connect();
    try {
      return await fn(runner.manager);
    } finally {
      await runner.release();
    }
  });
}

/** TypeORM's answers to a write (manager.insert, update, delete): no output. */
const RESULTS = ['InsertResult', 'UpdateResult', 'DeleteResult'];
const typeormQuery = {
  run: thenableQuery.run,
  isResult: (value) => value !== null && typeof value === 'object' && RESULTS.includes(Object.getPrototypeOf(value)?.constructor?.name),
};

/** onApplied (or idempotent()'s work) that runs `fn(manager, decision)` in typeormManager(tx, options, …). */
function withTypeorm(fn, options) {
  checkFn(fn, 'withTypeorm', 'typeormManager(tx, options, fn)');
  const checked = optionsOf(options, 'withTypeorm');
  return async function bound(tx, decision) {
    return typeormManager(tx, checked, (manager) => settle(fn(manager, decision), typeormQuery));
  };
}

module.exports = { withTypeorm, typeormManager };
