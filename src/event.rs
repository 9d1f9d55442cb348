//! Validation of an incoming event against a rule set's event types.

use crate::error::{truncate, Error, Result};
use crate::field::FieldKind;
use crate::input::{Input, Source};
use crate::ruleset::RuleSet;

/// An event that passed validation. `values[i]` belongs to the event type's `fields[i]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub event_id: String,
    pub workflow_id: String,
    pub event_type: usize,
    pub values: Vec<String>,
}

impl Event {
    pub fn type_name<'a>(&self, rule_set: &'a RuleSet) -> &'a str {
        &rule_set.events[self.event_type].name
    }

    /// The event's value of a rule-set field (by index into `RuleSet::fields`).
    pub fn value_of(&self, rule_set: &RuleSet, field: usize) -> Option<&str> {
        let position = rule_set.events[self.event_type].fields.iter().position(|f| *f == field)?;
        self.values.get(position).map(String::as_str)
    }
}

/// Checks `event` field by field; the first problem is reported with its field name.
pub fn validate(rule_set: &RuleSet, event: &dyn Source) -> Result<Event> {
    let event_id = FieldKind::Text
        .check(event.field("eventId"))
        .map_err(|reason| invalid("eventId", reason, None))?;
    let type_name = match event.field("type") {
        Input::Text(name) => name,
        other => {
            let reason = FieldKind::Text.check(other).err().unwrap_or_else(|| "must be a string".into());
            return Err(invalid("type", reason, Some(&event_id)));
        }
    };
    let event_type = rule_set.event_index(&type_name).ok_or_else(|| {
        let known: Vec<&str> = rule_set.events.iter().map(|e| e.name.as_str()).collect();
        invalid(
            "type",
            format!("{:?} is not an event type of rule set {} (known: {})", truncate(&type_name), rule_set.id, known.join(", ")),
            Some(&event_id),
        )
    })?;
    let workflow_id = FieldKind::Text
        .check(event.field("workflowId"))
        .map_err(|reason| invalid("workflowId", reason, Some(&event_id)))?;
    let declared = &rule_set.events[event_type].fields;
    let mut values = Vec::with_capacity(declared.len());
    for &f in declared {
        let field = &rule_set.fields[f];
        let value = field.kind.check(event.field(&field.name)).map_err(|reason| invalid(&field.name, reason, Some(&event_id)))?;
        values.push(value);
    }
    Ok(Event { event_id, workflow_id, event_type, values })
}

fn invalid(field: &str, reason: String, event_id: Option<&str>) -> Error {
    Error::InvalidEvent { field: field.to_string(), reason, event_id: event_id.map(str::to_string) }
}

impl Event {
    /// The validated event as a plain JSON object: its own members and the
    /// fields its type declares, nothing else.
    pub fn to_json(&self, rule_set: &RuleSet) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        map.insert("eventId".into(), self.event_id.clone().into());
        map.insert("workflowId".into(), self.workflow_id.clone().into());
        map.insert("type".into(), self.type_name(rule_set).into());
        for (position, field) in rule_set.events[self.event_type].fields.iter().enumerate() {
            map.insert(rule_set.fields[*field].name.clone(), self.values[position].clone().into());
        }
        serde_json::Value::Object(map)
    }
}

/// Validates `event` and, when `expected_type` is given, that it is of that type.
pub fn validate_as(rule_set: &RuleSet, event: &dyn Source, expected_type: Option<&str>) -> Result<Event> {
    let valid = validate(rule_set, event)?;
    match expected_type {
        Some(expected) if expected != valid.type_name(rule_set) => Err(invalid(
            "type",
            format!("must be {expected:?}, not {:?}", valid.type_name(rule_set)),
            Some(&valid.event_id),
        )),
        _ => Ok(valid),
    }
}
