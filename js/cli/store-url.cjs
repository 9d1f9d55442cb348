'use strict';
// A store from a URL, for the operator's commands: sqlite:path/to/file.db,
// postgres://…, mysql://… (mariadb://…), mongodb://… (mongodb+srv://…),
// redis://… (rediss://…: node-redis, or ioredis when that is what is installed). The
// driver is the user's own: it is required from the project the command runs
// in (process.cwd()), never from idemflow's folder, and a missing one is
// INVALID_ARGUMENT naming the npm package to install. The tables are the
// stores' `tables` option, from `--tables workflows,inbox,outbox` or JSON.

const fs = require('node:fs');
const path = require('node:path');
const { createRequire } = require('node:module');
const { IdemflowError } = require('../core/errors.cjs');
const { UsageError } = require('./args.cjs');

function driverMissing(pkg, url, cwd) {
  return new IdemflowError(
    'INVALID_ARGUMENT',
    `${url} needs the npm package ${pkg}, which is not installed in ${cwd}: run npm install ${pkg} there`,
    {
      details: { field: 'store', reason: 'driver not installed', package: pkg },
    },
  );
}

/** `require(name)` as the project in `cwd` would resolve it; null when it is not installed there. */
function requireFrom(cwd, name) {
  const projectRequire = createRequire(path.join(cwd, 'package.json'));
  let resolved;
  try {
    resolved = projectRequire.resolve(name);
  } catch (error) {
    if (error && error.code === 'MODULE_NOT_FOUND') return null;
    throw error;
  }
  return projectRequire(resolved);
}

/** `{ workflows, inbox, outbox }` from `a,b,c` or a JSON object; undefined for the defaults. */
function parseTables(text) {
  if (text === undefined) return undefined;
  if (text.trim().startsWith('{')) {
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new UsageError(`--tables is not JSON: ${error.message}`);
    }
  }
  const names = text.split(',');
  if (names.length !== 3) throw new UsageError('--tables takes workflows,inbox,outbox (three names) or a JSON object');
  const [workflows, inbox, outbox] = names.map((name) => name.trim());
  return { workflows, inbox, outbox };
}

/** Hides a password in a URL shown back to the user. */
function shown(url) {
  return url.replace(/(\/\/[^:/@]+:)[^@/]*@/, '$1***@');
}

/** `{ store, kind, close }`; when the store refuses its options, the connection is closed first. */
function built(build, kind, close) {
  try {
    return { store: build(), kind, close };
  } catch (error) {
    Promise.resolve()
      .then(close)
      .catch(() => {});
    throw error;
  }
}

/**
 * Opens the store a URL names: `{ store, kind, close() }`. Connections are
 * few (the commands run one statement at a time) and closed by close().
 */
async function openStoreUrl(url, { tables, cwd = process.cwd() } = {}) {
  if (typeof url !== 'string' || url.length === 0) {
    throw new UsageError(
      '--store is needed: sqlite:path/to/file.db, postgres://…, mysql://…, mongodb://… or redis://… (or set IDEMFLOW_STORE)',
    );
  }
  const options = tables === undefined ? {} : { tables };
  const scheme = /^([a-z][a-z0-9+]*):/.exec(url)?.[1];
  const need = (pkg, entry = pkg) =>
    requireFrom(cwd, entry) ??
    (() => {
      throw driverMissing(pkg, shown(url), cwd);
    })();
  switch (scheme) {
    case 'sqlite': {
      const { SqliteStore } = require('../adapters/sqlite/index.cjs');
      let file = url.slice('sqlite:'.length);
      if (file.startsWith('//')) file = file.slice(2);
      if (file.length === 0) throw new UsageError('sqlite: needs a file, e.g. sqlite:data/app.db');
      file = path.resolve(cwd, file);
      // An operator's command never creates a database: a mistyped path is an error, not an empty store.
      if (!fs.existsSync(file))
        throw new IdemflowError('STORE_UNAVAILABLE', `no SQLite database at ${file}`, { details: { reason: 'no such file', file } });
      const Database = requireFrom(cwd, 'better-sqlite3');
      let db;
      if (Database !== null) {
        db = new Database(file, { fileMustExist: true });
      } else {
        let sqlite = null;
        try {
          sqlite = require('node:sqlite');
        } catch {
          throw driverMissing('better-sqlite3', shown(url), cwd);
        }
        db = new sqlite.DatabaseSync(file);
      }
      return built(
        () => new SqliteStore(db, options),
        'sqlite',
        async () => db.close(),
      );
    }
    case 'postgres':
    case 'postgresql': {
      const pg = need('pg');
      const { PostgresStore } = require('../adapters/postgres/index.cjs');
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {}); // an idle client lost its server; the next query reports it
      return built(
        () => new PostgresStore(pool, options),
        'postgres',
        () => pool.end(),
      );
    }
    case 'mysql':
    case 'mariadb': {
      const mysql = need('mysql2', 'mysql2/promise');
      const { MysqlStore } = require('../adapters/mysql/index.cjs');
      const pool = mysql.createPool({ uri: scheme === 'mariadb' ? `mysql:${url.slice('mariadb:'.length)}` : url, connectionLimit: 2 });
      return built(
        () => new MysqlStore(pool, options),
        'mysql',
        () => pool.end(),
      );
    }
    case 'mongodb':
    case 'mongodb+srv': {
      const { MongoClient } = need('mongodb');
      const { MongoStore } = require('../adapters/mongodb/index.cjs');
      const client = new MongoClient(url, { serverSelectionTimeoutMS: 10_000, maxPoolSize: 2 });
      const store = built(
        () => new MongoStore(client, options),
        'mongodb',
        () => client.close(),
      );
      await client.connect().catch(async (error) => {
        await client.close();
        throw error;
      });
      return store;
    }
    case 'redis':
    case 'rediss':
      return openRedis(url, options, cwd);
    default:
      throw new UsageError(
        `--store ${shown(url)}: the URL must start with sqlite:, postgres://, mysql://, mariadb://, mongodb:// or redis://`,
      );
  }
}

/** A RedisStore over the project's node-redis (or, without it, its ioredis), connected once: a refused connection is STORE_UNAVAILABLE. */
async function openRedis(url, options, cwd) {
  const { RedisStore } = require('../adapters/redis/index.cjs');
  /** @param {any} error */
  const unreachable = (error) =>
    new IdemflowError('STORE_UNAVAILABLE', `the store is unavailable (connection-refused): ${error?.message ?? error}`, {
      details: { reason: 'connection-refused' },
      cause: error,
    });
  const redis = requireFrom(cwd, 'redis');
  if (redis !== null) {
    const client = redis.createClient({ url, socket: { connectTimeout: 10_000, reconnectStrategy: false } });
    client.on('error', () => {}); // the command in flight reports it
    const closeQuietly = async () => {
      try {
        client.destroy();
      } catch {
        // closed already
      }
    };
    await client.connect().catch(async (error) => {
      await closeQuietly();
      throw unreachable(error);
    });
    return built(
      () => new RedisStore(client, options),
      'redis',
      () => client.quit().catch(closeQuietly),
    );
  }
  const ioredis = requireFrom(cwd, 'ioredis');
  if (ioredis === null) throw driverMissing('redis', shown(url), cwd);
  const Redis = ioredis.Redis ?? ioredis;
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 10_000, retryStrategy: () => null });
  client.on('error', () => {});
  await client.connect().catch((error) => {
    client.disconnect();
    throw unreachable(error);
  });
  return built(
    () => new RedisStore(client, options),
    'redis',
    () => client.quit().catch(() => client.disconnect()),
  );
}

module.exports = { openStoreUrl, parseTables };
