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
        Hostile {
            name: "30,000 statuses",
            text: with("statuses", status_list(30_000)),
            path: "$.statuses",
            limit: "maxStatuses",
        },
        Hostile {
            name: "100,000 statuses (1.7 MiB)",
            text: with("statuses", status_list(100_000)),
            path: "$",
            limit: "maxDefinitionBytes",
        },
        Hostile {
            name: "20,000 event types",
            text: with("events", Value::Array(events)),
            path: "$.events",
            limit: "maxEventTypes",
        },
        Hostile {
            name: "100 fields",
            text: with("fields", Value::Array(fields)),
            path: "$.fields",
            limit: "maxFields",
        },
        Hostile { name: "10,000 rules", text: with("rules", Value::Array(rules)), path: "$.rules", limit: "maxRules" },
        Hostile {
            name: "33 emits in one rule",
            text: many_emits.to_string(),
            path: "$.rules[0].then.emit",
            limit: "maxEmitsPerRule",
        },
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

/// A definition within every count limit whose reorder-safe check had no
/// bound in total while its budget restarted at each (history, start status)
/// pair (issue 24): `types` event types racing pairwise from `statuses`
/// initial statuses, each answering every event type without moving, so no
/// order tells itself apart and the search never stops early. With 15 types
/// and 256 statuses (146 KiB: 42,128 histories from 257 starts) the old check
/// had explored 2 billion configurations over half of its 10.8 million
/// (history, start) pairs when it was stopped after 236 s of CPU (release).
pub fn reorder_budget(types: usize, statuses: usize) -> Value {
    let types: Vec<String> = (0..types).map(|i| format!("E{i}")).collect();
    let status_list: Vec<Value> = (0..statuses).map(|i| json!({ "name": format!("s{i}"), "initial": true })).collect();
    let events: Vec<Value> = types.iter().map(|t| json!({ "type": t, "fields": [] })).collect();
    let races: Vec<Value> = (0..types.len() - 1).map(|i| json!({ "between": [types[i], types[i + 1..]] })).collect();
    let mut rules =
        vec![json!({ "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } })];
    let half = types.len() / 2;
    for s in 0..statuses {
        let status = format!("s{s}");
        // An applied self-loop per event type for half of them, one already-applied row for the rest.
        for t in &types[..half] {
            rules.push(json!({ "on": t, "in": status, "then": { "outcome": "applied", "to": status } }));
        }
        rules.push(json!({ "on": types[half..], "in": status, "then": { "outcome": "already-applied" } }));
    }
    json!({
        "id": "reorder-budget",
        "version": 1,
        "statuses": status_list,
        "events": events,
        "order": { "races": races },
        "rules": rules,
    })
}

/// A field named after an `Object.prototype` member, refused at its name.
pub fn prototype_field(name: &str) -> String {
    let mut definition = base();
    definition["fields"] = json!([{ "name": name, "kind": "text" }]);
    definition.to_string()
}
