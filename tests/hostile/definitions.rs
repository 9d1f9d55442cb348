//! Rule-set definitions built to exhaust the loader, shared by the native
//! tests (tests/limits.rs) and the wasm tests (tests/wasm.rs). Each names the
//! limit that must refuse it and the path it must be refused at.

use serde_json::{json, Value};

pub struct Hostile {
    pub name: &'static str,
    pub text: String,
    pub path: &'static str,
    pub limit: &'static str,
}

/// A small valid definition (one status, one event type, two rules).
pub fn base() -> Value {
    json!({
        "id": "hostile",
        "version": 1,
        "statuses": [{ "name": "shipping", "terminal": true }],
        "events": [{ "type": "SHIPMENT_REQUESTED", "fields": [] }],
        "rules": [
            { "on": "SHIPMENT_REQUESTED", "in": "(none)",
              "then": { "outcome": "applied", "to": "shipping",
                        "emit": [{ "type": "CREATE_SHIPMENT", "id": "create-shipment:{workflowId}" }] } },
            { "on": "SHIPMENT_REQUESTED", "in": "shipping", "then": { "outcome": "already-applied" } }
        ]
    })
}

fn with(key: &str, value: Value) -> String {
    let mut definition = base();
    definition[key] = value;
    definition.to_string()
}

fn stars(count: usize) -> Value {
    Value::Array(vec![json!("*"); count])
}

pub fn all() -> Vec<Hostile> {
    let status_list = |count: usize| -> Value { (0..count).map(|i| json!({ "name": format!("s{i}") })).collect() };
    let events: Vec<Value> = (0..20_000).map(|i| json!({ "type": format!("E{i}"), "fields": [] })).collect();
    let fields: Vec<Value> = (0..100).map(|i| json!({ "name": format!("f{i}"), "kind": "text" })).collect();
    let rules: Vec<Value> = (0..10_000)
        .map(|_| json!({ "on": "SHIPMENT_REQUESTED", "in": "shipping", "then": { "outcome": "already-applied" } }))
        .collect();
    let emits: Vec<Value> = (0..33)
        .map(|i| json!({ "type": "CREATE_SHIPMENT", "id": format!("create-shipment-{i}:{{workflowId}}") }))
        .collect();
    // 256 event types x 256 statuses, every rule answering every pair.
    let wide_statuses: Vec<Value> = (0..256).map(|i| json!({ "name": format!("s{i}") })).collect();
    let wide_events: Vec<Value> = (0..256).map(|i| json!({ "type": format!("E{i}"), "fields": [] })).collect();
    let everything: Vec<Value> =
        (0..4096).map(|_| json!({ "on": "*", "in": "*", "then": { "outcome": "stale" } })).collect();
    let mut deep = json!("bottom");
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let mut one_rule_of_stars = base();
    one_rule_of_stars["rules"][1]["on"] = stars(50_000);
    one_rule_of_stars["rules"][1]["in"] = stars(50_000);
    let mut many_emits = base();
    many_emits["rules"][0]["then"]["emit"] = Value::Array(emits);
    let mut wide = base();
    wide["statuses"] = Value::Array(wide_statuses);
    wide["events"] = Value::Array(wide_events);
    wide["rules"] = Value::Array(everything);

    vec![
        Hostile {
            name: "one rule holding 50,000 \"*\" in `on` and in `in` (the trap of issue 9)",
            text: one_rule_of_stars.to_string(),
            path: "$.rules[1].on",
            limit: "maxListNames",
        },
        Hostile { name: "30,000 statuses", text: with("statuses", status_list(30_000)), path: "$.statuses", limit: "maxStatuses" },
        Hostile {
            name: "100,000 statuses (1.7 MiB)",
            text: with("statuses", status_list(100_000)),
            path: "$",
            limit: "maxDefinitionBytes",
        },
        Hostile { name: "20,000 event types", text: with("events", Value::Array(events)), path: "$.events", limit: "maxEventTypes" },
        Hostile { name: "100 fields", text: with("fields", Value::Array(fields)), path: "$.fields", limit: "maxFields" },
        Hostile { name: "10,000 rules", text: with("rules", Value::Array(rules)), path: "$.rules", limit: "maxRules" },
        Hostile { name: "33 emits in one rule", text: many_emits.to_string(), path: "$.rules[0].then.emit", limit: "maxEmitsPerRule" },
        Hostile {
            name: "4096 rules each answering 256 x 256 pairs",
            text: wide.to_string(),
            path: "$.rules[2]",
            limit: "maxTableEntries",
        },
        Hostile { name: "arrays nested 100 deep", text: with("description", deep), path: "$", limit: "maxDepth" },
        Hostile {
            name: "a valid definition of 1.5 MiB (a long description)",
            text: with("description", json!("x".repeat(3 << 19))),
            path: "$",
            limit: "maxDefinitionBytes",
        },
    ]
}

/// A field named after an `Object.prototype` member, refused at its name.
pub fn prototype_field(name: &str) -> String {
    let mut definition = base();
    definition["fields"] = json!([{ "name": name, "kind": "text" }]);
    definition.to_string()
}
