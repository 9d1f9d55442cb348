// @ts-check
'use strict';
// MongoDB over the official driver: one session per transaction, run by
// session.withTransaction with snapshot reads and majority writes. Receipts
// and operations are keyed by `_id`, which is unique by itself; a workflow
// changes only by a compare-and-set on (_id, status, revision). Transactions
// need a replica set or a sharded cluster. The outbox claim is one
// findOneAndUpdate per operation: a single-document update is atomic.

const { IdemflowError } = require('./errors.cjs');
const { processEvent } = require('./host.cjs');
const common = require('./adapter-common.cjs');
const { checkOptionKeys, checkHandle } = require('./options.cjs');

/**
 * @typedef {import('mongodb').MongoClient} MongoClient
 * @typedef {import('mongodb').Db} Db
 * @typedef {import('mongodb').ClientSession} ClientSession
 * @typedef {import('mongodb').TransactionOptions} TransactionOptions
 * @typedef {{ _id: string, status: string, revision: number, data: Record<string, string>, createdAt: number, updatedAt: number }} WorkflowDocument
 * @typedef {{ _id: string, fingerprint: string, workflowId: string, eventType: string, outcome: string,
 *   ruleSetId: string | null, ruleSetVersion: number | null, ruleSetHash: string | null, recordedAt: number }} ReceiptDocument
 * @typedef {{ _id: string, type: string, workflowId: string, eventId: string, payload: Record<string, unknown>, status: string,
 *   attempts: number, nextAttemptAt: number, leaseOwner: string | null, leaseExpiresAt: number | null, fencingToken: number,
 *   lastError: string | null, createdAt: number, updatedAt: number }} OperationDocument
 */

/** @type {TransactionOptions} */
const TRANSACTION_OPTIONS = {
  readConcern: { level: 'snapshot' },
  writeConcern: { w: 'majority' },
  readPreference: 'primary',
};

/**
 * Outbox writes outside a transaction: a claim or a result a failover could
 * roll back is not reported as recorded.
 * @type {{ writeConcern: import('mongodb').WriteConcernSettings }}
 */
const MAJORITY = { writeConcern: { w: 'majority' } };

const NAMESPACE_EXISTS = 48;
const DUPLICATE_KEY = 11000;
const WRITE_CONFLICT = 112;
const UNAVAILABLE_NAMES = new Set([
  'MongoNetworkError', 'MongoNetworkTimeoutError', 'MongoServerSelectionError', 'MongoNotConnectedError',
  'MongoTopologyClosedError', 'MongoPoolClosedError', 'MongoWaitQueueTimeoutError', 'PoolClearedError', 'PoolClosedError',
]);

/**
 * What kind of failure a driver error is.
 * @param {any} error
 * @returns {{ type: string, reason?: string } | null}
 */
function classify(error) {
  if (error === null || typeof error !== 'object') return null;
  if (error.code === DUPLICATE_KEY) return { type: 'unique' };
  const labelled = (/** @type {string} */ label) => typeof error.hasErrorLabel === 'function' && error.hasErrorLabel(label);
  if (UNAVAILABLE_NAMES.has(error.name) || common.isNetworkError(error)) {
    return { type: 'unavailable', reason: error.name === 'MongoServerSelectionError' ? 'no-server-selectable' : 'connection-lost' };
  }
  if (error.code === WRITE_CONFLICT || labelled('TransientTransactionError')) return { type: 'race', reason: 'write-conflict' };
  if (labelled('UnknownTransactionCommitResult') || labelled('RetryableWriteError')) return { type: 'unavailable', reason: 'commit-unknown' };
  return null;
}

/**
 * @param {unknown} error
 * @param {(error: unknown) => IdemflowError} [onUnique]
 */
function mapError(error, onUnique) {
  return common.mapDriverError(error, classify, onUnique);
}

/**
 * Runs one driver call and maps what it throws. With a deadline, a call that
 * would start after the time ran out fails at once (the caller has given up).
 * @template T
 * @param {() => Promise<T>} call
 * @param {(error: unknown) => IdemflowError} [onUnique]
 * @param {{ check(): void }} [deadline]
 * @returns {Promise<T>}
 */
async function run(call, onUnique, deadline) {
  deadline?.check();
  try {
    return await call();
  } catch (error) {
    throw mapError(error, onUnique);
  }
}

/** @param {WorkflowDocument | null} doc */
function workflowFromDocument(doc) {
  if (!doc) return null;
  return common.workflowFromRow({ id: doc._id, status: doc.status, revision: doc.revision, data: doc.data ?? {} }, { numbers: true });
}

/** @param {ReceiptDocument | null} doc */
function receiptFromDocument(doc) {
  if (!doc) return null;
  return common.receiptFromRow({
    event_id: doc._id, fingerprint: doc.fingerprint, workflow_id: doc.workflowId, event_type: doc.eventType,
    outcome: doc.outcome, rule_set_id: doc.ruleSetId, rule_set_version: doc.ruleSetVersion, rule_set_hash: doc.ruleSetHash,
    recorded_at: doc.recordedAt,
  });
}

/**
 * An outbox document under the outbox table's column names, unread
 * (OutboxStoreBase reads it, and sets aside one that cannot be read).
 * @param {OperationDocument | null} doc
 */
function operationRow(doc) {
  if (!doc) return null;
  return ({
    id: doc._id, type: doc.type, workflow_id: doc.workflowId, event_id: doc.eventId, payload: doc.payload ?? {},
    status: doc.status, attempts: doc.attempts, next_attempt_at: doc.nextAttemptAt, lease_owner: doc.leaseOwner,
    lease_expires_at: doc.leaseExpiresAt, fencing_token: doc.fencingToken, last_error: doc.lastError,
    created_at: doc.createdAt, updated_at: doc.updatedAt,
  });
}

class MongoTransaction {
  /** @type {MongoStore} */
  #store;
  /** @type {ClientSession} */
  #session;
  /** @type {{ check(): void }} */
  #deadline;

  /**
   * @param {MongoStore} store
   * @param {ClientSession} session
   * @param {{ check(): void }} deadline
   */
  constructor(store, session, deadline) {
    this.#store = store;
    this.#session = session;
    this.#deadline = deadline;
  }

  /**
   * One driver call of this transaction, within the transaction's deadline.
   * @template T
   * @param {(options: { session: ClientSession, maxTimeMS?: number }) => Promise<T>} call
   * @param {(error: unknown) => IdemflowError} [onUnique]
   * @returns {Promise<T>}
   */
  #run(call, onUnique) {
    const options = { session: this.#session, ...this.#store._serverBound() };
    return run(() => call(options), onUnique, this.#deadline);
  }

  /** @param {string} eventId */
  async getReceipt(eventId) {
    return receiptFromDocument(await this.#run((options) => this.#store._inbox().findOne({ _id: eventId }, options)));
  }

  /** @param {string} id */
  async getWorkflow(id) {
    return workflowFromDocument(await this.#run((options) => this.#store._workflows().findOne({ _id: id }, options)));
  }

  /** @param {string} id */
  async getOperation(id) {
    return common.operationView(operationRow(await this.#run((options) => this.#store._outbox().findOne({ _id: id }, options))));
  }

  /** @param {import('./index.js').Receipt} receipt */
  async insertReceipt(receipt) {
    const { eventId, ...fields } = common.receiptRecord(receipt, this.#store.now());
    /** @type {ReceiptDocument} */
    const doc = { _id: eventId, ...fields };
    await this.#run((options) => this.#store._inbox().insertOne(doc, options), (e) => common.receiptExists(receipt, e));
  }

  /** @param {import('./index.js').WorkflowWrite} write */
  async writeWorkflow(write) {
    const change = common.workflowPatch(write);
    const now = this.#store.now();
    const workflows = this.#store._workflows();
    if (change.expect === null) {
      /** @type {WorkflowDocument} */
      const doc = { _id: change.id, status: change.status, revision: change.revision, data: change.kept, createdAt: now, updatedAt: now };
      await this.#run((options) => workflows.insertOne(doc, options), (e) => common.workflowChanged(write, e));
      return;
    }
    /** @type {Record<string, unknown>} */
    const set = { status: change.status, revision: change.revision, updatedAt: now };
    for (const [field, value] of Object.entries(change.kept)) set[`data.${field}`] = value;
    /** @type {Record<string, ''>} */
    const unset = {};
    for (const field of change.removed) unset[`data.${field}`] = '';
    const update = change.removed.length > 0 ? { $set: set, $unset: unset } : { $set: set };
    const { expect } = change;
    const result = await this.#run((options) => workflows.updateOne({ _id: change.id, status: expect.status, revision: expect.revision }, update, options));
    if (result.matchedCount !== 1) throw common.workflowChanged(write);
  }

  /** @param {import('./index.js').OutboxOperation} operation */
  async insertOperation(operation) {
    const { id, ...fields } = common.operationRecord(operation, this.#store.now());
    /** @type {OperationDocument} */
    const doc = { _id: id, ...fields };
    await this.#run((options) => this.#store._outbox().insertOne(doc, options), (e) => common.operationExists(operation, e));
  }
}

/**
 * A store over a MongoClient. Collections live in `options.db` (a Db or a
 * database name; default: the connection string's database). It is also an
 * outbox store (docs/outbox.md).
 */
class MongoStore extends common.OutboxStoreBase {
  /** @type {() => number} */
  #clock;
  /** @type {{ timeoutMs: number, statementTimeoutMs: number }} */
  #timeouts;

  /**
   * @param {MongoClient} client
   * @param {{ db?: Db | string, tables?: { workflows?: string, inbox?: string, outbox?: string }, maxAttempts?: number, now?: () => number,
   *   timeoutMs?: number, statementTimeoutMs?: number }} [options]
   */
  constructor(client, options = {}) {
    super();
    checkHandle(client, 'mongodb', (/** @type {any} */ value) => value !== null && typeof value === 'object' && typeof value.withSession === 'function'
      && typeof value.db === 'function', 'MongoStore needs a MongoClient');
    checkOptionKeys(options, ['db', 'tables', 'maxAttempts', 'now', 'timeoutMs', 'statementTimeoutMs'], 'MongoStore');
    const opts = options ?? {};
    /** The MongoClient this store works through. */
    this.client = client;
    /** @type {Db} */
    this.db = typeof opts.db === 'object' && opts.db !== null ? opts.db : client.db(opts.db);
    /** @type {{ workflows: string, inbox: string, outbox: string }} */
    this.tables = /** @type {{ workflows: string, inbox: string, outbox: string }} */ (common.resolveTables(opts.tables));
    /** @type {number | undefined} */
    this.maxAttempts = common.resolveMaxAttempts(opts.maxAttempts);
    this.#clock = common.resolveClock(opts.now);
    this.#timeouts = common.resolveTimeouts(opts);
    // The client re-emits its topology's 'error'; with no listener Node would end the process.
    common.watchClient(client);
  }

  now() {
    return this.#clock();
  }

  /**
   * @internal body(deadline), failed with STORE_UNAVAILABLE (reason 'timeout') after options.timeoutMs.
   * @template T
   * @param {string} operation
   * @param {(deadline: { check(): void }) => Promise<T>} body
   * @returns {Promise<T>}
   */
  _within(operation, body) {
    return common.withDeadline(this.#timeouts.timeoutMs, operation, body);
  }

  /**
   * @internal one driver call outside a transaction, within options.timeoutMs
   * @template T
   * @param {string} operation
   * @param {() => Promise<T>} call
   * @returns {Promise<T>}
   */
  _call(operation, call) {
    return this._within(operation, (deadline) => run(call, undefined, deadline));
  }

  /** @internal the server-side bound of one operation: `{ maxTimeMS }`, or nothing when statementTimeoutMs is 0 */
  _serverBound() {
    const { statementTimeoutMs } = this.#timeouts;
    return statementTimeoutMs > 0 ? { maxTimeMS: statementTimeoutMs } : {};
  }

  /** @internal @returns {import('mongodb').Collection<WorkflowDocument>} */
  _workflows() {
    return this.db.collection(this.tables.workflows);
  }

  /** @internal @returns {import('mongodb').Collection<ReceiptDocument>} */
  _inbox() {
    return this.db.collection(this.tables.inbox);
  }

  /** @internal @returns {import('mongodb').Collection<OperationDocument>} */
  _outbox() {
    return this.db.collection(this.tables.outbox);
  }

  /**
   * Creates the collections (transactions cannot create them on older
   * servers) and the indexes on recordedAt, (status, nextAttemptAt),
   * (status, leaseExpiresAt) and (status, updatedAt).
   */
  async migrate() {
    return this._within('migrate', (deadline) => this.#migrate(deadline));
  }

  /** @param {{ check(): void }} deadline */
  async #migrate(deadline) {
    for (const name of Object.values(this.tables)) {
      await run(async () => {
        try {
          await this.db.createCollection(name);
        } catch (error) {
          if (!(error && typeof error === 'object' && 'code' in error && error.code === NAMESPACE_EXISTS)) throw error;
        }
      }, undefined, deadline);
    }
    await run(() => this._inbox().createIndex({ recordedAt: 1 }), undefined, deadline);
    await run(() => this._outbox().createIndex({ status: 1, nextAttemptAt: 1 }), undefined, deadline);
    await run(() => this._outbox().createIndex({ status: 1, leaseExpiresAt: 1 }), undefined, deadline);
    await run(() => this._outbox().createIndex({ status: 1, updatedAt: 1 }), undefined, deadline);
  }

  /**
   * Runs fn(tx) in a session transaction (snapshot reads, majority writes).
   * If fn throws, the transaction aborts and the error is rethrown as it was.
   * A write conflict surfaces as CONCURRENT_UPDATE, so processEvent's bounded
   * retry, not the driver's, runs the cycle again.
   * @template T
   * @param {(tx: MongoTransaction) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  transaction(fn) {
    return this._within('transaction', (deadline) => this.#transactionWithin(deadline, fn));
  }

  /**
   * @template T
   * @param {{ check(): void }} deadline
   * @param {(tx: MongoTransaction) => Promise<T>} fn
   * @returns {Promise<T>}
   */
  async #transactionWithin(deadline, fn) {
    /** @type {{ value: T } | null} */
    let outcome = null;
    /** @type {unknown} */
    let fnError = null;
    const { maxTimeMS } = this._serverBound();
    const commitBound = maxTimeMS === undefined ? {} : { maxCommitTimeMS: maxTimeMS };
    try {
      await this.client.withSession(async (session) => {
        await session.withTransaction(async () => {
          outcome = null;
          try {
            // A retry of the driver's after the time ran out throws here, which ends its retries.
            deadline.check();
            outcome = { value: await fn(new MongoTransaction(this, session, deadline)) };
          } catch (error) {
            fnError = error;
            throw error;
          }
        }, { ...TRANSACTION_OPTIONS, ...commitBound });
      });
    } catch (error) {
      if (error === fnError) throw error;
      throw mapError(error);
    }
    if (outcome === null) throw common.lostRace(new Error('the transaction ended without running'), 'transaction-aborted');
    return /** @type {{ value: T }} */ (outcome).value;
  }

  /**
   * processEvent(this, event, options).
   * @param {import('./index.js').EventInput} event
   * @param {import('./index.js').ProcessOptions} [options]
   */
  process(event, options) {
    return processEvent(this, event, options);
  }

  /**
   * Inserts or replaces a workflow, for hosts that create workflows and for tests.
   * @param {import('./index.js').Workflow} workflow
   */
  async putWorkflow(workflow) {
    const row = common.workflowColumns(workflow);
    const now = this.now();
    const data = JSON.parse(row.data);
    await this._call('putWorkflow', () => this._workflows().updateOne(
      { _id: row.id },
      { $set: { status: row.status, revision: row.revision, data, updatedAt: now }, $setOnInsert: { createdAt: now } },
      { upsert: true, writeConcern: { w: 'majority' }, ...this._serverBound() },
    ));
  }

  /** @param {string} id */
  async getWorkflow(id) {
    return workflowFromDocument(await this._call('getWorkflow', () => this._workflows().findOne({ _id: id }, this._serverBound())));
  }

  /**
   * The inbox receipt stored for an event id, or null.
   * @param {string} eventId
   */
  async getReceipt(eventId) {
    return receiptFromDocument(await this._call('getReceipt', () => this._inbox().findOne({ _id: eventId }, this._serverBound())));
  }

  /**
   * @internal The outbox document with this id as a row, or null.
   * @param {string} id
   */
  async _row(id) {
    return operationRow(await this._call('getOperation', () => this._outbox().findOne({ _id: id }, this._serverBound())));
  }

  // ---- The outbox store interface (docs/outbox.md; the rest is OutboxStoreBase)

  /**
   * @internal Claims one due document per findOneAndUpdate, up to `limit`,
   * oldest due first. If the database fails after some claims, those are
   * returned (to be run, not left to expire); the next claim meets the failure.
   * @param {{ owner: string, now: number, leaseExpiresAt: number, limit: number, types: string[] | null }} request
   */
  _claim(request) {
    return this._within('claimOperations', (deadline) => this.#claim(request, deadline));
  }

  /**
   * @param {{ owner: string, now: number, leaseExpiresAt: number, limit: number, types: string[] | null }} request
   * @param {{ check(): void }} deadline
   */
  async #claim(request, deadline) {
    const { owner, now, leaseExpiresAt, limit, types } = request;
    /** @type {import('mongodb').Filter<OperationDocument>} */
    const due = {
      ...(types === null ? {} : { type: { $in: types } }),
      $or: [{ status: 'pending', nextAttemptAt: { $lte: now } }, { status: 'claimed', leaseExpiresAt: { $lte: now } }],
    };
    const update = { $set: { status: 'claimed', leaseOwner: owner, leaseExpiresAt, updatedAt: now }, $inc: { fencingToken: 1, attempts: 1 } };
    const claimed = [];
    while (claimed.length < limit) {
      let doc;
      try {
        doc = await run(() => this._outbox().findOneAndUpdate(due, update, {
          sort: { nextAttemptAt: 1, _id: 1 }, returnDocument: 'after', ...MAJORITY, ...this._serverBound(),
        }), undefined, deadline);
      } catch (error) {
        if (claimed.length === 0) throw error;
        break;
      }
      if (doc === null) break;
      claimed.push(operationRow(doc));
    }
    return claimed;
  }

  /**
   * @internal A guarded change as updateOne: filter on _id, status and the token, `$set` the fields.
   * @param {{ id: string, status: string, fencingToken: number | undefined, set: Record<string, unknown>, giveBackAttempt: boolean }} change
   */
  async _update(change) {
    /** @type {import('mongodb').Filter<OperationDocument>} */
    const filter = { _id: change.id, status: change.status, ...(change.fencingToken === undefined ? {} : { fencingToken: change.fencingToken }) };
    const set = Object.fromEntries(Object.entries(change.set).map(([column, value]) => [common.fieldOf(column), value]));
    const result = await this._call('update', () => this._outbox().updateOne(filter, change.giveBackAttempt ? { $set: set, $inc: { attempts: -1 } } : { $set: set },
      { ...MAJORITY, ...this._serverBound() }));
    return result.matchedCount === 1;
  }

  /**
   * @internal
   * @param {{ status: string | null, limit: number, afterId: string | null }} request
   */
  async _list({ status, limit, afterId }) {
    /** @type {import('mongodb').Filter<OperationDocument>} */
    const filter = { ...(status === null ? {} : { status }), ...(afterId === null ? {} : { _id: { $gt: afterId } }) };
    const docs = await this._call('listOperations', () => this._outbox().find(filter, { sort: { _id: 1 }, limit, ...this._serverBound() }).toArray());
    return docs.map(operationRow);
  }

  /**
   * @internal One purge batch: the ids of the oldest matching documents, then deleteMany
   * of those still matching. Returns how many were deleted.
   * @param {'receipts' | 'operations'} target
   * @param {{ olderThan: number, batchSize: number, status: string | null }} request
   */
  async _purgeBatch(target, { olderThan, batchSize, status }) {
    /**
     * @template {{ _id: string }} T
     * @param {import('mongodb').Collection<T>} collection
     * @param {import('mongodb').Filter<T>} filter
     * @param {import('mongodb').Sort} sort
     */
    const batch = async (collection, filter, sort) => {
      const ids = (await this._call('purge', () => collection.find(filter, { projection: { _id: 1 }, sort, limit: batchSize, ...this._serverBound() }).toArray()))
        .map((doc) => doc._id);
      if (ids.length === 0) return 0;
      return (await this._call('purge', () => collection.deleteMany({ ...filter, _id: { $in: ids } }, { ...MAJORITY, ...this._serverBound() }))).deletedCount;
    };
    return target === 'receipts'
      ? batch(this._inbox(), { recordedAt: { $lt: olderThan } }, { recordedAt: 1 })
      : batch(this._outbox(), { status: String(status), updatedAt: { $lt: olderThan } }, { updatedAt: 1 });
  }
}

/** @type {(error: unknown) => boolean} */
const isStoreUnavailable = common.isStoreUnavailable;

module.exports = {
  MongoStore,
  MongoTransaction,
  DEFAULT_TABLES: common.DEFAULT_TABLES,
  STORE_UNAVAILABLE: common.STORE_UNAVAILABLE,
  isStoreUnavailable,
};
