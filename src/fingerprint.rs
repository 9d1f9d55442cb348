//! The canonical, versioned fingerprint of what an event means.
//!
//! `fp1:` + lowercase hex SHA-256 of the UTF-8 bytes of the RFC 8785 canonical
//! JSON of `{type, workflowId, ...identity fields}`. The event id is not part
//! of it: two deliveries of one fact under different ids share a fingerprint.

use crate::event::Event;
use crate::field::FieldValue;
use crate::jcs::{write_string, write_whole};
use crate::ruleset::{Hole, RuleSet};

pub const PREFIX: &str = "fp1:";
/// `fp1:` and 64 hex digits.
pub const LEN: usize = PREFIX.len() + 64;

/// Writes the exact text that is hashed into `out`: an event type's constant
/// parts (made when the rule set loaded) with the values between them. A
/// count is an RFC 8785 integer (its decimal digits), every other value a
/// string, so a rule set without counts hashes exactly as before.
pub fn write_canonical<'v>(
    rule_set: &RuleSet,
    event_type: usize,
    workflow_id: &str,
    value_of: impl Fn(usize) -> FieldValue<'v>,
    out: &mut String,
) {
    out.clear();
    for (constant, hole) in &rule_set.events[event_type].canonical {
        out.push_str(constant);
        match *hole {
            Hole::WorkflowId => write_string(out, workflow_id),
            Hole::Field(f) => match value_of(f) {
                FieldValue::Text(text) => write_string(out, text),
                FieldValue::Count(n) => write_whole(out, n),
            },
            Hole::End => {}
        }
    }
}

/// `fp1:` and the hex SHA-256 of `canonical`, into `out` (`LEN` bytes).
pub fn write_fingerprint(canonical: &str, out: &mut [u8]) {
    write_digest(&crate::sha256::digest(canonical.as_bytes()), out);
}

/// `fp1:` and the hex of `digest`, into `out` (`LEN` bytes).
pub fn write_digest(digest: &[u8; 32], out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..PREFIX.len()].copy_from_slice(PREFIX.as_bytes());
    for (i, b) in digest.iter().enumerate() {
        out[PREFIX.len() + 2 * i] = HEX[(b >> 4) as usize];
        out[PREFIX.len() + 2 * i + 1] = HEX[(b & 0xf) as usize];
    }
}

/// The exact bytes that are hashed.
pub fn canonical_bytes(rule_set: &RuleSet, event: &Event) -> String {
    let mut out = String::with_capacity(128);
    write_canonical(rule_set, event.event_type, &event.workflow_id, |f| event.field_value(rule_set, f), &mut out);
    out
}

pub fn fingerprint(rule_set: &RuleSet, event: &Event) -> String {
    let mut out = [0u8; LEN];
    write_fingerprint(&canonical_bytes(rule_set, event), &mut out);
    // Only ASCII was written.
    String::from_utf8_lossy(&out).into_owned()
}
