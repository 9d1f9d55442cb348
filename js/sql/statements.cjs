'use strict';
// Every statement of a SQL store, built once from a dialect
// (adapters/<name>/dialect.cjs) and the store's table names. A statement is
// `{ sql, values, returnsRows }`; the dialect says only what differs between
// databases: quoting, placeholders, insert-if-absent, upsert, the merge of
// recorded fields, and the purge's form.

const { TABLES, columnList, columnOf, valuesOf } = require('./columns.cjs');
const { DEFINITIONS } = require('./schema.cjs');

const KEYS = Object.freeze({ workflows: 'id', inbox: 'event_id', outbox: 'id' });
// What a read may name besides the tables: the inbox as a decision reads it (sql/columns.cjs).
const VIEWS = Object.freeze({ decision: 'inbox' });
const sourceOf = (table) => VIEWS[table] ?? table;

class SqlStatements {
  /** `a, b, c` of `table`'s columns (see sql/columns.cjs), for a dialect's own statements. */
  columns(table, options) {
    return columnList(table, options);
  }

  /**
   * @param {object} dialect see adapters/postgres/dialect.cjs for the members
   * @param {{ workflows: string, inbox: string, outbox: string }} tables
   */
  constructor(dialect, tables) {
    this.dialect = dialect;
    this.tables = tables;
    /** Each table's quoted name. */
    this.quoted = Object.freeze({
      workflows: dialect.quote(tables.workflows),
      inbox: dialect.quote(tables.inbox),
      outbox: dialect.quote(tables.outbox),
    });
    const marks = (n) => Array.from({ length: n }, (_, i) => dialect.placeholder(i + 1)).join(', ');
    this.#read = {};
    this.#insert = {};
    for (const table of Object.keys(KEYS)) {
      const name = this.quoted[table];
      this.#insert[table] =
        `INSERT INTO ${name} (${columnList(table)}) VALUES (${marks(TABLES[table].length)})${dialect.insertIfAbsent(KEYS[table])}`;
    }
    for (const table of [...Object.keys(KEYS), ...Object.keys(VIEWS)]) {
      const source = sourceOf(table);
      this.#read[table] =
        `SELECT ${columnList(table, { read: true })} FROM ${this.quoted[source]} WHERE ${KEYS[source]} = ${dialect.placeholder(1)}`;
    }
    this.#updateStatus =
      `UPDATE ${this.quoted.workflows} SET status = ${dialect.placeholder(1)}, revision = ${dialect.placeholder(2)}, ` +
      `updated_at = ${dialect.placeholder(3)} WHERE id = ${dialect.placeholder(4)} AND status = ${dialect.placeholder(5)} AND revision = ${dialect.placeholder(6)}`;
    const updated = TABLES.workflows.map(([column]) => column).filter((column) => column !== 'id' && column !== 'created_at');
    this.#put = `INSERT INTO ${this.quoted.workflows} (${columnList('workflows')}) VALUES (${marks(TABLES.workflows.length)})${dialect.upsert('id', updated)}`;
  }

  #read;
  #insert;
  #put;
  #updateStatus;

  /**
   * `{ sql, values, returnsRows }` from `write(bind)`, where bind(value)
   * returns the value's placeholder.
   */
  statement(write, returnsRows = false) {
    const values = [];
    const bind = (value) => {
      values.push(value);
      return this.dialect.placeholder(values.length);
    };
    return { sql: write(bind), values, returnsRows };
  }

  /** The row of `table` (or of a view of one: `decision`) with this key. */
  read(table, key) {
    return { sql: this.#read[table], values: [key], returnsRows: true };
  }

  /**
   * `$n::type[]` for one array of a column's values, where the dialect binds
   * arrays (`arrayTypes`, PostgreSQL): a batch statement then has one
   * parameter per column whatever its rows, and one text, which the
   * connection prepares once.
   */
  #array(bind, values, table, column) {
    return `${bind(values)}::${this.dialect.arrayTypes[DEFINITIONS[table][column][0]]}[]`;
  }

  /**
   * The rows of `table` with these keys (missing keys have none). `lock`:
   * locked for the rest of the transaction, in key order (the dialect's
   * `lockInOrder`), so that transactions locking overlapping sets of rows
   * take them in the same order and never wait on each other in a cycle.
   */
  readMany(table, keys, { lock = false } = {}) {
    const source = sourceOf(table);
    const key = KEYS[source];
    const suffix = lock && this.dialect.lockInOrder ? this.dialect.lockInOrder(key) : '';
    return this.statement(
      (bind) =>
        `SELECT ${columnList(table, { read: true })} FROM ${this.quoted[source]} WHERE ` +
        `${this.dialect.arrayTypes ? `${key} = ANY(${this.#array(bind, keys, source, key)})` : `${key} IN (${keys.map(bind).join(', ')})`}${suffix}`,
      true,
    );
  }

  /** Inserts records in one statement; keys that exist insert nothing (or fail the statement as a unique violation, by dialect). */
  insertMany(table, records) {
    const ifAbsent = this.dialect.insertIfAbsent(KEYS[table]);
    if (this.dialect.arrayTypes) {
      const columns = TABLES[table].map(() => []);
      for (const record of records) valuesOf(table, record).forEach((value, k) => columns[k].push(value));
      return this.statement(
        (bind) =>
          `INSERT INTO ${this.quoted[table]} (${columnList(table)}) SELECT * FROM unnest(` +
          `${columns.map((values, k) => this.#array(bind, values, table, TABLES[table][k][0])).join(', ')})${ifAbsent}`,
      );
    }
    return this.statement(
      (bind) =>
        `INSERT INTO ${this.quoted[table]} (${columnList(table)}) VALUES ` +
        `${records.map((record) => `(${valuesOf(table, record).map(bind).join(', ')})`).join(', ')}${ifAbsent}`,
    );
  }

  /** Inserts a record; a key that exists inserts nothing (or fails as a unique violation, by dialect). */
  insert(table, record) {
    return { sql: this.#insert[table], values: valuesOf(table, record), returnsRows: false };
  }

  /** Inserts or replaces a workflow {id, status, revision, data} (putWorkflow). */
  putWorkflow(record, now) {
    return { sql: this.#put, values: valuesOf('workflows', { ...record, createdAt: now, updatedAt: now }), returnsRows: false };
  }

  /** The compare-and-set of a workflow (workflowPatch's change, with `now`): status, revision and the merged fields. */
  updateWorkflow(change) {
    // Most transitions change only the status and the revision: the stored fields are then left alone (one text, prepared once).
    const merge = Object.keys(change.patch).length > 0;
    if (!merge) {
      return {
        sql: this.#updateStatus,
        values: [change.status, change.revision, change.now, change.id, change.expect.status, change.expect.revision],
        returnsRows: false,
      };
    }
    return this.statement(
      (bind) =>
        `UPDATE ${this.quoted.workflows} SET status = ${bind(change.status)}, revision = ${bind(change.revision)}, ` +
        `${merge ? `data = ${this.dialect.mergeData(bind, change)}, ` : ''}updated_at = ${bind(change.now)} ` +
        `WHERE id = ${bind(change.id)} AND status = ${bind(change.expect.status)} AND revision = ${bind(change.expect.revision)}`,
    );
  }

  /**
   * The compare-and-set of many workflows written whole, one statement
   * (processBatch): each row `{ id, status, revision, data (JSON text), now,
   * expect: { status, revision } }`; its count is how many matched.
   */
  updateWorkflows(rows) {
    if (this.dialect.arrayTypes) {
      // The dialect gets one array per column: id, status, revision, data, now, expected status, expected revision.
      const columns = [
        ['id', rows.map((row) => row.id)],
        ['status', rows.map((row) => row.status)],
        ['revision', rows.map((row) => row.revision)],
        ['data', rows.map((row) => row.data)],
        ['updated_at', rows.map((row) => row.now)],
        ['status', rows.map((row) => row.expect.status)],
        ['revision', rows.map((row) => row.expect.revision)],
      ];
      return this.statement((bind) =>
        this.dialect.updateWorkflows(
          this.quoted.workflows,
          columns.map(([column, values]) => this.#array(bind, values, 'workflows', column)),
        ),
      );
    }
    return this.statement((bind) =>
      this.dialect.updateWorkflows(
        this.quoted.workflows,
        rows.map((row) => [
          bind(row.id),
          bind(row.status),
          bind(row.revision),
          bind(row.data),
          bind(row.now),
          bind(row.expect.status),
          bind(row.expect.revision),
        ]),
      ),
    );
  }

  // ---- The outbox -----------------------------------------------------------

  /** `type IN (…) AND ` when the claim names its types, else nothing. */
  typeFilter(bind, { types }) {
    return types === null ? '' : `type IN (${types.map(bind).join(', ')}) AND `;
  }

  /** The core's claim condition (and the types filter), for a WHERE (tests/vectors/outbox.json pins it). */
  due(bind, request) {
    const { now } = request;
    return `${this.typeFilter(bind, request)}((status = 'pending' AND next_attempt_at <= ${bind(now)}) OR (status = 'claimed' AND lease_expires_at <= ${bind(now)}))`;
  }

  /** The SET list of a claim. */
  claimSet(bind, { owner, now, leaseExpiresAt }) {
    return (
      `status = 'claimed', lease_owner = ${bind(owner)}, lease_expires_at = ${bind(leaseExpiresAt)}, ` +
      `fencing_token = fencing_token + 1, attempts = attempts + 1, updated_at = ${bind(now)}`
    );
  }

  /** The guarded UPDATE of one operation (store/base.cjs guardedChange); its matched row count is the answer. */
  update(change) {
    return this.statement((bind) => {
      const set = Object.entries(change.set).map(
        ([field, value]) => `${columnOf('outbox', field)} = ${value === null ? 'NULL' : bind(value)}`,
      );
      if (change.giveBackAttempt) set.push('attempts = attempts - 1');
      const where = [`id = ${bind(change.id)}`, `status = ${bind(change.status)}`];
      if (change.fencingToken !== undefined) where.push(`fencing_token = ${bind(change.fencingToken)}`);
      return `UPDATE ${this.quoted.outbox} SET ${set.join(', ')} WHERE ${where.join(' AND ')}`;
    });
  }

  /** The WHERE conditions of a listOperations filter (store/queries.cjs), each bound; an empty list for none. */
  filter(bind, request) {
    const where = [];
    const equal = (column, value) => {
      if (value !== null) where.push(`${column} = ${bind(value)}`);
    };
    equal('status', request.status);
    equal('type', request.type);
    equal('workflow_id', request.workflowId);
    equal('lease_owner', request.leaseOwner);
    if (request.createdBefore !== null) where.push(`created_at < ${bind(request.createdBefore)}`);
    if (request.createdFrom !== null) where.push(`created_at >= ${bind(request.createdFrom)}`);
    // LIKE with '!' as its escape: one spelling every database reads alike (a backslash is not).
    if (request.errorContains !== null)
      where.push(`LOWER(last_error) LIKE ${bind(`%${request.errorContains.replace(/[!%_]/g, '!$&')}%`)} ESCAPE '!'`);
    if (request.afterId !== null && request.afterId !== undefined) where.push(`id > ${bind(request.afterId)}`);
    return where;
  }

  list(request) {
    return this.statement((bind) => {
      const where = this.filter(bind, request);
      return `SELECT ${columnList('outbox')} FROM ${this.quoted.outbox}${where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY id LIMIT ${bind(request.limit)}`;
    }, true);
  }

  /** stats(): the operations counted by type and status, one row per pair (`type`, `status`, `n`). */
  countByTypeAndStatus() {
    return { sql: `SELECT type, status, COUNT(*) AS n FROM ${this.quoted.outbox} GROUP BY type, status`, values: [], returnsRows: true };
  }

  /** stats(): when the oldest due operation became due (`due_since`, NULL when none is), by the claim's own condition. */
  oldestDue(request) {
    return this.statement(
      (bind) =>
        `SELECT MIN(CASE WHEN status = 'pending' THEN next_attempt_at ELSE lease_expires_at END) AS due_since ` +
        `FROM ${this.quoted.outbox} WHERE ${this.due(bind, { ...request, types: null })}`,
      true,
    );
  }

  /** One batch of a purge: at most batchSize rows, oldest first. */
  purgeBatch(target, { olderThan, batchSize, status }) {
    return this.statement((bind) => {
      const [table, key, order, where] =
        target === 'receipts'
          ? [this.quoted.inbox, 'event_id', 'recorded_at', `recorded_at < ${bind(olderThan)}`]
          : [this.quoted.outbox, 'id', 'updated_at', `status = ${bind(status)} AND updated_at < ${bind(olderThan)}`];
      return this.dialect.purgeBatch({ table, key, order, where, limit: bind(batchSize) });
    });
  }
}

module.exports = { SqlStatements };
