// Faults on real servers: a throwaway PostgreSQL 15 and MariaDB of the
// test's own (servers.mjs: own port, own data directory, killed at the end)
// have their sessions terminated, are restarted, stopped with SIGSTOP and
// (PostgreSQL) have a small tablespace filled, while stores work on them.
// Each skips with one line when the server binaries are not here. Also the
// bounds of PGlite and MongoStore (over the in-process fake), which need no
// server. `make faults` runs a longer campaign (workers/fault-campaign.mjs).

import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { EventEmitter } from 'node:events';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import { createOutboxConsumer, IdemflowError, processBatch } from 'idemflow';
import { openPglite, openStore, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { faultRun } from '../workers/fault-runs.mjs';
import { detectedSwap } from '../workers/fixtures.mjs';
import { FakeMongoClient } from '../workers/mongo-fake.mjs';
import { mariadbMissing, postgresMissing, redisMissing, startMariadb, startPostgres, startRedis } from '../workers/servers.mjs';

const WORKERS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workers');
// Generous: a bound that is not kept shows up as a wait this long, never as a flaky failure.
const WATCHDOG_MS = 20_000;
const DELIVERIES = 600;
const WORKFLOWS = 60;

// A swap in deposit recorded the watcher's detection, its observation 1; its confirmation is observation 2.
const workflow = (id) => detectedSwap({ id, revision: 1, depositRef: `tx-${id}`, amountUnits: '100' });
const confirmation = (id, n = 1) => ({
  eventId: `${id}-e${n}`,
  workflowId: id,
  type: 'DEPOSIT_CONFIRMED',
  depositRef: `tx-${id}`,
  amountUnits: '100',
  sequence: 2,
});

/** What `promise` settled to, or 'watchdog' if it did not within WATCHDOG_MS (then `onWatchdog` runs). */
async function watched(promise, onWatchdog = () => {}) {
  let timer;
  const watchdog = new Promise((resolve) => {
    timer = setTimeout(resolve, WATCHDOG_MS, 'watchdog');
  });
  const outcome = await Promise.race([
    promise.then(
      (value) => ({ value }),
      (error) => ({ error }),
    ),
    watchdog,
  ]);
  clearTimeout(timer);
  if (outcome === 'watchdog') onWatchdog();
  return outcome;
}

function assertTimeout(outcome, what) {
  assert.notEqual(outcome, 'watchdog', `${what} was still waiting after ${WATCHDOG_MS} ms`);
  assert.ok(
    outcome.error instanceof IdemflowError,
    `${what} failed with an IdemflowError (got ${outcome.error ?? JSON.stringify(outcome.value)})`,
  );
  assert.equal(outcome.error.code, 'STORE_UNAVAILABLE');
  assert.equal(outcome.error.disposition, 'retry');
  assert.equal(outcome.error.details.reason, 'timeout');
}

/** Runs fault-terminate.mjs, ends its session when it reports one; `{ exitCode, signal, failure, after, stderr }`. */
function terminateMidTransaction(db, kind, mode) {
  return new Promise((resolve, reject) => {
    const child = fork(path.join(WORKERS_DIR, 'fault-terminate.mjs'), [kind, db.url, mode, uniquePrefix()], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    let report = {};
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.on('message', async (message) => {
      if (message.session !== undefined) {
        try {
          if (kind === 'pg') {
            if (mode === 'active')
              await waitFor(
                async () => (await db.query('SELECT state FROM pg_stat_activity WHERE pid = $1', [message.session]))[0]?.state === 'active',
              );
            await db.query('SELECT pg_terminate_backend($1)', [message.session]);
            if (mode === 'checkout')
              await waitFor(async () => (await db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [message.session])).length === 0);
          } else {
            if (mode === 'active')
              await waitFor(
                async () =>
                  (await db.query('SELECT state FROM information_schema.processlist WHERE id = ?', [message.session]))[0]?.state ===
                  'User sleep',
              );
            await db.query(`KILL ${Number(message.session)}`);
          }
          child.send('ended');
        } catch (error) {
          reject(error);
        }
      } else {
        report = message;
      }
    });
    child.on('exit', (exitCode, signal) => resolve({ exitCode, signal, stderr, ...report }));
  });
}

/** A property of `target` for a Proxy: methods bound to it (stores keep private fields). */
function passThrough(target, name) {
  const value = Reflect.get(target, name);
  return typeof value === 'function' ? value.bind(target) : value;
}

async function waitFor(condition) {
  for (let i = 0; i < 200; i += 1) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('condition not reached in 10 s');
}

function assertSurvived(result, driverCodes) {
  assert.equal(result.exitCode, 0, `the process survived (exit ${result.exitCode ?? result.signal}): ${result.stderr.slice(-600)}`);
  assert.equal(result.failure?.coded, true, `the transaction failed with an IdemflowError: ${JSON.stringify(result.failure)}`);
  assert.equal(result.failure.code, 'STORE_UNAVAILABLE');
  assert.equal(result.failure.disposition, 'retry');
  assert.ok(
    driverCodes.includes(result.failure.driverCode),
    `details.driverCode ${result.failure.driverCode} is the server's (${driverCodes.join(' or ')})`,
  );
  assert.equal(result.failure.causeCode, result.failure.driverCode, 'the driver error is the cause');
  assert.equal(result.after, 'applied', 'the next delivery runs on a fresh connection');
}

/** A consumer polling a stopped server: stop({ timeoutMs }) while its claim is unanswered. */
async function stopDuringStalledClaim(db, kind) {
  const tables = tablesFor(uniquePrefix());
  const helper = await openStore(kind, { url: db.url, tables, poolSize: 2, timeoutMs: 2000 });
  try {
    await helper.store.migrate();
    let claimsStarted = 0;
    let frozen = false;
    let claimWhileFrozen;
    const claimedWhileFrozen = new Promise((resolve) => {
      claimWhileFrozen = resolve;
    });
    const store = new Proxy(helper.store, {
      get(target, name) {
        if (name !== 'claimOperations') return passThrough(target, name);
        return (args) => {
          claimsStarted += 1;
          if (frozen) claimWhileFrozen();
          return target.claimOperations(args);
        };
      },
    });
    const consumer = createOutboxConsumer(store, { START_EXCHANGE: async () => {} }, { pollIntervalMs: 20 });
    consumer.on('store-error', () => {});
    consumer.start();
    await waitFor(async () => claimsStarted > 0);
    db.server.freeze();
    frozen = true;
    try {
      await claimedWhileFrozen;
      const outcome = await watched(consumer.stop({ timeoutMs: 1000, abortGraceMs: 0 }), () => db.server.resume());
      assert.notEqual(outcome, 'watchdog', `stop({ timeoutMs: 1000 }) was still waiting after ${WATCHDOG_MS} ms`);
      assert.deepEqual(outcome.value, { abandoned: [], claimPending: true }, 'stop() says the claim was left unanswered');
    } finally {
      db.server.resume();
    }
  } finally {
    await helper.drop().catch(() => {});
    await helper.close();
  }
}

/** store.process on a stopped server fails with a timeout within its bound. */
async function processOnStoppedServer(db, kind) {
  const tables = tablesFor(uniquePrefix());
  const helper = await openStore(kind, { url: db.url, tables, poolSize: 2, timeoutMs: 1000 });
  try {
    await helper.store.migrate();
    await helper.store.putWorkflow(workflow('wf-1'));
    db.server.freeze();
    try {
      assertTimeout(
        await watched(helper.store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' }), () => db.server.resume()),
        'store.process on a stopped server',
      );
    } finally {
      db.server.resume();
    }
    // The server is back: the redelivery applies, once.
    assert.equal((await helper.store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })).outcome, 'applied');
    assert.equal(await helper.count('outbox'), 1);
  } finally {
    await helper.drop().catch(() => {});
    await helper.close();
  }
}

/** A second connection that holds a row lock on a workflow, as another process would. */
async function lockHolder(kind, url) {
  if (kind === 'pg') {
    const { default: pg } = await import('pg');
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return {
      lock: async (table) => {
        await client.query('BEGIN');
        await client.query(`SELECT * FROM "${table}" WHERE id = 'wf-1' FOR UPDATE`);
      },
      release: () => client.query('ROLLBACK'),
      end: () => client.end(),
    };
  }
  const { default: mysql } = await import('mysql2/promise');
  const connection = await mysql.createConnection({ uri: url });
  return {
    lock: async (table) => {
      await connection.query('START TRANSACTION');
      await connection.query(`SELECT * FROM \`${table}\` WHERE id = 'wf-1' FOR UPDATE`);
    },
    release: () => connection.query('ROLLBACK'),
    end: () => connection.end(),
  };
}

/**
 * store.process behind a row lock another connection holds, with the store's
 * `bounds`; `whileWaiting()` runs once the delivery waits (an operator's
 * cancel), `check` judges the outcome; nothing of the ended transaction may be kept.
 */
async function processBehindAHeldLock(
  db,
  kind,
  check,
  { bounds = { statementTimeoutMs: 300, timeoutMs: 10_000 }, whileWaiting = async () => {} } = {},
) {
  const tables = tablesFor(uniquePrefix());
  const helper = await openStore(kind, { url: db.url, tables, poolSize: 2, ...bounds });
  let holder;
  try {
    await helper.store.migrate();
    await helper.store.putWorkflow(workflow('wf-1'));
    holder = await lockHolder(kind, db.url);
    await holder.lock(tables.workflows);
    const processing = watched(helper.store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' }));
    await whileWaiting();
    check(await processing);
    await holder.release();
    assert.equal(await helper.count('inbox'), 0, 'nothing of the ended transaction was kept');
  } finally {
    await holder?.end().catch(() => {});
    await helper.drop().catch(() => {});
    await helper.close();
  }
}

/** How far past its deadline a call may return: the time to answer, on a loaded machine. */
const DEADLINE_SLACK_MS = 1500;

/**
 * processBatch on a server that stops (SIGSTOP) as the batch falls back to one
 * transaction per event (an operation id of one event exists already, so the
 * batch's commit is OUTBOX_CONFLICT): the call ends within the store's
 * timeoutMs, the first timeout answers every event not yet decided, nothing
 * is written, and once the server is back the redelivery applies.
 */
async function batchFallbackOnStoppedServer(db, kind, size) {
  const tables = tablesFor(uniquePrefix());
  const timeoutMs = 2000;
  const helper = await openStore(kind, { url: db.url, tables, poolSize: 4, timeoutMs });
  try {
    await helper.store.migrate();
    const ids = Array.from({ length: size }, (_, i) => `wf-${i}`);
    for (const id of ids) await helper.store.putWorkflow(workflow(id));
    // wf-0's exchange was scheduled before; its workflow was put back to deposit by hand.
    await helper.store.process(confirmation('wf-0', 1), { ruleSet: 'deposit-swap' });
    await helper.store.putWorkflow(workflow('wf-0'));
    let transactions = 0;
    const store = new Proxy(helper.store, {
      get(target, name) {
        if (name !== 'transaction') return passThrough(target, name);
        return (fn, options) => {
          transactions += 1;
          if (transactions === 2) db.server.freeze(); // the fallback's first transaction
          return target.transaction(fn, options);
        };
      },
    });
    const started = performance.now();
    let outcome;
    try {
      outcome = await watched(
        processBatch(
          store,
          ids.map((id) => confirmation(id, 2)),
          { ruleSet: 'deposit-swap' },
        ),
        () => db.server.resume(),
      );
    } finally {
      db.server.resume();
    }
    const elapsed = performance.now() - started;
    assert.notEqual(outcome, 'watchdog', `processBatch of ${size} was still waiting after ${WATCHDOG_MS} ms`);
    assert.ok(transactions >= 2, 'the batch fell back to one transaction per event');
    assert.ok(
      elapsed <= timeoutMs + DEADLINE_SLACK_MS,
      `processBatch of ${size} returned after ${Math.round(elapsed)} ms, its deadline ${timeoutMs} ms`,
    );
    const results = outcome.value;
    assert.equal(results.length, size);
    for (const result of results) {
      assert.equal(result.error?.code, 'STORE_UNAVAILABLE', JSON.stringify(result));
      assert.equal(result.error.disposition, 'retry');
    }
    assert.ok(transactions <= 3, `the first timeout ended the fallback (${transactions} transactions)`);
    assert.equal(await helper.count('inbox'), 1, 'nothing of the batch was written');
    // The server is back: the redeliveries apply (a session the stop left behind may hold its locks a
    // while: what answers retry is delivered again, as a broker would); wf-0's operation is a genuine conflict.
    const final = new Map();
    for (let round = 0; round < 20 && final.size < size; round += 1) {
      const due = ids.filter((id) => !final.has(id));
      const answers = await processBatch(
        helper.store,
        due.map((id) => confirmation(id, 2)),
        { ruleSet: 'deposit-swap' },
      );
      for (const [k, answer] of answers.entries()) if (answer.error?.disposition !== 'retry') final.set(due[k], answer);
      if (final.size < size) await new Promise((resolve) => setTimeout(resolve, 500));
    }
    assert.equal(final.get('wf-0')?.error?.code, 'OUTBOX_CONFLICT');
    assert.deepEqual(new Set(ids.slice(1).map((id) => final.get(id)?.outcome)), new Set(['applied']));
  } finally {
    await helper.drop().catch(() => {});
    await helper.close();
  }
}

/**
 * store.process behind a row lock, its waiting statement cancelled by an
 * operator (`cancel()`): STORE_UNAVAILABLE reason timeout, as a statement
 * timeout is, on every server; nothing is kept.
 */
function processCancelled(db, kind, cancel) {
  return processBehindAHeldLock(
    db,
    kind,
    (outcome) => {
      assert.notEqual(outcome, 'watchdog');
      assert.equal(outcome.error?.code, 'STORE_UNAVAILABLE', String(outcome.error ?? JSON.stringify(outcome.value)));
      assert.equal(outcome.error.details.reason, 'timeout');
      assert.equal(outcome.error.disposition, 'retry');
    },
    { bounds: { statementTimeoutMs: 15_000, timeoutMs: 15_000 }, whileWaiting: cancel },
  );
}

/** store.process whose receipt insert meets a full disk (`fill(tables)` fills it; `free()` frees it): STORE_UNAVAILABLE reason server-out-of-resources. */
async function processOnFullDisk(db, kind, { place, fill, free }) {
  const tables = tablesFor(uniquePrefix());
  const helper = await openStore(kind, { url: db.url, tables, poolSize: 2, timeoutMs: 15_000 });
  try {
    await helper.store.migrate();
    await helper.store.putWorkflow(workflow('wf-1'));
    await place(tables);
    await fill(tables);
    let outcome;
    try {
      outcome = await watched(helper.store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' }));
    } finally {
      await free();
    }
    assert.notEqual(outcome, 'watchdog');
    assert.equal(outcome.error?.code, 'STORE_UNAVAILABLE', String(outcome.error ?? JSON.stringify(outcome.value)));
    assert.equal(outcome.error.details.reason, 'server-out-of-resources', `driverCode ${outcome.error.details.driverCode}`);
    assert.equal(outcome.error.disposition, 'retry');
    assert.equal(
      (await helper.store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })).outcome,
      'applied',
      'once there is room, the redelivery applies',
    );
  } finally {
    await helper.drop().catch(() => {});
    await helper.close();
  }
}

/** Waits until a session of the server waits for a lock, and answers its id. */
async function waitingSession(db, kind) {
  let id = null;
  await waitFor(async () => {
    const rows =
      kind === 'pg'
        ? await db.query("SELECT pid AS id FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND backend_type = 'client backend'")
        : await db.query(
            "SELECT id FROM information_schema.processlist WHERE info LIKE '%UPDATE%' AND command = 'Query' AND id <> CONNECTION_ID()",
          );
    id = rows[0]?.id ?? null;
    return id !== null;
  });
  return id;
}

/** The lock's work ran to its end, the process did not crash, and the lock was free again afterwards. */
function assertLockSurvived(outcome) {
  assert.equal(outcome.exitCode, 0, `the process ended ${outcome.signal ?? outcome.exitCode}: ${outcome.stderr}`);
  assert.equal(outcome.failure, null, JSON.stringify(outcome.failure));
  assert.equal(outcome.after, 'ran, then taken again');
}

function assertRun(figures, t) {
  t.diagnostic(
    `${figures.faults} faults (${figures.injected.join(', ')}), ${figures.deliveries} deliveries of ${figures.eventIds} event ids, ` +
      `crashes ${figures.crashes}, losses ${figures.losses}, duplicates ${figures.duplicates}, orphan receipts ${figures.orphanReceipts}; ` +
      `retry nacks ${JSON.stringify(figures.nacks)}`,
  );
  assert.deepEqual(figures.unexpected, [], 'no worker crashed, no delivery failed without a retry disposition');
  assert.equal(figures.crashes, 0, 'no worker crashed');
  assert.ok(!('uncoded' in figures.nacks), 'every error a worker saw is an IdemflowError');
  for (const kind of Object.keys(figures.nacks)) {
    assert.match(kind, /^(STORE_UNAVAILABLE|CONCURRENT_UPDATE)\//, `a worker saw ${kind}`);
  }
  assert.equal(figures.losses, 0, 'every event has a receipt; every confirmed workflow moved and has its START_EXCHANGE');
  assert.equal(figures.duplicates, 0, 'one START_EXCHANGE and one applied receipt per confirmed workflow');
  assert.equal(figures.orphanReceipts, 0, 'no receipt without its workflow change');
  assert.equal(figures.faults, figures.injected.length);
}

/** What a MariaDB full-disk case needs: the inbox made again in the small directory, filled, and made again where it was. */
function mariadbFullInbox(db) {
  let inbox;
  let ddl;
  return {
    // InnoDB takes DATA DIRECTORY only when a table is created.
    place: async (tables) => {
      inbox = tables.inbox;
      [{ 'Create Table': ddl }] = await db.query(`SHOW CREATE TABLE \`${inbox}\``);
      await db.query(`DROP TABLE \`${inbox}\``);
      await db.query(`${ddl} DATA DIRECTORY='${db.smallDir}'`);
    },
    // Receipts of no event fill the inbox's own file until the disk is full (InnoDB keeps free pages in a file it made).
    fill: async () => {
      try {
        for (let n = 0; ; n += 200) {
          await db.query(`INSERT INTO \`${inbox}\` (event_id, fingerprint, workflow_id, event_type, outcome, recorded_at, result)
            SELECT CONCAT('filler-', ${n} + seq, '-', REPEAT('x', 700)), 'fp', 'none', 'FILLER', 'applied', 0, REPEAT(MD5(RAND()), 60) FROM seq_1_to_200`);
        }
      } catch (error) {
        if (error.errno !== 1114 && error.errno !== 1021) throw error;
      }
      // Then rows of a receipt's size, keyed beside the receipt to come, one at a time, until not even one
      // fits in the pages left (a failed statement's rollback can give a page back: so several times over).
      let refused = 0;
      for (let n = 0; refused < 20; n += 1) {
        try {
          await db.query(
            `INSERT INTO \`${inbox}\` (event_id, fingerprint, workflow_id, event_type, outcome, recorded_at, result)
            VALUES (?, REPEAT('f', 71), 'wf-1', 'FILLER', 'applied', ?, REPEAT('r', 160))`,
            [`wf-1-e0-${String(n).padStart(6, '0')}`, Date.now()],
          );
          refused = 0;
        } catch (error) {
          if (error.errno !== 1114 && error.errno !== 1021) throw error;
          refused += 1;
        }
      }
    },
    // The fillers go with the file (a DELETE would free pages only once purged): the inbox made again where it was.
    free: async () => {
      await db.query(`DROP TABLE \`${inbox}\``);
      await db.query(ddl);
    },
  };
}

/** The servers the fault cases run on, each with what differs: how it ends a session, cancels a statement, fills its disk. */
const SERVERS = [
  {
    name: 'a PostgreSQL 15 server',
    kind: 'pg',
    missing: postgresMissing,
    start: () => startPostgres({ smallTablespaceMb: 8 }),
    ended: 'a backend terminated',
    killedCodes: ['57P01'],
    statementTimeoutCode: '57014',
    seeds: [90_001, 90_003],
    cancel: { how: 'pg_cancel_backend', run: async (db) => db.query('SELECT pg_cancel_backend($1)', [await waitingSession(db, 'pg')]) },
    disk: {
      code: 'SQLSTATE 53100',
      small: (db) => db.tablespace,
      why: (db) => db.tablespaceError,
      full: (db) => ({
        place: (tables) => db.query(`ALTER TABLE "${tables.inbox}" SET TABLESPACE small`),
        fill: () => db.fillTablespace(),
        free: () => db.freeTablespace(),
      }),
    },
  },
  {
    name: 'a MariaDB server',
    kind: 'mysql',
    missing: mariadbMissing,
    start: () => startMariadb({ smallDirMb: 8 }),
    ended: 'a connection killed',
    killedCodes: ['1927', 'PROTOCOL_CONNECTION_LOST'],
    statementTimeoutCode: '1969',
    seeds: [90_002, 90_004],
    cancel: { how: 'KILL QUERY, 1317', run: async (db) => db.query(`KILL QUERY ${Number(await waitingSession(db, 'mysql'))}`) },
    disk: { code: '1114, the table is full', small: (db) => db.smallDir, why: (db) => db.smallDirError, full: mariadbFullInbox },
  },
];

for (const server of SERVERS) {
  describe(`faults on ${server.name} of its own`, { skip: server.missing() ?? false }, () => {
    let db;
    before(async () => {
      db = await server.start();
    });
    after(async () => {
      await db?.close();
    });
    const { kind } = server;

    it(`${server.ended} while the store holds it idle inside a transaction: the process survives, STORE_UNAVAILABLE`, async () => {
      assertSurvived(await terminateMidTransaction(db, kind, 'idle'), server.killedCodes);
    });

    it(`${server.ended} while a statement of the transaction runs: the process survives, STORE_UNAVAILABLE`, async () => {
      assertSurvived(await terminateMidTransaction(db, kind, 'active'), server.killedCodes);
    });

    it(`${server.ended} as the pool hands the connection out, before any await: the process survives, STORE_UNAVAILABLE`, {
      skip: kind === 'pg' ? false : 'pg-pool only: mysql2 listens to a connection it hands out',
    }, async () => {
      assertSurvived(await terminateMidTransaction(db, kind, 'checkout'), server.killedCodes);
    });

    it('the session of a held withExclusiveLock ended: the process survives, and the lock can be taken again', async () => {
      assertLockSurvived(await terminateMidTransaction(db, kind, 'lock'));
    });

    it('a stopped server (SIGSTOP): store.process fails with STORE_UNAVAILABLE reason timeout, and the redelivery applies once', async () => {
      await processOnStoppedServer(db, kind);
    });

    it('a stopped server: consumer.stop({ timeoutMs }) returns while its claim is unanswered, and says so', async () => {
      await stopDuringStalledClaim(db, kind);
    });

    it(`a lock held past statementTimeoutMs: the statement is ended on the server, a retry error (${server.statementTimeoutCode})`, async () => {
      await processBehindAHeldLock(db, kind, (outcome) => {
        assert.notEqual(outcome, 'watchdog');
        assert.ok(outcome.error instanceof IdemflowError, String(outcome.error));
        assert.equal(outcome.error.disposition, 'retry');
        // MariaDB ends the wait either as a statement timeout or as a lock wait timeout (a lost race, re-run until raceRetries).
        const codes = kind === 'pg' ? [server.statementTimeoutCode] : [server.statementTimeoutCode, '1205'];
        assert.ok(codes.includes(outcome.error.details.driverCode), `driverCode ${outcome.error.details.driverCode}`);
      });
    });

    for (const size of [32, 128]) {
      it(`a stopped server during a batch's one-by-one fallback (${size} events): processBatch returns within its deadline, every event answers retry`, async () => {
        await batchFallbackOnStoppedServer(db, kind, size);
      });
    }

    it(`a statement cancelled by an operator (${server.cancel.how}): STORE_UNAVAILABLE reason timeout, on every server`, async () => {
      await processCancelled(db, kind, () => server.cancel.run(db));
    });

    it(`a full disk (${server.disk.code}): STORE_UNAVAILABLE reason server-out-of-resources, on every server`, async (t) => {
      if (!server.disk.small(db)) {
        t.diagnostic(`no small disk: ${server.disk.why(db)}`);
        return;
      }
      await processOnFullDisk(db, kind, server.disk.full(db));
    });

    it(`${DELIVERIES} deliveries through 4 worker processes while sessions are ended and the server restarted, stopped and filled`, async (t) => {
      const faults = ['terminate', 'pause', 'restart', 'terminate'];
      if (server.disk.small(db)) faults.push('diskFull');
      else t.diagnostic(`no small disk: ${server.disk.why(db)}`);
      assertRun(await faultRun(db, kind, { faults, deliveries: DELIVERIES, workflows: WORKFLOWS, seed: server.seeds[0] }), t);
    });

    it(`${DELIVERIES} deliveries through 3 processBatch workers (batches of 32), SIGKILLed 3 times, while the server is restarted, stopped and filled`, async (t) => {
      const faults = ['terminate', 'pause', 'restart'];
      if (server.disk.small(db)) faults.push('diskFull');
      assertRun(
        await faultRun(db, kind, {
          faults,
          deliveries: DELIVERIES,
          workflows: WORKFLOWS,
          seed: server.seeds[1],
          workers: 3,
          batch: 32,
          kills: 3,
        }),
        t,
      );
    });
  });
}

describe('bounds without a server', () => {
  it("PGlite: a transaction waiting behind the host's own fails with STORE_UNAVAILABLE reason timeout, and writes nothing when its turn comes", async () => {
    const pglite = await openPglite();
    try {
      const tables = tablesFor(uniquePrefix());
      const { store } = pglite.open(tables, { timeoutMs: 200 });
      await store.migrate();
      await store.putWorkflow(workflow('wf-1'));
      let release;
      const hostTransaction = pglite.db.transaction(
        () =>
          new Promise((resolve) => {
            release = resolve;
          }),
      );
      assertTimeout(
        await watched(store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })),
        'a PGlite transaction behind a held one',
      );
      release();
      await hostTransaction;
      // Whatever the abandoned call had queued has run by now; it wrote nothing.
      assert.equal((await pglite.db.query(`SELECT count(*)::int AS n FROM "${tables.inbox}"`)).rows[0].n, 0);
      assert.equal((await store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })).outcome, 'applied');
    } finally {
      await pglite.close();
    }
  });

  it("MongoStore: a transaction the server does not answer fails with STORE_UNAVAILABLE reason timeout; the client's 'error' does not end the process", async () => {
    const { MongoStore } = await import('idemflow/mongodb');
    const client = new FakeMongoClient();
    // The real MongoClient is an EventEmitter that re-emits its topology's 'error'.
    Object.setPrototypeOf(client, Object.assign(Object.create(Object.getPrototypeOf(client)), EventEmitter.prototype));
    EventEmitter.call(client);
    const store = new MongoStore(client, { db: 'faults', timeoutMs: 200 });
    await store.migrate();
    await store.putWorkflow(workflow('wf-1'));
    assert.doesNotThrow(() => client.emit('error', new Error('topology: incompatible server')), 'an error listener is attached');
    const hanging = new Proxy(client, {
      get: (target, name) => (name === 'withSession' ? () => new Promise(() => {}) : passThrough(target, name)),
    });
    const stalled = new MongoStore(hanging, { db: store.db, timeoutMs: 200 });
    assertTimeout(
      await watched(stalled.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })),
      'a MongoDB transaction that is never answered',
    );
    assert.equal((await store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })).outcome, 'applied');
  });

  it('consumer.stop({ timeoutMs }) returns while claimOperations never answers, says so, and gives back what the claim returns later', async () => {
    const { InMemoryStore } = await import('idemflow');
    const inner = new InMemoryStore([workflow('wf-1')]);
    await inner.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' });
    let answer;
    let claimed;
    const claimStarted = new Promise((resolve) => {
      claimed = resolve;
    });
    const store = new Proxy(inner, {
      get(target, name) {
        if (name !== 'claimOperations') return passThrough(target, name);
        return (args) => {
          claimed();
          return new Promise((resolve) => {
            answer = () => resolve(target.claimOperations(args));
          });
        };
      },
    });
    let ran = 0;
    const consumer = createOutboxConsumer(
      store,
      {
        START_EXCHANGE: async () => {
          ran += 1;
        },
      },
      { pollIntervalMs: 10 },
    );
    consumer.start();
    await claimStarted;
    const outcome = await watched(consumer.stop({ timeoutMs: 100, abortGraceMs: 0 }));
    assert.notEqual(outcome, 'watchdog', 'stop() returned');
    assert.deepEqual(outcome.value, { abandoned: [], claimPending: true });
    answer();
    // The late claim's operation is given back unrun: pending again (claimed once: token 1), the attempt not counted.
    await waitFor(async () => {
      const operation = await inner.getOperation('start-exchange:wf-1');
      return operation.status === 'pending' && operation.fencingToken === 1;
    });
    assert.equal(ran, 0, 'no handler ran after stop()');
    assert.equal((await inner.getOperation('start-exchange:wf-1')).attempts, 0);
  });
});

/**
 * A primary and its replica of their own; 400 confirmations through 8
 * concurrent deliveries on the primary, SIGKILLed once half are
 * acknowledged; the replica promoted. Counts the acknowledged commits the
 * promoted replica does not have.
 */
async function failover(waitReplicas) {
  const primary = await startRedis({ appendfsync: 'no-aof' });
  const replica = await startRedis({ appendfsync: 'no-aof', replicaOf: primary.url });
  const tables = tablesFor(uniquePrefix());
  const helper = await openStore('redis', {
    url: primary.url,
    tables,
    timeoutMs: 1500,
    ...(waitReplicas ? { waitReplicas: { replicas: 1, timeoutMs: 500 } } : {}),
  });
  try {
    await replica.synced();
    await helper.store.migrate();
    const count = 400;
    for (let i = 0; i < count; i += 1) await helper.store.putWorkflow(workflow(`wf-${i}`));
    const acked = [];
    let next = 0;
    let killed = false;
    const deliver = async () => {
      while (!killed && next < count) {
        const event = confirmation(`wf-${next++}`);
        try {
          await helper.store.process(event, { ruleSet: 'deposit-swap' });
          if (!killed) acked.push(event.eventId);
        } catch {
          // after the kill: not acknowledged
        }
      }
    };
    const deliveries = Array.from({ length: 8 }, deliver);
    while (acked.length < count / 2 && next < count) await new Promise((resolve) => setTimeout(resolve, 1));
    primary.server.killNow();
    killed = true;
    await Promise.all(deliveries);
    await replica.promote();
    let lost = 0;
    for (const id of acked) if (Number(await replica.command('EXISTS', `${tables.inbox}:r:${id}`)) === 0) lost += 1;
    return { acked: acked.length, lost };
  } finally {
    helper.store.client.destroy();
    await replica.close();
    await primary.close();
  }
}

// Redis with AOF `always`: a restart here is a SIGKILL of the server (servers.mjs), and what it acknowledged must survive it.
describe('faults on a Redis server of its own (appendfsync always)', { skip: redisMissing() ?? false }, () => {
  let db;
  before(async () => {
    db = await startRedis({ appendfsync: 'always' });
  });
  after(async () => {
    await db?.close();
  });

  it('a stopped server (SIGSTOP): store.process fails with STORE_UNAVAILABLE reason timeout, and the redelivery applies once', async () => {
    await processOnStoppedServer(db, 'redis');
  });

  it('a stopped server: consumer.stop({ timeoutMs }) returns while its claim is unanswered, and says so', async () => {
    await stopDuringStalledClaim(db, 'redis');
  });

  it("a stopped server during a batch's one-by-one fallback (32 events): processBatch returns within its deadline, every event answers retry", async () => {
    await batchFallbackOnStoppedServer(db, 'redis', 32);
  });

  it('scripts the server lost (SCRIPT FLUSH) load again on the next call; over its memory limit a commit is STORE_UNAVAILABLE reason out-of-memory and writes nothing', async () => {
    const tables = tablesFor(uniquePrefix());
    const helper = await openStore('redis', { url: db.url, tables, timeoutMs: 2000 });
    try {
      await helper.store.migrate();
      await helper.store.putWorkflow(workflow('wf-1'));
      await helper.store.putWorkflow(workflow('wf-2'));
      await db.command('SCRIPT', 'FLUSH');
      assert.equal((await helper.store.process(confirmation('wf-1'), { ruleSet: 'deposit-swap' })).outcome, 'applied');
      await db.command('CONFIG', 'SET', 'maxmemory', '1');
      let refused;
      try {
        await helper.store.process(confirmation('wf-2'), { ruleSet: 'deposit-swap' });
      } catch (error) {
        refused = error;
      } finally {
        await db.command('CONFIG', 'SET', 'maxmemory', '0');
      }
      assert.ok(refused instanceof IdemflowError, String(refused));
      assert.equal(refused.code, 'STORE_UNAVAILABLE');
      assert.equal(refused.details.reason, 'out-of-memory');
      assert.equal(await helper.store.getReceipt(confirmation('wf-2').eventId), null, 'nothing written');
      assert.equal((await helper.store.getWorkflow('wf-2')).status, 'deposit');
      assert.equal((await helper.store.process(confirmation('wf-2'), { ruleSet: 'deposit-swap' })).outcome, 'applied');
      assert.equal(await helper.count('outbox'), 2);
    } finally {
      await helper.drop().catch(() => {});
      await helper.close();
    }
  });

  it('waitReplicas: each acknowledged commit is on the replica; with the replica stopped a commit is STORE_UNAVAILABLE reason replicas-behind within its bound, and its redelivery answers duplicate-delivery', async () => {
    const replica = await startRedis({ appendfsync: 'no-aof', replicaOf: db.url });
    const tables = tablesFor(uniquePrefix());
    // The replica acknowledges within a generous bound while it runs (a loaded machine delays it); the refusal is measured
    // on a store of its own with a short one.
    const helper = await openStore('redis', { url: db.url, tables, timeoutMs: 8000, waitReplicas: { replicas: 1, timeoutMs: 5000 } });
    const tight = await openStore('redis', { url: db.url, tables, timeoutMs: 3000, waitReplicas: { replicas: 1, timeoutMs: 400 } });
    try {
      await replica.synced();
      await helper.store.migrate();
      for (let i = 0; i < 20; i += 1) {
        await helper.store.putWorkflow(workflow(`wf-${i}`));
        assert.equal((await helper.store.process(confirmation(`wf-${i}`), { ruleSet: 'deposit-swap' })).outcome, 'applied');
        const onReplica = await replica.command('HGET', `${tables.inbox}:r:${confirmation(`wf-${i}`).eventId}`, 'outcome');
        assert.equal(onReplica, 'applied', `wf-${i}: the replica has the receipt when process() returns`);
      }
      await helper.store.putWorkflow(workflow('wf-late'));
      replica.server.freeze();
      let refused;
      const started = performance.now();
      try {
        await tight.store.process(confirmation('wf-late'), { ruleSet: 'deposit-swap' });
      } catch (error) {
        refused = error;
      } finally {
        replica.server.resume();
      }
      const waited = performance.now() - started;
      assert.ok(refused instanceof IdemflowError, String(refused));
      assert.equal(refused.code, 'STORE_UNAVAILABLE');
      assert.equal(refused.details.reason, 'replicas-behind');
      assert.deepEqual([refused.details.acknowledged, refused.details.replicas], [0, 1]);
      assert.ok(waited >= 350 && waited < 3000, `the commit waited its bound (${Math.round(waited)} ms)`);
      const redelivered = await helper.store.process(confirmation('wf-late'), { ruleSet: 'deposit-swap' });
      assert.equal(redelivered.outcome, 'duplicate-delivery', 'the commit stood on the primary');
    } finally {
      await helper.drop().catch(() => {});
      await helper.close();
      await tight.close();
      await replica.close();
    }
  });

  it('failover: the primary SIGKILLed under 8 concurrent deliveries and its replica promoted; with waitReplicas no acknowledged commit is lost (without, the loss is counted)', async (t) => {
    const counted = {};
    for (const wait of [true, false]) counted[wait ? 'with' : 'without'] = await failover(wait);
    t.diagnostic(
      `with waitReplicas: ${counted.with.lost} of ${counted.with.acked} acknowledged commits lost; ` +
        `without: ${counted.without.lost} of ${counted.without.acked} (replication is asynchronous)`,
    );
    assert.ok(counted.with.acked >= 100, `deliveries were acknowledged before the kill (${counted.with.acked})`);
    assert.equal(counted.with.lost, 0, 'every commit acknowledged with waitReplicas is on the promoted replica');
  });

  it(`${DELIVERIES} deliveries through 4 worker processes while connections are killed and the server is SIGKILLed and restarted twice and stopped`, async (t) => {
    const faults = ['terminate', 'restart', 'pause', 'restart'];
    assertRun(await faultRun(db, 'redis', { faults, deliveries: DELIVERIES, workflows: WORKFLOWS, seed: 90_005 }), t);
  });

  it(`${DELIVERIES} deliveries through 3 processBatch workers (batches of 32), SIGKILLed 3 times, while the server is SIGKILLed and restarted`, async (t) => {
    assertRun(
      await faultRun(db, 'redis', {
        faults: ['terminate', 'restart', 'pause'],
        deliveries: DELIVERIES,
        workflows: WORKFLOWS,
        seed: 90_006,
        workers: 3,
        batch: 32,
        kills: 3,
      }),
      t,
    );
  });
});
