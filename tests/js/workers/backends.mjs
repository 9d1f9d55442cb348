// The databases the adapter tests, the multi-process runs and the bench share.
// Drivers load lazily, so a process that uses one never loads the others
// (and a Node 22 child can run the node:sqlite backend without better-sqlite3).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const PG_URL = process.env.IDEMFLOW_PG_URL || null;
export const MYSQL_URL = process.env.IDEMFLOW_MYSQL_URL || null;
export const MONGODB_URL = process.env.IDEMFLOW_MONGODB_URL || null;
export const REDIS_URL = process.env.IDEMFLOW_REDIS_URL || null;

let counter = 0;

/** Short, distinct per run and per call: `t<time><pid><n>` (index names stay under 63 characters). */
export function uniquePrefix() {
  counter += 1;
  return `t${Date.now().toString(36)}${process.pid.toString(36)}${counter.toString(36)}`;
}

export function tablesFor(prefix) {
  return { workflows: `${prefix}_workflows`, inbox: `${prefix}_inbox`, outbox: `${prefix}_outbox` };
}

export function hasNodeSqlite() {
  try {
    return typeof process.getBuiltinModule === 'function' && process.getBuiltinModule('node:sqlite') !== undefined;
  } catch {
    return false;
  }
}

const quoteSql = (name) =>
  name
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
/** The key column of each table. */
const KEY_COLUMN = { workflows: 'id', inbox: 'event_id', outbox: 'id' };
/** A column's name in a MongoDB document (event_id → eventId). */
export const documentField = (column) => column.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());

/**
 * `setRaw(which, key, values)` over `run(sql, params)` → rows: writes values
 * into a stored row behind the store's back (what a broken migration, a manual
 * fix or another program could leave there), bypassing every check of the
 * store. Resolves false when the column's type does not hold the value as
 * given (the database refused it, or turned 1.5 into 2 or ' 3' into 3).
 */
function sqlSetRaw(tables, quote, run, numbered) {
  return async (which, key, values) => {
    const columns = Object.keys(values);
    const mark = (i) => (numbered ? `$${i + 1}` : '?');
    const set = columns.map((column, i) => `${column} = ${mark(i)}`).join(', ');
    const where = (i) => `WHERE ${KEY_COLUMN[which]} = ${mark(i)}`;
    try {
      await run(`UPDATE ${quote(tables[which])} SET ${set} ${where(columns.length)}`, [...Object.values(values), key]);
    } catch {
      return false;
    }
    const [row] = await run(`SELECT ${columns.join(', ')} FROM ${quote(tables[which])} ${where(0)}`, [key]);
    return columns.every((column) => String(row[column]) === String(values[column]));
  };
}

/** setRaw over a MongoDB database (or the fake): values named by their SQL columns. */
export function mongoSetRaw(db, tables) {
  return async (which, key, values) => {
    const fields = Object.fromEntries(Object.entries(values).map(([column, value]) => [documentField(column), value]));
    await db.collection(tables[which]).updateOne({ _id: key }, { $set: fields });
    return true;
  };
}
/** A document has no columns: the field is removed from every document (one at a time: the fake has no updateMany). */
export function mongoDropColumn(db, tables) {
  return async (which, column) => {
    const collection = db.collection(tables[which]);
    for (const { _id } of await collection.find({}).toArray())
      await collection.updateOne({ _id }, { $unset: { [documentField(column)]: '' } });
  };
}
const quoteMysql = (name) =>
  name
    .split('.')
    .map((part) => `\`${part}\``)
    .join('.');

/**
 * Opens a store of one kind over its own connection: `{store, count(which),
 * rawData(id), drop(), close()}`. Kinds: sqlite, sqlite-node, pg, mysql,
 * mongodb (pglite is shared in process: see openPglite).
 */
// url and poolSize configure the connection this helper opens; the rest are the store's own options.
export async function openStore(kind, { tables, file, url, poolSize, ...options } = {}) {
  switch (kind) {
    case 'sqlite':
    case 'sqlite-node': {
      const { SqliteStore } = await import('idemflow/sqlite');
      const store = SqliteStore.open(file, { ...options, tables, driver: kind === 'sqlite' ? 'better-sqlite3' : 'node:sqlite' });
      const one = (sql, ...params) => store.db.prepare(sql).get(...params);
      return {
        store,
        count: async (which) => Number(one(`SELECT COUNT(*) AS n FROM ${quoteSql(tables[which])}`).n),
        rawData: async (id) => one(`SELECT data FROM ${quoteSql(tables.workflows)} WHERE id = ?`, id)?.data ?? null,
        query: async (sql, ...params) => store.db.prepare(sql).all(...params),
        rows: async (which, columns) => store.db.prepare(`SELECT ${columns} FROM ${quoteSql(tables[which])}`).all(),
        dropColumn: async (which, column) => {
          store.db.exec(`ALTER TABLE ${quoteSql(tables[which])} DROP COLUMN ${column}`);
        },
        setRaw: sqlSetRaw(
          tables,
          quoteSql,
          async (sql, params) => {
            const statement = store.db.prepare(sql);
            if (/^SELECT/.test(sql)) return statement.all(...params);
            statement.run(...params);
            return [];
          },
          false,
        ),
        drop: async () => {},
        close: () => store.close(),
      };
    }
    case 'pg': {
      const { default: pg } = await import('pg');
      const { PostgresStore } = await import('idemflow/postgres');
      const pool = new pg.Pool({ connectionString: url ?? PG_URL, max: poolSize ?? 4 });
      pool.on('error', () => {}); // an idle client lost its server; the next query reports it
      const store = constructed(
        () => new PostgresStore(pool, { ...options, tables }),
        () => pool.end(),
      );
      return sqlHelpers(
        store,
        tables,
        quoteSql,
        async (sql, params) => (await pool.query(sql, params)).rows,
        () => pool.end(),
        '$1',
      );
    }
    case 'mysql': {
      const { default: mysql } = await import('mysql2/promise');
      const { MysqlStore } = await import('idemflow/mysql');
      const pool = mysql.createPool({ uri: url ?? MYSQL_URL, connectionLimit: poolSize ?? 4 });
      const store = constructed(
        () => new MysqlStore(pool, { ...options, tables }),
        () => pool.end(),
      );
      return sqlHelpers(
        store,
        tables,
        quoteMysql,
        async (sql, params) => (await pool.query(sql, params))[0],
        () => pool.end(),
        '?',
      );
    }
    case 'mongodb': {
      const { MongoClient } = await import('mongodb');
      const { MongoStore } = await import('idemflow/mongodb');
      const client = new MongoClient(url ?? MONGODB_URL, {
        serverSelectionTimeoutMS: 5000,
        ...(poolSize ? { maxPoolSize: poolSize } : {}),
      });
      await client.connect();
      const store = constructed(
        () => new MongoStore(client, { ...options, tables }),
        () => client.close(),
      );
      return {
        store,
        count: async (which) => store.db.collection(tables[which]).countDocuments(),
        rawData: async (id) => (await store.db.collection(tables.workflows).findOne({ _id: id }))?.data ?? null,
        query: null,
        dropColumn: mongoDropColumn(store.db, tables),
        setRaw: mongoSetRaw(store.db, tables),
        drop: async () => {
          for (const name of Object.values(tables))
            await store.db
              .collection(name)
              .drop()
              .catch(() => {});
        },
        close: () => client.close(),
      };
    }
    case 'redis': {
      const { createClient } = await import('redis');
      const { RedisStore } = await import('idemflow/redis');
      const client = createClient({ url: url ?? REDIS_URL });
      client.on('error', () => {}); // a lost connection fails the next command, which the store reports
      await client.connect();
      const store = constructed(
        () => new RedisStore(client, { ...options, tables }),
        () => client.quit(),
      );
      return redisHelpers(store, client, tables);
    }
    default:
      throw new Error(`unknown backend kind ${kind}`);
  }
}

/** Builds a store; if its options are refused, closes the connection first so nothing is left open. */
function constructed(build, close) {
  try {
    return build();
  } catch (error) {
    close();
    throw error;
  }
}

function sqlHelpers(store, tables, quote, query, end, mark) {
  return {
    store,
    count: async (which) => Number((await query(`SELECT COUNT(*) AS n FROM ${quote(tables[which])}`, []))[0].n),
    rawData: async (id) => (await query(`SELECT data FROM ${quote(tables.workflows)} WHERE id = ${mark}`, [id]))[0]?.data ?? null,
    query,
    /** Every row of a table: `columns` of it. */
    rows: (which, columns) => query(`SELECT ${columns} FROM ${quote(tables[which])}`, []),
    /** Makes the table look like one an earlier version made: without `column`. */
    dropColumn: async (which, column) => {
      await query(`ALTER TABLE ${quote(tables[which])} DROP COLUMN ${column}`, []);
    },
    setRaw: sqlSetRaw(tables, quote, query, mark === '$1'),
    drop: async () => {
      for (const name of Object.values(tables)) await query(`DROP TABLE IF EXISTS ${quote(name)}`, []);
    },
    close: end,
  };
}

/** Every key under one of `tables`' names (records, indexes, holds and locks), found with SCAN. */
async function redisKeys(client, tables, part = '') {
  const keys = [];
  for (const table of Object.values(tables)) {
    for await (const batch of client.scanIterator({ MATCH: `${table}:${part}*`, COUNT: 1000 })) keys.push(...batch);
  }
  return keys;
}

/** The helpers over a RedisStore: records are hashes named `<table>:r:<id>`, their fields named as MongoDB's documents'. */
export function redisHelpers(store, client, tables) {
  const recordKey = (which, key) => `${tables[which]}:r:${key}`;
  return {
    store,
    count: async (which) => (await redisKeys(client, { [which]: tables[which] }, 'r:')).length,
    rawData: async (id) => (await client.hGet(recordKey('workflows', id), 'data')) ?? null,
    query: null,
    /** Every record of a table, its fields named as the SQL stores' columns (all of them: `columns` is for SQL). */
    rows: async (which) => {
      const rows = [];
      for (const key of await redisKeys(client, { [which]: tables[which] }, 'r:')) {
        const row = {};
        for (const [field, value] of Object.entries(await client.hGetAll(key)))
          row[field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = value;
        rows.push(row);
      }
      return rows;
    },
    // A record changed by hand: an operation's indexes are then brought up to it, as an operator's fix would.
    setRaw: async (which, key, values) => {
      const [status, type] = which === 'outbox' ? await client.hmGet(recordKey(which, key), ['status', 'type']) : [];
      for (const [column, value] of Object.entries(values)) {
        const field = documentField(column);
        if (value === null || value === undefined) await client.hDel(recordKey(which, key), field);
        else await client.hSet(recordKey(which, key), field, typeof value === 'object' ? JSON.stringify(value) : String(value));
      }
      if (which === 'outbox') await store._reindexOperation(key, { status, type });
      return true;
    },
    dropColumn: async (which, column) => {
      for (const key of await redisKeys(client, { [which]: tables[which] }, 'r:')) await client.hDel(key, documentField(column));
    },
    drop: async () => {
      const keys = await redisKeys(client, tables);
      for (let i = 0; i < keys.length; i += 500) await client.unlink(keys.slice(i, i + 500));
    },
    close: () => client.quit(),
  };
}

/** A PGlite instance in process, and stores over it. */
export async function openPglite() {
  const { PGlite } = await import('@electric-sql/pglite');
  const { PostgresStore } = await import('idemflow/postgres');
  const db = new PGlite();
  await db.waitReady;
  return {
    db,
    open(tables, options = {}) {
      const store = new PostgresStore(db, { ...options, tables });
      const query = async (sql, params) => (await db.query(sql, params)).rows;
      return sqlHelpers(store, tables, quoteSql, query, async () => {}, '$1');
    },
    close: () => db.close(),
  };
}

export function tempDir(tag) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `idemflow-${tag}-`));
}

/** A SQLite backend: one database file per set of tables, in a directory of the backend's own. */
function sqliteBackend(kind) {
  return async () => {
    const dir = tempDir(kind);
    const file = (tables) => path.join(dir, `${tables.inbox}.db`);
    return {
      open: (tables, options = {}) => openStore(kind, { ...options, tables, file: file(tables) }),
      spec: (tables) => ({ kind, tables, file: file(tables) }),
      close: async () => fs.rmSync(dir, { recursive: true, force: true }),
    };
  };
}

/** A server backend: a connection pool per helper, tables dropped by the suite that made them. */
function serverBackend(kind, url) {
  return async () => ({
    open: (tables, options = {}) => openStore(kind, { ...options, tables, url }),
    spec: (tables) => ({ kind, url, tables }),
    close: async () => {},
  });
}

/**
 * Every store the suites run on, registered once: the conformance suite
 * (test/adapters.test.mjs), the outbox suite (workers/outbox-backends.mjs)
 * and the bench (bench/adapters.mjs) take their backends from here. A
 * durable backend's `setup()` resolves `{ open(tables, options) → helper,
 * spec(tables) → what another process needs to open the same tables (or
 * null), close() }`; a helper is `{ store, count, rawData, query, setRaw,
 * drop, close }` (see openStore). Server backends skip with one line when
 * their URL is not set.
 */
export const BACKENDS = [
  { id: 'memory', name: 'in-memory store', durable: false },
  { id: 'sqlite', name: 'SQLite file via better-sqlite3', durable: true, setup: sqliteBackend('sqlite') },
  {
    id: 'sqlite-node',
    name: 'SQLite file via node:sqlite',
    durable: true,
    skip: hasNodeSqlite() ? false : `node:sqlite needs Node 22.13+ (this is ${process.version}); the Node 22 run covers it`,
    setup: sqliteBackend('sqlite-node'),
  },
  {
    id: 'pglite',
    name: 'PostgreSQL via PGlite (in process)',
    durable: true,
    setup: async () => {
      const pglite = await openPglite();
      return {
        open: async (tables, { poolSize, ...options } = {}) => pglite.open(tables, options),
        spec: () => null,
        close: () => pglite.close(),
        pglite,
      };
    },
  },
  {
    id: 'pg',
    name: 'PostgreSQL server',
    durable: true,
    skip: PG_URL ? false : 'set IDEMFLOW_PG_URL=postgres://user@host:5432/db to run the suites on a PostgreSQL server',
    setup: serverBackend('pg', PG_URL),
  },
  {
    id: 'mysql',
    name: 'MariaDB/MySQL server',
    durable: true,
    skip: MYSQL_URL ? false : 'set IDEMFLOW_MYSQL_URL=mysql://user@host:3306/db to run the suites on MariaDB or MySQL',
    setup: serverBackend('mysql', MYSQL_URL),
  },
  {
    // Runs the adapter's own code everywhere; the real driver and server run below when the URL is set.
    id: 'mongodb-fake',
    name: 'MongoStore over an in-process fake of the driver (not a MongoDB server)',
    durable: true,
    // Tests run on it; benchmarks do not (a fake's speed, quadratic in its documents, says nothing).
    fake: true,
    setup: async () => {
      const { FakeMongoClient } = await import('./mongo-fake.mjs');
      const { MongoStore } = await import('idemflow/mongodb');
      const client = new FakeMongoClient();
      return {
        open: async (tables, { poolSize, ...options } = {}) => {
          const store = new MongoStore(client, { ...options, tables, db: 'suites' });
          return {
            store,
            count: (which) => store.db.collection(tables[which]).countDocuments(),
            rawData: async (id) => (await store.db.collection(tables.workflows).findOne({ _id: id }))?.data ?? null,
            query: null,
            setRaw: mongoSetRaw(store.db, tables),
            dropColumn: mongoDropColumn(store.db, tables),
            drop: async () => {
              for (const name of Object.values(tables)) await store.db.collection(name).drop();
            },
            close: async () => {},
          };
        },
        spec: () => null,
        close: () => client.close(),
      };
    },
  },
  {
    id: 'redis',
    name: 'Redis server',
    durable: true,
    skip: REDIS_URL ? false : 'set IDEMFLOW_REDIS_URL=redis://host:6379 to run the suites on Redis',
    setup: serverBackend('redis', REDIS_URL),
  },
  {
    id: 'mongodb',
    name: 'MongoDB replica set',
    durable: true,
    skip: MONGODB_URL ? false : 'no MongoDB here: set IDEMFLOW_MONGODB_URL=mongodb://host/db?replicaSet=rs0 to run the suites on MongoDB',
    setup: serverBackend('mongodb', MONGODB_URL),
  },
];

/**
 * A suite's store on `backend` (an entry of BACKENDS), opened by the
 * suite's `before` and closed by its `after`: `{ store, helper, env, tables }`,
 * filled in once `before` has run (the in-memory store has no env and its
 * helper is `{ store }`).
 */
export function suiteStore(backend, { before, after }) {
  const suite = { env: null, helper: null, store: null, tables: null };
  before(async () => {
    if (backend.durable) {
      suite.env = await backend.setup();
      suite.tables = tablesFor(uniquePrefix());
      suite.helper = await suite.env.open(suite.tables, {});
      await suite.helper.store.migrate();
    } else {
      const { InMemoryStore } = await import('idemflow');
      suite.helper = { store: new InMemoryStore() };
    }
    suite.store = suite.helper.store;
  });
  after(async () => {
    if (!backend.durable) return;
    await suite.helper?.drop?.();
    await suite.helper?.close?.();
    await suite.env?.close();
  });
  return suite;
}

/**
 * Adds `figures` under `key` to target/bench.json (the figures of `make
 * bench`, kept for tracking), with the time they were measured.
 */
export function writeBenchJson(key, figures) {
  const out = path.join(path.dirname(new URL(import.meta.url).pathname), '..', '..', '..', 'target', 'bench.json');
  let previous = {};
  try {
    previous = JSON.parse(fs.readFileSync(out, 'utf8'));
  } catch {
    // the first figures of this checkout
  }
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ ...previous, [key]: { measuredAt: new Date().toISOString(), ...figures } }, null, 2)}\n`);
  console.log(`${key}: written to target/bench.json`);
}
