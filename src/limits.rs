//! Bounds no input can exceed. A rule-set definition is data an author (or an
//! attacker) writes; without bounds one definition could hold the loader for
//! minutes or grow the wasm memory until it traps, and a trapped module stays
//! unusable for the whole process. Every bound is checked before the work it
//! protects, and a definition over one is refused with `RULESET_INVALID` whose
//! reason starts with `limit <name>` (the names the README's Limits table uses).

use serde_json::Value;

use crate::error::{Error, Result};

/// Bytes of a definition's JSON text (UTF-8).
pub const MAX_DEFINITION_BYTES: usize = 1 << 20;
/// Nesting of arrays and objects in a definition (the built-in ones use 6).
pub const MAX_DEPTH: usize = 32;
pub const MAX_STATUSES: usize = 256;
pub const MAX_EVENT_TYPES: usize = 256;
/// Fields, and also operations emitted over all rules: both are tracked as
/// bits of one 64-bit word while the verifier explores states.
pub const MAX_FIELDS: usize = 32;
pub const MAX_RULES: usize = 4096;
/// Names in one rule's `on` or `in` list ("*" counts as one name).
pub const MAX_LIST_NAMES: usize = 512;
pub const MAX_EMITS_PER_RULE: usize = 32;
/// (event type, status) pairs answered, summed over all rules. A verified rule
/// set answers each pair once (256 × 257 at most); the bound leaves room for
/// the overlaps the verifier reports, and keeps the table in memory small.
pub const MAX_TABLE_ENTRIES: usize = 1 << 17;
/// States (status × emitted operations × recorded fields) the verifier explores.
pub const MAX_STATES_EXPLORED: usize = 200_000;
/// The search's budget (`reorder-safe` and `invariants`), counted over one
/// whole verification: (history, start) pairs explored, and delivery
/// configurations over all of them. A history of two facts holds up to ten
/// events, so it is the total that bounds the time, however many start
/// statuses and histories a definition declares; a configuration costs a
/// microsecond or so once a (workflow, event) pair has been decided.
pub const MAX_REORDER_HISTORIES: usize = 100_000;
pub const MAX_REORDER_CONFIGURATIONS: usize = 12_000_000;
/// Kinds of event (and racing pairs) in one history, at most.
pub const MAX_REORDER_KINDS: usize = 32;
/// Invariants one rule set states, at most.
pub const MAX_INVARIANTS: usize = 32;

/// Every bound with its name, for documentation and tests.
pub const LIMITS: &[(&str, usize)] = &[
    ("maxDefinitionBytes", MAX_DEFINITION_BYTES),
    ("maxDepth", MAX_DEPTH),
    ("maxStatuses", MAX_STATUSES),
    ("maxEventTypes", MAX_EVENT_TYPES),
    ("maxFields", MAX_FIELDS),
    ("maxRules", MAX_RULES),
    ("maxListNames", MAX_LIST_NAMES),
    ("maxEmitsPerRule", MAX_EMITS_PER_RULE),
    ("maxTableEntries", MAX_TABLE_ENTRIES),
    ("maxStatesExplored", MAX_STATES_EXPLORED),
    ("maxReorderHistories", MAX_REORDER_HISTORIES),
    ("maxReorderConfigurations", MAX_REORDER_CONFIGURATIONS),
    ("maxReorderKinds", MAX_REORDER_KINDS),
    ("maxInvariants", MAX_INVARIANTS),
];

/// The refusal for a definition over a bound: `limit maxRules: …`.
pub fn exceeded(path: &str, limit: &str, max: usize, what: &str, found: usize) -> Error {
    Error::RuleSetInvalid {
        path: path.to_string(),
        reason: format!("limit {limit}: at most {max} {what}, this definition has {found}"),
        report: None,
    }
}

/// Refuses a definition text over `MAX_DEFINITION_BYTES` before it is parsed.
pub fn check_definition_text(text: &str) -> Result<()> {
    if text.len() > MAX_DEFINITION_BYTES {
        return Err(exceeded("$", "maxDefinitionBytes", MAX_DEFINITION_BYTES, "bytes of JSON text", text.len()));
    }
    Ok(())
}

/// A definition's JSON text parsed, after the size check. (serde_json's own
/// recursion limit of 128 bounds the parser's stack; `check_depth` then
/// applies the tighter bound.)
pub fn parse_definition(text: &str) -> Result<Value> {
    check_definition_text(text)?;
    serde_json::from_str(text).map_err(|e| Error::RuleSetInvalid {
        path: "$".into(),
        reason: format!("not JSON: {e}"),
        report: None,
    })
}

/// Refuses a definition nested deeper than `MAX_DEPTH`, without recursion.
pub fn check_depth(definition: &Value) -> Result<()> {
    let mut pending: Vec<(&Value, usize)> = vec![(definition, 1)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth > MAX_DEPTH {
            return Err(exceeded("$", "maxDepth", MAX_DEPTH, "levels of nested arrays and objects", depth));
        }
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    Ok(())
}
