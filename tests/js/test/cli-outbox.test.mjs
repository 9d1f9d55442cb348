// The operator's command line (idemflow outbox …, idemflow receipts purge), run
// as a child process the way npm installs it (node_modules/.bin/idemflow),
// against a SQLite file always and against PostgreSQL, MariaDB/MySQL, MongoDB
// and Redis when IDEMFLOW_PG_URL, IDEMFLOW_MYSQL_URL, IDEMFLOW_MONGODB_URL or
// IDEMFLOW_REDIS_URL is set.
// The scene is written through the API with a clock set in the past; the
// command line runs on the wall clock, so ages are asserted as ranges.

import assert from 'node:assert/strict';
import { fork, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import test, { after, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createOutboxConsumer, processEvent } from 'idemflow';
import { MONGODB_URL, MYSQL_URL, openStore, PG_URL, REDIS_URL, tablesFor, tempDir, uniquePrefix } from '../workers/backends.mjs';
import { numberedConfirmation as confirmation, numberedSwap as swap } from '../workers/fixtures.mjs';

const bin = fileURLToPath(new URL('../node_modules/.bin/idemflow', import.meta.url));
const testsDir = fileURLToPath(new URL('..', import.meta.url));
const WORKER = fileURLToPath(new URL('../workers/outbox-consumer.mjs', import.meta.url));
const DAY = 86_400_000;
const opId = (i) => `start-exchange:swap-${i}`;

function idemflow(args, { cwd = testsDir, env = {} } = {}) {
  const run = spawnSync(bin, args, { cwd, encoding: 'utf8', env: { ...process.env, IDEMFLOW_STORE: '', ...env }, timeout: 60_000 });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** Table output with runs of spaces made one, so rows compare as words. */
const squeezed = (text) =>
  text
    .split('\n')
    .map((line) => line.replace(/ {2,}/g, ' ').trim())
    .filter(Boolean);
const ndjson = (text) =>
  text
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));

const dir = tempDir('cli-outbox');
after(() => fs.rmSync(dir, { recursive: true, force: true }));

const BACKENDS = [
  {
    id: 'sqlite',
    name: 'SQLite file',
    skip: false,
    // Both spellings of --tables: a comma list here, JSON on the servers.
    open: (tables) => {
      const file = path.join(dir, `${tables.inbox}.db`);
      return {
        spec: { kind: 'sqlite', tables, file },
        url: `sqlite:${path.relative(testsDir, file)}`,
        tablesFlag: Object.values(tables).join(','),
      };
    },
  },
  {
    id: 'pg',
    name: 'PostgreSQL server',
    skip: PG_URL ? false : 'set IDEMFLOW_PG_URL=postgres://user@host:5432/db to run the command line on PostgreSQL',
    open: (tables) => ({ spec: { kind: 'pg', url: PG_URL, tables }, url: PG_URL, tablesFlag: JSON.stringify(tables) }),
  },
  {
    id: 'mysql',
    name: 'MariaDB/MySQL server',
    skip: MYSQL_URL ? false : 'set IDEMFLOW_MYSQL_URL=mysql://user@host:3306/db to run the command line on MariaDB or MySQL',
    open: (tables) => ({ spec: { kind: 'mysql', url: MYSQL_URL, tables }, url: MYSQL_URL, tablesFlag: JSON.stringify(tables) }),
  },
  {
    id: 'mongodb',
    name: 'MongoDB replica set',
    skip: MONGODB_URL ? false : 'set IDEMFLOW_MONGODB_URL=mongodb://host/db?replicaSet=rs0 to run the command line on MongoDB',
    open: (tables) => ({ spec: { kind: 'mongodb', url: MONGODB_URL, tables }, url: MONGODB_URL, tablesFlag: JSON.stringify(tables) }),
  },
  {
    id: 'redis',
    name: 'Redis server',
    skip: REDIS_URL ? false : 'set IDEMFLOW_REDIS_URL=redis://host:6379 to run the command line on Redis',
    open: (tables) => ({ spec: { kind: 'redis', url: REDIS_URL, tables }, url: REDIS_URL, tablesFlag: JSON.stringify(tables) }),
  },
];

/**
 * Forty days ago: swaps 1…4 confirmed (START_EXCHANGE each), 1 done, 2 dead
 * ("PROVIDER_500: timeout"). An hour ago: swap 9's payout (SEND_PAYOUT).
 */
async function scene(backend) {
  const tables = tablesFor(uniquePrefix());
  const where = backend.open(tables);
  const clock = { t: Date.now() - 40 * DAY };
  const helper = await openStore(where.spec.kind, { tables, file: where.spec.file, url: where.spec.url, now: () => clock.t, poolSize: 2 });
  const { store } = helper;
  await store.migrate();
  for (const workflow of [1, 2, 3, 4].map(swap)) await store.putWorkflow(workflow);
  await store.putWorkflow({ id: 'swap-9', status: 'exchange', revision: 2, depositRef: 'r', amountUnits: '5' });
  for (const i of [1, 2, 3, 4]) assert.equal((await processEvent(store, confirmation(i))).outcome, 'applied');
  const [one, two] = await store.claimOperations({ owner: 'setup', now: clock.t, leaseExpiresAt: clock.t + 1000, limit: 2 });
  assert.equal(await store.completeOperation({ id: one.id, fencingToken: one.fencingToken, now: clock.t }), true);
  assert.equal(
    await store.failOperation({
      id: two.id,
      fencingToken: two.fencingToken,
      now: clock.t,
      status: 'dead',
      lastError: 'PROVIDER_500: timeout',
    }),
    true,
  );
  clock.t = Date.now() - 3_600_000;
  assert.equal(
    (await processEvent(store, { eventId: 'x-9', workflowId: 'swap-9', type: 'EXCHANGE_COMPLETED', payoutUnits: '4' })).outcome,
    'applied',
  );
  clock.t = Date.now();
  const cli = (args, options) => idemflow([...args, '--store', where.url, '--tables', where.tablesFlag], options);
  return { store, helper, clock, cli, spec: where.spec };
}

for (const backend of BACKENDS) {
  describe(`idemflow outbox on ${backend.name}`, { skip: backend.skip }, () => {
    let opened = [];
    const setUp = async () => {
      const made = await scene(backend);
      opened.push(made.helper);
      return made;
    };
    after(async () => {
      for (const helper of opened) {
        await helper.drop();
        await helper.close();
      }
      opened = [];
    });

    test('stats prints counts by type and status and how long the oldest due operation has waited', async () => {
      const { store, cli } = await setUp();
      const { code, stdout, stderr } = cli(['outbox', 'stats']);
      assert.equal(code, 0, stderr);
      const lines = squeezed(stdout);
      assert.deepEqual(lines.slice(0, 4), [
        'TYPE PENDING CLAIMED DONE DEAD TOTAL',
        'SEND_PAYOUT 1 0 0 0 1',
        'START_EXCHANGE 2 0 1 1 4',
        '(all) 3 0 1 1 5',
      ]);
      assert.match(lines[4], /^oldest due: waiting (39d 23h|40d 0h)$/);
      const json = JSON.parse(cli(['outbox', 'stats', '--json']).stdout);
      const api = await store.stats();
      assert.deepEqual({ ...json, oldestDueAgeMs: 0 }, { ...api, oldestDueAgeMs: 0 });
      assert.ok(json.oldestDueAgeMs >= 40 * DAY && json.oldestDueAgeMs < 40 * DAY + 120_000, String(json.oldestDueAgeMs));
    });

    test('list filters by status, type, workflow, age and error text, prints a table or NDJSON, and pages with --after', async () => {
      const { store, cli } = await setUp();
      const table = cli(['outbox', 'list', '--status', 'dead', '--type', 'START_EXCHANGE']);
      assert.equal(table.code, 0, table.stderr);
      const rows = squeezed(table.stdout);
      assert.equal(rows[0], 'ID TYPE STATUS ATTEMPTS WORKFLOW DUE OWNER LAST ERROR');
      assert.deepEqual(rows.slice(1), [`${opId(2)} START_EXCHANGE dead 1 swap-2 - - PROVIDER_500: timeout`]);
      const ids = (args) => {
        const run = cli(['outbox', 'list', '--json', ...args]);
        assert.equal(run.code, 0, run.stderr);
        return ndjson(run.stdout).map((op) => op.id);
      };
      assert.deepEqual(ids(['--status', 'dead', '--type', 'SEND_PAYOUT']), []);
      assert.deepEqual(ids(['--older-than', '30d']), [1, 2, 3, 4].map(opId));
      assert.deepEqual(ids(['--older-than', '30d', '--status', 'pending']), [opId(3), opId(4)]);
      assert.deepEqual(ids(['--newer-than', '30d']), ['send-payout:swap-9']);
      assert.deepEqual(ids(['--newer-than', '50d', '--status', 'dead', '--type', 'START_EXCHANGE']), [opId(2)]);
      assert.deepEqual(ids(['--workflow', 'swap-9']), ['send-payout:swap-9']);
      assert.deepEqual(ids(['--error', 'provider_500']), [opId(2)]);
      const operations = ndjson(cli(['outbox', 'list', '--json', '--status', 'dead']).stdout);
      assert.deepEqual(operations, await store.listOperations({ status: 'dead' }), 'the same answer as the API');

      const first = cli(['outbox', 'list', '--json', '--limit', '2']);
      assert.deepEqual(
        ndjson(first.stdout).map((op) => op.id),
        ['send-payout:swap-9', opId(1)],
      );
      assert.equal(first.stderr, `more may follow: add --after ${opId(1)}\n`);
      assert.deepEqual(ids(['--limit', '2', '--after', opId(1)]), [opId(2), opId(3)]);
      assert.equal(cli(['outbox', 'list']).stderr, '', 'a page that is not full says nothing more');

      const bad = cli(['outbox', 'list', '--older-than', 'a month']);
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /--older-than takes a duration such as 90m, 12h or 30d/);
      assert.equal(cli(['outbox', 'list', '--status', 'stuck']).code, 2);
      assert.equal(cli(['outbox', 'list', '--colour', 'red']).code, 2);
    });

    test('show prints one operation; a missing id exits 1', async () => {
      const { store, cli } = await setUp();
      const shown = cli(['outbox', 'show', opId(2)]);
      assert.equal(shown.code, 0, shown.stderr);
      assert.deepEqual(JSON.parse(shown.stdout), await store.getOperation(opId(2)));
      const missing = cli(['outbox', 'show', 'no-such-op']);
      assert.deepEqual([missing.code, missing.stdout, missing.stderr], [1, '', 'idemflow: no operation no-such-op\n']);
    });

    test('requeue asks for --yes, shows a dry run, then says per id requeued, not-dead or not-found', async () => {
      const { store, cli } = await setUp();
      const before = await store.getOperation(opId(2));
      const refused = cli(['outbox', 'requeue', opId(2)]);
      assert.equal(refused.code, 2);
      assert.match(refused.stderr, /add --yes to do it, or --dry-run to see what it would do/);
      const dry = cli(['outbox', 'requeue', opId(2), opId(1), 'no-such-op', '--dry-run']);
      assert.equal(dry.code, 0, dry.stderr);
      assert.deepEqual(squeezed(dry.stdout), [`${opId(2)} would-requeue`, `${opId(1)} not-dead`, 'no-such-op not-found']);
      assert.deepEqual(await store.getOperation(opId(2)), before, 'a dry run changes nothing');

      const done = cli(['outbox', 'requeue', opId(2), opId(1), 'no-such-op', '--yes']);
      assert.equal(done.code, 1, 'not every id named was requeued');
      assert.deepEqual(squeezed(done.stdout), [`${opId(2)} requeued`, `${opId(1)} not-dead`, 'no-such-op not-found']);
      assert.equal(done.stderr, '1 of 3 requeued\n');
      const requeued = await store.getOperation(opId(2));
      assert.deepEqual([requeued.status, requeued.attempts], ['pending', 0]);
    });

    test('requeue by filter needs --status dead and requeues only the dead operations that match', async () => {
      const { store, cli } = await setUp();
      assert.equal(cli(['outbox', 'requeue', '--type', 'START_EXCHANGE', '--yes']).code, 2, 'a filter must say --status dead');
      assert.equal(cli(['outbox', 'requeue', opId(2), '--status', 'dead', '--yes']).code, 2, 'ids or a filter');
      const none = cli(['outbox', 'requeue', '--status', 'dead', '--type', 'SEND_PAYOUT', '--yes', '--json']);
      assert.deepEqual([none.code, none.stdout], [0, '']);
      const some = cli(['outbox', 'requeue', '--status', 'dead', '--type', 'START_EXCHANGE', '--yes', '--json']);
      assert.equal(some.code, 0, some.stderr);
      assert.deepEqual(ndjson(some.stdout), [{ id: opId(2), result: 'requeued' }]);
      assert.deepEqual(await store.listOperations({ status: 'dead' }), []);
    });

    test('release --owner gives back the claim of a SIGKILLed worker at once; its late completion is refused', async () => {
      const { store, cli, spec, clock } = await setUp();
      // A consumer process claims the oldest due START_EXCHANGE (swap 3) under an hour's lease and is killed in its handler.
      const child = fork(WORKER, [JSON.stringify(spec), String(Date.now()), String(3_600_000)], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      const exited = once(child, 'exit');
      const [started] = await Promise.race([
        once(child, 'message'),
        exited.then(([code]) => {
          throw new Error(`the consumer exited (${code}) before its handler started`);
        }),
      ]);
      child.kill('SIGKILL');
      assert.equal((await exited)[1], 'SIGKILL');
      const owner = `worker-${child.pid}`;
      assert.deepEqual(started, { started: opId(3), fencingToken: 1, owner });

      const held = cli(['outbox', 'list', '--json', '--owner', owner]);
      assert.deepEqual(
        ndjson(held.stdout).map((op) => [op.id, op.status]),
        [[opId(3), 'claimed']],
      );
      assert.equal(cli(['outbox', 'release']).code, 2, '--owner is needed');
      const dry = cli(['outbox', 'release', '--owner', owner, '--dry-run']);
      assert.deepEqual([dry.code, squeezed(dry.stdout)], [0, [`${opId(3)} would-release`]]);
      assert.equal((await store.getOperation(opId(3))).status, 'claimed');

      const released = cli(['outbox', 'release', '--owner', owner, '--yes']);
      assert.equal(released.code, 0, released.stderr);
      assert.deepEqual(squeezed(released.stdout), [`${opId(3)} released`]);
      assert.equal(released.stderr, `1 claim of ${owner} released\n`);
      const after = await store.getOperation(opId(3));
      assert.deepEqual([after.status, after.leaseOwner, after.leaseExpiresAt, after.fencingToken], ['pending', null, null, 2]);
      // The killed worker's completion, had it come late, is refused: its token is stale.
      assert.equal(await store.completeOperation({ id: opId(3), fencingToken: 1, now: Date.now() }), false);
      assert.equal((await store.getOperation(opId(3))).status, 'pending');

      // Well before the hour's lease would have expired, another consumer runs it.
      const runs = [];
      const survivor = createOutboxConsumer(
        store,
        {
          START_EXCHANGE: (op, { fencingToken }) => {
            runs.push([op.id, fencingToken]);
          },
        },
        { autoRenew: false, concurrency: 1 },
      );
      clock.t = Date.now(); // the test's store clock catches up with the command line's
      assert.equal((await survivor.drain()).done, 2, 'swap 4 (due for forty days) and swap 3');
      assert.deepEqual(
        runs.filter(([id]) => id === opId(3)),
        [[opId(3), 3]],
        'run once, under the token after the release',
      );
      assert.equal(cli(['outbox', 'release', '--owner', owner, '--yes']).stdout, '', 'nothing left to release');
    });

    test('outbox purge and receipts purge delete in batches, printing progress, only with --yes', async () => {
      const { store, cli } = await setUp();
      const dry = cli(['outbox', 'purge', '--older-than', '30d', '--status', 'dead', '--dry-run']);
      assert.equal(dry.code, 0, dry.stderr);
      assert.match(dry.stdout, /^dry run: would delete 1 dead operations last updated before .*; nothing changed\n$/);
      assert.notEqual(await store.getOperation(opId(2)), null);
      assert.equal(cli(['outbox', 'purge', '--older-than', '30d']).code, 2, 'needs --yes');
      assert.equal(cli(['outbox', 'purge', '--yes']).code, 2, 'needs --older-than');
      assert.equal(cli(['outbox', 'purge', '--older-than', '30d', '--status', 'pending', '--yes']).code, 2);

      const purged = cli(['outbox', 'purge', '--older-than', '30d', '--yes']);
      assert.equal(purged.code, 0, purged.stderr);
      assert.match(purged.stdout, /^deleted 1 done operations last updated before .* in 1 batch\n$/);
      assert.equal(purged.stderr, 'batch 1: 1 deleted so far\n');
      assert.equal(await store.getOperation(opId(1)), null);
      assert.notEqual(await store.getOperation(opId(2)), null, 'dead operations stay unless asked for');

      const receipts = cli(['receipts', 'purge', '--older-than', '30d', '--batch-size', '3', '--yes', '--json']);
      assert.equal(receipts.code, 0, receipts.stderr);
      assert.deepEqual(JSON.parse(receipts.stdout), { deleted: 4, batches: 2 });
      assert.equal(receipts.stderr, 'batch 1: 3 deleted so far\nbatch 2: 4 deleted so far\n');
      assert.equal(await store.getReceipt('confirm-1'), null);
      assert.notEqual(await store.getReceipt('x-9'), null, 'a receipt of an hour ago stays');
    });

    test('a store that cannot be reached is a failure (exit 1), with the code', {
      skip: backend.id === 'redis' ? 'Redis has no tables: new names are an empty store (a refused connection is tested below)' : false,
    }, async () => {
      const tables = tablesFor(uniquePrefix());
      const where = backend.open(tables);
      // Tables that do not exist: the store answers with its error, not a crash.
      const run = idemflow(['outbox', 'stats', '--store', where.url, '--tables', where.tablesFlag]);
      assert.equal(run.code, 1, run.stderr);
      assert.match(run.stderr, /^idemflow: [A-Z_]+: /);
    });
  });
}

test('idemflow --help lists the operator commands', () => {
  const { code, stdout } = idemflow(['--help']);
  assert.equal(code, 0);
  for (const command of [
    'outbox stats',
    'outbox list',
    'outbox show',
    'outbox requeue',
    'outbox release',
    'outbox purge',
    'receipts purge',
  ]) {
    assert.ok(stdout.includes(`idemflow ${command}`), command);
  }
  assert.match(stdout, /exit status: 0 done, 1 failed, 2 the command cannot run as given/);
});

test('the store URL: a missing one, an unknown scheme, a Redis nothing listens for and a missing SQLite file', () => {
  const none = idemflow(['outbox', 'stats']);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /--store is needed/);
  assert.equal(idemflow(['outbox', 'stats', '--store', 'cassandra://localhost']).code, 2);
  const refused = idemflow(['outbox', 'stats', '--store', 'redis://127.0.0.1:1']);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /^idemflow: STORE_UNAVAILABLE: the store is unavailable \(connection-refused\)/);
  const missing = idemflow(['outbox', 'stats', '--store', 'sqlite:no/such/file.db']);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /^idemflow: STORE_UNAVAILABLE: no SQLite database at .*no\/such\/file\.db\n$/);
  assert.equal(fs.existsSync(path.join(testsDir, 'no')), false, 'nothing was created');
  assert.equal(idemflow(['outbox', 'stats', '--store', 'sqlite:x.db', '--tables', 'a,b']).code, 2);
  assert.equal(idemflow(['outbox']).code, 2);
  assert.equal(idemflow(['outbox', 'frobnicate']).code, 2);
  assert.equal(idemflow(['receipts', 'list']).code, 2);
});

test('a driver the project does not have is INVALID_ARGUMENT naming the npm package to install', () => {
  const empty = tempDir('cli-no-drivers');
  try {
    for (const [url, pkg] of [
      ['postgres://u@127.0.0.1:1/db', 'pg'],
      ['mysql://u@127.0.0.1:1/db', 'mysql2'],
      ['mongodb://127.0.0.1:1/db', 'mongodb'],
      ['redis://127.0.0.1:1', 'redis'],
    ]) {
      const run = idemflow(['outbox', 'stats', '--store', url], { cwd: empty });
      assert.equal(run.code, 2, run.stderr);
      assert.match(
        run.stderr,
        new RegExp(`^idemflow: INVALID_ARGUMENT: .* needs the npm package ${pkg}, which is not installed in .*: run npm install ${pkg}`),
      );
    }
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
  }
});

test('IDEMFLOW_STORE stands for --store', async () => {
  const made = await scene(BACKENDS[0]);
  try {
    const tables = made.spec.tables;
    const run = idemflow(['outbox', 'list', '--json', '--type', 'SEND_PAYOUT', '--tables', Object.values(tables).join(',')], {
      env: { IDEMFLOW_STORE: `sqlite:${made.spec.file}` },
    });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(
      ndjson(run.stdout).map((op) => op.id),
      ['send-payout:swap-9'],
    );
  } finally {
    await made.helper.close();
  }
});
