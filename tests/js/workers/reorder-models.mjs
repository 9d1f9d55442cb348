// The two history models of the reorder property (./reorder-property.mjs),
// each read from the `order` section of the rule set it models rather than
// restated here.
//
// deposit-swap v3 (numbered chains, as src/ruleset/reorder.rs explores them):
// the deposit events of a history are one chain of the chain watcher's
// numbered observations, 1, 2, 3 … up to 4 (detect, reverse, re-detect,
// confirm: the re-inclusion), each of a sequenced type other than the one
// before it, an observation that `follows` a sequenced type (a confirmation or
// a reversal follows a detection) having an earlier observation of it. Each
// observation is its own kind (`DEPOSIT_DETECTED#3`), published once or twice
// (a re-publication: same content and number, new event id), the first after
// the first publication of the observation before it. The other event types
// are kinds of their own, published up to twice. Two kinds race as the
// verifier says: two observations of the chain only when the newer one is of
// a declared race's first side (a newer word against an older confirmation);
// an observation and another type when their types are a declared racing
// pair. No type implies another: a confirmation seen before its detection is
// just an older observation delivered late, which the rules absorb, and the
// in-order reference takes the newer one first only when the shuffled
// delivery decided a race that way (see `softFollows`).
//
// deposit-swap v2 (one kind per type): each event type up to two
// publications; a confirmation or a reversal only in histories with a
// detection, published after it. Its reference keeps producer order always:
// the race position of a type that others follow is the first time it or any
// of its followers was seen (a confirmation seen first means the swap learned
// of the deposit then), so every racing pair is ordered by one ranking that
// also respects `follows`.
import fc from 'fast-check';
import { RuleSet } from 'idemflow';

export const V3 = RuleSet.builtin('deposit-swap', { version: 3 });
export const V2 = RuleSet.builtin('deposit-swap', { version: 2 });
export const V1 = RuleSet.builtin('deposit-swap', { version: 1 });

const MAX_PUBLICATIONS = 2;
/** Observations in one chain, at most: the verifier's MAX_OBSERVATIONS. */
export const MAX_OBSERVATIONS = 4;

const sides = (x) => (Array.isArray(x) ? x : [x]);

/** What a definition's order section and rules declare, in the terms the property uses. */
export function readOrder(definition) {
  const types = definition.events.map((e) => e.type);
  const follows = {};
  const answers = {};
  for (const f of definition.order.follows) {
    if (types.includes(f.after)) (follows[f.event] ??= []).push(f.after);
    else answers[f.event] = f.after;
  }
  const directed = new Set();
  const racing = new Set();
  for (const { between: [a, b] } of definition.order.races) {
    for (const x of sides(a)) {
      for (const y of sides(b)) {
        directed.add(`${x} ${y}`);
        racing.add(`${x} ${y}`).add(`${y} ${x}`);
      }
    }
  }
  const operationId = {};
  for (const rule of definition.rules) for (const emit of rule.then?.emit ?? []) operationId[emit.type] = emit.id;
  return {
    types,
    fields: Object.fromEntries(definition.events.map((e) => [e.type, e.fields])),
    follows,
    answers,
    directed,
    racing,
    operationId,
    sequenced: definition.order.sequence?.events ?? [],
  };
}

// One publication: when its producer published it (after what it follows),
// and whether the broker delivers it a second time (how much later).
const publication = fc.record({ at: fc.nat(20), duplicateAfter: fc.option(fc.nat(20), { nil: null, freq: 3 }) });

/** Messages of one kind's publications from `base` on, each delivered once or twice. */
function publish(kind, type, publications, base, extra = {}) {
  const messages = [];
  publications.forEach((p, copy) => {
    const local = `${kind}.${copy + 1}`;
    const at = base + p.at;
    messages.push({ local, kind, type, at, ...extra });
    if (p.duplicateAfter !== null) messages.push({ local, kind, type, at: at + 1 + p.duplicateAfter, ...extra });
  });
  return messages;
}

/** The history in producer order: `external` (the watcher's and the timer's) and the `answers` per answering type. */
function inProducerOrder(order, messages, kinds, follows, races, chain = []) {
  const rank = (m) => [m.at, m.sequence ?? 0, order.types.indexOf(m.type), m.local];
  messages.sort((a, b) => {
    const [x, y] = [rank(a), rank(b)];
    for (let i = 0; i < x.length; i += 1) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  });
  const answers = Object.fromEntries(Object.keys(order.answers).map((t) => [t, messages.filter((m) => m.type === t)]));
  return { external: messages.filter((m) => !order.answers[m.type]), answers, kinds, follows, races, chain };
}

const firstAtOf = (messages) => Math.min(...messages.map((m) => m.at));

function modelV3(ruleSet) {
  const order = readOrder(ruleSet.definition());
  const unsequenced = order.types.filter((t) => !order.sequenced.includes(t));
  const step = fc.record({ pick: fc.nat(5), publications: fc.array(publication, { minLength: 1, maxLength: MAX_PUBLICATIONS }) });
  const history = fc
    .record({
      chain: fc.array(step, { maxLength: MAX_OBSERVATIONS }),
      others: fc.record(Object.fromEntries(unsequenced.map((t) => [t, fc.array(publication, { maxLength: MAX_PUBLICATIONS })]))),
    })
    .map(({ chain: steps, others }) => {
      const chain = [];
      const messages = [];
      let base = 0;
      for (const { pick, publications } of steps) {
        // A new number is a new word (not the type before it); a follower needs an earlier observation of what it follows.
        const legal = order.sequenced.filter(
          (e) => e !== chain.at(-1) && (order.follows[e] ?? []).filter((a) => order.sequenced.includes(a)).every((a) => chain.includes(a)),
        );
        if (legal.length === 0) break;
        const type = legal[pick % legal.length];
        chain.push(type);
        const sequence = chain.length;
        const own = publish(`${type}#${sequence}`, type, publications, base, { sequence });
        base = firstAtOf(own) + 1;
        messages.push(...own);
      }
      const kinds = chain.map((type, i) => ({ kind: `${type}#${i + 1}`, type, number: i + 1 }));
      for (const type of unsequenced) {
        if (others[type].length === 0) continue;
        // A type that follows a sequenced type follows its first observation (none in deposit-swap v3).
        const after = (order.follows[type] ?? []).map((a) => kinds.find((k) => k.type === a));
        if (after.includes(undefined)) continue;
        kinds.push({ kind: type, type, number: 0, after: after.map((k) => k.kind) });
        const from = after.length === 0 ? 0 : Math.max(...after.map((k) => firstAtOf(messages.filter((m) => m.kind === k.kind)))) + 1;
        messages.push(...publish(type, type, others[type], from));
      }
      const follows = Object.fromEntries(kinds.map((k) => [k.kind, k.number > 1 ? [kinds[k.number - 2].kind] : (k.after ?? [])]));
      const races = [];
      for (let i = 0; i < kinds.length; i += 1) {
        for (let j = i + 1; j < kinds.length; j += 1) {
          const [older, newer] = [kinds[i], kinds[j]];
          const both = older.number > 0 && newer.number > 0;
          const race = both
            ? order.directed.has(`${newer.type} ${older.type}`)
            : older.type !== newer.type && order.racing.has(`${older.type} ${newer.type}`);
          if (race) races.push([older.kind, newer.kind]);
        }
      }
      return inProducerOrder(order, messages, kinds, follows, races, chain);
    })
    .filter((h) => h.external.length > 0);
  const coverage = (shuffled, h) => {
    const trace = shuffled.run.trace;
    return {
      reinclusions: h.chain.some((t, i) => t === 'DEPOSIT_REVERSED' && h.chain.slice(i + 1).some((u) => u !== 'DEPOSIT_REVERSED')),
      chainsOfFour: h.chain.length === MAX_OBSERVATIONS,
      republished: h.external.some((m) => m.sequence !== undefined && m.local.endsWith('.2')),
      staleObservations: trace.some((a) => a.sequence !== undefined && a.outcome === 'stale'),
    };
  };
  return {
    name: `deposit-swap v${ruleSet.version} (numbered chains)`,
    ruleSet,
    order,
    history,
    maxExternal: (MAX_OBSERVATIONS + unsequenced.filter((t) => !order.answers[t]).length) * MAX_PUBLICATIONS * 2,
    maxAnswers: Object.keys(order.answers).length * MAX_PUBLICATIONS * 2,
    positions: (h, firstSeen) => new Map(h.kinds.map((k) => [k.kind, firstSeen.get(k.kind) ?? Infinity])),
    softFollows: true,
    coverage,
  };
}

function modelV2(ruleSet) {
  const order = readOrder(ruleSet.definition());
  const history = fc
    .record(Object.fromEntries(order.types.map((t) => [t, fc.array(publication, { maxLength: MAX_PUBLICATIONS })])))
    .map((publications) => {
      const firstAt = {};
      const messages = [];
      // Types that follow another type come after it, so their base time is known.
      const types = [...order.types].sort((a, b) => (order.follows[a] ? 1 : 0) - (order.follows[b] ? 1 : 0));
      for (const type of types) {
        if (publications[type].length === 0) continue;
        let base = 0;
        if (order.follows[type]) {
          const befores = order.follows[type].map((t) => firstAt[t]);
          if (befores.some((at) => at === undefined)) continue; // no detection, so no confirmation or reversal
          base = Math.max(...befores) + 1;
        }
        const own = publish(type, type, publications[type], base);
        firstAt[type] = firstAtOf(own);
        messages.push(...own);
      }
      const present = order.types.filter((t) => firstAt[t] !== undefined);
      const kinds = present.map((type) => ({ kind: type, type, number: 0 }));
      const follows = Object.fromEntries(present.map((t) => [t, order.follows[t] ?? []]));
      const races = [];
      for (let i = 0; i < present.length; i += 1) {
        for (let j = i + 1; j < present.length; j += 1) if (order.racing.has(`${present[i]} ${present[j]}`)) races.push([present[i], present[j]]);
      }
      return inProducerOrder(order, messages, kinds, follows, races);
    })
    .filter((h) => h.external.length > 0);
  return {
    name: `deposit-swap v${ruleSet.version} (one kind per type)`,
    ruleSet,
    order,
    history,
    maxExternal: order.types.filter((t) => !order.answers[t]).length * MAX_PUBLICATIONS * 2,
    maxAnswers: Object.keys(order.answers).length * MAX_PUBLICATIONS * 2,
    // A type is implied by its followers (see the header).
    positions: (h, firstSeen) => new Map(h.kinds.map(({ kind }) => {
      const implying = h.kinds.filter((k) => k.kind === kind || h.follows[k.kind].includes(kind));
      return [kind, Math.min(...implying.map((k) => firstSeen.get(k.kind) ?? Infinity))];
    })),
    softFollows: false,
    coverage: () => ({}),
  };
}

export const MODELS = { 3: modelV3(V3), 2: modelV2(V2) };
