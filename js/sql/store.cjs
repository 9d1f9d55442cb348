'use strict';
// What every SQL store shares beyond StoreBase: its statements, built once
// from the adapter's dialect, and the reads and outbox writes that run as one
// statement outside a transaction. An adapter implements
// `_execute(statement)` (one statement under the store's bounds, resolving
// `{ rows, count }`), `_claimRows(request)` (its claim statement, returning
// outbox rows) and `transaction(fn)` (handing fn a SqlTransaction).

const { StoreBase } = require('../store/base.cjs');
const { resolveTables } = require('../store/options.cjs');
const { recordOf } = require('./columns.cjs');
const { SqlStatements } = require('./statements.cjs');

class SqlStore extends StoreBase {
  /**
   * @param {object} dialect the adapter's dialect (adapters/<name>/dialect.cjs)
   * @param {object} options the store's options: `tables` here, `now` and `raceRetries` resolved for StoreBase
   */
  constructor(dialect, options) {
    super(options);
    /** The three table names, as given (or the defaults). */
    this.tables = resolveTables(options.tables);
    /** @internal */
    this._statements = new SqlStatements(dialect, this.tables);
  }

  async _read(table, key) {
    return recordOf(table, (await this._execute(this._statements.read(table, key))).rows[0]);
  }

  async _putWorkflow(record) {
    await this._execute(this._statements.putWorkflow(record, this.now()));
  }

  async _claim(request) {
    return (await this._claimRows(request)).map((row) => recordOf('outbox', row));
  }

  async _update(change) {
    return (await this._execute(this._statements.update(change))).count === 1;
  }

  async _list(request) {
    return (await this._execute(this._statements.list(request))).rows.map((row) => recordOf('outbox', row));
  }

  async _stats(request) {
    const counts = (await this._execute(this._statements.countByTypeAndStatus())).rows.map((row) => ({
      type: row.type,
      status: row.status,
      count: row.n,
    }));
    const [row] = (await this._execute(this._statements.oldestDue(request))).rows;
    return { counts, oldestDueAt: row?.due_since ?? null };
  }

  async _purgeBatch(target, request) {
    return (await this._execute(this._statements.purgeBatch(target, request))).count;
  }
}

module.exports = { SqlStore };
