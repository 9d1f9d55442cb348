//! The packed input: the one representation the decider reads.
//!
//! A host lays out everything a batch of decisions may read in three regions
//! and hands them over in one call, instead of one crossing per property:
//!
//! - `text`: the UTF-8 of every string, in the order of their entries;
//! - `entries`: per item, a fixed row of `i32` slots (see [`Layout`]): a
//!   string's length (in UTF-16 units, or in bytes when the host says the
//!   text is ASCII) or a tag saying what else the value was;
//! - `numbers`: the value of every [`NUMBER`] entry, in entry order.
//!
//! A tag is a constant ([`ABSENT`] … [`SAME`]) or a base minus a payload:
//! `OTHER - k` (a value of kind [`KINDS`]`[k]`), `KNOWN - i` (the rule set's
//! event type or status `i`, named by index instead of laid out as text),
//! `UNREADABLE - n` (reading the property threw; the next `n` units of text
//! say why). The host never runs a rule: it says what each value was, and the
//! decider answers every input, errors included, exactly as one path.
//!
//! Values that are objects are laid out by their kind only (no rule reads
//! into one), with one exception: a rule set that keeps several facts per
//! workflow (`facts`) has one more workflow slot, last, for its facts map,
//! which the host lays out as its JSON text (as it lays out a receipt's
//! result) for fact events only; the decider parses and checks it there.
//! `layout_json` is how a host learns all of it: it repeats no constant.

use serde_json::{Map, Value};

use crate::field::MAX_TEXT_BYTES;
use crate::input::{Input, Source};
use crate::json::text::Writer;
use crate::ruleset::RuleSet;

/// The property is missing (or `undefined`).
pub const ABSENT: i32 = -1;
pub const NULL: i32 = -2;
/// A number: its value is the next one in the numbers region.
pub const NUMBER: i32 = -3;
/// A string longer than its slot takes, left out of the text.
pub const TOO_LONG: i32 = -4;
/// A string with a lone surrogate, left out of the text.
pub const ILL_FORMED: i32 = -5;
/// The very string of the event's matching slot (see [`Layout::same_as`]), laid out once.
pub const SAME: i32 = -6;
/// `OTHER - k`: a value of kind `KINDS[k]`.
pub const OTHER: i32 = -16;
/// `KNOWN - i`: the rule set's event type `i` (in an event's `type`) or
/// status `i` (in a workflow's `status`).
pub const KNOWN: i32 = -64;
const MAX_KNOWN: i32 = 65_535;
/// `UNREADABLE - n`: reading threw; the next `n` units of text are the message.
pub const UNREADABLE: i32 = -(1 << 20);
pub const MAX_MESSAGE_UNITS: i32 = 1024;
/// Set by [`locate`] only: the text does not hold what the entry says.
const BROKEN: i32 = i32::MIN;

/// The kinds of value that are neither a string, a number, null nor missing.
pub const KINDS: [&str; 7] = ["boolean", "bigint", "symbol", "function", "array", "object", "unknown"];

/// What the host was handed as an item's event, receipt or workflow: the
/// header holds one code per argument, four bits each (event, receipt,
/// workflow). `ARG_OTHER + k` is a value of kind `KINDS[k]`.
pub const ARG_OBJECT: i32 = 0;
pub const ARG_MISSING: i32 = 1;
pub const ARG_NULL: i32 = 2;
pub const ARG_STRING: i32 = 3;
/// A Buffer, typed array, DataView or ArrayBuffer.
pub const ARG_BINARY: i32 = 4;
pub const ARG_OTHER: i32 = 5;
pub const ARG_BITS: u32 = 4;

/// The longest stored `result` read back (JSON text, in bytes here and in
/// UTF-16 units for the host, which cuts longer ones): far more than 32
/// operation ids of 512 bytes each, far less than anything that could hurt.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// The most entries a workflow's facts map may hold, and the longest JSON
/// text of it (bytes here; UTF-16 units for the host, which cuts longer ones).
pub const MAX_FACTS: usize = 64;
pub const MAX_FACTS_BYTES: usize = 64 * 1024;

/// Event slots, after the header.
pub const EVENT_ID: usize = 0;
pub const EVENT_TYPE: usize = 1;
pub const EVENT_WORKFLOW_ID: usize = 2;
/// Receipt slots.
pub const RECEIPT_EVENT_ID: usize = 0;
pub const RECEIPT_FINGERPRINT: usize = 1;
pub const RECEIPT_RESULT: usize = 2;
pub const RECEIPT_OUTCOME: usize = 3;
pub const RECEIPT_RECORDED_AT: usize = 4;
const RECEIPT_SLOTS: [&str; 5] = ["eventId", "fingerprint", "result", "outcome", "recordedAt"];
/// Workflow slots.
pub const WORKFLOW_ID: usize = 0;
pub const WORKFLOW_STATUS: usize = 1;
pub const WORKFLOW_REVISION: usize = 2;

/// Where an item's slots are. `F` is the rule set's field count:
/// `0` header; event: eventId, type, workflowId, then every field in the
/// rule set's order; receipt: eventId, fingerprint, result, outcome,
/// recordedAt; workflow: id, status, revision, then every field.
/// A rule set with `facts` has one slot more, last: the workflow's facts
/// map (`workflow[facts.name]`) as its JSON text.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub fields: usize,
    pub facts: bool,
}

impl Layout {
    pub fn new(rule_set: &RuleSet) -> Layout {
        Layout { fields: rule_set.fields.len(), facts: rule_set.facts().is_some() }
    }
    pub fn entries(self) -> usize {
        12 + 2 * self.fields + usize::from(self.facts)
    }
    /// The workflow's facts map (only in a layout with `facts`).
    pub fn workflow_facts(self) -> usize {
        12 + 2 * self.fields
    }
    pub fn event(self, k: usize) -> usize {
        1 + k
    }
    /// The event's slot for rule-set field `f`.
    pub fn event_field(self, f: usize) -> usize {
        4 + f
    }
    pub fn receipt(self, k: usize) -> usize {
        4 + self.fields + k
    }
    pub fn workflow(self, k: usize) -> usize {
        9 + self.fields + k
    }
    pub fn workflow_field(self, f: usize) -> usize {
        12 + self.fields + f
    }
    /// The event slot a slot may be [`SAME`] as: the receipt's eventId as the
    /// event's, the workflow's id as the event's workflowId, a workflow field
    /// as the event's same field.
    pub fn same_as(self, slot: usize) -> Option<usize> {
        if slot == self.receipt(RECEIPT_EVENT_ID) {
            Some(self.event(EVENT_ID))
        } else if slot == self.workflow(WORKFLOW_ID) {
            Some(self.event(EVENT_WORKFLOW_ID))
        } else if slot >= self.workflow_field(0) && slot < self.workflow_field(0) + self.fields {
            Some(self.event_field(slot - self.workflow_field(0)))
        } else {
            None
        }
    }
}

/// What a host laid out.
#[derive(Clone, Copy)]
pub struct Packed<'a> {
    pub text: &'a str,
    pub entries: &'a [i32],
    pub numbers: &'a [f64],
    /// String lengths are in bytes (the host saw as many bytes as UTF-16
    /// units, or packed UTF-8 itself), not UTF-16 units.
    pub byte_lengths: bool,
}

impl<'a> Packed<'a> {
    /// The regions as laid out; text that is not UTF-8 (never from a host
    /// that encodes strings) holds no string.
    pub fn new(text: &'a [u8], entries: &'a [i32], numbers: &'a [f64], byte_lengths: bool) -> Packed<'a> {
        Packed { text: std::str::from_utf8(text).unwrap_or(""), entries, numbers, byte_lengths }
    }
}

/// Per entry: a string's byte offset and length, a number's index and
/// [`NUMBER`], an unreadable's message offset and `UNREADABLE - bytes`, or
/// `(0, tag)`.
pub type Spans = Vec<(u32, i32)>;

/// Resolves every entry of `count` items of `per_item` entries to
/// [`Spans`]; `same_as` says which earlier slot of its item a [`SAME`] entry
/// repeats. A string whose units end inside a character is one half of a
/// surrogate pair split across two strings (a lone high surrogate, then a
/// string that starts with a lone low one: together they encoded as a pair),
/// so both are [`ILL_FORMED`]. Any other U+FFFD in the text is one the host
/// was given: it checks that every string it laid out is well formed.
pub fn locate(
    packed: &Packed,
    per_item: usize,
    count: usize,
    same_as: impl Fn(usize) -> Option<usize>,
    spans: &mut Spans,
) {
    spans.clear();
    let total = (count * per_item).min(packed.entries.len());
    spans.reserve(total);
    let text = packed.text;
    let mut at = 0usize;
    let mut number = 0usize;
    // Units of the next string already consumed by a pair that began in the previous one.
    let mut carry = 0usize;
    // The entry's place in its item, counted rather than divided for.
    let mut within = per_item - 1;
    for (index, &entry) in packed.entries[..total].iter().enumerate() {
        within = if within + 1 == per_item { 0 } else { within + 1 };
        // An item's first entry is its header, not a value.
        if within == 0 {
            spans.push((0, entry));
            continue;
        }
        let (units, unreadable) = if entry >= 0 {
            (entry as usize, false)
        } else if (UNREADABLE - MAX_MESSAGE_UNITS..=UNREADABLE).contains(&entry) {
            ((UNREADABLE - entry) as usize, true)
        } else if entry == SAME {
            // The slots it may repeat come first: their spans are known.
            let span = match same_as(within) {
                Some(slot) if slot < within => spans[index - within + slot],
                _ => (0, BROKEN),
            };
            spans.push(span);
            continue;
        } else if entry == NUMBER {
            spans.push(if number < packed.numbers.len() { (number as u32, NUMBER) } else { (0, BROKEN) });
            number += 1;
            continue;
        } else {
            spans.push((0, entry));
            continue;
        };
        let start = at;
        let mut split = carry > 0;
        if packed.byte_lengths {
            carry = 0;
            at += units;
            if at > text.len() || !text.is_char_boundary(at) {
                at = at.min(text.len());
                spans.push((0, BROKEN));
                continue;
            }
        } else {
            let mut counted = carry;
            let mut chars = text[at..].chars();
            while counted < units {
                match chars.next() {
                    Some(c) => {
                        counted += c.len_utf16();
                        at += c.len_utf8();
                    }
                    None => break,
                }
            }
            if counted < units {
                carry = 0;
                spans.push((0, BROKEN));
                continue;
            }
            carry = counted - units;
            split |= carry > 0;
        }
        let len = (at - start) as i32;
        spans.push(match (split, unreadable) {
            (true, _) => (0, ILL_FORMED),
            (false, false) => (start as u32, len),
            (false, true) => (start as u32, UNREADABLE - len),
        });
    }
}

/// One item of a located batch: its slots as values.
#[derive(Clone, Copy)]
pub struct Item<'a> {
    text: &'a str,
    spans: &'a [(u32, i32)],
    numbers: &'a [f64],
}

impl<'a> Item<'a> {
    /// Item `i` of a batch `locate` resolved into `spans`.
    pub fn of(packed: &Packed<'a>, spans: &'a [(u32, i32)], per_item: usize, i: usize) -> Item<'a> {
        Item {
            text: packed.text,
            spans: spans.get(i * per_item..(i + 1) * per_item).unwrap_or(&[]),
            numbers: packed.numbers,
        }
    }

    /// What the host was handed as the event (0), the receipt (1) or the workflow (2).
    pub fn arg(&self, which: u32) -> i32 {
        (self.spans.first().map_or(0, |s| s.1) >> (which * ARG_BITS)) & ((1 << ARG_BITS) - 1)
    }

    pub fn read(&self, slot: usize) -> Input<'a> {
        let Some(&span) = self.spans.get(slot) else { return Input::Other("unknown") };
        match span {
            (start, len) if len >= 0 => {
                let start = start as usize;
                match self.text.get(start..start + len as usize) {
                    Some(text) => Input::Text(text),
                    None => Input::Other("unknown"),
                }
            }
            (_, ABSENT) => Input::Absent,
            (_, NULL) => Input::Null,
            (index, NUMBER) => Input::Number(self.numbers.get(index as usize).copied().unwrap_or(f64::NAN)),
            (_, TOO_LONG) => Input::TooLong,
            (_, ILL_FORMED) => Input::IllFormedText,
            // A message's length in bytes: at most three per unit.
            (start, tag) if (UNREADABLE - 3 * MAX_MESSAGE_UNITS..=UNREADABLE).contains(&tag) => {
                let start = start as usize;
                Input::Unreadable(self.text.get(start..start + (UNREADABLE - tag) as usize).unwrap_or(""))
            }
            (_, tag) if (OTHER - KINDS.len() as i32 + 1..=OTHER).contains(&tag) => {
                Input::Other(KINDS[(OTHER - tag) as usize])
            }
            // A name by index where no name is expected, or an entry the host cannot have meant.
            _ => Input::Other("unknown"),
        }
    }

    /// The index a [`KNOWN`] entry names, for the slots that take one.
    pub fn known(&self, slot: usize) -> Option<usize> {
        match self.spans.get(slot)?.1 {
            tag if (KNOWN - MAX_KNOWN..=KNOWN).contains(&tag) => Some((KNOWN - tag) as usize),
            _ => None,
        }
    }

    /// Both slots are the one string at one place in the text (a [`SAME`] entry).
    pub fn same(&self, slot: usize, other: usize) -> bool {
        match (self.spans.get(slot), self.spans.get(other)) {
            (Some(a), Some(b)) => a.1 >= 0 && a == b,
            _ => false,
        }
    }
}

/// A batch laid out in Rust: from JSON values (native callers, the JSON-text
/// entry point, tests), exactly as a host lays out objects. Strings are
/// copied whole: nothing here is too long to read.
#[derive(Debug, Default, Clone)]
pub struct Packer {
    pub entries: Vec<i32>,
    pub numbers: Vec<f64>,
    pub text: String,
}

impl Packer {
    pub fn packed(&self) -> Packed<'_> {
        Packed { text: &self.text, entries: &self.entries, numbers: &self.numbers, byte_lengths: true }
    }

    /// Lays out one decision's inputs: `None` for a record that is not there.
    pub fn item(
        &mut self,
        rule_set: &RuleSet,
        event: &Map<String, Value>,
        receipt: Option<&Map<String, Value>>,
        workflow: Option<&Map<String, Value>>,
    ) {
        let layout = Layout::new(rule_set);
        let none = |record: Option<&Map<String, Value>>| if record.is_some() { ARG_OBJECT } else { ARG_NULL };
        let header = ARG_OBJECT | none(receipt) << ARG_BITS | none(workflow) << (2 * ARG_BITS);
        let base = self.entries.len();
        self.entries.resize(base + layout.entries(), ABSENT);
        self.entries[base] = header;
        let fields: Vec<&str> = rule_set.fields.iter().map(|f| f.name.as_str()).collect();
        let event_slots = ["eventId", "type", "workflowId"].into_iter().chain(fields.iter().copied());
        for (k, key) in event_slots.enumerate() {
            self.value(base + layout.event(k), event.get(key));
        }
        if let Some(receipt) = receipt {
            for (k, key) in RECEIPT_SLOTS.into_iter().enumerate() {
                let value = receipt.get(key);
                match value {
                    // As a host reads a structured result: its JSON text.
                    Some(value @ (Value::Object(_) | Value::Array(_))) if k == RECEIPT_RESULT => {
                        self.string(base + layout.receipt(k), &value.to_string())
                    }
                    _ => self.value(base + layout.receipt(k), value),
                }
            }
        }
        if let Some(workflow) = workflow {
            let workflow_slots = ["id", "status", "revision"].into_iter().chain(fields.iter().copied());
            for (k, key) in workflow_slots.enumerate() {
                self.value(base + layout.workflow(k), workflow.get(key));
            }
            // The map only for an event of a fact type, as the JS host lays it out: no other decision reads it.
            let fact_event = |facts: &&crate::ruleset::Facts| {
                event
                    .get("type")
                    .and_then(Value::as_str)
                    .and_then(|t| rule_set.event_index(t))
                    .is_some_and(|e| facts.events.contains(&e))
            };
            if let Some(facts) = rule_set.facts().filter(fact_event) {
                match workflow.get(&facts.name) {
                    None | Some(Value::Null) => self.value(base + layout.workflow_facts(), workflow.get(&facts.name)),
                    // As a host reads the map: its JSON text. Anything but an
                    // object (a map stored as a string of JSON text included)
                    // is laid out as its JSON too, so the decider refuses it.
                    Some(value) => self.string(base + layout.workflow_facts(), &value.to_string()),
                }
            }
        }
    }

    /// Lays out `object`'s `keys` as one record (see [`Record`]).
    pub fn record(&mut self, object: &Map<String, Value>, keys: &[&str]) {
        let base = self.entries.len();
        self.entries.resize(base + 1 + keys.len(), ABSENT);
        self.entries[base] = 0;
        for (k, key) in keys.iter().enumerate() {
            self.value(base + 1 + k, object.get(*key));
        }
    }

    fn string(&mut self, at: usize, text: &str) {
        self.entries[at] = text.len() as i32;
        self.text.push_str(text);
    }

    fn value(&mut self, at: usize, value: Option<&Value>) {
        self.entries[at] = match value {
            None => ABSENT,
            Some(Value::String(text)) => return self.string(at, text),
            Some(Value::Null) => NULL,
            Some(Value::Number(n)) => {
                self.numbers.push(n.as_f64().unwrap_or(f64::NAN));
                NUMBER
            }
            Some(other) => {
                let kind = crate::input::from_json(other).kind();
                OTHER - KINDS.iter().position(|k| *k == kind).unwrap_or(KINDS.len() - 1) as i32
            }
        };
    }
}

/// A record of named values laid out as one item whose slots are `keys`, in
/// order (an outbox policy's options): read by name.
pub struct Record<'a> {
    keys: &'a [&'a str],
    item: Item<'a>,
}

impl<'a> Record<'a> {
    /// `None` when the entries are not one row of `keys`.
    pub fn of(packed: &Packed<'a>, keys: &'a [&'a str], spans: &'a mut Spans) -> Option<Record<'a>> {
        let per_item = 1 + keys.len();
        if packed.entries.len() != per_item {
            return None;
        }
        locate(packed, per_item, 1, |_| None, spans);
        Some(Record { keys, item: Item::of(packed, spans, per_item, 0) })
    }
}

impl Source for Record<'_> {
    fn field(&self, name: &str) -> Input<'_> {
        match self.keys.iter().position(|k| *k == name) {
            Some(k) => self.item.read(1 + k),
            None => Input::Absent,
        }
    }
}

/// What every rule set's packed input shares, so that a host repeats none
/// of the decider's constants: the tags, the kinds, the argument codes, the
/// longest string each kind of slot takes, the answer regions, and the
/// order of an outbox policy's options (laid out as one record). JSON text.
pub fn description_json() -> String {
    let mut w = Writer::default();
    w.open_object().key("tags").open_object();
    for (name, tag) in [
        ("ABSENT", ABSENT),
        ("NULL", NULL),
        ("NUMBER", NUMBER),
        ("TOO_LONG", TOO_LONG),
        ("ILL_FORMED", ILL_FORMED),
        ("SAME", SAME),
        ("OTHER", OTHER),
        ("KNOWN", KNOWN),
        ("UNREADABLE", UNREADABLE),
    ] {
        w.key(name).int(tag as i64);
    }
    w.close_object().key("kinds").strings(KINDS).key("args").open_object();
    for (name, code) in [
        ("OBJECT", ARG_OBJECT),
        ("MISSING", ARG_MISSING),
        ("NULL", ARG_NULL),
        ("STRING", ARG_STRING),
        ("BINARY", ARG_BINARY),
        ("OTHER", ARG_OTHER),
        ("bits", ARG_BITS as i32),
    ] {
        w.key(name).int(code as i64);
    }
    w.close_object().key("maxUnits").open_object();
    w.key("text").int(MAX_TEXT_BYTES as i64).key("result").int(MAX_RESULT_BYTES as i64);
    w.key("message").int(MAX_MESSAGE_UNITS as i64).close_object();
    w.key("answers");
    crate::answer::describe_answers(&mut w);
    w.key("outboxPolicyOptions").strings(crate::outbox::OPTIONS).close_object();
    w.finish()
}

/// How a host lays items out for one rule set: the slots, the rule set's
/// names, and per event type the fields it declares (laid out from the
/// event), the fields its rules guard or compare in a `when` (the only
/// workflow fields worth reading) and the members of a normalized copy. JSON text.
pub fn layout_json(rule_set: &RuleSet) -> String {
    let layout = Layout::new(rule_set);
    let mut w = Writer::default();
    w.open_object().key("entries").int(layout.entries() as i64).key("slots").open_object();
    w.key("event").int(layout.event(0) as i64).key("eventField").int(layout.event_field(0) as i64);
    w.key("receipt").int(layout.receipt(0) as i64).key("receiptKeys").strings(RECEIPT_SLOTS);
    w.key("workflow").int(layout.workflow(0) as i64).key("workflowField").int(layout.workflow_field(0) as i64);
    if layout.facts {
        w.key("workflowFacts").int(layout.workflow_facts() as i64);
    }
    w.close_object();
    if let Some(facts) = rule_set.facts() {
        // The map's data key, its key field, the event types whose items lay
        // the map out (the only ones whose decisions read it) and its bounds.
        w.key("facts").open_object();
        w.key("name").string(&facts.name).key("key").int(facts.key as i64);
        w.key("events").ints(facts.events.iter().map(|e| *e as i64));
        w.key("maxEntries").int(MAX_FACTS as i64).key("maxBytes").int(MAX_FACTS_BYTES as i64);
        w.close_object();
    }
    w.key("fields").strings(rule_set.fields.iter().map(|f| f.name.as_str()));
    w.key("statuses").strings(rule_set.statuses.iter().map(|s| s.name.as_str()));
    w.key("events").open_array();
    for (e, event) in rule_set.events.iter().enumerate() {
        // On a fact event, a fact's own fields are read from its entry, not the workflow.
        let from_entry: &[usize] = match rule_set.facts() {
            Some(facts) if facts.events.contains(&e) => &facts.record,
            _ => &[],
        };
        let mut guards: Vec<usize> = Vec::new();
        for state in 1..rule_set.state_count() {
            for &cell in &rule_set.cells[e][state] {
                for r in rule_set.answers_of(cell) {
                    let rule = &rule_set.rules[r];
                    let compared = rule.when.iter().filter_map(|c| match c {
                        crate::ruleset::Cond::Compare { workflow_field, .. } => Some(workflow_field),
                        _ => None,
                    });
                    for &f in rule.guard.iter().chain(compared) {
                        if !guards.contains(&f) && !from_entry.contains(&f) {
                            guards.push(f);
                        }
                    }
                }
            }
        }
        crate::sort::sort_by(&mut guards, &mut |a, b| a < b);
        let mut declared = event.fields.clone();
        crate::sort::sort_by(&mut declared, &mut |a, b| a < b);
        w.open_object().key("type").string(&event.name);
        w.key("fields").ints(declared.iter().map(|f| *f as i64));
        w.key("guards").ints(guards.iter().map(|f| *f as i64));
        w.key("normalized").open_array();
        for (name, slot) in crate::event::normalized_members(rule_set, e, layout) {
            w.open_array().string(&name).int(slot).close_array();
        }
        w.close_array().close_object();
    }
    w.close_array().key("ruleSet").open_object();
    w.key("id").string(&rule_set.id).key("version").int(rule_set.version as i64).key("hash").string(&rule_set.hash);
    w.close_object().close_object();
    w.finish()
}
