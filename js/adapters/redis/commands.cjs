// @ts-check
'use strict';
// The host's own Redis writes inside a transaction (tx.client in onApplied):
// queued, not sent, and run by the transaction's commit script after
// idemflow's checks, so they commit with the receipt or not at all. Only
// writes whose failure can be ruled out before the script writes anything
// are taken (Redis does not undo a script's earlier writes when a later
// command fails): a wrong type or a counter that is not a whole number is
// refused at the call when this transaction's own queue already says so,
// and otherwise checked by the script against the stored key before its
// first write. Reads are not queued: a host reads through its own client,
// outside the transaction, and never sees its pending writes.

const { invalidArgument } = require('../../store/errors.cjs');

/**
 * @typedef {{ type: string | null, int?: boolean, shape: string }} Spec
 * @typedef {{ type: string | null | undefined, known: boolean, values: Map<string, string | null> }} KeyState
 */

/** command → the type of key it writes (null: any), whether it needs a whole number there, and how its arguments run. @type {Readonly<Record<string, Spec>>} */
const COMMANDS = Object.freeze({
  set: { type: 'string', shape: 'key value [EX seconds | PX ms]' },
  del: { type: null, shape: 'key [key ...]' },
  incrby: { type: 'string', int: true, shape: 'key increment' },
  hset: { type: 'hash', shape: 'key field value [field value ...]' },
  hdel: { type: 'hash', shape: 'key field [field ...]' },
  hincrby: { type: 'hash', int: true, shape: 'key field increment' },
  sadd: { type: 'set', shape: 'key member [member ...]' },
  srem: { type: 'set', shape: 'key member [member ...]' },
  zadd: { type: 'zset', shape: 'key score member [score member ...]' },
  zrem: { type: 'zset', shape: 'key member [member ...]' },
  rpush: { type: 'list', shape: 'key element [element ...]' },
  lpush: { type: 'list', shape: 'key element [element ...]' },
  expire: { type: null, shape: 'key seconds' },
  pexpire: { type: null, shape: 'key milliseconds' },
});

const WHOLE = /^-?(0|[1-9][0-9]{0,17})$/;
const SCORE = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;

/**
 * @param {string} message
 * @param {string} reason
 * @param {Record<string, unknown>} [details]
 */
function refused(message, reason, details = {}) {
  return invalidArgument(`tx.client: ${message}`, { reason, ...details });
}

/**
 * An argument as the text Redis receives: a string, or a safe integer in decimal.
 * @param {unknown} value
 * @param {string} command
 * @param {number} position
 */
function textOf(value, command, position) {
  if (typeof value === 'string') return value;
  if (Number.isSafeInteger(value)) return String(value);
  throw refused(`${command}'s argument ${position} must be a string or a safe integer`, 'not a string', { command, position });
}

/**
 * The host's queue of one transaction. `protect(key)` throws for a key the
 * store owns. What it queues is `{ writes, checks }`: commands for the commit
 * script, and the type checks the script makes before it writes.
 */
class HostCommands {
  /** @type {string[][]} */
  writes = [];
  /** @type {string[][]} */
  checks = [];
  /** key → { type, known, values: Map<field | '', string | null> }: what this queue says of a key so far @type {Map<string, KeyState>} */
  #keys = new Map();
  /** Each change of #keys, to go back to a mark: [key, the state before (undefined: none)] @type {[string, KeyState | undefined][]} */
  #undo = [];
  #protect;

  /** @param {(key: string) => void} protect */
  constructor(protect) {
    this.#protect = protect;
  }

  /** Where to go back to (a savepoint). */
  mark() {
    return { writes: this.writes.length, checks: this.checks.length, undo: this.#undo.length };
  }

  /** @param {ReturnType<HostCommands['mark']>} mark */
  restore(mark) {
    this.writes.length = mark.writes;
    this.checks.length = mark.checks;
    while (this.#undo.length > mark.undo) {
      const [key, before] = /** @type {[string, KeyState | undefined]} */ (this.#undo.pop());
      if (before === undefined) this.#keys.delete(key);
      else this.#keys.set(key, before);
    }
  }

  /**
   * A key's new state, the old one kept for restore().
   * @param {string} key
   * @param {KeyState} state
   */
  #set(key, state) {
    this.#undo.push([key, this.#keys.get(key)]);
    this.#keys.set(key, state);
  }

  /**
   * Queues one command: `name` (case-insensitive) and its arguments.
   * @param {unknown} name
   * @param {unknown[]} args
   */
  queue(name, args) {
    const command = typeof name === 'string' ? name.toLowerCase() : '';
    const spec = COMMANDS[command];
    if (spec === undefined) {
      throw refused(`${String(name)} cannot be queued; the writes it takes are ${Object.keys(COMMANDS).join(', ')}`, 'command not queued', {
        command: String(name),
      });
    }
    const texts = args.map((arg, i) => textOf(arg, command, i + 1));
    this.#shaped(command, spec, texts);
    this.#touch(command, spec, texts);
    this.writes.push([command.toUpperCase(), ...texts]);
  }

  /**
   * The argument count and forms each command takes.
   * @param {string} command
   * @param {Spec} spec
   * @param {string[]} texts
   */
  #shaped(command, spec, texts) {
    const bad = () => refused(`${command} takes ${spec.shape}`, 'wrong arguments', { command });
    const [, ...rest] = texts;
    if (texts.length === 0 || texts[0].length === 0) throw bad();
    for (const key of command === 'del' ? texts : [texts[0]]) this.#protect(key);
    switch (command) {
      case 'set':
        if (!(rest.length === 1 || (rest.length === 3 && /^(EX|PX)$/i.test(rest[1]) && /^[1-9][0-9]*$/.test(rest[2])))) throw bad();
        return;
      case 'del':
        return;
      case 'incrby':
        if (rest.length !== 1 || !WHOLE.test(rest[0])) throw bad();
        return;
      case 'hincrby':
        if (rest.length !== 2 || !WHOLE.test(rest[1])) throw bad();
        return;
      case 'hset':
      case 'zadd':
        if (rest.length === 0 || rest.length % 2 !== 0) throw bad();
        if (command === 'zadd' && !rest.every((value, i) => i % 2 === 1 || SCORE.test(value))) throw bad();
        return;
      case 'expire':
      case 'pexpire':
        if (rest.length !== 1 || !/^[0-9]+$/.test(rest[0])) throw bad();
        return;
      default:
        if (rest.length === 0) throw bad();
    }
  }

  /**
   * What the queue says of a key, as a copy this command may change: `type`
   * undefined (unknown: the stored key decides), null (absent) or a type;
   * `known` when every value is the queue's.
   * @param {string} key
   * @returns {KeyState}
   */
  #stateOf(key) {
    const before = this.#keys.get(key);
    return before === undefined
      ? { type: undefined, known: false, values: new Map() }
      : { type: before.type, known: before.known, values: new Map(before.values) };
  }

  /**
   * Brings the key's state up to this command, refusing one the queue already shows would fail.
   * @param {string} command
   * @param {Spec} spec
   * @param {string[]} texts
   */
  #touch(command, spec, texts) {
    const [key, ...rest] = texts;
    if (command === 'del') {
      for (const deleted of texts) this.#set(deleted, { type: null, known: true, values: new Map() });
      return;
    }
    if (command === 'set') {
      this.#set(key, { type: 'string', known: true, values: new Map([['', rest[0]]]) });
      return;
    }
    if (spec.type === null) return;
    const state = this.#stateOf(key);
    if (state.type === undefined) {
      // Nothing queued says what the key holds: the script checks the stored key before it writes.
      this.checks.push([key, spec.type, '', '']);
    } else if (state.type !== null && state.type !== spec.type) {
      throw refused(`${command} needs a ${spec.type} at ${key}, which this transaction made a ${state.type}`, 'wrong type', {
        command,
        key,
      });
    }
    state.type = spec.type;
    const field = command === 'hincrby' ? rest[0] : '';
    if (spec.int) {
      if (state.values.has(field) || state.known) {
        const value = state.values.get(field);
        if (typeof value === 'string' && !WHOLE.test(value)) {
          throw refused(`${command} needs a whole number at ${key}${field ? ` field ${field}` : ''}`, 'not a whole number', {
            command,
            key,
          });
        }
      } else {
        this.checks.push([key, spec.type, 'int', field]);
      }
      state.values.set(field, null); // a whole number from now on, its value not kept
    } else if (command === 'hset') {
      for (let i = 0; i < rest.length; i += 2) state.values.set(rest[i], rest[i + 1]);
    } else if (command === 'hdel') {
      for (const removed of rest) state.values.set(removed, null);
    }
    this.#set(key, state);
  }
}

/**
 * tx.client: `set`, `del`, `incrby`, `hset`, … (COMMANDS) and
 * `command(name, ...args)`, each queued; any other member is refused loudly,
 * so a read or a command that cannot be queued never runs outside the commit.
 * @param {HostCommands} queue
 */
function hostClient(queue) {
  /** @type {Record<string, (...args: any[]) => void>} */
  const methods = Object.create(null);
  for (const name of Object.keys(COMMANDS)) {
    methods[name] = (/** @type {any[]} */ ...args) => {
      queue.queue(name, name === 'hset' && args.length === 2 && isObject(args[1]) ? [args[0], ...Object.entries(args[1]).flat()] : args);
    };
  }
  methods.command = (/** @type {unknown} */ name, /** @type {any[]} */ ...args) => queue.queue(name, args);
  return new Proxy(methods, {
    get(target, property) {
      if (typeof property !== 'string' || property === 'then') return undefined;
      if (property in target) return target[property];
      throw refused(
        `${property} is not a queued write; inside the transaction tx.client queues ${Object.keys(COMMANDS).join(', ')} ` +
          '(reads go through your own client, outside the transaction)',
        'command not queued',
        { command: property },
      );
    },
  });
}

/** @param {unknown} value @returns {value is Record<string, unknown>} */
function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

module.exports = { HostCommands, hostClient };
