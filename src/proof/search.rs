//! The search behind `reorder-safe` and `invariants`: every delivery order
//! of every history within the bound (see [`bound`]), each delivery decided
//! by the real decider ([`crate::decide::decide`]) on a concrete JSON
//! workflow, and the write set it answers applied to that workflow as a host
//! would (status, revision, each `set` key; a null removes one). Nothing of
//! the rules is modelled: whatever the decider does is what is proven.
//!
//! A history is what producers emit for one workflow (see [`shapes`]): per
//! fact (keys `"A"`, `"B"`) a chain of observations, numbered with
//! `order.sequence` (one type again included, for one fact), each published
//! once or twice (new event ids), plus the rule set's other event types.
//! Values come from field kinds: a field no rule guards differs from one
//! observation to the next, so ends compare by value; an amount compared
//! with an expected one takes each class the comparisons tell apart. For
//! every history and start (no workflow, each initial status), every
//! delivery order is explored (`retry` = redeliver later; an event that
//! follows an operation exists once that operation was emitted), memoised
//! on the configuration. After every delivery each invariant is checked;
//! a broken one is reported with the shortest order of its history that
//! breaks it. With an `order` claim, each order ends in a result (status,
//! data, operation ids emitted, a recurring one by its count, events
//! answered with an error, events undelivered), and orders that saw every
//! declared racing pair in the same order must end alike; an order that
//! emits one operation id twice fails too. Without a `facts` block, the
//! `order.sequence` chain is one fact.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use serde_json::{json, Map, Value};

use super::check::Check;
use crate::decide;
use crate::error::{Disposition, Error, Result};
use crate::limits::{MAX_REORDER_CONFIGURATIONS, MAX_REORDER_HISTORIES, MAX_REORDER_KINDS};
use crate::outcome::Outcome;
use crate::ruleset::RuleSet;

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
/// The expected amount a workflow may record.
const EXPECTED: u64 = 10;

/// What a fact's amount is, next to the workflow's expected amount: the value
/// classes that decide a comparison between the two. An amount no rule guards
/// differs from one observation to the next within its class (a hold changed
/// from 10 to 11 to 12), so that an end state that kept an older value differs
/// from one that recorded the newer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Below,
    Equal,
    Above,
    /// No expected amount to compare with (none declared, or not set).
    Free,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Below => "below",
            Class::Equal => "equal",
            Class::Above => "above",
            Class::Free => "free",
        }
    }

    /// The amount of observation `n` (1-based; 0: an event that is no observation), fixed when `fixed`.
    fn amount(self, n: u64, fixed: bool) -> String {
        let step = if fixed || n == 0 { 0 } else { n - 1 };
        match self {
            Class::Below => (EXPECTED / 2 + step).to_string(),
            Class::Equal => EXPECTED.to_string(),
            Class::Above => (EXPECTED * 2 + step).to_string(),
            Class::Free => (EXPECTED + step).to_string(),
        }
    }

    fn ordering(self) -> std::cmp::Ordering {
        match self {
            Class::Below => std::cmp::Ordering::Less,
            Class::Equal | Class::Free => std::cmp::Ordering::Equal,
            Class::Above => std::cmp::Ordering::Greater,
        }
    }
}
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
    /// Fields some rule guards: a fact's identity, the same in each of its observations.
    guarded: HashSet<String>,
    /// Names of per-fact operation templates (`<name>:{<key>}:{workflowId}`).
    per_fact: HashSet<String>,
    /// The classes of a fact's amount that some comparison with an expected amount tells apart.
    classes: Vec<Class>,
    /// Units fields some rule compares with an expected amount: they take a class's values.
    compared_units: HashSet<String>,
    /// Some event that is no fact's observation carries one of them.
    others_compare: bool,
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
    fn read(rule_set: &RuleSet) -> std::result::Result<Model, String> {
        let definition = rule_set.definition();
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
        let sequence = rule_set.order.as_ref().and_then(|o| o.sequence.as_ref());
        let sequence_field = sequence.map(|s| rule_set.fields[s.field].name.clone());
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
        let guarded: HashSet<String> =
            rule_set.rules.iter().flat_map(|r| r.guard.iter().map(|f| rule_set.fields[*f].name.clone())).collect();
        // Which classes of a fact's amount the comparisons with an expected amount tell apart: one of each.
        // The rules' comparisons, and the invariants': a class no rule tells apart may still break one.
        let stated = rule_set.invariants.iter().filter_map(|i| match i.kind {
            crate::ruleset::invariants::Kind::EmitWhen { event_field, op, workflow_field, .. } => {
                Some(crate::ruleset::Cond::Compare { event_field, op, workflow_field })
            }
            _ => None,
        });
        let compared: Vec<(String, crate::ruleset::Comparison)> = rule_set
            .rules
            .iter()
            .flat_map(|r| r.when.iter().cloned())
            .chain(stated)
            .filter_map(|c| match c {
                crate::ruleset::Cond::Compare { event_field, op, workflow_field }
                    if expected_fields.contains(&rule_set.fields[workflow_field].name) =>
                {
                    Some((rule_set.fields[event_field].name.clone(), op))
                }
                _ => None,
            })
            .collect();
        let comparisons: Vec<crate::ruleset::Comparison> = compared.iter().map(|(_, op)| *op).collect();
        let compared_units: HashSet<String> = compared.into_iter().map(|(f, _)| f).collect();
        let others_compare = (0..events.len())
            .any(|e| !fact_events.contains(&e) && events[e].1.iter().any(|f| compared_units.contains(f)));
        let mut classes: Vec<Class> = Vec::new();
        let mut told: Vec<Vec<bool>> = Vec::new();
        for class in [Class::Equal, Class::Below, Class::Above] {
            let answers: Vec<bool> = comparisons.iter().map(|op| op.holds(class.ordering())).collect();
            if !told.contains(&answers) {
                told.push(answers);
                classes.push(class);
            }
        }
        let per_fact = rule_set
            .rules
            .iter()
            .filter_map(|r| match &r.answer {
                crate::ruleset::Answer::Applied(t) => Some(t.emit.iter()),
                _ => None,
            })
            .flatten()
            .filter(|e| e.id_template.per_fact)
            .map(|e| e.id_template.name.clone())
            .collect();
        Ok(Model {
            compared_units,
            others_compare,
            guarded,
            per_fact,
            classes,
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

    /// The fact key a fact event's body carries.
    fn fact_key<'b>(&self, body: &'b Map<String, Value>) -> Option<&'b str> {
        body.get(self.key_field.as_ref()?)?.as_str()
    }

    fn is_fact(&self, e: usize) -> bool {
        self.fact_events.contains(&e)
    }

    /// The event a kind stands for, without its event id: observation
    /// `observation` (1-based; 0 for an event that is no observation) of
    /// `fact`. A field no rule guards differs from one observation to the
    /// next (`t1`, `t2`; 1, 2; an amount within its class), a guarded one is
    /// the fact's identity and keeps its value.
    fn body(&self, e: usize, fact: Option<usize>, number: u64, observation: u64, class: Class) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("workflowId".into(), json!(WORKFLOW_ID));
        body.insert("type".into(), json!(self.events[e].0));
        for field in &self.events[e].1 {
            let fixed = self.guarded.contains(field);
            let n = if fixed { 0 } else { observation };
            let value = if Some(field) == self.key_field.as_ref() && fact.is_some() {
                json!(FACT_KEYS[fact.unwrap_or(0)])
            } else if Some(field) == self.sequence_field.as_ref() && number > 0 {
                json!(number)
            } else if (fact.is_some() && self.amount_fields.contains(field)) || self.compared_units.contains(field) {
                json!(class.amount(observation, fixed))
            } else {
                match self.kinds.get(field).map(String::as_str) {
                    Some("units") => json!((5 + n).to_string()),
                    Some("count") => json!(n.max(1)),
                    _ if n == 0 => json!("t"),
                    _ => json!(format!("t{n}")),
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
    /// The classes of the facts' amounts, for the counterexample.
    classes: Vec<Class>,
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

/// How an emitted operation meets one of its slot already stored.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Emission {
    /// Its id is new each time (a recurring one's count grows).
    Recurring,
    /// Once per id: a second emission is a counterexample.
    Once,
    /// Written only where its id is absent (an untracked fact's): a second emission writes nothing.
    IfAbsent,
}

/// What delivering one event to one workflow does, decided once.
struct Transition {
    reply: Reply,
    /// The workflow after it (interned).
    next: u32,
    /// Emitted operations: the slot they count in (the id, or a recurring one's name), whether it is recurring, the type's bit.
    operations: Vec<(u32, Emission, u64)>,
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
    /// What happened so far that an invariant reads: bits of `invariants::Marker::bit`.
    marks: u64,
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
    /// The first invariant (index into `RuleSet::invariants`) this delivery broke.
    broke: Option<usize>,
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
    /// Per operation slot: its type (index into `Model::operation_types`) and, for a per-fact operation, its fact.
    slot_info: Vec<(usize, Option<u8>)>,
    /// The markers the invariants read (see `State::marks`): per status and per event type, its bit or 0.
    status_marks: Vec<u64>,
    event_marks: Vec<u64>,
}

impl<'r> Explorer<'r> {
    fn new(rule_set: &'r RuleSet, model: &'r Model) -> Explorer<'r> {
        // One bit per marker some invariant reads, in order of first mention (at most one per invariant).
        let mut status_marks = vec![0u64; rule_set.statuses.len()];
        let mut event_marks = vec![0u64; rule_set.events.len()];
        let mut next = 0;
        for marker in rule_set.invariants.iter().filter_map(|i| i.marker()) {
            let slot = match marker {
                crate::ruleset::invariants::Marker::Status(s) => &mut status_marks[s],
                crate::ruleset::invariants::Marker::Event(e) => &mut event_marks[e],
            };
            if *slot == 0 && next < 64 {
                *slot = 1 << next;
                next += 1;
            }
        }
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
            slot_info: Vec::new(),
            status_marks,
            event_marks,
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

    /// The marker bit of a workflow's status (0 when no invariant reads it).
    fn status_mark(&self, workflow: u32) -> u64 {
        self.rule_set.status_index(self.status(workflow)).map_or(0, |s| self.status_marks[s])
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
            state.marks,
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
        // A workflow without a status is none yet (the `(none)` start).
        let exists = stored.contains_key("status");
        let decision = match decide::decide(self.rule_set, &event, None, exists.then_some(&stored)) {
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
            let type_index = self.model.operation_types.iter().position(|o| *o == op.operation_type);
            let bit = type_index.map_or(0, |i| 1u64 << i);
            if slot as usize == self.slot_info.len() {
                let fact = if self.model.per_fact.contains(name) {
                    self.model.fact_key(body).and_then(|k| FACT_KEYS.iter().position(|x| *x == k)).map(|f| f as u8)
                } else {
                    None
                };
                self.slot_info.push((type_index.unwrap_or(usize::MAX), fact));
            }
            let emission = match (recurring, op.if_absent) {
                (true, _) => Emission::Recurring,
                (false, true) => Emission::IfAbsent,
                (false, false) => Emission::Once,
            };
            operations.push((slot, emission, bit));
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
        packer.item(self.rule_set, &event, None, stored.contains_key("status").then_some(&stored));
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
        let (reply, to) = (transition.reply, transition.next);
        let mut next = state.clone();
        let mut twice = None;
        next.workflow = to;
        if let Reply::Error { .. } = reply {
            next.errored += 1 << (2 * t);
        }
        for &(slot, emission, bit) in &transition.operations {
            next.types |= bit;
            match next.emitted.binary_search_by_key(&slot, |(s, _)| *s) {
                Ok(_) if emission == Emission::IfAbsent => {}
                Ok(i) => {
                    next.emitted[i].1 = next.emitted[i].1.saturating_add(1);
                    if emission == Emission::Once {
                        twice = Some(slot);
                    }
                }
                Err(i) => next.emitted.insert(i, (slot, 1)),
            }
        }
        if reply == Reply::Applied && !self.rule_set.invariants.is_empty() {
            next.marks |= self.status_mark(to) | self.event_marks[kind.event];
        }
        let broke = if self.rule_set.invariants.is_empty() {
            None
        } else {
            // The decision just made, read again rather than copied on every delivery.
            let operations = &self.transitions[&(state.workflow, kind.body_id)].operations;
            self.broken(history, (state, &next), t, reply, operations)
        };
        let step = Step { kind: t, from: state.workflow, reply, to, broke };
        if count(state.consumed, t) == 0 {
            let races = history.races.iter().enumerate().map(|(pair, &(low, high))| (low, high, pair));
            next.seen_first =
                super::check::seen_first(next.seen_first, t, races, |other| count(state.consumed, other) == 0);
        }
        next.consumed += 1 << (2 * t);
        Some(match twice {
            None => Ok((next, step)),
            Some(slot) => Err((next, step, self.slots.texts[slot as usize].clone())),
        })
    }

    /// The shortest order of `history` from `origin` whose last delivery breaks an
    /// invariant (breadth first over the configurations), and the configuration it leaves.
    fn shortest_broken(&mut self, history: &History, origin: &State) -> Option<(Vec<Step>, State)> {
        let mut seen: HashSet<u128, FxBuild> = HashSet::default();
        let mut nodes: Vec<(State, Option<(usize, Step)>)> = vec![(origin.clone(), None)];
        seen.insert(self.key(origin));
        let mut at = 0;
        while at < nodes.len() {
            let state = nodes[at].0.clone();
            for t in 0..history.kinds.len() {
                let (next, step) = match self.deliver(history, &state, t) {
                    None => continue,
                    Some(Ok(delivered)) => delivered,
                    Some(Err((next, step, _))) => (next, step),
                };
                if step.broke.is_some() {
                    let mut path = vec![step];
                    let mut node = at;
                    while let Some((parent, step)) = &nodes[node].1 {
                        path.push(step.clone());
                        node = *parent;
                    }
                    path.reverse();
                    return Some((path, next));
                }
                if seen.insert(self.key(&next)) {
                    nodes.push((next, Some((at, step))));
                }
            }
            at += 1;
        }
        None
    }

    /// The first invariant a delivery of kind `t` from `before` to `after` breaks.
    fn broken(
        &self,
        history: &History,
        (before, after): (&State, &State),
        t: usize,
        reply: Reply,
        operations: &[(u32, Emission, u64)],
    ) -> Option<usize> {
        use crate::ruleset::invariants::Kind;
        let rs = self.rule_set;
        let kind = &history.kinds[t];
        let type_of = |name: &str| self.model.operation_types.iter().position(|o| o == name);
        let emits = |name: &str| {
            type_of(name).is_some_and(|i| operations.iter().any(|(slot, _, _)| self.slot_info[*slot as usize].0 == i))
        };
        let marked = |m: crate::ruleset::invariants::Marker| {
            let bit = match m {
                crate::ruleset::invariants::Marker::Status(s) => self.status_marks[s],
                crate::ruleset::invariants::Marker::Event(e) => self.event_marks[e],
            };
            before.marks & bit != 0
        };
        rs.invariants.iter().position(|invariant| match &invariant.kind {
            Kind::Both(a, b) => {
                let bits = [a, b].iter().fold(0u64, |bits, n| bits | type_of(n).map_or(0, |i| 1 << i));
                bits.count_ones() == 2 && after.types & bits == bits && before.types & bits != bits
            }
            Kind::EmitAfter { operation, after: m } => emits(operation) && marked(*m),
            Kind::EmitWhen { operation, event_field, op, workflow_field } => {
                emits(operation) && self.compares(before.workflow, kind, (*event_field, *op, *workflow_field))
            }
            Kind::KeepWhen { event_field, op, workflow_field } => {
                kind.fact.is_some()
                    && self.compares(before.workflow, kind, (*event_field, *op, *workflow_field))
                    && self.keeps(after.workflow, kind)
            }
            Kind::ReachAfter { status, after: m } => {
                let name = rs.statuses[*status].name.as_str();
                reply == Reply::Applied
                    && self.status(after.workflow) == name
                    && self.status(before.workflow) != name
                    && marked(*m)
            }
            Kind::Changes(field) => {
                reply == Reply::Applied && self.changed(before.workflow, after.workflow, &rs.fields[*field].name)
            }
            Kind::AtMost { operation, count, per_fact } => {
                let Some(i) = type_of(operation).filter(|_| emits(operation)) else { return false };
                let mut counts: HashMap<Option<u8>, u64> = HashMap::new();
                for (slot, n) in &after.emitted {
                    let (type_index, fact) = self.slot_info[*slot as usize];
                    if type_index == i {
                        *counts.entry(if *per_fact { fact } else { None }).or_default() += *n as u64;
                    }
                }
                counts.values().any(|n| n > count)
            }
        })
    }

    /// Whether `event op recorded` holds for a kind's event on a workflow, as a rule reads it
    /// (a fact's own field from its entry; unrecorded: 0, or "" for text).
    fn compares(
        &self,
        workflow: u32,
        kind: &Kind,
        (event_field, op, workflow_field): (usize, crate::ruleset::Comparison, usize),
    ) -> bool {
        let rs = self.rule_set;
        let data = &self.workflows[workflow as usize];
        let name = &rs.fields[workflow_field].name;
        let recorded = match (rs.facts(), kind.fact) {
            (Some(facts), Some(_)) if facts.record.contains(&workflow_field) => {
                self.model.fact_key(&kind.body).and_then(|key| data.get(&facts.name)?.get(key)?.get(name))
            }
            _ => data.get(name),
        };
        let event = kind.body.get(&rs.fields[event_field].name);
        let integer = |v: Option<&Value>| match v {
            None => Some(0u128),
            Some(Value::Number(n)) => n.as_u64().map(u128::from),
            Some(Value::String(s)) => s.parse::<u128>().ok(),
            _ => None,
        };
        let ordering = match (integer(event), integer(recorded)) {
            (Some(a), Some(b)) if rs.fields[event_field].kind.is_integer() => a.cmp(&b),
            _ => {
                let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
                text(event).cmp(&text(recorded))
            }
        };
        op.holds(ordering)
    }

    /// Whether a workflow's facts map holds an entry for a kind's fact.
    fn keeps(&self, workflow: u32, kind: &Kind) -> bool {
        let Some(map) = self.model.map_name.as_ref() else { return false };
        let data = &self.workflows[workflow as usize];
        self.model.fact_key(&kind.body).is_some_and(|key| data.get(map).and_then(|m| m.get(key)).is_some())
    }

    /// Whether a recorded value of `field` changed or went between two workflows (in a facts map: any fact's).
    fn changed(&self, before: u32, after: u32, field: &str) -> bool {
        let (a, b) = (&self.workflows[before as usize], &self.workflows[after as usize]);
        if a.get(field).is_some_and(|v| b.get(field) != Some(v)) {
            return true;
        }
        let Some(map) = self.model.map_name.as_ref() else { return false };
        let entries = a.get(map).and_then(Value::as_object);
        entries.into_iter().flatten().any(|(key, entry)| {
            entry.get(field).is_some_and(|v| b.get(map).and_then(|m| m.get(key)).and_then(|e| e.get(field)) != Some(v))
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
    /// Whether orders are compared (the rule set makes an `order` claim), or only the invariants checked.
    compare: bool,
    /// Some delivery broke an invariant ([`Failure::Broke`]; the shortest such order is searched for afterwards).
    broke: Option<Failure>,
}

enum Failure {
    Differs {
        reference: usize,
        end: State,
        path: Vec<Step>,
    },
    Twice {
        end: State,
        path: Vec<Step>,
        id: String,
    },
    /// A delivery broke an invariant (the path's last step says which).
    Broke,
}

impl Search<'_, '_, '_> {
    fn explore(&mut self, state: State) -> Result<()> {
        if ((self.broke.is_some() || self.mismatch.is_some()) && !self.whole)
            || self.explorer.unproven.is_some()
            || !self.seen.insert(self.explorer.key(&state))
        {
            return Ok(());
        }
        *self.configurations += 1;
        if *self.configurations > self.limit {
            return Err(over_budget(
                "maxReorderConfigurations",
                self.limit,
                "delivery configurations over all histories and starts",
                self.explorer.model,
            ));
        }
        let mut progressed = false;
        for t in 0..self.history.kinds.len() {
            match self.explorer.deliver(self.history, &state, t) {
                None => {}
                Some(Ok((_, step))) if step.broke.is_some() => {
                    progressed = true;
                    if self.broke.is_none() {
                        self.broke = Some(Failure::Broke);
                    }
                    if !self.whole {
                        return Ok(());
                    }
                }
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
            if (self.mismatch.is_some() || self.broke.is_some()) && !self.whole {
                return Ok(());
            }
        }
        if !progressed && self.compare {
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

fn over_budget(limit: &str, max: usize, what: &str, model: &Model) -> Error {
    // Say what this definition makes the search explore, so the fix is the author's to pick.
    let others = model.events.len() - model.fact_events.len();
    let mut grows = vec![format!("{} start statuses (and no workflow)", model.starts.len())];
    if !model.fact_events.is_empty() {
        grows.push(format!("{} fact event types", model.fact_events.len()));
    }
    grows.push(format!("{others} other event types"));
    if !model.races.is_empty() {
        grows.push(format!("{} declared racing pairs", model.races.len()));
    }
    Error::RuleSetInvalid {
        path: "$.order".into(),
        reason: format!(
            "limit {limit}: at most {max} {what} in one verification, this definition needs more; it explores histories over {}: fewer of any of them, or splitting the rule set, shrinks it",
            grows.join(", ")
        ),
        report: None,
    }
}

/// What one fact does in a history: its chain (event type, copies) and its amount's class.
#[derive(Clone)]
struct FactPlan {
    chain: Vec<(usize, u8)>,
    class: Class,
}

/// The chains of observations of one fact, up to `most` long. Numbered
/// (`order.sequence`): any fact event type after any other, and with
/// `repeats` the same one again (three changes of a hold in a row). Unnumbered: each fact event type at most once, in declaration order.
/// Either way an observation that follows a fact event type has an earlier
/// observation of it.
fn chains(model: &Model, most: usize, repeats: bool, cap: usize) -> Option<Vec<Vec<usize>>> {
    let legal =
        |chain: &[usize], e: usize| model.follows_events[e].iter().all(|a| !model.is_fact(*a) || chain.contains(a));
    let numbered = model.sequence_field.is_some();
    let types = model.fact_events.len();
    let mut all = Vec::new();
    // Each chain with the index of the fact event type after which an unnumbered one may go on.
    let mut frontier: Vec<(Vec<usize>, usize)> = vec![(Vec::new(), 0)];
    for _ in 0..most {
        let mut longer = Vec::new();
        for (chain, from) in &frontier {
            for i in if numbered { 0 } else { *from }..types {
                let e = model.fact_events[i];
                if (numbered && !repeats && chain.last() == Some(&e)) || !legal(chain, e) {
                    continue;
                }
                let mut next = chain.clone();
                next.push(e);
                longer.push((next, i + 1));
                // More chains than histories allowed: the caller refuses the definition, built no further.
                if all.len() + longer.len() > cap {
                    return None;
                }
            }
        }
        all.extend(longer.iter().map(|(chain, _)| chain.clone()));
        frontier = longer;
    }
    Some(all)
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
/// `None` past `cap` ways (each type's step keeps the ways before it, so none is dropped unseen).
fn other_copies(model: &Model, most: u8, left: usize, cap: usize) -> Option<Vec<Vec<u8>>> {
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
            if next.len() > cap {
                return None;
            }
        }
        out = next;
    }
    Some(out)
}

/// A history's shapes: the facts' plans and the other types' copies. One fact
/// with up to [`ONE_FACT_OBSERVATIONS`]; with a `facts` block also two facts
/// with up to [`TWO_FACT_OBSERVATIONS`] each (as unordered pairs: the two keys
/// are interchangeable).
/// A history's facts' plans and the other event types' copies.
type Shape = (Vec<FactPlan>, Vec<u8>);

/// `None` when there are more than `cap` (the caller refuses the definition).
fn shapes(model: &Model, classes: &[Class], cap: usize) -> Option<Vec<Shape>> {
    let mut out = Vec::new();
    let size = |plans: &[FactPlan], others: &[u8]| {
        plans.iter().flat_map(|p| p.chain.iter().map(|(_, n)| *n as usize)).sum::<usize>()
            + others.iter().map(|n| *n as usize).sum::<usize>()
    };
    let plans = |most: usize, extra: usize, repeats: bool| -> Option<Vec<FactPlan>> {
        let mut plans = Vec::new();
        for chain in chains(model, most, repeats, cap)? {
            for copies in with_copies(&chain, extra) {
                for class in classes {
                    plans.push(FactPlan { chain: copies.clone(), class: *class });
                }
            }
            if plans.len() > cap {
                return None;
            }
        }
        Some(plans)
    };
    if model.fact_events.is_empty() {
        for others in other_copies(model, MAX_COPIES, super::check::BOUND, cap)? {
            out.push((Vec::new(), others));
        }
    }
    let one = if model.fact_events.is_empty() {
        Vec::new()
    } else {
        plans(ONE_FACT_OBSERVATIONS, ONE_FACT_OBSERVATIONS, true)?
    };
    for plan in one {
        let used = size(std::slice::from_ref(&plan), &[]);
        if used > ONE_FACT_EVENTS {
            continue;
        }
        for others in other_copies(model, MAX_COPIES, ONE_FACT_EVENTS - used, cap)? {
            out.push((vec![plan.clone()], others));
        }
        if out.len() > cap {
            return None;
        }
    }
    if model.map_name.is_some() {
        let two = plans(TWO_FACT_OBSERVATIONS, TWO_FACT_REPUBLICATIONS, false)?;
        for i in 0..two.len() {
            for j in i..two.len() {
                let pair = vec![two[i].clone(), two[j].clone()];
                let republished = pair.iter().flat_map(|p| p.chain.iter()).filter(|(_, n)| *n > 1).count();
                if republished > TWO_FACT_REPUBLICATIONS {
                    continue;
                }
                for others in other_copies(model, TWO_FACT_OTHER_COPIES, TWO_FACT_OTHER_EVENTS, cap)? {
                    out.push((pair.clone(), others));
                }
                if out.len() > cap {
                    return None;
                }
            }
        }
    }
    // A history holds an event; one that follows an event type needs one in its history.
    out.retain(|(plans, others)| size(plans, others) > 0);
    out.retain(|(plans, others)| {
        let has = |e: usize| others[e] > 0 || plans.iter().any(|p| p.chain.iter().any(|(t, _)| *t == e));
        (0..model.events.len()).all(|e| !has(e) || model.follows_events[e].iter().all(|a| has(*a)))
    });
    out.sort_by_key(|(plans, others)| size(plans, others));
    Some(out)
}

fn build(
    model: &Model,
    (plans, others, other_class): (&[FactPlan], &[u8], Class),
    start: Map<String, Value>,
) -> History {
    let mut kinds: Vec<Kind> = Vec::new();
    let mut first_of: HashMap<usize, usize> = HashMap::new();
    let kind = |e: usize,
                fact: Option<usize>,
                (number, observation): (u64, u64),
                copies: u8,
                class: Class,
                after: Vec<usize>| {
        let body = model.body(e, fact, number, observation, class);
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
            kinds.push(kind(e, Some(f), (number, i as u64 + 1), copies, plan.class, after));
        }
    }
    for (e, &copies) in others.iter().enumerate().filter(|(_, n)| **n > 0) {
        first_of.entry(e).or_insert(kinds.len());
        kinds.push(kind(e, None, (0, 0), copies, other_class, Vec::new()));
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
    History { kinds, races, start, classes: plans.iter().map(|p| p.class).collect() }
}

/// The property's figures beyond the `Check`: the bounds and the time.
#[cfg_attr(not(test), allow(dead_code))]
pub struct Figures {
    pub millis: Option<u64>,
    /// (histories, configurations) of the histories with no fact, one fact, two facts.
    pub by_facts: [(usize, usize); 3],
}

/// What the search explores, for the properties' `checked.bound`: the
/// figures, and `says`, the one sentence that states them.
pub fn bound(rule_set: &RuleSet) -> Value {
    let numbered = rule_set.order.as_ref().is_some_and(|o| o.sequence.is_some());
    let fact_events = match (&rule_set.facts, rule_set.order.as_ref().and_then(|o| o.sequence.as_ref())) {
        (Some(facts), _) => facts.events.len(),
        (None, Some(sequence)) => sequence.events.len(),
        (None, None) => 0,
    };
    let mut says = String::from("every history ");
    if fact_events == 0 {
        says += &format!("of up to {} events, each event type at most {MAX_COPIES} times", super::check::BOUND);
    } else {
        let which = if numbered {
            "numbered 1 up, of any fact event type, one type again included"
        } else {
            "each fact event type at most once"
        };
        says += &format!(
            "of one fact with up to {ONE_FACT_OBSERVATIONS} observations ({which}), each published once or twice, and each other event type at most {MAX_COPIES} times, {ONE_FACT_EVENTS} events at most"
        );
        if rule_set.facts.is_some() {
            says += &format!(
                ", and of two facts with up to {TWO_FACT_OBSERVATIONS} observations each (no type twice in a row), {TWO_FACT_REPUBLICATIONS} re-publication in all and {TWO_FACT_OTHER_EVENTS} other events at most"
            );
        }
    }
    says += ", from no workflow and from each initial status (with no expected amount, or one and facts' amounts below, equal to or above it, as the rules' comparisons tell them apart), in every delivery order the 'order' section allows, every delivery decided by the decider";
    json!({
        "says": says,
        "explorer": "concrete: every delivery decided by the decider on a JSON workflow",
        "events": if fact_events == 0 { super::check::BOUND } else { ONE_FACT_EVENTS },
        "copiesPerType": MAX_COPIES,
        "oneFact": { "observations": ONE_FACT_OBSERVATIONS, "repeats": numbered, "events": ONE_FACT_EVENTS, "copiesPerObservation": MAX_COPIES, "copiesPerOtherType": MAX_COPIES },
        "twoFacts": { "observationsEach": TWO_FACT_OBSERVATIONS, "republications": TWO_FACT_REPUBLICATIONS, "otherEvents": TWO_FACT_OTHER_EVENTS, "copiesPerOtherType": TWO_FACT_OTHER_COPIES },
        "amounts": { "expected": EXPECTED.to_string(), "classes": ["below", "equal", "above"], "unsetExpected": true },
    })
}

pub fn check(rule_set: &RuleSet) -> Result<Check> {
    explore(rule_set).map(|(check, _)| check)
}

/// [`check`] with its figures.
pub fn explore(rule_set: &RuleSet) -> Result<(Check, Figures)> {
    explore_up_to(rule_set, MAX_COUNTEREXAMPLES, (MAX_REORDER_HISTORIES, MAX_REORDER_CONFIGURATIONS))
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
        broken: Vec::new(),
    };
    let compare = rule_set.order.is_some();
    if !compare {
        outcome.skipped =
            Some("no 'order' section: the rule set is proven for in-order delivery per workflow only".into());
        if rule_set.invariants.is_empty() {
            return Ok((outcome, Figures { millis: None, by_facts: [(0, 0); 3] }));
        }
    }
    if rule_set.cells.iter().flatten().any(|cell| cell.len() != 1) {
        outcome.skipped = Some("needs exactly one answer per (event type, status) pair first".into());
        return Ok((outcome, Figures { millis: None, by_facts: [(0, 0); 3] }));
    }
    let model = match Model::read(rule_set) {
        Ok(model) => model,
        Err(reason) => {
            let reason = format!("{reason}: the rule set's 'order' claim is not proven");
            outcome.unproven = Some(json!({ "reason": reason }));
            outcome.skipped = Some(reason);
            return Ok((outcome, Figures { millis: None, by_facts: [(0, 0); 3] }));
        }
    };
    let (history_limit, configuration_limit) = limits;
    // Starts: no workflow yet, then each initial status with no expected
    // amount, or with one and each class of amount the rules tell apart.
    let mut starts: Vec<(Map<String, Value>, Vec<Class>)> = vec![(Map::new(), vec![Class::Free])];
    for status in &model.starts {
        let mut workflow = Map::new();
        workflow.insert("status".into(), json!(status));
        workflow.insert("revision".into(), json!(1));
        starts.push((workflow.clone(), vec![Class::Free]));
        if !model.expected_fields.is_empty() {
            for field in &model.expected_fields {
                workflow.insert(field.clone(), json!(EXPECTED.to_string()));
            }
            starts.push((workflow, model.classes.clone()));
        }
    }
    // The histories of a start depend on its amount classes only: each set is built once, and
    // a definition with more (history, start) pairs than the budget is refused before any is explored.
    let mut shape_sets: Vec<(Vec<Class>, Vec<Shape>)> = Vec::new();
    let mut pairs = 0usize;
    for (_, amounts) in &starts {
        if !shape_sets.iter().any(|(a, _)| a == amounts) {
            let Some(shapes) = shapes(&model, amounts, history_limit) else {
                return Err(over_budget("maxReorderHistories", history_limit, "(history, start) pairs", &model));
            };
            shape_sets.push((amounts.clone(), shapes));
        }
        let shapes = &shape_sets.iter().find(|(a, _)| a == amounts).map_or(0, |(_, s)| s.len());
        pairs += shapes * if model.others_compare { amounts.len() } else { 1 };
        if pairs > history_limit {
            return Err(over_budget("maxReorderHistories", history_limit, "(history, start) pairs", &model));
        }
    }
    let mut explorer = Explorer::new(rule_set, &model);
    let mut by_facts = [(0, 0); 3];
    'starts: for (start, amounts) in &starts {
        if explorer.transitions.len() > TRANSITIONS_KEPT {
            explorer.transitions.clear();
        }
        // Other events whose amounts a rule compares with the expected one take each class in turn.
        let other_classes: &[Class] = if model.others_compare { amounts } else { &[Class::Free] };
        let shapes = shape_sets.iter().find(|(a, _)| a == amounts).map(|(_, s)| s.as_slice()).unwrap_or_default();
        let histories = shapes
            .iter()
            .flat_map(|(plans, others)| other_classes.iter().map(move |c| (plans.as_slice(), others.as_slice(), *c)));
        for (plans, others, other_class) in histories {
            let before = (outcome.histories, outcome.configurations);
            outcome.histories += 1;
            if outcome.histories > history_limit {
                return Err(over_budget("maxReorderHistories", history_limit, "(history, start) pairs", &model));
            }
            let mut history = build(&model, (plans, others, other_class), start.clone());
            if history.kinds.len() > MAX_REORDER_KINDS || history.races.len() > MAX_REORDER_KINDS {
                return Err(over_budget(
                    "maxReorderKinds",
                    MAX_REORDER_KINDS,
                    "kinds of events (and 32 racing pairs) in one history",
                    &model,
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
                marks: 0,
            };
            let origin = State { marks: explorer.status_mark(origin.workflow), ..origin };
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
                    compare,
                    broke: None,
                };
                search.explore(origin.clone())?;
                let broke = search.broke.is_some();
                let mismatch = search.mismatch.take();
                let references = std::mem::take(&mut search.references);
                if broke && outcome.broken.is_empty() {
                    if let Some((path, end)) = explorer.shortest_broken(&history, &origin) {
                        outcome.broken.push(broken_example(&explorer, &history, &path, &end));
                    }
                }
                match mismatch {
                    None | Some(Failure::Broke) => {}
                    Some(Failure::Twice { end, path, id }) => {
                        outcome.counterexamples.push(twice_example(&explorer, &history, &path, &end, &id));
                    }
                    Some(Failure::Differs { reference, end, path }) => {
                        let (_, expected_end, expected, in_order) = &references[reference];
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
            if outcome.counterexamples.len() + outcome.broken.len() >= most {
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

/// What a counterexample starts from: `start` (a status), `history`, and
/// the start workflow's other data and the facts' amount classes when there are any.
fn history_json(model: &Model, history: &History) -> Map<String, Value> {
    let mut events = Vec::new();
    for t in 0..history.kinds.len() {
        for _ in 0..history.kinds[t].copies {
            events.push(kind_name(model, history, t));
        }
    }
    let mut workflow = history.start.clone();
    workflow.remove("revision");
    let status = workflow.remove("status").and_then(|s| s.as_str().map(str::to_string));
    let mut amounts = Map::new();
    for (f, class) in history.classes.iter().enumerate() {
        amounts.insert(FACT_KEYS[f].into(), json!(class.name()));
    }
    let mut start = Map::new();
    start.insert("start".into(), json!(status.as_deref().unwrap_or(crate::ruleset::NONE)));
    start.insert("history".into(), json!(events));
    if !workflow.is_empty() {
        start.insert("workflow".into(), Value::Object(workflow));
    }
    if !amounts.is_empty() {
        start.insert("amounts".into(), Value::Object(amounts));
    }
    start
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
    let mut example = history_json(model, history);
    example.insert("races".into(), json!(races));
    example.insert("expected".into(), json!({ "inOrder": expected.2, "deliveries": steps_json(explorer, history, expected.0), "end": end_json(explorer, history, expected.1) }));
    example.insert(
        "actual".into(),
        json!({ "deliveries": steps_json(explorer, history, actual.0), "end": end_json(explorer, history, actual.1) }),
    );
    example.insert("divergesAt".into(), json!(diverges_at));
    Value::Object(example)
}

/// An order whose last delivery breaks an invariant: which one, and what it says.
fn broken_example(explorer: &Explorer, history: &History, steps: &[Step], end: &State) -> Value {
    let rule_set = explorer.rule_set;
    let invariant = steps.last().and_then(|s| s.broke).map(|i| &rule_set.invariants[i]);
    let mut example = history_json(explorer.model, history);
    example.insert("invariant".into(), json!(invariant.map(|i| json!({ "name": i.name, "says": i.says(rule_set) }))));
    example.insert(
        "actual".into(),
        json!({ "deliveries": steps_json(explorer, history, steps), "end": end_json(explorer, history, end) }),
    );
    example.insert("divergesAt".into(), json!(steps.len().saturating_sub(1)));
    Value::Object(example)
}

/// An order that emits one operation id twice: the order up to the second emission.
fn twice_example(explorer: &Explorer, history: &History, steps: &[Step], end: &State, id: &str) -> Value {
    let mut example = history_json(explorer.model, history);
    example.insert("emittedTwice".into(), json!(id));
    example.insert(
        "actual".into(),
        json!({ "deliveries": steps_json(explorer, history, steps), "end": end_json(explorer, history, end) }),
    );
    example.insert("divergesAt".into(), json!(steps.len().saturating_sub(1)));
    Value::Object(example)
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
        explored(name, &load_unverified(definition).unwrap())
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
        let rule_set = load_unverified(&parse(BUILTIN_DEPOSIT_SWAP)).unwrap();
        let bound = super::bound(&rule_set);
        assert_eq!(bound["oneFact"]["observations"], 4);
        assert_eq!(bound["oneFact"]["repeats"], true);
        let says = bound["says"].as_str().unwrap();
        assert!(says.contains("one fact with up to 4 observations") && says.contains("two facts"), "{says}");
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
            let report = crate::proof::verify_definition(&definition).unwrap().to_json();
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
            "{name}: {} histories, {} configurations, {:?} ms, {} counterexamples, by facts {:?}",
            check.histories,
            check.configurations,
            figures.millis,
            check.counterexamples.len(),
            figures.by_facts
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
