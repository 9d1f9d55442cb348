//! The keyed mode's decision: a call identified by a key the caller chose
//! (an HTTP `Idempotency-Key`, a job id), with no rule set and no workflow.
//! The key's record is an inbox receipt of its own type, so retention
//! expires keys by age as it expires receipts. The same key with the same
//! payload fingerprint replays what the first call stored; with another
//! payload it is a conflict a person must look at, never a silent replay.

use serde_json::Value;

use super::parse_object;
use super::payload::PAYLOAD_PREFIX;
use crate::error::{Error, Result};
use crate::field::MAX_TEXT_BYTES;
use crate::jcs::write_string;

/// The event type of a key's receipt: no rule set declares it (not a name).
pub const KEY_EVENT_TYPE: &str = "idemflow.key";

/// The members of a key request.
const MEMBERS: &[&str] = &["key", "fingerprint", "storedFingerprint"];

fn invalid(reason: String) -> Error {
    Error::InvalidArgument { reason }
}

fn is_payload_fingerprint(text: &str) -> bool {
    text.strip_prefix(PAYLOAD_PREFIX)
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// `{"key", "fingerprint", "storedFingerprint"}` in; out `{"outcome":"replay"}`,
/// or `{"outcome":"run","receipt":…}` with the receipt to commit with the
/// call's own writes (its `result` gets the call's output), or
/// IDEMPOTENCY_KEY_CONFLICT.
pub fn decide_key(request: &str) -> Result<String> {
    let request = parse_object(request, "key request")?;
    if let Some(unknown) = request.keys().find(|name| !MEMBERS.contains(&name.as_str())) {
        return Err(invalid(format!("key request: unknown member {unknown:?}")));
    }
    let text = |name: &str| match request.get(name) {
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(invalid(format!("key request: {name} must be a string"))),
    };
    let key = text("key")?.unwrap_or_default();
    let fingerprint = text("fingerprint")?.unwrap_or_default();
    if key.is_empty() || key.len() > MAX_TEXT_BYTES {
        return Err(invalid(format!("an idempotency key is 1 to {MAX_TEXT_BYTES} UTF-8 bytes, not {}", key.len())));
    }
    if !is_payload_fingerprint(fingerprint) {
        return Err(invalid(format!(
            "{fingerprint:?} is not a payload fingerprint ({PAYLOAD_PREFIX} and 64 hex digits)"
        )));
    }
    match text("storedFingerprint")? {
        Some(stored) if stored == fingerprint => Ok(r#"{"outcome":"replay"}"#.to_string()),
        Some(stored) => Err(Error::IdempotencyKeyConflict {
            key: key.to_string(),
            stored_fingerprint: stored.to_string(),
            fingerprint: fingerprint.to_string(),
        }),
        None => {
            let mut out = String::with_capacity(256 + 2 * key.len());
            out.push_str(r#"{"outcome":"run","receipt":{"eventId":"#);
            write_string(&mut out, key);
            out.push_str(r#","fingerprint":"#);
            write_string(&mut out, fingerprint);
            out.push_str(r#","workflowId":"#);
            write_string(&mut out, key);
            out.push_str(r#","eventType":"#);
            write_string(&mut out, KEY_EVENT_TYPE);
            out.push_str(
                r#","outcome":"applied","ruleSet":null,"result":{"operationIds":[],"status":null,"revision":null}}}"#,
            );
            Ok(out)
        }
    }
}
