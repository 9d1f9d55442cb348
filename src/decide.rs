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
use crate::field::FieldValue;
use crate::fingerprint;
use crate::input::Input;
use crate::jcs::MAX_SAFE_INTEGER;
use crate::outcome::{Original, Outcome};
use crate::packed::{self, Item, Layout, Packer, Spans, MAX_FACTS, MAX_FACTS_BYTES};
use crate::ruleset::{Answer, FailCode, RuleSet, View};
use crate::stored::{
    entry_path, read_facts, read_workflow, record_arg, record_error, recorded_value, stored_fingerprint,
    stored_original,
};
use crate::writes::{self, Filling};

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
