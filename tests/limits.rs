#![cfg(not(target_arch = "wasm32"))]
//! Issue 9, section 3: no rule-set definition can hold the loader for long or
//! grow memory without bound. Each hostile definition is refused with
//! RULESET_INVALID naming the limit it exceeds, before the expensive work.

#![allow(clippy::result_large_err)]

#[path = "hostile/definitions.rs"]
mod hostile;

use serde_json::{json, Value};

use idemflow::limits::{self, LIMITS};
use idemflow::proof::verify_definition;
use idemflow::ruleset::load_unverified;
use idemflow::{Error, RuleSet};

/// How the binding loads a definition: size check, parse, load, verify.
fn load(text: &str) -> Result<RuleSet, Error> {
    RuleSet::from_value(&limits::parse_definition(text)?)
}

fn assert_limit(label: &str, error: &Error, path: &str, limit: &str) {
    assert_eq!(error.code(), "RULESET_INVALID", "{label}: {error}");
    let details = error.details();
    assert_eq!(details["path"], json!(path), "{label}: {error}");
    let reason = details["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with(&format!("limit {limit}: ")), "{label}: reason {reason:?} does not name {limit}");
}

#[test]
fn every_hostile_definition_is_refused_naming_its_limit() {
    for case in hostile::all() {
        let error = load(&case.text).err().unwrap_or_else(|| panic!("{} loaded", case.name));
        assert_limit(case.name, &error, case.path, case.limit);
        assert_limit(case.name, &RuleSet::from_json(&case.text).unwrap_err(), case.path, case.limit);
        if case.limit != "maxDefinitionBytes" {
            // Past the text size, every entry point that takes a parsed definition refuses it the same way.
            let value: Value = serde_json::from_str(&case.text).unwrap();
            assert_limit(case.name, &load_unverified(&value).unwrap_err(), case.path, case.limit);
            assert_limit(case.name, &verify_definition(&value).unwrap_err(), case.path, case.limit);
        }
    }
    // And the process decides as before.
    let rules = RuleSet::builtin("order-shipment").unwrap();
    let event = json!({ "eventId": "e-1", "workflowId": "order-1", "type": "SHIPMENT_REQUESTED" });
    let decision =
        idemflow::json::decide_json(rules, &json!({ "event": event, "receipt": null, "workflow": null }).to_string());
    assert!(decision.is_ok(), "{decision:?}");
}

#[test]
fn a_field_named_after_an_object_prototype_member_is_refused() {
    for name in ["constructor", "toString", "valueOf", "hasOwnProperty", "isPrototypeOf", "__proto__"] {
        let error = load(&hostile::prototype_field(name)).err().unwrap_or_else(|| panic!("field {name} loaded"));
        assert_eq!(error.code(), "RULESET_INVALID", "{name}: {error}");
        assert_eq!(error.details()["path"], json!("$.fields[0].name"), "{name}: {error}");
    }
    // A name that merely contains one is an ordinary name.
    assert!(load(&hostile::prototype_field("constructorRef")).is_ok());
}

#[test]
fn a_definition_at_every_count_limit_loads() {
    let mut definition = hostile::base();
    let statuses: Vec<Value> = (0..limits::MAX_STATUSES).map(|i| json!({ "name": format!("s{i}") })).collect();
    let fields: Vec<Value> =
        (0..limits::MAX_FIELDS).map(|i| json!({ "name": format!("f{i}"), "kind": "text" })).collect();
    let field_names: Vec<Value> = (0..limits::MAX_FIELDS).map(|i| json!(format!("f{i}"))).collect();
    let events: Vec<Value> =
        (0..limits::MAX_EVENT_TYPES).map(|i| json!({ "type": format!("E{i}"), "fields": field_names })).collect();
    definition["statuses"] = Value::Array(statuses);
    definition["fields"] = Value::Array(fields);
    definition["events"] = Value::Array(events);
    definition["rules"] = json!([
        { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW" } },
        { "on": "*", "in": "*", "guard": field_names, "then": { "outcome": "already-applied" } }
    ]);
    let rule_set = load_unverified(&definition).expect("a definition at the limits is well-formed");
    assert_eq!(rule_set.statuses().len(), limits::MAX_STATUSES);
    assert_eq!(rule_set.events().len(), limits::MAX_EVENT_TYPES);
    assert_eq!(rule_set.fields().len(), limits::MAX_FIELDS);
}

#[test]
fn a_rule_naming_the_same_pair_twice_answers_it_once() {
    let mut definition = hostile::base();
    definition["rules"][1]["on"] = json!(["*", "SHIPMENT_REQUESTED", "*"]);
    definition["rules"][1]["in"] = json!(["shipping", "*", "shipping"]);
    let rule_set = load(&definition.to_string()).expect("duplicates in a list are harmless");
    assert_eq!(rule_set.rule_for(0, 1).map(|rule| rule.origin.as_str()), Ok("rules[1]"));
}

#[test]
fn the_documented_limits_table_matches_the_code() {
    let readme = include_str!("../docs/rulesets.md");
    for (name, value) in LIMITS {
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{name}`")))
            .unwrap_or_else(|| panic!("docs/rulesets.md has no row for {name}"));
        let figure = value.to_string();
        let grouped =
            figure.as_bytes().rchunks(3).rev().map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(",");
        assert!(
            row.contains(&format!("| {grouped} |")),
            "docs/rulesets.md row for {name} does not say {grouped}: {row}"
        );
    }
}

/// CPU time of the calling thread (Linux: /proc/thread-self/stat, in clock
/// ticks of 10 ms); elsewhere, the time on the wall clock, which is no less.
fn thread_cpu<T>(body: impl FnOnce() -> T) -> (T, std::time::Duration) {
    fn ticks() -> Option<u64> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
    }
    let (before, started) = (ticks(), std::time::Instant::now());
    let answer = body();
    let spent = match (before, ticks()) {
        (Some(a), Some(b)) => std::time::Duration::from_millis((b - a) * 10),
        _ => started.elapsed(),
    };
    (answer, spent)
}

#[test]
fn a_definition_past_the_reorder_budget_in_total_is_refused_in_bounded_time() {
    // Each start status and history alone is far within the budget; together they are not.
    // Too many (history, start) pairs are counted before any is explored.
    let definition = hostile::reorder_budget(15, 256);
    let text = definition.to_string();
    let label = format!("15 types from 256 statuses ({} KiB)", text.len() >> 10);
    let (error, spent) = thread_cpu(|| RuleSet::from_json(&text).unwrap_err());
    assert_limit(&label, &error, "$.order", "maxReorderHistories");
    assert!(spent.as_secs_f64() < 2.0, "{label}: refused after {spent:?} of CPU");
    let (error, spent) = thread_cpu(|| verify_definition(&definition).unwrap_err());
    assert_limit(&label, &error, "$.order", "maxReorderHistories");
    assert!(spent.as_secs_f64() < 2.0, "{label}: refused after {spent:?} of CPU");
    // Past the configurations' budget, the search stops there: the budget is what bounds its time.
    let error = verify_definition(&hostile::reorder_budget(10, 18)).unwrap_err();
    assert_limit("10 types from 18 statuses", &error, "$.order", "maxReorderConfigurations");
    let reason = error.details()["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("18 start statuses") && reason.contains("10 other event types"), "{reason}");
}

#[test]
fn the_report_says_how_much_of_the_reorder_budget_a_definition_used() {
    let report = verify_definition(&hostile::reorder_budget(4, 3)).unwrap().to_json();
    let reorder = report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap();
    assert_eq!(reorder["ok"], json!(true), "{reorder}");
    let checked = &reorder["checked"];
    // 4 types make 75 histories of up to six events (each type at most twice); from (none) and 3 initial statuses.
    assert_eq!(checked["budget"]["histories"], json!({ "used": 75 * 4, "limit": limits::MAX_REORDER_HISTORIES }));
    assert_eq!(checked["histories"], json!(75 * 4));
    let configurations = &checked["budget"]["configurations"];
    assert_eq!(configurations["limit"], json!(limits::MAX_REORDER_CONFIGURATIONS));
    assert_eq!(configurations["used"], checked["configurations"]);
    assert!(configurations["used"].as_u64().unwrap() > 75 * 4);
}
