// The two history models of the reorder property (./reorder-property.mjs),
// each read from the `order` section of the rule set it models rather than
// restated here.
//
// deposit-swap v3 (numbered chains, as src/proof/search.rs explores them):
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
// deposit-swap v3 with two deposits (issue 21, `modelDeposits`): the same
// numbered chains, one per deposit (A and B, distinct depositRefs, each up to
// 3 observations numbered per deposit), each deposit of the expected amount or
// of a partial one, the swap created with `expectedUnits` or without. Kinds
// of two deposits race only as a race declared `"across": true` says (two
// confirmations: the first the swap sees is exchanged); a race without it
// relates one deposit's observations, or a deposit event and another type.
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

/** Every emit of a rule: its `then`, its `else` and each case's answer. */
const emitsOf = (rule) => [rule.then, rule.else, ...(rule.cases ?? []).map((c) => c.then)].flatMap((answer) => answer?.emit ?? []);

/**
 * What a definition's order section and rules declare, in the terms the
 * property uses. A race with `"across": true` relates two facts' events of
 * its types (`across`, both ways); any other race relates one fact's events
 * (`directed`: newer of the first side over older of the second) or a fact
 * event and another type of any fact (`racing`).
 */
export function readOrder(definition) {
  const types = definition.events.map((e) => e.type);
  const follows = {};
  const answers = {};
  for (const f of definition.order.follows) {
    if (types.includes(f.after)) {
      follows[f.event] ??= [];
      follows[f.event].push(f.after);
    } else answers[f.event] = f.after;
  }
  const directed = new Set();
  const racing = new Set();
  const across = new Set();
  for (const {
    between: [a, b],
    across: acrossFacts,
  } of definition.order.races) {
    for (const x of sides(a)) {
      for (const y of sides(b)) {
        if (acrossFacts) {
          across.add(`${x} ${y}`).add(`${y} ${x}`);
        } else {
          directed.add(`${x} ${y}`);
          racing.add(`${x} ${y}`).add(`${y} ${x}`);
        }
      }
    }
  }
  const operationId = {};
  for (const rule of definition.rules) for (const emit of emitsOf(rule)) operationId[emit.type] = emit.id;
  const facts = definition.facts ? { name: definition.facts.name, key: definition.facts.key, events: definition.facts.events } : null;
  return {
    types,
    fields: Object.fromEntries(definition.events.map((e) => [e.type, e.fields])),
    follows,
    answers,
    directed,
    racing,
    across,
    operationId,
    /** Operation types whose id is per fact (`<name>:{<key>}:{workflowId}`). */
    perFact: new Set(facts ? Object.keys(operationId).filter((t) => operationId[t].includes(`{${facts.key}}`)) : []),
    facts,
    sequenced: definition.order.sequence?.events ?? [],
  };
}

/**
 * The racing pairs of a history's kinds, as the verifier relates them: two
 * observations of one fact when the newer is of a race's first side and the
 * older of its second (kinds come in chain order), observations of two facts
 * when their types race `across`, anything else when its types race.
 */
function racesOf(order, kinds) {
  const races = [];
  for (let i = 0; i < kinds.length; i += 1) {
    for (let j = i + 1; j < kinds.length; j += 1) {
      const [older, newer] = [kinds[i], kinds[j]];
      let race;
      if (older.fact !== undefined && newer.fact !== undefined) {
        race =
          older.fact === newer.fact ? order.directed.has(`${newer.type} ${older.type}`) : order.across.has(`${older.type} ${newer.type}`);
      } else {
        race = older.type !== newer.type && order.racing.has(`${older.type} ${newer.type}`);
      }
      if (race) races.push([older.kind, newer.kind]);
    }
  }
  return races;
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

/**
 * The history's other (unsequenced) types, published after what they follow: a type that follows a sequenced
 * type follows the first observation of it (none in deposit-swap v3). Adds their kinds and messages.
 */
function publishOthers(order, unsequenced, others, kinds, messages) {
  for (const type of unsequenced) {
    if (others[type].length === 0) continue;
    const after = (order.follows[type] ?? []).map((a) => kinds.find((k) => k.type === a));
    if (after.includes(undefined)) continue;
    kinds.push({ kind: type, type, number: 0, after: after.map((k) => k.kind) });
    const from = after.length === 0 ? 0 : Math.max(...after.map((k) => firstAtOf(messages.filter((m) => m.kind === k.kind)))) + 1;
    messages.push(...publish(type, type, others[type], from));
  }
}

/**
 * One fact's numbered chain from `steps`, its messages from `base` on, each
 * kind named `${prefix}${type}#${number}` and each message carrying `extra`.
 */
function observe(order, steps, base, prefix, extra) {
  const chain = [];
  const messages = [];
  for (const { pick, publications } of steps) {
    // A new number is a new word (not the type before it); a follower needs an earlier observation of what it follows.
    const legal = order.sequenced.filter(
      (e) => e !== chain.at(-1) && (order.follows[e] ?? []).filter((a) => order.sequenced.includes(a)).every((a) => chain.includes(a)),
    );
    if (legal.length === 0) break;
    const type = legal[pick % legal.length];
    chain.push(type);
    const sequence = chain.length;
    const own = publish(`${prefix}${type}#${sequence}`, type, publications, base, { sequence, ...extra });
    base = firstAtOf(own) + 1;
    messages.push(...own);
  }
  return { chain, messages };
}

/** The one deposit of a numbered-chain history (the expected amount is not set: it covers). */
export const ONE_DEPOSIT = Object.freeze({ depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000' });

/**
 * The two deposits of a multi-deposit history: distinct refs (the second
 * with '%', so a per-fact operation id escapes both ':' and '%'), and the
 * amounts each may have: the expected amount, or one of two partial amounts
 * that together would cover it (a rule set must never sum them).
 */
export const TWO_DEPOSITS = Object.freeze({
  refs: Object.freeze(['btc-mainnet:tx-abc:vout-0', 'eth-mainnet:0x5e%2f:log-7']),
  expectedUnits: '12500000',
  amounts: Object.freeze(['12500000', '7000000', '6000000']),
});

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
      const { chain, messages } = observe(order, steps, 0, '', { deposit: 0 });
      const kinds = chain.map((type, i) => ({ kind: `${type}#${i + 1}`, type, number: i + 1, fact: 0 }));
      publishOthers(order, unsequenced, others, kinds, messages);
      const follows = Object.fromEntries(kinds.map((k) => [k.kind, k.number > 1 ? [kinds[k.number - 2].kind] : (k.after ?? [])]));
      const races = racesOf(order, kinds);
      return { ...inProducerOrder(order, messages, kinds, follows, races, chain), deposits: [ONE_DEPOSIT], chains: [chain] };
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

/** Does `amountUnits` cover the swap's expected amount (any amount does when it is not set)? */
export const covers = (amountUnits, expectedUnits) => expectedUnits === undefined || BigInt(amountUnits) >= BigInt(expectedUnits);

/** A per-fact operation id as the rule set renders it (spec 1e): the key with '%' → %25 and ':' → %3A. */
export function perFactOperationId(template, key, value, workflowId) {
  return template.replace(`{${key}}`, value.replaceAll('%', '%25').replaceAll(':', '%3A')).replaceAll('{workflowId}', workflowId);
}

/**
 * deposit-swap v3 with several deposits (issue 21): two deposits of one swap,
 * each a numbered chain of up to 3 observations (numbered per deposit, as
 * `order.sequence` says when its events are the facts' events), each deposit
 * of the expected amount or of a partial one, the swap created with its
 * `expectedUnits` or without it (then any amount covers), and the other event
 * types as in the numbered-chain model. Kinds are `A:DEPOSIT_DETECTED#1` …
 * and `B:…`; races as `racesOf` reads them (the across race relates A's
 * confirmations to B's). The B chain starts at its own random time, so the
 * producer order interleaves the two.
 */
export function modelDeposits(ruleSet, { observations = 3 } = {}) {
  const order = readOrder(ruleSet.definition());
  const unsequenced = order.types.filter((t) => !order.sequenced.includes(t));
  const step = fc.record({ pick: fc.nat(5), publications: fc.array(publication, { minLength: 1, maxLength: MAX_PUBLICATIONS }) });
  const deposit = fc.record({
    start: fc.nat(20),
    amount: fc.constantFrom(...TWO_DEPOSITS.amounts),
    steps: fc.array(step, { minLength: 1, maxLength: observations }),
  });
  const labels = ['A', 'B'];
  const history = fc
    .record({
      expected: fc.boolean(),
      deposits: fc.tuple(deposit, deposit),
      others: fc.record(Object.fromEntries(unsequenced.map((t) => [t, fc.array(publication, { maxLength: MAX_PUBLICATIONS })]))),
    })
    .map(({ expected, deposits: drawn, others }) => {
      const messages = [];
      const kinds = [];
      const chains = [];
      drawn.forEach(({ start, steps }, fact) => {
        const observed = observe(order, steps, start, `${labels[fact]}:`, { deposit: fact });
        chains.push(observed.chain);
        messages.push(...observed.messages);
        kinds.push(...observed.chain.map((type, i) => ({ kind: `${labels[fact]}:${type}#${i + 1}`, type, number: i + 1, fact })));
      });
      publishOthers(order, unsequenced, others, kinds, messages);
      const previous = (k) => kinds.find((o) => o.fact === k.fact && o.number === k.number - 1);
      const follows = Object.fromEntries(kinds.map((k) => [k.kind, k.number > 1 ? [previous(k).kind] : (k.after ?? [])]));
      const races = racesOf(order, kinds);
      return {
        ...inProducerOrder(order, messages, kinds, follows, races),
        chains,
        deposits: drawn.map(({ amount }, fact) => ({ depositRef: TWO_DEPOSITS.refs[fact], amountUnits: amount })),
        expectedUnits: expected ? TWO_DEPOSITS.expectedUnits : undefined,
      };
    });
  const coverage = (shuffled, h) => {
    const { run, end } = shuffled;
    const emitted = run.trace.flatMap((a) => a.operationIds ?? []);
    const exchangedAt = emitted.findIndex((id) => id.startsWith('start-exchange:'));
    const reviews = emitted.filter((id) => id.startsWith('review-deposit:'));
    const covering = h.deposits.map((d) => covers(d.amountUnits, h.expectedUnits));
    const confirmed = h.chains.map((chain) => chain.includes('DEPOSIT_CONFIRMED'));
    // Which of the two deposits' confirmations the swap saw first, against which the producer confirmed first.
    const firstConfirmation = (fact) =>
      Math.min(
        ...h.kinds.filter((k) => k.fact === fact && k.type === 'DEPOSIT_CONFIRMED').map((k) => run.firstSeen.get(k.kind) ?? Infinity),
      );
    const producedFirst = h.external.find((m) => m.type === 'DEPOSIT_CONFIRMED')?.deposit;
    return {
      expectedUnset: h.expectedUnits === undefined,
      partialDeposits: h.deposits.some((_d, i) => !covering[i] && confirmed[i]),
      bothCoverAndConfirm: covering.every(Boolean) && confirmed.every(Boolean),
      acrossRaceAgainstProducer:
        covering.every(Boolean) && confirmed.every(Boolean) && firstConfirmation(1 - producedFirst) < firstConfirmation(producedFirst),
      depositReviewed: reviews.length > 0,
      bothReviewed: reviews.length === 2,
      reviewedAfterExchange: exchangedAt >= 0 && emitted.slice(exchangedAt).some((id) => id.startsWith('review-deposit:')),
      partialNotExchanged: !end.operations.some((id) => id.startsWith('start-exchange:')) && reviews.length > 0,
      staleObservations: run.trace.some((a) => a.sequence !== undefined && a.outcome === 'stale'),
      republished: h.external.some((m) => m.sequence !== undefined && m.local.endsWith('.2')),
    };
  };
  return {
    name: `deposit-swap v${ruleSet.version} (two deposits, numbered chains of up to ${observations})`,
    ruleSet,
    order,
    history,
    maxExternal: (2 * observations + unsequenced.filter((t) => !order.answers[t]).length) * MAX_PUBLICATIONS * 2,
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
        for (let j = i + 1; j < present.length; j += 1)
          if (order.racing.has(`${present[i]} ${present[j]}`)) races.push([present[i], present[j]]);
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
    positions: (h, firstSeen) =>
      new Map(
        h.kinds.map(({ kind }) => {
          const implying = h.kinds.filter((k) => k.kind === kind || h.follows[k.kind].includes(kind));
          return [kind, Math.min(...implying.map((k) => firstSeen.get(k.kind) ?? Infinity))];
        }),
      ),
    softFollows: false,
    coverage: () => ({}),
  };
}

/**
 * The models by name: 3 (one deposit, a chain of up to 4), 2 (v2's one kind
 * per type) and 'deposits' (deposit-swap v3 with two deposits, chains of up
 * to 3, partial amounts; only once the default v3 declares its deposits as
 * facts).
 */
/** The current deposit-swap (v4): v3 but for partial deposits, which it never keeps. */
export const V4 = RuleSet.builtin('deposit-swap', { version: 4 });
export const MODELS = { 3: modelV3(V3), 2: modelV2(V2), deposits: modelDeposits(V4) };
