#![cfg(not(target_arch = "wasm32"))]
//! The short notation of rules: `"newer": countField` (the newer / same /
//! older triage of a numbered observation) and an `applied` answer without
//! `to` (it keeps the status). Each stands for rules a definition could write
//! out in full, so the built-in deposit-swap v3, written with them, must
//! decide every case as its long form (the definition as it was written
//! before the notation existed, kept in tests/fixtures) does.

// idemflow::Error is large by design.
#![allow(clippy::result_large_err)]

use serde_json::{json, Map, Value};

use idemflow::ruleset::load_unverified;
use idemflow::{decide, RuleSet};

const LONG_FORM: &str = include_str!("fixtures/deposit-swap.v3.long.json");

fn object(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

/// A decision or an error as JSON, with the rule set's hash taken out (the
/// two forms are two texts, so two hashes).
fn answer(rule_set: &RuleSet, event: &Map<String, Value>, workflow: Option<&Map<String, Value>>) -> String {
    let value = match decide(rule_set, event, None, workflow) {
        Ok(decision) => serde_json::to_value(decision).unwrap(),
        Err(error) => error.to_json(),
    };
    value.to_string().replace(&rule_set.hash, "HASH")
}

#[test]
fn deposit_swap_v3_decides_every_case_as_its_long_form() {
    let short = RuleSet::builtin_version("deposit-swap", Some(3)).unwrap();
    let long = RuleSet::from_json(LONG_FORM).unwrap_or_else(|e| panic!("{e}: {:?}", e.details()));
    assert_eq!((long.id.as_str(), long.version), ("deposit-swap", 3));
    let rules = |rs: &RuleSet| rs.definition()["rules"].as_array().unwrap().len();
    assert_eq!((rules(short), rules(&long)), (17, 21), "the notation shortens the table");

    let statuses = ["waiting", "deposit", "exchange", "sending", "success", "overdue", "reversed", "review"];
    let deposit_events = ["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED", "DEPOSIT_REVERSED"];
    let mut compared = 0;
    let mut outcomes = std::collections::BTreeSet::new();
    for status in statuses {
        // This deposit's entry: none, or its last word, number and whether it was sent for review.
        let mut entries: Vec<Option<Value>> = vec![None];
        for word in deposit_events {
            for sequence in [1, 2, 3] {
                for reviewed in [false, true] {
                    let mut entry = json!({ "event": word, "amountUnits": "100", "sequence": sequence });
                    if reviewed {
                        entry["operations"] = json!(["review-deposit"]);
                    }
                    entries.push(Some(entry));
                }
            }
        }
        for entry in &entries {
            // Another deposit beside it: none, detected, confirmed.
            for other in [None, Some("DEPOSIT_DETECTED"), Some("DEPOSIT_CONFIRMED"), Some("DEPOSIT_REVERSED")] {
                // The exchanged deposit: none, this one, the other.
                for exchanged in [None, Some("dep-a"), Some("dep-b")] {
                    for expected in ["100", "150"] {
                        let mut deposits = Map::new();
                        if let Some(entry) = entry {
                            deposits.insert("dep-a".into(), entry.clone());
                        }
                        if let Some(word) = other {
                            deposits
                                .insert("dep-b".into(), json!({ "event": word, "amountUnits": "70", "sequence": 2 }));
                        }
                        let mut workflow = json!({
                            "id": "swap-1", "status": status, "revision": 3,
                            "expectedUnits": expected, "deposits": deposits,
                        });
                        if let Some(exchanged) = exchanged {
                            workflow["depositRef"] = json!(exchanged);
                            workflow["amountUnits"] = json!("100");
                            workflow["sequence"] = json!(2);
                        }
                        let workflow = object(workflow);
                        for event_type in deposit_events {
                            for (sequence, amount) in [(1, "100"), (2, "100"), (3, "100"), (4, "100"), (3, "90")] {
                                let event = object(json!({
                                    "eventId": "e-1", "workflowId": "swap-1", "type": event_type,
                                    "depositRef": "dep-a", "amountUnits": amount, "sequence": sequence,
                                }));
                                let (a, b) =
                                    (answer(short, &event, Some(&workflow)), answer(&long, &event, Some(&workflow)));
                                assert_eq!(a, b, "{event_type} #{sequence} on {}", Value::Object(workflow.clone()));
                                let kind = [
                                    "\"applied\"",
                                    "\"already-applied\"",
                                    "\"stale\"",
                                    "IDENTITY_MISMATCH",
                                    "INVALID_TRANSITION",
                                ]
                                .into_iter()
                                .find(|k| a.contains(k))
                                .unwrap_or("other");
                                outcomes.insert(kind);
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    // The grid reaches every kind of answer, not only errors.
    assert!(compared > 20_000, "{compared}");
    let seen: Vec<&str> = outcomes.into_iter().collect();
    assert_eq!(seen, ["\"already-applied\"", "\"applied\"", "\"stale\"", "IDENTITY_MISMATCH"]);
}

/// A rule set to try the notation on: a document whose editions are numbered.
fn document(rule: Value) -> Value {
    json!({
        "id": "document", "version": 1,
        "statuses": [{ "name": "draft", "initial": true }, { "name": "published", "initial": true }, { "name": "archived", "terminal": true }],
        "fields": [{ "name": "edition", "kind": "count" }, { "name": "title", "kind": "text" }],
        "events": [
            { "type": "EDITED", "fields": ["edition", "title"], "identity": ["edition"] },
            { "type": "ARCHIVED", "fields": ["title"] }
        ],
        "rules": [
            { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
            rule,
            { "on": "ARCHIVED", "in": ["draft", "published"], "then": { "outcome": "applied", "to": "archived" } }
        ],
        "otherwise": { "error": "INVALID_TRANSITION", "disposition": "reconcile" }
    })
}

fn refusal(definition: &Value) -> (String, String) {
    let error = load_unverified(definition).expect_err("refused");
    let details = error.details();
    (details["path"].as_str().unwrap().to_string(), details["reason"].as_str().unwrap().to_string())
}

#[test]
fn newer_and_a_kept_status_load_to_the_rules_written_out() {
    let short = document(json!({
        "on": "EDITED", "in": ["draft", "published"], "newer": "edition",
        "then": { "outcome": "applied", "record": ["edition", "title"] }
    }));
    let mut long = document(json!({
        "on": "EDITED", "in": "draft", "cases": [
            { "when": ["edition", ">", "edition"], "then": { "outcome": "applied", "to": "draft", "record": ["edition", "title"] } },
            { "when": ["edition", "=", "edition"], "then": { "outcome": "already-applied" } },
            { "then": { "outcome": "stale" } }
        ]
    }));
    long["rules"].as_array_mut().unwrap().insert(
        2,
        json!({ "on": "EDITED", "in": "published", "cases": [
            { "when": ["edition", ">", "edition"], "then": { "outcome": "applied", "to": "published", "record": ["edition", "title"] } },
            { "when": ["edition", "=", "edition"], "then": { "outcome": "already-applied" } },
            { "then": { "outcome": "stale" } }
        ] }),
    );
    let (short, long) = (RuleSet::from_value(&short).unwrap(), RuleSet::from_value(&long).unwrap());
    for status in ["draft", "published"] {
        for (recorded, sent, outcome) in [(2, 3, "applied"), (2, 2, "already-applied"), (2, 1, "stale")] {
            let workflow =
                object(json!({ "id": "doc-1", "status": status, "revision": 5, "edition": recorded, "title": "t" }));
            let event = object(
                json!({ "eventId": "e", "workflowId": "doc-1", "type": "EDITED", "edition": sent, "title": "u" }),
            );
            let a = answer(&short, &event, Some(&workflow));
            assert_eq!(a, answer(&long, &event, Some(&workflow)), "{status} {recorded} {sent}");
            assert!(a.contains(&format!("\"outcome\":\"{outcome}\"")), "{a}");
            if outcome == "applied" {
                assert!(a.contains(&format!("\"status\":\"{status}\"")), "the status is kept: {a}");
            }
        }
    }
    // The table shows the triage's cases, and one rule per kept status.
    let markdown = idemflow::ruleset::table::markdown(&short);
    assert!(
        markdown
            .contains("| EDITED | draft |  | edition > recorded edition | applied → draft; records edition, title |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| EDITED | published |  | edition > recorded edition | applied → published;"),
        "{markdown}"
    );
    assert!(markdown.contains("| | | | edition = recorded edition | already-applied |"), "{markdown}");
}

#[test]
fn the_notation_refuses_what_it_cannot_mean() {
    let cases = [
        (
            json!({ "on": "EDITED", "in": "draft", "newer": "title", "then": { "outcome": "applied", "to": "published" } }),
            "$.rules[1].newer",
            "is not a count",
        ),
        (
            json!({ "on": "EDITED", "in": "draft", "newer": "pages", "then": { "outcome": "applied", "to": "published" } }),
            "$.rules[1].newer",
            "is not a declared field",
        ),
        (
            json!({ "on": ["EDITED", "ARCHIVED"], "in": "published", "newer": "edition", "then": { "outcome": "stale" } }),
            "$.rules[1].newer",
            "is not carried by every event type",
        ),
        (
            json!({ "on": "EDITED", "in": "draft", "newer": "edition",
                    "when": ["edition", ">=", "edition"], "then": { "outcome": "applied", "to": "published" },
                    "else": { "outcome": "stale" } }),
            "$.rules[1].newer",
            "compares \"edition\" itself",
        ),
        (
            json!({ "on": "EDITED", "in": ["(none)", "draft"], "then": { "outcome": "applied" } }),
            "$.rules[1].in",
            "has none to keep",
        ),
    ];
    for (rule, path, reason) in cases {
        let (at, why) = refusal(&document(rule.clone()));
        assert_eq!(at, path, "{rule}: {why}");
        assert!(why.contains(reason), "{rule}: {why}");
    }
    // A kept status in `otherwise` has no status of its own either.
    let mut definition = document(json!({ "on": "EDITED", "in": "draft", "then": { "outcome": "stale" } }));
    definition["otherwise"] = json!({ "outcome": "applied" });
    let (at, _) = refusal(&definition);
    assert!(at.starts_with("$.otherwise"), "{at}");
}
