//! Structural checks of a rule-set definition. Every refusal names the path of
//! the bad part (`rules[4].then.to`) so an author can find it.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{
    Answer, Comparison, Cond, Emit, EventType, Facts, FailCode, Field, Hole, Rule, RuleSet, Status, Template,
    Transition,
};
use crate::error::{default_disposition, truncate, Disposition, Error, Result};
use crate::field::FieldKind;
use crate::jcs::{canonical_json_with, hex, whole_numbers_only, write_string, MAX_SAFE_INTEGER};
use crate::limits::{
    check_depth, exceeded, MAX_EMITS_PER_RULE, MAX_EVENT_TYPES, MAX_FIELDS, MAX_LIST_NAMES, MAX_RULES, MAX_STATUSES,
    MAX_TABLE_ENTRIES,
};

/// How the decision table names "no workflow yet".
pub const NONE: &str = "(none)";
/// `on` and `in` may say "*" for every event type or every status.
const ANY: &str = "*";
/// Names an event type, status or field may not take: they are the event's own members.
const RESERVED_FIELDS: &[&str] = &["type", "eventId", "workflowId", "id", "status", "revision"];
/// Names every JS object inherits from `Object.prototype` (those that pass the
/// name shape; `__proto__` and the `__define…__` ones already fail it). Hosts
/// and stores keep fields as object keys: such a name invites a read through
/// the prototype chain or a write that changes an object's prototype.
const PROTOTYPE_NAMES: &[&str] = &[
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
];
const MAX_TRACKED: usize = 32;

pub(super) fn invalid(path: &str, reason: impl Into<String>) -> Error {
    Error::RuleSetInvalid { path: path.to_string(), reason: reason.into(), report: None }
}

pub(super) fn object<'a>(value: &'a Value, path: &str, allowed: &[&str]) -> Result<&'a Map<String, Value>> {
    let map = value.as_object().ok_or_else(|| invalid(path, "must be an object"))?;
    if let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(&format!("{path}.{key}"), format!("is not a known key (known: {})", allowed.join(", "))));
    }
    Ok(map)
}

fn required<'a>(map: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a Value> {
    map.get(key).ok_or_else(|| invalid(&format!("{path}.{key}"), "is required"))
}

fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str> {
    value.as_str().ok_or_else(|| invalid(path, "must be a string"))
}

fn array<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>> {
    value.as_array().ok_or_else(|| invalid(path, "must be an array"))
}

fn boolean(map: &Map<String, Value>, key: &str, path: &str) -> Result<bool> {
    match map.get(key) {
        None => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| invalid(&format!("{path}.{key}"), "must be true or false")),
    }
}

pub(super) fn name(value: &Value, path: &str, upper: bool) -> Result<String> {
    let text = string(value, path)?;
    let ok = !text.is_empty()
        && text.len() <= 64
        && text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let ok = ok && (!upper || text.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'));
    if !ok {
        let shape = if upper { "UPPER_SNAKE_CASE" } else { "a letter, then letters, digits, '_' or '-'" };
        return Err(invalid(path, format!("{text:?} is not a valid name ({shape}, at most 64 characters)")));
    }
    Ok(text.to_string())
}

/// Linear: a hash set, not a scan of every earlier name.
fn unique<T>(names: &[T], key: impl Fn(&T) -> &str, path: &str) -> Result<()> {
    let mut seen = HashSet::with_capacity(names.len());
    for (i, a) in names.iter().enumerate() {
        if !seen.insert(key(a)) {
            return Err(invalid(&format!("{path}[{i}]"), format!("{:?} is declared twice", key(a))));
        }
    }
    Ok(())
}

/// An array that may hold at most `max` entries, refused before any entry is read.
fn bounded<'a>(value: &'a Value, path: &str, limit: &str, max: usize, what: &str) -> Result<&'a Vec<Value>> {
    let items = array(value, path)?;
    if items.len() > max {
        return Err(exceeded(path, limit, max, what, items.len()));
    }
    Ok(items)
}

/// Status and event-type names to their indices, so a rule's `on` and `in`
/// lists are resolved in constant time per name.
struct Names<'a> {
    statuses: HashMap<&'a str, usize>,
    events: HashMap<&'a str, usize>,
}

pub fn load(definition: &Value) -> Result<RuleSet> {
    check_depth(definition)?;
    let root = object(
        definition,
        "$",
        &[
            "id",
            "version",
            "description",
            "statuses",
            "fields",
            "events",
            "rules",
            "otherwise",
            "order",
            "facts",
            "invariants",
        ],
    )?;
    let id = name(required(root, "id", "$")?, "$.id", false)?;
    let version = match required(root, "version", "$")?.as_u64() {
        Some(v) if (1..=MAX_SAFE_INTEGER).contains(&v) => v,
        _ => return Err(invalid("$.version", "must be a positive integer")),
    };
    let description = match root.get("description") {
        None => None,
        Some(v) => Some(string(v, "$.description")?.to_string()),
    };

    let statuses = load_statuses(required(root, "statuses", "$")?)?;
    let fields = load_fields(root.get("fields"))?;
    let events = load_events(required(root, "events", "$")?, &fields)?;

    let mut rule_set = RuleSet {
        id,
        version,
        description,
        hash: String::new(),
        definition: definition.clone(),
        cells: vec![vec![Vec::new(); statuses.len() + 1]; events.len()],
        statuses,
        fields,
        events,
        rules: Vec::new(),
        order: None,
        facts: None,
        invariants: Vec::new(),
    };
    if let Some(facts) = root.get("facts") {
        rule_set.facts = Some(load_facts(&rule_set, facts)?);
    }

    let rules = bounded(required(root, "rules", "$")?, "$.rules", "maxRules", MAX_RULES, "rules")?;
    let statuses = rule_set.statuses.clone();
    let events = rule_set.events.clone();
    let names = Names {
        statuses: statuses.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect(),
        events: events.iter().enumerate().map(|(i, e)| (e.name.as_str(), i)).collect(),
    };
    let mut table_entries = 0;
    let mut emitted_names = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        load_rule(&mut rule_set, &names, &mut table_entries, &mut emitted_names, rule, &format!("$.rules[{i}]"))?;
    }
    // `{"emitted": name}` names a per-fact operation some rule emits.
    for (path, wanted) in emitted_names {
        let per_fact = rule_set.rules.iter().any(|r| match &r.answer {
            Answer::Applied(t) => t.emit.iter().any(|e| e.id_template.per_fact && e.id_template.name == wanted),
            _ => false,
        });
        if !per_fact {
            return Err(invalid(
                &path,
                format!(
                    "{:?} is not the name of a per-fact operation (<name>:{{<key>}}:{{workflowId}}) of this rule set",
                    truncate(&wanted)
                ),
            ));
        }
    }
    if let Some(otherwise) = root.get("otherwise") {
        let context = RuleContext { carried: &[], on_facts: false, stay: None };
        let answer = load_answer(&rule_set, otherwise, "$.otherwise", &context)?;
        if matches!(answer, Answer::Applied(_)) {
            return Err(invalid("$.otherwise", "must not be 'applied': a transition needs an explicit row"));
        }
        let index = rule_set.rules.len();
        rule_set.rules.push(Rule {
            origin: "otherwise".into(),
            guard: Vec::new(),
            answer,
            when: Vec::new(),
            otherwise: None,
        });
        for row in rule_set.cells.iter_mut() {
            for cell in row.iter_mut().filter(|c| c.is_empty()) {
                cell.push(index);
            }
        }
    }

    let tracked = rule_set.rules.iter().filter_map(|r| match &r.answer {
        Answer::Applied(t) => Some(t.emit.len()),
        _ => None,
    });
    if tracked.sum::<usize>() > MAX_TRACKED || rule_set.fields.len() > MAX_FIELDS {
        return Err(invalid("$", format!("at most {MAX_TRACKED} fields and {MAX_TRACKED} emitted operations")));
    }

    if let Some(order) = root.get("order") {
        rule_set.order = Some(super::order::load(&rule_set, order)?);
    }
    // A sequence numbers the observations of one fact: the fact events are its events.
    if let (Some(facts), Some(sequence)) = (&rule_set.facts, rule_set.order.as_ref().and_then(|o| o.sequence.as_ref()))
    {
        let mut a = facts.events.clone();
        let mut b = sequence.events.clone();
        a.sort_unstable();
        b.sort_unstable();
        a.dedup();
        b.dedup();
        if a != b {
            return Err(invalid(
                "$.order.sequence.events",
                "must be the fact events (facts.events): the sequence is numbered per fact",
            ));
        }
    }

    if let Some(invariants) = root.get("invariants") {
        rule_set.invariants = super::invariants::load(&rule_set, invariants)?;
    }

    let canonical = canonical_json_with(definition, &whole_numbers_only).map_err(|reason| invalid("$", reason))?;
    rule_set.hash = format!("sha256:{}", hex(&crate::sha256::digest(canonical.as_bytes())));
    Ok(rule_set)
}

fn load_statuses(value: &Value) -> Result<Vec<Status>> {
    let mut statuses = Vec::new();
    for (i, entry) in bounded(value, "$.statuses", "maxStatuses", MAX_STATUSES, "statuses")?.iter().enumerate() {
        let path = format!("$.statuses[{i}]");
        let map = object(entry, &path, &["name", "initial", "terminal", "description"])?;
        statuses.push(Status {
            name: name(required(map, "name", &path)?, &format!("{path}.name"), false)?,
            initial: boolean(map, "initial", &path)?,
            terminal: boolean(map, "terminal", &path)?,
        });
    }
    if statuses.is_empty() {
        return Err(invalid("$.statuses", "must declare at least one status"));
    }
    unique(&statuses, |s| &s.name, "$.statuses")?;
    Ok(statuses)
}

fn load_fields(value: Option<&Value>) -> Result<Vec<Field>> {
    let Some(value) = value else { return Ok(Vec::new()) };
    let mut fields = Vec::new();
    for (i, entry) in bounded(value, "$.fields", "maxFields", MAX_FIELDS, "fields")?.iter().enumerate() {
        let path = format!("$.fields[{i}]");
        let map = object(entry, &path, &["name", "kind", "description"])?;
        let field_name = name(required(map, "name", &path)?, &format!("{path}.name"), false)?;
        if RESERVED_FIELDS.contains(&field_name.as_str()) {
            return Err(invalid(&format!("{path}.name"), format!("{field_name:?} is reserved")));
        }
        if PROTOTYPE_NAMES.contains(&field_name.as_str()) {
            return Err(invalid(
                &format!("{path}.name"),
                format!("{field_name:?} is reserved: every JS object inherits it from Object.prototype"),
            ));
        }
        let kind_text = string(required(map, "kind", &path)?, &format!("{path}.kind"))?;
        let kind = FieldKind::parse(kind_text)
            .ok_or_else(|| invalid(&format!("{path}.kind"), "must be \"text\", \"units\" or \"count\""))?;
        fields.push(Field { name: field_name, kind });
    }
    unique(&fields, |f| &f.name, "$.fields")?;
    Ok(fields)
}

fn field_list(value: Option<&Value>, path: &str, fields: &[Field], within: Option<&[usize]>) -> Result<Vec<usize>> {
    let Some(value) = value else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    // A longer list must repeat a name; refusing it first keeps the scans below short.
    for (i, item) in bounded(value, path, "maxFields", MAX_FIELDS, "field names in one list")?.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let text = string(item, &item_path)?;
        let index = fields
            .iter()
            .position(|f| f.name == text)
            .ok_or_else(|| invalid(&item_path, format!("{text:?} is not a declared field")))?;
        if let Some(allowed) = within {
            if !allowed.contains(&index) {
                return Err(invalid(&item_path, format!("{text:?} is not carried by this event type")));
            }
        }
        if out.contains(&index) {
            return Err(invalid(&item_path, format!("{text:?} is listed twice")));
        }
        out.push(index);
    }
    Ok(out)
}

fn load_events(value: &Value, fields: &[Field]) -> Result<Vec<EventType>> {
    let mut events = Vec::new();
    for (i, entry) in bounded(value, "$.events", "maxEventTypes", MAX_EVENT_TYPES, "event types")?.iter().enumerate() {
        let path = format!("$.events[{i}]");
        let map = object(entry, &path, &["type", "fields", "identity", "description"])?;
        let event_name = name(required(map, "type", &path)?, &format!("{path}.type"), true)?;
        let carried = field_list(map.get("fields"), &format!("{path}.fields"), fields, None)?;
        let identity = match map.get("identity") {
            None => carried.clone(),
            Some(v) => field_list(Some(v), &format!("{path}.identity"), fields, Some(&carried))?,
        };
        // The fingerprint object's members sorted by name. Field names are
        // ASCII, so byte order is RFC 8785's UTF-16 order; names are unique,
        // so unstable is exact.
        let mut members: Vec<(&str, Option<Hole>)> = vec![("type", None), ("workflowId", Some(Hole::WorkflowId))];
        members.extend(identity.iter().map(|f| (fields[*f].name.as_str(), Some(Hole::Field(*f)))));
        crate::sort::sort_by(&mut members, &mut |a, b| a.0 < b.0);
        let mut canonical = Vec::new();
        let mut constant = String::from("{");
        for (i, (member, hole)) in members.into_iter().enumerate() {
            if i > 0 {
                constant.push(',');
            }
            write_string(&mut constant, member);
            constant.push(':');
            match hole {
                None => write_string(&mut constant, &event_name),
                Some(hole) => canonical.push((std::mem::take(&mut constant), hole)),
            }
        }
        constant.push('}');
        canonical.push((constant, Hole::End));
        events.push(EventType { name: event_name, fields: carried, canonical });
    }
    if events.is_empty() {
        return Err(invalid("$.events", "must declare at least one event type"));
    }
    unique(&events, |e| &e.name, "$.events")?;
    Ok(events)
}

/// `facts`: `{name, key, events, record, description}`.
fn load_facts(rule_set: &RuleSet, value: &Value) -> Result<Facts> {
    let path = "$.facts";
    let map = object(value, path, &["name", "key", "events", "record", "description"])?;
    let facts_name = name(required(map, "name", path)?, "$.facts.name", false)?;
    if RESERVED_FIELDS.contains(&facts_name.as_str()) || PROTOTYPE_NAMES.contains(&facts_name.as_str()) {
        return Err(invalid("$.facts.name", format!("{facts_name:?} is reserved")));
    }
    if rule_set.fields.iter().any(|f| f.name == facts_name) {
        return Err(invalid(
            "$.facts.name",
            format!("{facts_name:?} is a declared field: the map needs a key of its own"),
        ));
    }
    let mut events = Vec::new();
    let list =
        bounded(required(map, "events", path)?, "$.facts.events", "maxEventTypes", MAX_EVENT_TYPES, "event types")?;
    for (i, item) in list.iter().enumerate() {
        let item_path = format!("$.facts.events[{i}]");
        let text = string(item, &item_path)?;
        let index = rule_set
            .event_index(text)
            .ok_or_else(|| invalid(&item_path, format!("{:?} is not a declared event type", truncate(text))))?;
        if events.contains(&index) {
            return Err(invalid(&item_path, format!("{text:?} is listed twice")));
        }
        events.push(index);
    }
    if events.is_empty() {
        return Err(invalid("$.facts.events", "must name at least one event type"));
    }
    let mut carried: Vec<usize> = (0..rule_set.fields.len()).collect();
    for e in &events {
        carried.retain(|f| rule_set.events[*e].fields.contains(f));
    }
    let key_text = string(required(map, "key", path)?, "$.facts.key")?;
    let key = rule_set
        .fields
        .iter()
        .position(|f| f.name == key_text)
        .ok_or_else(|| invalid("$.facts.key", format!("{:?} is not a declared field", truncate(key_text))))?;
    if rule_set.fields[key].kind != FieldKind::Text {
        return Err(invalid("$.facts.key", format!("{key_text:?} must be a text field")));
    }
    if !carried.contains(&key) {
        return Err(invalid("$.facts.key", format!("{key_text:?} is not carried by every fact event")));
    }
    let record = field_list(map.get("record"), "$.facts.record", &rule_set.fields, Some(&carried))?;
    if let Some(i) = record.iter().position(|f| *f == key) {
        return Err(invalid(&format!("$.facts.record[{i}]"), "is the key: an entry is found by it, not kept in it"));
    }
    if let Some(v) = map.get("description") {
        string(v, "$.facts.description")?;
    }
    Ok(Facts { name: facts_name, key, events, record })
}

fn names_or_any<'a>(value: &'a Value, path: &str) -> Result<Vec<&'a str>> {
    let items = match value {
        Value::String(s) => return Ok(vec![s.as_str()]),
        other => bounded(other, path, "maxListNames", MAX_LIST_NAMES, "names in one list")?,
    };
    if items.is_empty() {
        return Err(invalid(path, "must name at least one"));
    }
    items.iter().enumerate().map(|(i, v)| string(v, &format!("{path}[{i}]"))).collect()
}

/// Whether an answer as written is `applied` without a `to`: it keeps the status it answers in.
fn stays(answer: Option<&Value>) -> bool {
    answer.is_some_and(|a| a.get("outcome").and_then(Value::as_str) == Some("applied") && a.get("to").is_none())
}

/// One rule of the table. Two shorthands are expanded here, into the rules
/// they stand for:
/// - an `applied` answer without `to` keeps the status: a rule `in` several
///   statuses becomes one rule per status, each staying in its own;
/// - `"newer": field` triages a numbered observation by a `count` field: each
///   case holds only when the event's number is newer than the recorded one
///   (`[field, ">", field]` is added to its conditions), then the same number
///   is `already-applied` and an older one `stale`.
fn load_rule(
    rule_set: &mut RuleSet,
    names: &Names,
    table_entries: &mut usize,
    emitted_names: &mut Vec<(String, String)>,
    value: &Value,
    path: &str,
) -> Result<()> {
    let map = object(value, path, &["on", "in", "guard", "newer", "when", "then", "else", "cases", "description"])?;
    // Sets as flags: a name listed twice (or "*" with a name) answers its cells once.
    let mut on_event = vec![false; rule_set.events.len()];
    for (i, text) in names_or_any(required(map, "on", path)?, &format!("{path}.on"))?.into_iter().enumerate() {
        if text == ANY {
            on_event.iter_mut().for_each(|flag| *flag = true);
        } else {
            let index = *names
                .events
                .get(text)
                .ok_or_else(|| invalid(&format!("{path}.on[{i}]"), format!("{text:?} is not a declared event type")))?;
            on_event[index] = true;
        }
    }
    let mut in_state = vec![false; rule_set.state_count()];
    for (i, text) in names_or_any(required(map, "in", path)?, &format!("{path}.in"))?.into_iter().enumerate() {
        if text == ANY {
            in_state[1..].iter_mut().for_each(|flag| *flag = true);
        } else if text == NONE {
            in_state[0] = true;
        } else {
            let index = *names.statuses.get(text).ok_or_else(|| {
                invalid(&format!("{path}.in[{i}]"), format!("{text:?} is not a declared status (or \"{NONE}\", \"*\")"))
            })?;
            in_state[index + 1] = true;
        }
    }
    let events: Vec<usize> = on_event.iter().enumerate().filter_map(|(i, on)| on.then_some(i)).collect();
    let states: Vec<usize> = in_state.iter().enumerate().filter_map(|(i, on)| on.then_some(i)).collect();
    *table_entries += events.len() * states.len();
    if *table_entries > MAX_TABLE_ENTRIES {
        return Err(exceeded(
            path,
            "maxTableEntries",
            MAX_TABLE_ENTRIES,
            "(event type, status) pairs answered over all rules",
            *table_entries,
        ));
    }

    // Fields a rule reads must be carried by every event type it answers.
    let mut carried: Vec<usize> = (0..rule_set.fields.len()).collect();
    for e in &events {
        carried.retain(|f| rule_set.events[*e].fields.contains(f));
    }
    let guard = field_list(map.get("guard"), &format!("{path}.guard"), &rule_set.fields, Some(&carried))?;
    if !guard.is_empty() && states.contains(&0) {
        return Err(invalid(&format!("{path}.guard"), format!("there is nothing recorded to compare in \"{NONE}\"")));
    }
    // The rule's decision list: (conditions, answer, origin), the last with no conditions.
    let on_facts = !events.is_empty() && events.iter().all(|e| rule_set.is_fact_event(*e));
    let origin = path.trim_start_matches("$.").to_string();
    let keeps_status = stays(map.get("then"))
        || stays(map.get("else"))
        || map.get("cases").and_then(Value::as_array).is_some_and(|cases| cases.iter().any(|c| stays(c.get("then"))));
    if keeps_status && states.contains(&0) {
        return Err(invalid(
            &format!("{path}.in"),
            format!(
                "an applied answer without 'to' keeps the status, and \"{NONE}\" has none to keep: name the status"
            ),
        ));
    }
    // One decision list for all the rule's statuses, or one per status when an answer keeps it.
    let groups: Vec<Option<usize>> =
        if keeps_status { states.iter().map(|s| Some(*s - 1)).collect() } else { vec![None] };
    for stay in groups {
        let context = RuleContext { carried: &carried, on_facts, stay };
        let chain = load_chain(rule_set, map, path, &origin, &context, emitted_names)?;
        let index = rule_set.rules.len();
        let length = chain.len();
        for (i, (when, answer, case_origin)) in chain.into_iter().enumerate() {
            // The rules after the first are in no cell of their own: the chain picks them.
            let otherwise = (i + 1 < length).then_some(index + i + 1);
            rule_set.rules.push(Rule { origin: case_origin, guard: guard.clone(), answer, when, otherwise });
        }
        // Each pair once (the lists were made sets above), so no duplicate check.
        for e in &events {
            for s in &states {
                if stay.map_or(true, |kept| kept + 1 == *s) {
                    rule_set.cells[*e][*s].push(index);
                }
            }
        }
    }
    Ok(())
}

/// A rule's decision list: (conditions, answer, origin), the last with no conditions.
fn load_chain(
    rule_set: &RuleSet,
    map: &Map<String, Value>,
    path: &str,
    origin: &str,
    context: &RuleContext,
    emitted_names: &mut Vec<(String, String)>,
) -> Result<Vec<(Vec<Cond>, Answer, String)>> {
    let context = *context;
    let origin = origin.to_string();
    let mut chain: Vec<(Vec<Cond>, Answer, String)> = Vec::new();
    if let Some(cases) = map.get("cases") {
        if let Some(key) = ["when", "then", "else"].iter().find(|k| map.contains_key(**k)) {
            return Err(invalid(
                &format!("{path}.{key}"),
                "does not go with 'cases' (a case has its own when and then)",
            ));
        }
        let cases_path = format!("{path}.cases");
        let list = bounded(cases, &cases_path, "maxRules", MAX_RULES, "cases")?;
        if list.is_empty() {
            return Err(invalid(&cases_path, "must hold at least one case"));
        }
        for (i, case) in list.iter().enumerate() {
            let case_path = format!("{cases_path}[{i}]");
            let case_map = object(case, &case_path, &["when", "then", "description"])?;
            let last = i + 1 == list.len();
            let when = match (case_map.get("when"), last) {
                (Some(_), true) => {
                    return Err(invalid(
                        &format!("{case_path}.when"),
                        "the last case answers when no other does: it has no 'when'",
                    ))
                }
                (None, false) => {
                    return Err(invalid(&format!("{case_path}.when"), "is required on every case but the last"))
                }
                (None, true) => Vec::new(),
                (Some(when), false) => {
                    load_when(rule_set, when, &format!("{case_path}.when"), &context, emitted_names)?
                }
            };
            let answer =
                load_answer(rule_set, required(case_map, "then", &case_path)?, &format!("{case_path}.then"), &context)?;
            chain.push((when, answer, case_path.trim_start_matches("$.").to_string()));
        }
    } else {
        let answer = load_answer(rule_set, required(map, "then", path)?, &format!("{path}.then"), &context)?;
        match (map.get("when"), map.get("else")) {
            (None, None) => chain.push((Vec::new(), answer, origin.clone())),
            (Some(_), None) => {
                return Err(invalid(
                    &format!("{path}.else"),
                    "is required with 'when': the answer when the comparison does not hold",
                ))
            }
            (None, Some(_)) => return Err(invalid(&format!("{path}.else"), "goes only with 'when'")),
            (Some(when), Some(otherwise)) => {
                let when = load_when(rule_set, when, &format!("{path}.when"), &context, emitted_names)?;
                let otherwise = load_answer(rule_set, otherwise, &format!("{path}.else"), &context)?;
                chain.push((when, answer, origin.clone()));
                chain.push((Vec::new(), otherwise, format!("{origin}.else")));
            }
        }
    }
    if let Some(field) = map.get("newer") {
        triage(rule_set, field, &format!("{path}.newer"), &origin, &mut chain, &context)?;
    }
    if chain.len() == 1 {
        chain[0].2 = origin.clone();
    }
    Ok(chain)
}

/// The `newer` triage of a rule's decision list (see `load_rule`): every case
/// also needs a newer number in `field`, then the same number is
/// already-applied and any other stale. The rule must not compare the field
/// itself: the triage is the whole of it.
fn triage(
    rule_set: &RuleSet,
    value: &Value,
    path: &str,
    origin: &str,
    chain: &mut Vec<(Vec<Cond>, Answer, String)>,
    context: &RuleContext,
) -> Result<()> {
    let name = string(value, path)?;
    let field = rule_set
        .fields
        .iter()
        .position(|f| f.name == name)
        .ok_or_else(|| invalid(path, format!("{:?} is not a declared field", truncate(name))))?;
    if rule_set.fields[field].kind != FieldKind::Count {
        return Err(invalid(path, format!("{name:?} is not a count: observations are numbered by a count field")));
    }
    if !context.carried.contains(&field) {
        return Err(invalid(path, format!("{name:?} is not carried by every event type the rule answers")));
    }
    let compares = chain.iter().any(|(when, _, _)| {
        when.iter().any(|c| matches!(c, Cond::Compare { event_field, workflow_field, .. } if *event_field == field || *workflow_field == field))
    });
    if compares {
        return Err(invalid(
            path,
            format!("the rule compares {name:?} itself: the triage does, so drop those comparisons"),
        ));
    }
    let newer = Cond::Compare { event_field: field, op: Comparison::Greater, workflow_field: field };
    let same = Cond::Compare { event_field: field, op: Comparison::Equal, workflow_field: field };
    for (when, _, _) in chain.iter_mut() {
        when.insert(0, newer.clone());
    }
    chain.push((vec![same], Answer::AlreadyApplied, format!("{origin}.same")));
    chain.push((Vec::new(), Answer::Stale, format!("{origin}.older")));
    Ok(())
}

/// What a rule's parts may read: the fields every event type it answers
/// carries, and whether every one of them is a fact event.
#[derive(Clone, Copy)]
struct RuleContext<'a> {
    carried: &'a [usize],
    on_facts: bool,
    /// The status an applied answer without `to` keeps (see `load_rule`).
    stay: Option<usize>,
}

/// A `when`: one condition, or an array of conditions (all must hold). An
/// array of conditions is told apart from a comparison by its first element,
/// an array or an object.
fn load_when(
    rule_set: &RuleSet,
    value: &Value,
    path: &str,
    context: &RuleContext,
    emitted_names: &mut Vec<(String, String)>,
) -> Result<Vec<Cond>> {
    match value.as_array() {
        Some(items) if items.first().is_some_and(|v| v.is_array() || v.is_object()) => {
            let items = bounded(value, path, "maxListNames", MAX_LIST_NAMES, "conditions in one when")?;
            items
                .iter()
                .enumerate()
                .map(|(i, item)| load_condition(rule_set, item, &format!("{path}[{i}]"), context, emitted_names))
                .collect()
        }
        _ => Ok(vec![load_condition(rule_set, value, path, context, emitted_names)?]),
    }
}

/// One condition: `[eventField, op, recordedField]`, `{"other": types}` or `{"emitted": name}`.
fn load_condition(
    rule_set: &RuleSet,
    value: &Value,
    path: &str,
    context: &RuleContext,
    emitted_names: &mut Vec<(String, String)>,
) -> Result<Cond> {
    let Some(map) = value.as_object() else {
        let (event_field, op, workflow_field) = load_comparison(rule_set, value, path, context.carried)?;
        return Ok(Cond::Compare { event_field, op, workflow_field });
    };
    if map.len() != 1 || !(map.contains_key("other") || map.contains_key("emitted")) {
        return Err(invalid(
            path,
            "must be [eventField, op, recordedField], {\"other\": eventTypes} or {\"emitted\": operationName}",
        ));
    }
    let Some(facts) = rule_set.facts.as_ref().filter(|_| context.on_facts) else {
        return Err(invalid(
            path,
            "reads the facts map: only in rules on fact events (facts.events) of a rule set with 'facts'",
        ));
    };
    if let Some(other) = map.get("other") {
        let other_path = format!("{path}.other");
        let mut types = Vec::new();
        for (i, text) in names_or_any(other, &other_path)?.into_iter().enumerate() {
            let item_path = if other.is_string() { other_path.clone() } else { format!("{other_path}[{i}]") };
            let index = rule_set.event_index(text).filter(|e| facts.events.contains(e)).ok_or_else(|| {
                invalid(&item_path, format!("{:?} is not a fact event (facts.events)", truncate(text)))
            })?;
            if !types.contains(&index) {
                types.push(index);
            }
        }
        return Ok(Cond::Other(types));
    }
    let emitted_path = format!("{path}.emitted");
    let wanted = string(&map["emitted"], &emitted_path)?;
    emitted_names.push((emitted_path, wanted.to_string()));
    Ok(Cond::Emitted(wanted.to_string()))
}

/// `[eventField, op, workflowField]`: two integer fields of one kind (count
/// or units), or two text fields with `=`, the first carried by every event
/// type the rule answers.
pub(super) fn load_comparison(
    rule_set: &RuleSet,
    value: &Value,
    path: &str,
    carried: &[usize],
) -> Result<(usize, Comparison, usize)> {
    let parts = match value.as_array() {
        Some(parts) if parts.len() == 3 => parts,
        _ => return Err(invalid(path, "must be [eventField, op, workflowField], op one of >, >=, =, <=, <")),
    };
    let field = |i: usize| -> Result<usize> {
        let item_path = format!("{path}[{i}]");
        let text = string(&parts[i], &item_path)?;
        rule_set
            .fields
            .iter()
            .position(|f| f.name == text)
            .ok_or_else(|| invalid(&item_path, format!("{text:?} is not a declared field")))
    };
    let event_field = field(0)?;
    if !carried.contains(&event_field) {
        return Err(invalid(
            &format!("{path}[0]"),
            format!("{:?} is not carried by every event type this rule answers", rule_set.fields[event_field].name),
        ));
    }
    let op_text = string(&parts[1], &format!("{path}[1]"))?;
    let op = Comparison::ALL.iter().find(|(s, _)| *s == op_text).map(|(_, c)| *c).ok_or_else(|| {
        invalid(&format!("{path}[1]"), format!("{:?} is not one of >, >=, =, <=, <", truncate(op_text)))
    })?;
    let workflow_field = field(2)?;
    let (a, b) = (&rule_set.fields[event_field], &rule_set.fields[workflow_field]);
    // Text compares for equality (the deposit a swap acts on); only integers have an order.
    let text_equality = op == Comparison::Equal && a.kind == FieldKind::Text && b.kind == FieldKind::Text;
    if !text_equality && (!a.kind.is_integer() || !b.kind.is_integer()) {
        return Err(invalid(
            path,
            format!(
                "orders integers only (count or units fields; two text fields compare with = only): {:?} is {}, {:?} is {}",
                a.name,
                a.kind.as_str(),
                b.name,
                b.kind.as_str()
            ),
        ));
    }
    if a.kind != b.kind {
        return Err(invalid(
            path,
            format!(
                "compares two fields of one kind: {:?} is {}, {:?} is {}",
                a.name,
                a.kind.as_str(),
                b.name,
                b.kind.as_str()
            ),
        ));
    }
    Ok((event_field, op, workflow_field))
}

fn load_answer(rule_set: &RuleSet, value: &Value, path: &str, context: &RuleContext) -> Result<Answer> {
    let carried = context.carried;
    let map = object(
        value,
        path,
        &["outcome", "to", "record", "clear", "emit", "revisionStep", "untracked", "error", "disposition"],
    )?;
    if let Some(code_value) = map.get("error") {
        if map.contains_key("outcome") {
            return Err(invalid(path, "has both 'outcome' and 'error'"));
        }
        if let Some(key) = map.keys().find(|k| !["error", "disposition"].contains(&k.as_str())) {
            return Err(invalid(&format!("{path}.{key}"), "only 'disposition' goes with 'error'"));
        }
        let code_text = string(code_value, &format!("{path}.error"))?;
        let code = match code_text {
            "UNKNOWN_WORKFLOW" => FailCode::UnknownWorkflow,
            "INVALID_TRANSITION" => FailCode::InvalidTransition,
            _ => {
                return Err(invalid(
                    &format!("{path}.error"),
                    "must be \"UNKNOWN_WORKFLOW\" or \"INVALID_TRANSITION\" (identity mismatches come from guards)",
                ))
            }
        };
        let disposition = match map.get("disposition") {
            None => default_disposition(code.as_str()).unwrap_or(Disposition::Reconcile),
            Some(v) => Disposition::parse(string(v, &format!("{path}.disposition"))?).ok_or_else(|| {
                invalid(&format!("{path}.disposition"), "must be \"reject\", \"retry\" or \"reconcile\"")
            })?,
        };
        return Ok(Answer::Fail { code, disposition });
    }

    let outcome = string(
        map.get("outcome").ok_or_else(|| invalid(path, "needs 'outcome' or 'error'"))?,
        &format!("{path}.outcome"),
    )?;
    let plain = |answer: Answer| {
        if let Some(key) = map.keys().find(|k| k.as_str() != "outcome") {
            return Err(invalid(&format!("{path}.{key}"), format!("does not go with outcome {outcome:?}")));
        }
        Ok(answer)
    };
    match outcome {
        "already-applied" => return plain(Answer::AlreadyApplied),
        "stale" => return plain(Answer::Stale),
        "applied" => {}
        _ => return Err(invalid(&format!("{path}.outcome"), "must be \"applied\", \"already-applied\" or \"stale\"")),
    }
    if map.contains_key("disposition") {
        return Err(invalid(&format!("{path}.disposition"), "goes only with 'error'"));
    }
    let to = match (map.get("to"), context.stay) {
        (None, Some(kept)) => kept,
        (None, None) => return Err(invalid(path, "needs 'to' here")),
        (Some(to), _) => {
            let to_text = string(to, &format!("{path}.to"))?;
            rule_set
                .status_index(to_text)
                .ok_or_else(|| invalid(&format!("{path}.to"), format!("{to_text:?} is not a declared status")))?
        }
    };
    let record = field_list(map.get("record"), &format!("{path}.record"), &rule_set.fields, Some(carried))?;
    let clear = field_list(map.get("clear"), &format!("{path}.clear"), &rule_set.fields, None)?;
    if let Some(both) = record.iter().find(|f| clear.contains(f)) {
        return Err(invalid(
            &format!("{path}.clear"),
            format!("{:?} is both recorded and cleared", rule_set.fields[*both].name),
        ));
    }
    let revision_step = match map.get("revisionStep") {
        None => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= 1_000_000)
            .ok_or_else(|| invalid(&format!("{path}.revisionStep"), "must be a whole number from 0 to 1000000"))?,
    };
    let mut emit = Vec::new();
    if let Some(list) = map.get("emit") {
        let list = bounded(
            list,
            &format!("{path}.emit"),
            "maxEmitsPerRule",
            MAX_EMITS_PER_RULE,
            "emitted operations in one rule",
        )?;
        for (i, entry) in list.iter().enumerate() {
            emit.push(load_emit(rule_set, entry, &format!("{path}.emit[{i}]"), context)?);
        }
    }
    let untracked = boolean(map, "untracked", path)?;
    if untracked && !context.on_facts {
        return Err(invalid(
            &format!("{path}.untracked"),
            "only an answer to a fact event (facts.events) can leave its fact untracked",
        ));
    }
    Ok(Answer::Applied(Transition { to, record, clear, emit, revision_step, untracked }))
}

fn load_emit(rule_set: &RuleSet, value: &Value, path: &str, context: &RuleContext) -> Result<Emit> {
    let carried = context.carried;
    let map = object(value, path, &["type", "id", "payload", "recurring"])?;
    let operation_type = name(required(map, "type", path)?, &format!("{path}.type"), true)?;
    let recurring = boolean(map, "recurring", path)?;
    let id_path = format!("{path}.id");
    let fact_key = rule_set.facts.as_ref().map(|f| rule_set.fields[f.key].name.as_str());
    let id_template = parse_template(string(required(map, "id", path)?, &id_path)?, &id_path, fact_key)?;
    if id_template.per_fact && !context.on_facts {
        return Err(invalid(
            &id_path,
            "a per-fact operation's id takes the event's fact key: only in rules on fact events (facts.events)",
        ));
    }
    // The mark and the id form say the same thing, or the rule is refused:
    // `recurring` is what a reader looks for, `{revision}` what keeps the ids apart.
    match (recurring, id_template.recurring) {
        (true, false) => {
            return Err(invalid(
                &id_path,
                format!(
                    "a recurring operation's id must be <name>:{{revision}}:{{workflowId}}, not {:?}: each emission needs its own id",
                    truncate(&id_template.text)
                ),
            ))
        }
        (false, true) => {
            return Err(invalid(
                &format!("{path}.recurring"),
                "an id with {revision} is a recurring operation's: say \"recurring\": true (or drop {revision} to emit it once per workflow)",
            ))
        }
        _ => {}
    }
    let payload = field_list(map.get("payload"), &format!("{path}.payload"), &rule_set.fields, Some(carried))?;
    Ok(Emit { operation_type, id_template, payload })
}

/// `start-exchange:{workflowId}`: a name, a colon and the workflow id; or
/// `charge-renewal:{revision}:{workflowId}`: a name, the workflow's revision
/// after the emitting transition (decimal digits) and the workflow id; or, in
/// a rule set with `facts`, `review-deposit:{depositRef}:{workflowId}`: a
/// name, the event's fact key (escaped: no colon) and the workflow id. The
/// name has no colon and neither has the middle part, so an id splits back
/// into its parts in exactly one way: two templates, two revisions, two facts
/// or two workflows can never make the same id.
fn parse_template(text: &str, path: &str, fact_key: Option<&str>) -> Result<Template> {
    const ONCE: &str = ":{workflowId}";
    const RECURRING: &str = ":{revision}:{workflowId}";
    let per_fact_suffix = fact_key.map(|key| format!(":{{{key}}}:{{workflowId}}"));
    let (name, recurring, per_fact) =
        match (text.strip_suffix(RECURRING), per_fact_suffix.as_deref().and_then(|s| text.strip_suffix(s))) {
            (Some(name), _) => (name, true, false),
            (None, Some(name)) => (name, false, true),
            (None, None) => (text.strip_suffix(ONCE).unwrap_or_default(), false, false),
        };
    let ok = !name.is_empty()
        && name.len() <= crate::operation_id::MAX_OPERATION_NAME_BYTES
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        let per_fact_form =
            fact_key.map(|key| format!(", or <name>:{{{key}}}:{{workflowId}} for one per fact")).unwrap_or_default();
        return Err(invalid(
            path,
            format!(
                "{:?} must be <name>:{{workflowId}} (or <name>:{{revision}}:{{workflowId}} for a recurring operation{per_fact_form}), the name of letters, digits, '-', '_' or '.' (no colon), so that no two operations share an id",
                truncate(text)
            ),
        ));
    }
    Ok(Template { text: text.to_string(), name: name.to_string(), recurring, per_fact })
}
