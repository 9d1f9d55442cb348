'use strict';
// One transaction of a SQL store, over `execute(statement, onUnique)`: it runs
// a statement on the transaction's connection and returns (or resolves)
// `{ rows, count }`, count being the rows a write changed; `onUnique(cause)`
// is what a unique-key violation becomes. `execute` may be synchronous
// (SQLite) or asynchronous (the server databases).

const { StoreTransaction } = require('../store/base.cjs');
const { recordOf } = require('./columns.cjs');

/** A key that exists already: the insert reports false instead of failing. */
class KeyExists extends Error {}
const keyExists = (cause) => new KeyExists('key exists', { cause });

class SqlTransaction extends StoreTransaction {
  #execute;

  /**
   * @param {import('./store.cjs').SqlStore} store
   * @param {(statement: object, onUnique?: (cause: unknown) => Error) => ({ rows: object[], count: number } | Promise<{ rows: object[], count: number }>)} execute
   */
  constructor(store, execute) {
    super(store);
    this.#execute = execute;
  }

  async _read(table, key) {
    return recordOf(table, (await this.#execute(this._store._statements.read(table, key))).rows[0]);
  }

  async _insert(table, record) {
    try {
      return (await this.#execute(this._store._statements.insert(table, record), keyExists)).count === 1;
    } catch (error) {
      if (error instanceof KeyExists) return false;
      throw error;
    }
  }

  /** @internal one raw statement inside this transaction: `{ rows, count }` (tests reach the session with it) */
  _execute(sql, values = []) {
    return this.#execute({ sql, values, returnsRows: true });
  }

  async _updateWorkflow(change) {
    return (await this.#execute(this._store._statements.updateWorkflow(change))).count === 1;
  }
}

module.exports = { SqlTransaction };
