#![cfg(not(target_arch = "wasm32"))]
//! Layer 1: the shared vectors (tests/vectors/*.json) and the behaviours they
//! stand for, run natively through the public Rust API.

// idemflow::Error is large by design (it carries ids for the host); the tests pass it on as is.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use idemflow::decide::{OutboxOperation, WorkflowWrite};
use idemflow::error::CODES;
use idemflow::event::validate;
use idemflow::fingerprint::{canonical_bytes, fingerprint};
use idemflow::jcs::{canonical_json, hex, write_number};
use idemflow::json::keyed::decide_key;
use idemflow::json::payload::{canonical_text, fingerprint_text, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH};
use idemflow::json::{decide_json, fingerprint_json};
use idemflow::proof::verify_definition;
use idemflow::ruleset::{load_unverified, table};
use idemflow::{decide, Decision, Error, Outcome, RuleSet};
use sha2::{Digest, Sha256};

#[path = "shared/jcs.rs"]
mod shared_jcs;
use shared_jcs::{SplitMix, JCS_FILES, JCS_NUMBERS};

const FINGERPRINT: &str = include_str!("vectors/fingerprint.json");
const VALIDATION: &str = include_str!("vectors/validation.json");
const DECISIONS: &str = include_str!("vectors/decisions.json");
const RULESETS: &str = include_str!("vectors/rulesets.json");
const OUTBOX: &str = include_str!("vectors/outbox.json");

// ------------------------------------------------------------------ helpers

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("vector file is JSON")
}

fn cases(text: &str) -> Vec<Value> {
    parse(text)["cases"].as_array().expect("vector file has cases").clone()
}

fn name(case: &Value) -> &str {
    case["name"].as_str().expect("case has a name")
}

fn object(value: &Value) -> &Map<String, Value> {
    value.as_object().expect("an object")
}

/// The case's built-in rule set (`deposit-swap` when the case names none) at
/// the case's `ruleSetVersion` (the current version when absent).
fn rule_set(case: &Value) -> &'static RuleSet {
    let name = case["ruleSet"].as_str().unwrap_or("deposit-swap");
    RuleSet::builtin_version(name, case["ruleSetVersion"].as_u64()).expect("built-in rule set")
}

/// `expected` is contained in `actual`: objects may have more keys, arrays
/// must have the same length, everything else is equal.
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().all(|(k, v)| a.get(k).is_some_and(|x| contains(x, v))),
        (Value::Array(a), Value::Array(e)) => a.len() == e.len() && a.iter().zip(e).all(|(x, v)| contains(x, v)),
        _ => actual == expected,
    }
}

/// Checks an error against `{code, disposition?, details?, field?, path?}`.
fn assert_error(case: &str, error: &Error, expected: &Value) {
    assert_eq!(error.code(), expected["code"], "{case}: code ({error})");
    if let Some(disposition) = expected.get("disposition") {
        assert_eq!(error.disposition().as_str(), disposition, "{case}: disposition ({error})");
    }
    let details = Value::Object(error.details());
    if let Some(subset) = expected.get("details") {
        assert!(contains(&details, subset), "{case}: details {details} do not contain {subset}");
    }
    for key in ["field", "path"] {
        if let Some(value) = expected.get(key) {
            assert_eq!(&details[key], value, "{case}: details.{key} ({error})");
        }
    }
    let shape = error.to_json();
    assert_eq!(shape["code"], expected["code"], "{case}: to_json code");
    assert!(shape["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: to_json message");
}

/// `null` is no record; an object is one; anything else cannot go through
/// the typed API (only through JSON, where it is an argument error).
fn record(value: &Value) -> Option<Option<&Map<String, Value>>> {
    match value {
        Value::Null => Some(None),
        Value::Object(map) => Some(Some(map)),
        _ => None,
    }
}

/// The full decision a case expects, from its event and `expect`.
fn expected_decision(case: &Value) -> Value {
    let (event, expect) = (&case["event"], &case["expect"]);
    let mut decision = json!({
        "outcome": expect["outcome"],
        "eventId": event["eventId"],
        "workflowId": event["workflowId"],
        "eventType": event["type"],
        "fingerprint": expect["fingerprint"],
        "writeSet": expect["writeSet"],
    });
    // Only a duplicate whose stored receipt carries a result has an `original`.
    if let Some(original) = expect.get("original") {
        decision["original"] = original.clone();
    }
    decision
}

fn check_decision(case: &Value, result: Result<Value, Error>, via: &str) {
    // v1 and v2 cell cases share their names: the label says which version failed.
    let label = format!("{} (v{} via {via})", name(case), rule_set(case).version);
    match (result, case["expect"].get("error")) {
        (Ok(actual), None) => assert_eq!(actual, expected_decision(case), "{label}"),
        (Err(error), Some(expected)) => assert_error(&label, &error, expected),
        (Ok(actual), Some(expected)) => panic!("{label}: expected {expected}, decided {actual}"),
        (Err(error), None) => panic!("{label}: expected a decision, got {}", error.to_json()),
    }
}

// ------------------------------------------------------------- fingerprints

#[test]
fn fingerprint_vectors_match_the_independently_computed_canonical_json_and_hash() {
    let cases = cases(FINGERPRINT);
    assert!(cases.len() >= 20);
    for case in &cases {
        let rules = rule_set(case);
        let event = validate(rules, object(&case["event"])).unwrap_or_else(|e| panic!("{}: {e}", name(case)));
        assert_eq!(canonical_bytes(rules, &event), case["canonical"].as_str().unwrap(), "{}: canonical", name(case));
        assert_eq!(fingerprint(rules, &event), case["fingerprint"].as_str().unwrap(), "{}: fingerprint", name(case));
        let via_json = fingerprint_json(rules, &case["event"].to_string()).unwrap();
        assert_eq!(via_json, case["fingerprint"].as_str().unwrap(), "{}: fingerprint_json", name(case));
    }
}

#[test]
fn fingerprint_vectors_are_well_formed() {
    for case in cases(FINGERPRINT) {
        let fp = case["fingerprint"].as_str().unwrap();
        let hex = fp.strip_prefix("fp1:").expect("fp1: prefix");
        assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{fp}");
    }
}

#[test]
fn the_event_id_is_not_part_of_the_fingerprint() {
    let rules = v2();
    let first = json!({ "eventId": "chain-watcher:event-001", "workflowId": "swap-42", "type": "DEPOSIT_CONFIRMED",
                        "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" });
    let mut second = first.clone();
    second["eventId"] = json!("chain-watcher:event-002");
    let fp = |v: &Value| fingerprint_json(rules, &v.to_string()).unwrap();
    assert_eq!(fp(&first), fp(&second));
    assert_eq!(fp(&first), "fp1:f7aec2ec118bdfeaf8378d30fc20a30c1e4a1ff4be23ea1ca294215f182989fb");
}

// --------------------------------------------------------------- validation

#[test]
fn validation_vectors_accept_or_name_the_first_bad_field() {
    let cases = cases(VALIDATION);
    assert!(cases.len() >= 60);
    for case in &cases {
        let rules = rule_set(case);
        let result = validate(rules, object(&case["event"]));
        match case.get("error") {
            None => {
                assert_eq!(case["valid"], true, "{}: a case is valid or has an error", name(case));
                result.unwrap_or_else(|e| panic!("{}: expected valid, got {e}", name(case)));
            }
            Some(expected) => {
                let error = result.err().unwrap_or_else(|| panic!("{}: expected {expected}", name(case)));
                assert_error(name(case), &error, expected);
                assert_eq!(error.disposition().as_str(), "reject", "{}", name(case));
            }
        }
    }
}

#[test]
fn validation_vectors_give_the_same_answer_through_fingerprint_json_and_decide_json() {
    for case in cases(VALIDATION) {
        let rules = rule_set(&case);
        let input = json!({ "event": case["event"], "receipt": null, "workflow": null }).to_string();
        let fp = fingerprint_json(rules, &case["event"].to_string());
        let decided = decide_json(rules, &input);
        match case.get("error") {
            None => {
                fp.unwrap_or_else(|e| panic!("{}: {e}", name(&case)));
                // Valid events still need a workflow to decide; what matters is that they pass validation.
                if let Err(e) = decided {
                    assert_ne!(e.code(), "INVALID_EVENT", "{}: {e}", name(&case));
                }
            }
            Some(expected) => {
                assert_error(&format!("{} (fingerprint_json)", name(&case)), &fp.unwrap_err(), expected);
                assert_error(&format!("{} (decide_json)", name(&case)), &decided.unwrap_err(), expected);
            }
        }
    }
}

#[test]
fn the_reason_of_an_invalid_event_says_what_is_wrong_and_carries_the_event_id() {
    let rules = RuleSet::builtin("deposit-swap").unwrap();
    let event = json!({ "eventId": "e-1", "workflowId": "swap-42", "type": "DEPOSIT_CONFIRMED",
                        "depositRef": "ref", "amountUnits": 12500000 });
    let error = validate(rules, object(&event)).unwrap_err();
    let details = error.details();
    assert_eq!(details["field"], "amountUnits");
    assert_eq!(details["eventId"], "e-1");
    assert!(details["reason"].as_str().unwrap().contains("not a number"), "{}", details["reason"]);
}

#[test]
fn decide_json_refuses_text_that_is_not_a_json_object() {
    let rules = RuleSet::builtin("deposit-swap").unwrap();
    assert_eq!(decide_json(rules, "{\"event\":").unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(decide_json(rules, "[]").unwrap_err().code(), "INVALID_ARGUMENT");
    let missing = decide_json(rules, "{}").unwrap_err();
    assert_eq!((missing.code(), missing.details()["field"].clone()), ("INVALID_EVENT", json!("event")));
    let array = decide_json(rules, "{\"event\": []}").unwrap_err();
    assert_eq!((array.code(), array.details()["field"].clone()), ("INVALID_EVENT", json!("event")));
}

// ---------------------------------------------------------------- decisions

#[test]
fn decision_vectors_through_decide() {
    let cases = cases(DECISIONS);
    assert!(cases.len() >= 80);
    for case in &cases {
        let (Some(receipt), Some(workflow)) = (record(&case["receipt"]), record(&case["workflow"])) else {
            continue;
        };
        let rules = rule_set(case);
        let result = decide(rules, object(&case["event"]), receipt, workflow).map(|d| serde_json::to_value(d).unwrap());
        check_decision(case, result, "decide");
    }
}

#[test]
fn decision_vectors_through_decide_json() {
    for case in cases(DECISIONS) {
        let input = json!({ "event": case["event"], "receipt": case["receipt"], "workflow": case["workflow"] });
        let result = decide_json(rule_set(&case), &input.to_string()).map(|text| parse(&text));
        check_decision(&case, result, "decide_json");
    }
}

/// Whether a case's stored workflow is in `state` (`(none)`: no workflow).
fn in_state(case: &Value, state: &str) -> bool {
    if state == "(none)" {
        case["workflow"].is_null()
    } else {
        case["workflow"]["status"] == state
    }
}

/// The word a cell case's name ends with: the outcome, or the error code.
fn answer_word(answer: &Value) -> &str {
    answer["error"]["code"]
        .as_str()
        .or(answer["error"].as_str())
        .or(answer["outcome"].as_str())
        .expect("an outcome or an error")
}

/// Each version of `deposit-swap` has its own cases (`ruleSetVersion`): every
/// cell of its table has exactly one, named `"<EVENT> in <status>: <answer>"`,
/// that gets the answer of the row the cell is in; and every guard field of a
/// guarded row has an IDENTITY_MISMATCH case in one of the row's states.
#[test]
fn decision_vectors_cover_every_cell_and_row_of_each_deposit_swap_version() {
    let all = cases(DECISIONS);
    for version in [1, 2] {
        let rules = RuleSet::builtin_version("deposit-swap", Some(version)).unwrap();
        assert_eq!(rules.version, version);
        let cases: Vec<&Value> = all
            .iter()
            .filter(|c| c["ruleSet"].as_str().unwrap_or("deposit-swap") == "deposit-swap")
            .filter(|c| c["ruleSetVersion"] == version)
            .collect();
        let mut cells = 0;
        for event in rules.events() {
            for state in 0..rules.state_count() {
                let wanted = format!("{} in {}: ", event.name, rules.state_name(state));
                let named = cases.iter().filter(|c| name(c).starts_with(&wanted)).count();
                assert_eq!(named, 1, "v{version}: {named} vectors for {wanted}");
                cells += 1;
            }
        }
        for row in table::rows(rules) {
            let answer = answer_word(&row.answer);
            for state in &row.states {
                let wanted = format!("{} in {state}: {answer}", row.event);
                let case = cases
                    .iter()
                    .find(|c| name(c) == wanted)
                    .unwrap_or_else(|| panic!("v{version}: no vector {wanted:?} (rule {})", row.origin));
                assert_eq!(case["event"]["type"], row.event.as_str(), "v{version}: {wanted}: event type");
                assert!(in_state(case, state), "v{version}: {wanted}: the workflow is not in {state}");
                assert!(case["receipt"].is_null(), "v{version}: {wanted}: a cell case has no receipt");
                assert_eq!(answer_word(&case["expect"]), answer, "v{version}: {wanted}: expected answer");
            }
            for field in &row.guard {
                let mismatched = cases.iter().any(|c| {
                    c["event"]["type"] == row.event.as_str()
                        && row.states.iter().any(|s| in_state(c, s))
                        && c["receipt"].is_null()
                        && c["expect"]["error"]["code"] == "IDENTITY_MISMATCH"
                        && c["expect"]["error"]["details"]["field"] == field.as_str()
                });
                assert!(
                    mismatched,
                    "v{version}: row {} {:?} ({}) has no IDENTITY_MISMATCH vector for {field}",
                    row.event, row.states, row.origin
                );
            }
        }
        assert_eq!(cells, rules.events().len() * rules.state_count());
    }
}

// ---------------------------------------------------------------- rule sets

fn property_names() -> Vec<String> {
    idemflow::proof::verify::PROPERTIES.iter().map(|(n, _)| n.to_string()).collect()
}

#[test]
fn the_vector_file_lists_the_verifier_properties_in_order() {
    let listed: Vec<String> = serde_json::from_value(parse(RULESETS)["properties"].clone()).unwrap();
    assert_eq!(listed, property_names());
}

#[test]
fn builtin_rule_sets_have_the_independently_computed_hashes() {
    for builtin in parse(RULESETS)["builtins"].as_array().unwrap() {
        let name = builtin["name"].as_str().unwrap();
        let rules = RuleSet::builtin_version(name, builtin["version"].as_u64()).unwrap();
        if builtin["current"] == true {
            assert!(std::ptr::eq(rules, RuleSet::builtin(name).unwrap()), "{name}: the current version");
        }
        assert_eq!(rules.id, builtin["id"].as_str().unwrap());
        assert_eq!(rules.version, builtin["version"].as_u64().unwrap());
        assert_eq!(rules.hash, builtin["hash"].as_str().unwrap());
    }
}

#[test]
fn broken_rule_sets_fail_exactly_the_named_property_with_its_counterexample() {
    let broken = parse(RULESETS)["broken"].as_array().unwrap().clone();
    let mut failing: Vec<String> = Vec::new();
    for case in &broken {
        let report = verify_definition(&case["definition"]).unwrap_or_else(|e| panic!("{}: {e}", name(case))).to_json();
        assert_eq!(report["ok"], false, "{}", name(case));
        let properties = report["properties"].as_array().unwrap();
        let names: Vec<&str> = properties.iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, property_names(), "{}: every property is reported, in order", name(case));
        for property in properties {
            let should_fail = property["name"] == case["failing"];
            assert_eq!(property["ok"], !should_fail, "{}: {}", name(case), property);
            if should_fail {
                let example = &property["counterexample"];
                assert!(contains(example, &case["counterexample"]), "{}: counterexample {example}", name(case));
                for more in case["moreCounterexamples"].as_array().into_iter().flatten() {
                    let found =
                        property["moreCounterexamples"].as_array().into_iter().flatten().any(|e| contains(e, more));
                    assert!(found, "{}: no counterexample like {more} in {property}", name(case));
                }
            } else {
                assert!(property["counterexample"].is_null(), "{}: {}", name(case), property);
            }
        }
        let refused = RuleSet::from_value(&case["definition"]).err().unwrap_or_else(|| panic!("{} loaded", name(case)));
        assert_error(name(case), &refused, &case["loadError"]);
        assert_eq!(refused.details()["report"]["ok"], false, "{}: the refusal carries the report", name(case));
        failing.push(case["failing"].as_str().unwrap().to_string());
    }
    for property in property_names() {
        assert!(failing.contains(&property), "no broken rule set fails {property}");
    }
}

/// Delivers a case's events one at a time, as a host does: the receipt stored
/// under the event id and the workflow go in, the write set is applied. An
/// answer with disposition `retry` sends the event to the back of the queue.
/// Returns the answers, the end workflow (without its id) and the operation ids.
pub fn deliver_in_order(
    case: &Value,
    decide: impl Fn(&Value) -> Result<Value, Value>,
) -> (Vec<Value>, Value, Vec<String>) {
    let mut queue: std::collections::VecDeque<Value> = case["deliveries"].as_array().unwrap().iter().cloned().collect();
    let mut workflow = case["workflow"].clone();
    let mut receipts: BTreeMap<String, Value> = BTreeMap::new();
    let (mut answers, mut operations) = (Vec::new(), Vec::new());
    let mut budget = 100;
    while let Some(event) = queue.pop_front() {
        budget -= 1;
        assert!(budget > 0, "{}: deliveries never settle", name(case));
        let id = event["eventId"].as_str().unwrap().to_string();
        let input = json!({ "event": event, "receipt": receipts.get(&id), "workflow": workflow });
        match decide(&input) {
            Ok(decision) => {
                answers.push(decision["outcome"].clone());
                let write_set = &decision["writeSet"];
                if let Some(receipt) = write_set["receipt"].as_object() {
                    receipts.insert(id, Value::Object(receipt.clone()));
                }
                if let Some(write) = write_set["workflow"].as_object() {
                    let mut next = workflow.as_object().cloned().unwrap_or_else(|| {
                        let mut fresh = Map::new();
                        fresh.insert("id".into(), write["id"].clone());
                        fresh
                    });
                    for (key, value) in write["set"].as_object().unwrap() {
                        if value.is_null() {
                            next.remove(key);
                        } else {
                            next.insert(key.clone(), value.clone());
                        }
                    }
                    workflow = Value::Object(next);
                }
                for op in write_set["outbox"].as_array().unwrap() {
                    operations.push(op["id"].as_str().unwrap().to_string());
                }
            }
            Err(error) => {
                answers.push(json!({ "error": error["code"], "disposition": error["disposition"] }));
                if error["disposition"] == "retry" {
                    queue.push_back(event);
                }
            }
        }
    }
    if let Some(map) = workflow.as_object_mut() {
        map.remove("id");
    }
    (answers, workflow, operations)
}

#[test]
fn reordered_deliveries_give_the_answers_and_end_state_of_the_vectors() {
    let cases = parse(RULESETS)["reorderings"].as_array().unwrap().clone();
    assert!(cases.len() >= 8);
    for case in &cases {
        let rules = rule_set(case);
        let (answers, end, operations) = deliver_in_order(case, |input| {
            decide_json(rules, &input.to_string()).map(|text| parse(&text)).map_err(|e| e.to_json())
        });
        assert_eq!(Value::from(answers), case["answers"], "{}: answers", name(case));
        assert_eq!(end, case["end"], "{}: end state", name(case));
        assert_eq!(json!(operations), case["operations"], "{}: operations", name(case));
    }
}

#[test]
fn malformed_rule_sets_are_refused_with_the_path_of_the_bad_part() {
    let malformed = parse(RULESETS)["malformed"].as_array().unwrap().clone();
    assert!(malformed.len() >= 30);
    for case in &malformed {
        let expected = &case["error"];
        if let Some(text) = case["definitionText"].as_str() {
            let error = RuleSet::from_json(text).err().unwrap_or_else(|| panic!("{} loaded", name(case)));
            assert_error(name(case), &error, expected);
            continue;
        }
        let definition = &case["definition"];
        let text = definition.to_string();
        let label = |via: &str| format!("{} ({via})", name(case));
        assert_error(&label("load_unverified"), &load_unverified(definition).expect_err("refused"), expected);
        assert_error(&label("verify_definition"), &verify_definition(definition).expect_err("refused"), expected);
        assert_error(&label("from_value"), &RuleSet::from_value(definition).expect_err("refused"), expected);
        assert_error(&label("from_json"), &RuleSet::from_json(&text).expect_err("refused"), expected);
    }
}

#[test]
fn rule_set_hashes_match_the_independently_computed_values() {
    for case in parse(RULESETS)["hashes"].as_array().unwrap() {
        let rules = RuleSet::from_json(case["definitionText"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", name(case)));
        assert_eq!(rules.hash, case["hash"].as_str().unwrap(), "{}", name(case));
    }
}

#[test]
fn builtin_rule_sets_verify_every_property() {
    for name in idemflow::ruleset::BUILTIN_NAMES {
        let rules = RuleSet::builtin(name).unwrap();
        let report = idemflow::proof::verify::verify(rules).unwrap();
        assert!(report.ok(), "{name}: {}", report.to_json());
        assert_eq!(report.hash, rules.hash);
        assert!(report.states_explored > 0);
    }
}

#[test]
fn an_unknown_builtin_name_is_an_invalid_argument() {
    assert_eq!(RuleSet::builtin("deposit_swap").unwrap_err().code(), "INVALID_ARGUMENT");
}

#[test]
fn from_value_refuses_a_rule_set_that_fails_a_property() {
    let mut definition: Value = serde_json::from_str(idemflow::ruleset::BUILTIN_ORDER_SHIPMENT).unwrap();
    definition["rules"].as_array_mut().unwrap().pop();
    let error = RuleSet::from_value(&definition).unwrap_err();
    assert_eq!(error.code(), "RULESET_INVALID");
    assert_eq!(error.disposition().as_str(), "fatal");
    let report = &error.details()["report"];
    let failed: Vec<&Value> = report["properties"].as_array().unwrap().iter().filter(|p| p["ok"] == false).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["name"], "one-answer-per-pair");
    // The same definition loads unverified: only the verified path refuses it.
    assert!(load_unverified(&definition).is_ok());
}

#[test]
fn the_rule_set_hash_is_stable_under_key_reordering_and_whitespace() {
    let text = idemflow::ruleset::BUILTIN_DEPOSIT_SWAP;
    let value: Value = serde_json::from_str(text).unwrap();
    let builtin = RuleSet::builtin("deposit-swap").unwrap();
    assert_eq!(RuleSet::from_value(&value).unwrap().hash, builtin.hash);
    // Members written in reverse order, on one line.
    fn reversed(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let members: Vec<String> =
                    map.iter().rev().map(|(k, v)| format!("{}:{}", Value::String(k.clone()), reversed(v))).collect();
                format!("{{{}}}", members.join(","))
            }
            Value::Array(items) => format!("[{}]", items.iter().map(reversed).collect::<Vec<_>>().join(",")),
            other => other.to_string(),
        }
    }
    let reordered = reversed(&value);
    assert_ne!(reordered, value.to_string());
    assert_eq!(RuleSet::from_json(&reordered).unwrap().hash, builtin.hash);
}

#[test]
fn the_rule_set_hash_changes_when_a_rule_changes() {
    let mut value: Value = serde_json::from_str(idemflow::ruleset::BUILTIN_DEPOSIT_SWAP_V1).unwrap();
    let before = RuleSet::from_value(&value).unwrap().hash;
    value["rules"][11]["then"] = json!({ "outcome": "already-applied" });
    let after = RuleSet::from_value(&value).unwrap().hash;
    assert_ne!(before, after);
    value["version"] = json!(2);
    assert_ne!(RuleSet::from_value(&value).unwrap().hash, after, "the version is part of the hash");
}

#[test]
fn the_decision_table_prints_one_row_per_rule_and_event_type() {
    let rules = RuleSet::builtin_version("deposit-swap", Some(1)).unwrap();
    let markdown = table::markdown(rules);
    assert!(markdown.starts_with(&format!("Rule set `deposit-swap` v1 (`{}`)", rules.hash)));
    assert!(markdown.contains(
        "| DEPOSIT_CONFIRMED | deposit | depositRef, amountUnits |  | applied → exchange; emits START_EXCHANGE `start-exchange:{workflowId}` |"
    ));
    assert!(markdown.contains(
        "| DEPOSIT_REVERSED | deposit | depositRef, amountUnits |  | applied → waiting; clears depositRef, amountUnits |"
    ));
    assert_eq!(table::rows(rules).len(), 24);
    // Every cell appears in exactly one row.
    let mut cells = 0;
    for row in table::rows(rules) {
        cells += row.states.len();
    }
    assert_eq!(cells, rules.events().len() * rules.state_count());
}

// ---------------------------------------------------------------------- JCS

#[test]
fn jcs_sorts_members_by_utf16_code_units_not_code_points() {
    // RFC 8785 §3.2.3: U+1F600 is the surrogate pair D83D DE00, so it sorts before U+FB33.
    let value = json!({
        "\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
        "1": "One", "\u{1f600}": "Emoji: Grinning Face", "\u{80}": "Control", "\u{f6}": "Latin Small Letter O With Diaeresis",
    });
    assert_eq!(
        canonical_json(&value).unwrap(),
        "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\
         \"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
    );
}

#[test]
fn jcs_orders_an_astral_key_before_a_key_in_the_upper_bmp() {
    let value = json!({ "\u{ffff}": 1, "\u{10000}": 2, "\u{e000}": 3 });
    assert_eq!(canonical_json(&value).unwrap(), "{\"\u{10000}\":2,\"\u{e000}\":3,\"\u{ffff}\":1}");
}

#[test]
fn jcs_escapes_strings_exactly_as_json_stringify() {
    let value = json!("\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}\"\\/\u{2028}é😀");
    assert_eq!(canonical_json(&value).unwrap(), "\"\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\\\"\\\\/\u{2028}é😀\"");
}

#[test]
fn jcs_writes_literals_integers_and_nested_values_without_whitespace() {
    let value = json!({ "b": [true, false, null, 0, -1, 42], "a": { "z": [], "y": {} } });
    assert_eq!(canonical_json(&value).unwrap(), "{\"a\":{\"y\":{},\"z\":[]},\"b\":[true,false,null,0,-1,42]}");
    let edges = json!([9007199254740991u64, -9007199254740991i64]);
    assert_eq!(canonical_json(&edges).unwrap(), "[9007199254740991,-9007199254740991]");
}

#[test]
fn the_six_rfc_8785_test_files_canonicalise_byte_for_byte() {
    for (name, input, output) in JCS_FILES {
        assert_eq!(canonical_text(input).unwrap(), *output, "{name}");
    }
}

#[test]
fn a_serde_json_value_is_written_with_the_same_numbers() {
    // Built from doubles (serde_json's own reader rounds some decimals to a neighbour; the payload reader does not).
    let value =
        json!({ "numbers": [333333333.3333333f64, 1e30, 4.5, 0.002, 1e-27, -0.0, 1e21, 1e-7, 9007199254740993u64] });
    assert_eq!(
        canonical_json(&value).unwrap(),
        "{\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27,0,1e+21,1e-7,9007199254740992]}"
    );
}

fn double(bits: &str) -> f64 {
    f64::from_bits(u64::from_str_radix(bits, 16).expect("16 hex digits"))
}

#[test]
fn number_vectors_are_written_as_ecmascript_writes_them() {
    for case in cases(JCS_NUMBERS) {
        let x = double(case["bits"].as_str().unwrap());
        let mut written = String::new();
        match case["text"].as_str() {
            Some(text) => {
                assert!(write_number(&mut written, x), "{x:e} is finite");
                assert_eq!(written, text, "bits {}", case["bits"]);
                // Read back from its own text, the number is the same double and is written alike.
                assert_eq!(canonical_text(text).unwrap(), text);
            }
            None => {
                assert!(!write_number(&mut written, x), "{x} is not JSON");
                assert_eq!(written, "", "nothing is written for {x}");
            }
        }
    }
}

#[test]
fn random_doubles_are_written_as_ryu_js_writes_them() {
    // ryu-js is an independent implementation of Number::toString (Ryū, not
    // Grisu/Dragon4): over random bit patterns (every exponent alike), random
    // short decimals, integers of every size, and the halves and quarters
    // near 2^53 where two shortest digit strings are equally close (ties).
    let mut random = SplitMix(8785);
    let mut reference = ryu_js::Buffer::new();
    let mut checked = 0;
    for i in 0..3_000_000u64 {
        let x = match i % 4 {
            0 => f64::from_bits(random.next()),
            1 => (random.next() % 1_000_000_000) as f64 / 10f64.powi((random.next() % 30) as i32),
            2 => (random.next() >> (random.next() % 64)) as f64,
            _ => ((random.next() >> 11) | 1) as f64 / (1u64 << (1 + random.next() % 4)) as f64,
        };
        if !x.is_finite() {
            continue;
        }
        let mut written = String::new();
        assert!(write_number(&mut written, x));
        assert_eq!(written, reference.format_finite(x), "bits {:016x}", x.to_bits());
        checked += 1;
    }
    assert!(checked > 2_900_000);
    // Every power of two (its double below is half as far as the one above) and its neighbours.
    for bits in (0..=0x7fe).map(|exponent: u64| exponent << 52) {
        for x in [f64::from_bits(bits), f64::from_bits(bits + 1), f64::from_bits(bits.saturating_sub(1))] {
            let mut written = String::new();
            assert!(write_number(&mut written, x));
            assert_eq!(written, reference.format_finite(x), "bits {:016x}", x.to_bits());
        }
    }
}

#[test]
fn numbers_read_from_text_are_the_doubles_json_parse_gives() {
    // Beyond 2^53 an integer rounds to the nearest double, as JSON.parse rounds it.
    assert_eq!(
        canonical_text("[9007199254740993, -9007199254740993, 18446744073709551615]").unwrap(),
        "[9007199254740992,-9007199254740992,18446744073709552000]"
    );
    assert_eq!(canonical_text("[-0, 0.0, -0.0e5, 1E0, 10e-1, 1.000]").unwrap(), "[0,0,0,1,1,1]");
    // 17 significant digits that need exact rounding to read back (a fast approximate parser misses them).
    assert_eq!(
        canonical_text("[2.2250738585072011e-308, 0.30000000000000004, 1.0000000000000002]").unwrap(),
        "[2.225073858507201e-308,0.30000000000000004,1.0000000000000002]"
    );
    assert_eq!(canonical_text("1e400").unwrap_err().code(), "INVALID_PAYLOAD");
    assert_eq!(canonical_text("-1e400").unwrap_err().code(), "INVALID_PAYLOAD");
    assert_eq!(canonical_text("1e-400").unwrap(), "0", "an underflow is zero, as in JSON.parse");
}

#[test]
fn rule_set_hashes_do_not_move_with_the_number_writer() {
    // The integers a definition holds are written as before: digits, no exponent.
    let value = json!({ "b": [true, false, null, 0, -1, 42], "a": { "z": [], "y": {} } });
    assert_eq!(canonical_json(&value).unwrap(), "{\"a\":{\"y\":{},\"z\":[]},\"b\":[true,false,null,0,-1,42]}");
    let edges = json!([9007199254740991u64, -9007199254740991i64, 1_000_000_000_000_000u64]);
    assert_eq!(canonical_json(&edges).unwrap(), "[9007199254740991,-9007199254740991,1000000000000000]");
}

#[test]
fn a_payload_text_that_is_not_json_or_not_well_formed_unicode_is_invalid_payload() {
    for text in ["", "{", "[1,]", "{\"a\":1}x", "NaN", "'a'"] {
        let error = canonical_text(text).unwrap_err();
        assert_eq!((error.code(), error.disposition().as_str()), ("INVALID_PAYLOAD", "reject"), "{text:?}");
        assert_eq!(error.details()["path"], "$");
    }
    let lone = canonical_text("[\"\\ud800\"]").unwrap_err();
    assert!(lone.details()["reason"].as_str().unwrap().contains("lone surrogate"), "{lone}");
    assert_eq!(canonical_text("\"\\ud83d\\ude00\"").unwrap(), "\"\u{1f600}\"", "a pair is one character");
}

#[test]
fn a_name_given_twice_keeps_its_last_value_as_json_parse_does() {
    assert_eq!(canonical_text("{\"a\":1,\"b\":2,\"a\":3}").unwrap(), "{\"a\":3,\"b\":2}");
}

#[test]
fn payloads_are_bounded_in_depth_and_size() {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert_eq!(canonical_text(&nested(MAX_PAYLOAD_DEPTH)).unwrap(), nested(MAX_PAYLOAD_DEPTH));
    let deep = canonical_text(&nested(MAX_PAYLOAD_DEPTH + 1)).unwrap_err();
    assert_eq!(deep.code(), "INVALID_PAYLOAD");
    assert!(deep.details()["reason"].as_str().unwrap().contains("deeper"), "{deep}");
    // A parsed value built deeper than any text could be is refused too, not written recursively.
    let mut value = json!([]);
    for _ in 0..MAX_PAYLOAD_DEPTH {
        value = json!([value]);
    }
    assert!(canonical_json(&value).is_err());
    let large = format!("\"{}\"", "a".repeat(MAX_PAYLOAD_BYTES));
    let error = canonical_text(&large).unwrap_err();
    assert!(error.details()["reason"].as_str().unwrap().contains("maxPayloadBytes"), "{error}");
}

#[test]
fn a_payload_fingerprint_is_pf1_and_the_sha_256_of_its_canonical_text() {
    let canonical = "{\"amount\":\"125.00\",\"items\":[1,2.5,true]}";
    let expected = format!("pf1:{}", hex(&Sha256::digest(canonical.as_bytes())));
    assert_eq!(fingerprint_text(canonical).unwrap(), expected);
    // Whitespace, member order and the spelling of a number are not part of the payload.
    assert_eq!(fingerprint_text("{ \"items\": [1.0, 25e-1, true], \"amount\": \"125.00\" }").unwrap(), expected);
    assert_ne!(fingerprint_text("{\"amount\":\"125.0\",\"items\":[1,2.5,true]}").unwrap(), expected);
}

// -------------------------------------------------------------- error codes

#[test]
fn every_error_code_has_a_stable_default_disposition() {
    let table: Vec<(&str, &str)> = CODES.iter().map(|(c, d)| (*c, d.as_str())).collect();
    assert_eq!(
        table,
        [
            ("INVALID_EVENT", "reject"),
            ("EVENT_ID_CONFLICT", "reconcile"),
            ("UNKNOWN_WORKFLOW", "retry"),
            ("IDENTITY_MISMATCH", "reconcile"),
            ("INVALID_TRANSITION", "reconcile"),
            ("OUTBOX_CONFLICT", "reconcile"),
            ("CONCURRENT_UPDATE", "retry"),
            ("INVALID_RECORD", "reconcile"),
            ("INVALID_ARGUMENT", "fatal"),
            ("RULESET_INVALID", "fatal"),
            ("STORE_UNAVAILABLE", "retry"),
            ("HANDLER_FAILED", "retry"),
            ("INVALID_PAYLOAD", "reject"),
            ("IDEMPOTENCY_KEY_CONFLICT", "reconcile"),
            ("IDEMPOTENCY_KEY_IN_PROGRESS", "retry"),
            ("WRITE_TOO_LARGE", "reconcile"),
            ("BOUND_EXCEEDED", "reconcile"),
        ]
    );
}

// ------------------------------------------------------------ the seed's API

fn seed_event() -> Value {
    json!({ "eventId": "chain-watcher:event-001", "workflowId": "swap-42", "type": "DEPOSIT_CONFIRMED",
            "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" })
}

fn seed_workflow(status: &str) -> Value {
    json!({ "id": "swap-42", "status": status, "depositRef": "btc-mainnet:tx-abc:vout-0",
            "amountUnits": "12500000", "revision": 3 })
}

#[test]
fn plan_deposit_confirmation_answers_as_the_seed_did() {
    use idemflow::compat::plan_deposit_confirmation as plan;
    let event = seed_event();
    let event = object(&event);
    let plan_in = |status: &str| {
        let workflow = seed_workflow(status);
        plan(event, Some(object(&workflow)))
    };
    assert_eq!(plan_in("deposit").unwrap(), "advance");
    for status in ["exchange", "sending", "success"] {
        assert_eq!(plan_in(status).unwrap(), "already-applied", "{status}");
    }
    for status in ["waiting", "overdue", "review"] {
        assert_eq!(plan_in(status).unwrap_err().code(), "INVALID_TRANSITION", "{status}");
    }
    assert_eq!(plan(event, None).unwrap_err().code(), "UNKNOWN_WORKFLOW");

    let mut changed = seed_workflow("deposit");
    changed["amountUnits"] = json!("12500001");
    let mismatch = plan(event, Some(object(&changed))).unwrap_err();
    assert_eq!((mismatch.code(), mismatch.details()["field"].clone()), ("IDENTITY_MISMATCH", json!("amountUnits")));

    let mut detected = seed_event();
    detected["type"] = json!("DEPOSIT_DETECTED");
    let workflow = seed_workflow("deposit");
    let wrong_type = plan(object(&detected), Some(object(&workflow))).unwrap_err();
    assert_eq!((wrong_type.code(), wrong_type.details()["field"].clone()), ("INVALID_EVENT", json!("type")));
}

// ------------------------------------------------------- flows with a host

/// A host in miniature: it stores what decisions tell it to write, with the
/// unique keys and compare-and-set a real database would enforce.
struct Host {
    rules: &'static RuleSet,
    workflows: BTreeMap<String, Map<String, Value>>,
    inbox: BTreeMap<String, Value>,
    outbox: BTreeMap<String, OutboxOperation>,
}

impl Host {
    fn new(rule_set: &str) -> Host {
        Host {
            rules: RuleSet::builtin(rule_set).unwrap(),
            workflows: BTreeMap::new(),
            inbox: BTreeMap::new(),
            outbox: BTreeMap::new(),
        }
    }

    /// A host over `deposit-swap` v2: these stories are v2's (its events carry no
    /// `sequence`); v3's numbered observations have theirs in tests/chains.rs.
    fn with_waiting(id: &str) -> Host {
        let mut host = Host::new("deposit-swap");
        host.rules = v2();
        host.workflows.insert(id.into(), object(&json!({ "id": id, "status": "waiting", "revision": 1 })).clone());
        host
    }

    /// The same host over `deposit-swap` v1, the in-order-only rules kept for audit.
    fn with_waiting_v1(id: &str) -> Host {
        let mut host = Host::new("deposit-swap");
        host.rules = RuleSet::builtin_version("deposit-swap", Some(1)).unwrap();
        host.workflows.insert(id.into(), object(&json!({ "id": id, "status": "waiting", "revision": 1 })).clone());
        host
    }

    fn decide(&self, event: &Value) -> Result<Decision, Error> {
        let event = object(event);
        let receipt = self.inbox.get(event["eventId"].as_str().unwrap()).map(object);
        let workflow = self.workflows.get(event["workflowId"].as_str().unwrap());
        decide(self.rules, event, receipt, workflow)
    }

    /// Commits a write set as one transaction; `Err` when a key or the
    /// compare-and-set says someone else got there first.
    fn commit(&mut self, decision: &Decision) -> Result<(), String> {
        let write_set = &decision.write_set;
        if let Some(receipt) = &write_set.receipt {
            if self.inbox.contains_key(&receipt.event_id) {
                return Err(format!("receipt {} exists", receipt.event_id));
            }
        }
        for operation in &write_set.outbox {
            if self.outbox.contains_key(&operation.id) {
                return Err(format!("operation {} exists", operation.id));
            }
        }
        if let Some(write) = &write_set.workflow {
            self.check_expect(write)?;
            let workflow = self.workflows.entry(write.id.clone()).or_insert_with(|| {
                let mut fresh = Map::new();
                fresh.insert("id".into(), json!(write.id));
                fresh
            });
            for (key, value) in &write.set {
                if value.is_null() {
                    workflow.remove(key);
                } else {
                    workflow.insert(key.clone(), value.clone());
                }
            }
        }
        if let Some(receipt) = &write_set.receipt {
            self.inbox.insert(receipt.event_id.clone(), serde_json::to_value(receipt).unwrap());
        }
        for operation in &write_set.outbox {
            self.outbox.insert(operation.id.clone(), operation.clone());
        }
        Ok(())
    }

    fn check_expect(&self, write: &WorkflowWrite) -> Result<(), String> {
        let stored = self.workflows.get(&write.id);
        match (&write.expect, stored) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(format!("workflow {} exists", write.id)),
            (Some(_), None) => Err(format!("workflow {} is gone", write.id)),
            (Some(expect), Some(stored)) => {
                if stored["status"] == expect.status.as_str() && stored["revision"] == expect.revision {
                    Ok(())
                } else {
                    Err(format!("workflow {} changed", write.id))
                }
            }
        }
    }

    fn deliver(&mut self, event: &Value) -> Result<Decision, Error> {
        let decision = self.decide(event)?;
        self.commit(&decision).unwrap_or_else(|e| panic!("commit failed: {e}"));
        Ok(decision)
    }

    fn workflow(&self, id: &str) -> Value {
        Value::Object(self.workflows[id].clone())
    }

    fn operation_ids(&self) -> Vec<&str> {
        self.outbox.keys().map(String::as_str).collect()
    }
}

/// `deposit-swap` v2, whose events carry no `sequence`.
fn v2() -> &'static RuleSet {
    RuleSet::builtin_version("deposit-swap", Some(2)).unwrap()
}

fn event(id: &str, event_type: &str, fields: Value) -> Value {
    let mut event = json!({ "eventId": id, "workflowId": "swap-42", "type": event_type });
    for (key, value) in object(&fields) {
        event[key] = value.clone();
    }
    event
}

const DEP: &str = "btc-mainnet:tx-abc:vout-0";
const AMT: &str = "12500000";

fn detected(id: &str) -> Value {
    event(id, "DEPOSIT_DETECTED", json!({ "depositRef": DEP, "amountUnits": AMT }))
}
fn confirmed(id: &str) -> Value {
    event(id, "DEPOSIT_CONFIRMED", json!({ "depositRef": DEP, "amountUnits": AMT }))
}
fn reversed(id: &str) -> Value {
    event(id, "DEPOSIT_REVERSED", json!({ "depositRef": DEP, "amountUnits": AMT }))
}
fn exchanged(id: &str) -> Value {
    event(id, "EXCHANGE_COMPLETED", json!({ "payoutUnits": "4150000000" }))
}
fn paid(id: &str) -> Value {
    event(id, "PAYOUT_CONFIRMED", json!({ "payoutRef": "provider:payout-7781" }))
}
fn deadline(id: &str) -> Value {
    event(id, "DEADLINE_PASSED", json!({}))
}

#[test]
fn the_happy_path_runs_waiting_deposit_exchange_sending_success() {
    let mut host = Host::with_waiting("swap-42");
    let steps = [
        (detected("w:1"), "deposit", 2),
        (confirmed("w:2"), "exchange", 3),
        (exchanged("w:3"), "sending", 4),
        (paid("w:4"), "success", 5),
    ];
    for (event, status, revision) in steps {
        let decision = host.deliver(&event).unwrap();
        assert_eq!(decision.outcome, Outcome::Applied, "{event}");
        let workflow = host.workflow("swap-42");
        assert_eq!(workflow["status"], status);
        assert_eq!(workflow["revision"], revision);
    }
    assert_eq!(
        host.workflow("swap-42"),
        json!({ "id": "swap-42", "status": "success", "revision": 5, "depositRef": DEP, "amountUnits": AMT,
                "payoutUnits": "4150000000", "payoutRef": "provider:payout-7781" })
    );
    assert_eq!(host.operation_ids(), ["send-payout:swap-42", "start-exchange:swap-42"]);
    assert_eq!(
        host.outbox["start-exchange:swap-42"].payload,
        *object(&json!({ "depositRef": DEP, "amountUnits": AMT }))
    );
    assert_eq!(host.inbox.len(), 4);
}

#[test]
fn a_redelivered_confirmation_writes_nothing_and_a_new_event_id_is_already_applied() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    host.deliver(&confirmed("chain-watcher:event-001")).unwrap();
    let replay = host.deliver(&confirmed("chain-watcher:event-001")).unwrap();
    assert_eq!(replay.outcome, Outcome::DuplicateDelivery);
    assert_eq!((replay.write_set.receipt.is_none(), replay.write_set.workflow.is_none()), (true, true));
    let second = host.deliver(&confirmed("chain-watcher:event-002")).unwrap();
    assert_eq!(second.outcome, Outcome::AlreadyApplied);
    assert!(second.write_set.workflow.is_none() && second.write_set.outbox.is_empty());
    assert_eq!(host.workflow("swap-42")["revision"], 3);
    assert_eq!(host.operation_ids(), ["start-exchange:swap-42"]);
    assert_eq!(host.inbox.len(), 3);
}

#[test]
fn twenty_five_event_ids_for_one_confirmation_schedule_one_exchange() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    let outcomes: Vec<Outcome> =
        (0..25).map(|i| host.deliver(&confirmed(&format!("source:event-{i}"))).unwrap().outcome).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Applied).count(), 1);
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::AlreadyApplied).count(), 24);
    assert_eq!(host.operation_ids(), ["start-exchange:swap-42"]);
}

#[test]
fn a_reused_event_id_with_another_amount_is_an_event_id_conflict() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    host.deliver(&confirmed("w:2")).unwrap();
    let mut changed = confirmed("w:2");
    changed["amountUnits"] = json!("99");
    let error = host.decide(&changed).unwrap_err();
    assert_eq!((error.code(), error.disposition().as_str()), ("EVENT_ID_CONFLICT", "reconcile"));
}

#[test]
fn a_late_deposit_goes_from_overdue_to_review_and_opens_a_review() {
    let mut host = Host::with_waiting("swap-42");
    assert_eq!(host.deliver(&deadline("timer:1")).unwrap().outcome, Outcome::Applied);
    assert_eq!(host.workflow("swap-42")["status"], "overdue");
    let late = host.deliver(&detected("w:1")).unwrap();
    assert_eq!(late.outcome, Outcome::Applied);
    assert_eq!(
        host.workflow("swap-42"),
        json!({ "id": "swap-42", "status": "review", "revision": 3, "depositRef": DEP, "amountUnits": AMT })
    );
    assert_eq!(host.operation_ids(), ["open-review:swap-42"]);
    assert_eq!(host.outbox["open-review:swap-42"].operation_type, "OPEN_REVIEW");
    // Never a straight exchange from a late deposit: its confirmation only adds a receipt.
    let confirmation = host.deliver(&confirmed("w:2")).unwrap();
    assert_eq!(confirmation.outcome, Outcome::AlreadyApplied);
    assert!(confirmation.write_set.workflow.is_none() && confirmation.write_set.outbox.is_empty());
    assert_eq!(host.operation_ids(), ["open-review:swap-42"]);
}

#[test]
fn a_reversal_before_exchange_is_final_for_its_deposit() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    let reversal = host.deliver(&reversed("w:2")).unwrap();
    assert_eq!(reversal.outcome, Outcome::Applied);
    assert_eq!(
        host.workflow("swap-42"),
        json!({ "id": "swap-42", "status": "reversed", "revision": 3, "depositRef": DEP, "amountUnits": AMT })
    );
    // Its confirmation, late or re-published, and a re-published detection change nothing.
    assert_eq!(host.deliver(&confirmed("w:3")).unwrap().outcome, Outcome::Stale);
    assert_eq!(host.deliver(&detected("w:4")).unwrap().outcome, Outcome::Stale);
    assert!(host.outbox.is_empty());
    // Another deposit on the same swap is a person's decision, in any order.
    let mut other = detected("w:5");
    other["depositRef"] = json!("btc-mainnet:tx-def:vout-1");
    let error = host.decide(&other).unwrap_err();
    assert_eq!((error.code(), error.disposition().as_str()), ("IDENTITY_MISMATCH", "reconcile"));
}

#[test]
fn a_reversal_before_exchange_returns_to_waiting_and_clears_the_deposit_in_v1() {
    let mut host = Host::with_waiting_v1("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    let reversal = host.deliver(&reversed("w:2")).unwrap();
    assert_eq!(reversal.outcome, Outcome::Applied);
    let set = &reversal.write_set.workflow.as_ref().unwrap().set;
    assert_eq!((set["depositRef"].is_null(), set["amountUnits"].is_null()), (true, true));
    assert_eq!(host.workflow("swap-42"), json!({ "id": "swap-42", "status": "waiting", "revision": 3 }));
    assert!(host.outbox.is_empty());
    // A new deposit can then be detected and confirmed.
    let mut other = detected("w:3");
    other["depositRef"] = json!("btc-mainnet:tx-def:vout-1");
    host.deliver(&other).unwrap();
    let mut confirm_other = confirmed("w:4");
    confirm_other["depositRef"] = json!("btc-mainnet:tx-def:vout-1");
    assert_eq!(host.deliver(&confirm_other).unwrap().outcome, Outcome::Applied);
    assert_eq!(host.workflow("swap-42")["status"], "exchange");
    assert_eq!(host.outbox["start-exchange:swap-42"].payload["depositRef"], "btc-mainnet:tx-def:vout-1");
}

#[test]
fn a_confirmation_of_the_reversed_deposit_after_a_new_one_is_an_identity_mismatch_in_v1() {
    let mut host = Host::with_waiting_v1("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    host.deliver(&reversed("w:2")).unwrap();
    let mut other = detected("w:3");
    other["depositRef"] = json!("btc-mainnet:tx-def:vout-1");
    host.deliver(&other).unwrap();
    let error = host.decide(&confirmed("w:4")).unwrap_err();
    assert_eq!((error.code(), error.details()["field"].clone()), ("IDENTITY_MISMATCH", json!("depositRef")));
}

#[test]
fn a_reversal_after_exchange_goes_to_review_and_keeps_the_deposit() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    host.deliver(&confirmed("w:2")).unwrap();
    let reversal = host.deliver(&reversed("w:3")).unwrap();
    assert_eq!(reversal.outcome, Outcome::Applied);
    assert_eq!(
        host.workflow("swap-42"),
        json!({ "id": "swap-42", "status": "review", "revision": 4, "depositRef": DEP, "amountUnits": AMT })
    );
    assert_eq!(host.operation_ids(), ["open-review:swap-42", "start-exchange:swap-42"]);
    assert_eq!(host.outbox["open-review:swap-42"].event_id, "w:3");
    // Review is final: the exchange result is for a person now, and a
    // re-published reversal changes nothing.
    assert_eq!(host.decide(&exchanged("w:4")).unwrap().outcome, Outcome::Stale);
    assert_eq!(host.decide(&reversed("w:5")).unwrap().outcome, Outcome::AlreadyApplied);
}

#[test]
fn a_deadline_after_the_detection_is_stale_and_changes_nothing() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&detected("w:1")).unwrap();
    let before = host.workflow("swap-42");
    let late_timer = host.deliver(&deadline("timer:1")).unwrap();
    assert_eq!(late_timer.outcome, Outcome::Stale);
    assert!(late_timer.write_set.workflow.is_none() && late_timer.write_set.outbox.is_empty());
    assert_eq!(late_timer.write_set.receipt.as_ref().unwrap().outcome, Outcome::Stale);
    assert_eq!(host.workflow("swap-42"), before);
    assert_eq!(host.inbox["timer:1"]["outcome"], "stale");
}

#[test]
fn a_detection_after_the_deadline_goes_to_review() {
    let mut host = Host::with_waiting("swap-42");
    host.deliver(&deadline("timer:1")).unwrap();
    host.deliver(&detected("w:1")).unwrap();
    assert_eq!(host.workflow("swap-42")["status"], "review");
    assert_eq!(host.operation_ids(), ["open-review:swap-42"]);
}

#[test]
fn a_deadline_racing_a_detection_from_one_snapshot_commits_only_one_then_the_loser_redecides() {
    for deadline_wins in [true, false] {
        let mut host = Host::with_waiting("swap-42");
        let (timer, deposit) = (deadline("timer:1"), detected("w:1"));
        let timer_decision = host.decide(&timer).unwrap();
        let deposit_decision = host.decide(&deposit).unwrap();
        for decision in [&timer_decision, &deposit_decision] {
            let expect = decision.write_set.workflow.as_ref().unwrap().expect.as_ref().unwrap();
            assert_eq!((expect.status.as_str(), expect.revision), ("waiting", 1));
        }
        let (winner, loser, loser_event) = if deadline_wins {
            (&timer_decision, &deposit_decision, &deposit)
        } else {
            (&deposit_decision, &timer_decision, &timer)
        };
        host.commit(winner).unwrap();
        assert!(host.commit(loser).is_err(), "the compare-and-set refuses the stale write");
        let retried = host.deliver(loser_event).unwrap();
        if deadline_wins {
            assert_eq!(retried.outcome, Outcome::Applied);
            assert_eq!(host.workflow("swap-42")["status"], "review");
            assert_eq!(host.operation_ids(), ["open-review:swap-42"]);
        } else {
            assert_eq!(retried.outcome, Outcome::Stale);
            assert_eq!(host.workflow("swap-42")["status"], "deposit");
            assert!(host.outbox.is_empty());
        }
        assert_eq!(host.workflow("swap-42")["revision"], if deadline_wins { 3 } else { 2 });
    }
}

#[test]
fn an_event_before_its_workflow_is_stored_is_retried() {
    let host = Host::with_waiting("swap-41");
    let error = host.decide(&detected("w:1")).unwrap_err();
    assert_eq!((error.code(), error.disposition().as_str()), ("UNKNOWN_WORKFLOW", "retry"));
}

#[test]
fn the_first_shipment_request_creates_the_order_workflow_and_later_ones_are_already_applied() {
    let mut host = Host::new("order-shipment");
    let request = |id: &str| json!({ "eventId": id, "workflowId": "order-1001", "type": "SHIPMENT_REQUESTED" });
    let first = host.deliver(&request("orders:1")).unwrap();
    assert_eq!(first.outcome, Outcome::Applied);
    assert!(first.write_set.workflow.as_ref().unwrap().expect.is_none());
    assert_eq!(host.workflow("order-1001"), json!({ "id": "order-1001", "status": "shipping", "revision": 1 }));
    assert_eq!(host.deliver(&request("orders:2")).unwrap().outcome, Outcome::AlreadyApplied);
    assert_eq!(host.deliver(&request("orders:1")).unwrap().outcome, Outcome::DuplicateDelivery);
    assert_eq!(host.operation_ids(), ["create-shipment:order-1001"]);
}

#[test]
fn two_first_requests_from_one_snapshot_create_the_workflow_once() {
    let mut host = Host::new("order-shipment");
    let request = |id: &str| json!({ "eventId": id, "workflowId": "order-1001", "type": "SHIPMENT_REQUESTED" });
    let a = host.decide(&request("orders:1")).unwrap();
    let b = host.decide(&request("orders:2")).unwrap();
    host.commit(&a).unwrap();
    assert!(host.commit(&b).is_err(), "an insert of an existing workflow is refused");
    assert_eq!(host.deliver(&request("orders:2")).unwrap().outcome, Outcome::AlreadyApplied);
    assert_eq!(host.operation_ids(), ["create-shipment:order-1001"]);
}

fn subscription_event(id: &str, event_type: &str, fields: Value) -> Value {
    let mut event = json!({ "eventId": id, "workflowId": "sub-7", "type": event_type });
    event.as_object_mut().unwrap().extend(object(&fields).clone());
    event
}

fn renewal_due(id: &str, period: u64) -> Value {
    subscription_event(id, "RENEWAL_DUE", json!({ "period": period, "amountUnits": "1500" }))
}

fn renewal_paid(id: &str, period: u64, payment: &str) -> Value {
    subscription_event(id, "RENEWAL_PAID", json!({ "period": period, "paidThrough": period, "paymentRef": payment }))
}

#[test]
fn two_renewals_of_one_subscription_charge_twice_under_ids_that_carry_the_revision() {
    let mut host = Host::new("subscription");
    let start =
        subscription_event("signup:1", "SUBSCRIPTION_STARTED", json!({ "paidThrough": 1, "paymentRef": "psp:pay-1" }));
    assert_eq!(host.deliver(&start).unwrap().outcome, Outcome::Applied);
    assert_eq!(host.deliver(&renewal_due("billing:1", 2)).unwrap().outcome, Outcome::Applied);
    // Re-published while the charge is in flight: one charge.
    assert_eq!(host.deliver(&renewal_due("billing:1-again", 2)).unwrap().outcome, Outcome::AlreadyApplied);
    // The next period's renewal before this one is paid waits (retry).
    let early = host.decide(&renewal_due("billing:2-early", 3)).unwrap_err();
    assert_eq!((early.code(), early.disposition().as_str()), ("INVALID_TRANSITION", "retry"));
    assert_eq!(host.deliver(&renewal_paid("psp:1", 2, "psp:pay-2")).unwrap().outcome, Outcome::Applied);
    // Re-published after its payment: a period already paid, already-applied, never a second charge.
    assert_eq!(host.deliver(&renewal_due("billing:1-late", 2)).unwrap().outcome, Outcome::AlreadyApplied);
    assert_eq!(host.deliver(&renewal_due("billing:2", 3)).unwrap().outcome, Outcome::Applied);
    assert_eq!(host.operation_ids(), ["charge-renewal:2:sub-7", "charge-renewal:4:sub-7"]);
    assert_eq!(host.outbox["charge-renewal:4:sub-7"].payload, *object(&json!({ "period": 3, "amountUnits": "1500" })));
    assert_eq!(
        host.workflow("sub-7"),
        json!({ "id": "sub-7", "status": "renewing", "revision": 4, "paidThrough": 2, "paymentRef": "psp:pay-2",
                "period": 3, "amountUnits": "1500" })
    );
    // A cancellation while the second charge is in flight, then its payment: a person refunds it.
    host.deliver(&subscription_event("support:1", "SUBSCRIPTION_CANCELLED", json!({}))).unwrap();
    let after = host.decide(&renewal_paid("psp:2", 3, "psp:pay-3")).unwrap_err();
    assert_eq!((after.code(), after.disposition().as_str()), ("INVALID_TRANSITION", "reconcile"));
}

#[test]
fn every_recurring_id_of_a_workflow_splits_back_into_its_name_revision_and_workflow_id() {
    let mut host = Host::new("subscription");
    let workflow_id = "tenant-a:sub:7";
    let with_id = |mut event: Value| {
        event["workflowId"] = json!(workflow_id);
        event
    };
    host.deliver(&with_id(subscription_event(
        "s",
        "SUBSCRIPTION_STARTED",
        json!({ "paidThrough": 1, "paymentRef": "r0" }),
    )))
    .unwrap();
    for lap in 1..=12 {
        host.deliver(&with_id(renewal_due(&format!("due-{lap}"), lap + 1))).unwrap();
        host.deliver(&with_id(renewal_paid(&format!("paid-{lap}"), lap + 1, &format!("r{lap}")))).unwrap();
    }
    let ids = host.operation_ids();
    assert_eq!(ids.len(), 12, "one charge per renewal: {ids:?}");
    let mut revisions: Vec<u64> = ids
        .iter()
        .map(|id| {
            let (name, rest) = id.split_once(':').unwrap();
            let (revision, workflow) = rest.split_once(':').unwrap();
            assert_eq!((name, workflow), ("charge-renewal", workflow_id), "{id}");
            assert!(!revision.starts_with('0') && revision.bytes().all(|b| b.is_ascii_digit()), "{id}");
            revision.parse().unwrap()
        })
        .collect();
    revisions.sort_unstable();
    assert_eq!(revisions, (1..=12).map(|lap| 2 * lap).collect::<Vec<u64>>());
}

// ------------------------------------------------- corrupt records and misuse

#[test]
fn a_receipt_fingerprint_that_is_not_fp1_and_64_hex_digits_is_an_invalid_record() {
    let rules = v2();
    let event = seed_event();
    for stored in ["fp1:", "fp1:garbage", "fp1:F7AEC2EC118BDFEAF8378D30FC20A30C1E4A1FF4BE23EA1CA294215F182989FB"] {
        let receipt = json!({ "fingerprint": stored });
        let error = decide(rules, object(&event), Some(object(&receipt)), None).unwrap_err();
        assert_eq!(
            (error.code(), error.details()["record"].clone(), error.details()["field"].clone()),
            ("INVALID_RECORD", json!("receipt"), json!("fingerprint")),
            "{stored}: a corrupt stored fingerprint is not an event-id conflict"
        );
    }
}

#[test]
fn fingerprint_json_reports_a_non_object_event_as_invalid_event_like_decide_json() {
    let rules = v2();
    for event in ["null", "[]", "\"swap-42\"", "5"] {
        let decided = decide_json(rules, &format!("{{\"event\": {event}}}")).unwrap_err();
        assert_eq!((decided.code(), decided.details()["field"].clone()), ("INVALID_EVENT", json!("event")));
        let fingerprinted = fingerprint_json(rules, event).unwrap_err();
        assert_eq!(
            (fingerprinted.code(), fingerprinted.details()["field"].clone()),
            ("INVALID_EVENT", json!("event")),
            "fingerprint_json({event})"
        );
    }
}

#[test]
fn deciding_with_an_unverified_rule_set_that_misses_a_pair_is_an_error_not_a_panic() {
    let mut definition: Value = serde_json::from_str(idemflow::ruleset::BUILTIN_ORDER_SHIPMENT).unwrap();
    definition["rules"].as_array_mut().unwrap().pop();
    let rules = load_unverified(&definition).unwrap();
    let event = json!({ "eventId": "orders:1", "workflowId": "order-1001", "type": "SHIPMENT_REQUESTED" });
    let workflow = json!({ "id": "order-1001", "status": "shipping", "revision": 1 });
    let outcome = std::panic::catch_unwind(|| decide(&rules, object(&event), None, Some(object(&workflow))).is_err());
    assert_eq!(outcome.ok(), Some(true), "decide must return an error, not panic");
}

#[test]
fn a_receipt_stored_under_another_event_id_is_an_invalid_argument_not_a_duplicate() {
    let rules = v2();
    let event = seed_event();
    let fp = idemflow::json::fingerprint_json(rules, &event.to_string()).unwrap();
    let receipt = json!({ "eventId": "someone-else", "fingerprint": fp });
    let error = decide(rules, object(&event), Some(object(&receipt)), None).unwrap_err();
    assert_eq!(error.code(), "INVALID_ARGUMENT");
    let same = json!({ "eventId": event["eventId"], "fingerprint": fp });
    let decision = decide(rules, object(&event), Some(object(&same)), None).unwrap();
    assert_eq!(decision.outcome, Outcome::DuplicateDelivery);
}

// ------------------------------------------------------------ outbox claims

/// A stored time as the core takes it: whole milliseconds, 0 to 2^53 - 1.
fn stored_time(value: &Value) -> u64 {
    let time = value.as_u64().expect("a time is a whole number");
    assert!(time <= idemflow::jcs::MAX_SAFE_INTEGER, "a time fits a JS number exactly");
    time
}

#[test]
fn outbox_claim_vectors_through_claimable() {
    use idemflow::outbox::{claimable, Status};
    for case in cases(OUTBOX) {
        let operation = &case["operation"];
        let status = Status::parse(operation["status"].as_str().unwrap()).expect("a known status");
        let next_attempt_at = stored_time(&operation["nextAttemptAt"]);
        let lease_expires_at = match &operation["leaseExpiresAt"] {
            Value::Null => None,
            time => Some(stored_time(time)),
        };
        let answer = claimable(status, next_attempt_at, lease_expires_at, stored_time(&case["now"]));
        match (answer, case.get("error")) {
            (Ok(claimable), None) => assert_eq!(Value::Bool(claimable), case["claimable"], "{}", name(&case)),
            (Err(error), Some(expected)) => {
                assert_eq!(error.code(), expected["code"], "{}", name(&case));
                assert_eq!(error.details()["field"], expected["field"], "{}", name(&case));
                assert_eq!(case["claimable"], false, "{}: a refused record is never claimed", name(&case));
            }
            (answer, expected) => panic!("{}: expected {expected:?}, got {answer:?}", name(&case)),
        }
    }
}

#[test]
fn outbox_claim_vectors_cover_every_status_and_both_edges() {
    let all = cases(OUTBOX);
    let with = |status: &str, claimable: bool| {
        all.iter()
            .filter(|c| c["operation"]["status"] == status && c["claimable"] == claimable && c.get("error").is_none())
            .count()
    };
    for status in ["pending", "claimed"] {
        assert!(with(status, true) > 0 && with(status, false) > 0, "{status}: both answers");
    }
    for status in ["done", "dead"] {
        assert!(with(status, false) > 0 && with(status, true) == 0, "{status}: never claimable");
    }
    // The boundary itself: the time a case is due or expires at equals now.
    let at_now = |key: &str| all.iter().any(|c| c["operation"][key] == c["now"] && c["claimable"] == true);
    assert!(at_now("nextAttemptAt") && at_now("leaseExpiresAt"), "equal times are claimable");
    let max = json!(idemflow::jcs::MAX_SAFE_INTEGER);
    assert!(all.iter().any(|c| c["now"] == max), "a case at 2^53 - 1");
}

// ------------------------------------------------------- the keyed mode

#[test]
fn a_new_key_runs_and_is_recorded_as_a_receipt_of_its_own_type() {
    let fp = fingerprint_text("{\"amount\":\"125\"}").unwrap();
    let answer = parse(
        &decide_key(&json!({ "key": "order-42", "fingerprint": fp, "storedFingerprint": null }).to_string()).unwrap(),
    );
    assert_eq!(
        answer,
        json!({ "outcome": "run", "receipt": {
            "eventId": "order-42", "fingerprint": fp, "workflowId": "order-42", "eventType": "idemflow.key",
            "outcome": "applied", "ruleSet": null, "result": { "operationIds": [], "status": null, "revision": null },
        } })
    );
}

#[test]
fn the_same_key_replays_with_the_same_payload_and_conflicts_with_another() {
    let fp = fingerprint_text("[1]").unwrap();
    let other = fingerprint_text("[2]").unwrap();
    let request = |stored: &str| json!({ "key": "k", "fingerprint": fp, "storedFingerprint": stored }).to_string();
    assert_eq!(parse(&decide_key(&request(&fp)).unwrap()), json!({ "outcome": "replay" }));
    let conflict = decide_key(&request(&other)).unwrap_err();
    assert_eq!((conflict.code(), conflict.disposition().as_str()), ("IDEMPOTENCY_KEY_CONFLICT", "reconcile"));
    assert_eq!(conflict.details()["storedFingerprint"], json!(other));
    assert_eq!(conflict.details()["fingerprint"], json!(fp));
    // An event's receipt under the same id is another payload, never a replay.
    let event =
        decide_key(&request("fp1:0000000000000000000000000000000000000000000000000000000000000000")).unwrap_err();
    assert_eq!(event.code(), "IDEMPOTENCY_KEY_CONFLICT");
}

#[test]
fn a_key_or_fingerprint_out_of_shape_is_an_invalid_argument() {
    let fp = fingerprint_text("1").unwrap();
    for request in [
        json!({ "key": "", "fingerprint": fp, "storedFingerprint": null }),
        json!({ "key": "k".repeat(513), "fingerprint": fp, "storedFingerprint": null }),
        json!({ "key": "k", "fingerprint": "pf1:abc", "storedFingerprint": null }),
        json!({ "key": "k", "fingerprint": fp.to_uppercase(), "storedFingerprint": null }),
        json!({ "key": "k", "fingerprint": fp, "storedFingerprint": null, "extra": 1 }),
    ] {
        assert_eq!(decide_key(&request.to_string()).unwrap_err().code(), "INVALID_ARGUMENT", "{request}");
    }
    assert_eq!(decide_key("[\"\\ud800\"]").unwrap_err().code(), "INVALID_ARGUMENT");
}
