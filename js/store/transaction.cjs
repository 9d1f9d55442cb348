'use strict';
// One transaction of a store: the host cycle's contract (js/host/contract.cjs)
// and the checked methods a host calls inside store.transaction(fn), written
// once over the hooks each adapter's transaction implements.

const { CONTRACT, readEach } = require('../host/contract.cjs');
const { eachStep, step } = require('../core/step.cjs');
const { invalidArgument, receiptExists, workflowChanged, operationExists } = require('./errors.cjs');
const {
  putOptionsOf,
  workflowToStore,
  workflowPatch,
  receiptToStore,
  operationToStore,
  operationView,
  decidedReceiptToStore,
  decidedOperationToStore,
  decidedWorkflowPatch,
} = require('./records.cjs');

/**
 * One transaction of a store. It implements the transaction contract of the
 * host cycle (js/host/contract.cjs) and the checked methods a host calls in
 * a transaction of its own (store.transaction(fn)): getReceipt, getWorkflow,
 * getOperation, putWorkflow, insertReceipt, writeWorkflow, insertOperation,
 * and `client`, the driver's own handle bound to the transaction (where a
 * store has one). The checks and the errors live here; a subclass
 * implements, inside its transaction:
 *   _read(table, key)           the stored record of 'workflows', 'inbox' or 'outbox', or null
 *   _insert(table, record)      inserts; false when the key exists (a workflow is
 *                               {id, status, revision, data, createdAt, updatedAt})
 *   _updateWorkflow(change)     the compare-and-set of workflowPatch's change (plus `now`); false when it did not match
 *   _putWorkflow(record)        inserts or replaces {id, status, revision, data} (optional: putWorkflow)
 * Every write is guarded (a unique key or a compare-and-set), so a store may
 * also buffer the writes and commit them as one conditional batch. A store
 * with more (many keys in one read, savepoints: SqlTransaction) overrides the
 * contract's batch members.
 */
class StoreTransaction {
  constructor(store) {
    /** @internal */
    this._store = store;
  }

  /** @internal this transaction implements the host cycle's contract itself */
  get [CONTRACT]() {
    return true;
  }

  /**
   * The driver's own handle bound to this transaction, for the host's own statements (a subclass's).
   * @returns {any}
   */
  get client() {
    return undefined;
  }

  /** Whether savepoint(), rollbackToSavepoint() and releaseSavepoint() undo part of this transaction. */
  get savepoints() {
    return false;
  }

  /**
   * What an error the host's own statement on `client` threw (inside
   * onApplied) means to this store: the IdemflowError the store throws for
   * the same failure of its own statements (STORE_UNAVAILABLE with its
   * reason, a lost race), or null when `thrown` is not its driver's error
   * (a subclass's; a store without a driver has none).
   * @returns {import('../core/errors.cjs').IdemflowError | null}
   */
  driverErrorOf(_thrown) {
    return null;
  }

  /**
   * What the callback that just ended (onApplied) did wrong through
   * `client` that its own return or throw does not say (a subclass's: a
   * refused transaction control, a transaction of its own left open), or null.
   * @returns {import('../core/errors.cjs').IdemflowError | null}
   */
  endHostWork(_threw) {
    return null;
  }

  async getReceipt(eventId) {
    return this._store._receiptOf(await this._read('inbox', eventId));
  }

  async getWorkflow(id) {
    return this._store._workflowOf(await this._read('workflows', id));
  }

  async getOperation(id) {
    return operationView(await this._read('outbox', id));
  }

  /**
   * Inserts or replaces a workflow in this transaction: a host's row and the
   * workflow it starts commit together. `options.ruleSet`: as the store's putWorkflow.
   */
  async putWorkflow(workflow, options) {
    if (typeof this._putWorkflow !== 'function') {
      throw invalidArgument('this store cannot put a workflow inside a transaction', { reason: 'not supported' });
    }
    await this._putWorkflow(workflowToStore(workflow, putOptionsOf(options)), this._store.now());
  }

  async insertReceipt(receipt) {
    if (!(await this._insert('inbox', receiptToStore(receipt, this._store.now())))) throw receiptExists(receipt);
  }

  async writeWorkflow(write) {
    await this.#writeChange(workflowPatch(write), write);
  }

  async insertOperation(operation) {
    if (!(await this._insert('outbox', operationToStore(operation, this._store.now())))) throw operationExists(operation);
  }

  // ---- The host cycle's contract (js/host/contract.cjs) ---------------------

  /**
   * What a decision needs of the receipt stored for an event id (see
   * DECISION_FIELDS in records.cjs), or null: processEvent's read. A store
   * may read less than getReceipt does; this one reads it whole.
   */
  getReceiptToDecide(eventId) {
    return this.getReceipt(eventId);
  }

  /** The workflow a decision reads: getWorkflow's answer, synchronously when the store's reads are (step.cjs). */
  getWorkflowToDecide(id) {
    return step(this._read('workflows', id), (record) => this._store._workflowOf(record));
  }

  /**
   * A decision's write set, as the core made it (processEvent): what
   * writeWorkflow, insertReceipt and insertOperation write, in that order
   * (the order processBatch takes its locks in: workflows, receipts,
   * operations), without checking again what the core produced;
   * synchronously when the store's writes are (step.cjs). `between()`, when
   * given, runs after the workflow's write and before the receipt's (the
   * host's onApplied): what it answers is the receipt's output, and the
   * answer of this call.
   */
  commitDecided({ receipt, workflow, outbox }, between) {
    const now = this._store.now();
    const operations = () =>
      eachStep(outbox, (operation) =>
        operation.ifAbsent === true
          ? this._insertIfAbsent(decidedOperationToStore(operation, now))
          : step(this._insert('outbox', decidedOperationToStore(operation, now)), (stored) => {
              if (!stored) throw operationExists(operation);
            }),
      );
    const rest = (output) => {
      if (!receipt) return step(operations(), () => output);
      return step(this._insert('inbox', decidedReceiptToStore(receipt, now, output)), (stored) => {
        if (!stored) throw receiptExists(receipt);
        return step(operations(), () => output);
      });
    };
    const afterWorkflow = between === undefined ? () => rest(undefined) : () => step(between(), rest);
    return workflow ? step(this.#writeChange(decidedWorkflowPatch(workflow), workflow), afterWorkflow) : afterWorkflow();
  }

  /** Many receipts (processBatch), one read each: a damaged one is an Unreadable. */
  getReceipts(eventIds) {
    return readEach(eventIds, (id) => this.getReceiptToDecide(id));
  }

  /** Many workflows (processBatch), one read each (a store with row locks takes them, in id order: SqlTransaction). */
  getWorkflows(ids) {
    return readEach(ids, (id) => this.getWorkflowToDecide(id));
  }

  /** The writes of many decisions (processBatch), one by one: workflows, receipts (with their outputs), operations. */
  async commitBatch({ receipts, workflows, operations, now = this._store.now() }) {
    for (const write of workflows) await this.#writeChange(decidedWorkflowPatch(write), write);
    for (const receipt of receipts) {
      if (!(await this._insert('inbox', decidedReceiptToStore(receipt, now)))) throw receiptExists(receipt);
    }
    for (const operation of operations) {
      if (operation.ifAbsent === true) await this._insertIfAbsent(decidedOperationToStore(operation, now));
      else if (!(await this._insert('outbox', decidedOperationToStore(operation, now)))) throw operationExists(operation);
    }
  }

  /**
   * An operation written only if no operation of its id exists (an untracked
   * fact's: a later word of the fact emits the same id again): `_insert`,
   * which answers false for an id that exists and leaves the transaction as
   * it was (a store whose failed insert ends its transaction reads first:
   * MongoTransaction).
   */
  _insertIfAbsent(record) {
    return this._insert('outbox', record);
  }

  /** The write of a workflow change: an insert for a new workflow, else the compare-and-set; synchronously when the store's writes are. */
  #writeChange(change, write) {
    const now = this._store.now();
    const written =
      change.expect === null
        ? this._insert('workflows', {
            id: change.id,
            status: change.status,
            revision: change.revision,
            data: change.kept,
            createdAt: now,
            updatedAt: now,
          })
        : this._updateWorkflow({ ...change, now });
    return step(written, (done) => {
      if (!done) throw workflowChanged(write);
    });
  }

  /**
   * @internal the keyed mode's hold on an idempotency key, across processes,
   * to the end of this transaction: false (now) when another transaction
   * holds it. A store whose transactions already exclude each other (SQLite's
   * write lock, one process's memory) holds every key by being in one.
   * @param {string} key
   * @returns {boolean | Promise<boolean>}
   */
  _tryHoldKey(_key) {
    // eslint-disable-line no-unused-vars
    return true;
  }
}

module.exports = { StoreTransaction };
