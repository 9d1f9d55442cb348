//! The one error type of idemflow. Every variant has a stable `code` and a
//! `disposition` that tells the host what to do with the delivery.

use serde_json::{json, Map, Value};

/// What the host should do with a delivery that failed with this error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The input is wrong and will never succeed: dead-letter it.
    Reject,
    /// Transient: redeliver later.
    Retry,
    /// A person or a reconciliation job must look.
    Reconcile,
    /// The worker itself is misconfigured (a wrong argument, an unknown rule
    /// set, a rule set that does not verify): no delivery can succeed until it
    /// is fixed, so stop the worker rather than dead-letter or retry messages.
    Fatal,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Reject => "reject",
            Disposition::Retry => "retry",
            Disposition::Reconcile => "reconcile",
            Disposition::Fatal => "fatal",
        }
    }

    /// The dispositions a rule may give; `fatal` is never a rule's answer.
    pub fn parse(text: &str) -> Option<Disposition> {
        match text {
            "reject" => Some(Disposition::Reject),
            "retry" => Some(Disposition::Retry),
            "reconcile" => Some(Disposition::Reconcile),
            _ => None,
        }
    }

    /// Any disposition by name, `fatal` included (as a host reports it).
    pub fn parse_any(text: &str) -> Option<Disposition> {
        match text {
            "fatal" => Some(Disposition::Fatal),
            other => Disposition::parse(other),
        }
    }
}

/// What an `IDENTITY_MISMATCH` names: the guarded field, where, and both values.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub field: String,
    pub workflow_id: String,
    pub event_id: String,
    pub event_type: String,
    pub recorded: Option<String>,
    pub actual: String,
    pub disposition: Disposition,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("{field} {reason}")]
    InvalidEvent { field: String, reason: String, event_id: Option<String> },

    #[error("event id {event_id} was already recorded with another payload (stored {stored_fingerprint}, delivered {fingerprint})")]
    EventIdConflict { event_id: String, workflow_id: String, stored_fingerprint: String, fingerprint: String },

    #[error("workflow {workflow_id} does not exist (event {event_id}, {event_type})")]
    UnknownWorkflow { workflow_id: String, event_id: String, event_type: String, disposition: Disposition },

    /// Boxed: the largest variant, and a rare answer, so every `Result` of the
    /// crate stays small.
    #[error(
        "{} of event {} ({}) does not match the one recorded on workflow {} ({})",
        .0.field, .0.event_id, .0.actual, .0.workflow_id, .0.recorded.as_deref().unwrap_or("nothing recorded")
    )]
    IdentityMismatch(Box<Mismatch>),

    #[error("{event_type} cannot apply to workflow {workflow_id} in status {status} (event {event_id})")]
    InvalidTransition {
        workflow_id: String,
        event_id: String,
        event_type: String,
        status: String,
        disposition: Disposition,
    },

    #[error("outbox operation {operation_id} already exists")]
    OutboxConflict { operation_id: String, workflow_id: String, event_id: String },

    #[error("workflow {workflow_id} changed since it was read (expected status {expected_status}, revision {expected_revision})")]
    ConcurrentUpdate { workflow_id: String, event_id: String, expected_status: String, expected_revision: u64 },

    #[error("the store is unavailable: {reason}")]
    StoreUnavailable { reason: String },

    #[error("stored {record} is invalid: {field} {reason}")]
    InvalidRecord { record: &'static str, field: String, reason: String },

    #[error("{reason}")]
    InvalidArgument { reason: String },

    #[error("{path}: {reason}")]
    RuleSetInvalid { path: String, reason: String, report: Option<Value> },

    /// The host's own work in the transaction (`onApplied`) failed: the
    /// transaction rolled back, and the delivery is to be retried.
    #[error("{reason}")]
    HandlerFailed { reason: String },
    #[error("payload {path} {reason}")]
    InvalidPayload { path: String, reason: String },

    #[error(
        "idempotency key {key} was recorded with another payload (stored {stored_fingerprint}, given {fingerprint})"
    )]
    IdempotencyKeyConflict { key: String, stored_fingerprint: String, fingerprint: String },

    #[error("idempotency key {key} is held by a call still running; retry in {retry_after_ms} ms")]
    IdempotencyKeyInProgress { key: String, retry_after_ms: u64 },

    /// A valid event whose write would take a stored record past a bound (the
    /// facts map's entries): nothing is malformed, a person decides.
    #[error("workflow {workflow_id}: {reason}")]
    BoundExceeded { workflow_id: String, event_id: String, bound: &'static str, reason: String },
}

/// Every code with its default disposition, in a stable order. Hosts read this
/// table rather than keeping their own copy.
pub const CODES: &[(&str, Disposition)] = &[
    ("INVALID_EVENT", Disposition::Reject),
    ("EVENT_ID_CONFLICT", Disposition::Reconcile),
    ("UNKNOWN_WORKFLOW", Disposition::Retry),
    ("IDENTITY_MISMATCH", Disposition::Reconcile),
    ("INVALID_TRANSITION", Disposition::Reconcile),
    ("OUTBOX_CONFLICT", Disposition::Reconcile),
    ("CONCURRENT_UPDATE", Disposition::Retry),
    ("INVALID_RECORD", Disposition::Reconcile),
    ("INVALID_ARGUMENT", Disposition::Fatal),
    ("RULESET_INVALID", Disposition::Fatal),
    ("STORE_UNAVAILABLE", Disposition::Retry),
    ("HANDLER_FAILED", Disposition::Retry),
    ("INVALID_PAYLOAD", Disposition::Reject),
    ("IDEMPOTENCY_KEY_CONFLICT", Disposition::Reconcile),
    ("IDEMPOTENCY_KEY_IN_PROGRESS", Disposition::Retry),
    // Raised by the stores, never by the core: the database refused a write for its size.
    ("WRITE_TOO_LARGE", Disposition::Reconcile),
    ("BOUND_EXCEEDED", Disposition::Reconcile),
];

pub fn default_disposition(code: &str) -> Option<Disposition> {
    CODES.iter().find(|(c, _)| *c == code).map(|(_, d)| *d)
}

impl Error {
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidEvent { .. } => "INVALID_EVENT",
            Error::EventIdConflict { .. } => "EVENT_ID_CONFLICT",
            Error::UnknownWorkflow { .. } => "UNKNOWN_WORKFLOW",
            Error::IdentityMismatch(_) => "IDENTITY_MISMATCH",
            Error::InvalidTransition { .. } => "INVALID_TRANSITION",
            Error::OutboxConflict { .. } => "OUTBOX_CONFLICT",
            Error::ConcurrentUpdate { .. } => "CONCURRENT_UPDATE",
            Error::StoreUnavailable { .. } => "STORE_UNAVAILABLE",
            Error::InvalidRecord { .. } => "INVALID_RECORD",
            Error::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Error::RuleSetInvalid { .. } => "RULESET_INVALID",
            Error::HandlerFailed { .. } => "HANDLER_FAILED",
            Error::InvalidPayload { .. } => "INVALID_PAYLOAD",
            Error::IdempotencyKeyConflict { .. } => "IDEMPOTENCY_KEY_CONFLICT",
            Error::IdempotencyKeyInProgress { .. } => "IDEMPOTENCY_KEY_IN_PROGRESS",
            Error::BoundExceeded { .. } => "BOUND_EXCEEDED",
        }
    }

    pub fn disposition(&self) -> Disposition {
        match self {
            Error::UnknownWorkflow { disposition, .. } | Error::InvalidTransition { disposition, .. } => *disposition,
            Error::IdentityMismatch(mismatch) => mismatch.disposition,
            other => default_disposition(other.code()).unwrap_or(Disposition::Reject),
        }
    }

    /// The ids and values involved, as a plain JSON object.
    pub fn details(&self) -> Map<String, Value> {
        let value = match self {
            Error::InvalidEvent { field, reason, event_id } => {
                json!({ "field": field, "reason": reason, "eventId": event_id })
            }
            Error::EventIdConflict { event_id, workflow_id, stored_fingerprint, fingerprint } => json!({
                "eventId": event_id, "workflowId": workflow_id,
                "storedFingerprint": stored_fingerprint, "fingerprint": fingerprint,
            }),
            Error::UnknownWorkflow { workflow_id, event_id, event_type, .. } => {
                json!({ "workflowId": workflow_id, "eventId": event_id, "eventType": event_type })
            }
            Error::IdentityMismatch(mismatch) => json!({
                "field": mismatch.field, "workflowId": mismatch.workflow_id, "eventId": mismatch.event_id,
                "eventType": mismatch.event_type, "recorded": mismatch.recorded, "actual": mismatch.actual,
            }),
            Error::InvalidTransition { workflow_id, event_id, event_type, status, .. } => json!({
                "workflowId": workflow_id, "eventId": event_id, "eventType": event_type, "status": status,
            }),
            Error::OutboxConflict { operation_id, workflow_id, event_id } => {
                json!({ "operationId": operation_id, "workflowId": workflow_id, "eventId": event_id })
            }
            Error::ConcurrentUpdate { workflow_id, event_id, expected_status, expected_revision } => json!({
                "workflowId": workflow_id, "eventId": event_id,
                "expectedStatus": expected_status, "expectedRevision": expected_revision,
            }),
            Error::StoreUnavailable { reason } => json!({ "reason": reason }),
            Error::InvalidRecord { record, field, reason } => {
                json!({ "record": record, "field": field, "reason": reason })
            }
            Error::InvalidArgument { reason } | Error::HandlerFailed { reason } => json!({ "reason": reason }),
            Error::RuleSetInvalid { path, reason, report } => {
                json!({ "path": path, "reason": reason, "report": report })
            }
            Error::InvalidPayload { path, reason } => json!({ "path": path, "reason": reason }),
            Error::IdempotencyKeyConflict { key, stored_fingerprint, fingerprint } => {
                json!({ "key": key, "storedFingerprint": stored_fingerprint, "fingerprint": fingerprint })
            }
            Error::IdempotencyKeyInProgress { key, retry_after_ms } => {
                json!({ "key": key, "retryAfterMs": retry_after_ms })
            }
            Error::BoundExceeded { workflow_id, event_id, bound, reason } => {
                json!({ "workflowId": workflow_id, "eventId": event_id, "bound": bound, "reason": reason })
            }
        };
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// `{code, disposition, message, details}`: the shape every binding hands on.
    pub fn to_json(&self) -> Value {
        json!({
            "code": self.code(),
            "disposition": self.disposition().as_str(),
            "message": self.to_string(),
            "details": self.details(),
        })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Error messages quote at most 64 characters of a caller's string.
pub fn truncate(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// A JS number as an error message shows it: whole numbers in full, as
/// Rust and JavaScript print them (below 10^19), `NaN` and `inf`, and any
/// other to 15 significant digits. (The standard float formatting would be about a
/// tenth of the wasm module for messages that quote a misused argument.)
pub fn number_text(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sign = if n.is_sign_negative() { "-" } else { "" };
    let a = n.abs();
    if a.fract() == 0.0 && a < 1e19 {
        return format!("{sign}{}", a as u64);
    }
    // Scale to 15 significant digits as a whole number, then place the point.
    let exponent = a.log10().floor() as i32;
    let digits = (a * 10f64.powi(14 - exponent)).round() as u64;
    let text = digits.to_string();
    let point = exponent + 1;
    let mut out = String::from(sign);
    if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat('0').take((-point) as usize));
        out.push_str(text.trim_end_matches('0'));
    } else if (point as usize) < text.len() {
        let (whole, fraction) = text.split_at(point as usize);
        out.push_str(whole);
        let fraction = fraction.trim_end_matches('0');
        if !fraction.is_empty() {
            out.push('.');
            out.push_str(fraction);
        }
    } else {
        out.push_str(&text);
        out.extend(std::iter::repeat('0').take(point as usize - text.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::number_text;

    #[test]
    fn numbers_in_messages_read_as_they_were_written() {
        let cases = [
            (3.0, "3"),
            (-1.0, "-1"),
            (0.0, "0"),
            (9_007_199_254_740_992.0, "9007199254740992"),
            (1e21, "1000000000000000000000"),
            (1.5, "1.5"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (-0.25, "-0.25"),
            (123.456, "123.456"),
            (1e-7, "0.0000001"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (n, text) in cases {
            assert_eq!(number_text(n), text, "{n}");
        }
    }
}
