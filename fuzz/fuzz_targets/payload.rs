#![no_main]
//! A payload's JSON text: `json::payload::canonical_text` never panics, takes
//! exactly the texts serde_json takes (within its own depth bound), and what
//! it writes is canonical already (written again, it is unchanged).

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

use idemflow::json::payload::{canonical_text, MAX_PAYLOAD_DEPTH};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let serde = serde_json::from_str::<serde_json::Value>(text);
    match canonical_text(text) {
        Ok(canonical) => {
            assert!(serde.is_ok(), "accepted what serde_json refuses: {text:?}");
            assert_eq!(canonical_text(&canonical).as_deref(), Ok(canonical.as_str()), "not a fixed point");
        }
        Err(error) => {
            common::check_error(&error);
            assert_eq!(error.code(), "INVALID_PAYLOAD");
            let reason = error.details()["reason"].as_str().unwrap_or_default().to_string();
            let bounded =
                reason.contains(&format!("deeper than {MAX_PAYLOAD_DEPTH}")) || reason.contains("maxPayloadBytes");
            assert!(serde.is_err() || bounded, "refused what serde_json takes: {text:?}: {reason}");
        }
    }
});
