//! The `reorder-safe` property: any delivery order, any duplication, one
//! outcome.
//!
//! A history is what producers emit for one workflow: a multiset of events,
//! each type at most [`MAX_COPIES`] times (re-publications under new event
//! ids), at most [`BOUND`] events, in which every event that `follows` another
//! event type has one of those before it. Every event of a history speaks of
//! the same facts (one deposit, one payout): a fact with other values is the
//! guards' business (`IDENTITY_MISMATCH` in any order), not this property's.
//!
//! For every history and start status, every delivery order is explored,
//! where an answer with disposition `retry` means "redeliver later" and an
//! event that `follows` an operation exists only once that operation was
//! emitted. Each order ends in a result: the status, the recorded fields, the
//! emitted operations, the events answered with an error (parked or
//! dead-lettered) and the events still undelivered. A once-only operation is
//! emitted or not; a recurring one (`<name>:{revision}:{workflowId}`) is
//! compared by how many times it was emitted (see [`Config::recurring`]): two
//! charges where the history in order makes one is a counterexample, while the
//! revisions in the ids may differ between orders (an `already-applied` does
//! not raise the revision, so where it falls shifts them) and are not
//! compared. Orders in which the workflow saw each declared racing pair in
//! the same order must end in the same result as the history in order. Exploration is memoised on the
//! configuration, so a history of six events costs hundreds of steps, not 6!.
//!
//! With `order.sequence`, the sequenced events of a history are one chain of
//! numbered observations (see [`histories`]), each its own local kind with
//! its number; the configuration holds the workflow's recorded sequence,
//! which a `when` on the sequence field is evaluated against, a guard on it
//! compares, and the result includes. Two observations of the chain race
//! only when the newer one is of a declared race's first side: an older one
//! delivered late is the rules' to absorb, compared with the history in order.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use serde_json::{json, Value};

use super::order::{After, Order};
use super::{Answer, RuleSet, StateIndex};
use crate::error::{Error, Result};
use crate::limits::{MAX_REORDER_CONFIGURATIONS, MAX_REORDER_HISTORIES};

/// Events in a history, at most.
pub const BOUND: usize = 6;
/// Events in a history with a chain of numbered observations, at most.
pub const BOUND_SEQUENCED: usize = 8;
/// Numbered observations in one chain, at most (detect, reverse, re-detect, confirm).
pub const MAX_OBSERVATIONS: usize = 4;
/// Copies of one event type in a history, at most.
pub const MAX_COPIES: u8 = 2;
const MAX_COUNTEREXAMPLES: usize = 8;

pub struct Check {
    /// `None` when the rule set makes no reorder claim or cannot be checked.
    pub skipped: Option<String>,
    /// A claim the check cannot prove (a comparison the model cannot
    /// evaluate): the property fails with this as its counterexample.
    pub unproven: Option<Value>,
    pub counterexamples: Vec<Value>,
    /// (history, start status) pairs explored: the `maxReorderHistories` budget used.
    pub histories: usize,
    /// Delivery configurations over all of them: the `maxReorderConfigurations` budget used.
    pub configurations: usize,
    /// For a rule set with facts, what the concrete explorer adds to the
    /// report: histories and configurations by number of facts.
    pub by_facts: Option<[(usize, usize); 3]>,
}

impl Check {
    pub fn info(&self, rule_set: &RuleSet) -> Value {
        let mut info = json!({
            "bound": { "events": BOUND, "copiesPerType": MAX_COPIES },
            "histories": self.histories,
            "configurations": self.configurations,
            "budget": {
                "histories": { "used": self.histories, "limit": MAX_REORDER_HISTORIES },
                "configurations": { "used": self.configurations, "limit": MAX_REORDER_CONFIGURATIONS },
            },
        });
        if let Some(order) = &rule_set.order {
            info["races"] = order
                .races
                .iter()
                .map(|r| {
                    let mut race = json!([rule_set.events[r.a].name, rule_set.events[r.b].name]);
                    if let Some(d) = &r.description {
                        race = json!({ "between": race, "description": d });
                    }
                    race
                })
                .collect();
            info["follows"] = order
                .follows
                .iter()
                .map(|f| {
                    let after = match &f.after {
                        After::Event(e) => rule_set.events[*e].name.clone(),
                        After::Operation(op) => op.clone(),
                    };
                    json!({ "event": rule_set.events[f.event].name, "after": after })
                })
                .collect();
        }
        if let Some(sequence) = rule_set.order.as_ref().and_then(|o| o.sequence.as_ref()) {
            info["bound"] = json!({
                "events": BOUND_SEQUENCED, "copiesPerType": MAX_COPIES,
                "sequence": {
                    "field": rule_set.fields[sequence.field].name,
                    "events": sequence.events.iter().map(|e| rule_set.events[*e].name.as_str()).collect::<Vec<_>>(),
                    "observations": MAX_OBSERVATIONS,
                    "copiesPerObservation": MAX_COPIES,
                },
            });
        }
        if let Some(by_facts) = &self.by_facts {
            info["bound"] = super::facts_reorder::bound();
            info["budget"]["histories"]["limit"] = json!(crate::limits::MAX_FACTS_REORDER_HISTORIES);
            info["budget"]["configurations"]["limit"] = json!(crate::limits::MAX_FACTS_REORDER_CONFIGURATIONS);
            info["byFacts"] = by_facts
                .iter()
                .zip(["none", "one", "two"])
                .map(|((histories, configurations), facts)| json!({ "facts": facts, "histories": histories, "configurations": configurations }))
                .collect();
        }
        if let Some(reason) = &self.skipped {
            info["skipped"] = json!(reason);
        }
        info
    }
}

/// A small, fast hasher for configuration keys (FxHash's multiply-rotate).
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64)
    }
    fn write_u16(&mut self, n: u16) {
        self.write_u64(n as u64)
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64)
    }
}

/// Where one delivery order stands. Counts are per local event type (the
/// types present in the history), two bits each.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Config {
    at: StateIndex,
    /// Bit `i`: template `i` was emitted at least once (what `follows` an
    /// operation needs, and the whole story for a once-only template).
    emitted: u64,
    /// Three bits per template index: how many times a recurring template was
    /// emitted. Exact within the bound: a delivery applies one transition,
    /// which emits a template at most once in a rule set that passes
    /// `operation-ids-unique`, so a history of at most [`BOUND`] events emits
    /// it at most 6 times; the count saturates at 7 only for rule sets that
    /// fail that property anyway.
    recurring: u128,
    recorded: u64,
    consumed: u32,
    errored: u32,
    /// Per racing pair of local types, two bits: decided, and whether the
    /// lower type was seen first.
    seen_first: u64,
    /// The workflow's recorded sequence (`order.sequence`): the number of
    /// the last observation a transition recorded, 0 for none.
    sequence: u8,
}

/// Seven words for the hasher, which mixes one word at a time (a derived
/// `Hash` fed the `u128` to it byte by byte): the search hashes every
/// configuration it meets, and this is most of its time.
impl std::hash::Hash for Config {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.at as u64 | (self.sequence as u64) << 32);
        state.write_u64(self.emitted);
        state.write_u64(self.recurring as u64);
        state.write_u64((self.recurring >> 64) as u64);
        state.write_u64(self.recorded);
        state.write_u64(self.consumed as u64 | (self.errored as u64) << 32);
        state.write_u64(self.seen_first);
    }
}

const RECURRING_MAX: u128 = 7;

/// The race bookkeeping of the first delivery of local type `t`: for every
/// racing pair `(low, high, pair)` with `t` on one side and the other side
/// `undelivered`, the pair's two bits of `seen` say it is decided and
/// whether `low` came first. Shared by this model and the facts explorer.
pub(super) fn seen_first(
    mut seen: u64,
    t: usize,
    races: impl Iterator<Item = (usize, usize, usize)>,
    undelivered: impl Fn(usize) -> bool,
) -> u64 {
    for (low, high, pair) in races {
        let other = if low == t {
            high
        } else if high == t {
            low
        } else {
            continue;
        };
        if undelivered(other) {
            seen |= 1 << (2 * pair);
            if low == t {
                seen |= 1 << (2 * pair + 1);
            }
        }
    }
    seen
}

fn bump_recurring(packed: u128, slot: usize) -> u128 {
    if (packed >> (3 * slot)) & RECURRING_MAX == RECURRING_MAX {
        packed
    } else {
        packed + (1 << (3 * slot))
    }
}

fn recurring_count(packed: u128, slot: usize) -> usize {
    ((packed >> (3 * slot)) & RECURRING_MAX) as usize
}

/// What a `when` reads in this model: the event's observation number and
/// the recorded one (`check` made sure no condition reads anything else).
struct SequenceView {
    number: u8,
    recorded: u8,
}

impl super::View<'static> for SequenceView {
    fn recorded(&self, _field: usize) -> Result<Option<crate::field::FieldValue<'static>>> {
        Ok(Some(crate::field::FieldValue::Count(self.recorded as u64)))
    }
    fn event_value(&self, _field: usize) -> crate::field::FieldValue<'static> {
        crate::field::FieldValue::Count(self.number as u64)
    }
    fn other_has_event(&self, _types: &[usize]) -> bool {
        false
    }
    fn emitted(&self, _name: &str) -> bool {
        false
    }
}

fn count(packed: u32, t: usize) -> u8 {
    ((packed >> (2 * t)) & 3) as u8
}

fn bump(packed: u32, t: usize) -> u32 {
    packed + (1 << (2 * t))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    Applied,
    AlreadyApplied,
    Stale,
    Error { code: &'static str, disposition: &'static str },
}

#[derive(Clone, Copy)]
struct Delivery {
    event: usize,
    /// The observation's number, 0 for an event that carries none.
    number: u8,
    from: StateIndex,
    to: StateIndex,
    rule: usize,
    reply: Reply,
}

/// One history from one start status, with everything precomputed.
struct History<'a> {
    rule_set: &'a RuleSet,
    /// Global event index of each local type: the chain's observations in
    /// their producer's order, then the other types in declaration order.
    types: Vec<usize>,
    /// Each local type's observation number (`order.sequence`), 0 for a type that carries none.
    numbers: Vec<u8>,
    /// The sequence field, when the order section declares one.
    sequence_field: Option<usize>,
    copies: Vec<u8>,
    /// Emitted-template bits that must be set before a local type can exist.
    needs_emitted: Vec<u64>,
    /// Local types each local type follows (as an event).
    follows: Vec<Vec<usize>>,
    /// Racing pairs of local types `(lower, higher, pair index)`.
    races: Vec<(usize, usize, usize)>,
    /// Template bit of each rule's emits, by rule index.
    emit_bits: Vec<u64>,
    /// Template indices of each rule's recurring emits, by rule index.
    recurring_emits: Vec<Vec<usize>>,
}

impl History<'_> {
    /// What delivering one event of local type `t` does: `None` when it is
    /// deferred (`retry`) or cannot exist yet.
    fn deliver(&self, config: &Config, t: usize) -> Option<(Config, Delivery)> {
        if count(config.consumed, t) >= self.copies[t] {
            return None;
        }
        if self.needs_emitted[t] != 0 && config.emitted & self.needs_emitted[t] == 0 {
            return None;
        }
        let event = self.types[t];
        let number = self.numbers[t];
        let mut rule_index = self.rule_set.cells[event][config.at][0];
        let rule = &self.rule_set.rules[rule_index];
        let mut next = *config;
        // A guard on the sequence compares numbers; every other guard holds
        // once its field is recorded (one fact per history).
        let guard_fails = config.at != 0
            && rule.guard.iter().any(|f| {
                config.recorded & (1 << f) == 0 || (Some(*f) == self.sequence_field && config.sequence != number)
            });
        // `check` made sure every `when` compares the sequence with the recorded one.
        if !guard_fails && rule.otherwise.is_some() {
            rule_index = self
                .rule_set
                .choose(rule_index, &SequenceView { number, recorded: config.sequence })
                .unwrap_or(rule_index);
        }
        let rule = &self.rule_set.rules[rule_index];
        let reply = if guard_fails {
            Reply::Error { code: "IDENTITY_MISMATCH", disposition: "reconcile" }
        } else {
            match &rule.answer {
                Answer::Fail { disposition, .. } if disposition.as_str() == "retry" => return None,
                Answer::Fail { code, disposition } => {
                    Reply::Error { code: code.as_str(), disposition: disposition.as_str() }
                }
                Answer::AlreadyApplied => Reply::AlreadyApplied,
                Answer::Stale => Reply::Stale,
                Answer::Applied(transition) => {
                    next.at = transition.to + 1;
                    next.emitted |= self.emit_bits[rule_index];
                    for &slot in &self.recurring_emits[rule_index] {
                        next.recurring = bump_recurring(next.recurring, slot);
                    }
                    for f in &transition.record {
                        next.recorded |= 1 << f;
                        if Some(*f) == self.sequence_field {
                            next.sequence = number;
                        }
                    }
                    for f in &transition.clear {
                        next.recorded &= !(1 << f);
                        if Some(*f) == self.sequence_field {
                            next.sequence = 0;
                        }
                    }
                    Reply::Applied
                }
            }
        };
        if matches!(reply, Reply::Error { .. }) {
            next.errored = bump(next.errored, t);
        }
        if count(config.consumed, t) == 0 {
            next.seen_first =
                seen_first(next.seen_first, t, self.races.iter().copied(), |other| count(config.consumed, other) == 0);
        }
        next.consumed = bump(next.consumed, t);
        Some((next, Delivery { event, number, from: config.at, to: next.at, rule: rule_index, reply }))
    }

    /// A result compares everything but the race bookkeeping.
    fn result(config: &Config) -> (StateIndex, u64, u128, u64, u32, u32, u8) {
        (config.at, config.emitted, config.recurring, config.recorded, config.consumed, config.errored, config.sequence)
    }

    /// The history in order: each step delivers the first event (in
    /// declaration order) that its producer could have emitted by then and
    /// that is not deferred.
    fn in_order(&self, start: Config) -> (Config, Vec<Delivery>) {
        let mut config = start;
        let mut deliveries = Vec::new();
        'steps: loop {
            for t in 0..self.types.len() {
                if self.follows[t].iter().any(|a| count(config.consumed, *a) == 0) {
                    continue;
                }
                if let Some((next, delivery)) = self.deliver(&config, t) {
                    config = next;
                    deliveries.push(delivery);
                    continue 'steps;
                }
            }
            // Nothing more in producer order: deliver what is left, deferred or not.
            for t in 0..self.types.len() {
                if let Some((next, delivery)) = self.deliver(&config, t) {
                    config = next;
                    deliveries.push(delivery);
                    continue 'steps;
                }
            }
            return (config, deliveries);
        }
    }
}

struct Search<'h, 'a, 's> {
    history: &'h History<'a>,
    /// Reused from history to history (cleared), so it allocates once.
    seen: &'s mut HashSet<Config, BuildHasherDefault<Fx>>,
    /// Per race signature: the first result reached and the order that reached it.
    references: Vec<(u64, Config, Vec<Delivery>, bool)>,
    path: Vec<Delivery>,
    mismatch: Option<(usize, Config, Vec<Delivery>)>,
    /// The whole verification's count, not this history's: the budget is one total.
    budget: &'s mut Check,
}

impl Search<'_, '_, '_> {
    fn explore(&mut self, config: Config) -> Result<()> {
        if self.mismatch.is_some() || !self.seen.insert(config) {
            return Ok(());
        }
        self.budget.configurations += 1;
        if self.budget.configurations > MAX_REORDER_CONFIGURATIONS {
            return Err(over_budget(
                "maxReorderConfigurations",
                MAX_REORDER_CONFIGURATIONS,
                "delivery configurations over all histories and start statuses",
                self.budget.histories,
            ));
        }
        let mut progressed = false;
        for t in 0..self.history.types.len() {
            if let Some((next, delivery)) = self.history.deliver(&config, t) {
                progressed = true;
                self.path.push(delivery);
                self.explore(next)?;
                self.path.pop();
            }
        }
        if !progressed {
            match self.references.iter().position(|r| r.0 == config.seen_first) {
                None => self.references.push((config.seen_first, config, self.path.clone(), false)),
                Some(i) if History::result(&self.references[i].1) != History::result(&config) => {
                    self.mismatch = Some((i, config, self.path.clone()));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

pub fn check(rule_set: &RuleSet) -> Result<Check> {
    let mut outcome = Check {
        skipped: None,
        unproven: None,
        counterexamples: Vec::new(),
        histories: 0,
        configurations: 0,
        by_facts: None,
    };
    if rule_set.facts.is_some() {
        return super::facts_reorder::check(rule_set);
    }
    let Some(order) = &rule_set.order else {
        outcome.skipped =
            Some("no 'order' section: the rule set is proven for in-order delivery per workflow only".into());
        return Ok(outcome);
    };
    if rule_set.cells.iter().flatten().any(|cell| cell.len() != 1) {
        outcome.skipped = Some("needs exactly one answer per (event type, status) pair first".into());
        return Ok(outcome);
    }
    // The model knows one value: the recorded sequence. A `when` on anything
    // else (an amount, another count) it cannot evaluate, so the claim stays unproven.
    let sequence_field = order.sequence.as_ref().map(|s| s.field);
    let evaluable = |c: &super::Cond| match c {
        super::Cond::Compare { event_field, workflow_field, .. } => {
            Some(*event_field) == sequence_field && Some(*workflow_field) == sequence_field
        }
        _ => false,
    };
    if let Some(rule) = rule_set.rules.iter().find(|r| r.when.iter().any(|c| !evaluable(c))) {
        let reason = format!(
            "{} compares fields the reorder check cannot evaluate (it models only the sequence of order.sequence against its recorded value): the rule set's 'order' claim is not proven",
            rule.origin
        );
        outcome.unproven = Some(json!({ "rule": rule.origin, "reason": reason }));
        outcome.skipped = Some(reason);
        return Ok(outcome);
    }
    let templates = rule_set.templates();
    let emit_bits: Vec<u64> = rule_set
        .rules
        .iter()
        .map(|rule| match &rule.answer {
            Answer::Applied(t) => t.emit.iter().fold(0, |bits, e| bits | template_bit(&templates, &e.id_template.text)),
            _ => 0,
        })
        .collect();
    let recurring_emits: Vec<Vec<usize>> = rule_set
        .rules
        .iter()
        .map(|rule| match &rule.answer {
            Answer::Applied(t) => t
                .emit
                .iter()
                .filter(|e| e.id_template.recurring)
                .filter_map(|e| templates.iter().position(|x| *x == e.id_template.text))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    let starts: Vec<StateIndex> = std::iter::once(0)
        .chain(rule_set.statuses.iter().enumerate().filter(|(_, s)| s.initial).map(|(i, _)| i + 1))
        .collect();

    // What each event type needs before it can exist, and which pairs race:
    // the same for every history, so worked out once.
    let needs_emitted: Vec<u64> = (0..rule_set.events.len())
        .map(|e| {
            order.follows.iter().filter(|f| f.event == e).fold(0, |bits, f| match &f.after {
                After::Operation(op) => bits | operation_bits(rule_set, &templates, op),
                After::Event(_) => bits,
            })
        })
        .collect();
    let follows_events: Vec<Vec<usize>> = (0..rule_set.events.len())
        .map(|e| {
            order
                .follows
                .iter()
                .filter(|f| f.event == e)
                .filter_map(|f| match f.after {
                    After::Event(a) => Some(a),
                    After::Operation(_) => None,
                })
                .collect()
        })
        .collect();
    let racing: HashSet<(usize, usize)> = order.races.iter().map(|r| (r.a, r.b)).collect();

    let sequenced = |e: usize| order.sequence.as_ref().is_some_and(|s| s.events.contains(&e));
    let mut seen: HashSet<Config, BuildHasherDefault<Fx>> = HashSet::default();
    for shape in histories(rule_set, order)? {
        // The chain's observations first, in their producer's order, then the other types.
        let chain_length = shape.chain.len();
        let mut types: Vec<usize> = shape.chain.iter().map(|(e, _)| *e).collect();
        let mut copies: Vec<u8> = shape.chain.iter().map(|(_, n)| *n).collect();
        let mut numbers: Vec<u8> = (1..=chain_length as u8).collect();
        for (e, n) in shape.copies.iter().enumerate().filter(|(_, n)| **n > 0) {
            types.push(e);
            copies.push(*n);
            numbers.push(0);
        }
        // A type's first local kind: an event that follows a sequenced type follows its first observation.
        let local = |global: usize| types.iter().position(|t| *t == global);
        let follows: Vec<Vec<usize>> = (0..types.len())
            .map(|t| {
                let mut after: Vec<usize> = follows_events[types[t]]
                    .iter()
                    .filter(|a| !(t < chain_length && sequenced(**a)))
                    .filter_map(|a| local(*a))
                    .collect();
                // Each observation comes after the one numbered before it.
                if t > 0 && t < chain_length {
                    after.push(t - 1);
                }
                after
            })
            .collect();
        let mut races = Vec::new();
        for low in 0..types.len() {
            for high in low + 1..types.len() {
                let (a, b) = (types[low].min(types[high]), types[low].max(types[high]));
                // Two observations of the chain (`low` is the older): their
                // numbers say which came first, so they race only when the
                // newer one is of the race's first side (a reversal or a
                // detection newer than a confirmation). An older one seen
                // late is the rules' to absorb, compared with the history in order.
                let races_here = if low < chain_length && high < chain_length {
                    order.directed.contains(&(types[high], types[low]))
                } else {
                    a != b && racing.contains(&(a, b))
                };
                if races_here {
                    races.push((low, high, races.len()));
                }
            }
        }
        if races.len() > 32 {
            return Err(Error::RuleSetInvalid {
                path: "$.order.races".into(),
                reason: "limit racing pairs: at most 32 racing pairs of events in one history; declare fewer races"
                    .into(),
                report: None,
            });
        }
        let history = History {
            rule_set,
            copies,
            needs_emitted: types.iter().map(|e| needs_emitted[*e]).collect(),
            follows,
            races,
            emit_bits: emit_bits.clone(),
            recurring_emits: recurring_emits.clone(),
            numbers,
            sequence_field,
            types,
        };
        for &start in &starts {
            outcome.histories += 1;
            if outcome.histories > MAX_REORDER_HISTORIES {
                return Err(over_budget(
                    "maxReorderHistories",
                    MAX_REORDER_HISTORIES,
                    "(history, start status) pairs",
                    outcome.histories - 1,
                ));
            }
            let origin = Config {
                at: start,
                emitted: 0,
                recurring: 0,
                recorded: 0,
                consumed: 0,
                errored: 0,
                seen_first: 0,
                sequence: 0,
            };
            let (end, deliveries) = history.in_order(origin);
            seen.clear();
            let mut search = Search {
                history: &history,
                seen: &mut seen,
                references: vec![(end.seen_first, end, deliveries, true)],
                path: Vec::new(),
                mismatch: None,
                budget: &mut outcome,
            };
            search.explore(origin)?;
            if let Some((reference, actual, path)) = &search.mismatch {
                let (_, expected_end, expected, in_order) = &search.references[*reference];
                let example = counterexample(&history, start, (expected, expected_end, *in_order), (path, actual));
                outcome.counterexamples.push(example);
                break;
            }
        }
        if outcome.counterexamples.len() >= MAX_COUNTEREXAMPLES {
            break;
        }
    }
    Ok(outcome)
}

/// The refusal of a definition whose check would take more than the whole
/// verification's budget: `limit maxReorderConfigurations: …`.
fn over_budget(limit: &str, max: usize, what: &str, histories_done: usize) -> Error {
    Error::RuleSetInvalid {
        path: "$.order".into(),
        reason: format!(
            "limit {limit}: at most {max} {what} in one verification, this definition needs more \
             (the budget ran out after {histories_done} (history, start status) pairs); split the rule set or declare fewer initial statuses"
        ),
        report: None,
    }
}

fn template_bit(templates: &[&str], text: &str) -> u64 {
    templates.iter().position(|t| *t == text).map_or(0, |i| 1 << i)
}

fn operation_bits(rule_set: &RuleSet, templates: &[&str], operation: &str) -> u64 {
    let mut bits = 0;
    for rule in &rule_set.rules {
        if let Answer::Applied(t) = &rule.answer {
            for e in t.emit.iter().filter(|e| e.operation_type == operation) {
                bits |= template_bit(templates, &e.id_template.text);
            }
        }
    }
    bits
}

/// One history: the chain of numbered observations (`order.sequence`; each
/// its event type and copies) and the copies of every other event type.
struct Shape {
    chain: Vec<(usize, u8)>,
    copies: Vec<u8>,
}

impl Shape {
    fn size(&self) -> usize {
        self.chain.iter().map(|(_, n)| *n as usize).sum::<usize>()
            + self.copies.iter().map(|n| *n as usize).sum::<usize>()
    }

    fn has(&self, e: usize) -> bool {
        self.copies[e] > 0 || self.chain.iter().any(|(t, _)| *t == e)
    }
}

/// Every legal history, smallest first. Without a sequence, copies per event
/// type (each at most [`MAX_COPIES`], at most [`BOUND`] events). With one,
/// the sequenced types are a chain of up to [`MAX_OBSERVATIONS`] numbered
/// observations, each of a sequenced type other than the one before it and
/// each with up to [`MAX_COPIES`] copies, in which an observation that
/// `follows` a sequenced type has an earlier observation of it; the other types as
/// before, at most [`BOUND_SEQUENCED`] events in all.
fn histories(rule_set: &RuleSet, order: &Order) -> Result<Vec<Shape>> {
    let types = rule_set.events.len();
    let sequenced: Vec<usize> = order.sequence.as_ref().map(|s| s.events.clone()).unwrap_or_default();
    let bound = if sequenced.is_empty() { BOUND } else { BOUND_SEQUENCED };
    let too_many = || {
        Error::RuleSetInvalid {
        path: "$.order".into(),
        reason: format!(
            "limit maxReorderHistories: at most {MAX_REORDER_HISTORIES} histories, this definition's {types} event types make more of up to {bound} events; split the rule set"
        ),
        report: None,
    }
    };
    // The chains: observation types in order, each follows satisfied by an earlier observation.
    let mut chains: Vec<Vec<usize>> = vec![Vec::new()];
    let mut frontier: Vec<Vec<usize>> = vec![Vec::new()];
    for _ in 0..MAX_OBSERVATIONS.min(bound) {
        let mut longer = Vec::new();
        for chain in &frontier {
            for &e in &sequenced {
                // A producer numbers a new observation when its word changes:
                // the same word again is a re-publication, under the same number.
                if chain.last() == Some(&e) {
                    continue;
                }
                let legal = order.follows.iter().all(|f| match f.after {
                    After::Event(a) if f.event == e && sequenced.contains(&a) => chain.contains(&a),
                    _ => true,
                });
                if legal {
                    // Counted as they are made: a definition with many sequenced types is refused before it costs.
                    if chains.len() + longer.len() >= MAX_REORDER_HISTORIES {
                        return Err(too_many());
                    }
                    let mut next = chain.clone();
                    next.push(e);
                    longer.push(next);
                }
            }
        }
        chains.extend(longer.iter().cloned());
        frontier = longer;
    }
    let mut out: Vec<Shape> = Vec::new();
    for chain in &chains {
        // Copies of each observation: 1 to MAX_COPIES.
        let mut chain_copies = vec![1u8; chain.len()];
        loop {
            let used: usize = chain_copies.iter().map(|n| *n as usize).sum();
            if used <= bound {
                let mut copies = vec![0u8; types];
                if !walk(&sequenced, 0, bound - used, &mut copies, &mut |copies| {
                    out.push(Shape {
                        chain: chain.iter().copied().zip(chain_copies.iter().copied()).collect(),
                        copies: copies.to_vec(),
                    });
                    out.len() <= MAX_REORDER_HISTORIES
                }) {
                    return Err(too_many());
                }
            }
            // The next combination of copies, or done.
            let Some(i) = chain_copies.iter().position(|n| *n < MAX_COPIES) else { break };
            chain_copies[i] += 1;
            chain_copies[..i].iter_mut().for_each(|n| *n = 1);
        }
    }
    /// Copies of each unsequenced type from `e` on, with `left` events to spend.
    fn walk(
        sequenced: &[usize],
        e: usize,
        left: usize,
        copies: &mut Vec<u8>,
        emit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> bool {
        if e == copies.len() {
            return emit(copies);
        }
        let most = if sequenced.contains(&e) { 0 } else { MAX_COPIES.min(left as u8) };
        for n in 0..=most {
            copies[e] = n;
            if !walk(sequenced, e + 1, left - n as usize, copies, emit) {
                return false;
            }
        }
        copies[e] = 0;
        true
    }
    out.retain(|shape| {
        shape.size() > 0
            && order.follows.iter().all(|f| match f.after {
                After::Event(a) => !shape.has(f.event) || shape.has(a),
                After::Operation(_) => true,
            })
    });
    // Smallest first; among equals, the earlier-declared types first, then
    // the shorter chain. Unstable, but over one input order: deterministic.
    crate::sort::sort_by(&mut out, &mut |a, b| {
        a.size().cmp(&b.size()).then_with(|| b.copies.cmp(&a.copies)).then_with(|| a.chain.cmp(&b.chain)).is_lt()
    });
    Ok(out)
}

fn counterexample(
    history: &History,
    start: StateIndex,
    expected: (&[Delivery], &Config, bool),
    actual: (&[Delivery], &Config),
) -> Value {
    let rs = history.rule_set;
    // An observation is named with its number: `DEPOSIT_DETECTED #3`.
    let name = |t: usize| -> String {
        let event = &rs.events[history.types[t]].name;
        match history.numbers[t] {
            0 => event.clone(),
            n => format!("{event} #{n}"),
        }
    };
    let steps = |deliveries: &[Delivery]| -> Vec<Value> {
        deliveries
            .iter()
            .map(|d| {
                let answer = match d.reply {
                    Reply::Applied => "applied".to_string(),
                    Reply::AlreadyApplied => "already-applied".to_string(),
                    Reply::Stale => "stale".to_string(),
                    Reply::Error { code, disposition } => format!("{code} ({disposition})"),
                };
                let mut step = json!({
                    "event": rs.events[d.event].name,
                    "from": rs.state_name(d.from),
                    "answer": answer,
                    "to": rs.state_name(d.to),
                    "rule": rs.rules[d.rule].origin,
                });
                if d.number > 0 {
                    step["sequence"] = json!(d.number);
                }
                step
            })
            .collect()
    };
    let end = |config: &Config| {
        let names = |packed: u32| -> Vec<String> {
            let mut names = Vec::new();
            for t in 0..history.types.len() {
                for _ in 0..count(packed, t) {
                    names.push(name(t));
                }
            }
            names
        };
        let undelivered = {
            let mut names = Vec::new();
            for t in 0..history.types.len() {
                for _ in count(config.consumed, t)..history.copies[t] {
                    names.push(name(t));
                }
            }
            names
        };
        let mut end = json!({
            "status": rs.state_name(config.at),
            "recorded": rs.fields.iter().enumerate().filter(|(i, _)| config.recorded & (1 << i) != 0).map(|(_, f)| f.name.as_str()).collect::<Vec<_>>(),
            // A recurring template once per emission, a once-only one once.
            "emitted": rs.templates().into_iter().enumerate().filter(|(i, _)| config.emitted & (1 << i) != 0).flat_map(|(i, t)| {
                std::iter::repeat(t).take(recurring_count(config.recurring, i).max(1))
            }).collect::<Vec<_>>(),
            "answeredWithError": names(config.errored),
            "undelivered": undelivered,
        });
        if history.sequence_field.is_some() {
            end["recordedSequence"] = json!(config.sequence);
        }
        end
    };
    let races: Vec<String> = history
        .races
        .iter()
        .filter(|(_, _, pair)| actual.1.seen_first & (1 << (2 * pair)) != 0)
        .map(|&(low, high, pair)| {
            let (first, second) =
                if actual.1.seen_first & (1 << (2 * pair + 1)) != 0 { (low, high) } else { (high, low) };
            format!("{} seen before {}", name(first), name(second))
        })
        .collect();
    let same =
        |a: &Delivery, b: &Delivery| a.event == b.event && a.number == b.number && a.to == b.to && a.reply == b.reply;
    let diverges_at =
        expected.0.iter().zip(actual.0).position(|(a, b)| !same(a, b)).unwrap_or(expected.0.len().min(actual.0.len()));
    let mut events = Vec::new();
    for t in 0..history.types.len() {
        for _ in 0..history.copies[t] {
            events.push(name(t));
        }
    }
    json!({
        "start": rs.state_name(start),
        "history": events,
        "races": races,
        "expected": { "inOrder": expected.2, "deliveries": steps(expected.0), "end": end(expected.1) },
        "actual": { "deliveries": steps(actual.0), "end": end(actual.1) },
        "divergesAt": diverges_at,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::ruleset::{verify_definition, BUILTIN_DEPOSIT_SWAP_V1, BUILTIN_DEPOSIT_SWAP_V2};

    fn reorder_property(definition: &Value) -> Value {
        let report = verify_definition(definition).unwrap().to_json();
        report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap().clone()
    }

    fn v2() -> Value {
        serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V2).unwrap()
    }

    /// Replaces the answer of the rule written for `on` in `in`.
    fn set_answer(definition: &mut Value, on: &str, status: &str, then: Value) {
        let rule = definition["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| {
                let names =
                    |v: &Value, name: &str| v == name || v.as_array().is_some_and(|a| a.iter().any(|x| x == name));
                names(&r["on"], on) && names(&r["in"], status)
            })
            .unwrap_or_else(|| panic!("no rule for {on} in {status}"));
        rule["then"] = then;
        rule.as_object_mut().unwrap().remove("guard");
    }

    #[test]
    fn deposit_swap_v2_is_reorder_safe_and_says_what_it_checked() {
        let property = reorder_property(&v2());
        assert_eq!(property["ok"], true, "{property}");
        let checked = &property["checked"];
        assert_eq!(checked["bound"], json!({ "events": 6, "copiesPerType": 2 }));
        assert!(checked["histories"].as_u64().unwrap() > 100);
        assert!(checked["configurations"].as_u64().unwrap() > checked["histories"].as_u64().unwrap());
        assert_eq!(checked["races"].as_array().unwrap().len(), 6);
        assert!(checked.get("skipped").is_none());
        // The budget is the whole verification's: what it used is what it explored.
        let budget = &checked["budget"];
        assert_eq!(budget["histories"]["used"], checked["histories"]);
        assert_eq!(budget["configurations"]["used"], checked["configurations"]);
        assert_eq!(budget["histories"]["limit"], 100_000);
        assert_eq!(budget["configurations"]["limit"], 2_000_000);
    }

    #[test]
    fn v1_with_the_same_order_fails_on_both_overtakings() {
        let mut v1: Value = serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V1).unwrap();
        v1["order"] = v2()["order"].clone();
        let property = reorder_property(&v1);
        assert_eq!(property["ok"], false);
        let mut all = vec![property["counterexample"].clone()];
        all.extend(property["moreCounterexamples"].as_array().unwrap().iter().cloned());
        let overtaken = |first: &str, second: &str| {
            all.iter().any(|c| {
                c["history"] == json!(["DEPOSIT_DETECTED", second])
                    && c["actual"]["deliveries"][0]["event"] == first
                    && c["divergesAt"] == 0
            })
        };
        assert!(overtaken("DEPOSIT_CONFIRMED", "DEPOSIT_CONFIRMED"), "{property}");
        assert!(overtaken("DEPOSIT_REVERSED", "DEPOSIT_REVERSED"), "{property}");
    }

    #[test]
    fn a_confirmation_parked_in_waiting_is_a_counterexample() {
        let mut definition = v2();
        set_answer(&mut definition, "DEPOSIT_CONFIRMED", "waiting", json!({ "error": "INVALID_TRANSITION" }));
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false);
        let example = &property["counterexample"];
        assert_eq!(example["expected"]["inOrder"], true);
        assert_eq!(example["actual"]["deliveries"][0]["answer"], "INVALID_TRANSITION (reconcile)");
        assert_eq!(example["actual"]["end"]["answeredWithError"], json!(["DEPOSIT_CONFIRMED"]));
    }

    #[test]
    fn a_confirmation_deferred_in_waiting_is_reorder_safe() {
        // Deferring (retry) instead of absorbing: redelivered after the detection, it ends the same.
        let mut definition = v2();
        set_answer(
            &mut definition,
            "DEPOSIT_CONFIRMED",
            "waiting",
            json!({ "error": "INVALID_TRANSITION", "disposition": "retry" }),
        );
        // A reversal seen first would then defer the confirmation forever: a reversed swap must answer it.
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], true, "{property}");
    }

    #[test]
    fn an_event_deferred_forever_is_a_counterexample() {
        // A reversed swap that answers its deposit's detection with retry never settles it.
        let mut definition = v2();
        set_answer(
            &mut definition,
            "DEPOSIT_DETECTED",
            "reversed",
            json!({ "error": "INVALID_TRANSITION", "disposition": "retry" }),
        );
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false);
        let undelivered = |c: &Value| c["actual"]["end"]["undelivered"].clone();
        assert_eq!(undelivered(&property["counterexample"]), json!(["DEPOSIT_DETECTED"]), "{property}");
    }

    #[test]
    fn an_undeclared_race_is_a_counterexample_that_names_no_race() {
        let mut definition = v2();
        definition["order"]["races"].as_array_mut().unwrap().remove(0);
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false);
        let example = &property["counterexample"];
        assert!(example["history"].as_array().unwrap().contains(&json!("DEADLINE_PASSED")), "{example}");
        assert_eq!(example["races"], json!([]));
    }

    #[test]
    fn a_rule_set_without_an_order_section_claims_nothing() {
        let v1: Value = serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V1).unwrap();
        let property = reorder_property(&v1);
        assert_eq!(property["ok"], true);
        assert!(property["checked"]["skipped"].as_str().unwrap().contains("in-order"));
        assert_eq!(property["checked"]["histories"], 0);
    }
}

#[cfg(test)]
mod recurring_tests {
    use serde_json::{json, Value};

    use crate::ruleset::{verify_definition, BUILTIN_SUBSCRIPTION_V1 as BUILTIN_SUBSCRIPTION};

    fn reorder_property(definition: &Value) -> Value {
        let report = verify_definition(definition).unwrap().to_json();
        report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap().clone()
    }

    /// Renewals without the paidThrough chain: a renewal in `active` is not
    /// guarded, so nothing tells a re-published one from the next period's.
    fn unchained(order: Value) -> Value {
        json!({
            "id": "renewals", "version": 1,
            "statuses": [{ "name": "active", "initial": true }, { "name": "renewing" }],
            "fields": [{ "name": "period", "kind": "text" }],
            "events": [{ "type": "RENEWAL_DUE", "fields": ["period"] }, { "type": "RENEWAL_PAID", "fields": ["period"] }],
            "order": order,
            "rules": [
                { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
                { "on": "RENEWAL_DUE", "in": "active", "then": { "outcome": "applied", "to": "renewing", "record": ["period"],
                  "emit": [{ "type": "CHARGE", "id": "charge:{revision}:{workflowId}", "recurring": true, "payload": ["period"] }] } },
                { "on": "RENEWAL_DUE", "in": "renewing", "guard": ["period"], "then": { "outcome": "already-applied" } },
                { "on": "RENEWAL_PAID", "in": "renewing", "guard": ["period"], "then": { "outcome": "applied", "to": "active" } },
                { "on": "RENEWAL_PAID", "in": "active", "then": { "outcome": "already-applied" } }
            ]
        })
    }

    #[test]
    fn a_second_charge_for_one_renewal_is_a_counterexample_though_every_status_agrees() {
        // In order: due, due again (already-applied), paid, paid again: one
        // charge. Due, paid, due again, paid again ends in the same status with
        // the same fields and answers, but charges twice: only the count of
        // the recurring operation tells them apart.
        let property =
            reorder_property(&unchained(json!({ "follows": [{ "event": "RENEWAL_PAID", "after": "CHARGE" }] })));
        assert_eq!(property["ok"], false, "{property}");
        let mut all = vec![property["counterexample"].clone()];
        all.extend(property["moreCounterexamples"].as_array().into_iter().flatten().cloned());
        let charge = "charge:{revision}:{workflowId}";
        let found = all.iter().find(|c| {
            c["expected"]["end"]["emitted"] == json!([charge])
                && c["actual"]["end"]["emitted"] == json!([charge, charge])
                && c["expected"]["end"]["status"] == c["actual"]["end"]["status"]
        });
        assert!(found.is_some(), "{property}");
        let example = found.unwrap();
        assert_eq!(example["history"], json!(["RENEWAL_DUE", "RENEWAL_DUE", "RENEWAL_PAID", "RENEWAL_PAID"]));
    }

    #[test]
    fn every_counterexample_of_the_unchained_renewals_re_publishes_the_renewal() {
        // A history holds one fact: without re-publications past the payment
        // (each type at most once), the unchained renewals agree in every order.
        let definition = unchained(json!({ "follows": [{ "event": "RENEWAL_PAID", "after": "CHARGE" }] }));
        let report = verify_definition(&definition).unwrap();
        // Everything but reorder-safe holds.
        for p in &report.properties {
            assert!(p.ok || p.name == "reorder-safe", "{}", report.to_json());
        }
        let property = reorder_property(&definition);
        for example in std::iter::once(&property["counterexample"])
            .chain(property["moreCounterexamples"].as_array().into_iter().flatten())
        {
            let history = example["history"].as_array().unwrap();
            let dues = history.iter().filter(|e| *e == "RENEWAL_DUE").count();
            assert_eq!(dues, 2, "every counterexample re-publishes the renewal: {example}");
        }
    }

    #[test]
    fn the_subscription_with_an_order_section_is_not_reorder_safe() {
        // What its description says: a renewal re-published after its payment
        // ends elsewhere than the same renewal re-published before it.
        let mut definition: Value = serde_json::from_str(BUILTIN_SUBSCRIPTION).unwrap();
        definition["order"] = json!({ "follows": [
            { "event": "RENEWAL_DUE", "after": "SUBSCRIPTION_STARTED" },
            { "event": "RENEWAL_PAID", "after": "CHARGE_RENEWAL" },
            { "event": "SUBSCRIPTION_CANCELLED", "after": "SUBSCRIPTION_STARTED" }
        ] });
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false, "{property}");
        let mut all = vec![property["counterexample"].clone()];
        all.extend(property["moreCounterexamples"].as_array().into_iter().flatten().cloned());
        let late_republication = all.iter().any(|c| {
            let deliveries = c["actual"]["deliveries"].as_array().unwrap();
            let paid = deliveries.iter().position(|d| d["event"] == "RENEWAL_PAID" && d["answer"] == "applied");
            let due_after = deliveries.iter().rposition(|d| d["event"] == "RENEWAL_DUE");
            matches!((paid, due_after), (Some(p), Some(d)) if d > p)
        });
        assert!(late_republication, "{property}");
    }
}
