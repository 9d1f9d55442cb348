'use strict';
// tx.client as the host gets it: the driver's own handle of idemflow's
// transaction, behind a guard that keeps the driver's API (so an ORM takes
// it as its connection) and looks at the transaction control sent through
// it. A transaction of the host's own becomes a savepoint of idemflow's
// transaction: BEGIN / START TRANSACTION is SAVEPOINT idemflow_host_<n>,
// COMMIT / END is RELEASE SAVEPOINT of it, ROLLBACK is ROLLBACK TO and
// RELEASE of it; the host's own SAVEPOINT, RELEASE and ROLLBACK TO of names
// of its own pass as they are, so an ORM's transaction() and its nested
// ones work inside idemflow's. What cannot be mapped is refused before it is
// sent, with INVALID_ARGUMENT naming the misuse: a COMMIT or ROLLBACK with no
// transaction of the host's open, a BEGIN inside one, a savepoint of
// idemflow's own (`idemflow_…`), a transaction with options of its own
// (isolation, access mode, AND CHAIN), control inside a text of many
// statements, ending the connection, and on MySQL/MariaDB a statement that
// commits implicitly (DDL and the rest of the server's list). Once a
// statement is refused, the guard refuses everything after it until the
// callback ends: the delivery fails with that refusal and nothing of it is
// written, even when the callback caught the error.

const { IdemflowError } = require('../core/errors.cjs');

/** The prefix of every savepoint name idemflow uses (SqlTransaction's and the host transactions' mapped here). */
const OWN_PREFIX = 'idemflow_';

// ---- Reading a statement's leading words

const SPACE = new Set([0x20, 0x09, 0x0a, 0x0d, 0x0c, 0x0b]);
const isWordStart = (c) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c > 0x7f;
const isWordPart = (c) => isWordStart(c) || (c >= 0x30 && c <= 0x39) || c === 0x24;
/** The tokens kept of each statement: enough to recognise every form below (MariaDB's SET STATEMENT … FOR among them). */
const LEADING = 24;

/**
 * The statements of `text`, each as its leading tokens: `{ word }` (a bare
 * word, upper-cased), `{ name }` (a quoted identifier, as written) or
 * `{ other }`. Comments (`--`, `/* … *\/`, nested on PostgreSQL; `#` on
 * MySQL), string literals (with '' and, where the dialect has them,
 * backslash escapes and E'' strings), dollar quotes (PostgreSQL) and quoted
 * identifiers are read as the server reads them, so a `;` inside one does not
 * split a statement. MySQL's executable comments (`/*! … *\/`, `/*M! … *\/`)
 * are read as the code they hold. An empty statement (`;;`) is no statement.
 */
function statementsOf(text, flavour) {
  const mysql = flavour === 'mysql';
  const statements = [];
  let tokens = [];
  const n = text.length;
  // Without a `;` there is one statement, and its leading words are all that matters.
  const single = !text.includes(';');
  let executable = 0;
  let i = 0;
  const push = (token) => {
    if (tokens.length < LEADING) tokens.push(token);
  };
  while (i < n) {
    if (single && tokens.length >= LEADING) break;
    const c = text.charCodeAt(i);
    if (c === 0x3b) {
      if (tokens.length > 0) statements.push(tokens);
      tokens = [];
      i += 1;
    } else if (SPACE.has(c)) {
      i += 1;
    } else if ((c === 0x2d && text.charCodeAt(i + 1) === 0x2d) || (mysql && c === 0x23)) {
      const end = text.indexOf('\n', i);
      i = end === -1 ? n : end + 1;
    } else if (c === 0x2f && text.charCodeAt(i + 1) === 0x2a) {
      const bang = mysql ? /^\/\*M?!\d*/.exec(text.slice(i, i + 12)) : null;
      if (bang) {
        executable += 1;
        i += bang[0].length;
      } else {
        i = commentEnd(text, i, !mysql && flavour !== 'sqlite');
      }
    } else if (executable > 0 && c === 0x2a && text.charCodeAt(i + 1) === 0x2f) {
      executable -= 1;
      i += 2;
    } else if (c === 0x27) {
      i = quotedEnd(text, i, 0x27, mysql);
      push({ other: 'string' });
    } else if (c === 0x22 || (c === 0x60 && mysql) || (c === 0x5b && flavour === 'sqlite')) {
      const close = c === 0x5b ? 0x5d : c;
      const end = quotedEnd(text, i, close, false);
      push({ name: text.slice(i + 1, end - 1).replaceAll(String.fromCharCode(close, close), String.fromCharCode(close)) });
      i = end;
    } else if (c === 0x24 && !mysql && flavour !== 'sqlite') {
      const tag = /^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$/.exec(text.slice(i, i + 66));
      if (tag) {
        const end = text.indexOf(tag[0], i + tag[0].length);
        i = end === -1 ? n : end + tag[0].length;
        push({ other: 'string' });
      } else {
        i += 1;
        push({ other: '$' });
      }
    } else if (isWordStart(c)) {
      let j = i + 1;
      while (j < n && isWordPart(text.charCodeAt(j))) j += 1;
      const word = text.slice(i, j);
      // PostgreSQL's E'…' (and MySQL's X'…', N'…', _charset'…') are one string literal.
      if (text.charCodeAt(j) === 0x27) {
        i = quotedEnd(text, j, 0x27, mysql || word.toUpperCase() === 'E');
        push({ other: 'string' });
      } else {
        push({ word: word.toUpperCase() });
        i = j;
      }
    } else {
      push({ other: text[i] });
      i += 1;
    }
  }
  if (tokens.length > 0) statements.push(tokens);
  return statements;
}

/** Where a `/* … *\/` comment that starts at `i` ends (PostgreSQL nests them). */
function commentEnd(text, i, nests) {
  let depth = 1;
  let j = i + 2;
  while (j < text.length) {
    if (text.startsWith('*/', j)) {
      depth -= 1;
      j += 2;
      if (depth === 0 || !nests) return j;
    } else if (nests && text.startsWith('/*', j)) {
      depth += 1;
      j += 2;
    } else {
      j += 1;
    }
  }
  return text.length;
}

/** Where a literal or quoted identifier that opens at `i` ends: a doubled quote stays inside, and `backslash` escapes. */
function quotedEnd(text, i, close, backslash) {
  let j = i + 1;
  while (j < text.length) {
    const c = text.charCodeAt(j);
    if (backslash && c === 0x5c) {
      j += 2;
    } else if (c === close) {
      if (text.charCodeAt(j + 1) === close) j += 2;
      else return j + 1;
    } else {
      j += 1;
    }
  }
  return text.length;
}

// ---- What a statement does to the transaction

/**
 * MySQL/MariaDB's statements that commit the transaction before they run
 * (MariaDB's "SQL statements that cause an implicit commit"; MySQL's "Statements
 * That Cause an Implicit Commit"), by their first word: every ALTER, CREATE,
 * DROP (but CREATE/DROP TEMPORARY TABLE), RENAME, TRUNCATE, GRANT, REVOKE,
 * the table maintenance statements, LOCK/UNLOCK TABLES, FLUSH, RESET,
 * replication control, plugins, LOAD INDEX, CACHE INDEX, SHUTDOWN.
 */
const IMPLICIT_COMMIT = new Set([
  'ALTER',
  'CREATE',
  'DROP',
  'RENAME',
  'TRUNCATE',
  'GRANT',
  'REVOKE',
  'ANALYZE',
  'CHECK',
  'OPTIMIZE',
  'REPAIR',
  'LOCK',
  'UNLOCK',
  'FLUSH',
  'RESET',
  'CHANGE',
  'INSTALL',
  'UNINSTALL',
  'LOAD',
  'CACHE',
  'SHUTDOWN',
]);
/** Replication control: START SLAVE / REPLICA / GROUP_REPLICATION and STOP of them commit too. */
const REPLICATION = new Set(['SLAVE', 'REPLICA', 'ALL', 'GROUP_REPLICATION']);

const isWord = (token, ...words) => token?.word !== undefined && words.includes(token.word);

/** A savepoint's name from its token: unquoted names compare lower-cased, as the servers fold them. */
function nameOf(token) {
  if (token === undefined) return null;
  if (token.name !== undefined) return token.name;
  return token.word === undefined ? null : token.word.toLowerCase();
}

/**
 * What one statement (its leading tokens) does to the transaction:
 * `{ kind: 'other' }` for everything that leaves it open; 'begin', 'commit',
 * 'rollback' (plain forms only); 'savepoint', 'release', 'rollback-to' with
 * the `name`; `{ kind: 'refuse', reason, why }` for what cannot be mapped.
 */
function controlOf(tokens, flavour) {
  const [first, second, third, fourth] = tokens;
  const word = first.word;
  if (word === undefined) return OTHER;
  const rest = (from) => tokens.slice(from);
  switch (word) {
    case 'BEGIN': {
      // PostgreSQL: BEGIN [WORK|TRANSACTION]; SQLite: BEGIN [DEFERRED|IMMEDIATE|EXCLUSIVE] [TRANSACTION]; MySQL: BEGIN [WORK].
      let at = 1;
      if (flavour === 'sqlite' && isWord(tokens[at], 'DEFERRED', 'IMMEDIATE', 'EXCLUSIVE')) at += 1;
      if (isWord(tokens[at], 'WORK', 'TRANSACTION')) at += 1;
      return rest(at).length === 0 ? BEGIN : withOptions('BEGIN');
    }
    case 'START':
      if (isWord(second, 'TRANSACTION')) return tokens.length === 2 ? BEGIN : withOptions('START TRANSACTION');
      if (flavour === 'mysql' && isWord(second, ...REPLICATION)) return implicitCommit(word);
      return OTHER;
    case 'STOP':
      return flavour === 'mysql' && isWord(second, ...REPLICATION) ? implicitCommit(word) : OTHER;
    case 'COMMIT':
    case 'END':
      if (word === 'END' && flavour === 'mysql') return OTHER;
      if (tokens.length === 1 || (tokens.length === 2 && isWord(second, 'WORK', 'TRANSACTION'))) return COMMIT;
      return refuse('transaction-control', `${word} with options (AND CHAIN, PREPARED, RELEASE) ends idemflow's transaction`);
    case 'ABORT':
    case 'ROLLBACK': {
      if (word === 'ABORT' && flavour !== 'postgres') return OTHER;
      let at = 1;
      if (isWord(tokens[at], 'WORK', 'TRANSACTION')) at += 1;
      if (tokens.length === at) return ROLLBACK;
      if (word === 'ROLLBACK' && isWord(tokens[at], 'TO')) {
        at += 1;
        if (isWord(tokens[at], 'SAVEPOINT') && tokens.length > at + 1) at += 1;
        return savepointStatement('rollback-to', tokens[at], tokens.length === at + 1);
      }
      return refuse('transaction-control', `${word} with options (AND CHAIN, PREPARED, RELEASE) ends idemflow's transaction`);
    }
    case 'SAVEPOINT':
      return savepointStatement('savepoint', second, tokens.length === 2);
    case 'RELEASE': {
      const named = isWord(second, 'SAVEPOINT') && tokens.length > 2 ? third : second;
      return savepointStatement('release', named, tokens.length === (named === third ? 3 : 2));
    }
    case 'XA':
      // MySQL/MariaDB's XA transactions: control of a transaction of their own, on idemflow's session.
      return flavour === 'mysql' ? refuse('transaction-control', 'XA transaction control') : OTHER;
    case 'PREPARE':
      // PostgreSQL's PREPARE TRANSACTION ends the session's transaction; PREPARE name AS … does not.
      return flavour === 'postgres' && isWord(second, 'TRANSACTION') ? refuse('transaction-control', 'PREPARE TRANSACTION') : OTHER;
    case 'SET':
      // SET TRANSACTION (an isolation level, an access mode, a snapshot) is for a transaction not yet begun:
      // how an ORM's transaction with options starts (Drizzle on PGlite, Knex on MySQL); a savepoint takes none.
      if (isWord(second, 'TRANSACTION') && flavour !== 'sqlite') return withOptions('SET TRANSACTION');
      if (flavour !== 'mysql') return OTHER;
      // MariaDB's SET STATEMENT var = value, … FOR statement: what the statement does.
      if (isWord(second, 'STATEMENT')) {
        const at = tokens.findIndex((token) => isWord(token, 'FOR'));
        return at === -1 || at === tokens.length - 1 ? OTHER : controlOf(tokens.slice(at + 1), flavour);
      }
      // SET autocommit = 1 commits; SET [SESSION|GLOBAL|@@…] autocommit likewise.
      for (const token of [second, third, fourth])
        if (token?.word?.replace(/^@@(SESSION\.|LOCAL\.)?/, '') === 'AUTOCOMMIT') return implicitCommit('SET autocommit');
      return OTHER;
    default:
      break;
  }
  if (flavour !== 'mysql' || !IMPLICIT_COMMIT.has(word)) return OTHER;
  // CREATE/DROP TEMPORARY TABLE is the exception; CREATE OR REPLACE TEMPORARY likewise.
  if ((word === 'CREATE' || word === 'DROP') && tokens.some((token) => isWord(token, 'TEMPORARY'))) return OTHER;
  if (word === 'LOAD' && !isWord(second, 'INDEX')) return OTHER; // LOAD DATA / LOAD XML do not commit on InnoDB
  if (word === 'CHECK' && !isWord(second, 'TABLE')) return OTHER;
  if (word === 'CHANGE' && !isWord(second, 'MASTER', 'REPLICATION')) return OTHER;
  if (word === 'CACHE' && !isWord(second, 'INDEX')) return OTHER;
  return implicitCommit(word);
}

const OTHER = Object.freeze({ kind: 'other' });
const BEGIN = Object.freeze({ kind: 'begin' });
const COMMIT = Object.freeze({ kind: 'commit' });
const ROLLBACK = Object.freeze({ kind: 'rollback' });

function refuse(reason, why) {
  return { kind: 'refuse', reason, why };
}

function withOptions(statement) {
  return refuse(
    'transaction-control',
    `${statement} with options (an isolation level, an access mode): a transaction inside idemflow's is a savepoint and takes none`,
  );
}

function implicitCommit(statement) {
  return refuse('implicit-commit', `${statement} commits the transaction implicitly on MySQL/MariaDB`);
}

/** SAVEPOINT / RELEASE / ROLLBACK TO `token`: passed through for the host's names, refused for idemflow's. */
function savepointStatement(kind, token, alone) {
  const name = nameOf(token);
  if (name === null || !alone) return OTHER; // not a form the server takes: let it answer
  if (name.toLowerCase().startsWith(OWN_PREFIX)) {
    return refuse('transaction-control', `${kind.toUpperCase().replace('-', ' ')} of idemflow's own savepoint ${name}`);
  }
  return { kind, name };
}

// ---- The guard's state, per transaction

/**
 * The check before idemflow's COMMIT found its transaction ended or replaced
 * (by something that went past the guard: a statement on the driver's
 * connection beneath the handle, a stored procedure that commits): rolled
 * back, with INVALID_ARGUMENT, as the misuse it is.
 */
function transactionEnded(why) {
  return new IdemflowError(
    'INVALID_ARGUMENT',
    `idemflow's transaction was ended or replaced before its commit (${why}): something committed or rolled back on tx.client's connection behind idemflow's back; what it wrote may be committed without the receipt`,
    { details: { field: 'tx.client', reason: 'transaction-ended' } },
  );
}

function misuseError(reason, why, statement, field = 'tx.client') {
  return new IdemflowError(
    'INVALID_ARGUMENT',
    `tx.client refused ${why}: idemflow ends its transaction itself (a transaction of your own inside it is a savepoint; docs/adapters.md, "Your own writes")`,
    {
      details: {
        field,
        reason,
        ...(statement === undefined ? {} : { statement: statement.length > 200 ? `${statement.slice(0, 200)}…` : statement }),
      },
    },
  );
}

/** A PostgreSQL server's error (pg's DatabaseError, PGlite's): a SQLSTATE and a severity. */
const isServerError = (error) =>
  error !== null &&
  typeof error === 'object' &&
  typeof error.code === 'string' &&
  /^[0-9A-Z]{5}$/.test(error.code) &&
  typeof error.severity === 'string';

/**
 * The guard of one transaction's tx.client: `plan(text)` says what to send
 * for a statement (null: the text as it is; else the statements that map it),
 * or throws the refusal. The host's transactions are a stack of savepoints
 * (one open at a time: BEGIN inside one is refused, as the server would warn
 * or commit); the host's own savepoints are tracked so that a RELEASE or
 * ROLLBACK TO of one made before the host's BEGIN, which would undo that
 * BEGIN's savepoint behind its back, is refused.
 */
class ClientGuard {
  #flavour;
  #count = 0;
  /** The open savepoints sent through the guard, oldest first: `{ name, host }` (host: a mapped BEGIN). */
  #stack = [];
  #misuse = null;
  #closed = false;
  /**
   * PostgreSQL: the server's error of the host's last statement, if it
   * failed. A failed statement aborts the transaction until a rollback (to a
   * savepoint) succeeds, so a host statement that succeeds after it clears it.
   */
  #failed = null;

  constructor(flavour) {
    this.#flavour = flavour;
  }

  /** Whether a transaction of the host's (a mapped BEGIN) is open. */
  get open() {
    return this.#stack.some((entry) => entry.host);
  }

  /**
   * The refusal of a call on the handle that would end the connection
   * (release(), end(), destroy(), close()): nothing was sent, and the
   * transaction is as it was, so a callback that catches it goes on.
   */
  refuseCall(method, why) {
    throw misuseError('released-inside-transaction', why, undefined, `tx.client.${method}`);
  }

  /** Whether `text` holds transaction control (prepare: the statement maps when it runs); throws after a refusal. */
  controls(text) {
    this.#usable(text);
    if (typeof text !== 'string') return false;
    return statementsOf(text, this.#flavour).some((tokens) => controlOf(tokens, this.#flavour).kind !== 'other');
  }

  #usable(text) {
    if (this.#closed) {
      throw misuseError('after-transaction', "a statement after idemflow's transaction ended (tx kept past the callback)", text);
    }
    if (this.#misuse !== null) throw this.#misuse;
  }

  /**
   * What the callback that just ended left wrong, or null; the next callback
   * starts afresh. A refusal always; a transaction of its own left open only
   * when it returned (`threw`: its throw rolls that back with the rest).
   */
  settle(threw = false, eventId = undefined) {
    const misuse =
      this.#misuse ??
      (!threw && this.open
        ? misuseError(
            'transaction-left-open',
            'a callback that returned with a transaction of its own open (BEGIN without COMMIT or ROLLBACK)',
          )
        : null) ??
      (!threw && this.#failed !== null ? abortedByHost(this.#failed, eventId) : null);
    this.#misuse = null;
    this.#stack = [];
    this.#failed = null;
    return misuse;
  }

  /**
   * `pending` (a host statement's answer) as it is, noting on PostgreSQL
   * whether it failed on the server (the transaction is aborted then) or
   * succeeded (it is not). Anything but a promise passes untouched (a
   * Submittable of pg's).
   */
  observe(pending) {
    if (this.#flavour !== 'postgres' || typeof pending?.then !== 'function') return pending;
    return pending.then(
      (result) => {
        this.#failed = null;
        return result;
      },
      (error) => {
        if (isServerError(error)) this.#failed ??= error;
        throw error;
      },
    );
  }

  /** After idemflow's transaction ended: every statement is refused (a handle kept past the callback). */
  close() {
    this.#closed = true;
  }

  #refused(error) {
    this.#misuse ??= error;
    return error;
  }

  /**
   * The statements to send for `text` instead of it, or null to send it as
   * it is; throws the refusal (and keeps it) for what cannot be mapped.
   */
  plan(text) {
    this.#usable(text);
    if (typeof text !== 'string') return null;
    const statements = statementsOf(text, this.#flavour);
    if (statements.length === 0) return null;
    if (statements.length > 1) {
      for (const tokens of statements) {
        if (controlOf(tokens, this.#flavour).kind !== 'other') {
          throw this.#refused(misuseError('transaction-control', 'transaction control inside a text of many statements', text));
        }
      }
      return null;
    }
    const control = controlOf(statements[0], this.#flavour);
    switch (control.kind) {
      case 'other':
        return null;
      case 'refuse':
        throw this.#refused(misuseError(control.reason, control.why, text));
      case 'begin': {
        if (this.open) throw this.#refused(misuseError('transaction-control', 'a BEGIN inside a transaction of your own', text));
        this.#count += 1;
        const name = `${OWN_PREFIX}host_${this.#count}`;
        this.#stack.push({ name, host: true });
        return [`SAVEPOINT ${name}`];
      }
      case 'commit':
      case 'rollback': {
        const at = this.#stack.findLastIndex((entry) => entry.host);
        if (at === -1) {
          throw this.#refused(
            misuseError(
              'transaction-control',
              `a ${control.kind.toUpperCase()} with no transaction of your own open (it would end idemflow's)`,
              text,
            ),
          );
        }
        const { name } = this.#stack[at];
        this.#stack.length = at;
        return control.kind === 'commit' ? [`RELEASE SAVEPOINT ${name}`] : [`ROLLBACK TO SAVEPOINT ${name}`, `RELEASE SAVEPOINT ${name}`];
      }
      case 'savepoint':
        this.#stack.push({ name: control.name, host: false });
        return null;
      default: {
        // release, rollback-to of a name of the host's
        const at = this.#stack.findLastIndex((entry) => !entry.host && entry.name === control.name);
        if (at === -1) return null; // not one made here: the server answers
        if (this.#stack.slice(at + 1).some((entry) => entry.host)) {
          throw this.#refused(
            misuseError(
              'transaction-control',
              `${control.kind.toUpperCase().replace('-', ' ')} of a savepoint made before your own BEGIN`,
              text,
            ),
          );
        }
        this.#stack.length = control.kind === 'release' ? at : at + 1;
        return null;
      }
    }
  }
}

// ---- The handles

/** The text of a statement handed to a driver's query: a string, or a config object's `text` / `sql`. */
function textOf(query) {
  if (typeof query === 'string') return query;
  if (query !== null && typeof query === 'object') {
    if (typeof query.text === 'string') return query.text;
    if (typeof query.sql === 'string') return query.sql;
  }
  return undefined;
}

/**
 * `raw` behind a Proxy: its own properties and methods (bound to it, so a
 * native method sees its own receiver), with `overrides` in their place.
 */
function proxied(raw, overrides) {
  const bound = new Map();
  return new Proxy(raw, {
    get(target, key) {
      if (Object.hasOwn(overrides, key)) return overrides[key];
      const value = Reflect.get(target, key, target);
      if (typeof value !== 'function' || key === 'constructor') return value;
      let fn = bound.get(key);
      if (fn === undefined || fn.original !== value) {
        fn = Object.assign(value.bind(target), { original: value });
        bound.set(key, fn);
      }
      return fn;
    },
    set(target, key, value) {
      return Reflect.set(target, key, value, target);
    },
  });
}

/** An async driver call answered through a callback when the caller passed one (the last argument), else as a promise. */
function answer(promise, callback, spread) {
  if (typeof callback !== 'function') return promise;
  promise.then(
    (result) => (spread ? callback(null, ...result) : callback(null, result)),
    (error) => callback(error),
  );
  return undefined;
}

/**
 * A callback that returned after one of its statements failed on
 * PostgreSQL: the transaction is aborted, so nothing of it can commit. The
 * callback's failure (HANDLER_FAILED, its statement's error as the cause),
 * not the store's 25P02 on idemflow's next statement.
 */
function abortedByHost(error, eventId) {
  const which = eventId === undefined ? 'the callback failed' : `onApplied failed for event ${eventId}`;
  return new IdemflowError(
    'HANDLER_FAILED',
    `${which}: it returned after its statement failed (${error.message}), which aborted the transaction; catch such an error inside a savepoint of your own (a nested transaction) to go on`,
    { details: { ...(eventId === undefined ? {} : { eventId }), reason: 'statement-failed', driverCode: error.code }, cause: error },
  );
}

function refusedCall(guard, method, why) {
  return () => guard.refuseCall(method, why);
}

/**
 * pg's `Client` / `PoolClient` (and PGlite's transaction): query(text |
 * config, values?, callback?) with control mapped or refused; release(),
 * end() refused; PGlite's exec, sql and rollback() likewise. `before()`
 * answers null or a promise to wait for before a host's statement is sent.
 */
function guardPostgres(raw, guard, { pglite = false, before = () => null } = {}) {
  const send = async (statements) => {
    let result;
    for (const sql of statements) result = await raw.query(sql);
    return result;
  };
  const overrides = {
    query(...args) {
      const [query, values, callback] = args;
      const cb = typeof callback === 'function' ? callback : typeof values === 'function' ? values : undefined;
      let plan;
      try {
        plan = guard.plan(textOf(query));
      } catch (error) {
        return answer(Promise.reject(error), cb);
      }
      const pending = before();
      if (plan === null) {
        if (pending === null && cb === undefined) return guard.observe(raw.query(...args));
        const sent = () => raw.query(...args.filter((arg) => typeof arg !== 'function'));
        return answer(guard.observe(pending === null ? sent() : pending.then(sent)), cb);
      }
      return answer(guard.observe(pending === null ? send(plan) : pending.then(() => send(plan))), cb);
    },
    release: refusedCall(guard, 'release', 'tx.client.release(): idemflow releases the connection when the transaction ends'),
    end: refusedCall(guard, 'end', "tx.client.end(): the connection holds idemflow's transaction"),
  };
  if (pglite) {
    overrides.exec = async (text, options) => {
      const plan = guard.plan(text);
      await before();
      return guard.observe(plan === null ? raw.exec(text, options) : raw.exec(plan.join('; '), options));
    };
    overrides.sql = async (strings, ...params) => {
      const text = Array.isArray(strings) ? strings.join('$0') : String(strings);
      const plan = guard.plan(text);
      await before();
      return guard.observe(plan === null ? raw.sql(strings, ...params) : send(plan));
    };
    overrides.rollback = async () => {
      await send(guard.plan('ROLLBACK'));
    };
    // PGlite's own transaction(fn) (Drizzle's db.transaction() calls it): a savepoint, fn given this handle.
    overrides.transaction = async (fn) => {
      await before();
      await send(guard.plan('BEGIN'));
      let result;
      try {
        result = await fn(handle);
      } catch (error) {
        if (guard.open) await send(guard.plan('ROLLBACK'));
        throw error;
      }
      await send(guard.plan('COMMIT'));
      return result;
    };
  }
  const handle = proxied(raw, overrides);
  return handle;
}

/**
 * A mysql2 connection, promise flavour: query / execute (sql | options,
 * values?), answered as a promise of [rows, fields], or through a callback
 * given last (err, rows, fields), which is how Knex calls it;
 * beginTransaction / commit / rollback mapped like their statements;
 * release(), end(), destroy() refused.
 */
function guardMysql(raw, guard) {
  const send = async (statements) => {
    let result;
    for (const sql of statements) result = await raw.query(sql);
    return result;
  };
  const call = (method) => (query, values, callback) => {
    const cb = typeof callback === 'function' ? callback : typeof values === 'function' ? values : undefined;
    const args = [query, values].slice(0, typeof values === 'function' || values === undefined ? 1 : 2);
    let plan;
    try {
      plan = guard.plan(textOf(query));
    } catch (error) {
      return answer(Promise.reject(error), cb, true);
    }
    return answer(plan === null ? raw[method](...args) : send(plan), cb, true);
  };
  const control = (statement) => (callback) => {
    let plan;
    try {
      plan = guard.plan(statement);
    } catch (error) {
      return answer(Promise.reject(error), callback);
    }
    return answer(
      send(plan).then(() => undefined),
      callback,
    );
  };
  return proxied(raw, {
    query: call('query'),
    execute: call('execute'),
    beginTransaction: control('START TRANSACTION'),
    commit: control('COMMIT'),
    rollback: control('ROLLBACK'),
    release: refusedCall(guard, 'release', 'tx.client.release(): idemflow releases the connection when the transaction ends'),
    end: refusedCall(guard, 'end', "tx.client.end(): the connection holds idemflow's transaction"),
    destroy: refusedCall(guard, 'destroy', "tx.client.destroy(): the connection holds idemflow's transaction"),
  });
}

/**
 * A better-sqlite3 Database or node:sqlite DatabaseSync: prepare(sql) and
 * exec(sql) with control mapped or refused (a prepared control statement
 * maps each time it runs); its own transaction(fn) (better-sqlite3) nests
 * as savepoints by itself inside idemflow's; close() refused.
 */
function guardSqlite(raw, guard, self) {
  const send = (statements) => {
    for (const sql of statements) raw.exec(sql);
  };
  const controlStatement = (sql) => {
    const run = () => {
      send(guard.plan(sql) ?? [sql]);
    };
    const statement = {
      source: sql,
      reader: false,
      run: () => {
        run();
        return { changes: 0, lastInsertRowid: 0 };
      },
      all: () => {
        run();
        return [];
      },
      get: () => {
        run();
        return undefined;
      },
      iterate: () => {
        run();
        return [][Symbol.iterator]();
      },
      columns: () => [],
    };
    for (const chained of ['bind', 'raw', 'pluck', 'expand', 'safeIntegers', 'setReadBigInts', 'setReturnArrays'])
      statement[chained] = () => statement;
    return statement;
  };
  return proxied(raw, {
    prepare(sql, ...rest) {
      return guard.controls(sql) ? controlStatement(sql) : raw.prepare(sql, ...rest);
    },
    exec(sql) {
      const plan = guard.plan(sql);
      if (plan === null) raw.exec(sql);
      else send(plan);
      return self();
    },
    close: refusedCall(guard, 'close', "tx.client.close(): the handle holds idemflow's transaction"),
  });
}

module.exports = { ClientGuard, transactionEnded, guardPostgres, guardMysql, guardSqlite };
