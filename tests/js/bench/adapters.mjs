// Events per second through store.process, per available backend, beside a
// hand-written handler that issues the same statements (the same columns
// read and written) in the same kind of transaction without idemflow: the
// cost floor. Both run the same events on
// identical tables in interleaved rounds, so the ratio compares like with like.
// Server backends run when IDEMFLOW_PG_URL / IDEMFLOW_MYSQL_URL /
// IDEMFLOW_MONGODB_URL / IDEMFLOW_REDIS_URL are set.
import fs from 'node:fs';
import path from 'node:path';
import { BACKENDS, openPglite, openStore, tablesFor, tempDir, uniquePrefix, writeBenchJson } from '../workers/backends.mjs';
import {
  fingerprintOf,
  handWritten,
  mysqlTransactions,
  pgliteTransactions,
  pgTransactions,
  REDIS_STATEMENTS,
  RULES_HASH,
  redisTransactions,
  sqliteTransactions,
  statements,
} from './hand-written.mjs';

const WORKFLOWS = Number(process.env.BENCH_WORKFLOWS ?? 1500);
const ROUNDS = 8;
const WARM_UP = 100; // workflows whose events run untimed first, so neither contender pays for a cold start

/**
 * Per workflow (in deposit: the watcher's detection, its observation 1, recorded as deposit-swap v3 keeps it, in the
 * deposits map only): a confirmation (observation 2, applied: the exchange starts), its redelivery (duplicate) and a
 * re-published id (already-applied).
 */
function workload(count = WORKFLOWS, tag = 'wf') {
  const workflows = Array.from({ length: count }, (_, i) => {
    const depositRef = `btc:tx-${i}:vout-0`;
    return {
      id: `${tag}-${i}`,
      status: 'deposit',
      revision: 1,
      deposits: { [depositRef]: { event: 'DEPOSIT_DETECTED', amountUnits: `${(i + 1) * 1000}000000`, sequence: 1 } },
    };
  });
  const events = [];
  for (const w of workflows) {
    const [[depositRef, { amountUnits }]] = Object.entries(w.deposits);
    const fields = { workflowId: w.id, type: 'DEPOSIT_CONFIRMED', depositRef, amountUnits, sequence: 2 };
    events.push({ eventId: `a:${w.id}`, ...fields }, { eventId: `a:${w.id}`, ...fields }, { eventId: `b:${w.id}`, ...fields });
  }
  return { workflows, events };
}

function mongoTransactions(client, _db, _tables) {
  // The same reads and writes as documents, in a withTransaction of the same options.
  return async (work) => {
    let result;
    await client.withSession((session) =>
      session.withTransaction(
        async () => {
          result = await work(session);
        },
        { readConcern: { level: 'snapshot' }, writeConcern: { w: 'majority' }, readPreference: 'primary' },
      ),
    );
    return result;
  };
}

/** Whether `amount` (integer base units, digits) is at least `expected`; unset, any amount covers. */
function covers(amount, expected) {
  if (expected === undefined) return true;
  return amount.length !== expected.length ? amount.length > expected.length : amount >= expected;
}

async function handWrittenMongo(db, tables, session, event, now) {
  const fingerprint = fingerprintOf(event);
  const stored = await db.collection(tables.inbox).findOne({ _id: event.eventId }, { session });
  if (stored) return 'duplicate-delivery';
  const workflow = await db.collection(tables.workflows).findOne({ _id: event.workflowId }, { session });
  // The confirmation's transitions this workload takes (v3), on the deposit's own entry in data.deposits (its amount
  // must be the entry's; no entry compares as 0): in deposit, a newer observation that covers expectedUnits (none is
  // set here: any amount covers) starts the exchange, the same one again is already-applied, an older one stale; in
  // exchange, the exchanged deposit's confirmation re-published is already-applied. Anything else (a partial or
  // second deposit, a reorganisation after the exchange started) this workload never sends: refused.
  const data = workflow.data ?? {};
  const deposits = data.deposits ?? {};
  const entry = deposits[event.depositRef];
  if (entry !== undefined && entry.amountUnits !== event.amountUnits) throw new Error(`IDENTITY_MISMATCH on ${event.workflowId}`);
  const seen = entry?.sequence ?? 0;
  const inDeposit = workflow.status === 'deposit';
  const republished = workflow.status === 'exchange' && data.depositRef === event.depositRef && event.sequence === seen;
  if (!(inDeposit && (event.sequence <= seen || covers(event.amountUnits, data.expectedUnits))) && !republished) {
    throw new Error(`no hand-written transition for ${event.type} (sequence ${event.sequence}) in ${workflow.status}`);
  }
  const applied = inDeposit && event.sequence > seen;
  const outcome = applied ? 'applied' : event.sequence === seen ? 'already-applied' : 'stale';
  const operationId = `start-exchange:${event.workflowId}`;
  const result = applied
    ? { operationIds: [operationId], status: 'exchange', revision: workflow.revision + 1 }
    : { operationIds: [], status: null, revision: null };
  await db.collection(tables.inbox).insertOne(
    {
      _id: event.eventId,
      fingerprint,
      workflowId: event.workflowId,
      eventType: event.type,
      outcome,
      ruleSetId: 'deposit-swap',
      ruleSetVersion: 3,
      ruleSetHash: RULES_HASH,
      recordedAt: now,
      result,
    },
    { session },
  );
  if (!applied) return outcome;
  // The whole new map (the other deposits' entries copied unchanged) and, as the exchange starts, the deposit it acts on.
  const { depositRef, amountUnits, sequence } = event;
  const newDeposits = {
    ...deposits,
    [depositRef]: { event: event.type, amountUnits, sequence, ...(entry?.operations ? { operations: entry.operations } : {}) },
  };
  const updated = await db.collection(tables.workflows).updateOne(
    { _id: event.workflowId, status: 'deposit', revision: workflow.revision },
    {
      $set: {
        status: 'exchange',
        revision: workflow.revision + 1,
        'data.amountUnits': amountUnits,
        'data.depositRef': depositRef,
        'data.deposits': newDeposits,
        'data.sequence': sequence,
        updatedAt: now,
      },
    },
    { session },
  );
  if (updated.matchedCount !== 1) throw new Error('lost the compare-and-set');
  await db.collection(tables.outbox).insertOne(
    {
      _id: operationId,
      type: 'START_EXCHANGE',
      workflowId: event.workflowId,
      eventId: event.eventId,
      payload: { depositRef, amountUnits },
      status: 'pending',
      attempts: 0,
      nextAttemptAt: now,
      leaseOwner: null,
      leaseExpiresAt: null,
      fencingToken: 0,
      lastError: null,
      createdAt: now,
      updatedAt: now,
      metadata: null,
      traceContext: null,
    },
    { session },
  );
  return 'applied';
}

/**
 * Times both contenders over the same events in interleaved rounds.
 * `open()` returns {store, handle(event), close()} over fresh, migrated tables.
 */
async function measure(name, openIdemflow, openHand) {
  const { workflows, events } = workload();
  const warm = workload(WARM_UP, 'warm');
  const idemflow = await openIdemflow();
  const hand = await openHand();
  for (const w of [...workflows, ...warm.workflows]) {
    await idemflow.store.putWorkflow(w);
    await hand.store.putWorkflow(w);
  }
  for (const event of warm.events) {
    await idemflow.handle(event);
    await hand.handle(event);
  }
  const time = { idemflow: 0n, hand: 0n };
  const outcomes = { idemflow: {}, hand: {} };
  const chunk = Math.ceil(events.length / ROUNDS);
  for (let round = 0; round < ROUNDS; round += 1) {
    const slice = events.slice(round * chunk, (round + 1) * chunk);
    for (const [key, contender] of round % 2 === 0
      ? [
          ['hand', hand],
          ['idemflow', idemflow],
        ]
      : [
          ['idemflow', idemflow],
          ['hand', hand],
        ]) {
      const started = process.hrtime.bigint();
      for (const event of slice) {
        const outcome = await contender.handle(event);
        outcomes[key][outcome] = (outcomes[key][outcome] ?? 0) + 1;
      }
      time[key] += process.hrtime.bigint() - started;
    }
  }
  await idemflow.close();
  await hand.close();
  for (const key of ['idemflow', 'hand']) {
    const o = outcomes[key];
    if (o.applied !== WORKFLOWS || o['duplicate-delivery'] !== WORKFLOWS || o['already-applied'] !== WORKFLOWS) {
      throw new Error(`${name}: ${key} gave ${JSON.stringify(o)}`);
    }
  }
  const rate = (ns) => events.length / (Number(ns) / 1e9);
  const line =
    `${name.padEnd(44)} idemflow ${fmt(rate(time.idemflow))} events/s   hand-written ${fmt(rate(time.hand))} events/s` +
    `   ratio ${(rate(time.idemflow) / rate(time.hand)).toFixed(2)}   (${events.length} events each: 1/3 applied, 1/3 duplicate, 1/3 already-applied)`;
  console.log(line);
  figures[name] = {
    idemflow: Math.round(rate(time.idemflow)),
    handWritten: Math.round(rate(time.hand)),
    ratio: Number((rate(time.idemflow) / rate(time.hand)).toFixed(2)),
  };
}

/**
 * The host's own row of a delivery (a shipment per applied event), for the
 * "own writes" measurements: its table's DDL and insert on each kind, the
 * insert idemflow's onApplied makes through tx.client, and the same insert
 * in the hand-written transaction (its q(sql, params)).
 */
const HOST_ROWS = {
  sqlite: { type: 'TEXT', mark: () => '?', write: (tx, sql, params) => tx.client.prepare(sql).run(...params) },
  pg: { type: 'TEXT', mark: (i) => `$${i}`, write: (tx, sql, params) => tx.client.query(sql, params) },
  mysql: { type: 'VARCHAR(200)', mark: () => '?', write: (tx, sql, params) => tx.client.query(sql, params) },
};

/** `{ create, onApplied, handWritten(q, event, outcome) }` of the host's shipments table `name` on `kind` (sqlite, pg, mysql). */
function hostRows(kind, name) {
  const { type, mark, write } = HOST_ROWS[kind];
  const insert = `INSERT INTO ${name} (event_id, order_id) VALUES (${mark(1)}, ${mark(2)})`;
  return {
    create: `CREATE TABLE ${name} (event_id ${type} PRIMARY KEY, order_id ${type} NOT NULL)`,
    onApplied: async (tx, decision) => {
      await write(tx, insert, [decision.event.eventId, decision.event.workflowId]);
      return { shipped: decision.event.eventId };
    },
    handWritten: async (q, event, outcome) => {
      if (outcome === 'applied') await q(insert, [event.eventId, event.workflowId]);
      return outcome;
    },
  };
}

/** What each measurement found, written to target/bench.json (key "perEvent") at the end. */
const figures = {};

const fmt = (n) => Math.round(n).toLocaleString('en-US').padStart(7);

/**
 * The two contenders over one store kind: idemflow's store.process, and the
 * hand-written handler in a transaction of `transactionsOf(store)`; with
 * `own` (a hostRows), each also writes the host's row of an applied event in
 * the same transaction (idemflow through onApplied).
 */
function contenders(openHelper, { host, transactionsOf, mark, own }) {
  return (withIdemflow) => async () => {
    const tables = tablesFor(uniquePrefix());
    const helper = await openHelper(tables);
    await helper.store.migrate();
    const rows = own ? hostRows(host, `${tables.inbox}_shipments`) : null;
    if (rows) await helper.exec(rows.create);
    const sql = statements(tables, mark);
    const transaction = transactionsOf(helper.store);
    const options = rows ? { onApplied: rows.onApplied } : undefined;
    const hand = rows
      ? (event) => transaction(async (q) => rows.handWritten(q, event, await handWritten(q, sql, event, Date.now())))
      : (event) => transaction((q) => handWritten(q, sql, event, Date.now()));
    return {
      store: helper.store,
      handle: withIdemflow ? async (event) => (await helper.store.process(event, options)).outcome : hand,
      close: () => helper.close(),
    };
  };
}

async function sqliteContenders(kind, label) {
  const dir = tempDir('bench');
  const openHelper = async (tables) => {
    const helper = await openStore(kind, { tables, file: path.join(dir, `${tables.inbox}.db`), synchronous: 'NORMAL' });
    return { ...helper, exec: (sql) => helper.store.db.exec(sql) };
  };
  try {
    for (const own of [false, true]) {
      const open = contenders(openHelper, {
        host: 'sqlite',
        transactionsOf: (store) => sqliteTransactions(store.db),
        mark: () => '?',
        own,
      });
      await measure(own ? `${label}, onApplied` : label, open(true), open(false));
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function serverContenders(kind, label, transactionsOf, mark) {
  const openHelper = async (tables) => {
    const helper = await openStore(kind, { tables, poolSize: 1 });
    return {
      ...helper,
      exec: (sql) => helper.query(sql, []),
      close: async () => {
        await helper.query(`DROP TABLE IF EXISTS ${tables.inbox}_shipments`, []);
        await helper.drop();
        await helper.close();
      },
    };
  };
  for (const own of [false, true]) {
    const open = contenders(openHelper, { host: kind, transactionsOf: (store) => transactionsOf(store.client), mark, own });
    await measure(own ? `${label}, onApplied` : label, open(true), open(false));
  }
}

// A hand-written handler per backend of workers/backends.mjs: a backend
// without one is listed, not measured.
const HAND_WRITTEN = {
  sqlite: () => sqliteContenders('sqlite', 'SQLite file (better-sqlite3, WAL, NORMAL)'),
  'sqlite-node': () => sqliteContenders('sqlite-node', 'SQLite file (node:sqlite, WAL, NORMAL)'),
  pglite: async () => {
    const pglite = await openPglite();
    const openHelper = async (tables) => ({ ...pglite.open(tables), exec: (sql) => pglite.db.exec(sql), close: async () => {} });
    for (const own of [false, true]) {
      const open = contenders(openHelper, { host: 'pg', transactionsOf: () => pgliteTransactions(pglite.db), mark: (i) => `$${i}`, own });
      await measure(own ? 'PostgreSQL via PGlite (in process), onApplied' : 'PostgreSQL via PGlite (in process)', open(true), open(false));
    }
    await pglite.close();
  },
  pg: () => serverContenders('pg', 'PostgreSQL server (pg Pool)', pgTransactions, (i) => `$${i}`),
  mysql: () => serverContenders('mysql', 'MariaDB/MySQL server (mysql2 Pool)', mysqlTransactions, () => '?'),
  redis: async () => {
    const open = (withIdemflow) => async () => {
      const tables = tablesFor(uniquePrefix());
      const helper = await openStore('redis', { tables });
      await helper.store.migrate();
      const transaction = redisTransactions(helper.store.client, tables);
      return {
        store: helper.store,
        handle: withIdemflow
          ? async (event) => (await helper.store.process(event)).outcome
          : (event) => transaction((q) => handWritten(q, REDIS_STATEMENTS, event, Date.now())),
        close: async () => {
          await helper.drop();
          await helper.close();
        },
      };
    };
    await measure('Redis server (node-redis, one script per commit)', open(true), open(false));
  },
  mongodb: async () => {
    const open = (withIdemflow) => async () => {
      const tables = tablesFor(uniquePrefix());
      const helper = await openStore('mongodb', { tables });
      await helper.store.migrate();
      const transaction = mongoTransactions(helper.store.client, helper.store.db, tables);
      return {
        store: helper.store,
        handle: withIdemflow
          ? async (event) => (await helper.store.process(event)).outcome
          : (event) => transaction((session) => handWrittenMongo(helper.store.db, tables, session, event, Date.now())),
        close: async () => {
          await helper.drop();
          await helper.close();
        },
      };
    };
    await measure('MongoDB (replica set)', open(true), open(false));
  },
};

console.log(
  `idemflow store.process vs a hand-written handler (the cost floor), one connection, sequential, ${WORKFLOWS} workflows;` +
    ' ", onApplied": both also write the host\'s row of each applied event in the same transaction',
);
for (const backend of BACKENDS) {
  if (!backend.durable) continue;
  if (backend.skip) {
    console.log(`${backend.name}: skipped (${backend.skip})`);
    continue;
  }
  const contenders = HAND_WRITTEN[backend.id];
  if (!contenders) {
    console.log(`${backend.name}: no hand-written reference to measure against`);
    continue;
  }
  try {
    await contenders();
  } catch (error) {
    // e.g. under the Node 22 binary, where the better-sqlite3 build for Node 20 does not load
    console.log(`${backend.name}: skipped (${String(error.cause?.message ?? error.message).split('\n')[0]})`);
  }
}

writeBenchJson('perEvent', { workflows: WORKFLOWS, backends: figures });
