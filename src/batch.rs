//! Many decisions per call from a compact encoding: the hot path.
//!
//! [`crate::decide::decide`] reads a JS object one property at a time (each
//! read crosses the boundary and copies a string) and its decision goes back
//! as JSON text. Here the host lays a whole batch out at once: the UTF-8 text
//! of every string it read (one `TextEncoder.encodeInto`), and per value one
//! `i32` entry, its length in UTF-16 units or a tag saying what else it was.
//! Strings are borrowed from that text, the canonical JSON is written into one
//! reused buffer, and each answer is a few numbers and the fingerprint's text. The host
//! builds the decision object from those and a [`template`] per rule.
//!
//! It decides only what it can decide exactly as `decide` does. An input it
//! cannot represent (a value that is not a string, a string with U+FFFD, which
//! may stand for a lone surrogate) or that `decide` would refuse is answered
//! [`SLOW`]: the host then calls `decide` itself, so every error (code,
//! message, details) and every unusual success is the one `decide` gives.
//!
//! A stored receipt's `result` (a duplicate's `original`) is not laid out:
//! the host reads it and lays the item out only when the result is of the
//! shape this version writes; any other receipt with a result goes to `decide`.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::field::{FieldKind, MAX_TEXT_BYTES};
use crate::fingerprint::PREFIX;
use crate::jcs::{write_string, MAX_SAFE_INTEGER};
use crate::ruleset::{Answer, Member, RuleSet};

/// An entry that is not a string: the property is missing (or `undefined`).
pub const ABSENT: i32 = -1;
pub const NULL: i32 = -2;
/// A number; for a workflow's revision its value is the item's `numbers` slot.
pub const NUMBER: i32 = -3;
/// Any other value (a boolean, an object, ...): `decide` decides.
pub const OTHER: i32 = -4;
/// A string longer than any field may be, left out of the text.
pub const TOO_LONG: i32 = -5;
/// Set here, never by the host: the text does not hold exactly this string.
const BROKEN: i32 = -6;
/// The very string of the event's matching entry (its workflowId for the
/// workflow's id or the receipt is not concerned; its eventId for the
/// receipt's eventId; its field for the workflow's same field): laid out once.
pub const SAME: i32 = -7;
/// `KNOWN - i` for the event's type or the workflow's status: the rule set's
/// event type or status `i`, named by the host from the layout (its exact
/// name) rather than laid out as text.
pub const KNOWN: i32 = -16;

/// Header bits (the item's first entry).
pub const HAS_RECEIPT: i32 = 1;
pub const HAS_WORKFLOW: i32 = 2;
/// The host could not lay this item out (a getter, a proxy, an unusual object).
pub const HOST_SLOW: i32 = 4;
/// Validate the event only (`normalizeEvent`): no receipt, no workflow, no
/// fingerprint; a valid event answers [`DECIDED`] with its type's index.
pub const VALIDATE_ONLY: i32 = 8;

/// Result codes.
pub const DECIDED: i32 = 0;
pub const SLOW: i32 = 1;

/// Per item: code, outcome, rule index, state (0: no workflow, `s + 1`:
/// `statuses[s]`), event type index.
pub const RESULT_INTS: usize = 5;
/// Per item: the revision the workflow must still have, and the one it gets.
pub const RESULT_NUMBERS: usize = 2;
/// Per item: the fingerprint, `fp1:` and the digest in lowercase hex.
pub const FINGERPRINT_BYTES: usize = 68;

/// Outcome codes, as `decide` names them.
pub const OUTCOMES: [&str; 4] = ["applied", "already-applied", "stale", "duplicate-delivery"];

/// Where an item's entries are. `F` is the rule set's field count:
/// `0` header; `1..` event: eventId, type, workflowId, then every field in
/// the rule set's order; receipt: eventId, fingerprint; workflow: id, status,
/// revision, then every field.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub fields: usize,
}

impl Layout {
    pub fn new(rule_set: &RuleSet) -> Layout {
        Layout { fields: rule_set.fields.len() }
    }
    pub fn entries(self) -> usize {
        9 + 2 * self.fields
    }
    pub fn event(self, k: usize) -> usize {
        1 + k
    }
    pub fn receipt(self, k: usize) -> usize {
        4 + self.fields + k
    }
    pub fn workflow(self, k: usize) -> usize {
        6 + self.fields + k
    }
    /// The event entry an entry may be [`SAME`] as.
    pub fn same_as(self, entry: usize) -> Option<usize> {
        if entry == self.receipt(0) {
            Some(self.event(0))
        } else if entry == self.workflow(0) {
            Some(self.event(2))
        } else if entry >= self.workflow(3) && entry < self.entries() {
            Some(self.event(entry - self.workflow(0)))
        } else {
            None
        }
    }
}

/// Buffers reused from batch to batch.
#[derive(Debug, Default)]
pub struct Work {
    /// Per entry: byte offset and length, or a tag.
    spans: Vec<(u32, i32)>,
    canonical: String,
}

/// What a rule set's batches share, made once per rule set: the constant
/// parts of each event type's canonical JSON.
#[derive(Debug)]
pub struct Prepared {
    /// The rule set it was made from: where it was, and its hash (which names
    /// its definition: another rule set with the same hash decides alike).
    at: usize,
    of: String,
    skeletons: Vec<Vec<(String, Slot)>>,
}

/// What follows a constant part of the canonical JSON.
#[derive(Debug, Clone, Copy)]
enum Slot {
    WorkflowId,
    /// A rule-set field index.
    Field(usize),
    End,
}

impl Prepared {
    /// Per event type: `(constant text, slot)` pairs that `canonical_bytes`
    /// would write: `{"amountUnits":` then the value of amountUnits, and so on.
    pub fn new(rule_set: &RuleSet) -> Prepared {
        Prepared {
            at: rule_set as *const RuleSet as usize,
            of: rule_set.hash.clone(),
            skeletons: rule_set
                .events
                .iter()
                .map(|event| {
                    let mut parts = Vec::new();
                    let mut constant = String::from("{");
                    for (i, member) in event.fingerprint_members.iter().enumerate() {
                        if i > 0 {
                            constant.push(',');
                        }
                        write_string(&mut constant, member.name(rule_set, event));
                        constant.push(':');
                        match member {
                            Member::Type => write_string(&mut constant, &event.name),
                            Member::WorkflowId => parts.push((std::mem::take(&mut constant), Slot::WorkflowId)),
                            Member::Field(position) => {
                                parts.push((std::mem::take(&mut constant), Slot::Field(event.fields[*position])))
                            }
                        }
                    }
                    constant.push('}');
                    parts.push((constant, Slot::End));
                    parts
                })
                .collect(),
        }
    }
}

/// What the host laid out.
pub struct Batch<'a> {
    pub text: &'a [u8],
    pub entries: &'a [i32],
    pub numbers: &'a [f64],
    /// The host saw as many bytes as UTF-16 units: every string is ASCII.
    pub ascii: bool,
}

/// Where the answers go.
pub struct Answers<'a> {
    pub ints: &'a mut [i32],
    pub numbers: &'a mut [f64],
    pub fingerprints: &'a mut [u8],
}

/// Decides `count` items; returns how many were decided here (not [`SLOW`]).
/// `prepared` is `Prepared::new(rule_set)`, kept with the rule set.
pub fn decide_batch(
    rule_set: &RuleSet,
    prepared: &Prepared,
    count: usize,
    batch: Batch,
    answers: Answers,
    work: &mut Work,
) -> Result<usize> {
    // The address first: comparing the hash's 71 bytes was a measurable share of a one-event call.
    let same_rule_set = prepared.at == rule_set as *const RuleSet as usize || prepared.of == rule_set.hash;
    if !same_rule_set || prepared.skeletons.len() != rule_set.events.len() {
        return Err(Error::InvalidArgument { reason: "prepared for another rule set".into() });
    }
    let layout = Layout::new(rule_set);
    let per_item = layout.entries();
    let short = |what: &str| Error::InvalidArgument { reason: format!("batch of {count}: the {what} region is too small") };
    let entries = count.checked_mul(per_item).filter(|n| *n <= batch.entries.len()).ok_or_else(|| short("entry"))?;
    if batch.numbers.len() < count {
        return Err(short("number"));
    }
    if answers.ints.len() < count * RESULT_INTS || answers.numbers.len() < count * RESULT_NUMBERS {
        return Err(short("answer"));
    }
    if answers.fingerprints.len() < count * FINGERPRINT_BYTES {
        return Err(short("fingerprint"));
    }
    // Invalid UTF-8 (never from encodeInto) leaves every item to `decide`.
    let text = std::str::from_utf8(batch.text).ok();
    locate(text.unwrap_or(""), &batch.entries[..entries], layout, batch.ascii && text.is_some(), &mut work.spans);
    let mut decided = 0;
    for i in 0..count {
        let item = Item {
            text: text.unwrap_or(""),
            spans: &work.spans[i * per_item..(i + 1) * per_item],
            revision: batch.numbers[i],
            layout,
        };
        let ints = &mut answers.ints[i * RESULT_INTS..(i + 1) * RESULT_INTS];
        let fingerprint = &mut answers.fingerprints[i * FINGERPRINT_BYTES..(i + 1) * FINGERPRINT_BYTES];
        let header = batch.entries[i * per_item];
        let answer = if text.is_none() || header & HOST_SLOW != 0 {
            None
        } else {
            decide_item(rule_set, &item, header, fingerprint, &prepared.skeletons, &mut work.canonical)
        };
        match answer {
            Some(a) => {
                ints.copy_from_slice(&[DECIDED, a.outcome, a.rule as i32, a.state as i32, a.event_type as i32]);
                answers.numbers[i * RESULT_NUMBERS] = a.expect_revision as f64;
                answers.numbers[i * RESULT_NUMBERS + 1] = a.revision as f64;
                decided += 1;
            }
            None => ints.copy_from_slice(&[SLOW, -1, -1, -1, -1]),
        }
    }
    Ok(decided)
}

/// Turns lengths in UTF-16 units into byte spans of `text`. A string that
/// holds U+FFFD (a lone surrogate becomes one in `encodeInto`), or whose
/// units end inside a character (a lone high surrogate followed by a string
/// that starts with a lone low one: together they encoded as one pair), or
/// that runs past the text, is BROKEN.
fn locate(text: &str, entries: &[i32], layout: Layout, ascii: bool, spans: &mut Vec<(u32, i32)>) {
    spans.clear();
    spans.reserve(entries.len());
    let per_item = layout.entries();
    let mut at = 0usize;
    // Units of the next string already consumed by a pair that began in the previous one.
    let mut carry = 0usize;
    let mut within = per_item - 1;
    for &entry in entries {
        // The entry's place in its item, counted rather than divided for.
        within = if within + 1 == per_item { 0 } else { within + 1 };
        if entry == SAME {
            // The event's entries come first: its span is already known.
            let span = match layout.same_as(within) {
                Some(event_entry) => spans[spans.len() - within + event_entry],
                None => (0, BROKEN),
            };
            spans.push(span);
            continue;
        }
        // An item's first entry is its header, not a string.
        if entry < 0 || within == 0 {
            spans.push((0, entry));
            continue;
        }
        let units = entry as usize;
        if ascii {
            let end = at + units;
            spans.push(if end <= text.len() { (at as u32, units as i32) } else { (0, BROKEN) });
            at = end.min(text.len());
            continue;
        }
        let start = at;
        let mut counted = carry;
        let mut broken = carry > 0;
        let mut chars = text[at..].chars();
        while counted < units {
            match chars.next() {
                Some(c) => {
                    broken |= c == '\u{FFFD}';
                    counted += c.len_utf16();
                    at += c.len_utf8();
                }
                None => {
                    broken = true;
                    break;
                }
            }
        }
        carry = counted.saturating_sub(units);
        broken |= carry > 0;
        spans.push(if broken { (0, BROKEN) } else { (start as u32, (at - start) as i32) });
    }
}

enum Read<'a> {
    Text(&'a str),
    Absent,
    Null,
    Number,
    /// Another kind of value, or a string too long for any field.
    Unusual,
    /// A string the text does not hold exactly: only `decide` can tell what it was.
    Broken,
    /// The name of an event type or status, by index (see [`KNOWN`]).
    Known(usize),
}

struct Item<'a> {
    text: &'a str,
    spans: &'a [(u32, i32)],
    revision: f64,
    layout: Layout,
}

impl<'a> Item<'a> {
    fn read(&self, entry: usize) -> Read<'a> {
        match self.spans[entry] {
            (start, len) if len >= 0 => {
                let start = start as usize;
                match self.text.get(start..start + len as usize) {
                    Some(text) => Read::Text(text),
                    None => Read::Broken,
                }
            }
            (_, ABSENT) => Read::Absent,
            (_, NULL) => Read::Null,
            (_, NUMBER) => Read::Number,
            (_, OTHER | TOO_LONG) => Read::Unusual,
            (_, tag) if tag <= KNOWN => Read::Known((KNOWN - tag) as usize),
            _ => Read::Broken,
        }
    }

    /// Both entries are the one string at one place in the text (a SAME entry).
    fn same(&self, entry: usize, other: usize) -> bool {
        let (a, b) = (self.spans[entry], self.spans[other]);
        a.1 >= 0 && a == b
    }

    fn text(&self, entry: usize) -> Option<&'a str> {
        match self.read(entry) {
            Read::Text(text) => Some(text),
            _ => None,
        }
    }
}

struct Answered {
    outcome: i32,
    rule: usize,
    state: usize,
    event_type: usize,
    expect_revision: u64,
    revision: u64,
}

/// One item, as `decide_valid` decides it, or `None` where `decide` must.
/// The steps follow `decide`'s so the two are read side by side.
fn decide_item(
    rule_set: &RuleSet,
    item: &Item,
    header: i32,
    fingerprint: &mut [u8],
    skeletons: &[Vec<(String, Slot)>],
    canonical: &mut String,
) -> Option<Answered> {
    let layout = item.layout;
    // validate
    let event_id = item.text(layout.event(0)).filter(|t| FieldKind::Text.accepts(t))?;
    let event_type = match item.read(layout.event(1)) {
        Read::Text(name) => rule_set.event_index(name)?,
        // As `decide` reads it: a name longer than any field is refused before it is looked up.
        Read::Known(i) if rule_set.events.get(i).is_some_and(|e| fits(&e.name)) => i,
        _ => return None,
    };
    let workflow_id = item.text(layout.event(2)).filter(|t| FieldKind::Text.accepts(t))?;
    let declared = &rule_set.events[event_type];
    for &f in &declared.fields {
        let value = item.text(layout.event(3 + f))?;
        if !rule_set.fields[f].kind.accepts(value) {
            return None;
        }
    }
    if header & VALIDATE_ONLY != 0 {
        return Some(Answered { outcome: 0, rule: 0, state: 0, event_type, expect_revision: 0, revision: 0 });
    }
    // The event's value of a field: "" when its type does not declare it (as `value_of`).
    let value_of = |f: usize| -> &str {
        if declared.fields.contains(&f) {
            item.text(layout.event(3 + f)).unwrap_or_default()
        } else {
            ""
        }
    };

    // fingerprint: `canonical_bytes`, its constant parts written once per rule set
    canonical.clear();
    for (constant, slot) in skeletons.get(event_type)? {
        canonical.push_str(constant);
        match *slot {
            Slot::WorkflowId => write_string(canonical, workflow_id),
            // An amount is digits (it was checked): nothing to escape.
            Slot::Field(f) if rule_set.fields[f].kind == FieldKind::Units && declared.fields.contains(&f) => {
                canonical.push('"');
                canonical.push_str(value_of(f));
                canonical.push('"');
            }
            Slot::Field(f) => write_string(canonical, value_of(f)),
            Slot::End => {}
        }
    }
    let digest = Sha256::digest(canonical.as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    fingerprint[..PREFIX.len()].copy_from_slice(PREFIX.as_bytes());
    for (i, b) in digest.iter().enumerate() {
        fingerprint[PREFIX.len() + 2 * i] = HEX[(b >> 4) as usize];
        fingerprint[PREFIX.len() + 2 * i + 1] = HEX[(b & 0xf) as usize];
    }

    if header & HAS_RECEIPT != 0 {
        // Only a string is compared (as `decide` does); a broken one may have been anything.
        match item.read(layout.receipt(0)) {
            Read::Text(stored) if stored != event_id => return None,
            Read::Broken => return None,
            _ => {}
        }
        // Equal to the fingerprint, so of its shape too.
        if item.text(layout.receipt(1))?.as_bytes() != &fingerprint[..] {
            return None;
        }
        return Some(Answered { outcome: 3, rule: 0, state: 0, event_type, expect_revision: 0, revision: 0 });
    }

    // read_workflow
    let mut state = 0;
    let mut expect_revision = 0;
    if header & HAS_WORKFLOW != 0 {
        // The very string of the event's workflowId (SAME) was checked with it.
        if !item.same(layout.workflow(0), layout.event(2)) {
            let id = item.text(layout.workflow(0)).filter(|t| FieldKind::Text.accepts(t))?;
            if id != workflow_id {
                return None;
            }
        }
        let status = match item.read(layout.workflow(1)) {
            Read::Text(name) => rule_set.status_index(name)?,
            Read::Known(i) if i < rule_set.statuses.len() => i,
            _ => return None,
        };
        if !FieldKind::Text.accepts(&rule_set.statuses[status].name) {
            return None;
        }
        state = status + 1;
        if !matches!(item.read(layout.workflow(2)), Read::Number) {
            return None;
        }
        let n = item.revision;
        if !(n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&n)) {
            return None;
        }
        expect_revision = n as u64;
    }
    let rule_index = match rule_set.cells.get(event_type).and_then(|row| row.get(state)).map(Vec::as_slice) {
        Some([only]) => *only,
        _ => return None,
    };
    let rule = &rule_set.rules[rule_index];
    if state > 0 {
        for &f in &rule.guard {
            // The very string of a declared event field was checked as that field.
            if declared.fields.contains(&f) && item.same(layout.workflow(3 + f), layout.event(3 + f)) {
                continue;
            }
            let recorded = match item.read(layout.workflow(3 + f)) {
                Read::Absent | Read::Null => return None,
                Read::Text(text) if rule_set.fields[f].kind.accepts(text) => text,
                _ => return None,
            };
            if recorded != value_of(f) {
                return None;
            }
        }
    }
    let (outcome, revision) = match &rule.answer {
        Answer::Fail { .. } => return None,
        Answer::AlreadyApplied => (1, expect_revision),
        Answer::Stale => (2, expect_revision),
        Answer::Applied(transition) => {
            let revision = expect_revision.checked_add(transition.revision_step).filter(|r| *r <= MAX_SAFE_INTEGER)?;
            (0, revision)
        }
    };
    Some(Answered { outcome, rule: rule_index, state, event_type, expect_revision, revision })
}

/// Whether `decide`'s reader takes the string at all: at most MAX_TEXT_BYTES UTF-16 units.
fn fits(text: &str) -> bool {
    text.len() <= MAX_TEXT_BYTES || text.encode_utf16().count() <= MAX_TEXT_BYTES
}

/// What the host needs once per rule set to lay items out and read answers:
/// field names, event types with their declared fields and the fields any of
/// their rules guard (the only workflow fields worth reading), status names.
pub fn layout_json(rule_set: &RuleSet) -> Value {
    let events: Vec<Value> = rule_set
        .events
        .iter()
        .enumerate()
        .map(|(e, event)| {
            let mut guards: Vec<usize> = Vec::new();
            for state in 1..rule_set.state_count() {
                for &r in &rule_set.cells[e][state] {
                    for &f in &rule_set.rules[r].guard {
                        if !guards.contains(&f) {
                            guards.push(f);
                        }
                    }
                }
            }
            guards.sort_unstable();
            json!({ "type": event.name, "fields": event.fields, "guards": guards })
        })
        .collect();
    json!({
        "fields": rule_set.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        "statuses": rule_set.statuses.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        "events": events,
        "outcomes": OUTCOMES,
        "ruleSet": { "id": rule_set.id, "version": rule_set.version, "hash": rule_set.hash },
        "entries": Layout::new(rule_set).entries(),
    })
}

/// Value sources in a template: `[key, kind, arg]`.
pub const CONSTANT: u8 = 0;
pub const REVISION: u8 = 1;
pub const EVENT_FIELD: u8 = 2;
pub const REMOVED: u8 = 3;

/// The write a rule makes for one event type, as `apply` builds it, with each
/// value replaced by where it comes from: `{"set": [[key, kind, arg], ...],
/// "outbox": [{"type", "prefix", "recurring", "payload": [[key, kind, arg]]}]}`.
/// Keys are in the order `decide`'s maps serialise them. `None` for a rule
/// that does not apply a transition.
pub fn template(rule_set: &RuleSet, rule: usize, event_type: usize) -> Option<Value> {
    let Answer::Applied(transition) = &rule_set.rules.get(rule)?.answer else { return None };
    let declared = &rule_set.events.get(event_type)?.fields;
    let from_event = |f: usize| -> Value {
        if declared.contains(&f) {
            json!([EVENT_FIELD, f])
        } else {
            json!([CONSTANT, ""])
        }
    };
    // The same inserts as `apply`, into the same map type: same order, same overwrites.
    let mut set = Map::new();
    set.insert("status".into(), json!([CONSTANT, rule_set.statuses[transition.to].name]));
    set.insert("revision".into(), json!([REVISION, 0]));
    for &f in &transition.record {
        set.insert(rule_set.fields[f].name.clone(), from_event(f));
    }
    for &f in &transition.clear {
        set.insert(rule_set.fields[f].name.clone(), json!([REMOVED, 0]));
    }
    let entries = |map: Map<String, Value>| -> Vec<Value> {
        map.into_iter()
            .map(|(key, source)| json!([key, source[0], source[1]]))
            .collect()
    };
    let outbox: Vec<Value> = transition
        .emit
        .iter()
        .map(|emit| {
            let mut payload = Map::new();
            for &f in &emit.payload {
                payload.insert(rule_set.fields[f].name.clone(), from_event(f));
            }
            json!({
                "type": emit.operation_type,
                "prefix": format!("{}:", emit.id_template.name),
                "recurring": emit.id_template.recurring,
                "payload": entries(payload),
            })
        })
        .collect();
    Some(json!({ "set": entries(set), "outbox": outbox }))
}
