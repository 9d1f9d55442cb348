//! The outbox policy's wire format: the requests and answers the wasm binding
//! hands over as JSON text or JS numbers, read and checked here; what they
//! mean is decided in [`crate::outbox`].

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Disposition, Error, Result};
use crate::outbox::{attempt_number, claimable, time_ms, whole, Failure, HandlerResult, Policy, Status};

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument { reason: reason.into() }
}

fn parse<'a, T: Deserialize<'a>>(text: &'a str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| invalid(format!("{what}: {e}")))
}

fn to_text<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| invalid(e.to_string()))
}

/// A policy's settings (absent ones defaulted) as JSON text, with `renewEveryMs`.
pub fn settings_json(policy: &Policy) -> String {
    policy.to_json().to_string()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BackoffRequest {
    operation_id: String,
    attempt: f64,
}

/// `{"operationId", "attempt"}` in; `{"attempt", "ceilingMs", "delayMs"}` out.
pub fn backoff(policy: &Policy, request: &str) -> Result<String> {
    let request: BackoffRequest = parse(request, "backoff request")?;
    let attempt = attempt_number(request.attempt)?;
    Ok(json!({
        "attempt": attempt,
        "ceilingMs": policy.backoff_ceiling_ms(attempt),
        "delayMs": policy.backoff_delay_ms(&request.operation_id, attempt),
    })
    .to_string())
}

/// `{"verdict": "run"}` or `{"verdict": "dead", "reason": "claims-expired", "lastError"}`.
pub fn admit(policy: &Policy, attempts: f64) -> Result<String> {
    let attempts = whole(attempts, "attempts", 0, u32::MAX as u64)? as u32;
    to_text(&policy.admit(attempts)?)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClassifyRequest {
    operation_id: String,
    attempt: f64,
    now: f64,
    result: ResultRequest,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResultRequest {
    ok: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    retryable: Option<bool>,
    #[serde(default)]
    disposition: Option<String>,
    #[serde(default)]
    stopping: bool,
}

/// `{"operationId", "attempt", "now", "result": {"ok": true} | {"ok": false,
/// "name"?, "code"?, "message"?, "retryable"?, "disposition"?, "stopping"?}}`
/// in; the [`Verdict`] out. A `disposition` that is not one of idemflow's
/// is ignored (another library's errors may carry the word).
pub fn classify(policy: &Policy, request: &str) -> Result<String> {
    let request: ClassifyRequest = parse(request, "classify request")?;
    let attempt = attempt_number(request.attempt)?;
    let now = time_ms(request.now, "now")?;
    let r = request.result;
    let result = if r.ok {
        HandlerResult::Succeeded
    } else {
        HandlerResult::Failed(Failure {
            name: r.name,
            code: r.code,
            message: r.message.unwrap_or_default(),
            retryable: r.retryable,
            disposition: r.disposition.as_deref().and_then(Disposition::parse_any),
            stopping: r.stopping,
        })
    };
    to_text(&policy.classify(&request.operation_id, attempt, now, &result))
}

/// The claim condition for one stored operation.
pub fn claimable_args(status: &str, next_attempt_at: f64, lease_expires_at: Option<f64>, now: f64) -> Result<bool> {
    let status = Status::parse(status).ok_or_else(|| Error::InvalidRecord {
        record: "operation",
        field: "status".into(),
        reason: "must be pending, claimed, done or dead".into(),
    })?;
    let next_attempt_at = time_ms(next_attempt_at, "nextAttemptAt")?;
    let lease_expires_at = lease_expires_at.map(|t| time_ms(t, "leaseExpiresAt")).transpose()?;
    claimable(status, next_attempt_at, lease_expires_at, time_ms(now, "now")?)
}

/// When a claim taken (or renewed) at `now` expires, under `policy`.
pub fn lease_expires_at(policy: &Policy, now: f64) -> Result<u64> {
    Ok(policy.lease_expires_at(time_ms(now, "now")?))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::outbox::tests::{policy, settings};

    #[test]
    fn settings_json_writes_every_setting_and_the_renewal_period() {
        let p = Policy::from_source(&settings(
            json!({"maxAttempts": 3, "baseDelayMs": 50, "maxDelayMs": 400, "leaseMs": 900}),
        ))
        .unwrap();
        let written: Value = serde_json::from_str(&settings_json(&p)).unwrap();
        assert_eq!(written, json!({"maxAttempts": 3, "baseDelayMs": 50, "maxDelayMs": 400, "leaseMs": 900, "renewEveryMs": 300}));
        assert_eq!(Policy::from_source(written.as_object().unwrap()).unwrap(), p);
    }

    #[test]
    fn classify_reads_a_request_and_writes_the_verdict() {
        let p = policy(3, 100, 1_000);
        let done = classify(&p, r#"{"operationId":"op","attempt":1,"now":10,"result":{"ok":true}}"#).unwrap();
        assert_eq!(done, r#"{"verdict":"done"}"#);
        let dead = classify(
            &p,
            r#"{"operationId":"op","attempt":3,"now":10,"result":{"ok":false,"message":"down","disposition":"retry"}}"#,
        )
        .unwrap();
        assert_eq!(dead, r#"{"verdict":"dead","reason":"max-attempts","lastError":"Error: down"}"#);
        let retry: Value = serde_json::from_str(
            &classify(&p, r#"{"operationId":"op","attempt":1,"now":10,"result":{"ok":false,"message":"down"}}"#).unwrap(),
        )
        .unwrap();
        assert_eq!(retry["verdict"], "retry");
        assert_eq!(retry["nextAttemptAt"], 10 + p.backoff_delay_ms("op", 1));
    }

    #[test]
    fn an_unknown_disposition_counts_as_unmarked() {
        let p = policy(3, 100, 1_000);
        let verdict =
            classify(&p, r#"{"operationId":"op","attempt":1,"now":0,"result":{"ok":false,"disposition":"ignore"}}"#).unwrap();
        assert!(verdict.starts_with(r#"{"verdict":"retry""#), "{verdict}");
    }

    #[test]
    fn malformed_requests_are_errors_not_panics() {
        let p = Policy::default();
        for bad in [
            "",
            "[]",
            r#"{"operationId":"op","attempt":0,"now":0,"result":{"ok":true}}"#,
            r#"{"operationId":"op","attempt":1.5,"now":0,"result":{"ok":true}}"#,
            r#"{"operationId":"op","attempt":1,"now":-1,"result":{"ok":true}}"#,
            r#"{"operationId":"op","attempt":1,"now":9007199254740992,"result":{"ok":true}}"#,
            r#"{"operationId":"\ud800","attempt":1,"now":0,"result":{"ok":true}}"#,
            r#"{"operationId":"op","attempt":1,"now":0,"result":{"ok":"yes"}}"#,
            r#"{"operationId":"op","attempt":1,"now":0,"result":{"ok":true},"extra":1}"#,
        ] {
            assert_eq!(classify(&p, bad).unwrap_err().code(), "INVALID_ARGUMENT", "{bad}");
        }
        assert_eq!(backoff(&p, r#"{"operationId":"op"}"#).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(admit(&p, f64::NAN).unwrap_err().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn backoff_reports_the_ceiling_and_the_delay() {
        let p = policy(5, 1_000, 300_000);
        let out = backoff(&p, r#"{"operationId":"start-exchange:swap-42","attempt":2}"#).unwrap();
        let expected =
            json!({"attempt": 2, "ceilingMs": 2000, "delayMs": p.backoff_delay_ms("start-exchange:swap-42", 2)});
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), expected);
    }

    #[test]
    fn claimable_args_refuses_unknown_statuses_and_bad_times() {
        assert!(claimable_args("pending", 5.0, None, 5.0).unwrap());
        assert_eq!(claimable_args("running", 5.0, None, 5.0).unwrap_err().code(), "INVALID_RECORD");
        assert_eq!(claimable_args("pending", 0.5, None, 5.0).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(claimable_args("claimed", 0.0, Some(f64::INFINITY), 5.0).unwrap_err().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn admit_writes_run_or_dead() {
        let p = policy(2, 100, 1_000);
        assert_eq!(admit(&p, 2.0).unwrap(), r#"{"verdict":"run"}"#);
        assert!(admit(&p, 3.0).unwrap().starts_with(r#"{"verdict":"dead","reason":"claims-expired""#));
    }
}
