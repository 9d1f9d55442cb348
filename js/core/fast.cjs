'use strict';
// The fast decide path (issue 11). `wasm.decide` reads each event field
// through a JS helper (several crossings per field) and returns the decision
// as JSON text; here a batch is laid out in wasm memory at once (one
// TextEncoder.encodeInto for every string, an Int32Array entry per value),
// one call decides it (src/batch.rs), and the decision object is built from
// numeric answers, the fingerprint's text, the strings read and
// a per-rule write template the core hands over once. Every decision still
// comes from the core: JS only lays values out and fills templates in.
//
// What the layout cannot hold exactly goes to `wasm.decide`, the slow path,
// with the caller's own objects, so its result and its errors are today's:
// an accessor property or a proxy (both can run code, which `decide` must see
// run as it always has), an object that is not plain, a value that is not a
// string (or a number for the revision), a string with U+FFFD (a lone
// surrogate becomes one in encodeInto), and whatever the core would refuse.
// Reading fields here runs no caller code: own property descriptors only.
//
// A stored receipt's `result` (what the first delivery produced, answered as
// a duplicate's `original`) is read here, not in the core: the core only
// compares the fingerprint. Only a result of the shape this version writes
// is taken (a plain object of operationIds, status and revision as data
// properties, well-formed strings, whole numbers, short enough); any other
// goes to `decide`, which answers it or refuses it (INVALID_RECORD).

const { types } = require('node:util');

const isProxy = types.isProxy;
const hasOwn = Object.hasOwn;
const getOwn = Object.getOwnPropertyDescriptor;
const getPrototypeOf = Object.getPrototypeOf;
const OBJECT_PROTOTYPE = Object.prototype;
const parseJSON = JSON.parse;
// Buffer's own latin1 decoder, which skips toString's argument handling (measured); toString where it is missing.
const latin1 =
  typeof Buffer.prototype.latin1Slice === 'function'
    ? (bytes, end) => bytes.latin1Slice(0, end)
    : (bytes, end) => bytes.toString('latin1', 0, end);

// Entry tags and header bits: src/batch.rs.
const ABSENT = -1;
const NULL = -2;
const NUMBER = -3;
const OTHER = -4;
const TOO_LONG = -5;
const SAME = -7;
const KNOWN = -16;
const HAS_RECEIPT = 1;
const HAS_WORKFLOW = 2;
const HOST_SLOW = 4;
const VALIDATE_ONLY = 8;
const RESULT_INTS = 5;
const RESULT_NUMBERS = 2;
const FINGERPRINT_BYTES = 68;
// Template value sources.
const CONSTANT = 0;
const REVISION = 1;
const EVENT_FIELD = 2;
/** Items laid out per wasm call: at most 1024 × 16 strings × 1,536 bytes of text. */
const CHUNK = 1024;
/** The longest string any field takes, in UTF-16 units (`field::MAX_TEXT_BYTES`). */
const MAX_UNITS = 512;

const ARRAY_PROTOTYPE = Array.prototype;
const isArray = Array.isArray;
const isSafeInteger = Number.isSafeInteger;
const ORIGINAL_OUTCOMES = new Set(['applied', 'already-applied', 'stale']);
const RESULT_KEYS = new Set(['operationIds', 'status', 'revision']);
/** `decide` reads a stored result as at most 64 KiB of JSON: a bound on its text, 6 bytes per unit at worst (`\u0000`). */
const MAX_RESULT_UNITS = Math.floor((64 * 1024) / 6) - 64;

/** A plain object (or one without a prototype), not a proxy: its fields can be read without running code. */
function isPlainRecord(value) {
  if (typeof value !== 'object' || value === null || isProxy(value)) return false;
  const prototype = getPrototypeOf(value);
  return prototype === OBJECT_PROTOTYPE || prototype === null;
}

/** An own data property's value; `absent` when there is none, `accessor` when it is an accessor. */
const ACCESSOR = Symbol('accessor');
function ownValue(record, key) {
  const descriptor = getOwn(record, key);
  if (descriptor === undefined) return undefined;
  return hasOwn(descriptor, 'value') ? descriptor.value : ACCESSOR;
}

/** No lone surrogate: JSON.stringify escapes one, and `decide`'s JSON reader refuses the escape. */
const wellFormed =
  typeof String.prototype.isWellFormed === 'function'
    ? (text) => text.isWellFormed()
    : (text) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text);

/**
 * What `decide` answers as a duplicate's `original` for a plain receipt:
 * null when it keeps no result, the original when its result, outcome and
 * recordedAt are of the shape this version writes, undefined (leave it to
 * `decide`) for anything else.
 */
function originalOf(receipt) {
  const result = ownValue(receipt, 'result');
  if (result === undefined || result === null) return null;
  if (!isPlainRecord(result) || 'toJSON' in result) return undefined;
  // JSON.stringify writes the enumerable ones: a non-enumerable member is one `decide` does not see.
  for (const key of Object.getOwnPropertyNames(result)) {
    if (!RESULT_KEYS.has(key) || !getOwn(result, key).enumerable) return undefined;
  }
  const ids = ownValue(result, 'operationIds');
  if (!isArray(ids) || isProxy(ids) || getPrototypeOf(ids) !== ARRAY_PROTOTYPE || 'toJSON' in ids) return undefined;
  let units = 0;
  const operationIds = new Array(ids.length);
  for (let k = 0; k < ids.length; k += 1) {
    const id = ownValue(ids, k);
    if (typeof id !== 'string' || id.length === 0 || !wellFormed(id)) return undefined;
    units += id.length + 3;
    operationIds[k] = id;
  }
  let status = ownValue(result, 'status');
  if (status === undefined) status = null;
  else if (status !== null) {
    if (typeof status !== 'string' || !wellFormed(status)) return undefined;
    units += status.length;
  }
  if (units > MAX_RESULT_UNITS) return undefined;
  let revision = ownValue(result, 'revision');
  if (revision === undefined) revision = null;
  else if (revision !== null) {
    if (!isSafeInteger(revision) || revision < 0) return undefined;
    revision += 0; // -0 is written as 0
  }
  const outcome = ownValue(receipt, 'outcome');
  if (!ORIGINAL_OUTCOMES.has(outcome)) return undefined;
  let decidedAt = ownValue(receipt, 'recordedAt');
  if (decidedAt === undefined || decidedAt === null) decidedAt = null;
  else if (isSafeInteger(decidedAt) && decidedAt >= 0) decidedAt += 0;
  else return undefined;
  return { outcome, operationIds, status, revision, decidedAt };
}

/**
 * The fast decider over a wasm-bindgen module (`wasm/idemflow.js`).
 * `decide(compiled, event, receipt, workflow)` returns what
 * `JSON.parse(wasm.decide(compiled, event, receipt, workflow))` returns, and
 * throws what it throws. `decideBatch(compiled, inputs)` takes
 * `[{ event, receipt, workflow }]` and returns one entry per input, in order:
 * the decision, or `{ error }` with what `wasm.decide` threw for that input.
 */
function createFastDecider(wasm) {
  const encoder = new TextEncoder();
  const scratch = new wasm.DecideScratch();
  const memory = wasm.wasmMemory();
  const plans = new WeakMap();

  let buffer = null;
  let entries;
  let numbers;
  let text;
  let answerInts;
  let answerNumbers;
  let fingerprintBytes;
  let itemCapacity = 0;
  let entryCapacity = 0;
  // The strings read, by entry index: decisions reuse them (the core checked them).
  let strings = [];
  // Per item with a receipt: the duplicate's original (null: the receipt keeps no result).
  let originals = [];
  // Every string laid out, in entry order, joined for one encodeInto.
  let joined = '';
  let busy = false;

  function views() {
    const [ep, el, np, nl, tp, tl, ip, il, ap, al, hp, hl] = scratch.regions();
    buffer = memory.buffer;
    entries = new Int32Array(buffer, ep, el);
    numbers = new Float64Array(buffer, np, nl);
    text = new Uint8Array(buffer, tp, tl);
    answerInts = new Int32Array(buffer, ip, il);
    answerNumbers = new Float64Array(buffer, ap, al);
    fingerprintBytes = Buffer.from(buffer, hp, hl);
    entryCapacity = el;
    itemCapacity = Math.min(nl, Math.floor(il / RESULT_INTS));
  }

  /**
   * Views over the current memory: growing it detaches the old buffer, and a
   * view of a detached buffer has length 0 (cheaper to ask than `memory.buffer`).
   */
  function fresh() {
    if (buffer === null || answerInts.length === 0) views();
  }

  /** Room for `items` items and `textBytes` bytes of text, growing by doubling. */
  function reserve(items, perItem, textBytes) {
    fresh();
    const moreItems = items > itemCapacity;
    if (moreItems || items * perItem > entryCapacity || textBytes > text.length) {
      scratch.reserve(
        moreItems ? Math.max(items, itemCapacity * 2, 16) : itemCapacity,
        perItem,
        textBytes > text.length ? Math.max(textBytes, text.length * 2, 4096) : text.length,
      );
      views();
    }
  }

  function planFor(compiled) {
    let plan = plans.get(compiled);
    if (plan === undefined) {
      const layout = parseJSON(compiled.fastLayoutJson());
      const fieldCount = layout.fields.length;
      plan = {
        compiled,
        perItem: layout.entries,
        fieldCount,
        fields: layout.fields,
        statuses: layout.statuses,
        outcomes: layout.outcomes,
        ruleSet: layout.ruleSet,
        types: layout.events.map((e) => e.type),
        eventIndex: new Map(layout.events.map((e, i) => [e.type, i])),
        statusIndex: new Map(layout.statuses.map((name, i) => [name, i])),
        // In the rule set's field order: the order entries (and so strings) are laid out in.
        declared: layout.events.map((e) => [...e.fields].sort((a, b) => a - b)),
        guards: layout.events.map((e) => e.guards),
        templates: new Map(),
        // Per event type, the members of a normalized event in the order normalizeEvent writes them
        // (by name): [name, entry offset from the item's base, or -1 for the type].
        normalized: layout.events.map((e) => [
          ['eventId', 1], ['workflowId', 3], ['type', -1], ...e.fields.map((f) => [layout.fields[f], 4 + f]),
        ].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
      };
      plans.set(compiled, plan);
    }
    return plan;
  }

  function template(plan, rule, eventType) {
    const key = rule * 65536 + eventType;
    let found = plan.templates.get(key);
    if (found === undefined) {
      const { set, outbox } = parseJSON(plan.compiled.fastTemplateJson(rule, eventType));
      found = { set: columns(set), outbox: outbox.map((op) => ({ ...op, payload: columns(op.payload) })) };
      plan.templates.set(key, found);
      // That call allocated in wasm: the views may be detached.
      fresh();
    }
    return found;
  }

  /**
   * Lays one own property out at `at`; false when it is an accessor. A
   * number's value is kept only for the workflow's revision (`item` >= 0).
   * A string equal to the one laid out at the event's entry `same` is laid
   * out once: SAME.
   */
  function put(record, key, at, item = -1, same = -1, names = undefined) {
    const descriptor = getOwn(record, key);
    if (descriptor === undefined) return true; // already ABSENT
    if (!hasOwn(descriptor, 'value')) return false;
    const value = descriptor.value;
    if (typeof value === 'string') {
      const known = names === undefined || value.length > MAX_UNITS ? undefined : names.get(value);
      if (known !== undefined) {
        // An event type's or status's exact name: named by index.
        entries[at] = KNOWN - known;
        strings[at] = value;
      } else if (same >= 0 && entries[same] >= 0 && strings[same] === value) {
        entries[at] = SAME;
      } else if (value.length > MAX_UNITS) {
        entries[at] = TOO_LONG;
      } else {
        entries[at] = value.length;
        strings[at] = value;
        joined += value;
      }
    } else if (value === undefined) {
      // as absent
    } else if (value === null) {
      entries[at] = NULL;
    } else if (typeof value === 'number') {
      entries[at] = NUMBER;
      if (item >= 0) numbers[item] = value;
    } else {
      entries[at] = OTHER;
    }
    return true;
  }

  /**
   * Lays item `i` out. Only what `decide` may read is read: the event's ids,
   * type and declared fields; the receipt's eventId and fingerprint; without
   * a receipt, the workflow's id, status, revision and the fields the event
   * type's rules guard.
   */
  function layOut(plan, i, event, receipt, workflow) {
    const base = i * plan.perItem;
    entries.fill(ABSENT, base, base + plan.perItem);
    numbers[i] = 0;
    const hasReceipt = receipt !== null && receipt !== undefined;
    const hasWorkflow = workflow !== null && workflow !== undefined;
    if (
      !isPlainRecord(event) ||
      (hasReceipt && !isPlainRecord(receipt)) ||
      (hasWorkflow && !isPlainRecord(workflow))
    ) {
      entries[base] = HOST_SLOW;
      return false;
    }
    entries[base] = (hasReceipt ? HAS_RECEIPT : 0) | (hasWorkflow ? HAS_WORKFLOW : 0);
    const fieldCount = plan.fieldCount;
    const fields = plan.fields;
    if (
      !put(event, 'eventId', base + 1) ||
      !put(event, 'type', base + 2, -1, -1, plan.eventIndex) ||
      !put(event, 'workflowId', base + 3)
    ) {
      entries[base] = HOST_SLOW;
      return false;
    }
    const eventType = entries[base + 2] <= KNOWN ? KNOWN - entries[base + 2] : undefined;
    if (eventType === undefined) {
      entries[base] = HOST_SLOW; // not a type of this rule set: decide says why
      return false;
    }
    const declared = plan.declared[eventType];
    for (let k = 0; k < declared.length; k += 1) {
      const f = declared[k];
      if (!put(event, fields[f], base + 4 + f)) {
        entries[base] = HOST_SLOW;
        return false;
      }
    }
    if (hasReceipt) {
      const at = base + 4 + fieldCount;
      const original = originalOf(receipt);
      if (original === undefined || !put(receipt, 'eventId', at, -1, base + 1) || !put(receipt, 'fingerprint', at + 1)) {
        entries[base] = HOST_SLOW;
        return false;
      }
      originals[i] = original;
    } else if (hasWorkflow) {
      const at = base + 6 + fieldCount;
      if (
        !put(workflow, 'id', at, -1, base + 3) ||
        !put(workflow, 'status', at + 1, -1, -1, plan.statusIndex) ||
        !put(workflow, 'revision', at + 2, i)
      ) {
        entries[base] = HOST_SLOW;
        return false;
      }
      const guards = plan.guards[eventType];
      for (let k = 0; k < guards.length; k += 1) {
        const f = guards[k];
        if (!put(workflow, fields[f], at + 3 + f, -1, base + 4 + f)) {
          entries[base] = HOST_SLOW;
          return false;
        }
      }
    }
    return true;
  }

  /** A template's `[key, kind, arg]` entries as three arrays. */
  function columns(entriesOfTemplate) {
    return {
      keys: entriesOfTemplate.map((e) => e[0]),
      kinds: entriesOfTemplate.map((e) => e[1]),
      args: entriesOfTemplate.map((e) => e[2]),
    };
  }

  function fill({ keys, kinds, args }, base, revision) {
    const object = {};
    for (let k = 0; k < keys.length; k += 1) {
      const kind = kinds[k];
      object[keys[k]] =
        kind === CONSTANT ? args[k] : kind === REVISION ? revision : kind === EVENT_FIELD ? strings[base + 4 + args[k]] : null;
    }
    return object;
  }

  /** The decision of item `i`, which the core decided, from its answers. */
  function build(plan, i, fingerprints) {
    const base = i * plan.perItem;
    const a = i * RESULT_INTS;
    const outcomeCode = answerInts[a + 1];
    const outcome = plan.outcomes[outcomeCode];
    const eventId = strings[base + 1];
    const workflowId = strings[base + 3];
    const eventType = plan.types[answerInts[a + 4]];
    const fingerprint = fingerprints.slice(i * FINGERPRINT_BYTES, (i + 1) * FINGERPRINT_BYTES);
    if (outcomeCode === 3) {
      const decision = { outcome, eventId, workflowId, eventType, fingerprint, writeSet: { receipt: null, workflow: null, outbox: [] } };
      const original = originals[i];
      if (original !== null) decision.original = original; // made for this item by originalOf
      return decision;
    }
    const { id, version, hash } = plan.ruleSet;
    if (outcomeCode !== 0) {
      const result = { operationIds: [], status: null, revision: null };
      const receipt = { eventId, fingerprint, workflowId, eventType, outcome, ruleSet: { id, version, hash }, result };
      return { outcome, eventId, workflowId, eventType, fingerprint, writeSet: { receipt, workflow: null, outbox: [] } };
    }
    const state = answerInts[a + 3];
    const revision = answerNumbers[i * RESULT_NUMBERS + 1];
    const write = template(plan, answerInts[a + 2], answerInts[a + 4]);
    const expect = state === 0 ? null : { status: plan.statuses[state - 1], revision: answerNumbers[i * RESULT_NUMBERS] };
    const operations = write.outbox;
    const outbox = new Array(operations.length);
    for (let k = 0; k < operations.length; k += 1) {
      const op = operations[k];
      outbox[k] = {
        id: op.recurring ? `${op.prefix}${revision}:${workflowId}` : op.prefix + workflowId,
        type: op.type,
        workflowId,
        eventId,
        status: 'pending',
        payload: fill(op.payload, base, revision),
      };
    }
    const set = fill(write.set, base, revision);
    const operationIds = new Array(outbox.length);
    for (let k = 0; k < outbox.length; k += 1) operationIds[k] = outbox[k].id;
    // As `decide` keeps it: the status and revision the write sets (a status is always set, as a string).
    const result = { operationIds, status: typeof set.status === 'string' ? set.status : null, revision: set.revision ?? null };
    const receipt = { eventId, fingerprint, workflowId, eventType, outcome, ruleSet: { id, version, hash }, result };
    return {
      outcome,
      eventId,
      workflowId,
      eventType,
      fingerprint,
      writeSet: { receipt, workflow: { id: workflowId, expect, set }, outbox },
    };
  }

  /**
   * Lays `count` items out (`get(i)` gives each one's event, receipt and
   * workflow), decides them in one call and returns the fingerprints of the
   * batch as one string ('' without `fingerprinted`), or undefined when no
   * item could be laid out.
   */
  function run(plan, count, get, fingerprinted = true) {
    reserve(count, plan.perItem, 0);
    if (strings.length < count * plan.perItem) strings = new Array(count * plan.perItem);
    joined = '';
    let laidOut = 0;
    for (let i = 0; i < count; i += 1) {
      if (get(i)) laidOut += 1;
    }
    if (laidOut === 0) return undefined;
    // A UTF-16 unit is at most 3 bytes of UTF-8.
    const units = joined.length;
    reserve(count, plan.perItem, units * 3);
    const { read, written } = encoder.encodeInto(joined, text);
    if (read !== units) throw new Error('idemflow: the decide scratch text region is too small');
    scratch.decide(plan.compiled, count, written, written === units);
    // Deciding may have grown the memory: the views would be detached.
    fresh();
    return fingerprinted ? latin1(fingerprintBytes, count * FINGERPRINT_BYTES) : '';
  }

  /**
   * A live CompiledRuleSet of this module. Anything else (another value, one
   * already freed: wasm-bindgen zeroes its pointer) goes to the slow path,
   * which throws for it as it always has.
   */
  function usable(compiled) {
    return compiled instanceof wasm.CompiledRuleSet && compiled.__wbg_ptr !== 0;
  }

  function slow(compiled, event, receipt, workflow) {
    return parseJSON(wasm.decide(compiled, event, receipt, workflow));
  }

  function decide(compiled, event, receipt, workflow) {
    if (busy || !usable(compiled)) return slow(compiled, event, receipt, workflow);
    const plan = planFor(compiled);
    let decision;
    busy = true;
    try {
      const fingerprints = run(plan, 1, (i) => layOut(plan, i, event, receipt, workflow));
      if (fingerprints !== undefined && answerInts[0] === 0) decision = build(plan, 0, fingerprints);
    } finally {
      busy = false;
      joined = '';
    }
    // Outside the busy section: the slow path may run a caller's getter, which may decide again.
    return decision !== undefined ? decision : slow(compiled, event, receipt, workflow);
  }

  /**
   * normalizeEvent's answer for a plain event the core finds valid (and of
   * `type`, when given): a plain copy of its ids, type and declared fields,
   * built from the strings laid out; undefined for anything else, which
   * `normalizeEvent` then answers (or refuses) itself.
   */
  function normalize(compiled, event, type) {
    if (busy || !usable(compiled)) return undefined;
    const plan = planFor(compiled);
    let normalized;
    busy = true;
    try {
      const laidOut = run(plan, 1, (i) => {
        if (!layOut(plan, i, event, null, null)) return false;
        entries[i * plan.perItem] |= VALIDATE_ONLY;
        return true;
      }, false);
      if (laidOut !== undefined && answerInts[0] === 0) {
        const eventType = answerInts[4];
        const name = plan.types[eventType];
        if (type === undefined || type === name) {
          normalized = {};
          for (const [key, at] of plan.normalized[eventType]) normalized[key] = at < 0 ? name : strings[at];
        }
      }
    } finally {
      busy = false;
      joined = '';
    }
    return normalized;
  }

  function decideBatch(compiled, inputs) {
    const count = inputs.length;
    const results = new Array(count);
    const events = new Array(count);
    const receipts = new Array(count);
    const workflows = new Array(count);
    for (let i = 0; i < count; i += 1) {
      const input = inputs[i];
      events[i] = input?.event;
      receipts[i] = input?.receipt ?? null;
      workflows[i] = input?.workflow ?? null;
    }
    const left = [];
    if (busy || !usable(compiled)) {
      for (let i = 0; i < count; i += 1) left.push(i);
    } else {
      const plan = planFor(compiled);
      busy = true;
      try {
        // Chunks keep the scratch within its limits whatever the batch.
        for (let start = 0; start < count; start += CHUNK) {
          const size = Math.min(CHUNK, count - start);
          const fingerprints = run(plan, size, (i) => layOut(plan, i, events[start + i], receipts[start + i], workflows[start + i]));
          for (let i = 0; i < size; i += 1) {
            if (fingerprints !== undefined && answerInts[i * RESULT_INTS] === 0) results[start + i] = build(plan, i, fingerprints);
            else left.push(start + i);
          }
        }
      } finally {
        busy = false;
        joined = '';
      }
    }
    for (const i of left) {
      try {
        results[i] = slow(compiled, events[i], receipts[i], workflows[i]);
      } catch (error) {
        results[i] = { error };
      }
    }
    return results;
  }

  return { decide, decideBatch, normalize };
}

module.exports = { createFastDecider };
