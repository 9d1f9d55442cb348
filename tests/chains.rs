#![cfg(not(target_arch = "wasm32"))]
//! Versioned observations and ordered comparisons (issue 21, first slice):
//! the `count` field kind, `when`/`else` rules, `order.sequence`, and the
//! verifier over numbered chains, through the public Rust API.

#![allow(clippy::result_large_err)]

use serde_json::{json, Map, Value};

use idemflow::event::validate;
use idemflow::fingerprint::canonical_bytes;
use idemflow::proof::verify_definition;
use idemflow::ruleset::{load_unverified, BUILTIN_DEPOSIT_SWAP, BUILTIN_DEPOSIT_SWAP_V2, BUILTIN_DEPOSIT_SWAP_V3};
use idemflow::{decide, Error, Outcome, RuleSet};

fn object(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

fn v3() -> &'static RuleSet {
    RuleSet::builtin_version("deposit-swap", Some(3)).unwrap()
}

fn v3_definition() -> Value {
    serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V3).unwrap()
}

/// A deposit event of the v3 chain watcher.
fn deposit(id: &str, event_type: &str, sequence: Value) -> Map<String, Value> {
    object(json!({
        "eventId": id, "workflowId": "swap-9", "type": event_type,
        "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000", "sequence": sequence,
    }))
}

fn workflow(status: &str, sequence: Value) -> Map<String, Value> {
    object(json!({
        "id": "swap-9", "status": status, "revision": 3,
        "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000", "sequence": sequence,
    }))
}

/// A small rule set with a count and two amounts, for the notation's load errors.
fn counters(rule: Value) -> Value {
    json!({
        "id": "counters", "version": 1,
        "statuses": [{ "name": "open", "initial": true }],
        "fields": [
            { "name": "seen", "kind": "count" }, { "name": "other", "kind": "count" },
            { "name": "amountUnits", "kind": "units" }, { "name": "limitUnits", "kind": "units" },
            { "name": "note", "kind": "text" }
        ],
        "events": [
            { "type": "TICK", "fields": ["seen", "amountUnits", "note"] },
            { "type": "TOCK", "fields": ["amountUnits"] }
        ],
        "rules": [
            { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
            rule,
            { "on": "TOCK", "in": "open", "then": { "outcome": "stale" } }
        ]
    })
}

fn refused_at(definition: &Value) -> (String, String) {
    let error = load_unverified(definition).expect_err("refused");
    assert_eq!(error.code(), "RULESET_INVALID", "{error}");
    let details = error.details();
    (details["path"].as_str().unwrap().to_string(), details["reason"].as_str().unwrap_or_default().to_string())
}

// ------------------------------------------------------------ notation: load

#[test]
fn a_when_is_loaded_with_its_else() {
    let rules = load_unverified(&counters(json!({
        "on": "TICK", "in": "open", "when": ["seen", ">", "seen"],
        "then": { "outcome": "applied", "to": "open", "record": ["seen"] }, "else": { "outcome": "stale" }
    })))
    .unwrap();
    assert_eq!(rules.fields()[0].kind.as_str(), "count");
}

#[test]
fn a_malformed_when_is_refused_with_its_path() {
    let when = |when: Value| {
        counters(
            json!({ "on": "TICK", "in": "open", "when": when, "then": { "outcome": "stale" }, "else": { "outcome": "stale" } }),
        )
    };
    assert_eq!(refused_at(&when(json!("seen > seen"))).0, "$.rules[1].when");
    assert_eq!(refused_at(&when(json!(["seen", ">"]))).0, "$.rules[1].when");
    assert_eq!(refused_at(&when(json!(["nope", ">", "seen"]))).0, "$.rules[1].when[0]");
    assert_eq!(refused_at(&when(json!(["seen", "=>", "seen"]))).0, "$.rules[1].when[1]");
    assert_eq!(refused_at(&when(json!(["seen", ">", "nope"]))).0, "$.rules[1].when[2]");
    // Text does not compare; two kinds do not compare.
    let (path, reason) = refused_at(&when(json!(["note", ">", "note"])));
    assert_eq!(path, "$.rules[1].when");
    assert!(reason.contains("integers only"), "{reason}");
    let (path, reason) = refused_at(&when(json!(["seen", "<", "amountUnits"])));
    assert_eq!(path, "$.rules[1].when");
    assert!(reason.contains("one kind"), "{reason}");
    // Amounts compare with amounts, counts with other counts.
    assert!(load_unverified(&when(json!(["amountUnits", "<=", "limitUnits"]))).is_ok());
    assert!(load_unverified(&when(json!(["seen", "=", "other"]))).is_ok());
}

#[test]
fn a_when_reads_only_a_field_every_answered_event_carries() {
    let definition = counters(json!({
        "on": ["TICK", "TOCK"], "in": "open", "when": ["seen", ">", "seen"],
        "then": { "outcome": "stale" }, "else": { "outcome": "stale" }
    }));
    let (path, reason) = refused_at(&definition);
    assert_eq!(path, "$.rules[1].when[0]");
    assert!(reason.contains("not carried"), "{reason}");
}

#[test]
fn when_and_else_go_together() {
    let only_when =
        counters(json!({ "on": "TICK", "in": "open", "when": ["seen", ">", "seen"], "then": { "outcome": "stale" } }));
    assert_eq!(refused_at(&only_when).0, "$.rules[1].else");
    let only_else =
        counters(json!({ "on": "TICK", "in": "open", "then": { "outcome": "stale" }, "else": { "outcome": "stale" } }));
    assert_eq!(refused_at(&only_else).0, "$.rules[1].else");
    let bad_else = counters(json!({
        "on": "TICK", "in": "open", "when": ["seen", ">", "seen"], "then": { "outcome": "stale" }, "else": { "outcome": "maybe" }
    }));
    assert_eq!(refused_at(&bad_else).0, "$.rules[1].else.outcome");
}

#[test]
fn an_unknown_field_kind_names_count_among_the_kinds() {
    let mut definition = counters(json!({ "on": "TICK", "in": "open", "then": { "outcome": "stale" } }));
    definition["fields"][0]["kind"] = json!("integer");
    let (path, reason) = refused_at(&definition);
    assert_eq!(path, "$.fields[0].kind");
    assert!(reason.contains("\"count\""), "{reason}");
}

#[test]
fn a_malformed_sequence_declaration_is_refused_with_its_path() {
    let with_sequence = |sequence: Value| {
        let mut definition = v3_definition();
        definition["order"]["sequence"] = sequence;
        definition
    };
    let events = json!(["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED", "DEPOSIT_REVERSED"]);
    assert_eq!(
        refused_at(&with_sequence(json!({ "field": "amountUnits", "events": events }))).0,
        "$.order.sequence.field"
    );
    assert_eq!(refused_at(&with_sequence(json!({ "field": "nope", "events": events }))).0, "$.order.sequence.field");
    assert_eq!(
        refused_at(&with_sequence(json!({ "field": "sequence", "events": ["DEPOSIT_DETECTED", "DEADLINE_PASSED"] }))).0,
        "$.order.sequence.events[1]"
    );
    let (path, reason) =
        refused_at(&with_sequence(json!({ "field": "sequence", "events": ["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED"] })));
    assert_eq!(path, "$.order.sequence.events");
    assert!(reason.contains("DEPOSIT_REVERSED"), "{reason}");
}

// ------------------------------------------------------- count validation

#[test]
fn a_sequence_must_be_a_safe_integer_of_at_least_one() {
    for (value, says) in [
        (json!("3"), "not a string"),
        (json!(0), "at least 1"),
        (json!(-2), "at least 1"),
        (json!(1.5), "whole number"),
        (json!(9_007_199_254_740_992u64), "2^53 - 1"),
        (json!(null), "not null"),
        (json!(true), "not boolean"),
    ] {
        let error = validate(v3(), &deposit("e-1", "DEPOSIT_DETECTED", value.clone())).unwrap_err();
        assert_eq!(error.code(), "INVALID_EVENT", "{value}");
        assert_eq!(error.details()["field"], "sequence", "{value}");
        assert!(error.to_string().contains(says), "{value}: {error}");
    }
    let mut missing = deposit("e-1", "DEPOSIT_DETECTED", json!(1));
    missing.remove("sequence");
    let error = validate(v3(), &missing).unwrap_err();
    assert_eq!((error.code(), error.details()["field"].clone()), ("INVALID_EVENT", json!("sequence")));
    assert!(validate(v3(), &deposit("e-1", "DEPOSIT_DETECTED", json!(9_007_199_254_740_991u64))).is_ok());
}

#[test]
fn a_count_enters_the_fingerprint_as_a_json_number() {
    let event = validate(v3(), &deposit("e-1", "DEPOSIT_CONFIRMED", json!(4))).unwrap();
    assert_eq!(
        canonical_bytes(v3(), &event),
        r#"{"amountUnits":"12500000","depositRef":"btc-mainnet:tx-abc:vout-0","sequence":4,"type":"DEPOSIT_CONFIRMED","workflowId":"swap-9"}"#
    );
    // Another observation of the same fact is another fingerprint; a re-publication the same one.
    let a = decide(v3(), &deposit("e-1", "DEPOSIT_DETECTED", json!(1)), None, None).unwrap_err();
    assert_eq!(a.code(), "UNKNOWN_WORKFLOW");
    let fp = |id: &str, n: u64| {
        decide(v3(), &deposit(id, "DEPOSIT_DETECTED", json!(n)), None, Some(&workflow("waiting", json!(null))))
            .unwrap()
            .fingerprint
    };
    assert_eq!(fp("e-1", 1), fp("e-2", 1));
    assert_ne!(fp("e-1", 1), fp("e-1", 3));
}

// ------------------------------------------------------------- evaluation

const REF: &str = "btc-mainnet:tx-abc:vout-0";

/// A swap in `status` whose deposit `REF` last said `event` with `sequence`
/// (in its `deposits` entry); after the exchange started, the deposit is also
/// the one the swap acts on (recorded at the top level).
fn with_deposit(status: &str, event: &str, sequence: Value) -> Map<String, Value> {
    let mut swap = object(json!({
        "id": "swap-9", "status": status, "revision": 3,
        "deposits": { REF: { "event": event, "amountUnits": "12500000", "sequence": sequence } },
    }));
    if !["waiting", "deposit", "reversed"].contains(&status) {
        swap.insert("depositRef".into(), json!(REF));
        swap.insert("amountUnits".into(), json!("12500000"));
        swap.insert("sequence".into(), sequence);
    }
    swap
}

/// Detection #1 decided against a swap in `status` that has seen no deposit.
fn first_detection_in(status: &str) -> idemflow::Decision {
    let swap = object(json!({ "id": "swap-9", "status": status, "revision": 3 }));
    decide(v3(), &deposit("e-1", "DEPOSIT_DETECTED", json!(1)), None, Some(&swap)).unwrap()
}

#[test]
fn a_recorded_count_is_written_as_a_number() {
    let decision = first_detection_in("waiting");
    assert_eq!(decision.outcome, Outcome::Applied);
    let set = decision.write_set.workflow.unwrap().set;
    assert_eq!(set["deposits"][REF], json!({ "event": "DEPOSIT_DETECTED", "amountUnits": "12500000", "sequence": 1 }));
}

#[test]
fn when_picks_the_case_by_the_count_recorded_for_that_deposit() {
    let answer = |status: &str,
                  last: &str,
                  recorded: u64,
                  event_type: &str,
                  sequence: u64|
     -> Result<(Outcome, String), Error> {
        let swap = with_deposit(status, last, json!(recorded));
        let decision = decide(v3(), &deposit("e-1", event_type, json!(sequence)), None, Some(&swap))?;
        let to = decision.write_set.workflow.map(|w| w.set["status"].as_str().unwrap().to_string()).unwrap_or_default();
        Ok((decision.outcome, to))
    };
    // A re-inclusion after a reversal recorded at 2.
    assert_eq!(
        answer("reversed", "DEPOSIT_REVERSED", 2, "DEPOSIT_DETECTED", 3).unwrap(),
        (Outcome::Applied, "deposit".into())
    );
    assert_eq!(
        answer("reversed", "DEPOSIT_REVERSED", 2, "DEPOSIT_CONFIRMED", 4).unwrap(),
        (Outcome::Applied, "exchange".into())
    );
    // A late copy of observation 1 is stale; a re-publication of the reversal already-applied.
    assert_eq!(answer("reversed", "DEPOSIT_REVERSED", 2, "DEPOSIT_DETECTED", 1).unwrap().0, Outcome::Stale);
    assert_eq!(answer("reversed", "DEPOSIT_REVERSED", 2, "DEPOSIT_REVERSED", 2).unwrap().0, Outcome::AlreadyApplied);
    // After the exchange started: a reversal opens a review, an older one is stale.
    assert_eq!(
        answer("exchange", "DEPOSIT_CONFIRMED", 4, "DEPOSIT_REVERSED", 5).unwrap(),
        (Outcome::Applied, "review".into())
    );
    assert_eq!(answer("exchange", "DEPOSIT_CONFIRMED", 4, "DEPOSIT_REVERSED", 2).unwrap().0, Outcome::Stale);
    // A newer observation in review is recorded and stays there.
    assert_eq!(
        answer("review", "DEPOSIT_DETECTED", 3, "DEPOSIT_DETECTED", 4).unwrap(),
        (Outcome::Applied, "review".into())
    );
}

#[test]
fn a_missing_recorded_count_compares_as_zero() {
    // 1 > 0: a deposit the swap has no entry for is new, whatever the status.
    assert_eq!(first_detection_in("reversed").outcome, Outcome::Applied);
}

#[test]
fn the_guard_reads_the_amount_recorded_for_that_deposit() {
    let swap = with_deposit("reversed", "DEPOSIT_REVERSED", json!(2));
    let mut changed = deposit("e-1", "DEPOSIT_DETECTED", json!(9));
    changed["amountUnits"] = json!("12500001");
    let error = decide(v3(), &changed, None, Some(&swap)).unwrap_err();
    assert_eq!((error.code(), error.details()["field"].clone()), ("IDENTITY_MISMATCH", json!("amountUnits")));
    // Another depositRef is another deposit: recorded beside the first, not a mismatch.
    let mut other = deposit("e-2", "DEPOSIT_DETECTED", json!(1));
    other["depositRef"] = json!("btc-mainnet:tx-other:vout-1");
    let decision = decide(v3(), &other, None, Some(&swap)).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
    let deposits = &decision.write_set.workflow.unwrap().set["deposits"];
    assert_eq!(deposits.as_object().unwrap().len(), 2, "{deposits}");
    assert_eq!(deposits[REF]["sequence"], 2);
}

#[test]
fn a_stored_count_of_the_wrong_shape_is_an_invalid_record_not_a_panic() {
    for stored in
        [json!("2"), json!(0), json!(-1), json!(2.5), json!(1e300), json!(true), json!([2]), json!({ "n": 2 })]
    {
        let swap = with_deposit("reversed", "DEPOSIT_REVERSED", stored.clone());
        let error = decide(v3(), &deposit("e-1", "DEPOSIT_DETECTED", json!(3)), None, Some(&swap)).unwrap_err();
        assert_eq!(error.code(), "INVALID_RECORD", "{stored}");
        assert_eq!(error.details()["field"], format!("deposits[\"{REF}\"].sequence"), "{stored}");
    }
}

#[test]
fn amounts_compare_as_integers_of_any_length() {
    let definition = counters(json!({
        "on": "TICK", "in": "open", "when": ["amountUnits", "<=", "limitUnits"],
        "then": { "outcome": "applied", "to": "open", "record": ["amountUnits"] }, "else": { "outcome": "stale" }
    }));
    let rules = RuleSet::from_value(&definition).unwrap();
    let outcome = |amount: &str, limit: Value| {
        let event = object(
            json!({ "eventId": "e", "workflowId": "w", "type": "TICK", "seen": 1, "amountUnits": amount, "note": "n" }),
        );
        let workflow = object(json!({ "id": "w", "status": "open", "revision": 1, "limitUnits": limit }));
        decide(&rules, &event, None, Some(&workflow)).map(|d| d.outcome).map_err(|e| e.code())
    };
    assert_eq!(outcome("99", json!("100")), Ok(Outcome::Applied));
    assert_eq!(outcome("100", json!("100")), Ok(Outcome::Applied));
    assert_eq!(outcome("101", json!("100")), Ok(Outcome::Stale));
    assert_eq!(outcome("123456789012345678901234567890", json!("99999999999999999999")), Ok(Outcome::Stale));
    // A missing limit is 0.
    assert_eq!(outcome("1", json!(null)), Ok(Outcome::Stale));
    assert_eq!(outcome("1", json!(100)), Err("INVALID_RECORD"));
    assert_eq!(outcome("1", json!("010")), Err("INVALID_RECORD"));
}

// ---------------------------------------------------------------- builtins

#[test]
fn deposit_swap_v4_is_current_and_v1_v2_v3_stay_loadable() {
    assert_eq!(RuleSet::builtin("deposit-swap").unwrap().version, 4);
    assert_eq!(RuleSet::builtin("deposit-swap").unwrap().hash, RuleSet::from_json(BUILTIN_DEPOSIT_SWAP).unwrap().hash);
    assert_eq!(v3().version, 3);
    assert_eq!(RuleSet::builtin_version("deposit-swap", Some(2)).unwrap().version, 2);
    assert_eq!(RuleSet::builtin_version("deposit-swap", Some(1)).unwrap().version, 1);
    assert_eq!(RuleSet::builtin("subscription").unwrap().version, 2);
    assert_eq!(RuleSet::builtin_version("subscription", Some(1)).unwrap().version, 1);
    assert_eq!(v3().hash, RuleSet::from_json(BUILTIN_DEPOSIT_SWAP_V3).unwrap().hash);
}

// ------------------------------------------------------------------ verifier

fn reorder_property(definition: &Value) -> Value {
    let report = verify_definition(definition).unwrap().to_json();
    report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap().clone()
}

fn all_counterexamples(property: &Value) -> Vec<Value> {
    let mut all = vec![property["counterexample"].clone()];
    all.extend(property["moreCounterexamples"].as_array().into_iter().flatten().cloned());
    all
}

#[test]
fn deposit_swap_v3_is_reorder_safe_over_two_deposits_with_numbered_observations() {
    let property = reorder_property(&v3_definition());
    assert_eq!(property["ok"], true, "{property}");
    let checked = &property["checked"];
    assert_eq!(checked["bound"]["oneFact"]["observations"], 4);
    assert_eq!(checked["bound"]["twoFacts"]["observationsEach"], 3);
    let by_facts = checked["byFacts"].as_array().unwrap();
    let two = by_facts.iter().find(|f| f["facts"] == "two").unwrap();
    assert!(two["histories"].as_u64().unwrap() > 1_000, "{checked}");
    let histories = checked["histories"].as_u64().unwrap();
    let configurations = checked["configurations"].as_u64().unwrap();
    assert!(histories > 10_000 && configurations > 1_000_000, "{checked}");
    // One total budget.
    assert_eq!(checked["budget"]["configurations"]["used"], configurations);
    assert!(configurations < checked["budget"]["configurations"]["limit"].as_u64().unwrap());
}

#[test]
fn v2_with_numbered_observations_loses_the_re_inclusion() {
    // v2's rules with v3's sequence declared: the verifier finds a history
    // with a re-detection after the reversal that delivery order changes.
    let mut v2: Value = serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V2).unwrap();
    v2["fields"].as_array_mut().unwrap().push(json!({ "name": "sequence", "kind": "count" }));
    for event in v2["events"].as_array_mut().unwrap() {
        if event["type"].as_str().unwrap().starts_with("DEPOSIT_") {
            event["fields"].as_array_mut().unwrap().push(json!("sequence"));
        }
    }
    v2["order"]["sequence"] = v3_definition()["order"]["sequence"].clone();
    let property = reorder_property(&v2);
    assert_eq!(property["ok"], false, "{property}");
    let re_inclusion = all_counterexamples(&property).into_iter().find(|c| {
        let history: Vec<&str> = c["history"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
        // A reversal, then a newer detection or confirmation: the re-inclusion.
        history.windows(2).any(|w| {
            w[0].starts_with("DEPOSIT_REVERSED")
                && (w[1].starts_with("DEPOSIT_DETECTED") || w[1].starts_with("DEPOSIT_CONFIRMED"))
        })
    });
    assert!(re_inclusion.is_some(), "{property}");
}

#[test]
fn a_v3_that_answers_the_re_inclusion_stale_is_refused_with_a_counterexample() {
    let mut definition = v3_definition();
    let rules = definition["rules"].as_array_mut().unwrap();
    for rule in rules.iter_mut() {
        let on = rule["on"].as_str().unwrap_or_default().to_string();
        if (on == "DEPOSIT_DETECTED" || on == "DEPOSIT_CONFIRMED")
            && rule["in"] == json!(["waiting", "deposit", "reversed"])
        {
            rule["in"] = json!(["waiting", "deposit"]);
        }
    }
    rules.push(
        json!({ "on": ["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED"], "in": "reversed", "then": { "outcome": "stale" } }),
    );
    let property = reorder_property(&definition);
    assert_eq!(property["ok"], false, "{property}");
    let example = &property["counterexample"];
    assert!(example["divergesAt"].is_number(), "{example}");
    let history = example["history"].to_string();
    assert!(history.contains("DEPOSIT_REVERSED"), "{example}");
    let error = RuleSet::from_value(&definition).unwrap_err();
    assert_eq!(error.code(), "RULESET_INVALID");
    assert!(error.to_string().contains("reorder-safe"), "{error}");
}

#[test]
fn a_comparison_on_amounts_under_an_order_claim_is_proven_not_refused() {
    // Every delivery is decided by the decider, with amounts below, equal to
    // and above the compared one: a `when` on amounts needs no model of its own.
    let mut definition = counters(json!({
        "on": "TICK", "in": "open", "when": ["amountUnits", "<=", "limitUnits"],
        "then": { "outcome": "stale" }, "else": { "outcome": "stale" }
    }));
    definition["order"] = json!({});
    let property = reorder_property(&definition);
    assert_eq!(property["ok"], true, "{property}");
    assert!(property["checked"].get("skipped").is_none(), "{property}");
    assert!(RuleSet::from_value(&definition).is_ok());
}

#[test]
fn many_sequenced_event_types_are_refused_by_the_history_budget_before_they_cost() {
    let types: Vec<String> = (0..200).map(|i| format!("OBSERVED_{i}")).collect();
    let definition = json!({
        "id": "observations", "version": 1,
        "statuses": [{ "name": "open", "initial": true }],
        "fields": [{ "name": "sequence", "kind": "count" }],
        "events": types.iter().map(|t| json!({ "type": t, "fields": ["sequence"] })).collect::<Vec<_>>(),
        "order": { "sequence": { "field": "sequence", "events": types } },
        "rules": [{ "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } }],
        "otherwise": { "outcome": "stale" }
    });
    let started = std::time::Instant::now();
    let error = RuleSet::from_value(&definition).unwrap_err();
    assert_eq!(error.details()["path"], "$.order", "{error}");
    assert!(error.to_string().contains("limit maxReorderHistories"), "{error}");
    assert!(started.elapsed().as_secs_f64() < 2.0, "{:?}", started.elapsed());
}

#[test]
fn a_facts_map_stored_as_a_string_of_json_text_is_invalid_record_not_the_map() {
    let v4 = RuleSet::builtin("deposit-swap").unwrap();
    let event = object(json!({
        "eventId": "e-2", "workflowId": "swap-9", "type": "DEPOSIT_CONFIRMED",
        "depositRef": "btc:tx-1:0", "amountUnits": "10", "sequence": 2
    }));
    let deposits = json!({ "btc:tx-1:0": { "event": "DEPOSIT_DETECTED", "amountUnits": "10", "sequence": 1 } });
    let swap = |facts: Value| {
        object(json!({ "id": "swap-9", "status": "deposit", "revision": 2, "expectedUnits": "10", "deposits": facts }))
    };
    assert_eq!(decide(v4, &event, None, Some(&swap(deposits.clone()))).unwrap().outcome, Outcome::Applied);
    for facts in [Value::String(deposits.to_string()), json!(7), json!(["btc:tx-1:0"])] {
        let error = decide(v4, &event, None, Some(&swap(facts.clone()))).unwrap_err();
        assert_eq!(error.code(), "INVALID_RECORD", "{facts}");
        assert_eq!(error.details()["field"], "deposits", "{facts}");
    }
}
