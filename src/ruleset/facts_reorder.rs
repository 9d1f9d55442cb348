//! Placeholder: the concrete explorer of rule sets with `facts` is written
//! on another branch and replaces this file when it is merged.

use super::reorder;
use super::RuleSet;
use crate::error::Result;

pub fn check(rule_set: &RuleSet) -> Result<reorder::Check> {
    let _ = rule_set;
    Ok(reorder::Check {
        skipped: Some("TEMPORARY: facts explorer not merged".into()),
        unproven: None,
        counterexamples: Vec::new(),
        histories: 0,
        configurations: 0,
    })
}
