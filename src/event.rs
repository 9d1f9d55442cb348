//! Validation of an incoming event against a rule set's event types.

use serde_json::{Map, Value};

use crate::error::{truncate, Error, Result};
use crate::field::{FieldKind, FieldValue};
use crate::input::Input;
use crate::packed::{self, Item, Layout, Packer, Spans};
use crate::ruleset::RuleSet;

/// An event that passed validation, borrowed from its packed item.
#[derive(Clone, Copy)]
pub struct Valid<'a> {
    pub event_id: &'a str,
    pub workflow_id: &'a str,
    pub event_type: usize,
    item: Item<'a>,
    layout: Layout,
}

impl<'a> Valid<'a> {
    pub fn type_name<'r>(&self, rule_set: &'r RuleSet) -> &'r str {
        &rule_set.events[self.event_type].name
    }

    /// The event's value of a rule-set field: `""` when its type does not
    /// declare it. A count is read from the number the host laid out.
    pub fn value_of(&self, rule_set: &RuleSet, field: usize) -> FieldValue<'a> {
        if rule_set.events[self.event_type].fields.contains(&field) {
            match self.item.read(self.layout.event_field(field)) {
                Input::Text(text) => FieldValue::Text(text),
                // Checked as a count (a safe integer) when the event was validated.
                Input::Number(n) if rule_set.fields[field].kind == FieldKind::Count => FieldValue::Count(n as u64),
                _ => FieldValue::Text(""),
            }
        } else {
            FieldValue::Text("")
        }
    }

    /// An owned copy, for callers that keep the event past its packed input.
    pub fn to_event(&self, rule_set: &RuleSet) -> Event {
        Event {
            event_id: self.event_id.to_string(),
            workflow_id: self.workflow_id.to_string(),
            event_type: self.event_type,
            values: rule_set.events[self.event_type]
                .fields
                .iter()
                .map(|f| self.value_of(rule_set, *f).display())
                .collect(),
        }
    }
}

/// An event that passed validation. `values[i]` belongs to the event type's
/// `fields[i]`; a count is held as its decimal digits.
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

    /// The value of a rule-set field with its kind: a count as a number.
    pub fn field_value(&self, rule_set: &RuleSet, field: usize) -> FieldValue<'_> {
        let text = self.value_of(rule_set, field).unwrap_or_default();
        match rule_set.fields[field].kind {
            FieldKind::Count => FieldValue::Count(text.parse().unwrap_or(0)),
            _ => FieldValue::Text(text),
        }
    }

    /// The validated event as a plain JSON object: its own members and the
    /// fields its type declares, nothing else.
    pub fn to_json(&self, rule_set: &RuleSet) -> Value {
        let mut map = Map::new();
        map.insert("eventId".into(), self.event_id.clone().into());
        map.insert("workflowId".into(), self.workflow_id.clone().into());
        map.insert("type".into(), self.type_name(rule_set).into());
        for field in &rule_set.events[self.event_type].fields {
            map.insert(rule_set.fields[*field].name.clone(), self.field_value(rule_set, *field).to_json());
        }
        Value::Object(map)
    }
}

/// The members of a normalized copy of an event of type `event_type`, in the
/// order `Event::to_json` writes them (a JSON object's, sorted by name), each
/// with the slot its value is laid out in (`-1`: the type's name).
pub fn normalized_members(rule_set: &RuleSet, event_type: usize, layout: Layout) -> Vec<(String, i64)> {
    let mut members = vec![
        ("eventId".to_string(), layout.event(packed::EVENT_ID) as i64),
        ("workflowId".to_string(), layout.event(packed::EVENT_WORKFLOW_ID) as i64),
        ("type".to_string(), -1),
    ];
    for &f in &rule_set.events[event_type].fields {
        members.push((rule_set.fields[f].name.clone(), layout.event_field(f) as i64));
    }
    crate::sort::sort_by(&mut members, &mut |a, b| a.0 < b.0);
    members
}

/// What the host was handed as the event must be an object.
pub fn check_arg(item: &Item) -> Result<()> {
    let what = match item.arg(0) {
        packed::ARG_OBJECT => return Ok(()),
        packed::ARG_MISSING => "missing",
        packed::ARG_NULL => "null",
        // The JSON text of an event, or its bytes, is a common slip at a queue
        // boundary: say what was passed and what to do, not "eventId is required".
        packed::ARG_STRING => "a string: parse it first",
        packed::ARG_BINARY => "a Buffer: decode and parse it first",
        other => packed::KINDS.get((other - packed::ARG_OTHER) as usize).copied().unwrap_or("unknown"),
    };
    Err(Error::InvalidEvent { field: "event".into(), reason: format!("must be an object, not {what}"), event_id: None })
}

/// Checks an item's event field by field (after [`check_arg`]); the first
/// problem is reported with its field name.
pub fn check<'a>(rule_set: &RuleSet, item: &Item<'a>, layout: Layout) -> Result<Valid<'a>> {
    let event_id = FieldKind::Text
        .check(item.read(layout.event(packed::EVENT_ID)))
        .map_err(|reason| invalid("eventId", reason, None))?;
    let type_slot = layout.event(packed::EVENT_TYPE);
    let event_type = match (item.known(type_slot), item.read(type_slot)) {
        (Some(i), _) if i < rule_set.events.len() => i,
        (_, Input::Text(name)) => rule_set.event_index(name).ok_or_else(|| {
            let known: Vec<&str> = rule_set.events.iter().map(|e| e.name.as_str()).collect();
            invalid(
                "type",
                format!(
                    "{:?} is not an event type of rule set {} (known: {})",
                    truncate(name),
                    rule_set.id,
                    known.join(", ")
                ),
                Some(event_id),
            )
        })?,
        (_, other) => {
            let reason = FieldKind::Text.check(other).err().unwrap_or_else(|| "must be a string".into());
            return Err(invalid("type", reason, Some(event_id)));
        }
    };
    let workflow_id = FieldKind::Text
        .check(item.read(layout.event(packed::EVENT_WORKFLOW_ID)))
        .map_err(|reason| invalid("workflowId", reason, Some(event_id)))?;
    for &f in &rule_set.events[event_type].fields {
        let field = &rule_set.fields[f];
        field
            .kind
            .check_value(item.read(layout.event_field(f)))
            .map_err(|reason| invalid(&field.name, reason, Some(event_id)))?;
    }
    Ok(Valid { event_id, workflow_id, event_type, item: *item, layout })
}

/// `type` must be `expected` (normalizeEvent's `type` option).
pub fn expect_type(rule_set: &RuleSet, valid: &Valid, expected: &str) -> Result<()> {
    let actual = valid.type_name(rule_set);
    if expected != actual {
        return Err(invalid("type", format!("must be {expected:?}, not {actual:?}"), Some(valid.event_id)));
    }
    Ok(())
}

pub(crate) fn invalid(field: &str, reason: String, event_id: Option<&str>) -> Error {
    Error::InvalidEvent { field: field.to_string(), reason, event_id: event_id.map(str::to_string) }
}

/// Validates a JSON event (native callers and tests), laid out as a host
/// would lay out an object; when `expected_type` is given, also that it is of
/// that type.
pub fn validate_as(rule_set: &RuleSet, event: &Map<String, Value>, expected_type: Option<&str>) -> Result<Event> {
    let mut packer = Packer::default();
    packer.item(rule_set, event, None, None);
    let layout = Layout::new(rule_set);
    let packed = packer.packed();
    let mut spans = Spans::new();
    packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut spans);
    let item = Item::of(&packed, &spans, layout.entries(), 0);
    check_arg(&item)?;
    let valid = check(rule_set, &item, layout)?;
    if let Some(expected) = expected_type {
        expect_type(rule_set, &valid, expected)?;
    }
    Ok(valid.to_event(rule_set))
}

pub fn validate(rule_set: &RuleSet, event: &Map<String, Value>) -> Result<Event> {
    validate_as(rule_set, event, None)
}
