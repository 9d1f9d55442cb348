// The handler a careful person writes by hand, without idemflow: the cost
// floor the benchmarks compare idemflow with. One transaction per event over
// idemflow's own tables (the same columns read and written): read the
// receipt (a duplicate answers what its first delivery produced), read the
// workflow, pick the transition (deposit-swap v3: the event's deposit read
// from its own entry in the workflow's deposits map), insert the receipt,
// compare-and-set the workflow on (status, revision) writing the new map,
// insert the outbox operations.
// bench/adapters.mjs runs it on one connection; bench/production.mjs in
// worker processes (workers/lane.mjs, workers/broker-reference.mjs).
import { createHash } from 'node:crypto';

/**
 * The fingerprint a careful handler keeps: SHA-256 of the fact (not of the
 * delivery), as idemflow keeps one: every field deposit-swap v3 declares,
 * the watcher's sequence as the JSON integer it is.
 */
export function fingerprintOf(event) {
  const fact = [event.type, event.workflowId, event.depositRef, event.amountUnits, event.sequence];
  return `sha256:${createHash('sha256').update(JSON.stringify(fact)).digest('hex')}`;
}

export const RULES_HASH = `sha256:${'0'.repeat(64)}`;

/** The types whose events carry the watcher's number (a safe integer of at least 1) and are kept per deposit in `deposits`. */
const NUMBERED_TYPES = new Set(['DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED', 'DEPOSIT_REVERSED']);
/** The event types this handler takes (the benchmarks' traffic: no provider answers, so EXCHANGE_COMPLETED and PAYOUT_CONFIRMED never come). */
const TYPES = new Set([...NUMBERED_TYPES, 'DEADLINE_PASSED']);
const BEFORE_EXCHANGE = new Set(['waiting', 'deposit', 'reversed']);

/** Whether `amount` (integer base units, digits) is at least `expected`; unset, any amount covers. */
function covers(amount, expected) {
  if (expected === undefined) return true;
  return amount.length !== expected.length ? amount.length > expected.length : amount >= expected;
}

/** A per-deposit operation's id: the depositRef with `%` and `:` escaped, so the id splits one way. */
const reviewDepositId = (depositRef, workflowId) =>
  `review-deposit:${depositRef.replaceAll('%', '%25').replaceAll(':', '%3A')}:${workflowId}`;

/**
 * What deposit-swap v3 does with a deposit event, written out by hand as such
 * a worker would: `{ outcome, to?, record?, operations? }`, `record` the
 * workflow data to write (the whole new deposits map and, when the exchange
 * starts or the chain moves under the exchanged deposit, top-level fields).
 *
 * Each deposit has its own entry in data.deposits, keyed by depositRef (its
 * latest word, amount, number and the per-deposit operations emitted for
 * it): the amount must be the entry's, and the event's sequence is compared
 * with the entry's (no entry compares as 0). Another depositRef is another
 * deposit, with an entry of its own, as v3 has it. Written out for the
 * statuses the benchmarks' traffic reaches (waiting, deposit, reversed,
 * overdue, exchange, review: bench/adapters.mjs's one deposit per swap,
 * confirmed, redelivered and re-published; bench/production.mjs's chaos
 * traffic of workers/swap-traffic.mjs, one deposit per swap detected,
 * confirmed, reversed, overdue, conflicting, in any order); sending and
 * success are refused. Second deposits are decided as v3 does but no
 * benchmark sends them.
 */
function depositDecision(event, status, data) {
  const deposits = data.deposits ?? {};
  const { depositRef, amountUnits, sequence } = event;
  const entry = deposits[depositRef];
  if (entry !== undefined && entry.amountUnits !== amountUnits) throw new Refused('reconcile', 'another amount for this deposit');
  const seen = entry?.sequence ?? 0;
  if (sequence === seen) return { outcome: 'already-applied' };
  if (sequence < seen) return { outcome: 'stale' };
  const confirmed = event.type === 'DEPOSIT_CONFIRMED';
  const operations = [];
  // The deposit's own review, at most once per deposit: its entry lists it once emitted.
  const reviewed = entry?.operations?.includes('review-deposit') ?? false;
  const reviewDeposit = () => {
    if (!reviewed)
      operations.push({ id: reviewDepositId(depositRef, event.workflowId), type: 'REVIEW_DEPOSIT', payload: { depositRef, amountUnits } });
  };
  const exchanged = depositRef === data.depositRef; // recorded on the swap when its exchange started
  let to;
  let top = null;
  if (BEFORE_EXCHANGE.has(status)) {
    if (event.type === 'DEPOSIT_DETECTED') to = 'deposit';
    else if (event.type === 'DEPOSIT_REVERSED') {
      const otherPending = Object.entries(deposits).some(
        ([ref, e]) => ref !== depositRef && (e.event === 'DEPOSIT_DETECTED' || e.event === 'DEPOSIT_CONFIRMED'),
      );
      to = otherPending ? 'deposit' : 'reversed';
    } else if (covers(amountUnits, data.expectedUnits)) {
      to = 'exchange';
      top = { depositRef, amountUnits, sequence };
      operations.push({ id: `start-exchange:${event.workflowId}`, type: 'START_EXCHANGE', payload: { depositRef, amountUnits } });
    } else {
      to = 'deposit';
      reviewDeposit();
    }
  } else if (status === 'overdue') {
    to = 'review';
    operations.push({ id: `open-review:${event.workflowId}`, type: 'OPEN_REVIEW', payload: {} });
    if (confirmed) reviewDeposit();
  } else if (status === 'exchange') {
    to = 'exchange';
    if (exchanged) {
      to = 'review';
      top = { sequence };
      operations.push({ id: `open-review:${event.workflowId}`, type: 'OPEN_REVIEW', payload: { depositRef, amountUnits } });
    } else if (confirmed) reviewDeposit();
  } else if (status === 'review') {
    to = 'review';
    if (exchanged) top = { sequence };
    else if (confirmed) reviewDeposit();
  } else {
    throw new Refused('reconcile', `no transition written out for ${event.type} in ${status}`);
  }
  const emitted = operations.filter((op) => op.type === 'REVIEW_DEPOSIT').map(() => 'review-deposit');
  const ops = [...(entry?.operations ?? []), ...emitted];
  const written = { event: event.type, amountUnits, sequence, ...(ops.length > 0 ? { operations: ops } : {}) };
  return { outcome: 'applied', to, record: { ...data, ...top, deposits: { ...deposits, [depositRef]: written } }, operations };
}

/** DEADLINE_PASSED: overdue from waiting (nothing recorded), stale anywhere else. */
function deadlineDecision(status) {
  return status === 'waiting' ? { outcome: 'applied', to: 'overdue', record: null, operations: [] } : { outcome: 'stale' };
}

/** Why the hand-written handler refused an event: `disposition` as idemflow's errors say it (reject, retry, reconcile). */
export class Refused extends Error {
  constructor(disposition, message) {
    super(message);
    this.disposition = disposition;
  }
}

/**
 * One event in the transaction `q(sql, params)` → rows (SELECT) or the count
 * of changed rows: the outcome, or a Refused. A lost compare-and-set throws
 * LostRace; a unique violation is the driver's error (the caller runs the
 * transaction again for both).
 */
export async function handWritten(q, sql, event, now) {
  const fingerprint = fingerprintOf(event);
  const [stored] = await q(sql.receipt, [event.eventId]);
  if (stored) {
    if (stored.fingerprint !== fingerprint) throw new Refused('reconcile', 'event id reused with another payload');
    if (stored.result !== null) JSON.parse(stored.result); // what the first delivery produced, answered to the caller
    return 'duplicate-delivery';
  }
  const [workflow] = await q(sql.workflow, [event.workflowId]);
  if (!workflow) throw new Refused('retry', 'unknown workflow');
  const data = typeof workflow.data === 'string' ? JSON.parse(workflow.data) : (workflow.data ?? {});
  if (!TYPES.has(event.type)) throw new Refused('reconcile', `no transition written out for ${event.type}`);
  const decision = event.type === 'DEADLINE_PASSED' ? deadlineDecision(workflow.status) : depositDecision(event, workflow.status, data);
  const revision = Number(workflow.revision);
  const isApplied = decision.outcome === 'applied';
  const result = isApplied
    ? { operationIds: decision.operations.map((op) => op.id), status: decision.to, revision: revision + 1 }
    : { operationIds: [], status: null, revision: null };
  await q(sql.insertReceipt, [
    event.eventId,
    fingerprint,
    event.workflowId,
    event.type,
    decision.outcome,
    'deposit-swap',
    3,
    RULES_HASH,
    now,
    JSON.stringify(result),
  ]);
  if (!isApplied) return decision.outcome;
  const changed = decision.record
    ? await q(sql.updateRecording, [
        decision.to,
        revision + 1,
        JSON.stringify(decision.record),
        now,
        event.workflowId,
        workflow.status,
        revision,
      ])
    : await q(sql.update, [decision.to, revision + 1, now, event.workflowId, workflow.status, revision]);
  if (changed !== 1) throw new LostRace('lost the compare-and-set');
  for (const op of decision.operations) {
    await q(sql.insertOperation, [
      op.id,
      op.type,
      event.workflowId,
      event.eventId,
      JSON.stringify(op.payload),
      'pending',
      0,
      now,
      null,
      null,
      0,
      null,
      now,
      now,
      null,
      null,
    ]);
  }
  return 'applied';
}

/** Another transaction changed the workflow between the read and the compare-and-set. */
export class LostRace extends Error {}

/** The statements of handWritten over `tables`, `mark(i)` writing the i-th placeholder. */
export function statements(tables, mark) {
  const m = (n, from = 1) => Array.from({ length: n }, (_, i) => mark(i + from)).join(', ');
  return {
    receipt: `SELECT event_id, fingerprint, outcome, recorded_at, result FROM ${tables.inbox} WHERE event_id = ${mark(1)}`,
    workflow: `SELECT id, status, revision, data FROM ${tables.workflows} WHERE id = ${mark(1)}`,
    insertReceipt: `INSERT INTO ${tables.inbox} (event_id, fingerprint, workflow_id, event_type, outcome, rule_set_id, rule_set_version,
      rule_set_hash, recorded_at, result) VALUES (${m(10)})`,
    update: `UPDATE ${tables.workflows} SET status = ${mark(1)}, revision = ${mark(2)}, updated_at = ${mark(3)}
      WHERE id = ${mark(4)} AND status = ${mark(5)} AND revision = ${mark(6)}`,
    updateRecording: `UPDATE ${tables.workflows} SET status = ${mark(1)}, revision = ${mark(2)}, data = ${mark(3)}, updated_at = ${mark(4)}
      WHERE id = ${mark(5)} AND status = ${mark(6)} AND revision = ${mark(7)}`,
    insertOperation: `INSERT INTO ${tables.outbox} (id, type, workflow_id, event_id, payload, status, attempts, next_attempt_at,
      lease_owner, lease_expires_at, fencing_token, last_error, created_at, updated_at, metadata, trace_context) VALUES (${m(16)})`,
  };
}

/** The placeholder style of each server store kind. */
export const MARKS = { pg: (i) => `$${i}`, mysql: () => '?' };

/** `transaction(work)` where work gets q(sql, params) → rows (SELECT) or changed-row count. */
export function sqliteTransactions(db) {
  const cache = new Map();
  const prepared = (sql) => cache.get(sql) ?? cache.set(sql, db.prepare(sql)).get(sql);
  const q = async (sql, params) =>
    sql.trimStart().startsWith('SELECT') ? [prepared(sql).get(...params)].filter(Boolean) : Number(prepared(sql).run(...params).changes);
  return async (work) => {
    db.exec('BEGIN IMMEDIATE');
    try {
      const result = await work(q);
      db.exec('COMMIT');
      return result;
    } catch (error) {
      db.exec('ROLLBACK');
      throw error;
    }
  };
}

/**
 * `transaction(work, timing)` on a session of its own from a pool: `connect()`
 * hands one out (with release()), `run(session, sql, params)` runs a
 * statement as work's q does. `timing.ms`, when given, gets the time from
 * BEGIN to the end of COMMIT or ROLLBACK (the wait for a pooled connection
 * left out).
 */
function pooledTransactions({ connect, begin, run }) {
  return async (work, timing) => {
    const session = await connect();
    const started = performance.now();
    const q = (sql, params) => run(session, sql, params);
    try {
      await q(begin, []);
      const result = await work(q);
      await q('COMMIT', []);
      return result;
    } catch (error) {
      await q('ROLLBACK', []);
      throw error;
    } finally {
      if (timing) timing.ms = performance.now() - started;
      session.release();
    }
  };
}

export const pgTransactions = (pool) =>
  pooledTransactions({
    connect: () => pool.connect(),
    begin: 'BEGIN',
    run: async (client, sql, params) => {
      const result = await client.query(sql, params);
      return result.command === 'SELECT' ? result.rows : result.rowCount;
    },
  });

export const mysqlTransactions = (pool) =>
  pooledTransactions({
    connect: () => pool.getConnection(),
    begin: 'START TRANSACTION',
    run: async (connection, sql, params) => {
      const [result] = await connection.query(sql, params);
      return Array.isArray(result) ? result : result.affectedRows;
    },
  });

export function pgliteTransactions(db) {
  return (work) =>
    db.transaction((tx) =>
      work(async (sql, params) => {
        const result = await tx.query(sql, params);
        return sql.trimStart().startsWith('SELECT') ? result.rows : result.affectedRows;
      }),
    );
}

/**
 * The commit a careful person writes for Redis: the receipt set only where
 * absent (SET NX's check), the workflow compare-and-set on (status,
 * revision), the operations where absent, with the indexes their consumer
 * and retention read (due times, ids per status, counts), in one Lua
 * script that checks before it writes. KEYS: receipt, workflow, operations.
 */
const REDIS_COMMIT = `#!lua
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local p = cjson.decode(ARGV[1])
local changes = p.w ~= cjson.null
if changes then
  local now = redis.call('HMGET', KEYS[2], 'status', 'revision')
  if now[1] ~= p.e[1] or now[2] ~= p.e[2] then return -1 end
end
for i = 1, #p.o do
  if redis.call('EXISTS', KEYS[2 + i]) == 1 then return 0 end
end
redis.call('HSET', KEYS[1], unpack(p.r))
redis.call('ZADD', p.inbox .. ':i:at', p.now, p.id)
if changes then redis.call('HSET', KEYS[2], unpack(p.w)) end
for i, op in ipairs(p.o) do
  redis.call('HSET', KEYS[2 + i], unpack(op.f))
  redis.call('ZADD', p.outbox .. ':i:due', p.now, op.id)
  redis.call('ZADD', p.outbox .. ':i:ids', 0, op.id)
  redis.call('ZADD', p.outbox .. ':i:s:pending', 0, op.id)
  redis.call('ZADD', p.outbox .. ':i:u:pending', p.now, op.id)
  redis.call('HINCRBY', p.outbox .. ':i:counts', 'pending' .. string.char(0) .. op.type, 1)
end
return 1
`;
const REDIS_COMMIT_SHA = createHash('sha1').update(REDIS_COMMIT).digest('hex');

/** The statement names of handWritten for redisTransactions (no SQL: each name is what the transaction does). */
export const REDIS_STATEMENTS = Object.freeze(
  Object.fromEntries(['receipt', 'workflow', 'insertReceipt', 'update', 'updateRecording', 'insertOperation'].map((name) => [name, name])),
);

/** [field, value, ...] of the non-null values. */
const flat = (record) =>
  Object.entries(record).flatMap(([field, value]) => (value === null || value === undefined ? [] : [field, String(value)]));

/**
 * `transaction(work)` on Redis over a node-redis `client` and the tables
 * idemflow's RedisStore names (`<table>:r:<id>` hashes): work's q reads at
 * once (HGETALL), queues the writes and the script above commits them; a
 * failed check is a LostRace (the caller runs the transaction again).
 */
export function redisTransactions(client, tables) {
  const key = (table, id) => `${tables[table]}:r:${id}`;
  return async (work) => {
    const plan = { r: null, w: null, e: null, o: [], now: 0, id: null, inbox: tables.inbox, outbox: tables.outbox };
    const keys = [];
    const q = async (name, params) => {
      switch (name) {
        case 'receipt':
        case 'workflow': {
          const row = await client.hGetAll(key(name === 'receipt' ? 'inbox' : 'workflows', params[0]));
          if (Object.keys(row).length === 0) return [];
          return [{ ...row, result: row.result ?? null }];
        }
        case 'insertReceipt': {
          const [eventId, fingerprint, workflowId, eventType, outcome, ruleSetId, ruleSetVersion, ruleSetHash, recordedAt, result] = params;
          plan.r = flat({
            eventId,
            fingerprint,
            workflowId,
            eventType,
            outcome,
            ruleSetId,
            ruleSetVersion,
            ruleSetHash,
            recordedAt,
            result,
          });
          plan.id = eventId;
          plan.now = String(recordedAt); // text: Lua would print a number in 14 digits
          keys[0] = key('inbox', eventId);
          return 1;
        }
        case 'update':
        case 'updateRecording': {
          const [status, revision, ...rest] = params;
          const [data, updatedAt, id, expectStatus, expectRevision] = name === 'update' ? [null, ...rest] : rest;
          plan.w = flat({ status, revision, data, updatedAt });
          plan.e = [expectStatus, String(expectRevision)];
          keys[1] = key('workflows', id);
          return 1;
        }
        case 'insertOperation': {
          const [id, type, workflowId, eventId, payload, status, attempts, nextAttemptAt, , , fencingToken, , createdAt, updatedAt] =
            params;
          plan.o.push({
            id,
            type,
            f: flat({ id, type, workflowId, eventId, payload, status, attempts, nextAttemptAt, fencingToken, createdAt, updatedAt }),
          });
          keys.push(key('outbox', id));
          return 1;
        }
        default:
          throw new Error(`no Redis statement ${name}`);
      }
    };
    const result = await work(q);
    if (plan.r === null) return result;
    keys[1] ??= key('workflows', '-');
    const args = [String(keys.length), ...keys, JSON.stringify(plan)];
    let answer;
    try {
      answer = await client.sendCommand(['EVALSHA', REDIS_COMMIT_SHA, ...args]);
    } catch (error) {
      if (!String(error?.message).startsWith('NOSCRIPT')) throw error;
      answer = await client.sendCommand(['EVAL', REDIS_COMMIT, ...args]);
    }
    if (Number(answer) !== 1) throw new LostRace(Number(answer) === 0 ? 'the receipt or an operation exists' : 'lost the compare-and-set');
    return result;
  };
}

/** The transactions of a server store kind over its pool (helper.store.client of workers/backends.mjs). */
export const TRANSACTIONS = { pg: pgTransactions, mysql: mysqlTransactions };

/** Why the database aborted a hand-written transaction, or null: the worker runs it again for these. */
export function raceOf(error) {
  if (error instanceof LostRace) return 'workflow-changed';
  const code = error?.code;
  const errno = error?.errno;
  if (code === '23505' || errno === 1062) return 'receipt-exists';
  if (code === '40P01' || errno === 1213) return 'deadlock';
  if (code === '40001') return 'serialization-failure';
  if (errno === 1205 || code === '55P03') return 'lock-timeout';
  return null;
}

/**
 * One event through the hand-written handler as a worker runs it: again
 * after a lost race (up to `retries` times), `onRace(reason)` told of each.
 * Resolves `{ outcome }` or `{ refused: disposition }` (a race still lost
 * after the retries is a retry), with `ms`: the time its transactions took
 * (`transaction(work, timing)` as pgTransactions and mysqlTransactions time it).
 */
export async function handWrittenDelivery(transaction, sql, event, { retries = 4, onRace = () => {} } = {}) {
  let ms = 0;
  for (let attempt = 0; ; attempt += 1) {
    const timing = { ms: 0 };
    try {
      const outcome = await transaction((q) => handWritten(q, sql, event, Date.now()), timing);
      return { outcome, ms: ms + timing.ms };
    } catch (error) {
      ms += timing.ms;
      if (error instanceof Refused) return { refused: error.disposition, message: error.message, ms };
      const race = raceOf(error);
      if (race === null) throw error;
      onRace(race);
      if (attempt >= retries) return { refused: 'retry', message: `lost ${attempt + 1} races (${race})`, ms };
    }
  }
}

/** The event a message body carries, or null when it is none (the hand-written worker dead-letters it). */
export function eventOfBody(body) {
  let event;
  try {
    if (body.length > 64 * 1024) return null;
    event = JSON.parse(typeof body === 'string' ? body : new TextDecoder('utf-8', { fatal: true }).decode(body));
  } catch {
    return null;
  }
  if (
    event === null ||
    typeof event !== 'object' ||
    typeof event.eventId !== 'string' ||
    typeof event.workflowId !== 'string' ||
    !TYPES.has(event.type)
  )
    return null;
  for (const field of ['depositRef', 'amountUnits']) if (event[field] !== undefined && typeof event[field] !== 'string') return null;
  if (event.type !== 'DEADLINE_PASSED' && (typeof event.depositRef !== 'string' || !/^[0-9]+$/.test(event.amountUnits ?? ''))) return null;
  if (NUMBERED_TYPES.has(event.type) && (!Number.isSafeInteger(event.sequence) || event.sequence < 1)) return null;
  return event;
}
