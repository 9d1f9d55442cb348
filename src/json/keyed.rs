//! The keyed mode's decision: a call identified by a key the caller chose
//! (an HTTP `Idempotency-Key`, a job id), with no rule set and no workflow.
//! The key's record is an inbox receipt of its own type, so retention
//! expires keys by age as it expires receipts. The same key with the same
//! payload fingerprint replays what the first call stored; with another
//! payload it is a conflict a person must look at, never a silent replay.

use serde::Deserialize;
use serde_json::{json, Value};

use super::payload::PAYLOAD_PREFIX;
use crate::error::{Error, Result};
use crate::field::MAX_TEXT_BYTES;

/// The event type of a key's receipt: no rule set declares it (not a name).
pub const KEY_EVENT_TYPE: &str = "idemflow.key";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyRequest {
    key: String,
    fingerprint: String,
    /// The fingerprint of the receipt stored under the key, when there is one.
    stored_fingerprint: Option<String>,
}

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
    let request: KeyRequest = serde_json::from_str(request).map_err(|e| invalid(format!("key request: {e}")))?;
    let KeyRequest { key, fingerprint, stored_fingerprint } = request;
    if key.is_empty() || key.len() > MAX_TEXT_BYTES {
        return Err(invalid(format!("an idempotency key is 1 to {MAX_TEXT_BYTES} UTF-8 bytes, not {}", key.len())));
    }
    if !is_payload_fingerprint(&fingerprint) {
        return Err(invalid(format!("{fingerprint:?} is not a payload fingerprint ({PAYLOAD_PREFIX} and 64 hex digits)")));
    }
    let answer: Value = match stored_fingerprint {
        Some(stored) if stored == fingerprint => json!({ "outcome": "replay" }),
        Some(stored) => return Err(Error::IdempotencyKeyConflict { key, stored_fingerprint: stored, fingerprint }),
        None => json!({
            "outcome": "run",
            "receipt": {
                "eventId": key, "fingerprint": fingerprint, "workflowId": key, "eventType": KEY_EVENT_TYPE,
                "outcome": "applied", "ruleSet": null,
                "result": { "operationIds": [], "status": null, "revision": null },
            },
        }),
    };
    Ok(answer.to_string())
}
