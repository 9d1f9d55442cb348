'use strict';
// The transaction contract: what the host cycle (processEvent, processBatch)
// asks of a store's transaction, and nothing else. A store's own
// transaction (StoreTransaction, js/store/base.cjs) implements it and says so
// with the CONTRACT brand; any other transaction a host hands in (an object
// with the checked methods getReceipt, getWorkflow, insertReceipt,
// writeWorkflow and insertOperation, docs/adapters.md) is wrapped into it
// once per cycle by contractOf, so the cycle never probes for methods.
//
//   getReceiptToDecide(eventId, workflowId)  what a decision needs of a receipt, or null;
//                                        workflowId is the workflow read next when there is none
//                                        (a store may read both in one round trip)
//   getWorkflowToDecide(id)              the workflow, or null
//   commitDecided(writeSet, between?)    the core's write set: workflow, receipt, operations;
//                                        between() runs after the workflow's write and answers
//                                        the receipt's output (onApplied)
//   getReceipts(eventIds)                Map of many (processBatch); a damaged one an Unreadable
//   getWorkflows(ids, { lock })          Map of many, locked in id order where the database can
//   commitBatch({ receipts, workflows, operations, now })
//   savepoints                           true when the four below undo part of the transaction
//   savepoint(name), rollbackToSavepoint(name), releaseSavepoint(name)
//   driverErrorOf(thrown)                what a driver error the host's own statement threw (in
//                                        onApplied) means to the store: its IdemflowError, or null
//   endHostWork(threw)                   after each onApplied: a misuse of tx.client the callback
//                                        did not answer for (a refused statement it caught; a
//                                        transaction of its own left open when it returned), or null
//
// The reads may answer synchronously (core/step.cjs) when the driver is.

const { IdemflowError, Unreadable } = require('../core/errors.cjs');
const { isPromise } = require('../core/step.cjs');

/** The brand of a transaction that implements the contract itself. */
const CONTRACT = Symbol.for('idemflow.transaction-contract');

/** An INVALID_RECORD as an Unreadable (kept for the events that need the record); any other error thrown on. */
function unreadable(error) {
  if (error instanceof IdemflowError && error.code === 'INVALID_RECORD') return new Unreadable(error);
  throw error;
}

/** read()'s answer, or an Unreadable when it failed on a damaged record; synchronously when read() is. */
function orUnreadable(read) {
  let value;
  try {
    value = read();
  } catch (error) {
    return unreadable(error);
  }
  return isPromise(value) ? value.catch(unreadable) : value;
}

/** key → read(key) for the keys that have a record, one read at a time; a damaged one an Unreadable. */
async function readEach(keys, read) {
  const found = new Map();
  for (const key of keys) {
    const record = await orUnreadable(() => read(key));
    if (record) found.set(key, record);
  }
  return found;
}

/** A transaction a host wrote, seen through the contract: its checked methods, one at a time. */
class ForeignTransaction {
  #tx;

  constructor(tx) {
    this.#tx = tx;
  }

  get client() {
    return this.#tx.client;
  }

  get savepoints() {
    return false;
  }

  /** A host's own transaction classifies nothing: its callback's failures are HANDLER_FAILED. */
  driverErrorOf() {
    return null;
  }

  /** A host's own client is not guarded. */
  endHostWork(_threw) {
    return null;
  }

  getReceiptToDecide(eventId) {
    return this.#tx.getReceipt(eventId);
  }

  getWorkflowToDecide(id) {
    return this.#tx.getWorkflow(id);
  }

  async commitDecided({ receipt, workflow, outbox }, between) {
    if (workflow) await this.#tx.writeWorkflow(workflow);
    const output = between === undefined ? undefined : await between();
    if (receipt) await this.#tx.insertReceipt(output === undefined ? receipt : withOutput(receipt, output));
    for (const operation of outbox) await insertOperation(this.#tx, operation);
    return output;
  }

  getReceipts(eventIds) {
    return readEach(eventIds, (id) => this.#tx.getReceipt(id));
  }

  getWorkflows(ids) {
    return readEach(ids, (id) => this.#tx.getWorkflow(id));
  }

  async commitBatch({ receipts, workflows, operations }) {
    for (const write of workflows) await this.#tx.writeWorkflow(write);
    for (const receipt of receipts) await this.#tx.insertReceipt(receipt);
    for (const operation of operations) await insertOperation(this.#tx, operation);
  }
}

/**
 * One operation through a transaction's checked insertOperation; one written
 * only if absent (an untracked fact's: a later word of the fact emits the
 * same id again) that exists already is skipped.
 */
async function insertOperation(tx, operation) {
  try {
    await tx.insertOperation(operation);
  } catch (error) {
    if (operation.ifAbsent === true && error?.code === 'OUTBOX_CONFLICT') return;
    throw error;
  }
}

/** A receipt with the host's output in its result. */
function withOutput(receipt, output) {
  return { ...receipt, result: { ...receipt.result, output } };
}

/** `tx` as the contract: itself when it implements it, else wrapped. */
function contractOf(tx) {
  return tx !== null && typeof tx === 'object' && tx[CONTRACT] === true ? tx : new ForeignTransaction(tx);
}

/**
 * Writes a decision's write set through a transaction's checked methods, in
 * the order every transaction of idemflow takes its locks: workflow
 * (compare-and-set), receipt (unique event id), operations (unique operation
 * ids). For hosts that commit a decision of `decide` in a transaction of
 * their own. Stores signal a lost race with CONCURRENT_UPDATE and an
 * existing operation id with OUTBOX_CONFLICT.
 */
async function commitWriteSet(tx, writeSet) {
  if (writeSet.workflow) await tx.writeWorkflow(writeSet.workflow);
  if (writeSet.receipt) await tx.insertReceipt(writeSet.receipt);
  for (const operation of writeSet.outbox) await insertOperation(tx, operation);
}

module.exports = { CONTRACT, contractOf, commitWriteSet, orUnreadable, readEach };
