// A process whose store holds a connection inside a transaction while the
// parent ends that connection on the server (pg_terminate_backend, KILL).
// It reports the session id, waits for the parent's 'ended', waits until the
// driver has seen the connection close, then goes on with the transaction
// and reports what the store threw, then processes an event on a fresh
// connection. If the driver's 'error' reaches no listener, Node ends this
// process with "Unhandled 'error' event" and the parent sees the crash.
// In mode `lock` the connection is the session withExclusiveLock holds for
// its lock (no transaction): the lock's work waits for the end, returns, and
// the lock is then taken again, which the server freed with the session.
// In mode `checkout` (pg) the connection is ended as the pool hands it out:
// the pool's verify hook holds the new connection's socket unread until the
// server has ended it, then hands the client out and lets the socket be read
// at once, so the server's FATAL arrives before any `await` after connect().
// Usage: node fault-terminate.mjs <pg|mysql> <url> <idle|active|lock|checkout> <table prefix>
import { IdemflowError } from 'idemflow';
import { detectedSwap } from './fixtures.mjs';

const [kind, url, mode, prefix] = process.argv.slice(2);
const tables = { workflows: `${prefix}_workflows`, inbox: `${prefix}_inbox`, outbox: `${prefix}_outbox` };
// The swap holds the watcher's detection (its observation 1) in its deposits map; the event is its confirmation (observation 2).
const swap = detectedSwap({ id: 'wf-1', revision: 1, depositRef: 'tx-1', amountUnits: '100' });
const event = {
  eventId: `${prefix}-e1`,
  workflowId: 'wf-1',
  type: 'DEPOSIT_CONFIRMED',
  depositRef: 'tx-1',
  amountUnits: '100',
  sequence: 2,
};

const ended = new Promise((resolve) =>
  process.on('message', (message) => {
    if (message === 'ended') resolve();
  }),
);
let store;
let pool;
let sessionQuery;
let sleepQuery;
let closed;
// The connection the pool handed out last (in mode `lock`: the lock's session), for its id.
let acquired;
if (kind === 'pg') {
  const { default: pg } = await import('pg');
  const { PostgresStore } = await import('idemflow/postgres');
  if (mode === 'checkout') {
    // The tables are made on a pool of their own, so the store's first connection is the one verify holds.
    const setup = new pg.Pool({ connectionString: url, max: 1 });
    const made = new PostgresStore(setup, { tables });
    await made.migrate();
    await made.putWorkflow(swap);
    await setup.end();
  }
  let held = mode === 'checkout';
  const verify = (client, done) => {
    if (!held) return done();
    held = false;
    const socket = client.connection.stream;
    socket.pause();
    process.send({ session: client.processID });
    // From a timer, not a promise: the socket's buffered FATAL is read in the
    // tick after this callback, before any continuation of connect()'s promise.
    const handOut = (tries) => {
      if (socket.readableLength === 0 && tries > 0) return setTimeout(handOut, 10, tries - 1);
      done();
      socket.resume();
    };
    ended.then(() => setTimeout(handOut, 0, 500));
  };
  pool = new pg.Pool({ connectionString: url, max: 2, verify });
  pool.on('error', () => {}); // what the docs ask of the host: idle clients that lose their server
  // The checked-out client's own closing, seen without adding an 'error' listener to it (events.once would).
  pool.on('acquire', (client) => {
    acquired = client;
    closed = new Promise((resolve) => client.once('end', resolve));
  });
  store = new PostgresStore(pool, { tables });
  sessionQuery = 'SELECT pg_backend_pid() AS id';
  sleepQuery = 'SELECT pg_sleep(30)';
} else {
  const { default: mysql } = await import('mysql2/promise');
  const { MysqlStore } = await import('idemflow/mysql');
  pool = mysql.createPool({ uri: url, connectionLimit: 2 });
  pool.pool.on('acquire', (connection) => {
    acquired = {
      query: (sql) => new Promise((resolve, reject) => connection.query(sql, (error, rows) => (error ? reject(error) : resolve({ rows })))),
    };
    closed = new Promise((resolve) => connection.stream.once('close', resolve));
  });
  store = new MysqlStore(pool, { tables });
  sessionQuery = 'SELECT CONNECTION_ID() AS id';
  sleepQuery = 'SELECT SLEEP(30)';
}
if (mode !== 'checkout') {
  await store.migrate();
  await store.putWorkflow(swap);
}

const describe = (error) => ({
  coded: error instanceof IdemflowError,
  code: error?.code ?? null,
  disposition: error?.disposition ?? null,
  reason: error?.details?.reason ?? null,
  driverCode: error?.details?.driverCode ?? null,
  causeCode: error?.cause?.code ?? null,
  message: String(error?.message ?? error),
});

if (mode === 'lock') {
  let failure = null;
  let after;
  try {
    const held = await store.withExclusiveLock('fault-lock', async () => {
      const { rows } = await acquired.query(sessionQuery);
      process.send({ session: Number(rows[0].id) });
      await ended;
      await closed; // the driver has read the end of the lock's session (and emitted 'error')
      return 'ran';
    });
    after = held.acquired ? held.value : 'not acquired';
    const again = await store.withExclusiveLock('fault-lock', async () => 'taken again');
    after = `${after}, then ${again.acquired ? again.value : 'not acquired'}`;
  } catch (error) {
    failure = describe(error);
  }
  process.send({ failure, after });
  await pool.end();
  process.disconnect();
  process.exit(0);
}

let failure = null;
try {
  await store.transaction(async (tx) => {
    const [{ id }] = (await tx._execute(sessionQuery, [])).rows;
    process.send({ session: Number(id) });
    if (mode === 'active') {
      await tx._execute(sleepQuery, []); // ended by the parent while it runs
    } else {
      await ended;
      await closed; // the driver has read the end of the connection (and emitted 'error')
    }
    await tx.getWorkflow('wf-1');
  });
} catch (error) {
  failure = describe(error);
}
let after;
try {
  after = (await store.process(event, { ruleSet: 'deposit-swap' })).outcome;
} catch (error) {
  after = describe(error);
}
process.send({ failure, after });
await pool.end();
process.disconnect(); // the IPC channel would keep the process alive
