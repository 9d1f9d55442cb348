'use strict';
// How a caller's values are read for the decider (packed.cjs lays them out).
//
// A property is read as an own property only (an inherited one is absent),
// each at most once, with `hasOwn` then `[key]`, so an own getter runs and a
// proxy's traps run as they would for any reader. Whatever the read gives is
// laid out for what it is: a string, a number, null, missing, a value of
// another kind, a string too long for its slot, one with a lone surrogate,
// or the message of what the read threw. The core decides on all of it and
// answers every input, errors included: nothing here checks a rule.
//
// Only what the decider may read is read: the event's ids, type and declared
// fields; the receipt's eventId, fingerprint, result (as its JSON text),
// outcome and recordedAt; without a receipt, the workflow's id, status,
// revision and the fields the event type's rules guard or compare (a `when`),
// and, for a fact event of a rule set with `facts`, the workflow's facts map
// as its JSON text.

const { messageOf } = require('./options.cjs');

const hasOwn = Object.hasOwn;
const getPrototypeOf = Object.getPrototypeOf;
const OBJECT_PROTOTYPE = Object.prototype;
const isArray = Array.isArray;
const isView = ArrayBuffer.isView;
const stringify = JSON.stringify;
/** Whether a string has no lone surrogate. */
const wellFormed =
  typeof String.prototype.isWellFormed === 'function'
    ? (text) => text.isWellFormed()
    : (text) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);
const toWellFormed =
  typeof String.prototype.toWellFormed === 'function'
    ? (text) => text.toWellFormed()
    : (text) => text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');

function isArrayValue(value) {
  try {
    return isArray(value);
  } catch {
    return false; // a revoked proxy, which can be neither read nor listed
  }
}

/** A Buffer, typed array, DataView or ArrayBuffer: bytes, not an object to read fields from. */
function isBinary(value) {
  try {
    return isView(value) || value instanceof ArrayBuffer || (typeof SharedArrayBuffer === 'function' && value instanceof SharedArrayBuffer);
  } catch {
    return false;
  }
}

/**
 * The readers over the core's description of the packed layout
 * (`packedDescriptionJson`): `argOf(value)`, the argument kind of an event,
 * receipt or workflow; `put(p, record, key, at, names, same)`, one own
 * property laid out into packing `p`; `readers(plan)`, the reads of one rule
 * set's items; `checkWellFormed(p, entries, perItem)`.
 */
function createReading(described) {
  const { NULL, NUMBER, TOO_LONG, ILL_FORMED, SAME, OTHER, KNOWN, UNREADABLE } = described.tags;
  const KIND = Object.fromEntries(described.kinds.map((name, i) => [name, i]));
  const ARG = described.args;
  const MAX_TEXT = described.maxUnits.text;
  const MAX_RESULT = described.maxUnits.result;
  const MAX_MESSAGE = described.maxUnits.message;

  /** The kind of a value that is neither a string, a number, null nor undefined. */
  function kindOf(value) {
    switch (typeof value) {
      case 'boolean':
        return KIND.boolean;
      case 'bigint':
        return KIND.bigint;
      case 'symbol':
        return KIND.symbol;
      case 'function':
        return KIND.function;
      case 'object':
        return isArrayValue(value) ? KIND.array : KIND.object;
      default:
        return KIND.unknown;
    }
  }

  /** What a caller handed over as an event, a receipt or a workflow. */
  function argOf(value) {
    if (value === undefined) return ARG.MISSING;
    if (value === null) return ARG.NULL;
    if (typeof value === 'string') return ARG.STRING;
    if (typeof value !== 'object') return ARG.OTHER + kindOf(value);
    let prototype;
    try {
      prototype = getPrototypeOf(value);
    } catch {
      prototype = undefined; // a proxy's trap threw: the checks below say what it is
    }
    if (prototype === OBJECT_PROTOTYPE || prototype === null) return ARG.OBJECT;
    if (isArrayValue(value)) return ARG.OTHER + KIND.array;
    return isBinary(value) ? ARG.BINARY : ARG.OBJECT;
  }

  function unreadable(p, at, thrown) {
    const message = toWellFormed(messageOf(thrown)).slice(0, MAX_MESSAGE);
    p.entries[at] = UNREADABLE - message.length;
    p.strings[at] = message;
    p.joined += message;
  }

  /** Lays a value out at `at`. */
  function lay(p, at, value, maxUnits, names, same) {
    if (typeof value === 'string') {
      if (value.length > maxUnits) {
        p.entries[at] = TOO_LONG;
        return;
      }
      p.strings[at] = value;
      if (names !== undefined) {
        const known = names.get(value);
        if (known !== undefined) {
          p.entries[at] = KNOWN - known;
          return;
        }
      }
      if (same >= 0 && p.entries[same] >= 0 && p.strings[same] === value) {
        p.entries[at] = SAME;
        return;
      }
      p.entries[at] = value.length;
      p.joined += value;
    } else if (value === undefined) {
      // ABSENT, as laid out
    } else if (value === null) {
      p.entries[at] = NULL;
    } else if (typeof value === 'number') {
      p.entries[at] = NUMBER;
      p.numbers[p.count++] = p.strings[at] = value; // a count: templates and normalized copies take the number itself
    } else {
      p.entries[at] = OTHER - kindOf(value);
    }
  }

  /** Reads own property `key` of `record` and lays it out at `at`. */
  function put(p, record, key, at, names = undefined, same = -1) {
    let value;
    try {
      if (!hasOwn(record, key)) return;
      value = record[key];
    } catch (thrown) {
      unreadable(p, at, thrown);
      return;
    }
    lay(p, at, value, MAX_TEXT, names, same);
  }

  /** As `put`, for a structured member (a receipt's result, a facts map): an object or array is laid out as its JSON text. */
  function putJson(p, record, key, at, maxUnits = MAX_RESULT, objectOnly = false) {
    let value;
    try {
      if (!hasOwn(record, key)) return;
      value = record[key];
      if (value !== null && (typeof value === 'object' || objectOnly)) {
        // A value that must be an object (a facts map) laid out as its JSON whatever it is: a map stored as a
        // string of JSON text arrives as a JSON string, which the decider refuses.
        value = stringify(value);
        if (typeof value !== 'string') return;
      }
    } catch (thrown) {
      unreadable(p, at, thrown);
      return;
    }
    lay(p, at, value, maxUnits, undefined, -1);
  }

  /** Whether items of event type `type` lay out the workflow's facts map (only fact events' decisions read it). */
  function readsFacts(plan, type) {
    return plan.facts?.events.includes(type);
  }

  /**
   * The reads of a rule set's items: the ids and type (`readIds`), then per
   * event type its declared fields, the receipt or the guarded workflow
   * fields (`readType[type]`). Each is straight code with the keys as
   * constants, generated from the layout the core described: a read with a
   * constant key has an inline cache of its own, where one loop's reads of
   * every key were megamorphic (measured: about half the time per read). A
   * host that forbids generating code gets the same reads in loops.
   */
  function readers(plan) {
    const read = (record, key, at, names = 'undefined', same = '-1') =>
      `try { if (hasOwn(${record}, ${JSON.stringify(key)})) lay(p, ${at}, ${record}[${JSON.stringify(key)}], MAX_TEXT, ${names}, ${same}); } catch (thrown) { unreadable(p, ${at}, thrown); }`;
    const e = plan.event;
    const ids = [
      read('event', 'eventId', `base + ${e}`),
      read('event', 'type', `base + ${e + 1}`, 'eventIndex'),
      read('event', 'workflowId', `base + ${e + 2}`),
    ];
    const r = plan.receipt;
    const keys = plan.receiptKeys;
    const types = plan.types.map((_, type) => {
      const lines = plan.declared[type].map((f) => read('event', plan.fields[f], `base + ${plan.eventField + f}`));
      lines.push(
        'if (receiptIsRecord) {',
        read('receipt', keys[0], `base + ${r}`, 'undefined', `base + ${e}`),
        read('receipt', keys[1], `base + ${r + 1}`),
        `putJson(p, receipt, ${JSON.stringify(keys[2])}, base + ${r + 2});`,
        read('receipt', keys[3], `base + ${r + 3}`),
        read('receipt', keys[4], `base + ${r + 4}`),
        '} else if (workflowIsRecord) {',
        read('workflow', 'id', `base + ${plan.workflow}`, 'undefined', `base + ${e + 2}`),
        read('workflow', 'status', `base + ${plan.workflow + 1}`, 'statusIndex'),
        read('workflow', 'revision', `base + ${plan.workflow + 2}`),
        ...plan.guards[type].map((f) =>
          read('workflow', plan.fields[f], `base + ${plan.workflowField + f}`, 'undefined', `base + ${plan.eventField + f}`),
        ),
        ...(readsFacts(plan, type)
          ? [`putJson(p, workflow, ${JSON.stringify(plan.facts.name)}, base + ${plan.workflowFacts}, ${plan.facts.maxBytes}, true);`]
          : []),
        '}',
      );
      return `function (p, base, event, receipt, workflow, receiptIsRecord, workflowIsRecord) {\n${lines.join('\n')}\n}`;
    });
    const source = `return { readIds(p, base, event) {\n${ids.join('\n')}\n}, readType: [${types.join(',\n')}] };`;
    try {
      // The keys are the rule set's own names (checked by the core: letters, digits, '_' and '-'), quoted by JSON.stringify.
      // eslint-disable-next-line no-new-func
      return new Function('hasOwn', 'lay', 'unreadable', 'putJson', 'MAX_TEXT', 'eventIndex', 'statusIndex', source)(
        hasOwn,
        lay,
        unreadable,
        putJson,
        MAX_TEXT,
        plan.eventIndex,
        plan.statusIndex,
      );
    } catch {
      return loopReaders(plan);
    }
  }

  /** The readers as loops over the keys (see `readers`). */
  function loopReaders(plan) {
    const e = plan.event;
    const fields = plan.fields;
    return {
      readIds(p, base, event) {
        put(p, event, 'eventId', base + e);
        put(p, event, 'type', base + e + 1, plan.eventIndex);
        put(p, event, 'workflowId', base + e + 2);
      },
      readType: plan.types.map((_, type) => (p, base, event, receipt, workflow, receiptIsRecord, workflowIsRecord) => {
        const eventField = base + plan.eventField;
        for (const f of plan.declared[type]) put(p, event, fields[f], eventField + f);
        if (receiptIsRecord) {
          const r = base + plan.receipt;
          const keys = plan.receiptKeys;
          put(p, receipt, keys[0], r, undefined, base + e);
          put(p, receipt, keys[1], r + 1);
          putJson(p, receipt, keys[2], r + 2);
          put(p, receipt, keys[3], r + 3);
          put(p, receipt, keys[4], r + 4);
        } else if (workflowIsRecord) {
          const w = base + plan.workflow;
          put(p, workflow, 'id', w, undefined, base + e + 2);
          put(p, workflow, 'status', w + 1, plan.statusIndex);
          put(p, workflow, 'revision', w + 2);
          for (const f of plan.guards[type]) put(p, workflow, fields[f], base + plan.workflowField + f, undefined, eventField + f);
          if (readsFacts(plan, type)) putJson(p, workflow, plan.facts.name, base + plan.workflowFacts, plan.facts.maxBytes, true);
        }
      }),
    };
  }

  /**
   * A string with a lone surrogate has no UTF-8 form (encodeInto would make
   * it U+FFFD, which the core would take for the character itself): such
   * strings are laid out as ILL_FORMED instead. The whole text is checked
   * once; only when it fails is each string checked.
   */
  function checkWellFormed(p, entries, perItem) {
    if (wellFormed(p.joined)) return;
    let joined = '';
    for (let at = 0; at < entries; at += 1) {
      if (at % perItem === 0) continue; // a header
      const entry = p.entries[at];
      if (entry >= 0) {
        if (wellFormed(p.strings[at])) joined += p.strings[at];
        else p.entries[at] = ILL_FORMED;
      } else if (entry <= UNREADABLE && entry >= UNREADABLE - MAX_MESSAGE) {
        joined += p.strings[at]; // made well formed when it was laid out
      }
    }
    p.joined = joined;
  }

  return { argOf, put, readers, checkWellFormed };
}

module.exports = { createReading };
