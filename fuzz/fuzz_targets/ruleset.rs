#![no_main]
//! Loading and verifying arbitrary definitions: every input is refused with a
//! coded error or loads, and a loaded one answers every pair exactly once.

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let value = match idemflow::limits::parse_definition(text) {
        Ok(value) => value,
        Err(error) => return common::check_error(&error),
    };
    match idemflow::proof::verify_definition(&value) {
        Ok(report) => {
            let _ = report.to_json();
            match idemflow::RuleSet::from_value(&value) {
                Ok(rule_set) => {
                    assert!(report.ok(), "loaded a rule set whose report fails");
                    for event in 0..rule_set.events().len() {
                        for state in 0..rule_set.state_count() {
                            rule_set.rule_for(event, state).expect("a verified rule set answers every pair");
                        }
                    }
                    let _ = idemflow::ruleset::table::markdown(&rule_set);
                }
                Err(error) => {
                    common::check_error(&error);
                    assert!(!report.ok(), "refused a rule set whose report passes: {error}");
                }
            }
        }
        Err(error) => {
            common::check_error(&error);
            assert_eq!(error.code(), "RULESET_INVALID", "{error}");
        }
    }
});
