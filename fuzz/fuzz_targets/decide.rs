#![no_main]
//! Decisions over an arbitrary JSON `{event, receipt, workflow}`.

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "common.rs"]
mod common;

fn record(input: &serde_json::Map<String, Value>, key: &str) -> Option<serde_json::Map<String, Value>> {
    match input.get(key) {
        Some(Value::Object(map)) => Some(map.clone()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((rule_set, text)) = common::split(data) else { return };
    let Ok(Value::Object(input)) = serde_json::from_str::<Value>(text) else { return };
    let event = record(&input, "event").unwrap_or_default();
    let receipt = record(&input, "receipt");
    let workflow = record(&input, "workflow");
    let decide = || idemflow::decide(rule_set, &event, receipt.as_ref(), workflow.as_ref());
    let first = decide();
    match &first {
        Ok(decision) => {
            // A decision is a pure function of its inputs, and serialises.
            let text = serde_json::to_string(decision).expect("a decision serialises");
            let again = serde_json::to_string(&decide().expect("decides twice")).unwrap();
            assert_eq!(text, again);
        }
        Err(error) => {
            common::check_error(error);
            assert_eq!(Some(error), decide().err().as_ref());
        }
    }
});
