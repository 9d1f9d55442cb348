//! The `reorder-safe` property for rule sets with several facts, proven by
//! exploring concrete histories through the real decider.
//!
//! `reorder.rs` models a rule set as bits (one fact, recorded-or-not fields,
//! one number): that is exact for one fact per workflow, and cannot follow a
//! facts map, `other` / `emitted` conditions or per-fact operation ids. Here
//! nothing is modelled: every delivery is decided by [`crate::decide::decide`]
//! on a concrete JSON workflow, and the write set it answers is applied to
//! that workflow as a host would (status, revision, each `set` key; a null
//! removes one). Whatever the decider does is what is proven.
//!
//! A history is what producers emit for one workflow (see [`histories`]):
//! per fact (keys `"A"`, `"B"`) a chain of numbered observations as
//! `reorder.rs` generates them, each observation published once or twice
//! (new event ids), plus the rule set's other event types; concrete values
//! come from field kinds (an amount below or equal to the workflow's expected
//! amount, or none expected). For every history and start, every delivery
//! order is explored (`retry` = redeliver later; an event that follows an
//! operation exists once that operation was emitted), memoised on the
//! configuration. Each order ends in a result: status, data (the facts map
//! and the recorded fields), operation ids emitted (a recurring one by its
//! count), events answered with an error, events undelivered. Orders that saw
//! every declared racing pair in the same order must end alike; a race
//! declared `"across": true` relates two facts' events, any other one a fact's
//! own events, and a race with a non-fact event relates it to that fact event
//! type of every fact. An order that emits one operation id twice fails too.
//!
//! Without a `facts` block, the `order.sequence` chain is one fact (so
//! today's rule sets can be explored alike, one fact per history).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use serde_json::{json, Map, Value};

use super::reorder::Check;
use super::RuleSet;
use crate::decide::{self, Outcome};
use crate::error::{Disposition, Error, Result};
use crate::limits::{
    MAX_FACTS_REORDER_CONFIGURATIONS, MAX_FACTS_REORDER_HISTORIES, MAX_REORDER_CONFIGURATIONS, MAX_REORDER_HISTORIES,
};

/// Numbered observations of the one fact of a one-fact history, at most.
pub const ONE_FACT_OBSERVATIONS: usize = 4;
/// Events in a one-fact history, at most (as `reorder::BOUND_SEQUENCED`).
pub const ONE_FACT_EVENTS: usize = 8;
/// Numbered observations of each fact of a two-fact history, at most.
pub const TWO_FACT_OBSERVATIONS: usize = 3;
/// Re-publications (second copies) in a two-fact history, at most.
pub const TWO_FACT_REPUBLICATIONS: usize = 1;
/// Copies of one observation, or of one other event type, at most.
pub const MAX_COPIES: u8 = 2;
/// Copies of each other event type in a two-fact history, at most.
pub const TWO_FACT_OTHER_COPIES: u8 = 1;
/// Other events in a two-fact history, at most.
pub const TWO_FACT_OTHER_EVENTS: usize = 2;
/// The expected amount a workflow may record, and the amounts facts carry: below it and equal to it.
const EXPECTED: &str = "2";
const BELOW: &str = "1";
const MAX_COUNTEREXAMPLES: usize = 8;
/// Decisions remembered at once, past which they are forgotten at the next start (and decided again).
const TRANSITIONS_KEPT: usize = 1 << 20;
const FACT_KEYS: [&str; 2] = ["A", "B"];
const WORKFLOW_ID: &str = "wf";

/// What the rule set says, read from its definition.
struct Model {
    /// `facts.name`: the data key of the facts map (none without a `facts` block).
    map_name: Option<String>,
    /// Fact event types (`facts.events`, or `order.sequence.events`), by global index.
    fact_events: Vec<usize>,
    /// The field that carries the fact's key.
    key_field: Option<String>,
    sequence_field: Option<String>,
    /// Field name → kind (`text`, `units`, `count`).
    kinds: BTreeMap<String, String>,
    /// Event type names and their fields.
    events: Vec<(String, Vec<String>)>,
    /// Units fields carried by fact events: each fact's amount.
    amount_fields: Vec<String>,
    /// Units fields no event carries: the workflow's expected amount, set by the host.
    expected_fields: Vec<String>,
    /// `follows`: event type → event types it follows, and operation types.
    follows_events: Vec<Vec<usize>>,
    follows_operations: Vec<Vec<String>>,
    /// Declared races as directed pairs `(first side, second side, across)`.
    races: Vec<(usize, usize, bool)>,
    /// Names of recurring operation templates (`<name>:{revision}:{workflowId}`).
    recurring: HashSet<String>,
    /// Operation types the rule set emits: bit `i` of `State::types` is `operation_types[i]`.
    operation_types: Vec<String>,
    starts: Vec<String>,
}

fn names(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    }
}

impl Model {
    fn read(definition: &Value) -> std::result::Result<Model, String> {
        let events: Vec<(String, Vec<String>)> = definition["events"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| (e["type"].as_str().unwrap_or_default().to_string(), names(&e["fields"])))
            .collect();
        let event = |name: &str| events.iter().position(|(n, _)| n == name);
        let kinds: BTreeMap<String, String> = definition["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                (f["name"].as_str().unwrap_or_default().to_string(), f["kind"].as_str().unwrap_or_default().to_string())
            })
            .collect();
        let order = &definition["order"];
        let facts = &definition["facts"];
        let sequence_field = order["sequence"]["field"].as_str().map(str::to_string);
        let fact_names = if facts.is_object() { names(&facts["events"]) } else { names(&order["sequence"]["events"]) };
        let mut fact_events: Vec<usize> = fact_names.iter().filter_map(|n| event(n)).collect();
        fact_events.sort_unstable();
        let carried_by_all = |field: &str| fact_events.iter().all(|e| events[*e].1.iter().any(|f| f == field));
        let key_field = match facts["key"].as_str() {
            Some(key) => Some(key.to_string()),
            None => kinds.iter().find(|(name, kind)| *kind == "text" && carried_by_all(name)).map(|(n, _)| n.clone()),
        };
        let amount_fields: Vec<String> = kinds
            .iter()
            .filter(|(name, kind)| *kind == "units" && fact_events.iter().any(|e| events[*e].1.contains(name)))
            .map(|(n, _)| n.clone())
            .collect();
        let expected_fields: Vec<String> = kinds
            .iter()
            .filter(|(name, kind)| *kind == "units" && !events.iter().any(|(_, fields)| fields.contains(name)))
            .map(|(n, _)| n.clone())
            .collect();
        let mut follows_events = vec![Vec::new(); events.len()];
        let mut follows_operations = vec![Vec::new(); events.len()];
        for f in order["follows"].as_array().into_iter().flatten() {
            let (Some(e), Some(after)) = (f["event"].as_str().and_then(event), f["after"].as_str()) else { continue };
            match event(after) {
                Some(a) => follows_events[e].push(a),
                None => follows_operations[e].push(after.to_string()),
            }
        }
        let mut races = Vec::new();
        for r in order["races"].as_array().into_iter().flatten() {
            let across = r["across"].as_bool().unwrap_or(false);
            let sides = r["between"].as_array().cloned().unwrap_or_default();
            if sides.len() != 2 {
                continue;
            }
            for a in names(&sides[0]).iter().filter_map(|n| event(n)) {
                for b in names(&sides[1]).iter().filter_map(|n| event(n)) {
                    races.push((a, b, across));
                }
            }
        }
        let mut recurring = HashSet::new();
        let mut operation_types = Vec::new();
        let mut emits: Vec<&Value> = Vec::new();
        fn collect<'v>(value: &'v Value, out: &mut Vec<&'v Value>) {
            match value {
                Value::Object(map) => {
                    if let Some(Value::Array(list)) = map.get("emit") {
                        out.extend(list.iter());
                    }
                    map.values().for_each(|v| collect(v, out));
                }
                Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
                _ => {}
            }
        }
        collect(&definition["rules"], &mut emits);
        for emit in emits {
            let id = emit["id"].as_str().unwrap_or_default();
            if id.contains("{revision}") {
                recurring.insert(id.split(':').next().unwrap_or_default().to_string());
            }
            if let Some(t) = emit["type"].as_str() {
                if !operation_types.iter().any(|o| o == t) {
                    operation_types.push(t.to_string());
                }
            }
        }
        if operation_types.len() > 64 {
            return Err("more than 64 operation types".into());
        }
        let starts = definition["statuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["initial"] == true)
            .filter_map(|s| s["name"].as_str().map(str::to_string))
            .collect();
        Ok(Model {
            map_name: facts["name"].as_str().map(str::to_string),
            fact_events,
            key_field,
            sequence_field,
            kinds,
            events,
            amount_fields,
            expected_fields,
            follows_events,
            follows_operations,
            races,
            recurring,
            operation_types,
            starts,
        })
    }

    fn is_fact(&self, e: usize) -> bool {
        self.fact_events.contains(&e)
    }

    /// The event a kind stands for, without its event id.
    fn body(&self, e: usize, fact: Option<usize>, number: u64, amount: &str) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("workflowId".into(), json!(WORKFLOW_ID));
        body.insert("type".into(), json!(self.events[e].0));
        for field in &self.events[e].1 {
            let value = if Some(field) == self.key_field.as_ref() && fact.is_some() {
                json!(FACT_KEYS[fact.unwrap_or(0)])
            } else if Some(field) == self.sequence_field.as_ref() && number > 0 {
                json!(number)
            } else if fact.is_some() && self.amount_fields.contains(field) {
                json!(amount)
            } else {
                match self.kinds.get(field).map(String::as_str) {
                    Some("units") => json!("5"),
                    Some("count") => json!(1),
                    _ => json!("t"),
                }
            };
            body.insert(field.clone(), value);
        }
        body
    }
}

/// One local kind of event in a history: an observation of a fact, or another event type.
struct Kind {
    event: usize,
    fact: Option<usize>,
    number: u64,
    copies: u8,
    body: Map<String, Value>,
    /// The body interned: with the workflow, the decision's key.
    body_id: u32,
    /// Bits of `Model::operation_types`, one of which must have been emitted before it exists.
    needs: u64,
    /// Local kinds it comes after in its producer's order (the history in order only).
    after: Vec<usize>,
}

struct History {
    kinds: Vec<Kind>,
    /// Racing pairs of local kinds `(lower, higher)`; the index is the pair's two bits.
    races: Vec<(usize, usize)>,
    start: Map<String, Value>,
    /// The facts' amounts, for the counterexample.
    amounts: Vec<String>,
}

/// A decision as far as the explorer needs it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    Applied,
    AlreadyApplied,
    Stale,
    Error { code: &'static str, disposition: Disposition },
}

impl Reply {
    fn text(&self) -> String {
        match self {
            Reply::Applied => "applied".into(),
            Reply::AlreadyApplied => "already-applied".into(),
            Reply::Stale => "stale".into(),
            Reply::Error { code, disposition } => format!("{code} ({})", disposition.as_str()),
        }
    }
}

/// What delivering one event to one workflow does, decided once.
struct Transition {
    reply: Reply,
    /// The workflow after it (interned).
    next: u32,
    /// Emitted operations: the slot they count in (the id, or a recurring one's name), whether it is recurring, the type's bit.
    operations: Vec<(u32, bool, u64)>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    /// The workflow: status, revision, data (interned; `id` left out).
    workflow: u32,
    /// Operation slots emitted, sorted, with their counts.
    emitted: Vec<(u32, u8)>,
    /// Operation types emitted (bits of `Model::operation_types`).
    types: u64,
    /// Per kind, two bits: events of it delivered (not deferred), and answered with an error.
    consumed: u64,
    errored: u64,
    /// Per racing pair, two bits: decided, and whether the lower kind was seen first.
    seen_first: u64,
}

/// A multiply-rotate hasher (FxHash's) for the explorer's own keys: configuration keys
/// (already hashes, from [`mix128`]) and (workflow, body) pairs of small numbers.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64)
    }
    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64 ^ (n >> 64) as u64)
    }
}

type FxBuild = BuildHasherDefault<Fx>;

/// Two 64-bit multiply-rotate hashes (FxHash's, with two constants) of a configuration's words.
fn mix128(words: impl IntoIterator<Item = u64>) -> u128 {
    let (mut low, mut high) = (0u64, 0x9e37_79b9_7f4a_7c15u64);
    for w in words {
        low = (low.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        high = (high.rotate_left(23) ^ w).wrapping_mul(0x2545_f491_4f6c_dd1d);
    }
    // A final avalanche, so that the low lane's last multiply is not all the high bits see.
    high ^= low.rotate_left(32);
    (low as u128) << 64 | high.wrapping_mul(0xff51_afd7_ed55_8ccd) as u128
}

/// A delivery's next configuration and step; `Err` with the operation id it emitted a second time.
type Delivered = std::result::Result<(State, Step), (State, Step, String)>;

/// Events of kind `t` counted in `packed` (two bits a kind).
fn count(packed: u64, t: usize) -> u8 {
    (packed >> (2 * t) & 3) as u8
}

#[derive(Clone)]
struct Step {
    kind: usize,
    from: u32,
    reply: Reply,
    to: u32,
}

/// Interned texts: equal JSON, equal number.
#[derive(Default)]
struct Interner {
    texts: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, text: String) -> u32 {
        if let Some(id) = self.ids.get(&text) {
            return *id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.clone());
        self.ids.insert(text, id);
        id
    }
}

struct Explorer<'r> {
    rule_set: &'r RuleSet,
    model: &'r Model,
    /// Workflows met (status, revision, data): by id, and each one's id without its revision (what results compare).
    workflows: Vec<Map<String, Value>>,
    workflow_ids: HashMap<String, u32>,
    data_of: Vec<u32>,
    data: Interner,
    /// Event bodies (without event id) and operation slots.
    bodies: Interner,
    slots: Interner,
    /// (workflow, body) → what delivering it does.
    transitions: HashMap<(u32, u32), Transition, FxBuild>,
    /// A reason the explorer cannot evaluate the rule set (an event it built was refused).
    unproven: Option<Value>,
}

impl<'r> Explorer<'r> {
    fn new(rule_set: &'r RuleSet, model: &'r Model) -> Explorer<'r> {
        Explorer {
            rule_set,
            model,
            workflows: Vec::new(),
            workflow_ids: HashMap::new(),
            data_of: Vec::new(),
            data: Interner::default(),
            bodies: Interner::default(),
            slots: Interner::default(),
            transitions: HashMap::default(),
            unproven: None,
        }
    }

    fn workflow(&mut self, workflow: Map<String, Value>) -> u32 {
        let text = Value::Object(workflow.clone()).to_string();
        if let Some(id) = self.workflow_ids.get(&text) {
            return *id;
        }
        let id = self.workflows.len() as u32;
        let mut data = workflow.clone();
        data.remove("revision");
        let data_id = self.data.id(Value::Object(data).to_string());
        self.workflows.push(workflow);
        self.workflow_ids.insert(text, id);
        self.data_of.push(data_id);
        id
    }

    fn status(&self, workflow: u32) -> &str {
        self.workflows[workflow as usize].get("status").and_then(Value::as_str).unwrap_or("(none)")
    }

    /// What the orders are compared by: everything but the revision and the race bookkeeping.
    fn result<'s>(&self, state: &'s State) -> (u32, &'s [(u32, u8)], u64, u64) {
        (self.data_of[state.workflow as usize], &state.emitted, state.consumed, state.errored)
    }

    /// The memo key: a configuration with another revision has the same futures (up to the revisions in recurring ids, which are not compared).
    fn key(&self, state: &State) -> u128 {
        let fixed = [
            self.data_of[state.workflow as usize] as u64,
            state.types,
            state.consumed,
            state.errored,
            state.seen_first,
        ];
        mix128(fixed.into_iter().chain(state.emitted.iter().map(|(slot, n)| (*slot as u64) << 8 | *n as u64)))
    }

    fn decide(&mut self, history: &History, workflow: u32, t: usize) -> &Transition {
        let kind = &history.kinds[t];
        let key = (workflow, kind.body_id);
        if !self.transitions.contains_key(&key) {
            let transition = self.decide_once(workflow, &kind.body, t);
            self.transitions.insert(key, transition);
        }
        &self.transitions[&key]
    }

    fn decide_once(&mut self, workflow: u32, body: &Map<String, Value>, t: usize) -> Transition {
        let mut stored = self.workflows[workflow as usize].clone();
        stored.insert("id".into(), json!(WORKFLOW_ID));
        let mut event = body.clone();
        event.insert("eventId".into(), json!(format!("e{t}")));
        let error = |error: &Error| Transition {
            reply: Reply::Error { code: error.code(), disposition: error.disposition() },
            next: workflow,
            operations: Vec::new(),
        };
        let decision = match decide::decide(self.rule_set, &event, None, Some(&stored)) {
            Ok(decision) => decision,
            Err(e @ (Error::InvalidEvent { .. } | Error::InvalidArgument { .. })) => {
                if self.unproven.is_none() {
                    self.unproven = Some(json!({
                        "reason": format!("the facts explorer built an event the decider refuses ({}: {e}): the rule set's 'order' claim is not proven", e.code()),
                        "event": Value::Object(event),
                        "workflow": Value::Object(stored),
                    }));
                }
                return error(&e);
            }
            Err(e) => return error(&e),
        };
        let reply = match decision.outcome {
            Outcome::Applied => Reply::Applied,
            Outcome::AlreadyApplied => Reply::AlreadyApplied,
            Outcome::Stale | Outcome::DuplicateDelivery => Reply::Stale,
        };
        let mut next = self.workflows[workflow as usize].clone();
        if let (Reply::Applied, Some(write)) = (reply, &decision.write_set.workflow) {
            for (key, value) in &write.set {
                if value.is_null() {
                    next.remove(key);
                } else {
                    next.insert(key.clone(), value.clone());
                }
            }
        }
        let mut operations = Vec::new();
        for op in &decision.write_set.outbox {
            let name = op.id.split(':').next().unwrap_or_default();
            let recurring = self.model.recurring.contains(name);
            let slot = self.slots.id(if recurring { name.to_string() } else { op.id.clone() });
            let bit = self.model.operation_types.iter().position(|o| *o == op.operation_type).map_or(0, |i| 1u64 << i);
            operations.push((slot, recurring, bit));
        }
        Transition { reply, next: self.workflow(next), operations }
    }

    /// The rule that answers `body` on `workflow`, as the decider picks it
    /// (its first half, `decide_item`): for counterexamples only, so that a
    /// step says which row of the table answered. `None` when the decider
    /// answers with an error before a rule (a guard's IDENTITY_MISMATCH).
    fn rule_of(&self, workflow: u32, body: &Map<String, Value>) -> Option<String> {
        let mut stored = self.workflows[workflow as usize].clone();
        stored.insert("id".into(), json!(WORKFLOW_ID));
        let mut event = body.clone();
        event.insert("eventId".into(), json!("e"));
        let mut packer = crate::packed::Packer::default();
        packer.item(self.rule_set, &event, None, Some(&stored));
        let layout = crate::packed::Layout::new(self.rule_set);
        let packed = packer.packed();
        let mut work = decide::Work::default();
        crate::packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut work.spans);
        let item = crate::packed::Item::of(&packed, &work.spans, layout.entries(), 0);
        let mut fingerprint = [0u8; crate::fingerprint::LEN];
        let (_, decided) =
            decide::decide_item(self.rule_set, &item, layout, &mut fingerprint, &mut work.canonical).ok()?;
        self.rule_set.rules.get(decided.rule).map(|r| r.origin.clone())
    }

    /// Delivering one event of kind `t`: `None` when there is none left, it cannot exist yet, or it is deferred.
    /// `Err` carries an operation id emitted a second time.
    fn deliver(&mut self, history: &History, state: &State, t: usize) -> Option<Delivered> {
        let kind = &history.kinds[t];
        if count(state.consumed, t) >= kind.copies || (kind.needs != 0 && state.types & kind.needs == 0) {
            return None;
        }
        let transition = self.decide(history, state.workflow, t);
        if let Reply::Error { disposition: Disposition::Retry, .. } = transition.reply {
            return None;
        }
        let mut next = state.clone();
        let mut twice = None;
        next.workflow = transition.next;
        if let Reply::Error { .. } = transition.reply {
            next.errored += 1 << (2 * t);
        }
        for &(slot, recurring, bit) in &transition.operations {
            next.types |= bit;
            match next.emitted.binary_search_by_key(&slot, |(s, _)| *s) {
                Ok(i) => {
                    next.emitted[i].1 = next.emitted[i].1.saturating_add(1);
                    if !recurring {
                        twice = Some(slot);
                    }
                }
                Err(i) => next.emitted.insert(i, (slot, 1)),
            }
        }
        let step = Step { kind: t, from: state.workflow, reply: transition.reply, to: transition.next };
        if count(state.consumed, t) == 0 {
            let races = history.races.iter().enumerate().map(|(pair, &(low, high))| (low, high, pair));
            next.seen_first =
                super::reorder::seen_first(next.seen_first, t, races, |other| count(state.consumed, other) == 0);
        }
        next.consumed += 1 << (2 * t);
        Some(match twice {
            None => Ok((next, step)),
            Some(slot) => Err((next, step, self.slots.texts[slot as usize].clone())),
        })
    }

    /// The history in order: each step delivers the first kind its producer could have emitted by then that is not deferred.
    fn in_order(&mut self, history: &History, start: &State) -> (State, Vec<Step>, Option<String>) {
        let mut state = start.clone();
        let mut steps = Vec::new();
        'steps: loop {
            for pass in 0..2 {
                for t in 0..history.kinds.len() {
                    if pass == 0 && history.kinds[t].after.iter().any(|a| count(state.consumed, *a) == 0) {
                        continue;
                    }
                    match self.deliver(history, &state, t) {
                        None => {}
                        Some(Ok((next, step))) => {
                            state = next;
                            steps.push(step);
                            continue 'steps;
                        }
                        Some(Err((next, step, id))) => {
                            steps.push(step);
                            return (next, steps, Some(id));
                        }
                    }
                }
            }
            return (state, steps, None);
        }
    }
}

struct Search<'e, 'r, 'h> {
    explorer: &'e mut Explorer<'r>,
    history: &'h History,
    seen: HashSet<u128, FxBuild>,
    /// Per race signature: the first result reached, the order that reached it, and whether it is the history in order.
    references: Vec<(u64, State, Vec<Step>, bool)>,
    path: Vec<Step>,
    /// The reference index and the order that ended otherwise; or an id emitted twice.
    mismatch: Option<Failure>,
    configurations: &'e mut usize,
    limit: usize,
    /// Explore every order even past a failure (to measure what a fixed rule set would cost).
    whole: bool,
}

enum Failure {
    Differs { reference: usize, end: State, path: Vec<Step> },
    Twice { end: State, path: Vec<Step>, id: String },
}

impl Search<'_, '_, '_> {
    fn explore(&mut self, state: State) -> Result<()> {
        if (self.mismatch.is_some() && !self.whole)
            || self.explorer.unproven.is_some()
            || !self.seen.insert(self.explorer.key(&state))
        {
            return Ok(());
        }
        *self.configurations += 1;
        if *self.configurations > self.limit {
            return Err(over_budget(
                "maxFactsReorderConfigurations",
                self.limit,
                "delivery configurations over all histories and starts",
            ));
        }
        let mut progressed = false;
        for t in 0..self.history.kinds.len() {
            match self.explorer.deliver(self.history, &state, t) {
                None => {}
                Some(Ok((next, step))) => {
                    progressed = true;
                    self.path.push(step);
                    self.explore(next)?;
                    self.path.pop();
                }
                Some(Err((end, step, id))) => {
                    let mut path = self.path.clone();
                    path.push(step);
                    if self.mismatch.is_none() {
                        self.mismatch = Some(Failure::Twice { end, path, id });
                    }
                    if !self.whole {
                        return Ok(());
                    }
                }
            }
            if self.mismatch.is_some() && !self.whole {
                return Ok(());
            }
        }
        if !progressed {
            match self.references.iter().position(|r| r.0 == state.seen_first) {
                None => self.references.push((state.seen_first, state, self.path.clone(), false)),
                Some(i)
                    if self.mismatch.is_none()
                        && self.explorer.result(&self.references[i].1) != self.explorer.result(&state) =>
                {
                    self.mismatch = Some(Failure::Differs { reference: i, end: state, path: self.path.clone() });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

fn over_budget(limit: &str, max: usize, what: &str) -> Error {
    Error::RuleSetInvalid {
        path: "$.order".into(),
        reason: format!(
            "limit {limit}: at most {max} {what} in one verification, this definition needs more; split the rule set or declare fewer facts' events"
        ),
        report: None,
    }
}

/// What one fact does in a history: its chain (event type, copies) and its amount.
#[derive(Clone)]
struct FactPlan {
    chain: Vec<(usize, u8)>,
    amount: String,
}

/// The chains of observations of one fact, up to `most` long. Numbered
/// (`order.sequence`): each of a fact event type other than the one before
/// it. Unnumbered: each fact event type at most once, in declaration order.
/// Either way an observation that follows a fact event type has an earlier
/// observation of it.
fn chains(model: &Model, most: usize) -> Vec<Vec<usize>> {
    let legal =
        |chain: &[usize], e: usize| model.follows_events[e].iter().all(|a| !model.is_fact(*a) || chain.contains(a));
    let mut all = Vec::new();
    if model.sequence_field.is_none() {
        for mask in 1u32..(1 << model.fact_events.len()) {
            let chain: Vec<usize> =
                model.fact_events.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, e)| *e).collect();
            if chain.len() <= most && chain.iter().enumerate().all(|(i, e)| legal(&chain[..i], *e)) {
                all.push(chain);
            }
        }
        return all;
    }
    let mut frontier: Vec<Vec<usize>> = vec![Vec::new()];
    for _ in 0..most {
        let mut longer = Vec::new();
        for chain in &frontier {
            for &e in &model.fact_events {
                if chain.last() != Some(&e) && legal(chain, e) {
                    let mut next = chain.clone();
                    next.push(e);
                    longer.push(next);
                }
            }
        }
        all.extend(longer.iter().cloned());
        frontier = longer;
    }
    all
}

/// Every way to give each of `chain`'s observations 1..=MAX_COPIES copies with at most `extra` second copies.
fn with_copies(chain: &[usize], extra: usize) -> Vec<Vec<(usize, u8)>> {
    let mut out = Vec::new();
    for mask in 0u32..(1 << chain.len()) {
        if mask.count_ones() as usize <= extra {
            out.push(chain.iter().enumerate().map(|(i, e)| (*e, 1 + (mask >> i & 1) as u8)).collect());
        }
    }
    out
}

/// Copies of the other event types: each 0..=most, at most `left` events in all.
fn other_copies(model: &Model, most: u8, left: usize) -> Vec<Vec<u8>> {
    let others: Vec<usize> = (0..model.events.len()).filter(|e| !model.is_fact(*e)).collect();
    let mut out = vec![vec![0u8; model.events.len()]];
    for e in others {
        let mut next = Vec::new();
        for copies in &out {
            let used: usize = copies.iter().map(|n| *n as usize).sum();
            for n in 0..=most {
                if used + n as usize <= left {
                    let mut c = copies.clone();
                    c[e] = n;
                    next.push(c);
                }
            }
        }
        out = next;
    }
    out
}

/// A history's shapes: the facts' plans and the other types' copies. One fact
/// with up to [`ONE_FACT_OBSERVATIONS`]; with a `facts` block also two facts
/// with up to [`TWO_FACT_OBSERVATIONS`] each (as unordered pairs: the two keys
/// are interchangeable).
fn shapes(model: &Model, amounts: &[&str]) -> Vec<(Vec<FactPlan>, Vec<u8>)> {
    let mut out = Vec::new();
    let size = |plans: &[FactPlan], others: &[u8]| {
        plans.iter().flat_map(|p| p.chain.iter().map(|(_, n)| *n as usize)).sum::<usize>()
            + others.iter().map(|n| *n as usize).sum::<usize>()
    };
    let plans = |most: usize, extra: usize| -> Vec<FactPlan> {
        let mut plans = Vec::new();
        for chain in chains(model, most) {
            for copies in with_copies(&chain, extra) {
                for amount in amounts {
                    plans.push(FactPlan { chain: copies.clone(), amount: amount.to_string() });
                }
            }
        }
        plans
    };
    if model.fact_events.is_empty() {
        for others in other_copies(model, MAX_COPIES, super::reorder::BOUND) {
            out.push((Vec::new(), others));
        }
    }
    for plan in
        plans(ONE_FACT_OBSERVATIONS, ONE_FACT_OBSERVATIONS).into_iter().filter(|_| !model.fact_events.is_empty())
    {
        let used = size(std::slice::from_ref(&plan), &[]);
        if used > ONE_FACT_EVENTS {
            continue;
        }
        for others in other_copies(model, MAX_COPIES, ONE_FACT_EVENTS - used) {
            out.push((vec![plan.clone()], others));
        }
    }
    if model.map_name.is_some() {
        let two = plans(TWO_FACT_OBSERVATIONS, TWO_FACT_REPUBLICATIONS);
        for i in 0..two.len() {
            for j in i..two.len() {
                let pair = vec![two[i].clone(), two[j].clone()];
                let republished = pair.iter().flat_map(|p| p.chain.iter()).filter(|(_, n)| *n > 1).count();
                if republished > TWO_FACT_REPUBLICATIONS {
                    continue;
                }
                for others in other_copies(model, TWO_FACT_OTHER_COPIES, TWO_FACT_OTHER_EVENTS) {
                    out.push((pair.clone(), others));
                }
            }
        }
    }
    // An event that follows an event type needs one in its history.
    out.retain(|(plans, others)| {
        let has = |e: usize| others[e] > 0 || plans.iter().any(|p| p.chain.iter().any(|(t, _)| *t == e));
        (0..model.events.len()).all(|e| !has(e) || model.follows_events[e].iter().all(|a| has(*a)))
    });
    out.sort_by_key(|(plans, others)| size(plans, others));
    out
}

fn build(model: &Model, plans: &[FactPlan], others: &[u8], start: Map<String, Value>) -> History {
    let mut kinds: Vec<Kind> = Vec::new();
    let mut first_of: HashMap<usize, usize> = HashMap::new();
    let kind = |e: usize, fact: Option<usize>, number: u64, copies: u8, amount: &str, after: Vec<usize>| {
        let body = model.body(e, fact, number, amount);
        let needs = model.follows_operations[e]
            .iter()
            .filter_map(|op| model.operation_types.iter().position(|o| o == op))
            .fold(0u64, |bits, i| bits | 1 << i);
        Kind { event: e, fact, number, copies, body_id: 0, body, needs, after }
    };
    for (f, plan) in plans.iter().enumerate() {
        let base = kinds.len();
        for (i, &(e, copies)) in plan.chain.iter().enumerate() {
            let number = if model.sequence_field.is_some() { i as u64 + 1 } else { 0 };
            // Numbered, an observation comes after the one before it; unnumbered, after the types it follows.
            let after = match (model.sequence_field.is_some(), i) {
                (true, 0) => Vec::new(),
                (true, _) => vec![base + i - 1],
                (false, _) => {
                    (0..i).filter(|j| model.follows_events[e].contains(&plan.chain[*j].0)).map(|j| base + j).collect()
                }
            };
            first_of.entry(e).or_insert(kinds.len());
            kinds.push(kind(e, Some(f), number, copies, &plan.amount, after));
        }
    }
    for (e, &copies) in others.iter().enumerate().filter(|(_, n)| **n > 0) {
        first_of.entry(e).or_insert(kinds.len());
        kinds.push(kind(e, None, 0, copies, EXPECTED, Vec::new()));
    }
    // An event that follows an event type comes after its first kind (in order only).
    for kind in kinds.iter_mut().filter(|k| k.fact.is_none()) {
        kind.after.extend(model.follows_events[kind.event].iter().filter_map(|a| first_of.get(a).copied()));
    }
    let directed =
        |a: usize, b: usize, across: bool| model.races.iter().any(|&(x, y, c)| x == a && y == b && c == across);
    let either = |a: usize, b: usize| model.races.iter().any(|&(x, y, _)| (x == a && y == b) || (x == b && y == a));
    let numbered = model.sequence_field.is_some();
    let mut races = Vec::new();
    for low in 0..kinds.len() {
        for high in low + 1..kinds.len() {
            let (l, h) = (&kinds[low], &kinds[high]);
            let racing = match (l.fact, h.fact) {
                // One fact's observations, `low` the older: they race only when the newer one is of a race's first side.
                (Some(a), Some(b)) if a == b && numbered => directed(h.event, l.event, false),
                (Some(a), Some(b)) if a == b => {
                    l.event != h.event && (directed(h.event, l.event, false) || directed(l.event, h.event, false))
                }
                (Some(_), Some(_)) => directed(h.event, l.event, true) || directed(l.event, h.event, true),
                _ => l.event != h.event && either(l.event, h.event),
            };
            if racing {
                races.push((low, high));
            }
        }
    }
    History { kinds, races, start, amounts: plans.iter().map(|p| p.amount.clone()).collect() }
}

/// The property's figures beyond the `Check`: the bounds and the time.
#[cfg_attr(not(test), allow(dead_code))]
pub struct Figures {
    pub millis: Option<u64>,
    /// (histories, configurations) of the histories with no fact, one fact, two facts.
    pub by_facts: [(usize, usize); 3],
}

/// What the explorer bounds its histories by, for the property's `checked.bound`
/// (`reorder::Check::info` says the one-fact model's today).
pub fn bound() -> Value {
    json!({
        "explorer": "concrete: every delivery decided by the decider on a JSON workflow",
        "oneFact": { "observations": ONE_FACT_OBSERVATIONS, "events": ONE_FACT_EVENTS, "copiesPerObservation": MAX_COPIES, "copiesPerOtherType": MAX_COPIES },
        "twoFacts": { "observationsEach": TWO_FACT_OBSERVATIONS, "republications": TWO_FACT_REPUBLICATIONS, "otherEvents": TWO_FACT_OTHER_EVENTS, "copiesPerOtherType": TWO_FACT_OTHER_COPIES },
        "amounts": { "expected": EXPECTED, "below": BELOW, "unsetExpected": true },
    })
}

pub fn check(rule_set: &RuleSet) -> Result<Check> {
    explore(rule_set).map(|(check, _)| check)
}

/// [`check`] with its figures.
pub fn explore(rule_set: &RuleSet) -> Result<(Check, Figures)> {
    let history_limit = MAX_REORDER_HISTORIES.max(MAX_FACTS_REORDER_HISTORIES);
    let configuration_limit = MAX_REORDER_CONFIGURATIONS.max(MAX_FACTS_REORDER_CONFIGURATIONS);
    explore_up_to(rule_set, MAX_COUNTEREXAMPLES, (history_limit, configuration_limit))
}

/// [`explore`], stopping after `most` counterexamples, within `(histories, configurations)`.
fn explore_up_to(rule_set: &RuleSet, most: usize, limits: (usize, usize)) -> Result<(Check, Figures)> {
    #[cfg(not(target_arch = "wasm32"))]
    let began = std::time::Instant::now();
    let mut outcome = Check {
        skipped: None,
        unproven: None,
        counterexamples: Vec::new(),
        histories: 0,
        configurations: 0,
        by_facts: None,
    };
    let definition = rule_set.definition();
    if definition.get("order").is_none() {
        outcome.skipped =
            Some("no 'order' section: the rule set is proven for in-order delivery per workflow only".into());
        return Ok((outcome, Figures { millis: None, by_facts: [(0, 0); 3] }));
    }
    let model = match Model::read(definition) {
        Ok(model) => model,
        Err(reason) => {
            let reason = format!("{reason}: the rule set's 'order' claim is not proven");
            outcome.unproven = Some(json!({ "reason": reason }));
            outcome.skipped = Some(reason);
            return Ok((outcome, Figures { millis: None, by_facts: [(0, 0); 3] }));
        }
    };
    let (history_limit, configuration_limit) = limits;
    // Starts: each initial status, with no expected amount (any amount covers), or with one and amounts below and equal to it.
    let mut starts: Vec<(Map<String, Value>, Vec<&str>)> = Vec::new();
    for status in &model.starts {
        let mut workflow = Map::new();
        workflow.insert("status".into(), json!(status));
        workflow.insert("revision".into(), json!(1));
        starts.push((workflow.clone(), vec![EXPECTED]));
        if !model.expected_fields.is_empty() {
            for field in &model.expected_fields {
                workflow.insert(field.clone(), json!(EXPECTED));
            }
            starts.push((workflow, vec![BELOW, EXPECTED]));
        }
    }
    let mut explorer = Explorer::new(rule_set, &model);
    let mut by_facts = [(0, 0); 3];
    'starts: for (start, amounts) in &starts {
        if explorer.transitions.len() > TRANSITIONS_KEPT {
            explorer.transitions.clear();
        }
        for (plans, others) in shapes(&model, amounts) {
            let before = (outcome.histories, outcome.configurations);
            outcome.histories += 1;
            if outcome.histories > history_limit {
                return Err(over_budget("maxFactsReorderHistories", history_limit, "(history, start) pairs"));
            }
            let mut history = build(&model, &plans, &others, start.clone());
            if history.kinds.len() > 32 || history.races.len() > 32 {
                return Err(over_budget(
                    "maxFactsReorderKinds",
                    32,
                    "kinds of events (and 32 racing pairs) in one history",
                ));
            }
            for kind in &mut history.kinds {
                kind.body_id = explorer.bodies.id(Value::Object(kind.body.clone()).to_string());
            }
            let origin = State {
                workflow: explorer.workflow(history.start.clone()),
                emitted: Vec::new(),
                types: 0,
                consumed: 0,
                errored: 0,
                seen_first: 0,
            };
            let (end, steps, twice) = explorer.in_order(&history, &origin);
            if let Some(id) = twice {
                outcome.counterexamples.push(twice_example(&explorer, &history, &steps, &end, &id));
            } else {
                let mut search = Search {
                    explorer: &mut explorer,
                    history: &history,
                    seen: HashSet::default(),
                    references: vec![(end.seen_first, end, steps, true)],
                    path: Vec::new(),
                    mismatch: None,
                    configurations: &mut outcome.configurations,
                    limit: configuration_limit,
                    whole: most == usize::MAX,
                };
                search.explore(origin)?;
                match search.mismatch.take() {
                    None => {}
                    Some(Failure::Twice { end, path, id }) => {
                        outcome.counterexamples.push(twice_example(&explorer, &history, &path, &end, &id));
                    }
                    Some(Failure::Differs { reference, end, path }) => {
                        let (_, expected_end, expected, in_order) = &search.references[reference];
                        let example =
                            differs_example(&explorer, &history, (expected, expected_end, *in_order), (&path, &end));
                        outcome.counterexamples.push(example);
                    }
                }
            }
            if let Some(unproven) = explorer.unproven.take() {
                outcome.skipped = unproven["reason"].as_str().map(str::to_string);
                outcome.unproven = Some(unproven);
                break 'starts;
            }
            let part = &mut by_facts[plans.len().min(2)];
            part.0 += outcome.histories - before.0;
            part.1 += outcome.configurations - before.1;
            if outcome.counterexamples.len() >= most {
                break 'starts;
            }
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    let millis = Some(began.elapsed().as_millis() as u64);
    #[cfg(target_arch = "wasm32")]
    let millis = None;
    outcome.by_facts = Some(by_facts);
    Ok((outcome, Figures { millis, by_facts }))
}

/// A kind's name: `DEPOSIT_CONFIRMED A#2`, `DEADLINE_PASSED`.
fn kind_name(model: &Model, history: &History, t: usize) -> String {
    let kind = &history.kinds[t];
    let event = &model.events[kind.event].0;
    match (kind.fact, kind.number) {
        (Some(f), 0) => format!("{event} {}", FACT_KEYS[f]),
        (Some(f), n) => format!("{event} {}#{n}", FACT_KEYS[f]),
        (None, _) => event.clone(),
    }
}

fn steps_json(explorer: &Explorer, history: &History, steps: &[Step]) -> Vec<Value> {
    steps
        .iter()
        .map(|s| {
            let kind = &history.kinds[s.kind];
            let mut step = json!({
                "event": explorer.model.events[kind.event].0,
                "from": explorer.status(s.from),
                "answer": s.reply.text(),
                "to": explorer.status(s.to),
            });
            if let Some(f) = kind.fact {
                step["fact"] = json!(FACT_KEYS[f]);
            }
            if kind.number > 0 {
                step["sequence"] = json!(kind.number);
            }
            if let Some(rule) = explorer.rule_of(s.from, &kind.body) {
                step["rule"] = json!(rule);
            }
            step
        })
        .collect()
}

fn end_json(explorer: &Explorer, history: &History, state: &State) -> Value {
    let model = explorer.model;
    let mut emitted = Vec::new();
    for (slot, count) in &state.emitted {
        for _ in 0..*count {
            emitted.push(explorer.slots.texts[*slot as usize].clone());
        }
    }
    let per_kind = |counts: &dyn Fn(usize) -> u8| {
        let mut out = Vec::new();
        for t in 0..history.kinds.len() {
            for _ in 0..counts(t) {
                out.push(kind_name(model, history, t));
            }
        }
        out
    };
    let mut data = explorer.workflows[state.workflow as usize].clone();
    data.remove("status");
    data.remove("revision");
    json!({
        "status": explorer.status(state.workflow),
        "data": Value::Object(data),
        "emitted": emitted,
        "answeredWithError": per_kind(&|t| count(state.errored, t)),
        "undelivered": per_kind(&|t| history.kinds[t].copies - count(state.consumed, t)),
    })
}

fn history_json(model: &Model, history: &History) -> (Vec<String>, Value) {
    let mut events = Vec::new();
    for t in 0..history.kinds.len() {
        for _ in 0..history.kinds[t].copies {
            events.push(kind_name(model, history, t));
        }
    }
    let mut start = history.start.clone();
    start.remove("revision");
    let mut amounts = Map::new();
    for (f, amount) in history.amounts.iter().enumerate() {
        amounts.insert(FACT_KEYS[f].into(), json!(amount));
    }
    (events, json!({ "workflow": Value::Object(start), "amounts": amounts }))
}

fn differs_example(
    explorer: &Explorer,
    history: &History,
    expected: (&[Step], &State, bool),
    actual: (&[Step], &State),
) -> Value {
    let model = explorer.model;
    let races: Vec<String> = history
        .races
        .iter()
        .enumerate()
        .filter(|(pair, _)| actual.1.seen_first & (1 << (2 * pair)) != 0)
        .map(|(pair, &(low, high))| {
            let (first, second) =
                if actual.1.seen_first & (1 << (2 * pair + 1)) != 0 { (low, high) } else { (high, low) };
            format!("{} seen before {}", kind_name(model, history, first), kind_name(model, history, second))
        })
        .collect();
    let same = |a: &Step, b: &Step| {
        a.kind == b.kind && a.reply == b.reply && explorer.data_of[a.to as usize] == explorer.data_of[b.to as usize]
    };
    let diverges_at =
        expected.0.iter().zip(actual.0).position(|(a, b)| !same(a, b)).unwrap_or(expected.0.len().min(actual.0.len()));
    let (events, start) = history_json(model, history);
    json!({
        "start": start,
        "history": events,
        "races": races,
        "expected": { "inOrder": expected.2, "deliveries": steps_json(explorer, history, expected.0), "end": end_json(explorer, history, expected.1) },
        "actual": { "deliveries": steps_json(explorer, history, actual.0), "end": end_json(explorer, history, actual.1) },
        "divergesAt": diverges_at,
    })
}

/// An order that emits one operation id twice: the order up to the second emission.
fn twice_example(explorer: &Explorer, history: &History, steps: &[Step], end: &State, id: &str) -> Value {
    let (events, start) = history_json(explorer.model, history);
    json!({
        "start": start,
        "history": events,
        "emittedTwice": id,
        "actual": { "deliveries": steps_json(explorer, history, steps), "end": end_json(explorer, history, end) },
        "divergesAt": steps.len().saturating_sub(1),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::explore;
    use crate::ruleset::{load_unverified, BUILTIN_DEPOSIT_SWAP, BUILTIN_DEPOSIT_SWAP_V1, BUILTIN_DEPOSIT_SWAP_V2};

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// The explorer's check of a definition, with its figures printed (`cargo test -- --nocapture`).
    fn checked(name: &str, definition: &Value) -> super::Check {
        let rule_set = load_unverified(definition).unwrap();
        let (check, figures) = explore(&rule_set).unwrap();
        eprintln!(
            "{name}: {} histories, {} configurations, {:?} ms, {} counterexamples",
            check.histories,
            check.configurations,
            figures.millis,
            check.counterexamples.len()
        );
        check
    }

    fn all(check: &super::Check) -> String {
        serde_json::to_string_pretty(&check.counterexamples).unwrap()
    }

    /// deposit-swap v3 before it had facts (one deposit, numbered observations), pinned.
    const DEPOSIT_SWAP_V3_ONE_CHAIN: &str = include_str!("../../tests/fixtures/deposit-swap.v3.one-chain.json");

    #[test]
    fn deposit_swap_v3_as_one_chain_is_reorder_safe() {
        let check = checked("v3 (one chain)", &parse(DEPOSIT_SWAP_V3_ONE_CHAIN));
        assert!(check.unproven.is_none(), "{:?}", check.unproven);
        assert!(check.counterexamples.is_empty(), "{}", all(&check));
        assert!(check.histories > 1000, "{}", check.histories);
        assert!(check.configurations > check.histories);
    }

    #[test]
    fn the_bound_says_what_the_histories_hold() {
        let bound = super::bound();
        assert_eq!(bound["oneFact"]["observations"], 4);
        assert_eq!(bound["twoFacts"]["observationsEach"], 3);
        assert_eq!(bound["oneFact"]["copiesPerObservation"], 2);
    }

    #[test]
    fn the_current_deposit_swap_is_reorder_safe() {
        let check = checked("deposit-swap (current)", &parse(BUILTIN_DEPOSIT_SWAP));
        assert!(check.unproven.is_none(), "{:?}", check.unproven);
        assert!(
            check.counterexamples.is_empty(),
            "{}",
            serde_json::to_string_pretty(&check.counterexamples[0]).unwrap()
        );
    }

    #[test]
    fn deposit_swap_v2_is_reorder_safe_here_too() {
        let check = checked("v2", &parse(BUILTIN_DEPOSIT_SWAP_V2));
        assert!(check.unproven.is_none(), "{:?}", check.unproven);
        assert!(check.counterexamples.is_empty(), "{}", all(&check));
    }

    fn examples(check: &super::Check) -> &[Value] {
        &check.counterexamples
    }

    #[test]
    fn v1_with_v2s_order_fails_on_a_confirmation_that_overtakes_its_detection() {
        // What reorder.rs finds: the confirmation (or the reversal) delivered before the detection diverges at once.
        let mut v1 = parse(BUILTIN_DEPOSIT_SWAP_V1);
        v1["order"] = parse(BUILTIN_DEPOSIT_SWAP_V2)["order"].clone();
        let check = checked("v1", &v1);
        assert!(check.unproven.is_none(), "{:?}", check.unproven);
        let overtaken = |second: &str| {
            examples(&check).iter().any(|c| {
                c["history"] == json!(["DEPOSIT_DETECTED", second])
                    && c["actual"]["deliveries"][0]["event"] == second
                    && c["divergesAt"] == 0
            })
        };
        assert!(overtaken("DEPOSIT_CONFIRMED") || overtaken("DEPOSIT_REVERSED"), "{}", all(&check));
    }

    #[test]
    fn an_undeclared_race_is_a_counterexample_that_names_no_race() {
        let mut v3 = parse(DEPOSIT_SWAP_V3_ONE_CHAIN);
        v3["order"]["races"].as_array_mut().unwrap().remove(0);
        let check = checked("v3 without the deadline's race", &v3);
        let example = &examples(&check)[0];
        assert!(example["history"].as_array().unwrap().contains(&json!("DEADLINE_PASSED")), "{example}");
        assert_eq!(example["races"], json!([]), "{example}");
        assert_ne!(example["expected"]["end"], example["actual"]["end"], "{example}");
    }

    #[test]
    fn an_operation_id_emitted_twice_is_a_counterexample() {
        // A newer confirmation after the exchange started starts it again: start-exchange:wf a second time.
        let mut v3 = parse(DEPOSIT_SWAP_V3_ONE_CHAIN);
        let rule = v3["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| {
                r["on"] == json!(["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED"])
                    && r["in"] == json!(["exchange", "sending", "success"])
            })
            .unwrap();
        rule["then"]["to"] = json!("exchange");
        rule["then"]["emit"] = json!([{ "type": "START_EXCHANGE", "id": "start-exchange:{workflowId}", "payload": ["depositRef", "amountUnits"] }]);
        let check = checked("v3 exchanging twice", &v3);
        let twice = examples(&check)
            .iter()
            .find(|c| c.get("emittedTwice").is_some())
            .unwrap_or_else(|| panic!("{}", all(&check)));
        assert_eq!(twice["emittedTwice"], "start-exchange:wf", "{twice}");
        let deliveries = twice["actual"]["deliveries"].as_array().unwrap();
        let starts = deliveries.iter().filter(|d| d["answer"] == "applied" && d["to"] == "exchange").count();
        assert!(starts >= 2, "{twice}");
    }

    /// A definition file's check, its figures and its first counterexample:
    /// `FACTS_REORDER_DEFINITION=path cargo test --lib explore_a_definition_file -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn explore_a_definition_file() {
        let path = std::env::var("FACTS_REORDER_DEFINITION").expect("FACTS_REORDER_DEFINITION names a definition file");
        let definition = parse(&std::fs::read_to_string(path).unwrap());
        let rule_set = load_unverified(&definition).unwrap();
        if std::env::var("FACTS_REORDER_AS_VERIFIED").is_ok() {
            let (check, figures) = explore(&rule_set).unwrap();
            let report = crate::ruleset::verify_definition(&definition).unwrap().to_json();
            for property in report["properties"].as_array().unwrap() {
                let text = property.to_string();
                eprintln!("property {}: ok {} {}", property["name"], property["ok"], &text[..text.len().min(600)]);
            }
            eprintln!(
                "as verified: {} histories, {} configurations, {:?} ms, {} counterexamples",
                check.histories,
                check.configurations,
                figures.millis,
                check.counterexamples.len()
            );
        }
        let (check, figures) = super::explore_up_to(&rule_set, usize::MAX, (usize::MAX, usize::MAX)).unwrap();
        eprintln!(
            "the definition: {} histories, {} configurations, {:?} ms, {} counterexamples",
            check.histories,
            check.configurations,
            figures.millis,
            check.counterexamples.len()
        );
        eprintln!("unproven: {:?}", check.unproven);
        eprintln!("(histories, configurations) with no fact, one, two: {:?}", figures.by_facts);
        if let Ok(out) = std::env::var("FACTS_REORDER_COUNTEREXAMPLES") {
            std::fs::write(out, serde_json::to_string(&check.counterexamples).unwrap()).unwrap();
        }
        for example in examples(&check).iter().take(4) {
            eprintln!("{}", serde_json::to_string_pretty(example).unwrap());
        }
    }

    /// Two deposits on one payment: the first confirmation the workflow sees
    /// is paid (`pay:{ref}`), a confirmation of another deposit after it is
    /// refunded once (`refund:{ref}`); a newer word on the paid deposit is
    /// recorded. The two deposits' confirmations race `across` (which one is
    /// paid is the order the workflow saw them in); one deposit's newer word
    /// races its older confirmation.
    fn payments(across: bool) -> crate::ruleset::RuleSet {
        let newer = json!(["seq", ">", "seq"]);
        let same = json!(["seq", "=", "seq"]);
        let definition = json!({
            "id": "payments", "version": 1,
            "statuses": [{ "name": "open", "initial": true }, { "name": "paid" }],
            "fields": [{ "name": "ref", "kind": "text" }, { "name": "amount", "kind": "units" }, { "name": "seq", "kind": "count" }],
            "events": [{ "type": "SEEN", "fields": ["ref", "amount", "seq"] }, { "type": "CONFIRMED", "fields": ["ref", "amount", "seq"] }],
            "facts": { "name": "deposits", "key": "ref", "events": ["SEEN", "CONFIRMED"], "record": ["amount", "seq"] },
            "order": {
                "sequence": { "field": "seq", "events": ["SEEN", "CONFIRMED"] },
                "follows": [{ "event": "CONFIRMED", "after": "SEEN" }],
                "races": [
                    { "between": [["SEEN", "CONFIRMED"], "CONFIRMED"] },
                    { "between": ["CONFIRMED", "CONFIRMED"], "across": true }
                ]
            },
            "rules": [
                { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
                { "on": "SEEN", "in": "open", "guard": ["amount"], "cases": [
                    { "when": newer, "then": { "outcome": "applied", "to": "open" } },
                    { "when": same, "then": { "outcome": "already-applied" } },
                    { "then": { "outcome": "stale" } } ] },
                { "on": "SEEN", "in": "paid", "guard": ["amount"], "cases": [
                    { "when": newer, "then": { "outcome": "applied", "to": "paid" } },
                    { "when": same, "then": { "outcome": "already-applied" } },
                    { "then": { "outcome": "stale" } } ] },
                { "on": "CONFIRMED", "in": "open", "guard": ["amount"], "cases": [
                    { "when": newer, "then": { "outcome": "applied", "to": "paid",
                        "emit": [{ "type": "PAY", "id": "pay:{ref}:{workflowId}", "payload": ["ref", "amount"] }] } },
                    { "when": same, "then": { "outcome": "already-applied" } },
                    { "then": { "outcome": "stale" } } ] },
                { "on": "CONFIRMED", "in": "paid", "guard": ["amount"], "cases": [
                    { "when": [newer, { "emitted": "pay" }], "then": { "outcome": "applied", "to": "paid" } },
                    { "when": [newer, { "emitted": "refund" }], "then": { "outcome": "applied", "to": "paid" } },
                    { "when": newer, "then": { "outcome": "applied", "to": "paid",
                        "emit": [{ "type": "REFUND", "id": "refund:{ref}:{workflowId}", "payload": ["ref", "amount"] }] } },
                    { "when": same, "then": { "outcome": "already-applied" } },
                    { "then": { "outcome": "stale" } } ] }
            ],
            "otherwise": { "error": "INVALID_TRANSITION", "disposition": "reconcile" }
        });
        let mut definition = definition;
        if !across {
            definition["order"]["races"].as_array_mut().unwrap().remove(1);
        }
        load_unverified(&definition).unwrap()
    }

    fn explored(name: &str, rule_set: &crate::ruleset::RuleSet) -> super::Check {
        let (check, figures) = explore(rule_set).unwrap();
        eprintln!(
            "{name}: {} histories, {} configurations, {:?} ms, {} counterexamples",
            check.histories,
            check.configurations,
            figures.millis,
            check.counterexamples.len()
        );
        check
    }

    #[test]
    fn two_deposits_whose_confirmations_race_across_are_reorder_safe() {
        let check = explored("payments", &payments(true));
        assert!(check.unproven.is_none(), "{:?}", check.unproven);
        assert!(check.counterexamples.is_empty(), "{}", all(&check));
        // One deposit with up to 4 observations, two with up to 3 each.
        assert!(check.histories > 50, "{}", check.histories);
    }

    #[test]
    fn an_undeclared_race_across_two_deposits_is_a_counterexample() {
        let check = explored("payments without the race across", &payments(false));
        let example = &examples(&check)[0];
        let history = example["history"].as_array().unwrap();
        assert!(history.iter().any(|e| e.as_str().unwrap().starts_with("CONFIRMED A")), "{example}");
        assert!(history.iter().any(|e| e.as_str().unwrap().starts_with("CONFIRMED B")), "{example}");
        // One order pays A, the other pays B.
        let emitted = |side: &str| example[side]["end"]["emitted"].clone();
        assert_ne!(emitted("expected"), emitted("actual"), "{example}");
        assert!(
            emitted("expected").as_array().unwrap().iter().any(|id| id.as_str().unwrap().starts_with("pay:")),
            "{example}"
        );
    }
}
