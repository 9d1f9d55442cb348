//! `invariants`: what must never happen to one workflow, stated by the rule
//! set's author and checked by the proof after every delivery of every
//! explored order (see `proof::search`). Loading resolves each invariant's
//! names to indices and refuses one that names nothing the rules do.
//!
//! ```json
//! "invariants": [
//!   { "name": "ship-or-refund", "never": { "both": ["SHIP_ORDER", "REFUND"] } },
//!   { "name": "no-ship-after-cancel", "never": { "emit": "SHIP_ORDER", "after": "ORDER_CANCELLED" } },
//!   { "name": "no-short-exchange", "never": { "emit": "START_EXCHANGE", "when": ["amountUnits", "<", "expectedUnits"] } },
//!   { "name": "dust-never-kept", "never": { "keep": "deposits", "when": ["amountUnits", "<", "expectedUnits"] } },
//!   { "name": "paid-stays-paid", "never": { "reach": "open", "after": "paid" } },
//!   { "name": "one-payment", "never": { "changes": "paymentRef" } },
//!   { "name": "one-exchange", "atMost": { "operation": "START_EXCHANGE", "count": 1 } }
//! ]
//! ```

use serde_json::{Map, Value};

use super::load::{invalid, object};
use super::{Answer, Comparison, RuleSet};
use crate::error::Result;
use crate::limits::MAX_INVARIANTS;

#[derive(Debug, Clone)]
pub struct Invariant {
    pub name: String,
    pub description: Option<String>,
    pub kind: Kind,
}

/// A status reached, or an event type applied, at some earlier delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Status(usize),
    Event(usize),
}

#[derive(Debug, Clone)]
pub enum Kind {
    /// Two operation types never both emitted for one workflow.
    Both(String, String),
    /// An operation type never emitted once the marker happened (in an earlier delivery, or the start status).
    EmitAfter { operation: String, after: Marker },
    /// An operation type never emitted by a delivery whose event compares so with the workflow it found.
    EmitWhen { operation: String, event_field: usize, op: Comparison, workflow_field: usize },
    /// A fact's entry never kept in the facts map after a delivery of one of its
    /// events that compares so with the workflow it found (what a sender can
    /// fill the bounded map with).
    KeepWhen { event_field: usize, op: Comparison, workflow_field: usize },
    /// A status (index into `statuses`) never entered once the marker happened.
    ReachAfter { status: usize, after: Marker },
    /// A field (index into `fields`), once recorded, never changes or goes (in a facts map: per fact).
    Changes(usize),
    /// At most `count` operations of a type per workflow (per fact with `per_fact`: a per-fact operation).
    AtMost { operation: String, count: u64, per_fact: bool },
}

impl Marker {
    pub fn name(self, rule_set: &RuleSet) -> &str {
        match self {
            Marker::Status(s) => &rule_set.statuses[s].name,
            Marker::Event(e) => &rule_set.events[e].name,
        }
    }
}

impl Invariant {
    /// What the invariant says, in one sentence (for the proof's report).
    pub fn says(&self, rule_set: &RuleSet) -> String {
        let after = |m: Marker| match m {
            Marker::Status(_) => format!("once the workflow was {:?}", m.name(rule_set)),
            Marker::Event(_) => format!("once {} was applied", m.name(rule_set)),
        };
        match &self.kind {
            Kind::Both(a, b) => format!("{a} and {b} are never both emitted for one workflow"),
            Kind::EmitAfter { operation, after: m } => format!("{operation} is never emitted {}", after(*m)),
            Kind::EmitWhen { operation, event_field, op, workflow_field } => format!(
                "{operation} is never emitted by an event whose {} {} the workflow's {}",
                rule_set.fields[*event_field].name,
                op.as_str(),
                rule_set.fields[*workflow_field].name
            ),
            Kind::KeepWhen { event_field, op, workflow_field } => format!(
                "{} never keeps the entry of a fact whose {} {} the workflow's {}",
                rule_set.facts().map_or("facts", |f| f.name.as_str()),
                rule_set.fields[*event_field].name,
                op.as_str(),
                rule_set.fields[*workflow_field].name
            ),
            Kind::ReachAfter { status, after: m } => {
                format!("{:?} is never entered {}", rule_set.statuses[*status].name, after(*m))
            }
            Kind::Changes(f) => format!("{} never changes once recorded", rule_set.fields[*f].name),
            Kind::AtMost { operation, count, per_fact: false } => {
                format!("at most {count} {operation} per workflow")
            }
            Kind::AtMost { operation, count, per_fact: true } => format!("at most {count} {operation} per fact"),
        }
    }

    /// The marker this invariant reads, if any.
    pub fn marker(&self) -> Option<Marker> {
        match &self.kind {
            Kind::EmitAfter { after, .. } | Kind::ReachAfter { after, .. } => Some(*after),
            _ => None,
        }
    }
}

fn text<'a>(map: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str> {
    map.get(key).and_then(Value::as_str).ok_or_else(|| invalid(&format!("{path}.{key}"), "must be a string"))
}

/// Event types whose rules emit operations of `operation` type.
fn emitters(rule_set: &RuleSet, operation: &str) -> Vec<usize> {
    (0..rule_set.events.len())
        .filter(|e| {
            rule_set.cells[*e].iter().flatten().flat_map(|r| rule_set.answers_of(*r)).any(|r| {
                match &rule_set.rules[r].answer {
                    Answer::Applied(t) => t.emit.iter().any(|x| x.operation_type == operation),
                    _ => false,
                }
            })
        })
        .collect()
}

fn operation<'a>(rule_set: &RuleSet, map: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str> {
    let name = text(map, key, path)?;
    if emitters(rule_set, name).is_empty() {
        return Err(invalid(
            &format!("{path}.{key}"),
            format!("{:?} is not an operation type any rule emits", crate::error::truncate(name)),
        ));
    }
    Ok(name)
}

fn marker(rule_set: &RuleSet, map: &Map<String, Value>, path: &str) -> Result<Marker> {
    let name = text(map, "after", path)?;
    match (rule_set.status_index(name), rule_set.event_index(name)) {
        (Some(s), None) => Ok(Marker::Status(s)),
        (None, Some(e)) => Ok(Marker::Event(e)),
        (Some(_), Some(_)) => {
            Err(invalid(&format!("{path}.after"), format!("{name:?} is both a status and an event type")))
        }
        (None, None) => Err(invalid(
            &format!("{path}.after"),
            format!("{:?} is not a declared status or event type", crate::error::truncate(name)),
        )),
    }
}

/// Loads `invariants` (after the rules: they name what the rules emit).
pub fn load(rule_set: &RuleSet, value: &Value) -> Result<Vec<Invariant>> {
    let items = value.as_array().ok_or_else(|| invalid("$.invariants", "must be an array"))?;
    if items.len() > MAX_INVARIANTS {
        return Err(invalid(
            "$.invariants",
            format!("limit maxInvariants: at most {MAX_INVARIANTS} invariants, got {}", items.len()),
        ));
    }
    let mut out: Vec<Invariant> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("$.invariants[{i}]");
        let map = object(item, &path, &["name", "description", "never", "atMost"])?;
        let name = super::load::name(map.get("name").unwrap_or(&Value::Null), &format!("{path}.name"), false)?;
        if out.iter().any(|x| x.name == name) {
            return Err(invalid(&format!("{path}.name"), format!("{name:?} is declared twice")));
        }
        let description = match map.get("description") {
            None => None,
            Some(v) => {
                Some(v.as_str().ok_or_else(|| invalid(&format!("{path}.description"), "must be a string"))?.to_string())
            }
        };
        let kind = match (map.get("never"), map.get("atMost")) {
            (Some(never), None) => never_kind(rule_set, never, &format!("{path}.never"))?,
            (None, Some(at_most)) => {
                let path = format!("{path}.atMost");
                let map = object(at_most, &path, &["operation", "count", "perFact"])?;
                let operation = operation(rule_set, map, "operation", &path)?.to_string();
                let count = map
                    .get("count")
                    .and_then(Value::as_u64)
                    .filter(|n| *n <= 3)
                    .ok_or_else(|| invalid(&format!("{path}.count"), "must be an integer from 0 to 3"))?;
                let per_fact = match map.get("perFact") {
                    None => false,
                    Some(v) => {
                        v.as_bool().ok_or_else(|| invalid(&format!("{path}.perFact"), "must be true or false"))?
                    }
                };
                if per_fact {
                    let all_per_fact = rule_set.rules.iter().all(|r| match &r.answer {
                        Answer::Applied(t) => {
                            t.emit.iter().filter(|x| x.operation_type == operation).all(|x| x.id_template.per_fact)
                        }
                        _ => true,
                    });
                    if !all_per_fact {
                        return Err(invalid(
                            &format!("{path}.perFact"),
                            format!("{operation} is not a per-fact operation (<name>:{{<key>}}:{{workflowId}}) everywhere it is emitted"),
                        ));
                    }
                }
                Kind::AtMost { operation, count, per_fact }
            }
            _ => return Err(invalid(&path, "must have exactly one of 'never' and 'atMost'")),
        };
        out.push(Invariant { name, description, kind });
    }
    Ok(out)
}

fn never_kind(rule_set: &RuleSet, value: &Value, path: &str) -> Result<Kind> {
    let map = value.as_object().ok_or_else(|| invalid(path, "must be an object"))?;
    if let Some(both) = map.get("both") {
        object(value, path, &["both"])?;
        let pair: Vec<&str> = both.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if pair.len() != 2 || both.as_array().map(Vec::len) != Some(2) || pair[0] == pair[1] {
            return Err(invalid(&format!("{path}.both"), "must be two different operation types"));
        }
        for (i, name) in pair.iter().enumerate() {
            if emitters(rule_set, name).is_empty() {
                return Err(invalid(
                    &format!("{path}.both[{i}]"),
                    format!("{:?} is not an operation type any rule emits", crate::error::truncate(name)),
                ));
            }
        }
        return Ok(Kind::Both(pair[0].to_string(), pair[1].to_string()));
    }
    if map.contains_key("emit") {
        let operation_name = operation(rule_set, map, "emit", path)?.to_string();
        if map.contains_key("when") {
            object(value, path, &["emit", "when"])?;
            // The event field must be carried by every event type that emits the operation.
            let emitting = emitters(rule_set, &operation_name);
            let carried: Vec<usize> = rule_set.events[emitting[0]]
                .fields
                .iter()
                .copied()
                .filter(|f| emitting.iter().all(|e| rule_set.events[*e].fields.contains(f)))
                .collect();
            let (event_field, op, workflow_field) =
                super::load::load_comparison(rule_set, &map["when"], &format!("{path}.when"), &carried)?;
            return Ok(Kind::EmitWhen { operation: operation_name, event_field, op, workflow_field });
        }
        object(value, path, &["emit", "after"])?;
        return Ok(Kind::EmitAfter { operation: operation_name, after: marker(rule_set, map, path)? });
    }
    if map.contains_key("keep") {
        object(value, path, &["keep", "when"])?;
        let name = text(map, "keep", path)?;
        let Some(facts) = rule_set.facts().filter(|f| f.name == name) else {
            return Err(invalid(
                &format!("{path}.keep"),
                format!("{:?} is not the rule set's facts map", crate::error::truncate(name)),
            ));
        };
        let when =
            map.get("when").ok_or_else(|| invalid(path, "'keep' needs 'when': [eventField, op, workflowField]"))?;
        // The event field must be carried by every fact event.
        let carried: Vec<usize> = rule_set.events[facts.events[0]]
            .fields
            .iter()
            .copied()
            .filter(|f| facts.events.iter().all(|e| rule_set.events[*e].fields.contains(f)))
            .collect();
        let (event_field, op, workflow_field) =
            super::load::load_comparison(rule_set, when, &format!("{path}.when"), &carried)?;
        return Ok(Kind::KeepWhen { event_field, op, workflow_field });
    }
    if map.contains_key("reach") {
        object(value, path, &["reach", "after"])?;
        let name = text(map, "reach", path)?;
        let status = rule_set.status_index(name).ok_or_else(|| {
            invalid(&format!("{path}.reach"), format!("{:?} is not a declared status", crate::error::truncate(name)))
        })?;
        let after = marker(rule_set, map, path)?;
        if after == Marker::Status(status) {
            return Err(invalid(
                &format!("{path}.after"),
                "names the status it guards: a status is entered before it is left",
            ));
        }
        return Ok(Kind::ReachAfter { status, after });
    }
    if map.contains_key("changes") {
        object(value, path, &["changes"])?;
        let name = text(map, "changes", path)?;
        let field = rule_set.fields.iter().position(|f| f.name == name).ok_or_else(|| {
            invalid(&format!("{path}.changes"), format!("{:?} is not a declared field", crate::error::truncate(name)))
        })?;
        return Ok(Kind::Changes(field));
    }
    Err(invalid(path, "must be {\"both\": [a, b]}, {\"emit\": type, \"after\": statusOrEvent}, {\"emit\": type, \"when\": [eventField, op, workflowField]}, {\"keep\": factsName, \"when\": [eventField, op, workflowField]}, {\"reach\": status, \"after\": statusOrEvent} or {\"changes\": field}"))
}
