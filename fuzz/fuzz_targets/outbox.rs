#![no_main]
//! The outbox policy's JSON entry points: settings, backoff, leases, admission
//! and the classification of a handler's result.

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

use idemflow::json::outbox;
use idemflow::outbox::Policy;

#[path = "common.rs"]
mod common;

fn number(bytes: &[u8]) -> f64 {
    let mut raw = [0u8; 8];
    let n = bytes.len().min(8);
    raw[..n].copy_from_slice(&bytes[..n]);
    // Half the time a whole number, which reaches past the argument checks.
    if raw[0] % 2 == 0 {
        (u64::from_le_bytes(raw) >> 12) as f64
    } else {
        f64::from_le_bytes(raw)
    }
}

fn check<T>(result: idemflow::Result<T>) -> Option<T> {
    result.map_err(|error| common::check_error(&error)).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let (numbers, text) = rest.split_at(rest.len().min(16));
    let Ok(text) = std::str::from_utf8(text) else { return };
    // The settings: defaults, or options parsed from the text.
    let options = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) if selector & 0x10 != 0 => map,
        _ => Map::new(),
    };
    let Some(policy) = check(Policy::from_source(&options)) else { return };
    // A policy's settings read back as options give the same policy.
    let written: Value = serde_json::from_str(&outbox::settings_json(&policy)).unwrap();
    assert_eq!(Policy::from_source(written.as_object().unwrap()).ok(), Some(policy.clone()));
    let a = number(numbers);
    let b = number(numbers.get(8..).unwrap_or_default());
    match selector % 5 {
        0 => {
            if let Some(out) = check(outbox::backoff(&policy, text)) {
                let out: Value = serde_json::from_str(&out).unwrap();
                assert!(out["delayMs"].as_u64() <= out["ceilingMs"].as_u64(), "{out}");
            }
        }
        1 => {
            check(outbox::classify(&policy, text));
        }
        2 => {
            check(outbox::admit(&policy, a));
        }
        3 => {
            if let Some(expires) = check(outbox::lease_expires_at(&policy, a)) {
                assert!(expires as f64 >= a);
            }
        }
        _ => {
            let status = ["pending", "claimed", "done", "dead", text][(selector as usize >> 5) % 5];
            check(outbox::claimable_args(status, a, if selector & 0x80 != 0 { Some(b) } else { None }, b));
        }
    }
});
