'use strict';
// The way JS values reach the decider: they are read here, once, and laid
// out packed (src/packed.rs) in wasm memory; one call decides; the answers
// are read back from the same memory. Every constant of the layout (tags,
// slots, the answer regions, write templates) is described by the core
// (packedDescriptionJson, layoutJson, writeTemplateJson): none is repeated here.
//
// How a caller's values are read and laid out is reading.cjs's.

const { createHash } = require('node:crypto');
const { IdemflowError } = require('./errors.cjs');
const { createReading } = require('./reading.cjs');

const parseJSON = JSON.parse;
const hasOwn = Object.hasOwn;
const isArray = Array.isArray;
const define = (object, key, value) => Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });

// Buffer's own coders, which skip toString's and write's argument handling and
// allocate no result object (measured); the documented forms where they are missing.
const hasLatin1Slice = typeof Buffer.prototype.latin1Slice === 'function';
const hasUtf8Write = typeof Buffer.prototype.utf8Write === 'function';
const utf8 =
  typeof Buffer.prototype.utf8Slice === 'function'
    ? (bytes, start, end) => bytes.utf8Slice(start, end)
    : (bytes, start, end) => bytes.toString('utf8', start, end);

/** Items laid out per wasm call: a bound on one call's regions whatever the batch. */
const CHUNK = 1024;

/**
 * The decider over a wasm-bindgen module (`wasm/idemflow.js`):
 * - `decide(compiled, event, receipt, workflow)`: the decision, or throws its IdemflowError;
 * - `decideBatch(compiled, inputs)`: `[{ event, receipt, workflow }]` in, per input
 *   its decision or `{ error }` (an IdemflowError) out, in order;
 * - `validate(compiled, event)`, `normalize(compiled, event, type)`,
 *   `fingerprint(compiled, event)`, `plan(workflow, event)`: the one-event
 *   entry points, which throw what the core answers;
 * - `outboxPolicy(options)`: a compiled outbox policy from its options object.
 */
function createDecider(wasm) {
  const described = parseJSON(wasm.packedDescriptionJson());
  const { ABSENT, KNOWN } = described.tags;
  const ARG = described.args;
  const { argOf, put, readers, checkWellFormed } = createReading(described);
  const ANSWER = described.answers;
  const ANSWER_INTS = ANSWER.ints;
  const ANSWER_NUMBERS = ANSWER.numbers;
  const FINGERPRINT_BYTES = ANSWER.fingerprintBytes;
  const FROM = ANSWER.from;
  const POLICY_OPTIONS = described.outboxPolicyOptions;
  // A fact key inside a per-fact operation id, escaped as the core describes it ('%' first, then ':').
  const FACT_KEY_ESCAPES = ANSWER.factKeyEscapes;
  const escapeFactKey = (key) => {
    let text = String(key);
    for (const [from, to] of FACT_KEY_ESCAPES) text = text.split(from).join(to);
    return text;
  };

  // An operation id longer than this (UTF-8 bytes) is written with its fact key hashed (src/operation_id.rs).
  const OPERATION_ID_MAX_BYTES = ANSWER.operationIdMaxBytes;
  const HASHED_FACT_KEY_PREFIX = ANSWER.hashedFactKeyPrefix;
  const hashedFactKey = (key) => HASHED_FACT_KEY_PREFIX + createHash('sha256').update(String(key), 'utf8').digest('hex');

  const encoder = new TextEncoder();
  const scratch = new wasm.Decider();
  const memory = wasm.wasmMemory();
  const plans = new WeakMap();

  // Views over the decider's regions of wasm memory (made again when memory grows).
  let buffer = null;
  let wasmEntries;
  let wasmNumbers;
  let wasmText;
  let wasmTextBuffer;
  let wasmInts;
  let wasmAnswerNumbers;
  let wasmFingerprints;
  let itemCapacity = 0;

  function views() {
    const [ep, el, np, nl, tp, tl, ip, il, ap, al, fp, fl] = scratch.regions();
    buffer = memory.buffer;
    wasmEntries = new Int32Array(buffer, ep, el);
    wasmNumbers = new Float64Array(buffer, np, nl);
    wasmText = new Uint8Array(buffer, tp, tl);
    wasmTextBuffer = Buffer.from(buffer, tp, tl);
    wasmInts = new Int32Array(buffer, ip, il);
    wasmAnswerNumbers = new Float64Array(buffer, ap, al);
    wasmFingerprints = Buffer.from(buffer, fp, fl);
    itemCapacity = Math.min(Math.floor(il / ANSWER_INTS), Math.floor(fl / FINGERPRINT_BYTES));
  }

  /** Views over the current memory: growing it detaches the old buffer (a detached view has length 0). */
  function fresh() {
    if (buffer === null || wasmInts.length === 0) views();
  }

  /** Room in wasm memory for `items` items, `entries` entries, `numbers` numbers and `textBytes` bytes, by doubling. */
  function reserve(items, entries, numbers, textBytes) {
    fresh();
    if (items > itemCapacity || entries > wasmEntries.length || numbers > wasmNumbers.length || textBytes > wasmText.length) {
      const grown = (need, have, least) => (need > have ? Math.max(need, have * 2, least) : have);
      scratch.reserve(
        grown(items, itemCapacity, 16),
        grown(entries, wasmEntries.length, 256),
        grown(numbers, wasmNumbers.length, 64),
        grown(textBytes, wasmText.length, 4096),
      );
      views();
    }
  }

  /**
   * What one call lays out, in JS memory first: a getter read while laying
   * out may call idemflow again (and grow the wasm memory), so nothing is
   * written into wasm memory until every value is read. A call made by a
   * getter gets a packing of its own (`depth`).
   */
  function newPacking() {
    return { entries: new Int32Array(256), numbers: new Float64Array(64), count: 0, strings: [], joined: '' };
  }
  const packings = [newPacking()];
  let depth = 0;

  function packingFor(entries) {
    let p = packings[depth];
    if (p === undefined) packings[depth] = p = newPacking();
    if (p.entries.length < entries) p.entries = new Int32Array(Math.max(entries, p.entries.length * 2));
    // Every slot may be a number.
    if (p.numbers.length < entries) p.numbers = new Float64Array(Math.max(entries, p.numbers.length * 2));
    p.count = 0;
    p.joined = '';
    if (p.strings.length < entries) p.strings = new Array(entries);
    return p;
  }

  function planFor(compiled) {
    let plan = plans.get(compiled);
    if (plan === undefined) {
      const layout = parseJSON(compiled.layoutJson());
      const { slots } = layout;
      plan = {
        compiled,
        perItem: layout.entries,
        fields: layout.fields,
        statuses: layout.statuses,
        ruleSet: layout.ruleSet,
        types: layout.events.map((e) => e.type),
        eventIndex: new Map(layout.events.map((e, i) => [e.type, i])),
        statusIndex: new Map(layout.statuses.map((name, i) => [name, i])),
        declared: layout.events.map((e) => e.fields),
        guards: layout.events.map((e) => e.guards),
        normalized: layout.events.map((e) => e.normalized),
        event: slots.event,
        eventField: slots.eventField,
        receipt: slots.receipt,
        receiptKeys: slots.receiptKeys,
        workflow: slots.workflow,
        workflowField: slots.workflowField,
        // A rule set with `facts`: the workflow's facts map, laid out as its JSON text for fact events.
        facts: layout.facts ?? null,
        workflowFacts: slots.workflowFacts ?? -1,
        // By rule and event type (see `template`).
        templates: [],
      };
      Object.assign(plan, readers(plan));
      plans.set(compiled, plan);
    }
    return plan;
  }

  /** Lays item `i` out: what the decider may read of its event, receipt and workflow. */
  function layOut(p, plan, i, event, receipt, workflow) {
    const base = i * plan.perItem;
    const entries = p.entries;
    entries.fill(ABSENT, base, base + plan.perItem);
    const eventArg = argOf(event);
    const receiptArg = argOf(receipt);
    const workflowArg = argOf(workflow);
    entries[base] = eventArg | (receiptArg << ARG.bits) | (workflowArg << (2 * ARG.bits));
    if (eventArg !== ARG.OBJECT) return;
    plan.readIds(p, base, event);
    const typeEntry = entries[base + plan.event + 1];
    // Not a type of this rule set: the decider says why, and reads nothing more.
    if (typeEntry > KNOWN || typeEntry < KNOWN - plan.types.length + 1) return;
    const receiptIsRecord = receiptArg === ARG.OBJECT || receiptArg === ARG.BINARY;
    const workflowIsRecord = workflowArg === ARG.OBJECT || workflowArg === ARG.BINARY;
    plan.readType[KNOWN - typeEntry](p, base, event, receipt, workflow, receiptIsRecord, workflowIsRecord);
  }

  // What the last `load` wrote: the text's bytes, and whether they are as many as its units (ASCII).
  let textBytes = 0;
  let textAscii = false;

  /**
   * Copies what `p` laid out (`entries` entries of `items` items) into wasm
   * memory, with the text (see `textBytes` and `textAscii`).
   */
  function load(p, items, entries, perItem) {
    checkWellFormed(p, entries, perItem);
    const units = p.joined.length;
    // A UTF-16 unit is at most 3 bytes of UTF-8.
    reserve(items, entries, p.count, units * 3);
    // A loop for one item's few entries; a copy of a view for a batch's many.
    if (entries <= 64) {
      for (let k = 0; k < entries; k += 1) wasmEntries[k] = p.entries[k];
    } else {
      wasmEntries.set(p.entries.subarray(0, entries));
    }
    for (let k = 0; k < p.count; k += 1) wasmNumbers[k] = p.numbers[k];
    if (hasUtf8Write) {
      // The region holds three bytes per unit: the whole text fits.
      textBytes = wasmTextBuffer.utf8Write(p.joined, 0, wasmTextBuffer.length);
    } else {
      const { read, written } = encoder.encodeInto(p.joined, wasmText);
      if (read !== units) throw new Error('idemflow: the decider text region is too small');
      textBytes = written;
    }
    textAscii = textBytes === units;
  }

  /**
   * A live CompiledRuleSet of this module. Anything else (another value, one
   * already freed: wasm-bindgen zeroes its pointer) is refused as the core
   * refuses an argument that is not a rule set.
   */
  function usable(compiled) {
    if (compiled instanceof wasm.CompiledRuleSet && compiled.__wbg_ptr !== 0) return;
    throw new IdemflowError('INVALID_ARGUMENT', 'not a compiled rule set (or one already freed)', {
      details: { reason: 'not a compiled rule set' },
    });
  }

  /** `fn(p)` with the packing of this call depth. */
  function packed(entries, fn) {
    const p = packingFor(entries);
    depth += 1;
    try {
      return fn(p);
    } finally {
      depth -= 1;
      p.joined = '';
    }
  }

  function errorOf(text) {
    const { code, message, disposition, details } = parseJSON(text);
    return new IdemflowError(code, message, { disposition, details });
  }

  /** The write template of `rule` for `eventType`, fetched from the core once per rule set. */
  function template(plan, rule, eventType) {
    const key = rule * plan.types.length + eventType;
    let found = plan.templates[key];
    if (found === undefined) {
      const { set, outbox } = parseJSON(plan.compiled.writeTemplateJson(rule, eventType));
      found = {
        readsFacts: set.some((e) => e[1] === FROM.FACTS),
        set: columns(set),
        outbox: outbox.map((op) => ({
          type: op.type,
          id: { kinds: op.id.map((part) => part[0]), args: op.id.map((part) => part[1]) },
          payload: columns(op.payload),
          ifAbsent: op.ifAbsent === true,
        })),
      };
      plan.templates[key] = found;
    }
    return found;
  }

  /** A template's `[key, kind, arg]` entries as three arrays. */
  function columns(entries) {
    return { keys: entries.map((e) => e[0]), kinds: entries.map((e) => e[1]), args: entries.map((e) => e[2]) };
  }

  function value(kind, arg, strings, eventField, revision, workflowId, facts) {
    switch (kind) {
      case FROM.CONSTANT:
        return arg;
      case FROM.REVISION:
        return revision;
      case FROM.EVENT_FIELD:
        return strings[eventField + arg];
      case FROM.WORKFLOW_ID:
        return workflowId;
      case FROM.FACT_KEY:
        return escapeFactKey(strings[eventField + arg]);
      case FROM.FACTS:
        return newFacts(facts ?? {}, arg, strings, eventField);
      default:
        return null;
    }
  }

  function fill({ keys, kinds, args }, strings, eventField, revision, workflowId, facts) {
    const object = {};
    for (let k = 0; k < keys.length; k += 1) object[keys[k]] = value(kinds[k], args[k], strings, eventField, revision, workflowId, facts);
    return object;
  }

  /**
   * The facts map an applied answer to a fact event writes (FROM.FACTS): the
   * map read (`{}` without one) with the event's entry replaced by
   * `{event, <record fields>, operations}` (the old operations and the
   * answer's, sorted; left out when none), or, for an answer that leaves
   * the fact untracked, without the entry. Keys are defined, not assigned,
   * so a fact keyed "__proto__" stays an entry.
   */
  function newFacts(old, update, strings, eventField) {
    const key = strings[eventField + update.key];
    if (update.untracked === true) {
      const map = {};
      for (const k of Object.keys(old)) if (k !== key) define(map, k, old[k]);
      return map;
    }
    const entry = { event: update.event };
    for (const [name, f] of update.record) entry[name] = strings[eventField + f];
    const previous = hasOwn(old, key) ? old[key] : undefined;
    const operations = new Set(update.operations);
    if (previous !== null && typeof previous === 'object' && isArray(previous.operations)) {
      for (const op of previous.operations) operations.add(op);
    }
    if (operations.size > 0) entry.operations = [...operations].sort();
    const map = {};
    for (const k of Object.keys(old)) define(map, k, k === key ? entry : old[k]);
    if (previous === undefined) define(map, key, entry);
    return map;
  }

  /** The old facts map of item `base`: the JSON text the decider read (and checked), or none. */
  function oldFacts(plan, p, base) {
    if (plan.workflowFacts < 0) return null;
    const at = base + plan.workflowFacts;
    return p.entries[at] >= 0 ? parseJSON(p.strings[at]) : null;
  }

  /**
   * The decision of item `i` of the last call, from its answer in wasm
   * memory: `fingerprints` is the call's fingerprints' text, `extra` the
   * bytes of its errors' and originals' JSON text. An error is `{ error }`.
   */
  function build(plan, p, i, fingerprints, extra) {
    // Fetching a template for the item before may have grown the memory.
    fresh();
    const a = i * ANSWER_INTS;
    const ints = wasmInts;
    const extraStart = ints[a + 5];
    const extraEnd = extraStart + ints[a + 6];
    if (ints[a] !== ANSWER.decided) return { error: errorOf(utf8(extra, extraStart, extraEnd)) };
    const outcomeCode = ints[a + 1];
    const rule = ints[a + 2];
    const state = ints[a + 3];
    const type = ints[a + 4];
    const expectRevision = wasmAnswerNumbers[i * ANSWER_NUMBERS];
    const revision = wasmAnswerNumbers[i * ANSWER_NUMBERS + 1];
    const base = i * plan.perItem;
    const strings = p.strings;
    const outcome = ANSWER.outcomes[outcomeCode];
    const eventId = strings[base + plan.event];
    const workflowId = strings[base + plan.event + 2];
    const eventType = plan.types[type];
    const fingerprint =
      fingerprints.length === FINGERPRINT_BYTES ? fingerprints : fingerprints.slice(i * FINGERPRINT_BYTES, (i + 1) * FINGERPRINT_BYTES);
    if (outcomeCode === ANSWER.duplicate) {
      const decision = { outcome, eventId, workflowId, eventType, fingerprint, writeSet: { receipt: null, workflow: null, outbox: [] } };
      if (extraEnd > extraStart) decision.original = parseJSON(utf8(extra, extraStart, extraEnd));
      return decision;
    }
    const ruleSet = plan.ruleSet;
    if (outcomeCode !== ANSWER.applied) {
      const result = { operationIds: [], status: null, revision: null };
      const receipt = {
        eventId,
        fingerprint,
        workflowId,
        eventType,
        outcome,
        ruleSet: { id: ruleSet.id, version: ruleSet.version, hash: ruleSet.hash },
        result,
      };
      return { outcome, eventId, workflowId, eventType, fingerprint, writeSet: { receipt, workflow: null, outbox: [] } };
    }
    const write = template(plan, rule, type);
    const expect = state === 0 ? null : { status: plan.statuses[state - 1], revision: expectRevision };
    const eventField = base + plan.eventField;
    const facts = write.readsFacts ? oldFacts(plan, p, base) : null;
    const operations = write.outbox;
    const outbox = new Array(operations.length);
    const operationIds = new Array(operations.length);
    for (let k = 0; k < operations.length; k += 1) {
      const op = operations[k];
      const { kinds, args } = op.id;
      let operationId = '';
      for (let j = 0; j < kinds.length; j += 1) operationId += value(kinds[j], args[j], strings, eventField, revision, workflowId, null);
      // A UTF-16 unit is at most 3 UTF-8 bytes: only a long id is measured.
      if (operationId.length * 3 > OPERATION_ID_MAX_BYTES && Buffer.byteLength(operationId, 'utf8') > OPERATION_ID_MAX_BYTES) {
        operationId = '';
        for (let j = 0; j < kinds.length; j += 1) {
          operationId +=
            kinds[j] === FROM.FACT_KEY
              ? hashedFactKey(strings[eventField + args[j]])
              : value(kinds[j], args[j], strings, eventField, revision, workflowId, null);
        }
      }
      operationIds[k] = operationId;
      outbox[k] = {
        id: operationId,
        type: op.type,
        workflowId,
        eventId,
        status: 'pending',
        payload: fill(op.payload, strings, eventField, revision, workflowId, null),
      };
      if (op.ifAbsent) outbox[k].ifAbsent = true;
    }
    const set = fill(write.set, strings, eventField, revision, workflowId, facts);
    const result = { operationIds, status: typeof set.status === 'string' ? set.status : null, revision: set.revision ?? null };
    const receipt = {
      eventId,
      fingerprint,
      workflowId,
      eventType,
      outcome,
      ruleSet: { id: ruleSet.id, version: ruleSet.version, hash: ruleSet.hash },
      result,
    };
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
   * Decides the `count` items `p` holds and puts each answer (a decision or
   * `{ error }`) at `results[offset + i]`.
   */
  function decideLaidOut(compiled, plan, p, count, results, offset) {
    load(p, count, count * plan.perItem, plan.perItem);
    const extraLength = scratch.decide(compiled, count, textBytes, textAscii);
    // Deciding may have grown the memory: the views would be detached.
    fresh();
    const fingerprints = hasLatin1Slice
      ? wasmFingerprints.latin1Slice(0, count * FINGERPRINT_BYTES)
      : wasmFingerprints.toString('latin1', 0, count * FINGERPRINT_BYTES);
    // Copied out: its offsets are in bytes, and fetching a template may grow the memory.
    const extra = extraLength === 0 ? null : Buffer.from(new Uint8Array(memory.buffer, scratch.extraPointer(), extraLength).slice().buffer);
    for (let i = 0; i < count; i += 1) results[offset + i] = build(plan, p, i, fingerprints, extra);
  }

  const single = [undefined];

  function decide(compiled, event, receipt, workflow) {
    usable(compiled);
    const plan = planFor(compiled);
    const p = packingFor(plan.perItem);
    depth += 1;
    try {
      layOut(p, plan, 0, event, receipt, workflow);
      decideLaidOut(compiled, plan, p, 1, single, 0);
    } finally {
      depth -= 1;
      p.joined = '';
    }
    const answer = single[0];
    single[0] = undefined;
    if (answer.outcome === undefined) throw answer.error;
    return answer;
  }

  function decideBatch(compiled, inputs) {
    usable(compiled);
    const plan = planFor(compiled);
    const count = inputs.length;
    const results = new Array(count);
    // Chunks keep the regions within their limits whatever the batch.
    for (let start = 0; start < count; start += CHUNK) {
      const size = Math.min(CHUNK, count - start);
      const p = packingFor(size * plan.perItem);
      depth += 1;
      try {
        for (let i = 0; i < size; i += 1) {
          const input = inputs[start + i];
          layOut(p, plan, i, input?.event, input?.receipt ?? null, input?.workflow ?? null);
        }
        decideLaidOut(compiled, plan, p, size, results, start);
      } finally {
        depth -= 1;
        p.joined = '';
      }
    }
    return results;
  }

  /** Lays one event out for a one-event entry point and calls `fn(p, plan, textBytes, byteLengths)`. */
  function one(compiled, event, workflow, fn) {
    usable(compiled);
    const plan = planFor(compiled);
    return packed(plan.perItem, (p) => {
      layOut(p, plan, 0, event, undefined, workflow);
      load(p, 1, plan.perItem, plan.perItem);
      return fn(p, plan, textBytes, textAscii);
    });
  }

  function validate(compiled, event) {
    one(compiled, event, undefined, (_p, _plan, textBytes, byteLengths) => scratch.validate(compiled, textBytes, byteLengths, undefined));
  }

  /** A plain copy of a valid event (of `type`, when given): its ids, type and declared fields, as the core orders them. */
  function normalize(compiled, event, type) {
    return one(compiled, event, undefined, (p, plan, textBytes, byteLengths) => {
      const eventType = scratch.validate(compiled, textBytes, byteLengths, type);
      const normalized = {};
      for (const [key, at] of plan.normalized[eventType]) normalized[key] = at < 0 ? plan.types[eventType] : p.strings[at];
      return normalized;
    });
  }

  function fingerprint(compiled, event) {
    return one(compiled, event, undefined, (_p, _plan, textBytes, byteLengths) => scratch.fingerprint(compiled, textBytes, byteLengths));
  }

  let planRules;
  function plan(workflow, event) {
    planRules ??= wasm.planRuleSet();
    return one(planRules, event, workflow, (_p, _rules, textBytes, byteLengths) => scratch.plan(textBytes, byteLengths));
  }

  /** An outbox policy from its options object, laid out as one record of the options the core reads. */
  function outboxPolicy(options) {
    const entries = 1 + POLICY_OPTIONS.length;
    return packed(entries, (p) => {
      p.entries.fill(ABSENT, 0, entries);
      p.entries[0] = 0;
      for (let k = 0; k < POLICY_OPTIONS.length; k += 1) put(p, options, POLICY_OPTIONS[k], 1 + k);
      return new wasm.OutboxPolicy(p.entries.slice(0, entries), p.numbers.slice(0, p.count), p.joined);
    });
  }

  return { decide, decideBatch, validate, normalize, fingerprint, plan, outboxPolicy };
}

module.exports = { createDecider };
