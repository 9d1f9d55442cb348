// Misuse gets a clear, immediate error (issue 13): a pg Client nobody
// connected, another driver's client handed to a store, and a misspelt option
// key each fail at once with INVALID_ARGUMENT (fatal) saying what is wrong,
// instead of hanging, retrying forever, or keeping a default without a word.

import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';

import Database from 'better-sqlite3';
import { createDeliveryHandler, createOutboxConsumer, IdemflowError, processDepositConfirmed, processEvent } from 'idemflow';
import { MongoStore } from 'idemflow/mongodb';
import { MysqlStore } from 'idemflow/mysql';
import { PostgresStore } from 'idemflow/postgres';
import { SqliteStore } from 'idemflow/sqlite';
import { MongoClient } from 'mongodb';
import mysql from 'mysql2';
import pg from 'pg';
import { PG_URL, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { SEED_EVENT as EVENT } from '../workers/fixtures.mjs';

/** Asserts that `thrown` is INVALID_ARGUMENT, fatal, with a message matching `message`. */
function isMisuse(message) {
  return (error) => {
    assert.ok(error instanceof IdemflowError, `expected an IdemflowError, got ${error}`);
    assert.equal(error.code, 'INVALID_ARGUMENT');
    assert.equal(error.disposition, 'fatal');
    assert.match(error.message, message);
    return true;
  };
}

const unknownOption = (key, suggestion) => new RegExp(`unknown option "${key}" \\(did you mean "${suggestion}"\\?\\)`);

// Real driver objects; none of them connects until it is used.
const handles = {
  mysqlPool: mysql.createPool({ host: '127.0.0.1', port: 1, user: 'nobody' }),
  pgPool: new pg.Pool({ host: '127.0.0.1', port: 1 }),
  pgClient: new pg.Client({ host: '127.0.0.1', port: 1 }),
  sqlite: new Database(':memory:'),
  mongo: new MongoClient('mongodb://127.0.0.1:1/test'),
};
after(async () => {
  await handles.mysqlPool.end?.(() => {});
  await handles.pgPool.end();
  handles.sqlite.close();
  await handles.mongo.close();
});

describe("a store refuses another driver's client, naming what it was handed", () => {
  it('PostgresStore', () => {
    assert.throws(() => new PostgresStore(handles.mysqlPool), isMisuse(/PostgresStore needs .*, not a mysql2 Pool/));
    assert.throws(() => new PostgresStore(handles.mysqlPool.promise()), isMisuse(/not a mysql2 Pool/));
    assert.throws(() => new PostgresStore(handles.sqlite), isMisuse(/not a better-sqlite3 Database/));
    assert.throws(() => new PostgresStore(handles.mongo), isMisuse(/not a MongoClient/));
    assert.throws(() => new PostgresStore('postgres://localhost/test'), isMisuse(/not a string/));
  });

  it('MysqlStore', () => {
    assert.throws(() => new MysqlStore(handles.pgPool), isMisuse(/MysqlStore needs .*, not a pg Pool/));
    assert.throws(() => new MysqlStore(handles.pgClient), isMisuse(/not a pg Client/));
    assert.throws(() => new MysqlStore(handles.sqlite), isMisuse(/not a better-sqlite3 Database/));
    assert.throws(() => new MysqlStore(handles.mongo), isMisuse(/not a MongoClient/));
  });

  it('SqliteStore', () => {
    assert.throws(() => new SqliteStore(handles.pgPool), isMisuse(/SqliteStore needs .*, not a pg Pool/));
    assert.throws(() => new SqliteStore(handles.mysqlPool), isMisuse(/not a mysql2 Pool/));
    assert.throws(() => new SqliteStore(handles.mongo), isMisuse(/not a MongoClient/));
  });

  it('MongoStore', () => {
    assert.throws(() => new MongoStore(handles.pgPool), isMisuse(/MongoStore needs a MongoClient, not a pg Pool/));
    assert.throws(() => new MongoStore(handles.mysqlPool), isMisuse(/not a mysql2 Pool/));
    assert.throws(() => new MongoStore(handles.sqlite), isMisuse(/not a better-sqlite3 Database/));
    assert.throws(() => new MongoStore(handles.mongo.db('test')), isMisuse(/not a MongoDB Db/));
  });
});

describe('a pg Client that was never connected', () => {
  if (!PG_URL) {
    it('skipped: IDEMFLOW_PG_URL is not set', { skip: 'IDEMFLOW_PG_URL is not set' }, () => {});
    return;
  }

  it('is refused at the first call with a hint, and works once connected', { timeout: 20_000 }, async () => {
    const client = new pg.Client({ connectionString: PG_URL });
    try {
      const store = new PostgresStore(client, { tables: tablesFor(uniquePrefix()) });
      await assert.rejects(store.migrate(), isMisuse(/not connected: call `await client\.connect\(\)`/));
      // The host's own connect() still works afterwards: the store did not connect the client behind its back.
      await client.connect();
      await store.migrate();
      assert.deepEqual(await store.listOperations({ status: 'pending' }), []);
      for (const table of Object.values(store.tables)) await client.query(`DROP TABLE IF EXISTS "${table}"`);
    } finally {
      await client.end();
    }
  });
});

describe('an unknown option key is refused, naming the nearest known one', () => {
  it('store constructors and SqliteStore.open', () => {
    assert.throws(
      () => new PostgresStore(handles.pgPool, { statementTimeout: 5 }),
      isMisuse(unknownOption('statementTimeout', 'statementTimeoutMs')),
    );
    assert.throws(() => new MysqlStore(handles.mysqlPool, { colation: 'utf8mb4_bin' }), isMisuse(unknownOption('colation', 'collation')));
    assert.throws(() => new SqliteStore(handles.sqlite, { busyTimeout: 10 }), isMisuse(unknownOption('busyTimeout', 'busyTimeoutMs')));
    assert.throws(() => SqliteStore.open(':memory:', { drivr: 'better-sqlite3' }), isMisuse(unknownOption('drivr', 'driver')));
    assert.throws(() => new MongoStore(handles.mongo, { tabels: {} }), isMisuse(unknownOption('tabels', 'tables')));
    // A key far from every known one is still named.
    assert.throws(() => new PostgresStore(handles.pgPool, { poolSize: 4 }), isMisuse(/unknown option "poolSize"/));
    // The known keys still pass.
    SqliteStore.open(':memory:', { driver: 'better-sqlite3', busyTimeoutMs: 10, wal: false }).close();
  });

  it('processEvent, processDepositConfirmed and store.process', async () => {
    const store = SqliteStore.open(':memory:');
    try {
      await store.migrate();
      await assert.rejects(processEvent(store, EVENT, { rulset: null }), isMisuse(unknownOption('rulset', 'ruleSet')));
      await assert.rejects(processDepositConfirmed(store, EVENT, { raceRetry: 2 }), isMisuse(unknownOption('raceRetry', 'raceRetries')));
      await assert.rejects(store.process(EVENT, { typ: 'DEPOSIT_CONFIRMED' }), isMisuse(unknownOption('typ', 'type')));
      // The known keys pass: the call gets as far as the workflow, which does not exist.
      await assert.rejects(store.process(EVENT, { raceRetries: 2 }), { code: 'UNKNOWN_WORKFLOW' });
    } finally {
      store.close();
    }
  });

  it('createOutboxConsumer, consumer.stop and consumer.drain', async () => {
    const store = SqliteStore.open(':memory:');
    try {
      await store.migrate();
      const handlers = { START_EXCHANGE: async () => {} };
      assert.throws(() => createOutboxConsumer(store, handlers, { concurency: 16 }), isMisuse(unknownOption('concurency', 'concurrency')));
      const consumer = createOutboxConsumer(store, handlers, { concurrency: 16 });
      await assert.rejects(consumer.drain({ maxRound: 1 }), isMisuse(unknownOption('maxRound', 'maxRounds')));
      await assert.rejects(consumer.stop({ timeout: 100 }), isMisuse(unknownOption('timeout', 'timeoutMs')));
      await consumer.stop({ timeoutMs: 100 });
    } finally {
      store.close();
    }
  });

  it('createDeliveryHandler and its handle(message, context)', async () => {
    const store = SqliteStore.open(':memory:');
    try {
      await store.migrate();
      assert.throws(() => createDeliveryHandler(store, { maxByte: 10 }), isMisuse(unknownOption('maxByte', 'maxBytes')));
      const handle = createDeliveryHandler(store, { maxBytes: 10_000 });
      await assert.rejects(handle(EVENT, { attempts: 2 }), isMisuse(unknownOption('attempts', 'attempt')));
      // The known key passes: the workflow does not exist yet, so the delivery is to be retried.
      assert.equal((await handle(EVENT, { attempt: 2 })).action, 'retry');
    } finally {
      store.close();
    }
  });

  it('listOperations, requeue and the purges', async () => {
    const store = SqliteStore.open(':memory:');
    try {
      await store.migrate();
      await assert.rejects(store.listOperations({ staus: 'dead' }), isMisuse(unknownOption('staus', 'status')));
      await assert.rejects(store.requeue('x', { nwo: 1 }), isMisuse(unknownOption('nwo', 'now')));
      await assert.rejects(store.purgeOperations({ olderThan: 1, batchsize: 10 }), isMisuse(unknownOption('batchsize', 'batchSize')));
      await assert.rejects(store.purgeReceipts({ olderThan: 1, status: 'done' }), isMisuse(/unknown option "status"/));
      assert.deepEqual(await store.listOperations({ status: 'dead', limit: 5 }), []);
    } finally {
      store.close();
    }
  });
});

it('the core entry points and the in-memory store refuse unknown option keys, naming the nearest known one', async () => {
  const { InMemoryStore, RuleSet, decide, fingerprint, normalizeEvent, validateEvent } = await import('idemflow');
  const event = { eventId: 'e1', workflowId: 'swap-1', type: 'DEADLINE_PASSED' };
  const calls = [
    [() => RuleSet.builtin('deposit-swap', { verison: 1 }), 'verison', 'version'],
    [() => new InMemoryStore([], { nwo: () => 0 }), 'nwo', 'now'],
    [() => validateEvent(event, { ruleset: 'deposit-swap' }), 'ruleset', 'ruleSet'],
    [() => fingerprint(event, { rulSet: 'deposit-swap' }), 'rulSet', 'ruleSet'],
    [() => normalizeEvent(event, { typ: 'DEADLINE_PASSED' }), 'typ', 'type'],
    [() => decide({ event, receipt: null, workflows: null }), 'workflows', 'workflow'],
  ];
  for (const [call, key, suggestion] of calls) {
    assert.throws(
      call,
      (error) => {
        assert.equal(error.code, 'INVALID_ARGUMENT');
        assert.equal(error.disposition, 'fatal');
        assert.equal(error.details.field, key);
        assert.equal(error.details.suggestion, suggestion);
        return true;
      },
      key,
    );
  }
});
