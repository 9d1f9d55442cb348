// Throwaway database servers for the fault tests: a PostgreSQL 15 or MariaDB
// instance of their own (a free port, a data directory under a temp dir,
// owned by the server's system user when this runs as root), which the tests
// terminate, restart, stop with SIGSTOP and fill up. The shared servers of
// the machine are never touched. Every server started here is killed at
// process exit, even when a test fails.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const PG_BIN = process.env.IDEMFLOW_PG_BIN || '/usr/lib/postgresql/15/bin';
const MARIADBD = process.env.IDEMFLOW_MARIADBD || '/usr/sbin/mariadbd';
const MARIADB_INSTALL_DB = process.env.IDEMFLOW_MARIADB_INSTALL_DB || '/usr/bin/mariadb-install-db';
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

const running = new Set();
process.on('exit', () => {
  for (const server of running) server.killNow();
});
// A run ended by a signal (a timeout's SIGTERM, ^C) takes its servers with it too: they run detached.
for (const [signal, code] of [
  ['SIGTERM', 143],
  ['SIGINT', 130],
]) {
  process.once(signal, () => {
    for (const server of running) server.killNow();
    process.exit(code);
  });
}

function executable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The uid and gid of a system user (servers refuse to run as root), or null when not root. */
function systemUser(name) {
  if (!isRoot) return null;
  try {
    return { uid: Number(execFileSync('id', ['-u', name]).toString()), gid: Number(execFileSync('id', ['-g', name]).toString()) };
  } catch {
    return undefined;
  }
}

/** Why the fault tests cannot run on PostgreSQL here, or null when they can. */
export function postgresMissing() {
  if (!executable(path.join(PG_BIN, 'postgres')) || !executable(path.join(PG_BIN, 'initdb')))
    return `no PostgreSQL server binaries in ${PG_BIN} (set IDEMFLOW_PG_BIN)`;
  if (systemUser('postgres') === undefined) return 'running as root, and there is no postgres user to run the server as';
  return null;
}

/** Why the fault tests cannot run on MariaDB here, or null when they can. */
export function mariadbMissing() {
  if (!executable(MARIADBD) || !executable(MARIADB_INSTALL_DB)) return `no MariaDB server binaries (${MARIADBD}, ${MARIADB_INSTALL_DB})`;
  if (systemUser('mysql') === undefined) return 'running as root, and there is no mysql user to run the server as';
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** The pids of every process under `root`, read from /proc. */
function descendants(root) {
  const children = new Map();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid).push(Number(entry));
  }
  const found = [];
  const walk = (pid) => {
    for (const child of children.get(pid) ?? []) {
      found.push(child);
      walk(child);
    }
  };
  walk(root);
  return found;
}

function chown(dir, user) {
  if (user) execFileSync('chown', ['-R', `${user.uid}:${user.gid}`, dir]);
}

/**
 * A server process and the faults it takes. `spawnServer()` starts the
 * process in a process group of its own (PostgreSQL's backends join it), so
 * that SIGSTOP stops all of it; `ready()` resolves when it accepts clients.
 */
class Server {
  #spawnServer;
  #ready;
  #shutdownSignal;
  #cleanup;
  child = null;
  log = [];
  faults = { terminate: 0, restart: 0, pause: 0, diskFull: 0 };

  constructor({ spawnServer, ready, shutdownSignal, cleanup }) {
    this.#spawnServer = spawnServer;
    this.#ready = ready;
    this.#shutdownSignal = shutdownSignal;
    this.#cleanup = cleanup;
    running.add(this);
  }

  async start() {
    const child = this.#spawnServer();
    this.child = child;
    child.stderr?.on('data', (chunk) => {
      this.log.push(String(chunk));
      if (this.log.length > 200) this.log.splice(0, 100);
    });
    child.stdout?.on('data', () => {});
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`the server exited while starting:\n${this.log.join('').slice(-2000)}`);
      try {
        await this.#ready();
        return;
      } catch (error) {
        if (Date.now() > deadline)
          throw new Error(`the server did not accept clients within 60 s (${error.message}):\n${this.log.join('').slice(-2000)}`);
        await sleep(100);
      }
    }
  }

  /**
   * The signal to the server and every process under it. PostgreSQL's
   * backends make themselves process group leaders (setsid), so signalling
   * the postmaster's group would miss them.
   */
  #signalGroup(signal) {
    for (const pid of [this.child.pid, ...descendants(this.child.pid)]) {
      try {
        process.kill(pid, signal);
      } catch {
        // gone already
      }
    }
  }

  /** SIGSTOP on the whole server for `ms`, then SIGCONT. */
  async pause(ms) {
    this.faults.pause += 1;
    this.#signalGroup('SIGSTOP');
    try {
      await sleep(ms);
    } finally {
      this.#signalGroup('SIGCONT');
    }
  }

  /** SIGSTOP without the SIGCONT: resume() ends it. */
  freeze() {
    this.#signalGroup('SIGSTOP');
  }

  resume() {
    this.#signalGroup('SIGCONT');
  }

  async #exit(signal, graceMs) {
    const child = this.child;
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    this.#signalGroup('SIGCONT');
    child.kill(signal);
    const timer = setTimeout(() => this.#signalGroup('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }

  /** A fast restart: the server's fast shutdown (open sessions are ended), then a start on the same port. */
  async restart() {
    this.faults.restart += 1;
    await this.#exit(this.#shutdownSignal, 20_000);
    await this.start();
  }

  async stop() {
    running.delete(this);
    await this.#exit(this.#shutdownSignal, 10_000);
    this.#cleanup();
  }

  killNow() {
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) {
      this.#signalGroup('SIGCONT');
      this.#signalGroup('SIGKILL');
    }
    try {
      this.#cleanup();
    } catch {
      // best effort at exit
    }
  }
}

/**
 * A small tmpfs of `mb` MiB at `<dir>/small`, owned by the server's user, for
 * filling a disk: `{ mount, error }` (mount null, and why, when it cannot be
 * done: it needs root); nothing for 0.
 */
function smallDisk(dir, mb, user) {
  if (mb <= 0) return { mount: null, error: null };
  if (!isRoot) return { mount: null, error: 'mounting a small tmpfs needs root' };
  const target = path.join(dir, 'small');
  fs.mkdirSync(target);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mb}m,mode=0700`, 'tmpfs', target], { stdio: 'pipe' });
    chown(target, user);
    return { mount: target, error: null };
  } catch (error) {
    return { mount: null, error: `mount -t tmpfs failed: ${String(error.stderr ?? error.message).trim()}` };
  }
}

function unmount(mount) {
  if (mount === null) return;
  try {
    execFileSync('umount', ['-l', mount], { stdio: 'ignore' });
  } catch {
    // already gone
  }
}

/**
 * A PostgreSQL 15 server of its own: `{ url, server, query(sql, params),
 * terminateBackends(), fillTablespace(), freeTablespace(), close() }`.
 * `smallTablespaceMb` mounts a tmpfs of that size (root only) and creates
 * tablespace `small` on it; `tablespace` is null when that could not be done.
 */
export async function startPostgres({ smallTablespaceMb = 0 } = {}) {
  const user = systemUser('postgres');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idemflow-faults-pg-'));
  const data = path.join(dir, 'data');
  fs.mkdirSync(data, { mode: 0o700 });
  chown(dir, user);
  const asUser = user ? { uid: user.uid, gid: user.gid } : {};
  execFileSync(path.join(PG_BIN, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8'], {
    ...asUser,
    stdio: 'ignore',
  });
  let { mount, error: tablespaceError } = smallDisk(dir, smallTablespaceMb, user);
  const port = await freePort();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const { default: pg } = await import('pg');
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  admin.on('error', () => {}); // an idle admin connection ended by a fault
  const server = new Server({
    spawnServer: () =>
      spawn(
        path.join(PG_BIN, 'postgres'),
        [
          '-D',
          data,
          '-p',
          String(port),
          '-k',
          dir,
          '-c',
          'listen_addresses=127.0.0.1',
          '-c',
          'fsync=off',
          '-c',
          'synchronous_commit=off',
          '-c',
          'full_page_writes=off',
          '-c',
          'shared_buffers=16MB',
          '-c',
          'max_connections=60',
          '-c',
          'log_min_messages=fatal',
        ],
        { ...asUser, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
      ),
    ready: async () => {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
      client.on('error', () => {});
      await client.connect();
      await client.end();
    },
    shutdownSignal: 'SIGINT', // fast shutdown
    cleanup: () => {
      unmount(mount);
      mount = null;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  });
  await server.start();
  /** A statement on the admin pool; a fault may end its connection, so it is tried again a few times. */
  const query = async (sql, params = []) => {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return (await admin.query(sql, params)).rows;
      } catch (error) {
        if (attempt >= 50 || /^(23|42|53)/.test(String(error.code))) throw error;
        await sleep(100);
      }
    }
  };
  if (mount !== null) await query(`CREATE TABLESPACE small LOCATION '${mount}'`);
  return {
    url,
    server,
    query,
    tablespace: mount === null ? null : 'small',
    tablespaceError,
    /** pg_terminate_backend on every other client session of the server; how many it ended. */
    async terminateBackends() {
      server.faults.terminate += 1;
      const rows = await query(`SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity
        WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`);
      return rows.filter((row) => row.ended).length;
    },
    /** Fills tablespace `small` with a filler table until the disk is full (SQLSTATE 53100). */
    async fillTablespace() {
      server.faults.diskFull += 1;
      await query('CREATE TABLE IF NOT EXISTS filler (pad text) TABLESPACE small');
      try {
        for (;;) await query('INSERT INTO filler SELECT repeat(md5(random()::text), 60) FROM generate_series(1, 2000)');
      } catch (error) {
        if (error.code !== '53100') throw error;
      }
    },
    async freeTablespace() {
      await query('DROP TABLE IF EXISTS filler');
    },
    async close() {
      await admin.end().catch(() => {});
      await server.stop();
    },
  };
}

/**
 * A MariaDB server of its own: `{ url, server, query(sql, params),
 * killConnections(), smallDir, smallDirError, close() }`. `smallDirMb` mounts
 * a tmpfs of that size (root only) where a table can be put with `DATA
 * DIRECTORY` and fill it; `smallDir` is null when that could not be done.
 */
export async function startMariadb({ smallDirMb = 0 } = {}) {
  const user = systemUser('mysql');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idemflow-faults-mariadb-'));
  const data = path.join(dir, 'data');
  fs.mkdirSync(data);
  chown(dir, user);
  let { mount: smallDir, error: smallDirError } = smallDisk(dir, smallDirMb, user);
  const userArgs = user ? ['--user=mysql'] : [];
  execFileSync(
    MARIADB_INSTALL_DB,
    [
      '--no-defaults',
      `--datadir=${data}`,
      ...userArgs,
      '--auth-root-authentication-method=normal',
      '--skip-test-db',
      '--innodb-log-file-size=8M',
      '--innodb-buffer-pool-size=16M',
    ],
    { stdio: 'ignore' },
  );
  const port = await freePort();
  const url = `mysql://root@127.0.0.1:${port}/test`;
  const { default: mysql } = await import('mysql2/promise');
  const server = new Server({
    spawnServer: () =>
      spawn(
        MARIADBD,
        [
          '--no-defaults',
          `--datadir=${data}`,
          ...userArgs,
          `--port=${port}`,
          '--bind-address=127.0.0.1',
          `--socket=${path.join(dir, 'mariadb.sock')}`,
          `--pid-file=${path.join(dir, 'mariadb.pid')}`,
          '--skip-log-bin',
          '--skip-name-resolve',
          '--innodb-buffer-pool-size=32M',
          '--innodb-log-file-size=8M',
          '--innodb-flush-log-at-trx-commit=2',
          '--max-connections=100',
          `--log-error=${path.join(dir, 'error.log')}`,
        ],
        { detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
      ),
    ready: async () => {
      const connection = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root', connectTimeout: 1000 });
      connection.on('error', () => {});
      await connection.query('CREATE DATABASE IF NOT EXISTS test');
      await connection.end();
    },
    shutdownSignal: 'SIGTERM',
    cleanup: () => {
      unmount(smallDir);
      smallDir = null;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  });
  await server.start();
  let admin = null;
  const query = async (sql, params = []) => {
    for (let attempt = 1; ; attempt += 1) {
      try {
        admin ??= mysql.createPool({ uri: url, connectionLimit: 2 });
        return (await admin.query(sql, params))[0];
      } catch (error) {
        if (attempt >= 50 || (typeof error.errno === 'number' && error.errno < 2000 && error.errno !== 1927 && error.errno !== 1053))
          throw error;
        await admin?.end().catch(() => {});
        admin = null;
        await sleep(100);
      }
    }
  };
  return {
    url,
    server,
    query,
    smallDir,
    smallDirError,
    /** Fills the small data directory with a filler table until the disk is full (1114). */
    async fillTablespace() {
      server.faults.diskFull += 1;
      await query(
        `CREATE TABLE IF NOT EXISTS test.filler (id INT PRIMARY KEY AUTO_INCREMENT, pad TEXT) ENGINE=InnoDB DATA DIRECTORY='${smallDir}'`,
      );
      try {
        for (;;) await query('INSERT INTO test.filler (pad) SELECT REPEAT(MD5(RAND()), 60) FROM seq_1_to_200');
      } catch (error) {
        if (error.errno !== 1114 && error.errno !== 1021) throw error;
      }
    },
    async freeTablespace() {
      await query('DROP TABLE IF EXISTS test.filler');
    },
    /** KILL on every other client connection of the server; how many it ended. */
    async killConnections() {
      server.faults.terminate += 1;
      const rows = await query(
        "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND command <> 'Daemon' AND user = 'root'",
      );
      let ended = 0;
      for (const { id } of rows) {
        try {
          await query(`KILL ${Number(id)}`);
          ended += 1;
        } catch {
          // it ended meanwhile
        }
      }
      return ended;
    },
    async close() {
      await admin?.end().catch(() => {});
      await server.stop();
    },
  };
}

const REDIS_SERVER = process.env.IDEMFLOW_REDIS_SERVER || '/usr/bin/redis-server';

/** Why the fault tests cannot run on Redis here, or null when they can. */
export function redisMissing() {
  return executable(REDIS_SERVER) ? null : `no redis-server at ${REDIS_SERVER} (set IDEMFLOW_REDIS_SERVER)`;
}

/** A node-redis client closed, whatever state its connection is in. */
function closeQuietly(client) {
  try {
    client?.destroy();
  } catch {
    // closed already
  }
}

/**
 * A Redis server of its own, persisting as `appendfsync` says ('always',
 * 'everysec', or 'no-aof' for none): `{ url, server, command(...args),
 * killConnections(), close() }`. Its restart is a crash: SIGKILL, then a
 * start on the same port and data directory, which replays the AOF.
 */
export async function startRedis({ appendfsync = 'always', replicaOf = null } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idemflow-faults-redis-'));
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  const persistence = appendfsync === 'no-aof' ? ['--appendonly', 'no'] : ['--appendonly', 'yes', '--appendfsync', appendfsync];
  // A replica of another of these (its url), read-only until promoted.
  const replication = replicaOf === null ? [] : ['--replicaof', '127.0.0.1', new URL(replicaOf).port];
  const { createClient } = await import('redis');
  let admin = null;
  const connect = async () => {
    const client = createClient({ url, socket: { connectTimeout: 1000, reconnectStrategy: false } });
    client.on('error', () => {});
    await client.connect();
    return client;
  };
  const server = new Server({
    spawnServer: () =>
      spawn(
        REDIS_SERVER,
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--dir',
          dir,
          '--save',
          '',
          ...persistence,
          ...replication,
          '--protected-mode',
          'no',
        ],
        { detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
      ),
    ready: async () => {
      const client = await connect();
      try {
        // LOADING while the AOF is replayed.
        await client.ping();
      } finally {
        closeQuietly(client);
      }
    },
    shutdownSignal: 'SIGKILL',
    cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
  });
  await server.start();
  /** One command on an admin connection, made again after a fault ended it. */
  const command = async (...args) => {
    for (let attempt = 1; ; attempt += 1) {
      try {
        admin ??= await connect();
        return await admin.sendCommand(args.map(String));
      } catch (error) {
        if (attempt >= 50) throw error;
        closeQuietly(admin);
        admin = null;
        await sleep(100);
      }
    }
  };
  return {
    url,
    server,
    command,
    /** A replica's link to its primary is up (resolves within 30 s, or throws). */
    async synced() {
      for (let i = 0; i < 300; i += 1) {
        if (/master_link_status:up/.test(String(await command('INFO', 'replication')))) return;
        await sleep(100);
      }
      throw new Error('the replica did not sync with its primary within 30 s');
    },
    /** A replica made a primary (REPLICAOF NO ONE), as a failover does. */
    promote: () => command('REPLICAOF', 'NO', 'ONE'),
    /** CLIENT KILL on every other normal connection; how many it ended. */
    async killConnections() {
      server.faults.terminate += 1;
      return Number(await command('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes'));
    },
    async close() {
      closeQuietly(admin);
      await server.stop();
    },
  };
}
