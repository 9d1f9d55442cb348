//! The decision: from an event, the stored inbox receipt for its id and the
//! stored workflow, what happened and exactly what the host must write, in
//! one transaction, to record it.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{truncate, Error, Result};
use crate::event::{validate, Event};
use crate::field::FieldKind;
use crate::fingerprint::{fingerprint, PREFIX};
use crate::input::{Input, Source};
use crate::jcs::MAX_SAFE_INTEGER;
use crate::ruleset::{Answer, FailCode, RuleSet, Transition};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The event moved the workflow: write the receipt, the update and the operations.
    Applied,
    /// The workflow already reflects this fact (a new event id for it): write the receipt only.
    AlreadyApplied,
    /// A valid event that no longer changes anything (a timer that lost the race): receipt only.
    Stale,
    /// This event id was recorded before with the same meaning: write nothing.
    DuplicateDelivery,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSetRef {
    pub id: String,
    pub version: u64,
    pub hash: String,
}

/// The inbox row, keyed (uniquely) by event id.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub event_id: String,
    pub fingerprint: String,
    pub workflow_id: String,
    pub event_type: String,
    pub outcome: Outcome,
    pub rule_set: RuleSetRef,
    pub result: ReceiptResult,
}

/// What the first delivery produced beyond its outcome, kept with the receipt
/// so a duplicate can answer what the first one did: the operations it
/// scheduled and the workflow's status and revision after it (`None` unless
/// the outcome is applied).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptResult {
    pub operation_ids: Vec<String>,
    pub status: Option<String>,
    pub revision: Option<u64>,
}

/// A duplicate's answer: what the first delivery of its event id produced,
/// read back from the stored receipt. `decided_at` is the receipt's
/// `recordedAt` (integer ms), `None` when the host passed none.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Original {
    pub outcome: Outcome,
    pub operation_ids: Vec<String>,
    pub status: Option<String>,
    pub revision: Option<u64>,
    pub decided_at: Option<u64>,
}

/// The status and revision the workflow must still have for the write to apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expect {
    pub status: String,
    pub revision: u64,
}

/// A compare-and-set write of one workflow. `expect: None` means the workflow
/// must not exist yet (an insert). `set` holds `status`, `revision` and the
/// recorded fields that change; a field set to `null` is removed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowWrite {
    pub id: String,
    pub expect: Option<Expect>,
    pub set: Map<String, Value>,
}

/// An intention to act, committed with the state change. The id is
/// deterministic, so a second attempt to schedule it trips the unique key.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxOperation {
    pub id: String,
    #[serde(rename = "type")]
    pub operation_type: String,
    pub workflow_id: String,
    pub event_id: String,
    pub status: &'static str,
    pub payload: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteSet {
    pub receipt: Option<Receipt>,
    pub workflow: Option<WorkflowWrite>,
    pub outbox: Vec<OutboxOperation>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub outcome: Outcome,
    pub event_id: String,
    pub workflow_id: String,
    pub event_type: String,
    pub fingerprint: String,
    pub write_set: WriteSet,
    /// Only on duplicate-delivery, and only when the stored receipt carries a
    /// `result` (receipts written before it existed do not): left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<Original>,
}

/// A stored workflow as far as a decision needs it.
struct Workflow<'a> {
    source: &'a dyn Source,
    status: usize,
    revision: u64,
}

fn record_error(record: &'static str, field: &str, reason: impl Into<String>) -> Error {
    Error::InvalidRecord { record, field: field.to_string(), reason: reason.into() }
}

fn read_workflow<'a>(rule_set: &RuleSet, event: &Event, source: &'a dyn Source) -> Result<Workflow<'a>> {
    let id = FieldKind::Text.check(source.field("id")).map_err(|reason| record_error("workflow", "id", reason))?;
    if id != event.workflow_id {
        return Err(Error::InvalidArgument {
            reason: format!(
                "workflow.id {:?} is not the event's workflowId {:?}",
                truncate(&id),
                truncate(&event.workflow_id)
            ),
        });
    }
    let status_name =
        FieldKind::Text.check(source.field("status")).map_err(|reason| record_error("workflow", "status", reason))?;
    let status = rule_set.status_index(&status_name).ok_or_else(|| {
        record_error(
            "workflow",
            "status",
            format!("{:?} is not a status of rule set {}", truncate(&status_name), rule_set.id),
        )
    })?;
    let revision = match source.field("revision") {
        Input::Number(n) if n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&n) => n as u64,
        other => {
            return Err(record_error(
                "workflow",
                "revision",
                format!("must be a whole number from 0 to 2^53 - 1, not {}", other.kind()),
            ))
        }
    };
    Ok(Workflow { source, status, revision })
}

fn recorded(workflow: &Workflow, rule_set: &RuleSet, field: usize) -> Result<Option<String>> {
    let spec = &rule_set.fields[field];
    match workflow.source.field(&spec.name) {
        Input::Absent | Input::Null => Ok(None),
        other => spec.kind.check(other).map(Some).map_err(|reason| record_error("workflow", &spec.name, reason)),
    }
}

/// A stored fingerprint must have the shape this version writes: `fp1:` and 64
/// lowercase hex digits. Anything else is a corrupt record, not a conflict.
fn stored_fingerprint(receipt: &dyn Source) -> Result<String> {
    let reason = match receipt.field("fingerprint") {
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

/// Validates `event` and decides. `receipt` is the inbox row stored under the
/// event's id, `workflow` the stored workflow for its workflowId.
pub fn decide(
    rule_set: &RuleSet,
    event: &dyn Source,
    receipt: Option<&dyn Source>,
    workflow: Option<&dyn Source>,
) -> Result<Decision> {
    let event = validate(rule_set, event)?;
    decide_valid(rule_set, &event, receipt, workflow)
}

pub fn decide_valid(
    rule_set: &RuleSet,
    event: &Event,
    receipt: Option<&dyn Source>,
    workflow: Option<&dyn Source>,
) -> Result<Decision> {
    let fp = fingerprint(rule_set, event);
    let mut decision = Decision {
        outcome: Outcome::DuplicateDelivery,
        event_id: event.event_id.clone(),
        workflow_id: event.workflow_id.clone(),
        event_type: event.type_name(rule_set).to_string(),
        fingerprint: fp,
        write_set: WriteSet { receipt: None, workflow: None, outbox: Vec::new() },
        original: None,
    };

    if let Some(receipt) = receipt {
        // A receipt read under another key is a host bug, not a duplicate.
        if let Input::Text(stored_id) = receipt.field("eventId") {
            if stored_id != event.event_id {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "receipt.eventId {:?} is not the event's eventId {:?}",
                        truncate(&stored_id),
                        truncate(&event.event_id)
                    ),
                });
            }
        }
        let stored = stored_fingerprint(receipt)?;
        if stored != decision.fingerprint {
            return Err(Error::EventIdConflict {
                event_id: event.event_id.clone(),
                workflow_id: event.workflow_id.clone(),
                stored_fingerprint: stored,
                fingerprint: decision.fingerprint,
            });
        }
        decision.original = stored_original(receipt)?;
        return Ok(decision);
    }

    let workflow = workflow.map(|source| read_workflow(rule_set, event, source)).transpose()?;
    let state = workflow.as_ref().map_or(0, |w| w.status + 1);
    let rule = rule_set.rule_for(event.event_type, state)?;

    if let Some(wf) = &workflow {
        for &field in &rule.guard {
            let actual = event.value_of(rule_set, field).unwrap_or_default();
            let stored = recorded(wf, rule_set, field)?;
            if stored.as_deref() != Some(actual) {
                return Err(Error::IdentityMismatch {
                    field: rule_set.fields[field].name.clone(),
                    workflow_id: event.workflow_id.clone(),
                    event_id: event.event_id.clone(),
                    event_type: decision.event_type.clone(),
                    recorded: stored,
                    actual: actual.to_string(),
                    disposition: crate::error::Disposition::Reconcile,
                });
            }
        }
    }

    decision.outcome = match &rule.answer {
        Answer::Fail { code, disposition } => {
            let (event_id, workflow_id, event_type) =
                (event.event_id.clone(), event.workflow_id.clone(), decision.event_type.clone());
            return Err(match (code, &workflow) {
                (FailCode::InvalidTransition, Some(wf)) => Error::InvalidTransition {
                    workflow_id,
                    event_id,
                    event_type,
                    status: rule_set.statuses[wf.status].name.clone(),
                    disposition: *disposition,
                },
                _ => Error::UnknownWorkflow { workflow_id, event_id, event_type, disposition: *disposition },
            });
        }
        Answer::AlreadyApplied => Outcome::AlreadyApplied,
        Answer::Stale => Outcome::Stale,
        Answer::Applied(transition) => {
            apply(rule_set, event, workflow.as_ref(), transition, &mut decision.write_set)?;
            Outcome::Applied
        }
    };
    decision.write_set.receipt = Some(Receipt {
        event_id: event.event_id.clone(),
        fingerprint: decision.fingerprint.clone(),
        workflow_id: event.workflow_id.clone(),
        event_type: decision.event_type.clone(),
        outcome: decision.outcome,
        rule_set: RuleSetRef { id: rule_set.id.clone(), version: rule_set.version, hash: rule_set.hash.clone() },
        result: ReceiptResult {
            operation_ids: decision.write_set.outbox.iter().map(|op| op.id.clone()).collect(),
            status: decision.write_set.workflow.as_ref().and_then(|w| w.set.get("status")?.as_str().map(str::to_string)),
            revision: decision.write_set.workflow.as_ref().and_then(|w| w.set.get("revision")?.as_u64()),
        },
    });
    Ok(decision)
}

/// The longest stored `result` read back: far more than 32 operation ids of
/// 512 bytes each, far less than anything that could hurt.
const MAX_RESULT_BYTES: usize = 64 * 1024;

fn whole(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER)
}

/// The first delivery's result from a stored receipt: `None` when the receipt
/// has no `result` (written before receipts kept one); INVALID_RECORD naming
/// the field when what is there is not what this version writes.
fn stored_original(receipt: &dyn Source) -> Result<Option<Original>> {
    let text = match receipt.json_text("result") {
        Input::Absent | Input::Null => return Ok(None),
        Input::Text(text) if text.len() <= MAX_RESULT_BYTES => text,
        Input::Text(_) | Input::TooLong { .. } => {
            return Err(record_error("receipt", "result", format!("is longer than {MAX_RESULT_BYTES} bytes")))
        }
        other => return Err(record_error("receipt", "result", format!("must be an object, not {}", other.kind()))),
    };
    let bad = |reason: &str| record_error("receipt", "result", reason.to_string());
    let result = match serde_json::from_str::<Value>(&text) {
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
        Some(value) => Some(whole(value).ok_or_else(|| bad("revision must be a whole number from 0 to 2^53 - 1 or null"))?),
    };
    let outcome = match receipt.field("outcome") {
        Input::Text(text) if text == "applied" => Outcome::Applied,
        Input::Text(text) if text == "already-applied" => Outcome::AlreadyApplied,
        Input::Text(text) if text == "stale" => Outcome::Stale,
        other => {
            return Err(record_error(
                "receipt",
                "outcome",
                format!("must be applied, already-applied or stale, not {}", describe(&other)),
            ))
        }
    };
    let decided_at = match receipt.field("recordedAt") {
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

fn describe(input: &Input) -> String {
    match input {
        Input::Text(text) => format!("{:?}", truncate(text)),
        other => other.kind().to_string(),
    }
}

fn apply(
    rule_set: &RuleSet,
    event: &Event,
    workflow: Option<&Workflow>,
    transition: &Transition,
    write_set: &mut WriteSet,
) -> Result<()> {
    let read_revision = workflow.map_or(0, |w| w.revision);
    let revision = read_revision
        .checked_add(transition.revision_step)
        .filter(|r| *r <= MAX_SAFE_INTEGER)
        .ok_or_else(|| record_error("workflow", "revision", "would pass 2^53 - 1"))?;
    let mut set = Map::new();
    set.insert("status".into(), Value::String(rule_set.statuses[transition.to].name.clone()));
    set.insert("revision".into(), Value::from(revision));
    for &field in &transition.record {
        let value = event.value_of(rule_set, field).unwrap_or_default();
        set.insert(rule_set.fields[field].name.clone(), Value::String(value.to_string()));
    }
    for &field in &transition.clear {
        set.insert(rule_set.fields[field].name.clone(), Value::Null);
    }
    write_set.workflow = Some(WorkflowWrite {
        id: event.workflow_id.clone(),
        expect: workflow.map(|w| Expect { status: rule_set.statuses[w.status].name.clone(), revision: w.revision }),
        set,
    });
    for emit in &transition.emit {
        let mut payload = Map::new();
        for &field in &emit.payload {
            let value = event.value_of(rule_set, field).unwrap_or_default();
            payload.insert(rule_set.fields[field].name.clone(), Value::String(value.to_string()));
        }
        write_set.outbox.push(OutboxOperation {
            // A recurring operation's id carries the revision this write sets:
            // it rises on every applied transition, so each emission differs.
            id: emit.id_template.render(&event.workflow_id, revision),
            operation_type: emit.operation_type.clone(),
            workflow_id: event.workflow_id.clone(),
            event_id: event.event_id.clone(),
            status: "pending",
            payload,
        });
    }
    Ok(())
}
