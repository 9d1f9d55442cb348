#![cfg(not(target_arch = "wasm32"))]
//! A definition is proven once per process: loading it again (the JS cache
//! evicts compiled rule sets and compiles them again on use) only checks its
//! structure. One test in its own binary, so the process-wide count is its own.

// idemflow::Error is large by design.
#![allow(clippy::result_large_err)]

use idemflow::proof::{proven, verify_definition};
use idemflow::RuleSet;
use serde_json::{json, Value};

fn ticket(version: u64) -> Value {
    json!({
        "id": "ticket", "version": version,
        "statuses": [{ "name": "open", "initial": true }, { "name": "closed", "terminal": true }],
        "fields": [{ "name": "reason", "kind": "text" }],
        "events": [{ "type": "CLOSE", "fields": ["reason"] }],
        "rules": [
            { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
            { "on": "CLOSE", "in": "open", "then": { "outcome": "applied", "to": "closed", "record": ["reason"] } },
            { "on": "CLOSE", "in": "closed", "guard": ["reason"], "then": { "outcome": "already-applied" } }
        ]
    })
}

#[test]
fn a_definition_is_proven_once_and_a_failing_one_every_time() {
    let (start, _) = proven::stats();
    let first = RuleSet::from_value(&ticket(1)).unwrap();
    assert_eq!(proven::stats().0, start + 1);
    assert!(proven::contains(&first.hash));
    // The same definition again, and as other text (the hash is of its canonical form).
    RuleSet::from_value(&ticket(1)).unwrap();
    let spaced = serde_json::to_string_pretty(&ticket(1)).unwrap();
    assert_eq!(RuleSet::from_json(&spaced).unwrap().hash, first.hash);
    assert_eq!(proven::stats().0, start + 1, "not proven again");

    // A report always runs the proof, and remembers what it proved.
    assert!(verify_definition(&ticket(2)).unwrap().properties.iter().all(|p| p.ok));
    assert_eq!(proven::stats().0, start + 2);
    RuleSet::from_value(&ticket(2)).unwrap();
    assert_eq!(proven::stats().0, start + 2);

    // One that fails verification is never remembered.
    let mut failing = ticket(3);
    failing["statuses"].as_array_mut().unwrap().push(json!({ "name": "limbo" }));
    for _ in 0..2 {
        assert_eq!(RuleSet::from_value(&failing).unwrap_err().code(), "RULESET_INVALID");
    }
    assert_eq!(proven::stats().0, start + 4);

    // Bounded: past MAX hashes the oldest is forgotten.
    for version in 10..(10 + proven::MAX as u64) {
        RuleSet::from_value(&ticket(version)).unwrap();
    }
    assert_eq!(proven::stats().1, proven::MAX);
    assert!(!proven::contains(&first.hash), "the oldest was forgotten");
    RuleSet::from_value(&ticket(1)).unwrap();
    assert!(proven::contains(&first.hash), "and is proven again when it returns");
}
