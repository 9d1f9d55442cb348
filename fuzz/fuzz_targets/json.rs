#![no_main]
//! The JSON-text entry points, `decide_json` and `fingerprint_json`.

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((rule_set, text)) = common::split(data) else { return };
    match idemflow::json::decide_json(rule_set, text) {
        Ok(decision) => assert!(serde_json::from_str::<serde_json::Value>(&decision).is_ok()),
        Err(error) => common::check_error(&error),
    }
    match idemflow::json::fingerprint_json(rule_set, text) {
        Ok(fp) => assert!(fp.starts_with("fp1:"), "{fp}"),
        Err(error) => common::check_error(&error),
    }
});
