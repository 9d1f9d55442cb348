// migrate() brings an outbox table made by an earlier version up to date: it
// adds the nullable columns that version lacked (metadata, trace_context),
// keeps the rows, which then read as null there, and tolerates a second
// migrate and two migrating at once. SQLite always; PostgreSQL and
// MariaDB/MySQL when IDEMFLOW_PG_URL / IDEMFLOW_MYSQL_URL are set.

import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { MYSQL_URL, openStore, PG_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';

// The outbox table as idemflow created it before the two columns existed.
const OLD_COLUMNS = [
  'type {name} NOT NULL',
  'workflow_id {key} NOT NULL',
  'event_id {key} NOT NULL',
  'payload {json} NOT NULL',
  'status {name} NOT NULL',
  'attempts INTEGER NOT NULL DEFAULT 0',
  'next_attempt_at BIGINT NOT NULL',
  'lease_owner {name} NULL',
  'lease_expires_at BIGINT NULL',
  'fencing_token BIGINT NOT NULL DEFAULT 0',
  'last_error TEXT NULL',
  'created_at BIGINT NOT NULL',
  'updated_at BIGINT NOT NULL',
];
const OLD_ROW = ['old-op', 'START_EXCHANGE', 'swap-1', 'e-1', '{"depositRef":"r"}', 'pending', 0, 1000, null, null, 0, null, 1000, 1000];
const INSERT_COLUMNS =
  'id, type, workflow_id, event_id, payload, status, attempts, next_attempt_at, lease_owner, lease_expires_at, fencing_token, last_error, created_at, updated_at';

const BACKENDS = [
  {
    name: 'SQLite',
    kind: 'sqlite',
    options: () => ({ file: path.join(tempDir('migrate-columns'), 'old.db') }),
    types: { key: 'TEXT', name: 'TEXT', json: 'TEXT' },
    quote: (n) => `"${n}"`,
    mark: () => '?',
    run: (opened, sql, values) => opened.store.db.prepare(sql).run(...values),
    columns: async (opened, table) =>
      opened.store.db
        .prepare(`SELECT name FROM pragma_table_info(?)`)
        .all(table)
        .map((r) => r.name),
  },
  {
    name: 'PostgreSQL',
    kind: 'pg',
    skip: PG_URL ? false : 'IDEMFLOW_PG_URL is not set',
    options: () => ({}),
    types: { key: 'TEXT', name: 'TEXT', json: 'TEXT' },
    quote: (n) => `"${n}"`,
    mark: (i) => `$${i}`,
    run: (opened, sql, values) => opened.query(sql, values),
    columns: async (opened, table) =>
      (await opened.query('SELECT column_name AS name FROM information_schema.columns WHERE table_name = $1', [table])).map((r) => r.name),
  },
  {
    name: 'MariaDB/MySQL',
    kind: 'mysql',
    skip: MYSQL_URL ? false : 'IDEMFLOW_MYSQL_URL is not set',
    options: () => ({}),
    types: { key: 'VARCHAR(255)', name: 'VARCHAR(255)', json: 'LONGTEXT' },
    quote: (n) => `\`${n}\``,
    mark: () => '?',
    run: (opened, sql, values) => opened.query(sql, values),
    columns: async (opened, table) =>
      (
        await opened.query(
          'SELECT column_name AS name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?',
          [table],
        )
      ).map((r) => r.name),
  },
];

for (const backend of BACKENDS) {
  describe(`migrate() on an outbox table of an earlier version: ${backend.name}`, { skip: backend.skip }, () => {
    it('adds metadata and trace_context, keeps the rows (read as null), and migrates again or twice at once without error', async () => {
      const tables = tablesFor(uniquePrefix());
      const options = backend.options();
      const opened = await openStore(backend.kind, { tables, ...options });
      const other = await openStore(backend.kind, { tables, ...options });
      try {
        const columns = OLD_COLUMNS.map((c) => c.replace(/\{(\w+)\}/g, (_, kind) => backend.types[kind])).join(', ');
        await backend.run(
          opened,
          `CREATE TABLE ${backend.quote(tables.outbox)} (id ${backend.types.key} NOT NULL PRIMARY KEY, ${columns})`,
          [],
        );
        const marks = OLD_ROW.map((_, i) => backend.mark(i + 1)).join(', ');
        await backend.run(opened, `INSERT INTO ${backend.quote(tables.outbox)} (${INSERT_COLUMNS}) VALUES (${marks})`, OLD_ROW);
        assert.deepEqual(
          (await backend.columns(opened, tables.outbox)).filter((c) => c === 'metadata' || c === 'trace_context'),
          [],
        );

        await opened.store.migrate();
        assert.deepEqual((await backend.columns(opened, tables.outbox)).filter((c) => c === 'metadata' || c === 'trace_context').sort(), [
          'metadata',
          'trace_context',
        ]);
        const old = await opened.store.getOperation('old-op');
        assert.deepEqual(
          [old.status, old.payload, old.metadata, old.traceContext, old.unreadable],
          ['pending', { depositRef: 'r' }, null, null, undefined],
        );

        await Promise.all([opened.store.migrate(), other.store.migrate()]);
        await opened.store.putWorkflow({
          id: 'swap-2',
          status: 'deposit',
          revision: 3,
          deposits: { r2: { event: 'DEPOSIT_DETECTED', amountUnits: '5', sequence: 1 } },
        });
        const event = { eventId: 'e-2', workflowId: 'swap-2', type: 'DEPOSIT_CONFIRMED', depositRef: 'r2', amountUnits: '5', sequence: 2 };
        assert.equal((await opened.store.process(event, { metadata: { tenant: 'acme' } })).outcome, 'applied');
        assert.deepEqual((await opened.store.getOperation('start-exchange:swap-2')).metadata, { tenant: 'acme' });
      } finally {
        await opened.drop();
        await other.close();
        await opened.close();
      }
    });
  });
}
