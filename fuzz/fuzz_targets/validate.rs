#![no_main]
//! Validation and fingerprints of arbitrary JSON events.

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((rule_set, text)) = common::split(data) else { return };
    let Ok(Value::Object(event)) = serde_json::from_str::<Value>(text) else { return };
    match idemflow::event::validate(rule_set, &event) {
        Ok(valid) => {
            let first = idemflow::fingerprint::fingerprint(rule_set, &valid);
            assert!(first.starts_with("fp1:") && first.len() == 4 + 64, "{first}");
            // A fingerprint depends on what the event means, not on when it is taken.
            let again = idemflow::event::validate(rule_set, &event).expect("valid twice");
            assert_eq!(first, idemflow::fingerprint::fingerprint(rule_set, &again));
            // The canonical bytes are JSON that reads back.
            let canonical = idemflow::fingerprint::canonical_bytes(rule_set, &valid);
            assert!(serde_json::from_str::<Value>(&canonical).is_ok(), "{canonical}");
        }
        Err(error) => {
            common::check_error(&error);
            assert_eq!(error.code(), "INVALID_EVENT", "{error}");
        }
    }
});
