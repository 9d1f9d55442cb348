//! The decision: from an event, the stored inbox receipt for its id and the
//! stored workflow, what happened and exactly what the host must write, in
//! one transaction, to record it.
//!
//! There is one decider, over the packed input (`crate::packed`): every
//! entry point lays its inputs out and calls [`decide_item`]. Its answer is
//! a few numbers (the outcome, the rule, the state, the revisions) and the
//! fingerprint; the write set is the rule's template (`crate::writes`) filled
//! in, by the host or by [`render`].

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{truncate, Disposition, Error, Mismatch, Result};
use crate::event::{self, Valid};
use crate::field::{FieldKind, FieldValue};
use crate::fingerprint::{self, PREFIX};
use crate::input::Input;
use crate::jcs::MAX_SAFE_INTEGER;
use crate::json::text::Writer;
use crate::packed::{self, Item, Layout, Packer, Spans, MAX_FACTS, MAX_FACTS_BYTES, MAX_RESULT_BYTES};
use crate::ruleset::{Answer, FailCode, RuleSet, View};
use crate::writes::{self, Filling};

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

/// Outcomes by the code the decider answers with.
pub const OUTCOMES: [Outcome; 4] =
    [Outcome::Applied, Outcome::AlreadyApplied, Outcome::Stale, Outcome::DuplicateDelivery];

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::AlreadyApplied => "already-applied",
            Outcome::Stale => "stale",
            Outcome::DuplicateDelivery => "duplicate-delivery",
        }
    }

    fn code(self) -> i32 {
        OUTCOMES.iter().position(|o| *o == self).unwrap_or(0) as i32
    }
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
    /// Written only where no operation of the id exists (an untracked fact's
    /// per-fact operation: a later word of the fact emits it again).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub if_absent: bool,
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

/// What the decider answers for one item: everything the write set is made
/// from, besides the fingerprint (written where the caller says) and the
/// event's own values.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub outcome: Outcome,
    /// The rule that answered (none for a duplicate).
    pub rule: usize,
    /// 0: no workflow; `s + 1`: `statuses[s]`.
    pub state: usize,
    pub event_type: usize,
    /// The revision the workflow was read at (0 without one).
    pub expect_revision: u64,
    /// The revision the write sets (the read one unless applied).
    pub revision: u64,
    pub original: Option<Original>,
}

/// Buffers a decider reuses from item to item.
#[derive(Debug, Default)]
pub struct Work {
    pub spans: Spans,
    pub canonical: String,
}

fn record_error(record: &'static str, field: &str, reason: impl Into<String>) -> Error {
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

/// Decides one item: `fingerprint` receives its fingerprint (`fingerprint::LEN` bytes).
pub fn decide_item<'a>(
    rule_set: &RuleSet,
    item: &Item<'a>,
    layout: Layout,
    fingerprint: &mut [u8],
    canonical: &mut String,
) -> Result<(Valid<'a>, Decided)> {
    let (valid, has_receipt, has_workflow) = read_item(rule_set, item, layout)?;
    let decided = decide_valid(rule_set, item, layout, &valid, has_receipt, has_workflow, fingerprint, canonical)?;
    Ok((valid, decided))
}

/// What the host was handed, and the event validated: the steps before the
/// fingerprint. Whether there is a receipt and a workflow comes with it.
fn read_item<'a>(rule_set: &RuleSet, item: &Item<'a>, layout: Layout) -> Result<(Valid<'a>, bool, bool)> {
    event::check_arg(item)?;
    let has_receipt = record_arg(item, 1, "receipt")?;
    let has_workflow = record_arg(item, 2, "workflow")?;
    Ok((event::check(rule_set, item, layout)?, has_receipt, has_workflow))
}

/// Decides the `count` items of a located batch (`spans`), four at a time so
/// that their fingerprints are hashed side by side (`sha256::digest_up_to_four`);
/// `answer(i, decision, fingerprint)` takes each item's answer (an item whose
/// event is refused is answered before the others of its four).
pub fn decide_batch(
    rule_set: &RuleSet,
    packed: &packed::Packed,
    spans: &[(u32, i32)],
    count: usize,
    work: &mut BatchWork,
    mut answer: impl FnMut(usize, Result<Decided>, &[u8]),
) {
    let layout = Layout::new(rule_set);
    let per_item = layout.entries();
    if count == 1 {
        // One item alone: nothing to hash beside it.
        let mut fingerprint = [0u8; fingerprint::LEN];
        let item = Item::of(packed, spans, per_item, 0);
        let decided = decide_item(rule_set, &item, layout, &mut fingerprint, &mut work.canonicals[0]).map(|(_, d)| d);
        return answer(0, decided, &fingerprint);
    }
    let mut start = 0;
    while start < count {
        let lanes = (count - start).min(4);
        // The items whose events are valid, by lane; the others are answered at once.
        let mut valid: [Option<(Item, Valid, bool, bool)>; 4] = [None; 4];
        for (lane, slot) in valid.iter_mut().enumerate().take(lanes) {
            let item = Item::of(packed, spans, per_item, start + lane);
            match read_item(rule_set, &item, layout) {
                Ok((event, has_receipt, has_workflow)) => *slot = Some((item, event, has_receipt, has_workflow)),
                Err(error) => answer(start + lane, Err(error), &[0; fingerprint::LEN]),
            }
        }
        let mut hashing = 0;
        for (lane, slot) in valid.iter().enumerate() {
            if let Some((_, event, _, _)) = slot {
                fingerprint::write_canonical(
                    rule_set,
                    event.event_type,
                    event.workflow_id,
                    |f| event.value_of(rule_set, f),
                    &mut work.canonicals[lane],
                );
                hashing += 1;
            }
        }
        let mut hashed: [&[u8]; 4] = [&[]; 4];
        let mut lanes_hashed = [0usize; 4];
        let mut n = 0;
        for (lane, slot) in valid.iter().enumerate() {
            if slot.is_some() {
                hashed[n] = work.canonicals[lane].as_bytes();
                lanes_hashed[n] = lane;
                n += 1;
            }
        }
        let mut digests = [[0u8; 32]; 4];
        crate::sha256::digest_up_to_four(&hashed[..hashing], &mut digests);
        for (digest, lane) in digests.iter().zip(lanes_hashed).take(hashing) {
            if let Some((item, event, has_receipt, has_workflow)) = &valid[lane] {
                let mut fingerprint = [0u8; fingerprint::LEN];
                fingerprint::write_digest(digest, &mut fingerprint);
                let decided =
                    decide_fingerprinted(rule_set, item, layout, event, *has_receipt, *has_workflow, &fingerprint);
                answer(start + lane, decided, &fingerprint);
            }
        }
        start += lanes;
    }
}

/// Buffers `decide_batch` reuses from call to call: one canonical text per lane.
#[derive(Debug, Default)]
pub struct BatchWork {
    canonicals: [String; 4],
}

/// Decides a validated event: the steps after validation, which the seed's
/// `planDepositConfirmation` shares.
#[allow(clippy::too_many_arguments)]
pub fn decide_valid(
    rule_set: &RuleSet,
    item: &Item,
    layout: Layout,
    event: &Valid,
    has_receipt: bool,
    has_workflow: bool,
    fingerprint: &mut [u8],
    canonical: &mut String,
) -> Result<Decided> {
    fingerprint::write_canonical(
        rule_set,
        event.event_type,
        event.workflow_id,
        |f| event.value_of(rule_set, f),
        canonical,
    );
    fingerprint::write_fingerprint(canonical, fingerprint);
    decide_fingerprinted(rule_set, item, layout, event, has_receipt, has_workflow, fingerprint)
}

/// The decision once the event's `fingerprint` is known.
fn decide_fingerprinted(
    rule_set: &RuleSet,
    item: &Item,
    layout: Layout,
    event: &Valid,
    has_receipt: bool,
    has_workflow: bool,
    fingerprint: &[u8],
) -> Result<Decided> {
    let mut decided = Decided {
        outcome: Outcome::DuplicateDelivery,
        rule: 0,
        state: 0,
        event_type: event.event_type,
        expect_revision: 0,
        revision: 0,
        original: None,
    };

    if has_receipt {
        // A receipt read under another key is a host bug, not a duplicate.
        if let Input::Text(stored_id) = item.read(layout.receipt(packed::RECEIPT_EVENT_ID)) {
            if stored_id != event.event_id {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "receipt.eventId {:?} is not the event's eventId {:?}",
                        truncate(stored_id),
                        truncate(event.event_id)
                    ),
                });
            }
        }
        let stored = stored_fingerprint(item.read(layout.receipt(packed::RECEIPT_FINGERPRINT)))?;
        if stored.as_bytes() != &fingerprint[..fingerprint::LEN] {
            return Err(Error::EventIdConflict {
                event_id: event.event_id.to_string(),
                workflow_id: event.workflow_id.to_string(),
                stored_fingerprint: stored.to_string(),
                fingerprint: String::from_utf8_lossy(&fingerprint[..fingerprint::LEN]).into_owned(),
            });
        }
        decided.original = stored_original(item, layout)?;
        return Ok(decided);
    }

    if has_workflow {
        let (status, revision) = read_workflow(rule_set, item, layout, event)?;
        decided.state = status + 1;
        decided.expect_revision = revision;
        decided.revision = revision;
    }
    let rule_index = rule_set.rule_index_for(event.event_type, decided.state)?;
    let rule = &rule_set.rules[rule_index];

    // On a fact event: the workflow's facts map and the event's entry in it.
    let facts_map = match rule_set.facts() {
        Some(facts) if facts.events.contains(&event.event_type) => {
            Some(if has_workflow { read_facts(rule_set, item, layout)? } else { (Map::new(), 0) })
        }
        _ => None,
    };
    let fact = match (rule_set.facts(), &facts_map) {
        (Some(facts), Some((map, _))) => {
            let key = match event.value_of(rule_set, facts.key) {
                FieldValue::Text(key) => key,
                FieldValue::Count(_) => "",
            };
            Some(Fact { record: &facts.record, key, map, entry: map.get(key).and_then(Value::as_object) })
        }
        _ => None,
    };
    let view = Reading { rule_set, item, layout, event, has_workflow, fact };

    if has_workflow {
        for &field in &rule.guard {
            let actual = event.value_of(rule_set, field);
            let from_entry = view.fact.as_ref().is_some_and(|f| f.record.contains(&field));
            // A fact's own field holds when nothing is known of the fact yet.
            if from_entry && view.fact.as_ref().is_some_and(|f| f.entry.is_none()) {
                continue;
            }
            // The very string of a declared event field was checked as that field.
            if !from_entry
                && rule_set.events[event.event_type].fields.contains(&field)
                && item.same(layout.workflow_field(field), layout.event_field(field))
            {
                continue;
            }
            let spec = &rule_set.fields[field];
            let stored = view.recorded(field)?;
            if stored != Some(actual) {
                return Err(Error::IdentityMismatch(Box::new(Mismatch {
                    field: spec.name.clone(),
                    workflow_id: event.workflow_id.to_string(),
                    event_id: event.event_id.to_string(),
                    event_type: event.type_name(rule_set).to_string(),
                    recorded: stored.map(FieldValue::display),
                    actual: actual.display(),
                    disposition: Disposition::Reconcile,
                })));
            }
        }
    }

    // The guard holds; the chain's conditions pick the answer.
    let rule_index = rule_set.choose(rule_index, &view)?;
    decided.rule = rule_index;
    let rule = &rule_set.rules[rule_index];
    // An answer that leaves its fact untracked only takes an entry away.
    let kept = |t: &&crate::ruleset::Transition| !t.untracked;
    if let (Some(facts), Some(fact), Some(transition)) = (
        rule_set.facts(),
        &view.fact,
        match &rule.answer {
            Answer::Applied(transition) => Some(transition).filter(kept),
            _ => None,
        },
    ) {
        let stored = facts_map.as_ref().map_or(0, |(_, bytes)| *bytes);
        if facts_bytes_after(rule_set, event, fact, stored, transition) > MAX_FACTS_BYTES {
            return Err(Error::BoundExceeded {
                workflow_id: event.workflow_id.to_string(),
                event_id: event.event_id.to_string(),
                bound: "maxFactsBytes",
                reason: format!(
                    "{} could pass {MAX_FACTS_BYTES} bytes of JSON with this fact's entry: nothing is written",
                    facts.name
                ),
            });
        }
        if fact.entry.is_none() && fact.map.len() >= MAX_FACTS {
            // The record is sound; this event would take it past its bound.
            return Err(Error::BoundExceeded {
                workflow_id: event.workflow_id.to_string(),
                event_id: event.event_id.to_string(),
                bound: "maxFacts",
                reason: format!(
                    "{} holds {MAX_FACTS} entries: a new fact would pass the bound of {MAX_FACTS}",
                    facts.name
                ),
            });
        }
    }

    decided.outcome = match &rule.answer {
        Answer::Fail { code, disposition } => {
            let (event_id, workflow_id, event_type) =
                (event.event_id.to_string(), event.workflow_id.to_string(), event.type_name(rule_set).to_string());
            return Err(match (code, decided.state) {
                (FailCode::InvalidTransition, state) if state > 0 => Error::InvalidTransition {
                    workflow_id,
                    event_id,
                    event_type,
                    status: rule_set.statuses[state - 1].name.clone(),
                    disposition: *disposition,
                },
                _ => Error::UnknownWorkflow { workflow_id, event_id, event_type, disposition: *disposition },
            });
        }
        Answer::AlreadyApplied => Outcome::AlreadyApplied,
        Answer::Stale => Outcome::Stale,
        Answer::Applied(transition) => {
            decided.revision = decided
                .expect_revision
                .checked_add(transition.revision_step)
                .filter(|r| *r <= MAX_SAFE_INTEGER)
                .ok_or_else(|| record_error("workflow", "revision", "would pass 2^53 - 1"))?;
            Outcome::Applied
        }
    };
    Ok(decided)
}

/// The event's fact, on a fact event: its key, the workflow's facts map and
/// the key's entry in it (none when nothing is known of the fact yet).
struct Fact<'b> {
    record: &'b [usize],
    key: &'b str,
    map: &'b Map<String, Value>,
    entry: Option<&'b Map<String, Value>>,
}

/// What a rule reads in the decider: the event, the stored workflow and, on
/// a fact event, the fact's entry.
struct Reading<'a, 'b> {
    rule_set: &'b RuleSet,
    item: &'b Item<'a>,
    layout: Layout,
    event: &'b Valid<'a>,
    has_workflow: bool,
    fact: Option<Fact<'b>>,
}

impl<'a: 'b, 'b> View<'b> for Reading<'a, 'b> {
    fn recorded(&self, field: usize) -> Result<Option<FieldValue<'b>>> {
        match &self.fact {
            Some(fact) if fact.record.contains(&field) => {
                let spec = &self.rule_set.fields[field];
                match fact.entry.and_then(|e| e.get(&spec.name)) {
                    None | Some(Value::Null) => Ok(None),
                    Some(value) => spec.kind.check_value(crate::input::from_json(value)).map(Some).map_err(|reason| {
                        record_error("workflow", &entry_path(self.rule_set, fact.key, &spec.name), reason)
                    }),
                }
            }
            _ if self.has_workflow => recorded_value(self.rule_set, self.item, self.layout, field),
            _ => Ok(None),
        }
    }

    fn event_value(&self, field: usize) -> FieldValue<'b> {
        self.event.value_of(self.rule_set, field)
    }

    fn other_has_event(&self, types: &[usize]) -> bool {
        let Some(fact) = &self.fact else { return false };
        fact.map.iter().any(|(key, entry)| {
            key != fact.key
                && entry
                    .get("event")
                    .and_then(Value::as_str)
                    .and_then(|name| self.rule_set.event_index(name))
                    .is_some_and(|e| types.contains(&e))
        })
    }

    fn emitted(&self, name: &str) -> bool {
        let Some(entry) = self.fact.as_ref().and_then(|f| f.entry) else { return false };
        entry
            .get("operations")
            .and_then(Value::as_array)
            .is_some_and(|ops| ops.iter().any(|op| op.as_str() == Some(name)))
    }
}

/// How an error names a field of a fact's entry: `deposits["btc:tx:0"].sequence`.
fn entry_path(rule_set: &RuleSet, key: &str, member: &str) -> String {
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
fn read_facts(rule_set: &RuleSet, item: &Item, layout: Layout) -> Result<(Map<String, Value>, usize)> {
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

/// About how many bytes of JSON the facts map takes once `transition` has
/// written the event's entry, never fewer: the stored text without the
/// entry it had, with the new entry's members at their JSON lengths (and a
/// few bytes to spare for separators).
fn facts_bytes_after(
    rule_set: &RuleSet,
    event: &Valid,
    fact: &Fact,
    stored: usize,
    transition: &crate::ruleset::Transition,
) -> usize {
    let json = |text: &str| serde_json::to_string(text).map_or(6 * text.len() + 2, |t| t.len());
    let old = fact.entry.map_or(0, |entry| json(fact.key) + 2 + serde_json::to_string(entry).map_or(0, |e| e.len()));
    let mut new = json(fact.key) + 4 + json("event") + 1 + json(event.type_name(rule_set)) + 1;
    for &field in fact.record {
        let name = &rule_set.fields[field].name;
        let carried =
            if transition.record.contains(&field) { json(&event.value_of(rule_set, field).display()) } else { 0 };
        let kept = fact.entry.and_then(|e| e.get(name)).map_or(0, |v| v.to_string().len());
        new += json(name) + 2 + carried.max(kept);
    }
    let kept_operations: usize = fact
        .entry
        .and_then(|e| e.get("operations"))
        .and_then(Value::as_array)
        .map_or(0, |ops| ops.iter().map(|op| op.to_string().len() + 1).sum());
    let emitted: usize =
        transition.emit.iter().filter(|e| e.id_template.per_fact).map(|e| json(&e.id_template.name) + 1).sum();
    new += json("operations") + 3 + kept_operations + emitted + 16;
    stored.saturating_sub(old) + new
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
fn recorded_value<'a>(
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
fn read_workflow(rule_set: &RuleSet, item: &Item, layout: Layout, event: &Valid) -> Result<(usize, u64)> {
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
fn stored_fingerprint(input: Input<'_>) -> Result<&str> {
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

fn whole(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n <= MAX_SAFE_INTEGER)
}

/// The first delivery's result from a stored receipt: `None` when the receipt
/// has no `result` (written before receipts kept one); INVALID_RECORD naming
/// the field when what is there is not what this version writes. The result
/// is JSON text (a host lays a structured value out as its JSON).
fn stored_original(item: &Item, layout: Layout) -> Result<Option<Original>> {
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

fn describe(input: &Input) -> String {
    match input {
        Input::Text(text) => format!("{:?}", truncate(text)),
        other => other.kind().to_string(),
    }
}

/// The decision as a value: the decider's answer with the rule's write
/// template filled in (what the host builds from the same template).
/// `facts`: the workflow's facts map as read (for a rule set with `facts`).
pub fn render(
    rule_set: &RuleSet,
    event: &Valid,
    decided: &Decided,
    fingerprint: &str,
    facts: Option<&Map<String, Value>>,
) -> Decision {
    let event_type = event.type_name(rule_set).to_string();
    let mut decision = Decision {
        outcome: decided.outcome,
        event_id: event.event_id.to_string(),
        workflow_id: event.workflow_id.to_string(),
        event_type: event_type.clone(),
        fingerprint: fingerprint.to_string(),
        write_set: WriteSet { receipt: None, workflow: None, outbox: Vec::new() },
        original: decided.original.clone(),
    };
    if decided.outcome == Outcome::DuplicateDelivery {
        return decision;
    }
    let mut result = ReceiptResult { operation_ids: Vec::new(), status: None, revision: None };
    if let Some(write) =
        writes::template(rule_set, decided.rule, decided.event_type).filter(|_| decided.outcome == Outcome::Applied)
    {
        let filling = Filling {
            workflow_id: event.workflow_id,
            revision: decided.revision,
            value_of: |f| event.value_of(rule_set, f),
            facts,
        };
        let set = filling.map(&write.set);
        result.status = set.get("status").and_then(Value::as_str).map(str::to_string);
        result.revision = set.get("revision").and_then(Value::as_u64);
        decision.write_set.outbox = write
            .outbox
            .iter()
            .map(|op| OutboxOperation {
                id: filling.text(&op.id),
                operation_type: op.operation_type.clone(),
                workflow_id: event.workflow_id.to_string(),
                event_id: event.event_id.to_string(),
                status: "pending",
                payload: filling.map(&op.payload),
                if_absent: op.if_absent,
            })
            .collect();
        result.operation_ids = decision.write_set.outbox.iter().map(|op| op.id.clone()).collect();
        let expect = (decided.state > 0).then(|| Expect {
            status: rule_set.statuses[decided.state - 1].name.clone(),
            revision: decided.expect_revision,
        });
        decision.write_set.workflow = Some(WorkflowWrite { id: event.workflow_id.to_string(), expect, set });
    }
    decision.write_set.receipt = Some(Receipt {
        event_id: event.event_id.to_string(),
        fingerprint: fingerprint.to_string(),
        workflow_id: event.workflow_id.to_string(),
        event_type,
        outcome: decided.outcome,
        rule_set: RuleSetRef { id: rule_set.id.clone(), version: rule_set.version, hash: rule_set.hash.clone() },
        result,
    });
    decision
}

/// Decides JSON inputs (native callers, tests, the JSON-text entry point):
/// laid out as a host lays out objects, then decided and rendered.
pub fn decide(
    rule_set: &RuleSet,
    event: &Map<String, Value>,
    receipt: Option<&Map<String, Value>>,
    workflow: Option<&Map<String, Value>>,
) -> Result<Decision> {
    let mut packer = Packer::default();
    packer.item(rule_set, event, receipt, workflow);
    let layout = Layout::new(rule_set);
    let packed = packer.packed();
    let mut work = Work::default();
    packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut work.spans);
    let item = Item::of(&packed, &work.spans, layout.entries(), 0);
    let mut fingerprint = [0u8; fingerprint::LEN];
    let (valid, decided) = decide_item(rule_set, &item, layout, &mut fingerprint, &mut work.canonical)?;
    // The map as the decider read it (it checked it: only an object is one).
    let facts = match rule_set.facts().and_then(|f| workflow.and_then(|w| w.get(&f.name))) {
        Some(Value::Object(map)) => Some(map),
        _ => None,
    };
    Ok(render(rule_set, &valid, &decided, &String::from_utf8_lossy(&fingerprint), facts))
}

/// Per item, the answer's `i32`s: whether it was decided, then what.
pub const ANSWER_INTS: usize = 7;
pub const DECIDED: i32 = 0;
pub const FAILED: i32 = 1;
/// Per item, the answer's numbers: the revision read and the one written.
pub const ANSWER_NUMBERS: usize = 2;

/// One item's answer in the host's regions: `ints` (`ANSWER_INTS`), `numbers`
/// (`ANSWER_NUMBERS`); a duplicate's original or an error goes into `extra`
/// as JSON text, at the offset and length the ints say.
pub fn write_answer(answer: &Result<Decided>, ints: &mut [i32], numbers: &mut [f64], extra: &mut String) {
    let start = extra.len();
    match answer {
        Ok(decided) => {
            if let Some(original) = &decided.original {
                extra.push_str(&serde_json::to_string(original).unwrap_or_default());
            }
            ints.copy_from_slice(&[
                DECIDED,
                decided.outcome.code(),
                decided.rule as i32,
                decided.state as i32,
                decided.event_type as i32,
                start as i32,
                (extra.len() - start) as i32,
            ]);
            numbers[0] = decided.expect_revision as f64;
            numbers[1] = decided.revision as f64;
        }
        Err(error) => {
            extra.push_str(&error.to_json().to_string());
            ints.copy_from_slice(&[FAILED, -1, -1, -1, -1, start as i32, (extra.len() - start) as i32]);
            numbers[0] = 0.0;
            numbers[1] = 0.0;
        }
    }
}

/// The answer regions as the layout describes them to a host.
pub fn describe_answers(w: &mut Writer) {
    w.open_object();
    w.key("ints").int(ANSWER_INTS as i64).key("numbers").int(ANSWER_NUMBERS as i64);
    w.key("fingerprintBytes").int(fingerprint::LEN as i64);
    w.key("decided").int(DECIDED as i64).key("failed").int(FAILED as i64);
    w.key("outcomes").strings(OUTCOMES.iter().map(|o| o.as_str()));
    w.key("duplicate").int(Outcome::DuplicateDelivery.code() as i64).key("applied").int(Outcome::Applied.code() as i64);
    w.key("from").open_object();
    for (name, kind) in [
        ("CONSTANT", writes::CONSTANT),
        ("REVISION", writes::REVISION),
        ("EVENT_FIELD", writes::EVENT_FIELD),
        ("REMOVED", writes::REMOVED),
        ("WORKFLOW_ID", writes::WORKFLOW_ID),
        ("FACT_KEY", writes::FACT_KEY),
        ("FACTS", writes::FACTS),
    ] {
        w.key(name).int(kind as i64);
    }
    w.close_object();
    // How a fact key is escaped in a per-fact operation id (FACT_KEY): `[from, to]`, in order.
    w.key("factKeyEscapes").open_array();
    for (from, to) in crate::ruleset::FACT_KEY_ESCAPES {
        w.open_array().string(&from.to_string()).string(to).close_array();
    }
    w.close_array();
    // How long an operation id may be, and what replaces a fact key that would make it longer (crate::operation_id).
    w.key("operationIdMaxBytes").int(crate::operation_id::MAX_OPERATION_ID_BYTES as i64);
    w.key("hashedFactKeyPrefix").string(crate::operation_id::HASHED_FACT_KEY_PREFIX);
    w.close_object();
}
