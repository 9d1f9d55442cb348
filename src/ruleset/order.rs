//! What producers promise about the order of a workflow's events: the `order`
//! section of a rule set. A rule set that has one claims to be reorder-safe,
//! and the verifier proves it (see `reorder`).
//!
//! ```json
//! "order": {
//!   "follows": [
//!     { "event": "DEPOSIT_CONFIRMED", "after": "DEPOSIT_DETECTED", "same": ["depositRef"] },
//!     { "event": "EXCHANGE_COMPLETED", "after": "START_EXCHANGE" }
//!   ],
//!   "races": [
//!     { "between": ["DEADLINE_PASSED", ["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED"]] }
//!   ]
//! }
//! ```
//!
//! - `follows`: a producer emits `event` only after `after`: an event type of
//!   the same workflow and fact (`same` names the fields that identify the
//!   fact), or an operation type this rule set emits, whose handler produces
//!   `event` (so it cannot exist before the operation was committed). Delivery
//!   may still reorder an event before the event it follows: that is what the
//!   rules must absorb or defer.
//! - `races`: pairs of event types whose order *is* the meaning (the first the
//!   workflow sees wins). Delivery orders are compared only with orders in
//!   which the workflow saw the racing types in the same order.

use serde_json::{Map, Value};

use super::load::{invalid, object};
use super::{Answer, RuleSet};
use crate::error::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// An event type (index into `RuleSet::events`).
    Event(usize),
    /// An operation type the rule set emits.
    Operation(String),
}

#[derive(Debug, Clone)]
pub struct Follows {
    pub event: usize,
    pub after: After,
    /// Field indices that identify the shared fact (documentation for the
    /// reader; every field both events carry). Loaded and checked; no
    /// property reads it yet.
    #[allow(dead_code)]
    pub same: Vec<usize>,
}

#[derive(Debug, Clone)]
pub struct Race {
    /// Event type indices, `a <= b`.
    pub a: usize,
    pub b: usize,
    pub description: Option<String>,
    /// `"across": true`: the race relates events of two different facts (a
    /// rule set with `facts`); otherwise events of one fact only.
    pub across: bool,
}

/// Versioned observations: the producer numbers the events it emits about
/// the workflow's fact 1, 2, 3 … in emission order (in `field`, a count); a
/// re-publication carries the same number.
#[derive(Debug, Clone)]
pub struct Sequence {
    pub field: usize,
    /// Event type indices, ascending: every type that carries the field.
    pub events: Vec<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct Order {
    pub follows: Vec<Follows>,
    pub races: Vec<Race>,
    /// Every `(first side, second side)` pair of event types as declared: two
    /// numbered observations of one chain race only when the newer one is of
    /// the first side's type (see `reorder`).
    pub directed: Vec<(usize, usize)>,
    pub sequence: Option<Sequence>,
}

fn list<'a>(map: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a [Value]> {
    match map.get(key) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(invalid(&format!("{path}.{key}"), "must be an array")),
    }
}

fn text<'a>(value: &'a Value, path: &str) -> Result<&'a str> {
    value.as_str().ok_or_else(|| invalid(path, "must be a string"))
}

fn event_index(rule_set: &RuleSet, value: &Value, path: &str) -> Result<usize> {
    let name = text(value, path)?;
    rule_set.event_index(name).ok_or_else(|| invalid(path, format!("{name:?} is not a declared event type")))
}

fn emits_operation(rule_set: &RuleSet, name: &str) -> bool {
    rule_set.rules.iter().any(|rule| match &rule.answer {
        Answer::Applied(t) => t.emit.iter().any(|e| e.operation_type == name),
        _ => false,
    })
}

/// Reads the `order` section; the rules must already be loaded, since
/// `after` may name an operation type the rules emit.
pub fn load(rule_set: &RuleSet, value: &Value) -> Result<Order> {
    const LIMIT: usize = 256;
    let map = object(value, "$.order", &["follows", "races", "sequence", "description"])?;
    if let Some(d) = map.get("description") {
        text(d, "$.order.description")?;
    }
    let mut order = Order::default();

    let follows = list(map, "follows", "$.order")?;
    if follows.len() > LIMIT {
        return Err(invalid("$.order.follows", format!("at most {LIMIT} entries")));
    }
    for (i, entry) in follows.iter().enumerate() {
        let path = format!("$.order.follows[{i}]");
        let item = object(entry, &path, &["event", "after", "same", "description"])?;
        let event = event_index(
            rule_set,
            item.get("event").ok_or_else(|| invalid(&format!("{path}.event"), "is required"))?,
            &format!("{path}.event"),
        )?;
        let after_name = text(
            item.get("after").ok_or_else(|| invalid(&format!("{path}.after"), "is required"))?,
            &format!("{path}.after"),
        )?;
        let after = match (rule_set.event_index(after_name), emits_operation(rule_set, after_name)) {
            (Some(_), true) => {
                return Err(invalid(
                    &format!("{path}.after"),
                    format!("{after_name:?} names both an event type and an operation type; rename one"),
                ))
            }
            (Some(index), false) if index == event => {
                return Err(invalid(&format!("{path}.after"), "an event type cannot follow itself"))
            }
            (Some(index), false) => After::Event(index),
            (None, true) => After::Operation(after_name.to_string()),
            (None, false) => {
                return Err(invalid(
                    &format!("{path}.after"),
                    format!("{after_name:?} is neither a declared event type nor an operation type a rule emits"),
                ))
            }
        };
        let mut same = Vec::new();
        for (j, field) in list(item, "same", &path)?.iter().enumerate() {
            let field_path = format!("{path}.same[{j}]");
            let name = text(field, &field_path)?;
            let index = rule_set
                .fields
                .iter()
                .position(|f| f.name == name)
                .ok_or_else(|| invalid(&field_path, format!("{name:?} is not a declared field")))?;
            let carried_by = |e: usize| rule_set.events[e].fields.contains(&index);
            let both = carried_by(event) && matches!(after, After::Event(a) if carried_by(a));
            if !both {
                return Err(invalid(&field_path, format!("{name:?} is not carried by both event types")));
            }
            if same.contains(&index) {
                return Err(invalid(&field_path, format!("{name:?} is listed twice")));
            }
            same.push(index);
        }
        if let Some(d) = item.get("description") {
            text(d, &format!("{path}.description"))?;
        }
        order.follows.push(Follows { event, after, same });
    }

    // Before the races: two observations of one numbered chain may race though their type is one.
    if let Some(sequence) = map.get("sequence") {
        order.sequence = Some(load_sequence(rule_set, sequence)?);
    }
    let sequenced_events: Vec<usize> = order.sequence.as_ref().map(|s| s.events.clone()).unwrap_or_default();
    let sequenced = |e: usize| sequenced_events.contains(&e);
    let races = list(map, "races", "$.order")?;
    if races.len() > LIMIT {
        return Err(invalid("$.order.races", format!("at most {LIMIT} entries")));
    }
    for (i, entry) in races.iter().enumerate() {
        let path = format!("$.order.races[{i}]");
        let item = object(entry, &path, &["between", "across", "description"])?;
        let across = match item.get("across") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid(&format!("{path}.across"), "must be true or false")),
        };
        let between = match item.get("between") {
            Some(Value::Array(sides)) if sides.len() == 2 => sides,
            _ => {
                return Err(invalid(
                    &format!("{path}.between"),
                    "must be two event types (each a name or a list of names)",
                ))
            }
        };
        let side = |k: usize| -> Result<Vec<usize>> {
            let side_path = format!("{path}.between[{k}]");
            match &between[k] {
                Value::Array(names) if !names.is_empty() && names.len() <= LIMIT => names
                    .iter()
                    .enumerate()
                    .map(|(j, n)| event_index(rule_set, n, &format!("{side_path}[{j}]")))
                    .collect(),
                Value::Array(_) => Err(invalid(&side_path, format!("must name 1 to {LIMIT} event types"))),
                other => Ok(vec![event_index(rule_set, other, &side_path)?]),
            }
        };
        let description = match item.get("description") {
            None => None,
            Some(d) => Some(text(d, &format!("{path}.description"))?.to_string()),
        };
        for a in side(0)? {
            for b in side(1)? {
                if across && !(rule_set.is_fact_event(a) && rule_set.is_fact_event(b)) {
                    return Err(invalid(
                        &format!("{path}.across"),
                        "relates the events of two facts: both sides must be fact events (facts.events) of a rule set with 'facts'",
                    ));
                }
                if a == b && !sequenced(a) && !across {
                    return Err(invalid(
                        &format!("{path}.between"),
                        "an event type does not race with itself (only a sequenced one does: a newer observation with an older one)",
                    ));
                }
                if !order.directed.contains(&(a, b)) {
                    order.directed.push((a, b));
                }
                let (a, b) = (a.min(b), a.max(b));
                if !order.races.iter().any(|r| r.a == a && r.b == b && r.across == across) {
                    if order.races.len() >= LIMIT {
                        return Err(invalid("$.order.races", format!("at most {LIMIT} racing pairs")));
                    }
                    order.races.push(Race { a, b, description: description.clone(), across });
                }
            }
        }
    }
    Ok(order)
}

fn load_sequence(rule_set: &RuleSet, value: &Value) -> Result<Sequence> {
    let path = "$.order.sequence";
    let map = object(value, path, &["field", "events", "description"])?;
    let name = text(
        map.get("field").ok_or_else(|| invalid(&format!("{path}.field"), "is required"))?,
        &format!("{path}.field"),
    )?;
    let field = rule_set
        .fields
        .iter()
        .position(|f| f.name == name)
        .ok_or_else(|| invalid(&format!("{path}.field"), format!("{name:?} is not a declared field")))?;
    if rule_set.fields[field].kind != crate::field::FieldKind::Count {
        return Err(invalid(&format!("{path}.field"), format!("{name:?} must be a count field")));
    }
    let listed = list(map, "events", path)?;
    if listed.is_empty() || listed.len() > rule_set.events.len() {
        return Err(invalid(&format!("{path}.events"), "must name the event types that carry the sequence"));
    }
    let mut events = Vec::new();
    for (i, entry) in listed.iter().enumerate() {
        let entry_path = format!("{path}.events[{i}]");
        let e = event_index(rule_set, entry, &entry_path)?;
        if !rule_set.events[e].fields.contains(&field) {
            return Err(invalid(&entry_path, format!("{} does not carry {name:?}", rule_set.events[e].name)));
        }
        if events.contains(&e) {
            return Err(invalid(&entry_path, "is listed twice"));
        }
        events.push(e);
    }
    if let Some(missing) =
        (0..rule_set.events.len()).find(|e| rule_set.events[*e].fields.contains(&field) && !events.contains(e))
    {
        return Err(invalid(
            &format!("{path}.events"),
            format!("{} carries {name:?} and must be listed: one numbering per fact", rule_set.events[missing].name),
        ));
    }
    if let Some(d) = map.get("description") {
        text(d, &format!("{path}.description"))?;
    }
    crate::sort::sort_by(&mut events, &mut |a, b| a < b);
    Ok(Sequence { field, events })
}
