'use strict';
// Bounds and connections. A store call never waits forever: the server ends a statement that runs past
// statementTimeoutMs, and a timer ends the call after timeoutMs whatever the
// server does (a stopped server answers nothing, so only a client-side bound
// helps there). A connection the store holds has an 'error' listener for as
// long as it holds it: a driver emits 'error' when the server ends the
// session, and Node ends the process on an 'error' nobody listens to.

const { callExpired, timedOut } = require('./errors.cjs');

/**
 * The time left to one store call. When it runs out, the call fails with
 * STORE_UNAVAILABLE (reason 'timeout'), the handlers given to onExpire run
 * (they discard the connection), and check() throws from then on, so the
 * abandoned work sends no further statement.
 */
class Deadline {
  // Made when the time runs out: an error (and its stack) per call would cost more than most statements.
  #error = null;
  #operation;
  #timeoutMs;
  #expired = false;
  #handlers = [];
  #timer;
  #reject;

  constructor(timeoutMs, operation) {
    this.#operation = operation;
    this.#timeoutMs = timeoutMs;
    this.promise = new Promise((_, reject) => {
      this.#reject = reject;
    });
    this.promise.catch(() => {}); // raced by withDeadline; nobody else awaits it
    this.#timer = setTimeout(() => this.#expire(), timeoutMs);
  }

  get expired() {
    return this.#expired;
  }

  check() {
    if (this.#expired) throw this.#error;
  }

  /** Runs `handler(error)` when the time runs out (at once if it has). */
  onExpire(handler) {
    if (this.#expired) handler(this.#error);
    else this.#handlers.push(handler);
  }

  clear() {
    clearTimeout(this.#timer);
    this.#handlers = [];
  }

  #expire() {
    this.#expired = true;
    this.#error = timedOut(this.#operation, this.#timeoutMs);
    this.#reject(this.#error);
    for (const handler of this.#handlers) {
      try {
        handler(this.#error);
      } catch {
        // Discarding a connection is best effort; the caller has its answer.
      }
    }
    this.#handlers = [];
  }
}

/**
 * The options of a store's transaction(fn, options), as the host loops pass
 * them: `batch` (processBatch's transaction: its locking reads need READ
 * COMMITTED where the database's default is stricter) and `deadlineAt`
 * (performance.now() time by which the whole call must end: every
 * transaction of one processEvent or processBatch call shares it).
 */
function transactionOptions(options) {
  if (options === undefined || options === null || typeof options !== 'object') return { batch: false, deadlineAt: null };
  const { batch, deadlineAt } = options;
  return { batch: batch === true, deadlineAt: typeof deadlineAt === 'number' && !Number.isNaN(deadlineAt) ? deadlineAt : null };
}

/** Throws when the call a transaction belongs to has no time left (`deadlineAt`, see transactionOptions). */
function checkTimeLeft(deadlineAt, operation) {
  if (deadlineAt !== null && performance.now() >= deadlineAt) throw callExpired(operation);
}

/**
 * body(deadline), settled within `timeoutMs`, or within what is left until
 * `deadlineAt` when that is sooner: a timeout error once the time is up. A
 * call whose time is up already fails at once, without touching the store.
 * @template T
 * @param {number} timeoutMs
 * @param {string} operation
 * @param {(deadline: Deadline) => T | Promise<T>} body
 * @param {number | null} [deadlineAt] performance.now() time the whole call must end by
 * @returns {Promise<T>}
 */
async function withDeadline(timeoutMs, operation, body, deadlineAt = null) {
  if (deadlineAt !== null) {
    const left = Math.ceil(deadlineAt - performance.now());
    if (left <= 0) throw callExpired(operation);
    if (left < timeoutMs) timeoutMs = left;
  }
  const deadline = new Deadline(timeoutMs, operation);
  try {
    return await Promise.race([Promise.resolve().then(() => body(deadline)), deadline.promise]);
  } finally {
    deadline.clear();
  }
}

/**
 * An 'error' listener on a connection while a store holds it. It keeps the
 * first error (the server's reason, e.g. SQLSTATE 57P01 or a lost
 * connection) so that the failure the store reports carries it, rather than
 * the driver's "not queryable" that follows.
 */
class ConnectionWatch {
  error = null;
  #connection;
  #listener = (error) => {
    if (this.error === null) this.error = error;
  };

  constructor(connection) {
    this.#connection = connection;
    if (connection !== null && typeof connection === 'object' && typeof connection.on === 'function')
      connection.on('error', this.#listener);
  }

  /** Stops listening; a broken connection keeps the listener, for what it emits while it is torn down. */
  stop(broken) {
    if (!broken && typeof this.#connection.removeListener === 'function') this.#connection.removeListener('error', this.#listener);
  }
}

const watchedClients = new WeakMap();

/** One watch for the store's lifetime on a client the host hands in whole (a pg Client, a mysql2 Connection, a MongoClient). */
function watchClient(client) {
  let watch = watchedClients.get(client);
  if (watch === undefined) {
    watch = new ConnectionWatch(client);
    watchedClients.set(client, watch);
  }
  return watch;
}

/**
 * A connection seen through its deadline and its watch: every statement
 * first checks the time, and a statement that fails after the connection
 * emitted 'error' fails with that error (which the store then maps).
 * `prefix(sql)` may rewrite a statement (MariaDB's per-statement timeout).
 */
function guardedConnection(connection, deadline, watch, prefix = (sql) => sql) {
  return {
    query(sql, params) {
      deadline.check();
      if (watch.error !== null) return Promise.reject(watch.error);
      return Promise.resolve(connection.query(prefix(sql), params)).catch((error) => {
        throw watch.error ?? error;
      });
    },
  };
}

/** Runs transactions one after another on one connection, in call order. */
class Serializer {
  #tail = Promise.resolve();

  async run(fn) {
    const previous = this.#tail;
    let release;
    this.#tail = new Promise((resolve) => {
      release = resolve;
    });
    await previous;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}

/**
 * withExclusiveLock's lock on a server database, held by a session: a
 * connection of its own from a pool (`pooled`; so no transaction stays open
 * while the lock is held), or the host's one connection. `open()` gives the
 * session and, for a pooled one, its ConnectionWatch (`{ session, watch }`;
 * the pool does not listen to a session it handed out, and a server that
 * ends it emits an 'error' that would otherwise end the process),
 * `tryLock(session)` takes the lock now or answers false, `unlock(session)`
 * frees it, `giveBack(session, broken, error)` returns a pooled session
 * (discarding a broken one: one that failed or whose watch saw an error).
 * Resolves to the release function, or null when the lock is held
 * elsewhere; the driver's errors come out through `mapError`.
 */
async function sessionLock({ pooled, open, tryLock, unlock, giveBack, mapError }) {
  let session;
  let watch = null;
  const done = (failed) => {
    if (!pooled || session === undefined) return;
    const broken = failed || (watch !== null && watch.error !== null);
    watch?.stop(broken);
    giveBack(session, broken, watch?.error ?? null);
  };
  try {
    ({ session, watch = null } = await open());
    if (await tryLock(session)) {
      return async () => {
        try {
          await unlock(session);
        } catch {
          // A lost session has freed its locks already.
        } finally {
          done(false);
        }
      };
    }
  } catch (error) {
    done(true);
    throw mapError(error);
  }
  done(false);
  return null;
}

/**
 * begin(), work(), commit() on one connection, rolled back on `raw` (past the
 * call's deadline, so an abandoned transaction on a shared connection is
 * rolled back too) when work or the commit fails: the error is thrown as it
 * was. Answers work's value and what commit() answered.
 */
async function betweenBeginAndCommit(raw, { begin, work, commit }) {
  await begin();
  try {
    const result = await work();
    return { result, committed: await commit() };
  } catch (error) {
    await rollbackQuietly(raw);
    throw error;
  }
}

/** ROLLBACK on a server connection; a connection that is gone rolls back by itself. */
async function rollbackQuietly(connection) {
  try {
    await connection.query('ROLLBACK');
  } catch {
    // The connection is gone; the server rolls the transaction back itself.
  }
}

module.exports = {
  transactionOptions,
  checkTimeLeft,
  Deadline,
  withDeadline,
  ConnectionWatch,
  watchClient,
  guardedConnection,
  Serializer,
  betweenBeginAndCommit,
  rollbackQuietly,
  sessionLock,
};
