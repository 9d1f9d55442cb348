// The databases the adapter tests, the multi-process runs and the bench share.
// Drivers load lazily, so a process that uses one never loads the others
// (and a Node 22 child can run the node:sqlite backend without better-sqlite3).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const PG_URL = process.env.IDEMFLOW_PG_URL || null;
export const MYSQL_URL = process.env.IDEMFLOW_MYSQL_URL || null;
export const MONGODB_URL = process.env.IDEMFLOW_MONGODB_URL || null;

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

const quoteSql = (name) => name.split('.').map((part) => `"${part}"`).join('.');
const quoteMysql = (name) => name.split('.').map((part) => `\`${part}\``).join('.');

/**
 * Opens a store of one kind over its own connection: `{store, count(which),
 * rawData(id), drop(), close()}`. Kinds: sqlite, sqlite-node, pg, mysql,
 * mongodb (pglite is shared in process: see openPglite).
 */
export async function openStore(kind, { tables, file, ...options } = {}) {
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
        drop: async () => {},
        close: () => store.close(),
      };
    }
    case 'pg': {
      const { default: pg } = await import('pg');
      const { PostgresStore } = await import('idemflow/postgres');
      const pool = new pg.Pool({ connectionString: options.url ?? PG_URL, max: options.poolSize ?? 4 });
      pool.on('error', () => {}); // an idle client lost its server; the next query reports it
      const store = constructed(() => new PostgresStore(pool, { ...options, tables }), () => pool.end());
      return sqlHelpers(store, tables, quoteSql, async (sql, params) => (await pool.query(sql, params)).rows, () => pool.end(), '$1');
    }
    case 'mysql': {
      const { default: mysql } = await import('mysql2/promise');
      const { MysqlStore } = await import('idemflow/mysql');
      const pool = mysql.createPool({ uri: options.url ?? MYSQL_URL, connectionLimit: options.poolSize ?? 4 });
      const store = constructed(() => new MysqlStore(pool, { ...options, tables }), () => pool.end());
      return sqlHelpers(store, tables, quoteMysql, async (sql, params) => (await pool.query(sql, params))[0], () => pool.end(), '?');
    }
    case 'mongodb': {
      const { MongoClient } = await import('mongodb');
      const { MongoStore } = await import('idemflow/mongodb');
      const client = new MongoClient(options.url ?? MONGODB_URL, { serverSelectionTimeoutMS: 5000, ...(options.poolSize ? { maxPoolSize: options.poolSize } : {}) });
      await client.connect();
      const store = constructed(() => new MongoStore(client, { ...options, tables }), () => client.close());
      return {
        store,
        count: async (which) => store.db.collection(tables[which]).countDocuments(),
        rawData: async (id) => (await store.db.collection(tables.workflows).findOne({ _id: id }))?.data ?? null,
        query: null,
        drop: async () => {
          for (const name of Object.values(tables)) await store.db.collection(name).drop().catch(() => {});
        },
        close: () => client.close(),
      };
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
    drop: async () => {
      for (const name of Object.values(tables)) await query(`DROP TABLE IF EXISTS ${quote(name)}`, []);
    },
    close: end,
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
