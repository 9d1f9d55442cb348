//! The outbox policy's wire format: the requests and answers the wasm binding
//! hands over as JSON text or JS numbers, read and checked here; what they
//! mean is decided in [`crate::outbox`].

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::parse_object;
use crate::error::{Disposition, Error, Result};
use crate::outbox::{attempt_number, claimable, time_ms, whole, Failure, HandlerResult, Policy, Status};

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument { reason: reason.into() }
}

fn to_text<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| invalid(e.to_string()))
}

/// A policy's settings (absent ones defaulted) as JSON text, with `renewEveryMs`.
pub fn settings_json(policy: &Policy) -> String {
    policy.to_json().to_string()
}

/// A request's members: an object of `known` keys only; `what` names it in errors.
struct Request<'a> {
    what: &'a str,
    map: Map<String, Value>,
}

impl<'a> Request<'a> {
    fn parse(text: &str, what: &'a str, known: &[&str]) -> Result<Request<'a>> {
        Request::of(parse_object(text, what)?, what, known)
    }

    fn of(map: Map<String, Value>, what: &'a str, known: &[&str]) -> Result<Request<'a>> {
        if let Some(key) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(invalid(format!("{what}: unknown field `{key}`, expected one of {}", known.join(", "))));
        }
        Ok(Request { what, map })
    }

    fn wrong(&self, key: &str, expected: &str) -> Error {
        let found = match self.map.get(key) {
            None => return invalid(format!("{}: missing field `{key}`", self.what)),
            Some(Value::Null) => "null",
            Some(Value::Bool(_)) => "a boolean",
            Some(Value::Number(_)) => "a number",
            Some(Value::String(_)) => "a string",
            Some(Value::Array(_)) => "an array",
            Some(Value::Object(_)) => "an object",
        };
        invalid(format!("{}: {key} must be {expected}, not {found}", self.what))
    }

    fn number(&self, key: &str) -> Result<f64> {
        self.map.get(key).and_then(Value::as_f64).ok_or_else(|| self.wrong(key, "a number"))
    }

    fn text(&self, key: &str) -> Result<String> {
        self.map.get(key).and_then(Value::as_str).map(str::to_string).ok_or_else(|| self.wrong(key, "a string"))
    }

    /// Absent or null: `None`.
    fn optional_text(&self, key: &str) -> Result<Option<String>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.wrong(key, "a string or null")),
        }
    }

    fn optional_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong(key, "true, false or null")),
        }
    }
}

/// `{"operationId", "attempt"}` in; `{"attempt", "ceilingMs", "delayMs"}` out.
pub fn backoff(policy: &Policy, request: &str) -> Result<String> {
    let request = Request::parse(request, "backoff request", &["operationId", "attempt"])?;
    let operation_id = request.text("operationId")?;
    let attempt = attempt_number(request.number("attempt")?)?;
    Ok(json!({
        "attempt": attempt,
        "ceilingMs": policy.backoff_ceiling_ms(attempt),
        "delayMs": policy.backoff_delay_ms(&operation_id, attempt),
    })
    .to_string())
}

/// `{"verdict": "run"}` or `{"verdict": "dead", "reason": "claims-expired", "lastError"}`.
pub fn admit(policy: &Policy, attempts: f64) -> Result<String> {
    let attempts = whole(attempts, "attempts", 0, u32::MAX as u64)? as u32;
    to_text(&policy.admit(attempts)?)
}

/// `{"operationId", "attempt", "createdAt"?, "now", "result": {"ok": true} | {"ok": false,
/// "name"?, "code"?, "message"?, "retryable"?, "unavailable"?, "disposition"?, "stopping"?}}`
/// in; the [`Verdict`] out. A `disposition` that is not one of idemflow's
/// is ignored (another library's errors may carry the word).
pub fn classify(policy: &Policy, request: &str) -> Result<String> {
    let mut request =
        Request::parse(request, "classify request", &["operationId", "attempt", "createdAt", "now", "result"])?;
    let operation_id = request.text("operationId")?;
    let created_value = match request.map.get("createdAt") {
        None | Some(Value::Null) => None,
        Some(_) => Some(request.number("createdAt")?),
    };
    let attempt_value = request.number("attempt")?;
    let now_value = request.number("now")?;
    let r = match request.map.remove("result") {
        Some(Value::Object(map)) => Request::of(
            map,
            "classify request result",
            &["ok", "name", "code", "message", "retryable", "unavailable", "disposition", "stopping"],
        )?,
        other => {
            if let Some(value) = other {
                request.map.insert("result".into(), value);
            }
            return Err(request.wrong("result", "an object"));
        }
    };
    let ok = match r.map.get("ok") {
        Some(Value::Bool(ok)) => *ok,
        _ => return Err(r.wrong("ok", "true or false")),
    };
    let result = if ok {
        HandlerResult::Succeeded
    } else {
        HandlerResult::Failed(Failure {
            name: r.optional_text("name")?,
            code: r.optional_text("code")?,
            message: r.optional_text("message")?.unwrap_or_default(),
            retryable: r.optional_bool("retryable")?,
            disposition: r.optional_text("disposition")?.as_deref().and_then(Disposition::parse_any),
            stopping: match r.map.get("stopping") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(r.wrong("stopping", "true or false")),
            },
            unavailable: r.optional_bool("unavailable")?.unwrap_or(false),
        })
    };
    let attempt = attempt_number(attempt_value)?;
    let now = time_ms(now_value, "now")?;
    let created_at = created_value.map(|t| time_ms(t, "createdAt")).transpose()?;
    to_text(&policy.classify(&operation_id, attempt, created_at, now, &result))
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
            json!({"maxAttempts": 3, "baseDelayMs": 50, "maxDelayMs": 400, "leaseMs": 900, "outageBudgetMs": 5000}),
        ))
        .unwrap();
        let written: Value = serde_json::from_str(&settings_json(&p)).unwrap();
        assert_eq!(
            written,
            json!({"maxAttempts": 3, "baseDelayMs": 50, "maxDelayMs": 400, "leaseMs": 900, "outageBudgetMs": 5000, "renewEveryMs": 300})
        );
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
            &classify(&p, r#"{"operationId":"op","attempt":1,"now":10,"result":{"ok":false,"message":"down"}}"#)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(retry["verdict"], "retry");
        assert_eq!(retry["nextAttemptAt"], 10 + p.backoff_delay_ms("op", 1));
    }

    #[test]
    fn an_unknown_disposition_counts_as_unmarked() {
        let p = policy(3, 100, 1_000);
        let verdict =
            classify(&p, r#"{"operationId":"op","attempt":1,"now":0,"result":{"ok":false,"disposition":"ignore"}}"#)
                .unwrap();
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
