//! The canonical, versioned fingerprint of what an event means.
//!
//! `fp1:` + lowercase hex SHA-256 of the UTF-8 bytes of the RFC 8785 canonical
//! JSON of `{type, workflowId, ...identity fields}`. The event id is not part
//! of it: two deliveries of one fact under different ids share a fingerprint.

use sha2::{Digest, Sha256};

use crate::event::Event;
use crate::jcs::{hex, write_string};
use crate::ruleset::{Member, RuleSet};

pub const PREFIX: &str = "fp1:";

/// The exact bytes that are hashed.
pub fn canonical_bytes(rule_set: &RuleSet, event: &Event) -> String {
    let event_type = &rule_set.events[event.event_type];
    let mut out = String::with_capacity(96 + event.values.iter().map(String::len).sum::<usize>());
    out.push('{');
    for (i, member) in event_type.fingerprint_members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(&mut out, member.name(rule_set, event_type));
        out.push(':');
        let value = match member {
            Member::Type => &event_type.name,
            Member::WorkflowId => &event.workflow_id,
            Member::Field(position) => &event.values[*position],
        };
        write_string(&mut out, value);
    }
    out.push('}');
    out
}

pub fn fingerprint(rule_set: &RuleSet, event: &Event) -> String {
    let digest = Sha256::digest(canonical_bytes(rule_set, event).as_bytes());
    let mut out = String::with_capacity(PREFIX.len() + 64);
    out.push_str(PREFIX);
    out.push_str(&hex(&digest));
    out
}
