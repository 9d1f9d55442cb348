'use strict';
// One transaction of a SQL store, over `execute(statement, onUnique)`: it runs
// a statement on the transaction's connection and returns (or resolves)
// `{ rows, count }`, count being the rows a write changed; `onUnique(cause)`
// is what a unique-key violation becomes. `execute` may be synchronous
// (SQLite) or asynchronous (the server databases).

const { StoreTransaction } = require('../store/transaction.cjs');
const { mapDriverError, operationExists, receiptExists, workflowChanged } = require('../store/errors.cjs');
const { decidedOperationToStore, decidedReceiptToStore, decidedWorkflowPatch, decisionReceiptFromStore } = require('../store/records.cjs');
const { orUnreadable } = require('../host/contract.cjs');
const { recordOf } = require('./columns.cjs');
const { isPromise, step } = require('../core/step.cjs');
const { ClientGuard } = require('./client-guard.cjs');

/** Rows per multi-row statement: within every dialect's limit on bound values. */
const CHUNK = 500;

function chunks(items) {
  const out = [];
  for (let i = 0; i < items.length; i += CHUNK) out.push(items.slice(i, i + CHUNK));
  return out;
}

/** A savepoint's name in SQL (the same words in every dialect): idemflow's own names, a word each. */
function savepointName(name) {
  if (!/^[a-z_]{1,32}$/.test(name)) throw new Error(`idemflow: savepoint name ${name}`); // a bug, never an input
  return `idemflow_${name}`;
}

/** A key that exists already: the insert reports false instead of failing. */
class KeyExists extends Error {}
const keyExists = (cause) => new KeyExists('key exists', { cause });

class SqlTransaction extends StoreTransaction {
  #execute;
  #raw;
  /** The guarded handle and its guard, made when the host first asks for `client`. */
  #client = null;
  #guard = null;

  /**
   * @param {import('./store.cjs').SqlStore} store
   * @param {(statement: object, onUnique?: (cause: unknown) => Error) => ({ rows: object[], count: number } | Promise<{ rows: object[], count: number }>)} execute
   * @param {object} raw the driver's own handle of the transaction's connection (behind `tx.client`)
   */
  constructor(store, execute, raw) {
    super(store);
    this.#execute = execute;
    this.#raw = raw;
  }

  /**
   * The driver's own handle of this transaction's connection, guarded
   * (sql/client-guard.cjs): the host's statements on it commit or roll back
   * with idemflow's, its transaction control becomes savepoints or is refused.
   */
  get client() {
    if (this.#client === null) {
      this.#guard = new ClientGuard(this._store._statements.dialect.name);
      this.#client = this._guardClient(this.#raw, this.#guard);
    }
    return this.#client;
  }

  /** @internal the adapter's guarded handle over `raw` (sql/client-guard.cjs) */
  _guardClient(_raw, _guard) {
    throw new Error('idemflow: a SQL transaction without a guarded client'); // a bug, never an input
  }

  /**
   * What the callback that just ended did wrong through `client`, or null: a
   * refused statement; a transaction of its own left open, unless it threw.
   */
  endHostWork(threw = false, eventId = undefined) {
    return this.#guard === null ? null : this.#guard.settle(threw, eventId);
  }

  /**
   * @internal Before the adapter's COMMIT: a misuse of `client` not yet
   * answered fails the transaction, and when the host used `client` the
   * adapter checks (`_checkOwn`) that the transaction is still open and
   * idemflow's, for what went past the guard. Synchronous when the check is (SQLite).
   */
  _beforeCommit() {
    if (this.#guard === null) return undefined;
    const misuse = this.#guard.settle();
    if (misuse !== null) throw misuse;
    return this._checkOwn();
  }

  /** @internal whether the host asked for `client` in this transaction */
  get _clientUsed() {
    return this.#guard !== null;
  }

  /** @internal the adapter's check that its transaction is open and its own (throws client-guard's transactionEnded()) */
  _checkOwn() {
    return undefined;
  }

  /** @internal idemflow's transaction ended: a statement sent later through `client` is refused */
  _end() {
    this.#guard?.close();
  }

  get savepoints() {
    return true;
  }

  /**
   * The dialect's classification of a driver error (dialect.fromDriver says
   * which errors are its driver's), found as thrown or inside the error a
   * tool wrapped it in: its `cause` (Drizzle's DrizzleQueryError, an
   * error of the host's own) or its `driverError` (TypeORM's
   * QueryFailedError), a few levels deep.
   */
  driverErrorOf(thrown) {
    const { dialect } = this._store._statements;
    let error = thrown;
    for (let depth = 0; depth < 4 && error !== null && typeof error === 'object'; depth += 1) {
      if (dialect.fromDriver(error)) return mapDriverError(error, dialect.classify);
      error = error.driverError ?? error.cause ?? null;
    }
    return null;
  }

  // _read, _insert and _updateWorkflow answer synchronously when `execute`
  // does (SQLite), with a promise otherwise (core/step.cjs).

  _read(table, key) {
    return step(this.#execute(this._store._statements.read(table, key)), ({ rows }) => recordOf(table, rows[0]));
  }

  _insert(table, record) {
    const absent = (error) => {
      if (error instanceof KeyExists) return false;
      throw error;
    };
    let done;
    try {
      done = this.#execute(this._store._statements.insert(table, record), keyExists);
    } catch (error) {
      return absent(error);
    }
    return isPromise(done) ? done.then(({ count }) => count === 1, absent) : done.count === 1;
  }

  /**
   * key → stored record of `table` for the keys that exist, in statements of
   * CHUNK keys (`lock`: see SqlStatements.readMany). A record that cannot be
   * read is an Unreadable holding its INVALID_RECORD: it fails the events
   * that need it, not the batch.
   */
  async #readMany(table, keys, read, lock) {
    const found = new Map();
    const key = table === 'decision' ? 'eventId' : 'id';
    for (const part of chunks(keys)) {
      for (const row of (await this.#execute(this._store._statements.readMany(table, part, { lock }))).rows) {
        const record = recordOf(table, row);
        found.set(
          record[key],
          orUnreadable(() => read(record)),
        );
      }
    }
    return found;
  }

  /** Only the columns a decision reads (processEvent); synchronously when `execute` is. */
  getReceiptToDecide(eventId) {
    return step(this.#execute(this._store._statements.read('decision', eventId)), ({ rows }) =>
      decisionReceiptFromStore(recordOf('decision', rows[0])),
    );
  }

  /** What a decision needs of the receipts stored for these event ids, as getReceiptToDecide reads one (processBatch). */
  getReceipts(eventIds) {
    return this.#readMany('decision', eventIds, decisionReceiptFromStore, false);
  }

  /**
   * The workflows with these ids, read as getWorkflow reads one
   * (processBatch); `lock`: each locked until the transaction ends, taken in
   * id order where the database has row locks.
   */
  getWorkflows(ids, { lock = false } = {}) {
    return this.#readMany('workflows', ids, (record) => this._store._workflowOf(record), lock);
  }

  /** Marks a point the transaction can go back to (processBatch: before its writes; before each onApplied). */
  async savepoint(name) {
    await this.#execute({ sql: `SAVEPOINT ${savepointName(name)}`, values: [], returnsRows: false });
  }

  /** Undoes what was written since savepoint(name); the savepoint stays, and the transaction goes on. */
  async rollbackToSavepoint(name) {
    await this.#execute({ sql: `ROLLBACK TO SAVEPOINT ${savepointName(name)}`, values: [], returnsRows: false });
  }

  /** Forgets savepoint(name), keeping what was written since. */
  async releaseSavepoint(name) {
    await this.#execute({ sql: `RELEASE SAVEPOINT ${savepointName(name)}`, values: [], returnsRows: false });
  }

  /** How many of `records` one multi-row insert per chunk stored; a unique violation stores none of its chunk. */
  async #insertMany(table, records) {
    let stored = 0;
    for (const part of chunks(records)) {
      try {
        stored += (await this.#execute(this._store._statements.insertMany(table, part), keyExists)).count;
      } catch (error) {
        if (!(error instanceof KeyExists)) throw error;
      }
    }
    return stored;
  }

  /**
   * The writes of many decisions (processBatch), in the order every
   * transaction of idemflow takes its locks: the workflows, then the
   * receipts, then the operations, each sorted by key (processBatch sorts
   * them), so that two batches over overlapping keys queue rather than
   * deadlock. The receipts and the operations go in multi-row inserts; the
   * workflows, each written whole (its `set` holds every recorded field,
   * null for those removed), in one compare-and-set statement per chunk
   * where the dialect has one (`updateWorkflows`), else one each. A
   * receipt that exists already is a lost race (CONCURRENT_UPDATE); an
   * operation that does is OUTBOX_CONFLICT, whose event the batch finds by
   * running its events one by one, unless it is written only if absent (an
   * untracked fact's: one insert each, so an existing one skips only itself).
   */
  async commitBatch({ receipts, workflows, operations, now = this._store.now() }) {
    // The core made these writes (processBatch): stored without checking them again.
    await this.#writeWorkflows(workflows, now);
    if (
      receipts.length > 0 &&
      (await this.#insertMany(
        'inbox',
        receipts.map((r) => decidedReceiptToStore(r, now)),
      )) !== receipts.length
    ) {
      throw receiptExists(receipts[0]);
    }
    const required = operations.filter((op) => op.ifAbsent !== true);
    if (
      required.length > 0 &&
      (await this.#insertMany(
        'outbox',
        required.map((op) => decidedOperationToStore(op, now)),
      )) !== required.length
    ) {
      throw operationExists(required[0]);
    }
    if (required.length < operations.length) {
      for (const op of operations) if (op.ifAbsent === true) await this._insertIfAbsent(decidedOperationToStore(op, now));
    }
  }

  /** Workflows written whole: new ones one by one, changed ones in one compare-and-set per chunk. */
  async #writeWorkflows(writes, now) {
    const changed = [];
    for (const write of writes) {
      if (write.expect === null || !this._store._statements.dialect.updateWorkflows) await this.writeWorkflow(write);
      else changed.push({ write, change: decidedWorkflowPatch(write) });
    }
    for (const part of chunks(changed)) {
      const rows = part.map(({ change }) => ({ ...change, data: JSON.stringify(change.kept), now }));
      const { count } = await this.#execute(this._store._statements.updateWorkflows(rows));
      if (count !== part.length) throw workflowChanged(part[0].write);
    }
  }

  /** @internal one raw statement inside this transaction: `{ rows, count }` (tests reach the session with it) */
  _execute(sql, values = []) {
    return this.#execute({ sql, values, returnsRows: true });
  }

  /** @internal tx.putWorkflow: insert or replace, in this transaction */
  async _putWorkflow(record, now) {
    await this.#execute(this._store._statements.putWorkflow(record, now));
  }

  _updateWorkflow(change) {
    return step(this.#execute(this._store._statements.updateWorkflow(change)), ({ count }) => count === 1);
  }
}

module.exports = { SqlTransaction };
