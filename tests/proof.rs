#![cfg(not(target_arch = "wasm32"))]
//! Issue 31: bugs planted in rule sets a user writes are caught by the proof,
//! each with a short counterexample, and invariants the user states are
//! checked after every delivery of every explored order.

use serde_json::{json, Value};

use idemflow::proof::verify_definition;
use idemflow::RuleSet;

fn property(definition: &Value, name: &str) -> Value {
    let report = verify_definition(definition).unwrap_or_else(|e| panic!("{e}")).to_json();
    report["properties"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone()
}

fn failing(definition: &Value) -> Vec<String> {
    let report = verify_definition(definition).unwrap().to_json();
    report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ok"] == false)
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

fn deliveries(example: &Value) -> usize {
    example["actual"]["deliveries"].as_array().map_or(usize::MAX, Vec::len)
}

/// Inventory holds numbered by version: a hold is set, changed any number of times, released.
fn holds() -> Value {
    json!({
        "id": "holds", "version": 1,
        "statuses": [{ "name": "open", "initial": true }, { "name": "held" }, { "name": "released" }],
        "fields": [
            { "name": "version", "kind": "count" }, { "name": "quantityUnits", "kind": "units" },
            { "name": "placedBy", "kind": "text" }
        ],
        "events": [
            { "type": "HOLD_SET", "fields": ["version", "quantityUnits", "placedBy"] },
            { "type": "HOLD_RELEASED", "fields": ["version"] }
        ],
        "order": { "sequence": { "field": "version", "events": ["HOLD_SET", "HOLD_RELEASED"] } },
        "rules": [
            { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
            { "on": "HOLD_SET", "in": ["open", "released"], "newer": "version",
              "then": { "outcome": "applied", "to": "held", "record": ["version", "quantityUnits", "placedBy"] } },
            { "on": "HOLD_SET", "in": "held", "newer": "version",
              "then": { "outcome": "applied", "record": ["version", "quantityUnits", "placedBy"] } },
            { "on": "HOLD_RELEASED", "in": ["open", "held"], "newer": "version",
              "then": { "outcome": "applied", "to": "released", "record": ["version"], "clear": ["quantityUnits", "placedBy"] } },
            { "on": "HOLD_RELEASED", "in": "released", "newer": "version", "then": { "outcome": "applied", "record": ["version"] } }
        ]
    })
}

fn rule<'a>(definition: &'a mut Value, on: &str, status: &str) -> &'a mut Value {
    definition["rules"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| {
            (r["on"] == on || r["on"].as_array().is_some_and(|a| a.contains(&json!(on))))
                && (r["in"] == status || r["in"].as_array().is_some_and(|a| a.contains(&json!(status))))
        })
        .unwrap_or_else(|| panic!("no rule on {on} in {status}"))
}

#[test]
fn the_hold_rules_are_proven_with_changes_in_a_row() {
    let property = property(&holds(), "reorder-safe");
    assert_eq!(property["ok"], true, "{property}");
    let says = property["checked"]["bound"]["says"].as_str().unwrap();
    assert!(says.contains("one type again included"), "{says}");
    assert_eq!(failing(&holds()), Vec::<String>::new());
}

#[test]
fn a_change_that_does_not_record_the_new_quantity_is_order_dependent() {
    // Set 1 then 2 in order keeps the first quantity, 2 first the second:
    // only the values tell the ends apart, and only two changes in a row show it.
    let mut definition = holds();
    rule(&mut definition, "HOLD_SET", "held")["then"]["record"] = json!(["version", "placedBy"]);
    let property = property(&definition, "reorder-safe");
    assert_eq!(property["ok"], false, "{property}");
    let example = &property["counterexample"];
    assert!(deliveries(example) <= 6, "{example}");
    let history: Vec<&str> = example["history"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(history.iter().filter(|e| e.starts_with("HOLD_SET")).count() >= 2, "{example}");
    let ends = (&example["expected"]["end"], &example["actual"]["end"]);
    assert_eq!(ends.0["status"], ends.1["status"], "the statuses agree: {example}");
    assert_ne!(ends.0["data"]["quantityUnits"], ends.1["data"]["quantityUnits"], "{example}");
}

#[test]
fn a_field_that_must_never_change_is_refused_when_a_rule_overwrites_it() {
    // Who placed the hold, kept from the first set: that is order-dependent
    // (the first set delivered is not always the first set), and the
    // invariant alone holds until a rule overwrites the field.
    let mut definition = holds();
    definition["invariants"] = json!([{ "name": "placed-once", "never": { "changes": "placedBy" } }]);
    rule(&mut definition, "HOLD_SET", "held")["then"]["record"] = json!(["version", "quantityUnits"]);
    rule(&mut definition, "HOLD_RELEASED", "held")["then"]["clear"] = json!(["quantityUnits"]);
    assert_eq!(property(&definition, "invariants")["ok"], true);
    rule(&mut definition, "HOLD_SET", "held")["then"]["record"] = json!(["version", "quantityUnits", "placedBy"]);
    let property = property(&definition, "invariants");
    assert_eq!(property["ok"], false, "{property}");
    let example = &property["counterexample"];
    assert_eq!(example["invariant"]["name"], "placed-once");
    assert_eq!(deliveries(example), 2, "the shortest order: {example}");
}

/// docs/your-rules.md's payments rule set.
fn payments() -> Value {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/your-rules.md")).unwrap();
    let start = doc.find("```json\n{\n  \"id\": \"payments\"").unwrap() + 8;
    let end = start + doc[start..].find("\n```").unwrap();
    serde_json::from_str(&doc[start..end]).unwrap()
}

#[test]
fn a_capture_after_a_cancellation_that_ships_is_caught_by_the_invariant_it_breaks() {
    let mut definition = payments();
    definition["invariants"] = json!([{ "name": "no-shipment-after-cancellation", "never": { "emit": "SHIP_ORDER", "after": "ORDER_CANCELLED" } }]);
    assert_eq!(failing(&definition), Vec::<String>::new(), "the documented rules keep it");
    rule(&mut definition, "PAYMENT_SUCCEEDED", "cancelled")["then"]["emit"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "type": "SHIP_ORDER", "id": "ship-order:{workflowId}" }));
    // Every order agrees (the race decides), so only the invariant tells.
    assert_eq!(failing(&definition), ["invariants"]);
    let example = &property(&definition, "invariants")["counterexample"];
    let events: Vec<&Value> = example["actual"]["deliveries"].as_array().unwrap().iter().map(|d| &d["event"]).collect();
    assert_eq!(events, ["ORDER_CANCELLED", "PAYMENT_SUCCEEDED"], "{example}");
    assert_eq!(example["actual"]["deliveries"][1]["rule"], "rules[3]");
    assert!(RuleSet::from_value(&definition).is_err(), "a rule set that breaks its invariant does not load");
}

#[test]
fn a_status_entered_after_another_and_two_operations_together_are_caught() {
    let mut definition = payments();
    definition["invariants"] = json!([
        { "name": "never-paid-after-cancel", "never": { "reach": "paid", "after": "cancelled" } },
        { "name": "ship-or-refund", "never": { "both": ["SHIP_ORDER", "REFUND"] } }
    ]);
    // Paid then cancelled ships and refunds: what the documented rules do, and what this invariant forbids.
    let broken = property(&definition, "invariants");
    assert_eq!(broken["ok"], false, "{broken}");
    let example = &broken["counterexample"];
    assert_eq!(example["invariant"]["name"], "ship-or-refund", "{example}");
    assert_eq!(deliveries(example), 2, "{example}");
    definition["invariants"].as_array_mut().unwrap().pop();
    assert_eq!(failing(&definition), Vec::<String>::new());
    rule(&mut definition, "PAYMENT_SUCCEEDED", "cancelled")["then"]["to"] = json!("paid");
    let example = &property(&definition, "invariants")["counterexample"];
    assert_eq!(example["invariant"]["name"], "never-paid-after-cancel", "{example}");
}

/// An order paid by one event whose amount is compared with what the shop expects.
fn priced() -> Value {
    json!({
        "id": "priced", "version": 1,
        "statuses": [{ "name": "open", "initial": true }, { "name": "paid" }, { "name": "short" }],
        "fields": [{ "name": "amountUnits", "kind": "units" }, { "name": "expectedUnits", "kind": "units" }],
        "events": [{ "type": "PAYMENT_SUCCEEDED", "fields": ["amountUnits"] }],
        "order": {},
        "rules": [
            { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
            { "on": "PAYMENT_SUCCEEDED", "in": "open", "cases": [
                { "when": ["amountUnits", ">=", "expectedUnits"],
                  "then": { "outcome": "applied", "to": "paid", "record": ["amountUnits"],
                            "emit": [{ "type": "SHIP_ORDER", "id": "ship-order:{workflowId}" }] } },
                { "then": { "outcome": "applied", "to": "short", "record": ["amountUnits"] } }
            ] },
            { "on": "PAYMENT_SUCCEEDED", "in": ["paid", "short"], "then": { "outcome": "already-applied" } }
        ],
        "invariants": [
            { "name": "paid-in-full", "never": { "emit": "SHIP_ORDER", "when": ["amountUnits", "<", "expectedUnits"] } },
            { "name": "one-shipment", "atMost": { "operation": "SHIP_ORDER", "count": 1 } }
        ]
    })
}

#[test]
fn an_amount_compared_under_an_order_claim_is_proven_with_amounts_below_equal_and_above() {
    assert_eq!(failing(&priced()), Vec::<String>::new());
    // `>` where `>=` was meant still never ships short; shipping whatever was paid does.
    let mut definition = priced();
    definition["rules"][1]["cases"][0]["when"] = json!(["amountUnits", ">", "expectedUnits"]);
    assert_eq!(failing(&definition), Vec::<String>::new());
    let mut definition = priced();
    definition["rules"][1]["cases"][0].as_object_mut().unwrap().remove("when");
    definition["rules"][1]["cases"].as_array_mut().unwrap().pop();
    let property = property(&definition, "invariants");
    assert_eq!(property["ok"], false, "{property}");
    let example = &property["counterexample"];
    assert_eq!(example["invariant"]["name"], "paid-in-full");
    assert_eq!(example["start"], "open");
    assert_eq!(example["workflow"]["expectedUnits"], "10", "{example}");
    assert_eq!(deliveries(example), 1);
}

#[test]
fn at_most_counts_operations_and_an_invariant_naming_nothing_is_refused_at_its_path() {
    let mut definition = priced();
    definition["invariants"] = json!([{ "name": "no-shipment", "atMost": { "operation": "SHIP_ORDER", "count": 0 } }]);
    let example = &property(&definition, "invariants")["counterexample"];
    assert_eq!(example["invariant"]["says"], "at most 0 SHIP_ORDER per workflow");
    for (invariant, path) in [
        (json!({ "name": "x", "never": { "both": ["SHIP_ORDER", "REFUND"] } }), "$.invariants[0].never.both[1]"),
        (json!({ "name": "x", "never": { "reach": "gone", "after": "open" } }), "$.invariants[0].never.reach"),
        (json!({ "name": "x", "never": { "emit": "SHIP_ORDER", "after": "NOPE" } }), "$.invariants[0].never.after"),
        (json!({ "name": "x", "never": { "changes": "nope" } }), "$.invariants[0].never.changes"),
        (json!({ "name": "x", "atMost": { "operation": "SHIP_ORDER", "count": 9 } }), "$.invariants[0].atMost.count"),
        (
            json!({ "name": "x", "atMost": { "operation": "SHIP_ORDER", "count": 1, "perFact": true } }),
            "$.invariants[0].atMost.perFact",
        ),
        (json!({ "name": "x" }), "$.invariants[0]"),
        (
            json!({ "name": "x", "never": { "emit": "SHIP_ORDER", "when": ["amountUnits", "<", "nope"] } }),
            "$.invariants[0].never.when[2]",
        ),
    ] {
        definition["invariants"] = json!([invariant]);
        let error = RuleSet::from_value(&definition).unwrap_err();
        assert_eq!(error.code(), "RULESET_INVALID");
        assert_eq!(error.details()["path"], path, "{error}");
    }
}

#[test]
fn the_builtins_state_their_invariants_and_keep_them() {
    let report = verify_definition(RuleSet::builtin("deposit-swap").unwrap().definition()).unwrap().to_json();
    let invariants = report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "invariants").unwrap();
    assert_eq!(invariants["ok"], true, "{invariants}");
    let names: Vec<&Value> =
        invariants["checked"]["invariants"].as_array().unwrap().iter().map(|i| &i["name"]).collect();
    assert_eq!(names, ["one-exchange", "covering-deposits-only", "one-review-per-deposit", "dust-never-kept"]);
}

// ------------------------------------------------------------ issue 37: dust

/// deposit-swap's answer to a partial confirmation before the exchange.
fn partial_confirmation(definition: &mut Value) -> &mut Value {
    let confirmed = rule(definition, "DEPOSIT_CONFIRMED", "waiting");
    confirmed["cases"].as_array_mut().unwrap().last_mut().unwrap()
}

#[test]
fn deposit_swap_keeps_no_partial_deposit_and_a_rule_that_keeps_one_breaks_dust_never_kept() {
    let mut definition = RuleSet::builtin("deposit-swap").unwrap().definition().clone();
    assert_eq!(partial_confirmation(&mut definition)["then"]["untracked"], true);
    // The partial confirmation kept in deposits, as version 3 did: 64 of them fill the map.
    partial_confirmation(&mut definition)["then"].as_object_mut().unwrap().remove("untracked");
    let example = &property(&definition, "invariants")["counterexample"];
    assert_eq!(example["invariant"]["name"], "dust-never-kept", "{example}");
    assert_eq!(example["amounts"]["A"], "below", "{example}");
    assert!(deliveries(example) <= 3, "{example}");
}

#[test]
fn an_untracked_fact_read_as_new_is_order_dependent_when_its_word_moves_the_workflow() {
    // A partial late deposit sent to review, untracked: its re-publication,
    // seen after the deadline, finds no entry and moves the swap again.
    let mut definition = RuleSet::builtin("deposit-swap").unwrap().definition().clone();
    let late = rule(&mut definition, "DEPOSIT_DETECTED", "overdue");
    late["cases"][0]["then"] = json!({
        "outcome": "applied", "to": "review", "untracked": true,
        "emit": [{ "type": "OPEN_REVIEW", "id": "open-review:{workflowId}", "payload": [] }]
    });
    let example = &property(&definition, "reorder-safe")["counterexample"];
    assert_ne!(example["expected"]["end"]["status"], example["actual"]["end"]["status"], "{example}");
    assert!(deliveries(example) <= 4, "{example}");
}

#[test]
fn untracked_belongs_to_answers_to_fact_events_only() {
    let mut definition = RuleSet::builtin("deposit-swap").unwrap().definition().clone();
    rule(&mut definition, "DEADLINE_PASSED", "waiting")["then"]["untracked"] = json!(true);
    let error = RuleSet::from_value(&definition).unwrap_err();
    assert_eq!(error.code(), "RULESET_INVALID");
    assert!(error.details()["path"].as_str().unwrap().ends_with(".then.untracked"), "{error}");
}

#[test]
fn deposit_swap_exchanging_a_short_deposit_breaks_its_own_invariant() {
    let mut definition = RuleSet::builtin("deposit-swap").unwrap().definition().clone();
    // The confirmation's cases: exchange when it covers, else review. Exchange whatever the amount.
    let confirmed = rule(&mut definition, "DEPOSIT_CONFIRMED", "waiting");
    let cases = confirmed["cases"].as_array_mut().unwrap();
    cases[0]["when"] = json!(["amountUnits", ">=", "amountUnits"]);
    let failed = failing(&definition);
    assert!(failed.contains(&"invariants".to_string()), "{failed:?}");
    let example = &property(&definition, "invariants")["counterexample"];
    assert_eq!(example["invariant"]["name"], "covering-deposits-only", "{example}");
    assert!(deliveries(example) <= 6, "{example}");
}

/// The `"invariants"` block a docs page marks `<!-- <marker>: begin -->`, as written.
fn documented_invariants(page: &str, marker: &str) -> Value {
    let doc = std::fs::read_to_string(format!("{}/docs/{page}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let begin = format!("<!-- {marker}: begin -->\n```json\n");
    let start = doc.find(&begin).unwrap_or_else(|| panic!("docs/{page} marks no {marker} block")) + begin.len();
    let end = start + doc[start..].find("\n```").unwrap();
    let block: Value = serde_json::from_str(&format!("{{{}}}", &doc[start..end])).unwrap();
    block["invariants"].clone()
}

#[test]
fn the_documented_invariants_example_holds_for_the_documented_payments_and_catches_the_planted_bug() {
    let mut definition = payments();
    definition["invariants"] = documented_invariants("rulesets.md", "invariants example");
    assert_eq!(failing(&definition), Vec::<String>::new());
    rule(&mut definition, "PAYMENT_SUCCEEDED", "cancelled")["then"]["to"] = json!("paid");
    let example = &property(&definition, "invariants")["counterexample"];
    assert_eq!(example["invariant"]["name"], "never-paid-after-cancel", "{example}");
}

#[test]
fn many_event_types_are_refused_by_the_history_budget_before_their_histories_are_built() {
    // 60 event types of at most 6 events each: billions of histories, never built.
    let types: Vec<String> = (0..60).map(|i| format!("SEEN_{i}")).collect();
    let definition = json!({
        "id": "wide", "version": 1,
        "statuses": [{ "name": "open", "initial": true }],
        "events": types.iter().map(|t| json!({ "type": t, "fields": [] })).collect::<Vec<_>>(),
        "order": {},
        "rules": [{ "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } }],
        "otherwise": { "outcome": "stale" }
    });
    let error = RuleSet::from_value(&definition).unwrap_err();
    assert_eq!(error.details()["path"], "$.order", "{error}");
    let reason = error.details()["reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with("limit maxReorderHistories: ") && reason.contains("60 other event types"), "{reason}");
}

#[test]
fn the_guides_invariants_hold_for_its_payments_and_catch_a_capture_that_ships_after_the_cancellation() {
    let mut definition = payments();
    definition["invariants"] = documented_invariants("your-rules.md", "payments invariants");
    assert_eq!(failing(&definition), Vec::<String>::new());
    rule(&mut definition, "PAYMENT_SUCCEEDED", "cancelled")["then"]["emit"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "type": "SHIP_ORDER", "id": "ship-order:{workflowId}" }));
    let example = &property(&definition, "invariants")["counterexample"];
    let steps: Vec<(&Value, &Value)> =
        example["actual"]["deliveries"].as_array().unwrap().iter().map(|d| (&d["event"], &d["rule"])).collect();
    assert_eq!(
        steps,
        [(&json!("ORDER_CANCELLED"), &json!("rules[4]")), (&json!("PAYMENT_SUCCEEDED"), &json!("rules[3]"))]
    );
}
