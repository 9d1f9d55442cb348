'use strict';
// The operator's commands: `idemflow outbox stats|list|show|requeue|release|purge`
// and `idemflow receipts purge`, against the store `--store <url>` names. Each
// is one call of the store's API (docs/outbox.md) with the same answer,
// printed for a person (a table) or a program (--json: NDJSON). Commands that
// change the store need --yes, or say what they would do with --dry-run.

const { IdemflowError } = require('../core/errors.cjs');
const { UsageError, flags, duration, count, age } = require('./args.cjs');
const { openStoreUrl, parseTables } = require('./store-url.cjs');

const STORE_FLAGS = { store: 'value', tables: 'value' };
const FILTER_FLAGS = {
  status: 'value',
  type: 'value',
  workflow: 'value',
  owner: 'value',
  'older-than': 'value',
  'newer-than': 'value',
  error: 'value',
};
const CHANGE_FLAGS = { yes: 'flag', 'dry-run': 'flag' };
const PURGE_STATUSES = ['done', 'dead'];
const DEFAULT_BATCH_SIZE = 1000;

const USAGE = `  idemflow outbox stats [--json]
      operations counted by status and by type, and how long the oldest due
      one has waited
  idemflow outbox list [--status S] [--type T] [--workflow ID] [--owner W]
                       [--older-than 30d] [--newer-than 2h] [--error TEXT] [--limit N] [--after ID] [--json]
      operations matching every filter given, by id (--after: the next page);
      --older-than/--newer-than: created before/since that long ago
  idemflow outbox show <id>
      one operation, every field
  idemflow outbox requeue <id>... | --status dead [filters] [--limit N]  (--yes | --dry-run)
      dead operations back to pending, due now, attempts 0; says per id
      requeued, not-dead or not-found (exit 1 when a named id was not requeued)
  idemflow outbox release --owner W  (--yes | --dry-run)
      gives back every claim of worker W (known to be dead) without waiting
      for its lease; a late completion by W is refused
  idemflow outbox purge --older-than 30d [--status done|dead] [--batch-size N]  (--yes | --dry-run)
      deletes done (or dead) operations last updated before then, in batches
  idemflow receipts purge --older-than 30d [--batch-size N]  (--yes | --dry-run)
      deletes inbox receipts recorded before then, in batches
    every outbox and receipts command takes --store <url> (or IDEMFLOW_STORE):
    sqlite:path/to/file.db, postgres://..., mysql://..., mongodb://..., redis://...,
    the driver (better-sqlite3, pg, mysql2, mongodb, redis or ioredis) from this project, and
    --tables workflows,inbox,outbox (or JSON) as in the stores' options`;

/** The listOperations filter of the filter flags, `now` fixing --older-than and --newer-than. */
function filterOf(options, now) {
  const filter = {};
  if (options.status !== undefined) filter.status = options.status;
  if (options.type !== undefined) filter.type = options.type;
  if (options.workflow !== undefined) filter.workflowId = options.workflow;
  if (options.owner !== undefined) filter.owner = options.owner;
  if (options['older-than'] !== undefined) filter.olderThan = now - duration(options['older-than'], '--older-than');
  if (options['newer-than'] !== undefined) filter.newerThan = now - duration(options['newer-than'], '--newer-than');
  if (options.error !== undefined) filter.errorContains = options.error;
  return filter;
}

/** Refuses a change that says neither --yes nor --dry-run (or both). */
function confirmed(options, what) {
  if (options.yes && options['dry-run']) throw new UsageError('--yes and --dry-run exclude each other');
  if (!options.yes && !options['dry-run']) throw new UsageError(`${what}: add --yes to do it, or --dry-run to see what it would do`);
  return options.yes === true;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
const iso = (ms) => (typeof ms === 'number' ? new Date(ms).toISOString() : '-');

/** Rows of text as aligned columns, the header first. */
function columns(header, rows) {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i].length)));
  return `${[header, ...rows]
    .map((row) =>
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')}\n`;
}

function oneLine(text, max = 60) {
  if (typeof text !== 'string') return '-';
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function operationRows(operations) {
  return operations.map((op) => [
    String(op.id),
    String(op.type ?? '?'),
    String(op.status ?? '?'),
    String(op.attempts ?? '?'),
    String(op.workflowId ?? '?'),
    op.status === 'claimed' ? `lease ${iso(op.leaseExpiresAt)}` : op.status === 'pending' ? iso(op.nextAttemptAt) : '-',
    op.leaseOwner ?? '-',
    oneLine(op.lastError),
  ]);
}
const OPERATION_HEADER = ['ID', 'TYPE', 'STATUS', 'ATTEMPTS', 'WORKFLOW', 'DUE', 'OWNER', 'LAST ERROR'];

async function stats(store, { positional, options }, io) {
  if (positional.length > 0) throw new UsageError('outbox stats takes no arguments');
  const now = store.now();
  const result = await store.stats({ now });
  if (options.json) {
    io.out.write(`${JSON.stringify(result)}\n`);
    return 0;
  }
  const statuses = ['pending', 'claimed', 'done', 'dead'];
  const total = statuses.reduce((sum, status) => sum + result.byStatus[status], 0);
  io.out.write(
    columns(
      ['TYPE', ...statuses.map((s) => s.toUpperCase()), 'TOTAL'],
      [
        ...Object.entries(result.byType).map(([type, counts]) => [
          type,
          ...statuses.map((s) => String(counts[s])),
          String(statuses.reduce((sum, s) => sum + counts[s], 0)),
        ]),
        ['(all)', ...statuses.map((s) => String(result.byStatus[s])), String(total)],
      ],
    ),
  );
  io.out.write(result.oldestDueAgeMs === null ? 'oldest due: nothing is due\n' : `oldest due: waiting ${age(result.oldestDueAgeMs)}\n`);
  return 0;
}

async function list(store, { positional, options }, io) {
  if (positional.length > 0) throw new UsageError('outbox list takes filters as options (see idemflow help)');
  const limit = options.limit === undefined ? 50 : count(options.limit, '--limit');
  const operations = await store.listOperations({
    ...filterOf(options, store.now()),
    limit,
    ...(options.after === undefined ? {} : { afterId: options.after }),
  });
  if (options.json) {
    for (const operation of operations) io.out.write(`${JSON.stringify(operation)}\n`);
  } else if (operations.length === 0) {
    io.out.write('no operations match\n');
  } else {
    io.out.write(columns(OPERATION_HEADER, operationRows(operations)));
  }
  // A full page may have more behind it: say how to read it.
  if (operations.length === limit) io.err.write(`more may follow: add --after ${operations.at(-1).id}\n`);
  return 0;
}

async function show(store, { positional }, io) {
  if (positional.length !== 1) throw new UsageError('outbox show takes one operation id');
  const operation = await store.getOperation(positional[0]);
  if (operation === null) {
    io.err.write(`idemflow: no operation ${positional[0]}\n`);
    return 1;
  }
  io.out.write(`${JSON.stringify(operation, null, 2)}\n`);
  return 0;
}

async function requeue(store, { positional, options }, io) {
  const filter = filterOf(options, store.now());
  const byFilter = Object.keys(filter).length > 0;
  if (positional.length > 0 && (byFilter || options.limit !== undefined))
    throw new UsageError('outbox requeue takes ids or filters, not both');
  if (positional.length === 0 && !byFilter) throw new UsageError('outbox requeue takes ids, or --status dead and filters');
  if (byFilter && filter.status !== 'dead')
    throw new UsageError('outbox requeue by filter needs --status dead (only a dead operation is requeued)');
  const limit = options.limit === undefined ? undefined : count(options.limit, '--limit');
  const write = (results) => {
    for (const { id, result } of results) io.out.write(options.json ? `${JSON.stringify({ id, result })}\n` : `${id}  ${result}\n`);
  };
  if (!confirmed(options, 'outbox requeue changes operations')) {
    let results;
    if (byFilter) {
      const matching = [];
      let afterId;
      for (;;) {
        const page = await store.listOperations({ ...filter, limit: 500, ...(afterId === undefined ? {} : { afterId }) });
        matching.push(...page);
        if (page.length < 500 || (limit !== undefined && matching.length >= limit)) break;
        afterId = page.at(-1).id;
      }
      results = matching.slice(0, limit).map((op) => ({ id: op.id, result: 'would-requeue' }));
    } else {
      results = [];
      for (const id of new Set(positional)) {
        const operation = await store.getOperation(id);
        results.push({ id, result: operation === null ? 'not-found' : operation.status === 'dead' ? 'would-requeue' : 'not-dead' });
      }
    }
    write(results);
    io.err.write(`dry run: ${results.filter((r) => r.result === 'would-requeue').length} would be requeued, nothing changed\n`);
    return 0;
  }
  const results = await store.requeueOperations(byFilter ? { ...filter, ...(limit === undefined ? {} : { limit }) } : { ids: positional });
  write(results);
  const requeued = results.filter((r) => r.result === 'requeued').length;
  io.err.write(`${requeued} of ${results.length} requeued\n`);
  return !byFilter && requeued < results.length ? 1 : 0;
}

async function release(store, { positional, options }, io) {
  if (positional.length > 0) throw new UsageError('outbox release takes --owner, not ids');
  if (options.owner === undefined) throw new UsageError('outbox release needs --owner <worker> (a lease owner, as outbox list shows it)');
  if (!confirmed(options, `outbox release gives back the claims of ${options.owner}`)) {
    const held = [];
    let afterId;
    for (;;) {
      const page = await store.listOperations({
        status: 'claimed',
        owner: options.owner,
        limit: 500,
        ...(afterId === undefined ? {} : { afterId }),
      });
      held.push(...page);
      if (page.length < 500) break;
      afterId = page.at(-1).id;
    }
    for (const op of held)
      io.out.write(options.json ? `${JSON.stringify({ id: op.id, result: 'would-release' })}\n` : `${op.id}  would-release\n`);
    io.err.write(`dry run: ${plural(held.length, 'claim')} of ${options.owner} would be released, nothing changed\n`);
    return 0;
  }
  const released = await store.releaseOwner(options.owner);
  for (const id of released) io.out.write(options.json ? `${JSON.stringify({ id, result: 'released' })}\n` : `${id}  released\n`);
  io.err.write(`${plural(released.length, 'claim')} of ${options.owner} released\n`);
  return 0;
}

/** outbox purge and receipts purge: in batches, each batch's progress on stderr. */
async function purge(store, { positional, options }, io, target) {
  if (positional.length > 0) throw new UsageError(`${target} purge takes no arguments`);
  if (options['older-than'] === undefined) throw new UsageError(`${target} purge needs --older-than, e.g. --older-than 30d`);
  const now = store.now();
  const olderThan = now - duration(options['older-than'], '--older-than');
  const batchSize = options['batch-size'] === undefined ? DEFAULT_BATCH_SIZE : count(options['batch-size'], '--batch-size');
  const status = options.status ?? 'done';
  if (target === 'outbox' && !PURGE_STATUSES.includes(status)) throw new UsageError('outbox purge --status takes done or dead');
  const what =
    target === 'outbox' ? `${status} operations last updated before ${iso(olderThan)}` : `receipts recorded before ${iso(olderThan)}`;
  if (!confirmed(options, `${target} purge deletes ${what}`)) {
    if (target === 'outbox') {
      let matching = 0;
      let afterId;
      for (;;) {
        const page = await store.listOperations({ status, limit: 500, ...(afterId === undefined ? {} : { afterId }) });
        matching += page.filter((op) => typeof op.updatedAt === 'number' && op.updatedAt < olderThan).length;
        if (page.length < 500) break;
        afterId = page.at(-1).id;
      }
      io.out.write(`dry run: would delete ${matching} ${what}, in batches of ${batchSize}; nothing changed\n`);
    } else {
      io.out.write(`dry run: would delete ${what}, in batches of ${batchSize}; nothing changed\n`);
    }
    return 0;
  }
  const onBatch = ({ deleted, batches }) => io.err.write(`batch ${batches}: ${deleted} deleted so far\n`);
  const result =
    target === 'outbox'
      ? await store.purgeOperations({ olderThan, batchSize, status, onBatch })
      : await store.purgeReceipts({ olderThan, batchSize, onBatch });
  io.out.write(
    options.json
      ? `${JSON.stringify(result)}\n`
      : `deleted ${result.deleted} ${what} in ${plural(result.batches, 'batch').replace(/hs$/, 'hes')}\n`,
  );
  return 0;
}

const COMMANDS = {
  'outbox stats': { run: stats, flags: { json: 'flag' } },
  'outbox list': { run: list, flags: { ...FILTER_FLAGS, limit: 'value', after: 'value', json: 'flag' } },
  'outbox show': { run: show, flags: {} },
  'outbox requeue': { run: requeue, flags: { ...FILTER_FLAGS, limit: 'value', json: 'flag', ...CHANGE_FLAGS } },
  'outbox release': { run: release, flags: { owner: 'value', json: 'flag', ...CHANGE_FLAGS } },
  'outbox purge': {
    run: (store, args, io) => purge(store, args, io, 'outbox'),
    flags: { 'older-than': 'value', status: 'value', 'batch-size': 'value', json: 'flag', ...CHANGE_FLAGS },
  },
  'receipts purge': {
    run: (store, args, io) => purge(store, args, io, 'receipts'),
    flags: { 'older-than': 'value', 'batch-size': 'value', json: 'flag', ...CHANGE_FLAGS },
  },
};

/**
 * Runs `idemflow <group> <sub> ...args`: 0 done, 1 failed (the store
 * refused or could not be reached; a named id not found). A call that cannot
 * run as given throws UsageError, or IdemflowError INVALID_ARGUMENT (exit 2).
 */
async function operatorCommand(group, sub, args, io, env = process.env) {
  const command = COMMANDS[`${group} ${sub}`];
  if (command === undefined) {
    const subs = Object.keys(COMMANDS)
      .filter((name) => name.startsWith(`${group} `))
      .map((name) => name.split(' ')[1]);
    throw new UsageError(
      sub ? `unknown command: ${group} ${sub} (${group} takes ${subs.join(', ')})` : `${group} needs one of: ${subs.join(', ')}`,
    );
  }
  const parsed = flags(args, { ...STORE_FLAGS, ...command.flags });
  const { store: url = env.IDEMFLOW_STORE, tables } = parsed.options;
  let opened = null;
  try {
    opened = await openStoreUrl(url, { tables: parseTables(tables) });
    return await command.run(opened.store, parsed, io);
  } catch (error) {
    if (error instanceof UsageError || (error instanceof IdemflowError && error.code === 'INVALID_ARGUMENT')) throw error;
    io.err.write(
      `idemflow: ${error instanceof IdemflowError ? `${error.code}: ${error.message}` : error?.message ? error.message : String(error)}\n`,
    );
    return 1;
  } finally {
    await opened?.close().catch(() => {});
  }
}

module.exports = { operatorCommand, USAGE };
