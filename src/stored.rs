//! The records a host hands the decider, as they were stored: the inbox
//! receipt and the workflow (its status, revision, recorded fields and facts
//! map), read from the packed input and checked. What cannot be read is
//! INVALID_RECORD naming the record and its member, or INVALID_ARGUMENT for
//! what is not a record at all.

use serde_json::{Map, Value};

use crate::error::{truncate, Error, Result};
use crate::event::Valid;
use crate::field::{FieldKind, FieldValue};
use crate::fingerprint::PREFIX;
use crate::input::Input;
use crate::jcs::MAX_SAFE_INTEGER;
use crate::outcome::{Original, Outcome};
use crate::packed::{self, Item, Layout, MAX_FACTS, MAX_FACTS_BYTES, MAX_RESULT_BYTES};
use crate::ruleset::RuleSet;

pub(crate) fn record_error(record: &'static str, field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidRecord { record, field: field.to_string(), reason: reason.into() }
}

/// A stored record argument: `Ok(false)` for none, an argument error for
/// what is neither an object nor null.
pub(crate) fn record_arg(item: &Item, which: u32, name: &str) -> Result<bool> {
    let kind = match item.arg(which) {
        packed::ARG_OBJECT | packed::ARG_BINARY => return Ok(true),
        packed::ARG_MISSING | packed::ARG_NULL => return Ok(false),
        packed::ARG_STRING => "unknown",
        other => packed::KINDS.get((other - packed::ARG_OTHER) as usize).copied().unwrap_or("unknown"),
    };
    Err(Error::InvalidArgument { reason: format!("{name} must be an object or null, not {kind}") })
}

/// How an error names a field of a fact's entry: `deposits["btc:tx:0"].sequence`.
pub(crate) fn entry_path(rule_set: &RuleSet, key: &str, member: &str) -> String {
    let name = rule_set.facts().map_or("facts", |f| f.name.as_str());
    let key = serde_json::to_string(&truncate(key)).unwrap_or_default();
    if member.is_empty() {
        format!("{name}[{key}]")
    } else {
        format!("{name}[{key}].{member}")
    }
}

/// The workflow's facts map, checked: an object of at most [`MAX_FACTS`]
/// entries and [`MAX_FACTS_BYTES`] of JSON text, each entry `{event, <record
/// fields>, operations}` as this version writes it (a record field left out
/// or null is unrecorded); absent or null is no map. Anything else is
/// INVALID_RECORD naming the entry and its member.
/// With the map, the length of the text it was read from.
pub(crate) fn read_facts(rule_set: &RuleSet, item: &Item, layout: Layout) -> Result<(Map<String, Value>, usize)> {
    let Some(facts) = rule_set.facts() else { return Ok((Map::new(), 0)) };
    let name = facts.name.as_str();
    let text = match item.read(layout.workflow_facts()) {
        Input::Absent | Input::Null => return Ok((Map::new(), 0)),
        Input::Text(text) if text.len() <= MAX_FACTS_BYTES => text,
        Input::Text(_) | Input::TooLong => {
            return Err(record_error("workflow", name, format!("is longer than {MAX_FACTS_BYTES} bytes of JSON")))
        }
        other => return Err(record_error("workflow", name, format!("must be an object, not {}", other.kind()))),
    };
    Ok((facts_of_text(rule_set, text)?, text.len()))
}

/// A facts map's JSON text, checked as [`read_facts`] checks what it reads
/// (a host's `putWorkflow` checks what it is handed with it). Errors are
/// INVALID_RECORD naming the entry and its member.
pub(crate) fn facts_of_text(rule_set: &RuleSet, text: &str) -> Result<Map<String, Value>> {
    let Some(facts) = rule_set.facts() else { return Ok(Map::new()) };
    let name = facts.name.as_str();
    if text.len() > MAX_FACTS_BYTES {
        return Err(record_error("workflow", name, format!("is longer than {MAX_FACTS_BYTES} bytes of JSON")));
    }
    let map = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        _ => return Err(record_error("workflow", name, "must be a JSON object of fact entries")),
    };
    if map.len() > MAX_FACTS {
        return Err(record_error("workflow", name, format!("holds {} entries, more than {MAX_FACTS}", map.len())));
    }
    for (key, entry) in &map {
        let bad = |member: &str, reason: String| record_error("workflow", &entry_path(rule_set, key, member), reason);
        let Value::Object(entry) = entry else { return Err(bad("", "must be an object".into())) };
        for (member, value) in entry {
            match member.as_str() {
                "event" => {
                    let known =
                        value.as_str().and_then(|t| rule_set.event_index(t)).is_some_and(|e| facts.events.contains(&e));
                    if !known {
                        return Err(bad("event", "must name a fact event type of the rule set".into()));
                    }
                }
                "operations" => {
                    let names: Option<Vec<&str>> =
                        value.as_array().and_then(|ops| ops.iter().map(Value::as_str).collect());
                    match names {
                        Some(names) if names.windows(2).all(|w| w[0] < w[1]) => {}
                        _ => {
                            return Err(bad("operations", "must be a sorted array of distinct operation names".into()))
                        }
                    }
                }
                other => match facts.record.iter().find(|f| rule_set.fields[**f].name == other) {
                    Some(&f) => {
                        if let Err(reason) = rule_set.fields[f].kind.check_value(crate::input::from_json(value)) {
                            return Err(bad(other, reason));
                        }
                    }
                    None => {
                        return Err(bad(
                            &truncate(other),
                            "is not a member of a fact entry (event, the recorded fields, operations)".into(),
                        ))
                    }
                },
            }
        }
        if !entry.contains_key("event") {
            return Err(bad("event", "is required".into()));
        }
    }
    Ok(map)
}

/// What the stored workflow recorded for rule-set field `field`: `None` when
/// absent or null, INVALID_RECORD naming the field when it is not of its kind.
pub(crate) fn recorded_value<'a>(
    rule_set: &RuleSet,
    item: &Item<'a>,
    layout: Layout,
    field: usize,
) -> Result<Option<FieldValue<'a>>> {
    let spec = &rule_set.fields[field];
    match item.read(layout.workflow_field(field)) {
        Input::Absent | Input::Null => Ok(None),
        other => spec.kind.check_value(other).map(Some).map_err(|reason| record_error("workflow", &spec.name, reason)),
    }
}

/// The stored workflow's status index and revision.
pub(crate) fn read_workflow(rule_set: &RuleSet, item: &Item, layout: Layout, event: &Valid) -> Result<(usize, u64)> {
    let id_slot = layout.workflow(packed::WORKFLOW_ID);
    // The very string of the event's workflowId (SAME) was checked with it.
    if !item.same(id_slot, layout.event(packed::EVENT_WORKFLOW_ID)) {
        let id = FieldKind::Text.check(item.read(id_slot)).map_err(|reason| record_error("workflow", "id", reason))?;
        if id != event.workflow_id {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "workflow.id {:?} is not the event's workflowId {:?}",
                    truncate(id),
                    truncate(event.workflow_id)
                ),
            });
        }
    }
    let status_slot = layout.workflow(packed::WORKFLOW_STATUS);
    let status = match item.known(status_slot) {
        Some(i) if i < rule_set.statuses.len() => i,
        _ => {
            let name = FieldKind::Text
                .check(item.read(status_slot))
                .map_err(|reason| record_error("workflow", "status", reason))?;
            rule_set.status_index(name).ok_or_else(|| {
                record_error(
                    "workflow",
                    "status",
                    format!("{:?} is not a status of rule set {}", truncate(name), rule_set.id),
                )
            })?
        }
    };
    let revision = match item.read(layout.workflow(packed::WORKFLOW_REVISION)) {
        Input::Number(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&n) => n as u64,
        other => {
            return Err(record_error(
                "workflow",
                "revision",
                format!("must be a whole number from 0 to 2^53 - 1, not {}", other.kind()),
            ))
        }
    };
    Ok((status, revision))
}

/// A stored fingerprint must have the shape this version writes: `fp1:` and 64
/// lowercase hex digits. Anything else is a corrupt record, not a conflict.
pub(crate) fn stored_fingerprint(input: Input<'_>) -> Result<&str> {
    let reason = match input {
        Input::Text(fp) => {
            let digest = fp.strip_prefix(PREFIX).unwrap_or_default();
            if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Ok(fp);
            }
            format!("must be {PREFIX} followed by 64 lowercase hex digits")
        }
        other => FieldKind::Text.check(other).err().unwrap_or_else(|| "must be a string".into()),
    };
    Err(record_error("receipt", "fingerprint", reason))
}

pub(crate) fn whole(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER)
}

/// The first delivery's result from a stored receipt: `None` when the receipt
/// has no `result` (written before receipts kept one); INVALID_RECORD naming
/// the field when what is there is not what this version writes. The result
/// is JSON text (a host lays a structured value out as its JSON).
pub(crate) fn stored_original(item: &Item, layout: Layout) -> Result<Option<Original>> {
    let text = match item.read(layout.receipt(packed::RECEIPT_RESULT)) {
        Input::Absent | Input::Null => return Ok(None),
        Input::Text(text) if text.len() <= MAX_RESULT_BYTES => text,
        Input::Text(_) | Input::TooLong => {
            return Err(record_error("receipt", "result", format!("is longer than {MAX_RESULT_BYTES} bytes")))
        }
        other => return Err(record_error("receipt", "result", format!("must be an object, not {}", other.kind()))),
    };
    let bad = |reason: &str| record_error("receipt", "result", reason.to_string());
    let result = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        _ => return Err(bad("must be a JSON object")),
    };
    let operation_ids = match result.get("operationIds") {
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_str().filter(|id| !id.is_empty()).map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("operationIds must hold non-empty strings"))?,
        _ => return Err(bad("operationIds must be an array")),
    };
    let status = match result.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(status)) => Some(status.clone()),
        Some(_) => return Err(bad("status must be a string or null")),
    };
    let revision = match result.get("revision") {
        None | Some(Value::Null) => None,
        Some(value) => {
            Some(whole(value).ok_or_else(|| bad("revision must be a whole number from 0 to 2^53 - 1 or null"))?)
        }
    };
    let outcome = match item.read(layout.receipt(packed::RECEIPT_OUTCOME)) {
        Input::Text("applied") => Outcome::Applied,
        Input::Text("already-applied") => Outcome::AlreadyApplied,
        Input::Text("stale") => Outcome::Stale,
        other => {
            return Err(record_error(
                "receipt",
                "outcome",
                format!("must be applied, already-applied or stale, not {}", describe(&other)),
            ))
        }
    };
    let decided_at = match item.read(layout.receipt(packed::RECEIPT_RECORDED_AT)) {
        Input::Absent | Input::Null => None,
        Input::Number(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&n) => Some(n as u64),
        other => {
            return Err(record_error(
                "receipt",
                "recordedAt",
                format!("must be a whole number from 0 to 2^53 - 1, not {}", other.kind()),
            ))
        }
    };
    Ok(Some(Original { outcome, operation_ids, status, revision, decided_at }))
}

pub(crate) fn describe(input: &Input) -> String {
    match input {
        Input::Text(text) => format!("{:?}", truncate(text)),
        other => other.kind().to_string(),
    }
}
