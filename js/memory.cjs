'use strict';
// An in-memory store: all-or-nothing transactions serialised within one
// process. For tests, examples and single-process tools; it is not durable.

const { IdemflowError } = require('./errors.cjs');
const { processEvent } = require('./host.cjs');

function copy(value) {
  return value === undefined ? null : structuredClone(value);
}

function applySet(base, set) {
  const next = { ...base };
  for (const [key, value] of Object.entries(set)) {
    if (value === null) delete next[key];
    else next[key] = value;
  }
  return next;
}

/** Reads see the transaction's own writes; nothing reaches the store until commit. */
class MemoryTransaction {
  #data;
  #writes = { workflows: new Map(), inbox: new Map(), outbox: new Map() };

  constructor(data) {
    this.#data = data;
  }

  #read(table, key) {
    const own = this.#writes[table];
    return own.has(key) ? own.get(key) : this.#data[table].get(key);
  }

  async getReceipt(eventId) {
    return copy(this.#read('inbox', eventId));
  }

  async getWorkflow(id) {
    return copy(this.#read('workflows', id));
  }

  async getOperation(id) {
    return copy(this.#read('outbox', id));
  }

  async insertReceipt(receipt) {
    if (this.#read('inbox', receipt.eventId) !== undefined) {
      throw new IdemflowError('CONCURRENT_UPDATE', `a receipt for event ${receipt.eventId} was recorded concurrently`, {
        details: { eventId: receipt.eventId, workflowId: receipt.workflowId, reason: 'receipt-exists' },
      });
    }
    this.#writes.inbox.set(receipt.eventId, structuredClone(receipt));
  }

  async writeWorkflow(write) {
    const current = this.#read('workflows', write.id);
    const expect = write.expect;
    const matches = expect === null
      ? current === undefined
      : current !== undefined && current.status === expect.status && current.revision === expect.revision;
    if (!matches) {
      throw new IdemflowError('CONCURRENT_UPDATE', `workflow ${write.id} changed since it was read`, {
        details: {
          workflowId: write.id,
          expectedStatus: expect ? expect.status : null,
          expectedRevision: expect ? expect.revision : null,
        },
      });
    }
    this.#writes.workflows.set(write.id, applySet(current ?? { id: write.id }, write.set));
  }

  async insertOperation(operation) {
    if (this.#read('outbox', operation.id) !== undefined) {
      throw new IdemflowError('OUTBOX_CONFLICT', `outbox operation ${operation.id} already exists`, {
        details: { operationId: operation.id, workflowId: operation.workflowId, eventId: operation.eventId },
      });
    }
    this.#writes.outbox.set(operation.id, structuredClone(operation));
  }

  /** @internal */
  commitTo(data) {
    for (const table of ['workflows', 'inbox', 'outbox']) {
      for (const [key, value] of this.#writes[table]) data[table].set(key, value);
    }
  }
}

class InMemoryStore {
  #data = { workflows: new Map(), inbox: new Map(), outbox: new Map() };
  #tail = Promise.resolve();

  /** @param {Iterable<object>} workflows the workflows that exist at the start */
  constructor(workflows = []) {
    for (const workflow of workflows) {
      const id = workflow !== null && typeof workflow === 'object' ? workflow.id : undefined;
      if (typeof id !== 'string' || id.length === 0) {
        throw new IdemflowError('INVALID_ARGUMENT', 'every workflow needs a non-empty string id', {
          details: { reason: 'workflow without id' },
        });
      }
      if (this.#data.workflows.has(id)) {
        throw new IdemflowError('INVALID_ARGUMENT', `duplicate workflow id ${id}`, {
          details: { workflowId: id, reason: 'duplicate workflow id' },
        });
      }
      this.#data.workflows.set(id, structuredClone(workflow));
    }
  }

  /**
   * Runs fn(tx) alone (calls queue behind each other in this process). If fn
   * throws, none of its writes are kept.
   */
  async transaction(fn) {
    const previous = this.#tail;
    let release;
    this.#tail = new Promise((resolve) => { release = resolve; });
    await previous;
    try {
      const tx = new MemoryTransaction(this.#data);
      const result = await fn(tx);
      tx.commitTo(this.#data);
      return result;
    } finally {
      release();
    }
  }

  /** Copies of every table, as Maps keyed by id. */
  snapshot() {
    return structuredClone(this.#data);
  }

  /** processEvent(this, event, options). */
  process(event, options) {
    return processEvent(this, event, options);
  }

  async getWorkflow(id) {
    return copy(this.#data.workflows.get(id));
  }

  async putWorkflow(workflow) {
    await this.transaction(async () => {
      this.#data.workflows.set(workflow.id, structuredClone(workflow));
    });
  }
}

module.exports = { InMemoryStore, MemoryTransaction };
