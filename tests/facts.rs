#![cfg(not(target_arch = "wasm32"))]
//! Several facts per workflow (spec-facts 1a–1f): the `facts` block, `cases`,
//! conditions on the facts map and per-fact operation ids, decided through
//! the JSON entry point and through the packed path (a batch, filled from
//! the write template as a host fills it) alike.

// idemflow::Error is large by design.
#![allow(clippy::result_large_err)]

use serde_json::{json, Map, Value};

use idemflow::decide::{decide_batch, BatchWork};
use idemflow::packed::{self, Layout, Packer, Spans};
use idemflow::proof::verify_definition;
use idemflow::ruleset::load_unverified;
use idemflow::writes::{self, Filling};
use idemflow::{decide, Error, Outcome, RuleSet};

fn object(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

/// A swap that keeps its deposits by `depositRef`: the first newer
/// confirmation exchanges, one after another deposit's confirmation is
/// reviewed once per deposit.
fn definition() -> Value {
    let seq_cases = |newer: Value| {
        json!([
            { "when": ["sequence", ">", "sequence"], "then": newer },
            { "when": ["sequence", "=", "sequence"], "then": { "outcome": "already-applied" } },
            { "then": { "outcome": "stale" } }
        ])
    };
    let review = json!({ "type": "REVIEW_DEPOSIT", "id": "review-deposit:{depositRef}:{workflowId}", "payload": ["depositRef", "amountUnits"] });
    json!({
        "id": "facts-swap", "version": 1,
        "statuses": [
            { "name": "waiting", "initial": true },
            { "name": "exchange" },
            { "name": "review", "terminal": true }
        ],
        "fields": [
            { "name": "depositRef", "kind": "text" },
            { "name": "amountUnits", "kind": "units" },
            { "name": "sequence", "kind": "count" }
        ],
        "events": [
            { "type": "DEPOSIT_DETECTED", "fields": ["depositRef", "amountUnits", "sequence"] },
            { "type": "DEPOSIT_CONFIRMED", "fields": ["depositRef", "amountUnits", "sequence"] },
            { "type": "CLOSE" }
        ],
        "facts": {
            "name": "deposits", "key": "depositRef",
            "events": ["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED"],
            "record": ["amountUnits", "sequence"]
        },
        "rules": [
            { "on": "DEPOSIT_DETECTED", "in": "(none)", "then": { "outcome": "applied", "to": "waiting" } },
            { "on": "DEPOSIT_DETECTED", "in": "waiting", "guard": ["amountUnits"],
              "cases": seq_cases(json!({ "outcome": "applied", "to": "waiting" })) },
            { "on": "DEPOSIT_DETECTED", "in": "exchange", "then": { "outcome": "stale" } },
            { "on": "DEPOSIT_CONFIRMED", "in": ["(none)", "waiting"], "cases": [
                { "when": [["sequence", ">", "sequence"], { "other": "DEPOSIT_CONFIRMED" }],
                  "then": { "outcome": "applied", "to": "waiting", "emit": [review] },
                  "description": "another deposit confirmed first: this one is reviewed" },
                { "when": ["sequence", ">", "sequence"],
                  "then": { "outcome": "applied", "to": "exchange", "record": ["depositRef"],
                            "emit": [{ "type": "START_EXCHANGE", "id": "start-exchange:{workflowId}" }] } },
                { "when": ["sequence", "=", "sequence"], "then": { "outcome": "already-applied" } },
                { "then": { "outcome": "stale" } }
            ] },
            { "on": "DEPOSIT_CONFIRMED", "in": "exchange", "cases": [
                { "when": [["sequence", ">", "sequence"], { "emitted": "review-deposit" }],
                  "then": { "outcome": "applied", "to": "exchange" } },
                { "when": ["sequence", ">", "sequence"], "then": { "outcome": "applied", "to": "exchange", "emit": [review] } },
                { "then": { "outcome": "stale" } }
            ] },
            { "on": "CLOSE", "in": ["waiting", "exchange"], "then": { "outcome": "applied", "to": "review" } }
        ],
        "otherwise": { "error": "INVALID_TRANSITION" }
    })
}

fn rule_set() -> RuleSet {
    RuleSet::from_value(&definition()).unwrap_or_else(|e| panic!("{e}: {:?}", e.details()))
}

fn event(id: &str, event_type: &str, key: &str, amount: &str, sequence: u64) -> Map<String, Value> {
    object(json!({
        "eventId": id, "workflowId": "swap-1", "type": event_type,
        "depositRef": key, "amountUnits": amount, "sequence": sequence,
    }))
}

fn workflow(status: &str, deposits: Value) -> Map<String, Value> {
    object(json!({ "id": "swap-1", "status": status, "revision": 4, "deposits": deposits }))
}

/// Decides through `decide::decide` and through the packed path (a batch
/// with a filler item before it, the write filled from the template), and
/// checks that both say the same; the JSON entry point's decision is returned.
fn both(
    rule_set: &RuleSet,
    event: &Map<String, Value>,
    workflow: Option<&Map<String, Value>>,
) -> Result<idemflow::Decision, Error> {
    let json = decide(rule_set, event, None, workflow);
    let mut packer = Packer::default();
    let filler = object(json!({ "eventId": "filler", "workflowId": "other", "type": "CLOSE" }));
    packer.item(rule_set, &filler, None, None);
    packer.item(rule_set, event, None, workflow);
    let layout = Layout::new(rule_set);
    let packed = packer.packed();
    let mut spans = Spans::new();
    packed::locate(&packed, layout.entries(), 2, |s| layout.same_as(s), &mut spans);
    let mut answer = None;
    decide_batch(rule_set, &packed, &spans, 2, &mut BatchWork::default(), |i, decided, _| {
        if i == 1 {
            answer = Some(decided);
        }
    });
    match (answer.expect("answered"), &json) {
        (Err(packed_error), Err(json_error)) => assert_eq!(packed_error.to_json(), json_error.to_json()),
        (Ok(decided), Ok(decision)) => {
            assert_eq!(decided.outcome, decision.outcome);
            let value_of = |f: usize| match &rule_set.fields()[f].kind {
                idemflow::field::FieldKind::Count => {
                    idemflow::field::FieldValue::Count(event[&rule_set.fields()[f].name].as_u64().unwrap())
                }
                _ => idemflow::field::FieldValue::Text(event[&rule_set.fields()[f].name].as_str().unwrap()),
            };
            let facts = workflow.and_then(|w| w.get("deposits")).and_then(Value::as_object);
            let filling = Filling { workflow_id: "swap-1", revision: decided.revision, value_of, facts };
            match writes::template(rule_set, decided.rule, decided.event_type)
                .filter(|_| decided.outcome == Outcome::Applied)
            {
                Some(write) => {
                    let written = decision.write_set.workflow.as_ref().expect("a workflow write");
                    assert_eq!(filling.map(&write.set), written.set);
                    let ids: Vec<String> = write.outbox.iter().map(|op| filling.text(&op.id)).collect();
                    let rendered: Vec<String> = decision.write_set.outbox.iter().map(|op| op.id.clone()).collect();
                    assert_eq!(ids, rendered);
                }
                None => assert!(decision.write_set.workflow.is_none()),
            }
        }
        (packed_answer, json_answer) => panic!("the paths differ: {packed_answer:?} / {json_answer:?}"),
    }
    json
}

fn set_of(decision: &idemflow::Decision) -> &Map<String, Value> {
    &decision.write_set.workflow.as_ref().expect("a workflow write").set
}

fn ids(decision: &idemflow::Decision) -> Vec<&str> {
    decision.write_set.outbox.iter().map(|op| op.id.as_str()).collect()
}

fn invalid_record(result: Result<idemflow::Decision, Error>) -> String {
    let error = result.expect_err("refused");
    assert_eq!(error.code(), "INVALID_RECORD", "{error}");
    assert_eq!(error.details()["record"], json!("workflow"));
    error.details()["field"].as_str().unwrap().to_string()
}

// ------------------------------------------------------------ deciding

#[test]
fn a_new_fact_is_written_into_the_map() {
    let rules = rule_set();
    let decision = both(&rules, &event("e1", "DEPOSIT_DETECTED", "a", "100", 1), None).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
    assert_eq!(
        set_of(&decision)["deposits"],
        json!({ "a": { "event": "DEPOSIT_DETECTED", "amountUnits": "100", "sequence": 1 } })
    );
}

#[test]
fn a_newer_observation_replaces_its_entry_and_keeps_the_others() {
    let rules = rule_set();
    let stored = workflow(
        "waiting",
        json!({
            "a": { "event": "DEPOSIT_DETECTED", "amountUnits": "100", "sequence": 1 },
            "b": { "event": "DEPOSIT_DETECTED", "amountUnits": "7", "sequence": 1 }
        }),
    );
    let decision = both(&rules, &event("e2", "DEPOSIT_CONFIRMED", "a", "100", 2), Some(&stored)).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
    let set = set_of(&decision);
    assert_eq!(set["status"], json!("exchange"));
    assert_eq!(set["depositRef"], json!("a"), "a top-level record stays as today");
    assert_eq!(
        set["deposits"],
        json!({
            "a": { "event": "DEPOSIT_CONFIRMED", "amountUnits": "100", "sequence": 2 },
            "b": { "event": "DEPOSIT_DETECTED", "amountUnits": "7", "sequence": 1 }
        })
    );
    assert_eq!(ids(&decision), ["start-exchange:swap-1"]);
}

#[test]
fn a_not_newer_observation_writes_nothing_to_the_map() {
    let rules = rule_set();
    let stored =
        workflow("waiting", json!({ "a": { "event": "DEPOSIT_DETECTED", "amountUnits": "100", "sequence": 2 } }));
    let same = both(&rules, &event("e3", "DEPOSIT_DETECTED", "a", "100", 2), Some(&stored)).unwrap();
    assert_eq!(same.outcome, Outcome::AlreadyApplied);
    assert!(same.write_set.workflow.is_none());
    let older = both(&rules, &event("e4", "DEPOSIT_CONFIRMED", "a", "100", 1), Some(&stored)).unwrap();
    assert_eq!(older.outcome, Outcome::Stale);
    assert!(older.write_set.workflow.is_none() && older.write_set.outbox.is_empty());
}

#[test]
fn a_fact_reads_its_own_entry_not_another_facts() {
    let rules = rule_set();
    // `b` is at 5; `a` has no entry, so its first observation is newer than none.
    let stored =
        workflow("waiting", json!({ "b": { "event": "DEPOSIT_DETECTED", "amountUnits": "7", "sequence": 5 } }));
    let decision = both(&rules, &event("e5", "DEPOSIT_DETECTED", "a", "100", 1), Some(&stored)).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
}

#[test]
fn a_guard_on_a_facts_field_holds_with_no_entry_and_compares_with_one() {
    let rules = rule_set();
    let stored =
        workflow("waiting", json!({ "a": { "event": "DEPOSIT_DETECTED", "amountUnits": "100", "sequence": 1 } }));
    assert_eq!(
        both(&rules, &event("e6", "DEPOSIT_DETECTED", "b", "5", 1), Some(&stored)).unwrap().outcome,
        Outcome::Applied
    );
    let error = both(&rules, &event("e7", "DEPOSIT_DETECTED", "a", "101", 2), Some(&stored)).unwrap_err();
    assert_eq!(error.code(), "IDENTITY_MISMATCH");
    assert_eq!(error.details()["field"], json!("amountUnits"));
}

#[test]
fn other_sees_another_facts_last_event() {
    let rules = rule_set();
    let stored =
        workflow("waiting", json!({ "a": { "event": "DEPOSIT_CONFIRMED", "amountUnits": "100", "sequence": 2 } }));
    let decision = both(&rules, &event("e8", "DEPOSIT_CONFIRMED", "b", "30", 1), Some(&stored)).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
    assert_eq!(set_of(&decision)["status"], json!("waiting"));
    assert_eq!(ids(&decision), ["review-deposit:b:swap-1"]);
    assert_eq!(decision.write_set.outbox[0].payload, object(json!({ "depositRef": "b", "amountUnits": "30" })));
    assert_eq!(
        set_of(&decision)["deposits"]["b"],
        json!({
            "event": "DEPOSIT_CONFIRMED", "amountUnits": "30", "sequence": 1, "operations": ["review-deposit"]
        })
    );
    // Its own entry does not count as another's.
    let alone =
        workflow("waiting", json!({ "b": { "event": "DEPOSIT_CONFIRMED", "amountUnits": "30", "sequence": 1 } }));
    let decision = both(&rules, &event("e9", "DEPOSIT_CONFIRMED", "b", "30", 2), Some(&alone)).unwrap();
    assert_eq!(ids(&decision), ["start-exchange:swap-1"]);
}

#[test]
fn emitted_stops_a_second_per_fact_operation_and_the_list_is_kept() {
    let rules = rule_set();
    let reviewed =
        json!({ "event": "DEPOSIT_DETECTED", "amountUnits": "30", "sequence": 1, "operations": ["review-deposit"] });
    let stored = workflow("exchange", json!({ "b": reviewed }));
    let decision = both(&rules, &event("e10", "DEPOSIT_CONFIRMED", "b", "30", 2), Some(&stored)).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
    assert!(decision.write_set.outbox.is_empty());
    assert_eq!(set_of(&decision)["deposits"]["b"]["operations"], json!(["review-deposit"]));
    // Not yet emitted for this fact: emitted once.
    let stored =
        workflow("exchange", json!({ "b": { "event": "DEPOSIT_DETECTED", "amountUnits": "30", "sequence": 1 } }));
    let decision = both(&rules, &event("e11", "DEPOSIT_CONFIRMED", "b", "30", 2), Some(&stored)).unwrap();
    assert_eq!(ids(&decision), ["review-deposit:b:swap-1"]);
}

#[test]
fn a_per_fact_id_escapes_colon_and_percent_in_the_key() {
    let rules = rule_set();
    let stored = workflow("exchange", json!({}));
    let decision = both(&rules, &event("e12", "DEPOSIT_CONFIRMED", "btc:tx%9f:0", "30", 1), Some(&stored)).unwrap();
    assert_eq!(ids(&decision), ["review-deposit:btc%3Atx%259f%3A0:swap-1"]);
    assert!(set_of(&decision)["deposits"].get("btc:tx%9f:0").is_some(), "the map keeps the key as it is");
}

#[test]
fn a_malformed_map_or_entry_is_an_invalid_record_naming_it() {
    let rules = rule_set();
    let confirm = event("e13", "DEPOSIT_CONFIRMED", "a", "100", 2);
    let cases = [
        (json!("not json"), "deposits"),
        (json!([1, 2]), "deposits"),
        (json!(5), "deposits"),
        (json!({ "a": 3 }), "deposits[\"a\"]"),
        (json!({ "btc:tx:0": { "event": "CLOSE", "sequence": 1 } }), "deposits[\"btc:tx:0\"].event"),
        (json!({ "a": { "amountUnits": "1", "sequence": 1 } }), "deposits[\"a\"].event"),
        (json!({ "a": { "event": "DEPOSIT_DETECTED", "sequence": "1" } }), "deposits[\"a\"].sequence"),
        (json!({ "a": { "event": "DEPOSIT_DETECTED", "amountUnits": 100 } }), "deposits[\"a\"].amountUnits"),
        (json!({ "a": { "event": "DEPOSIT_DETECTED", "operations": ["z", "a"] } }), "deposits[\"a\"].operations"),
        (json!({ "a": { "event": "DEPOSIT_DETECTED", "depositRef": "a" } }), "deposits[\"a\"].depositRef"),
    ];
    for (map, field) in cases {
        assert_eq!(invalid_record(both(&rules, &confirm, Some(&workflow("waiting", map.clone())))), field, "{map}");
    }
    // Too long a text.
    let long = workflow(
        "waiting",
        Value::String(format!("{{\"a\":{{\"event\":\"DEPOSIT_DETECTED\",\"x\":\"{}\"}}}}", "x".repeat(70_000))),
    );
    assert_eq!(invalid_record(both(&rules, &confirm, Some(&long))), "deposits");
    // A non-fact event does not read the map.
    let close = object(json!({ "eventId": "e14", "workflowId": "swap-1", "type": "CLOSE" }));
    assert_eq!(both(&rules, &close, Some(&workflow("waiting", json!(5)))).unwrap().outcome, Outcome::Applied);
}

#[test]
fn a_write_that_could_take_the_map_past_64_kib_is_bound_exceeded_and_the_swap_keeps_deciding() {
    // Deposits with long references (quotes escape to two bytes each): 61 of them fill 64 KiB.
    let rules = rule_set();
    let long_ref = |i: usize| format!("{i:03}{}", "\"".repeat(500));
    let entry = json!({ "event": "DEPOSIT_DETECTED", "amountUnits": "1", "sequence": 1 });
    let entries: Map<String, Value> = (0..61).map(|i| (long_ref(i), entry.clone())).collect();
    let text = Value::Object(entries.clone()).to_string();
    let one = serde_json::to_string(&long_ref(61)).unwrap().len() + 2 + entry.to_string().len();
    assert!(text.len() <= 64 * 1024 && text.len() + one > 64 * 1024, "{} + {one}", text.len());
    let stored = workflow("waiting", Value::Object(entries));
    // A 62nd long reference would take the map past its bound: refused, nothing written.
    let refused = both(&rules, &event("e20", "DEPOSIT_DETECTED", &long_ref(61), "1", 1), Some(&stored));
    let error = refused.map(|d| d.outcome).expect_err("refused");
    assert_eq!((error.code(), error.details()["bound"].as_str()), ("BOUND_EXCEEDED", Some("maxFactsBytes")), "{error}");
    // The deposits it holds still move on, and every write that is answered fits the bound.
    let moved = both(&rules, &event("e21", "DEPOSIT_DETECTED", &long_ref(7), "1", 2), Some(&stored)).unwrap();
    assert_eq!(moved.outcome, Outcome::Applied);
    assert!(Value::Object(set_of(&moved)["deposits"].as_object().unwrap().clone()).to_string().len() <= 64 * 1024);
}

#[test]
fn the_map_holds_at_most_64_entries() {
    let rules = rule_set();
    let entries = |n: usize| -> Value {
        Value::Object(
            (0..n)
                .map(|i| (format!("d{i}"), json!({ "event": "DEPOSIT_DETECTED", "amountUnits": "1", "sequence": 1 })))
                .collect(),
        )
    };
    // 64 entries are read; one of them moves on.
    let decision =
        both(&rules, &event("e15", "DEPOSIT_DETECTED", "d3", "1", 2), Some(&workflow("waiting", entries(64)))).unwrap();
    assert_eq!(decision.outcome, Outcome::Applied);
    assert_eq!(set_of(&decision)["deposits"].as_object().unwrap().len(), 64);
    // A 65th would pass the bound: refused with a code of its own (the record is sound), nothing written.
    let error = both(&rules, &event("e16", "DEPOSIT_DETECTED", "new", "1", 1), Some(&workflow("waiting", entries(64))))
        .expect_err("refused");
    assert_eq!((error.code(), error.disposition().as_str()), ("BOUND_EXCEEDED", "reconcile"), "{error}");
    assert_eq!(error.details()["bound"], "maxFacts");
    assert_eq!(error.details()["eventId"], "e16");
    assert!(error.to_string().contains("deposits holds 64 entries"), "{error}");
    // A stored map of 65 is damage.
    assert_eq!(
        invalid_record(both(
            &rules,
            &event("e17", "DEPOSIT_DETECTED", "d3", "1", 2),
            Some(&workflow("waiting", entries(65)))
        )),
        "deposits"
    );
}

#[test]
fn the_layout_tells_the_host_where_the_map_goes() {
    let rules = rule_set();
    let layout: Value = serde_json::from_str(&packed::layout_json(&rules)).unwrap();
    let entries = layout["entries"].as_u64().unwrap();
    assert_eq!(layout["slots"]["workflowFacts"].as_u64().unwrap(), entries - 1);
    assert_eq!(layout["facts"]["name"], json!("deposits"));
    assert_eq!(layout["facts"]["events"], json!([0, 1]));
    // The fact events read a fact's own fields from its entry, not the workflow.
    assert_eq!(layout["events"][0]["guards"], json!([]));
    let no_facts = RuleSet::builtin("order-shipment").unwrap();
    let plain: Value = serde_json::from_str(&packed::layout_json(no_facts)).unwrap();
    assert!(plain.get("facts").is_none() && plain["slots"].get("workflowFacts").is_none());
}

#[test]
fn the_reorder_claim_of_a_rule_set_with_facts_goes_to_the_facts_explorer() {
    let mut with_order = definition();
    with_order["order"] =
        json!({ "sequence": { "field": "sequence", "events": ["DEPOSIT_DETECTED", "DEPOSIT_CONFIRMED"] } });
    let report = verify_definition(&with_order).unwrap().to_json();
    let reorder =
        report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap().clone();
    // The facts explorer explored it (its deliveries name the fact, "A" or "B"),
    // and this rule set, which declares no races, is not reorder-safe.
    assert!(reorder["checked"]["histories"].as_u64().unwrap() > 0, "{reorder}");
    assert_eq!(reorder["ok"], false, "{reorder}");
    let deliveries = reorder["counterexample"]["actual"]["deliveries"].as_array().unwrap();
    assert!(deliveries.iter().any(|d| d.get("fact").is_some()), "{reorder}");
}

#[test]
fn the_table_shows_cases_and_conditions() {
    let rules = rule_set();
    let rows = idemflow::ruleset::table::rows_json(&rules);
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"] == "DEPOSIT_CONFIRMED" && r["statuses"] == json!(["exchange"]))
        .unwrap();
    assert_eq!(row["answer"]["cases"][0]["when"][1], json!({ "emitted": "review-deposit" }));
    assert!(row["summary"].as_str().unwrap().contains("this fact emitted review-deposit"), "{row}");
}

// ------------------------------------------------------------ loading

fn refused_at(definition: &Value) -> (String, String) {
    let error = load_unverified(definition).expect_err("refused");
    assert_eq!(error.code(), "RULESET_INVALID", "{error}");
    let details = error.details();
    (details["path"].as_str().unwrap().to_string(), details["reason"].as_str().unwrap_or_default().to_string())
}

fn with(change: impl FnOnce(&mut Value)) -> Value {
    let mut d = definition();
    change(&mut d);
    d
}

#[test]
fn the_facts_block_is_refused_with_its_path() {
    let cases: Vec<(Value, &str)> = vec![
        (with(|d| d["facts"]["key"] = json!("amountUnits")), "$.facts.key"),
        (with(|d| d["facts"]["key"] = json!("nope")), "$.facts.key"),
        (with(|d| d["facts"]["events"] = json!(["DEPOSIT_DETECTED", "CLOSE"])), "$.facts.key"),
        (with(|d| d["facts"]["events"] = json!(["NOPE"])), "$.facts.events[0]"),
        (with(|d| d["facts"]["events"] = json!([])), "$.facts.events"),
        (with(|d| d["facts"]["name"] = json!("sequence")), "$.facts.name"),
        (with(|d| d["facts"]["name"] = json!("status")), "$.facts.name"),
        (with(|d| d["facts"]["record"] = json!(["depositRef"])), "$.facts.record[0]"),
        (with(|d| d["facts"]["extra"] = json!(1)), "$.facts.extra"),
        (
            with(|d| d["order"] = json!({ "sequence": { "field": "sequence", "events": ["DEPOSIT_CONFIRMED"] } })),
            "$.order.sequence.events",
        ),
    ];
    for (definition, path) in cases {
        assert_eq!(refused_at(&definition).0, path, "{}", definition["facts"]);
    }
}

#[test]
fn cases_are_refused_with_their_paths() {
    let cases: Vec<(Value, &str)> = vec![
        (
            with(|d| d["rules"][3]["cases"][3]["when"] = json!(["sequence", ">", "sequence"])),
            "$.rules[3].cases[3].when",
        ),
        (
            with(|d| d["rules"][3]["cases"][1].as_object_mut().unwrap().remove("when").map(|_| ()).unwrap()),
            "$.rules[3].cases[1].when",
        ),
        (with(|d| d["rules"][3]["then"] = json!({ "outcome": "stale" })), "$.rules[3].then"),
        (with(|d| d["rules"][3]["cases"] = json!([])), "$.rules[3].cases"),
        (
            with(|d| d["rules"][3]["cases"][0]["when"][1] = json!({ "other": "CLOSE" })),
            "$.rules[3].cases[0].when[1].other",
        ),
        (
            with(|d| d["rules"][3]["cases"][0]["when"][1] = json!({ "other": ["DEPOSIT_DETECTED", "NOPE"] })),
            "$.rules[3].cases[0].when[1].other[1]",
        ),
        (with(|d| d["rules"][3]["cases"][0]["when"][1] = json!({ "what": 1 })), "$.rules[3].cases[0].when[1]"),
        (
            with(|d| d["rules"][3]["cases"][0]["when"][0] = json!(["sequence", "!", "sequence"])),
            "$.rules[3].cases[0].when[0][1]",
        ),
        (
            with(|d| d["rules"][4]["cases"][0]["when"][1] = json!({ "emitted": "start-exchange" })),
            "$.rules[4].cases[0].when[1].emitted",
        ),
        (with(|d| d["rules"][3]["cases"][0]["extra"] = json!(1)), "$.rules[3].cases[0].extra"),
    ];
    for (definition, path) in cases {
        assert_eq!(refused_at(&definition).0, path, "{}", definition["rules"][3]);
    }
}

#[test]
fn fact_conditions_and_per_fact_ids_go_only_on_fact_events() {
    let on_close = with(|d| {
        d["rules"][5] = json!({ "on": "CLOSE", "in": ["waiting", "exchange"], "cases": [
            { "when": { "other": "DEPOSIT_CONFIRMED" }, "then": { "outcome": "applied", "to": "review" } },
            { "then": { "outcome": "applied", "to": "review" } }
        ] })
    });
    assert_eq!(refused_at(&on_close).0, "$.rules[5].cases[0].when");
    let per_fact_on_close = with(|d| {
        d["rules"][5]["then"]["emit"] = json!([{ "type": "X", "id": "x:{depositRef}:{workflowId}" }]);
    });
    assert_eq!(refused_at(&per_fact_on_close).0, "$.rules[5].then.emit[0].id");
    // One name, one form: per fact here, once-only there.
    let two_forms = with(|d| {
        d["rules"][5]["then"]["emit"] = json!([{ "type": "X", "id": "review-deposit:{workflowId}" }]);
    });
    let (path, reason) = refused_at(&two_forms);
    assert!(path.ends_with(".id") && reason.contains("one form"), "{path}: {reason}");
    // Without a facts block there is no per-fact form.
    let mut no_facts = definition();
    no_facts.as_object_mut().unwrap().remove("facts");
    let (path, _) = refused_at(&no_facts);
    assert_eq!(path, "$.rules[3].cases[0].when[1]");
}

#[test]
fn when_then_else_stays_sugar_for_two_cases() {
    let sugar = with(|d| {
        d["rules"][1] = json!({ "on": "DEPOSIT_DETECTED", "in": "waiting", "when": ["sequence", ">", "sequence"],
                                "then": { "outcome": "applied", "to": "waiting" }, "else": { "outcome": "stale" } });
    });
    let rules = RuleSet::from_value(&sugar).unwrap();
    let stored =
        workflow("waiting", json!({ "a": { "event": "DEPOSIT_DETECTED", "amountUnits": "1", "sequence": 2 } }));
    assert_eq!(
        both(&rules, &event("e20", "DEPOSIT_DETECTED", "a", "1", 3), Some(&stored)).unwrap().outcome,
        Outcome::Applied
    );
    assert_eq!(
        both(&rules, &event("e21", "DEPOSIT_DETECTED", "a", "1", 2), Some(&stored)).unwrap().outcome,
        Outcome::Stale
    );
    let rows = idemflow::ruleset::table::rows_json(&rules);
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"] == "DEPOSIT_DETECTED" && r["statuses"] == json!(["waiting"]))
        .unwrap();
    assert_eq!(row["answer"]["when"], json!(["sequence", ">", "sequence"]), "{row}");
}

#[test]
fn two_text_fields_compare_for_equality_only() {
    let equal = with(|d| {
        d["rules"][3]["cases"][0] = json!({ "when": [["depositRef", "=", "depositRef"], ["sequence", ">", "sequence"]],
                                             "then": { "outcome": "applied", "to": "waiting" } });
    });
    let rules = RuleSet::from_value(&equal).unwrap();
    // The top-level depositRef (recorded when the exchange started) is the event's: the first case answers.
    let mut stored = workflow("waiting", json!({}));
    stored.insert("depositRef".into(), json!("a"));
    let decision = both(&rules, &event("e30", "DEPOSIT_CONFIRMED", "a", "1", 1), Some(&stored)).unwrap();
    assert!(decision.write_set.outbox.is_empty(), "{:?}", decision.write_set.outbox);
    let decision = both(&rules, &event("e31", "DEPOSIT_CONFIRMED", "b", "1", 1), Some(&stored)).unwrap();
    assert_eq!(ids(&decision), ["start-exchange:swap-1"]);
    let ordered = with(|d| d["rules"][3]["cases"][0]["when"][0] = json!(["depositRef", ">", "depositRef"]));
    let (path, reason) = refused_at(&ordered);
    assert_eq!(path, "$.rules[3].cases[0].when[0]");
    assert!(reason.contains("integers only"), "{reason}");
}

#[test]
fn a_race_across_facts_relates_fact_events_only() {
    let across = |between: Value| with(|d| d["order"] = json!({ "races": [{ "between": between, "across": true }] }));
    assert!(load_unverified(&across(json!(["DEPOSIT_CONFIRMED", "DEPOSIT_CONFIRMED"]))).is_ok());
    assert_eq!(refused_at(&across(json!(["DEPOSIT_CONFIRMED", "CLOSE"]))).0, "$.order.races[0].across");
    let bad = with(|d| d["order"] = json!({ "races": [{ "between": ["DEPOSIT_CONFIRMED", "CLOSE"], "across": 1 }] }));
    assert_eq!(refused_at(&bad).0, "$.order.races[0].across");
}
