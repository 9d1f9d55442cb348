// The handler a careful person writes by hand, without idemflow: the cost
// floor the benchmarks compare idemflow with. One transaction per event over
// idemflow's own tables (the same columns read and written): read the
// receipt (a duplicate answers what its first delivery produced), read the
// workflow, pick the transition, insert the receipt, compare-and-set the
// workflow on (status, revision), insert the outbox operation.
// bench/adapters.mjs runs it on one connection; bench/production.mjs in
// worker processes (workers/lane.mjs, workers/hand-broker-worker.mjs).
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

/** The fields a transition records: the whole deposit, or the newer observation's number. */
const DEPOSIT = ['depositRef', 'amountUnits', 'sequence'];
const NUMBER = ['sequence'];
const applied = (to, { record = [], emit = null } = {}) => ({ outcome: 'applied', to, record, emit });
const kept = (outcome) => ({ outcome, record: [] });
/**
 * A guarded, numbered transition: the event's deposit must be the one
 * recorded; an observation newer than the one recorded (a workflow that
 * recorded no number compares as 0) takes `newer`, a re-published or older
 * one ends as `otherwise`.
 */
const numbered = (newer, otherwise) => ({ guard: true, newer, otherwise: kept(otherwise) });
const START_EXCHANGE = { type: 'START_EXCHANGE', prefix: 'start-exchange', payload: ['depositRef', 'amountUnits'] };
const OPEN_REVIEW = { type: 'OPEN_REVIEW', prefix: 'open-review', payload: ['depositRef', 'amountUnits', 'sequence'] };

/**
 * The deposit-swap v3 transitions the benchmarks' traffic takes, written out
 * by hand as such a worker would (type → status → what happens). Anything
 * else is refused.
 */
const TRANSITIONS = {
  DEPOSIT_DETECTED: {
    waiting: applied('deposit', { record: DEPOSIT }),
    overdue: applied('review', { record: DEPOSIT, emit: OPEN_REVIEW }),
    deposit: numbered(applied('deposit', { record: NUMBER }), 'already-applied'),
    exchange: numbered(applied('review', { record: NUMBER, emit: OPEN_REVIEW }), 'already-applied'),
    reversed: numbered(applied('deposit', { record: NUMBER }), 'stale'),
    review: numbered(applied('review', { record: NUMBER }), 'stale'),
  },
  DEPOSIT_CONFIRMED: {
    waiting: applied('exchange', { record: DEPOSIT, emit: START_EXCHANGE }),
    overdue: applied('review', { record: DEPOSIT, emit: OPEN_REVIEW }),
    deposit: numbered(applied('exchange', { record: NUMBER, emit: START_EXCHANGE }), 'stale'),
    exchange: numbered(applied('review', { record: NUMBER, emit: OPEN_REVIEW }), 'already-applied'),
    reversed: numbered(applied('exchange', { record: NUMBER, emit: START_EXCHANGE }), 'stale'),
    review: numbered(applied('review', { record: NUMBER }), 'stale'),
  },
  DEPOSIT_REVERSED: {
    waiting: applied('reversed', { record: DEPOSIT }),
    overdue: applied('review', { record: DEPOSIT, emit: OPEN_REVIEW }),
    deposit: numbered(applied('reversed', { record: NUMBER }), 'stale'),
    exchange: numbered(applied('review', { record: NUMBER, emit: OPEN_REVIEW }), 'stale'),
    reversed: numbered(applied('reversed', { record: NUMBER }), 'already-applied'),
    review: numbered(applied('review', { record: NUMBER }), 'stale'),
  },
  DEADLINE_PASSED: {
    waiting: applied('overdue'),
    ...Object.fromEntries(['deposit', 'exchange', 'overdue', 'reversed', 'review'].map((status) => [status, kept('stale')])),
  },
};

/** The types whose events carry the watcher's number (a safe integer of at least 1). */
const NUMBERED_TYPES = new Set(['DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED', 'DEPOSIT_REVERSED']);

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
  const data = typeof workflow.data === 'string' ? JSON.parse(workflow.data) : workflow.data;
  let rule = TRANSITIONS[event.type]?.[workflow.status];
  if (!rule) throw new Refused('reconcile', `no transition for ${event.type} in ${workflow.status}`);
  if (rule.guard) {
    if (data.depositRef !== event.depositRef || data.amountUnits !== event.amountUnits) throw new Refused('reconcile', 'another deposit');
    rule = event.sequence > (data.sequence ?? 0) ? rule.newer : rule.otherwise;
  }
  const revision = Number(workflow.revision);
  const operationIds = rule.emit ? [`${rule.emit.prefix}:${event.workflowId}`] : [];
  const isApplied = rule.outcome === 'applied';
  const result = isApplied ? { operationIds, status: rule.to, revision: revision + 1 } : { operationIds: [], status: null, revision: null };
  await q(sql.insertReceipt, [event.eventId, fingerprint, event.workflowId, event.type, rule.outcome,
    'deposit-swap', 3, RULES_HASH, now, JSON.stringify(result)]);
  if (!isApplied) return rule.outcome;
  const recorded = Object.fromEntries(rule.record.map((field) => [field, event[field]]));
  const changed = rule.record.length > 0
    ? await q(sql.updateRecording, [rule.to, revision + 1, JSON.stringify({ ...data, ...recorded }), now, event.workflowId, workflow.status, revision])
    : await q(sql.update, [rule.to, revision + 1, now, event.workflowId, workflow.status, revision]);
  if (changed !== 1) throw new LostRace('lost the compare-and-set');
  for (const id of operationIds) {
    const payload = Object.fromEntries(rule.emit.payload.map((field) => [field, event[field]]));
    await q(sql.insertOperation, [id, rule.emit.type, event.workflowId, event.eventId,
      JSON.stringify(payload), 'pending', 0, now, null, null, 0, null, now, now, null, null]);
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
  const q = async (sql, params) => (sql.trimStart().startsWith('SELECT') ? [prepared(sql).get(...params)].filter(Boolean)
    : Number(prepared(sql).run(...params).changes));
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

export const pgTransactions = (pool) => pooledTransactions({
  connect: () => pool.connect(),
  begin: 'BEGIN',
  run: async (client, sql, params) => {
    const result = await client.query(sql, params);
    return result.command === 'SELECT' ? result.rows : result.rowCount;
  },
});

export const mysqlTransactions = (pool) => pooledTransactions({
  connect: () => pool.getConnection(),
  begin: 'START TRANSACTION',
  run: async (connection, sql, params) => {
    const [result] = await connection.query(sql, params);
    return Array.isArray(result) ? result : result.affectedRows;
  },
});

export function pgliteTransactions(db) {
  return (work) => db.transaction((tx) => work(async (sql, params) => {
    const result = await tx.query(sql, params);
    return sql.trimStart().startsWith('SELECT') ? result.rows : result.affectedRows;
  }));
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
  if (event === null || typeof event !== 'object' || typeof event.eventId !== 'string' || typeof event.workflowId !== 'string' || !TRANSITIONS[event.type]) return null;
  for (const field of ['depositRef', 'amountUnits']) if (event[field] !== undefined && typeof event[field] !== 'string') return null;
  if (event.type !== 'DEADLINE_PASSED' && (typeof event.depositRef !== 'string' || !/^[0-9]+$/.test(event.amountUnits ?? ''))) return null;
  if (NUMBERED_TYPES.has(event.type) && (!Number.isSafeInteger(event.sequence) || event.sequence < 1)) return null;
  return event;
}
