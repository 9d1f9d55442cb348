//! The write a rule makes for one event type, as a template: which keys the
//! workflow update sets, which operations it schedules, what their ids are
//! made of, and where each value comes from. The decider says which rule
//! applied and at which revision; the write set is this template filled in,
//! by the host (from `to_json`, the form it reads) or here (`fill`), so
//! the shape of a write set is stated once.

use serde_json::{json, Map, Value};

use crate::field::FieldValue;
use crate::json::text::Writer;
use crate::operation_id::{hashed_fact_key, MAX_OPERATION_ID_BYTES};

use crate::ruleset::{Answer, IdPart, RuleSet};

/// Every operation type a rule of `rule_set` can schedule, sorted, without
/// duplicates: what an outbox consumer serving the rule set must handle.
pub fn emitted_types(rule_set: &RuleSet) -> Vec<String> {
    let mut types: Vec<String> = rule_set
        .rules
        .iter()
        .filter_map(|rule| match &rule.answer {
            Answer::Applied(transition) => Some(transition),
            _ => None,
        })
        .flat_map(|transition| transition.emit.iter().map(|emit| emit.operation_type.clone()))
        .collect();
    types.sort();
    types.dedup();
    types
}

/// Where a value of a write comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Constant(String),
    /// The workflow's revision after the write.
    Revision,
    /// The event's value of a rule-set field.
    EventField(usize),
    /// `null`: the field is removed.
    Removed,
    WorkflowId,
    /// The event's value of the fact key field (an index), escaped for an
    /// operation id (`%` as `%25`, `:` as `%3A`).
    FactKey(usize),
    /// The new facts map: the workflow's (`{}` without one) with the event's
    /// entry replaced by `{event, <record fields>: the event's values,
    /// operations: the old ones and these, sorted}` (`operations` left out
    /// when empty).
    Facts(FactsUpdate),
}

/// What an applied answer to a fact event writes into its entry.
#[derive(Debug, Clone, PartialEq)]
pub struct FactsUpdate {
    /// The key field's index.
    pub key: usize,
    /// The event type's name.
    pub event: String,
    /// The recorded fields: name and index.
    pub record: Vec<(String, usize)>,
    /// The per-fact operation names this answer emits, sorted, no duplicates.
    pub operations: Vec<String>,
    /// The fact is left untracked: its entry is removed, not written.
    pub untracked: bool,
}

/// The kinds of [`Source`] in the host's form: `[kind, arg]`.
pub const CONSTANT: u8 = 0;
pub const REVISION: u8 = 1;
pub const EVENT_FIELD: u8 = 2;
pub const REMOVED: u8 = 3;
pub const WORKFLOW_ID: u8 = 4;
pub const FACT_KEY: u8 = 5;
/// `arg`: `{"key": field, "event": name, "record": [[name, field]], "operations": [names], "untracked": bool}`.
pub const FACTS: u8 = 6;

#[derive(Debug, Clone)]
pub struct Operation {
    pub operation_type: String,
    /// The id's parts, concatenated.
    pub id: Vec<Source>,
    pub payload: Vec<(String, Source)>,
    /// Written only where no operation of the id exists: a per-fact
    /// operation of an answer that leaves its fact untracked.
    pub if_absent: bool,
}

#[derive(Debug, Clone)]
pub struct Write {
    /// Keys in the order a JSON object of them serialises.
    pub set: Vec<(String, Source)>,
    pub outbox: Vec<Operation>,
}

/// The template of `rule` for `event_type`; `None` for a rule that applies no transition.
pub fn template(rule_set: &RuleSet, rule: usize, event_type: usize) -> Option<Write> {
    let Answer::Applied(transition) = &rule_set.rules.get(rule)?.answer else { return None };
    let declared = &rule_set.events.get(event_type)?.fields;
    // A field the event type does not carry is recorded as "".
    let from_event =
        |f: usize| if declared.contains(&f) { Source::EventField(f) } else { Source::Constant(String::new()) };
    // Into a JSON object's map: its order, and a later insert overwrites an earlier one.
    let mut set: Map<String, Value> = Map::new();
    let mut sources: Vec<Source> = Vec::new();
    let mut put = |map: &mut Map<String, Value>, key: &str, from: Source| {
        sources.push(from);
        map.insert(key.to_string(), json!(sources.len() - 1));
    };
    put(&mut set, "status", Source::Constant(rule_set.statuses[transition.to].name.clone()));
    put(&mut set, "revision", Source::Revision);
    for &f in &transition.record {
        put(&mut set, &rule_set.fields[f].name, from_event(f));
    }
    for &f in &transition.clear {
        put(&mut set, &rule_set.fields[f].name, Source::Removed);
    }
    if let Some(facts) = rule_set.facts().filter(|f| f.events.contains(&event_type)) {
        let mut operations: Vec<String> =
            transition.emit.iter().filter(|e| e.id_template.per_fact).map(|e| e.id_template.name.clone()).collect();
        operations.sort();
        operations.dedup();
        let update = FactsUpdate {
            key: facts.key,
            event: rule_set.events[event_type].name.clone(),
            record: facts.record.iter().map(|f| (rule_set.fields[*f].name.clone(), *f)).collect(),
            operations,
            untracked: transition.untracked,
        };
        put(&mut set, &facts.name, Source::Facts(update));
    }
    let mut outbox = Vec::new();
    let mut payloads = Vec::new();
    for emit in &transition.emit {
        let mut payload = Map::new();
        for &f in &emit.payload {
            put(&mut payload, &rule_set.fields[f].name, from_event(f));
        }
        payloads.push(payload);
        let id = emit
            .id_template
            .parts()
            .into_iter()
            .map(|part| match part {
                IdPart::Constant(text) => Source::Constant(text),
                IdPart::Revision => Source::Revision,
                IdPart::WorkflowId => Source::WorkflowId,
                IdPart::FactKey => Source::FactKey(rule_set.facts().map_or(0, |f| f.key)),
            })
            .collect();
        let if_absent = transition.untracked && emit.id_template.per_fact;
        outbox.push(Operation { operation_type: emit.operation_type.clone(), id, payload: Vec::new(), if_absent });
    }
    let entries = |map: Map<String, Value>| -> Vec<(String, Source)> {
        map.into_iter().map(|(key, at)| (key, sources[at.as_u64().unwrap_or(0) as usize].clone())).collect()
    };
    for (operation, payload) in outbox.iter_mut().zip(payloads) {
        operation.payload = entries(payload);
    }
    Some(Write { set: entries(set), outbox })
}

/// A source's `kind, arg` (two values of the array it is written in).
fn write_source(w: &mut Writer, from: &Source) {
    match from {
        Source::Constant(text) => w.int(CONSTANT as i64).string(text),
        Source::Revision => w.int(REVISION as i64).int(0),
        Source::EventField(f) => w.int(EVENT_FIELD as i64).int(*f as i64),
        Source::Removed => w.int(REMOVED as i64).int(0),
        Source::WorkflowId => w.int(WORKFLOW_ID as i64).int(0),
        Source::FactKey(f) => w.int(FACT_KEY as i64).int(*f as i64),
        Source::Facts(update) => {
            w.int(FACTS as i64).open_object();
            w.key("key").int(update.key as i64).key("event").string(&update.event).key("record").open_array();
            for (name, f) in &update.record {
                w.open_array().string(name).int(*f as i64).close_array();
            }
            w.close_array().key("operations").strings(update.operations.iter().map(String::as_str));
            w.key("untracked").boolean(update.untracked);
            w.close_object()
        }
    };
}

/// `[[key, kind, arg], ...]`.
fn write_entries(w: &mut Writer, list: &[(String, Source)]) {
    w.open_array();
    for (key, from) in list {
        w.open_array().string(key);
        write_source(w, from);
        w.close_array();
    }
    w.close_array();
}

impl Write {
    /// The host's form, as JSON text: `{"set": [[key, kind, arg]], "outbox":
    /// [{"type", "id": [[kind, arg]], "payload": [[key, kind, arg]]}]}`.
    pub fn to_json(&self) -> String {
        let mut w = Writer::default();
        w.open_object().key("set");
        write_entries(&mut w, &self.set);
        w.key("outbox").open_array();
        for op in &self.outbox {
            w.open_object().key("type").string(&op.operation_type).key("id").open_array();
            for part in &op.id {
                w.open_array();
                write_source(&mut w, part);
                w.close_array();
            }
            w.close_array().key("payload");
            write_entries(&mut w, &op.payload);
            w.key("ifAbsent").boolean(op.if_absent);
            w.close_object();
        }
        w.close_array().close_object();
        w.finish()
    }
}

/// The values the template is filled with.
pub struct Filling<'a, F: Fn(usize) -> FieldValue<'a>> {
    pub workflow_id: &'a str,
    pub revision: u64,
    pub value_of: F,
    /// The workflow's facts map as read (`None`: none, or a rule set without facts).
    pub facts: Option<&'a Map<String, Value>>,
}

impl<'a, F: Fn(usize) -> FieldValue<'a>> Filling<'a, F> {
    pub fn value(&self, from: &Source) -> Value {
        match from {
            Source::Constant(text) => Value::String(text.clone()),
            Source::Revision => Value::from(self.revision),
            // A count is recorded and sent as a number, every other value as a string.
            Source::EventField(f) => (self.value_of)(*f).to_json(),
            Source::Removed => Value::Null,
            Source::WorkflowId => Value::String(self.workflow_id.to_string()),
            Source::FactKey(f) => Value::String(crate::ruleset::escape_fact_key(&(self.value_of)(*f).display())),
            Source::Facts(update) => {
                let key = (self.value_of)(update.key).display();
                let mut map = self.facts.cloned().unwrap_or_default();
                if update.untracked {
                    map.remove(&key);
                    return Value::Object(map);
                }
                let mut operations: Vec<String> = update.operations.clone();
                if let Some(old) = map.get(&key).and_then(|e| e.get("operations")).and_then(Value::as_array) {
                    operations.extend(old.iter().filter_map(Value::as_str).map(str::to_string));
                }
                operations.sort();
                operations.dedup();
                let mut entry = Map::new();
                entry.insert("event".into(), Value::String(update.event.clone()));
                for (name, f) in &update.record {
                    entry.insert(name.clone(), (self.value_of)(*f).to_json());
                }
                if !operations.is_empty() {
                    entry.insert("operations".into(), Value::from(operations));
                }
                map.insert(key, Value::Object(entry));
                Value::Object(map)
            }
        }
    }

    pub fn map(&self, entries: &[(String, Source)]) -> Map<String, Value> {
        entries.iter().map(|(key, from)| (key.clone(), self.value(from))).collect()
    }

    /// An operation id: its parts concatenated; when that is longer than
    /// [`MAX_OPERATION_ID_BYTES`], the same with the fact key hashed
    /// (`crate::operation_id` says why that always fits).
    pub fn text(&self, parts: &[Source]) -> String {
        let full = self.concatenated(parts, false);
        if full.len() <= MAX_OPERATION_ID_BYTES {
            return full;
        }
        self.concatenated(parts, true)
    }

    fn concatenated(&self, parts: &[Source], hash_fact_key: bool) -> String {
        let mut out = String::new();
        for part in parts {
            match (part, hash_fact_key) {
                (Source::FactKey(f), true) => out.push_str(&hashed_fact_key(&(self.value_of)(*f).display())),
                _ => match self.value(part) {
                    Value::String(text) => out.push_str(&text),
                    other => out.push_str(&other.to_string()),
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod emitted_tests {
    use super::emitted_types;
    use crate::ruleset::RuleSet;

    #[test]
    fn the_default_rule_set_emits_four_operation_types() {
        let rules = RuleSet::builtin("deposit-swap").unwrap();
        assert_eq!(emitted_types(rules), ["OPEN_REVIEW", "REVIEW_DEPOSIT", "SEND_PAYOUT", "START_EXCHANGE"]);
    }
}
