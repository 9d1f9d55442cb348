// idemflow/prisma on the databases Prisma 7 has a driver adapter for among
// idemflow's stores: PostgreSQL (pg, @prisma/adapter-pg), SQLite
// (better-sqlite3, @prisma/adapter-better-sqlite3) and MariaDB (idemflow's
// mysql2 connection under @prisma/adapter-mariadb), with a client generated
// as a user's project generates it. The callback gets a Prisma transaction
// client on idemflow's connection: the host's row and the receipt commit
// together on success and neither on a throw; its nested $transaction is a
// savepoint that rolls back alone; concurrent deliveries in one process each
// write through their own transaction; in processBatch one event's failure
// fails that event only; idempotent()'s work takes the same helper. Misuse
// fails loudly and writes nothing: no class or no function, options that
// would point Prisma at another connection, a transaction that is not a
// store's Prisma has an adapter for, transaction control through
// $executeRaw, the client kept past its callback.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { InMemoryStore, idempotent, processBatch, processEvent, RuleSet } from 'idemflow';
import { prismaTransaction, withPrisma } from 'idemflow/prisma';
import { BACKENDS, PG_URL, suiteStore, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';
import { generated, prismaClientFor } from '../workers/prisma-client.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });
const PROVIDERS = { pg: 'postgresql', sqlite: 'sqlite', mysql: 'mysql' };

for (const backend of BACKENDS) {
  if (!(backend.id in PROVIDERS)) continue;
  describe(`idemflow/prisma on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    const table = `${uniquePrefix()}_prisma`;
    let PrismaClient;
    before(async () => {
      await shipmentsOf(backend.id, suite.helper, table).create();
      PrismaClient = prismaClientFor(PROVIDERS[backend.id], table);
    });
    const hasRow = async (eventId) => {
      const mark = backend.id === 'pg' ? '$1' : '?';
      const name = backend.id === 'mysql' ? `\`${table}\`` : `"${table}"`;
      const sql = `SELECT COUNT(*) AS n FROM ${name} WHERE event_id = ${mark}`;
      const found = backend.id === 'sqlite' ? suite.store.db.prepare(sql).get(eventId) : (await suite.helper.query(sql, [eventId]))[0];
      return Number(found.n) > 0;
    };
    const ship = (prisma, eventId) => prisma.shipment.create({ data: { eventId, orderId: eventId }, select: { id: true } });

    it('the row and the receipt commit together; a query returned unawaited is the output; a duplicate answers it; idempotent() takes the helper', async () => {
      const ns = uniquePrefix();
      const onApplied = withPrisma(PrismaClient, (prisma, decision) => ship(prisma, decision.event.eventId));
      const first = await processEvent(suite.store, request(`${ns}:a`, `${ns}:a`), { ruleSet, onApplied });
      assert.equal(first.outcome, 'applied');
      assert.equal(typeof first.output?.id, 'number', JSON.stringify(first.output));
      assert.equal(await hasRow(`${ns}:a`), true);
      assert.notEqual(await suite.store.getReceipt(`${ns}:a`), null);
      const again = await processEvent(suite.store, request(`${ns}:a`, `${ns}:a`), { ruleSet, onApplied });
      assert.equal(again.outcome, 'duplicate-delivery');
      assert.deepEqual(again.original.output, first.output);

      const keyed = { key: `${ns}:key`, payload: { n: 1 } };
      const work = withPrisma(PrismaClient, async (prisma) => {
        await ship(prisma, `${ns}:work`);
        return { done: true };
      });
      const ran = await idempotent(suite.store, keyed, work);
      const replayed = await idempotent(suite.store, keyed, work);
      assert.deepEqual([ran.replayed, ran.output, replayed.replayed, replayed.output], [false, { done: true }, true, { done: true }]);
      assert.equal(await hasRow(`${ns}:work`), true);
    });

    it('a throw leaves neither the row nor the receipt, and the next delivery applies', async () => {
      const ns = uniquePrefix();
      const boom = new Error('after the write');
      const failed = await outcomeOf(
        processEvent(suite.store, request(`${ns}:t`, `${ns}:t`), {
          ruleSet,
          onApplied: withPrisma(PrismaClient, async (prisma, decision) => {
            await ship(prisma, decision.event.eventId);
            throw boom;
          }),
        }),
      );
      assert.equal(failed.error?.code, 'HANDLER_FAILED');
      assert.equal(failed.error.cause, boom);
      assert.equal(failed.error.details.eventId, `${ns}:t`);
      assert.equal(await hasRow(`${ns}:t`), false);
      assert.equal(await suite.store.getReceipt(`${ns}:t`), null);
      const next = await processEvent(suite.store, request(`${ns}:t`, `${ns}:t`), {
        ruleSet,
        onApplied: withPrisma(PrismaClient, (prisma, decision) => ship(prisma, decision.event.eventId)),
      });
      assert.equal(next.outcome, 'applied');
      assert.equal(await hasRow(`${ns}:t`), true);

      // Prisma's transaction ended well, idemflow's did not: its rows go with idemflow's.
      const later = new Error('after the callback');
      await assert.rejects(
        suite.store.transaction(async (tx) => {
          await prismaTransaction(tx, PrismaClient, (prisma) => ship(prisma, `${ns}:outer`));
          throw later;
        }),
        (error) => error === later,
      );
      assert.equal(await hasRow(`${ns}:outer`), false);
    });

    it("Prisma's nested $transaction is a savepoint: a failing one rolls back alone, a good one commits with the rest", async () => {
      const ns = uniquePrefix();
      const undo = new Error('undo the nested part');
      const result = await processEvent(suite.store, request(`${ns}:n`, `${ns}:n`), {
        ruleSet,
        onApplied: withPrisma(PrismaClient, async (prisma) => {
          await ship(prisma, `${ns}:before`);
          await prisma.$transaction(async (inner) => ship(inner, `${ns}:nested-kept`));
          await prisma
            .$transaction(async (inner) => {
              await ship(inner, `${ns}:nested-undone`);
              throw undo;
            })
            .then(
              () => assert.fail('the nested transaction threw'),
              (error) => assert.equal(error, undo),
            );
          return null;
        }),
      });
      assert.equal(result.outcome, 'applied');
      assert.deepEqual(
        [await hasRow(`${ns}:before`), await hasRow(`${ns}:nested-kept`), await hasRow(`${ns}:nested-undone`)],
        [true, true, false],
      );
    });

    it('concurrent deliveries in one process each write in their own transaction: every row with its receipt, none of the failed ones', async () => {
      const ns = uniquePrefix();
      const ids = Array.from({ length: 24 }, (_, i) => `${ns}:c${i}`);
      const fails = (id) => Number(id.slice(id.lastIndexOf('c') + 1)) % 3 === 0;
      const onApplied = withPrisma(PrismaClient, async (prisma, decision) => {
        const id = decision.event.eventId;
        await ship(prisma, id);
        // Let the other deliveries' statements interleave with this one's.
        await new Promise((resolve) => setTimeout(resolve, 5));
        await prisma.shipment.update({ where: { eventId: id }, data: { orderId: `${id}:checked` } });
        if (fails(id)) throw new Error(`${id} fails`);
        return { id };
      });
      const results = await Promise.all(ids.map((id) => outcomeOf(processEvent(suite.store, request(id, id), { ruleSet, onApplied }))));
      for (const [i, id] of ids.entries()) {
        const expected = fails(id) ? 'HANDLER_FAILED' : 'applied';
        assert.equal(results[i].outcome ?? results[i].error?.code, expected, `${id}: ${results[i].error?.message}`);
        assert.equal(await hasRow(id), !fails(id), `${id}: its row with its receipt`);
        assert.equal((await suite.store.getReceipt(id)) !== null, !fails(id));
      }
    });

    it("in processBatch one event's failure fails that event only", async () => {
      const ns = uniquePrefix();
      const ids = [`${ns}:b1`, `${ns}:b2`, `${ns}:b3`];
      const results = await processBatch(
        suite.store,
        ids.map((id) => request(id, id)),
        {
          ruleSet,
          onApplied: withPrisma(PrismaClient, async (prisma, decision) => {
            await ship(prisma, decision.event.eventId);
            if (decision.event.eventId === ids[1]) throw new Error('this one fails');
            return { id: decision.event.eventId };
          }),
        },
      );
      assert.deepEqual(
        results.map((r) => r.outcome ?? r.error?.code),
        ['applied', 'HANDLER_FAILED', 'applied'],
      );
      assert.deepEqual([await hasRow(ids[0]), await hasRow(ids[1]), await hasRow(ids[2])], [true, false, true]);
      assert.equal(await suite.store.getReceipt(ids[1]), null);
    });

    it("Prisma's column types round-trip through the stand-in driver: DateTime, BigInt past 2^53, Decimal, Json, Boolean, Bytes", async () => {
      const kinds = `${table}_kinds`;
      const provider = PROVIDERS[backend.id];
      const schema = `generator client {\n  provider = "prisma-client-js"\n  output   = "./client"\n}\ndatasource db {\n  provider = "${provider}"\n}\nmodel Kinds {\n  id    Int      @id @default(autoincrement())\n  at    DateTime\n  big   BigInt\n  dec   Decimal\n  doc   Json\n  flag  Boolean\n  bytes Bytes\n  @@map("${kinds}")\n}\n`;
      const KindsClient = generated(schema, `kinds-${kinds}`);
      const ddl = {
        pg: `CREATE TABLE "${kinds}" (id SERIAL PRIMARY KEY, at TIMESTAMP(3) NOT NULL, big BIGINT NOT NULL, dec DECIMAL(65,30) NOT NULL, doc JSONB NOT NULL, flag BOOLEAN NOT NULL, bytes BYTEA NOT NULL)`,
        mysql: `CREATE TABLE \`${kinds}\` (id INT AUTO_INCREMENT PRIMARY KEY, at DATETIME(3) NOT NULL, big BIGINT NOT NULL, \`dec\` DECIMAL(65,30) NOT NULL, doc JSON NOT NULL, flag BOOLEAN NOT NULL, bytes LONGBLOB NOT NULL)`,
        sqlite: `CREATE TABLE "${kinds}" (id INTEGER PRIMARY KEY AUTOINCREMENT, at DATETIME NOT NULL, big BIGINT NOT NULL, dec DECIMAL NOT NULL, doc JSONB NOT NULL, flag BOOLEAN NOT NULL, bytes BLOB NOT NULL)`,
      }[backend.id];
      if (backend.id === 'sqlite') suite.store.db.exec(ddl);
      else await suite.helper.query(ddl, []);
      const value = {
        at: new Date('2026-12-07T10:11:12.345Z'),
        big: 9007199254740993n,
        dec: '123456789012345678901234567890.5',
        doc: { a: [1, 'x'], n: null },
        flag: true,
        bytes: Buffer.from([0, 255, 7]),
      };
      const ns = uniquePrefix();
      let back;
      const result = await processEvent(suite.store, request(`${ns}:kinds`, `${ns}:kinds`), {
        ruleSet,
        onApplied: withPrisma(KindsClient, async (prisma) => {
          const { id } = await prisma.kinds.create({ data: value });
          back = await prisma.kinds.findUnique({ where: { id } });
          return null;
        }),
      });
      assert.equal(result.outcome, 'applied');
      assert.equal(back.at.toISOString(), value.at.toISOString());
      assert.equal(back.big, value.big);
      // SQLite keeps a DECIMAL as a REAL (its affinity): the digits past a double's are lost there, as with Prisma's own adapter.
      if (backend.id !== 'sqlite') assert.equal(back.dec.toFixed(1), value.dec);
      assert.deepEqual(back.doc, value.doc);
      assert.equal(back.flag, true);
      assert.deepEqual(Buffer.from(back.bytes), value.bytes);
    });

    it('transaction control through $executeRaw is refused, and the client kept past its callback writes nothing', async () => {
      const ns = uniquePrefix();
      const commit = await outcomeOf(
        processEvent(suite.store, request(`${ns}:x`, `${ns}:x`), {
          ruleSet,
          onApplied: withPrisma(PrismaClient, async (prisma, decision) => {
            await ship(prisma, decision.event.eventId);
            await prisma.$executeRawUnsafe('COMMIT');
          }),
        }),
      );
      assert.equal(commit.error?.code, 'INVALID_ARGUMENT', commit.error?.message);
      assert.equal(await hasRow(`${ns}:x`), false);
      assert.equal(await suite.store.getReceipt(`${ns}:x`), null);

      let kept;
      await processEvent(suite.store, request(`${ns}:k`, `${ns}:k`), {
        ruleSet,
        onApplied: withPrisma(PrismaClient, (prisma) => {
          kept = prisma;
          return null;
        }),
      });
      await assert.rejects(ship(kept, `${ns}:late`));
      assert.equal(await hasRow(`${ns}:late`), false);
    });

    it('options that would point Prisma elsewhere, or bound its transaction, are refused; its own options and a schema pass', async () => {
      for (const [options, field] of [
        [{ adapter: {} }, 'options.adapter'],
        [{ datasourceUrl: 'postgres://elsewhere/db' }, 'options.datasourceUrl'],
        [{ transactionOptions: { isolationLevel: 'Serializable' } }, 'options.transactionOptions'],
        [{ schema: 7 }, 'options.schema'],
      ]) {
        assert.throws(
          () => withPrisma(PrismaClient, () => null, options),
          (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === field,
        );
      }
      // Options of Prisma's own pass: the client is made with them.
      const ns = uniquePrefix();
      const logged = await processEvent(suite.store, request(`${ns}:o`, `${ns}:o`), {
        ruleSet,
        onApplied: withPrisma(PrismaClient, (prisma, decision) => ship(prisma, decision.event.eventId), { errorFormat: 'minimal' }),
      });
      assert.equal(logged.outcome, 'applied');
      const inHand = await suite.store.transaction((tx) => prismaTransaction(tx, PrismaClient, (prisma) => ship(prisma, `${ns}:hand`)));
      assert.equal(typeof inHand.id, 'number');
      assert.equal(await hasRow(`${ns}:hand`), true);
      if (backend.id !== 'pg') {
        const onSqlite = await outcomeOf(
          processEvent(suite.store, request(`${ns}:s`, `${ns}:s`), {
            ruleSet,
            onApplied: withPrisma(PrismaClient, () => null, { schema: 'app' }),
          }),
        );
        assert.equal(onSqlite.error?.details?.reason, 'not PostgreSQL');
        return;
      }
      // The models in a schema of their own: Prisma names it in every statement, so the rows land there.
      const schema = `s_${uniquePrefix()}`;
      await suite.helper.query(`CREATE SCHEMA "${schema}"`, []);
      await suite.helper.query(`CREATE TABLE "${schema}"."${table}" (LIKE "${table}" INCLUDING ALL)`, []);
      try {
        const there = await processEvent(suite.store, request(`${ns}:schema`, `${ns}:schema`), {
          ruleSet,
          onApplied: withPrisma(PrismaClient, (prisma, decision) => ship(prisma, decision.event.eventId), { schema }),
        });
        assert.equal(there.outcome, 'applied');
        assert.equal(await hasRow(`${ns}:schema`), false, 'not in public');
        const rows = await suite.helper.query(`SELECT COUNT(*) AS n FROM "${schema}"."${table}" WHERE event_id = $1`, [`${ns}:schema`]);
        assert.equal(Number(rows[0].n), 1);
      } finally {
        await suite.helper.query(`DROP SCHEMA "${schema}" CASCADE`, []);
      }
    });
  });
}

describe('idemflow/prisma refuses what is not its own', () => {
  it('no PrismaClient class or no function is INVALID_ARGUMENT; a store Prisma has no adapter for fails the event and writes nothing', async () => {
    const NotAClient = class {};
    for (const make of [() => withPrisma(NotAClient, () => null), () => withPrisma({ $transaction() {} }, () => null)]) {
      assert.throws(make, (error) => error.code === 'INVALID_ARGUMENT' && error.details.reason === 'not a PrismaClient class');
    }
    const SomeClient = class {
      $transaction() {}
    };
    assert.throws(
      () => withPrisma(SomeClient, {}),
      (error) => error.code === 'INVALID_ARGUMENT' && error.details.reason === 'not a function',
    );
    const store = new InMemoryStore();
    const outcome = await outcomeOf(
      processEvent(store, request('mem:1', 'mem:1'), { ruleSet, onApplied: withPrisma(SomeClient, () => assert.fail('ran')) }),
    );
    assert.equal(outcome.error?.code, 'INVALID_ARGUMENT');
    assert.equal(outcome.error.details.reason, 'not a SQL store transaction');
    assert.equal(await store.getReceipt('mem:1'), null);
    const { PGlite } = await import('@electric-sql/pglite');
    const { PostgresStore } = await import('idemflow/postgres');
    const pglite = new PGlite();
    try {
      const onPglite = new PostgresStore(pglite);
      await onPglite.migrate();
      const refused = await outcomeOf(
        processEvent(onPglite, request('pglite:1', 'pglite:1'), { ruleSet, onApplied: withPrisma(SomeClient, () => assert.fail('ran')) }),
      );
      assert.equal(refused.error?.details?.reason, 'driver not supported');
      assert.match(refused.error.message, /no adapter for PGlite/);
      assert.equal(await onPglite.getReceipt('pglite:1'), null);
    } finally {
      await pglite.close();
    }
  });
});

// ---- docs/adapters.md's Prisma recipe, as written, on PostgreSQL: its schema generated (its table renamed to one of
// this run's), its js block run

const DOC = readFileSync(new URL('../../../docs/adapters.md', import.meta.url), 'utf8');

describe("docs/adapters.md's Prisma recipe", { skip: PG_URL ? false : 'set IDEMFLOW_PG_URL to run it on PostgreSQL' }, () => {
  it('runs as written: the shipment and the receipt commit together, and a duplicate answers the same shipment', async () => {
    const schema = DOC.match(/```prisma\n([\s\S]*?)```/)?.[1];
    const block = [...DOC.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes("from 'idemflow/prisma'"));
    assert.ok(schema && block, 'docs/adapters.md has the Prisma schema and block');
    const table = `${uniquePrefix()}_docs_shipments`;
    const PrismaClient = generated(schema.replace('@@map("shipments")', `@@map("${table}")`), `docs-${table}`);
    const { default: pg } = await import('pg');
    const { PostgresStore } = await import('idemflow/postgres');
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
    const tables = { workflows: `${table}_w`, inbox: `${table}_i`, outbox: `${table}_o` };
    try {
      await pool.query(`CREATE TABLE "${table}" (id SERIAL PRIMARY KEY, order_id TEXT NOT NULL)`);
      const store = new PostgresStore(pool, { tables });
      await store.migrate();
      const code = block.replace(/^import [\s\S]*?;$/gm, '');
      const onApplied = new Function('withPrisma', 'PrismaClient', `${code}\nreturn onApplied;`)(withPrisma, PrismaClient);
      const event = request('docs:prisma', 'docs:prisma');
      const first = await processEvent(store, event, { ruleSet, onApplied });
      const again = await processEvent(store, event, { ruleSet, onApplied });
      assert.equal(first.outcome, 'applied');
      assert.equal(typeof first.output.shipmentId, 'number');
      assert.deepEqual(again.original.output, first.output);
      assert.equal((await pool.query(`SELECT COUNT(*)::int AS n FROM "${table}"`)).rows[0].n, 1);
    } finally {
      for (const name of [table, ...Object.values(tables)]) await pool.query(`DROP TABLE IF EXISTS "${name}"`);
      await pool.end();
    }
  });
});
