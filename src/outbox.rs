//! The outbox policy: when a claim has expired, when a failed operation is
//! tried again, when it is given up as dead, and how a handler's result is
//! classified. Pure: the JS consumer carries the answers out and a store
//! records them, guarded by the claim's fencing token.
//!
//! An operation's `attempts` counts its claims (a store adds one on every
//! claim), so a worker that dies mid-handler still uses up an attempt and a
//! poison operation that crashes every worker it touches still goes dead.

use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{number_text, Disposition, Error, Result};
use crate::input::{Input, Source};
use crate::jcs::MAX_SAFE_INTEGER;

pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub const DEFAULT_BASE_DELAY_MS: u64 = 1_000;
pub const DEFAULT_MAX_DELAY_MS: u64 = 5 * 60 * 1_000;
pub const DEFAULT_LEASE_MS: u64 = 30_000;
/// How long failures that say the downstream is unavailable are retried,
/// counted from the operation's creation: two days, so an outage over a
/// weekend night still leaves nothing dead.
pub const DEFAULT_OUTAGE_BUDGET_MS: u64 = 2 * 24 * 60 * 60 * 1_000;
pub const MAX_OUTAGE_BUDGET_MS: u64 = 30 * 24 * 60 * 60 * 1_000;

/// Bounds that keep every sum of a time and a delay exact in a JS number.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1_000;
pub const MAX_DELAY_LIMIT_MS: u64 = 7 * 24 * 60 * 60 * 1_000;
pub const MAX_LEASE_MS: u64 = 24 * 60 * 60 * 1_000;

/// `last_error` is kept short: it is a hint for an operator, not a log.
pub const MAX_ERROR_CHARS: usize = 1_000;

/// Hashed before the attempt and the id, so the jitter of idemflow's backoff
/// is its own and changes only with a new version of this tag.
pub const BACKOFF_DOMAIN: &str = "idemflow/outbox/backoff/v1";

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument { reason: reason.into() }
}

/// A whole number within `[min, max]`, or an error naming the argument.
pub fn whole(value: f64, name: &str, min: u64, max: u64) -> Result<u64> {
    if value.is_finite() && value.fract() == 0.0 && value >= min as f64 && value <= max as f64 {
        Ok(value as u64)
    } else {
        Err(invalid(format!("{name} must be a whole number from {min} to {max}, not {}", number_text(value))))
    }
}

/// A time in integer milliseconds since the epoch.
pub fn time_ms(value: f64, name: &str) -> Result<u64> {
    whole(value, name, 0, MAX_SAFE_INTEGER)
}

/// An attempt number: 1 for the first claim.
pub fn attempt_number(value: f64) -> Result<u32> {
    whole(value, "attempt", 1, u32::MAX as u64).map(|n| n as u32)
}

/// How many times, how far apart, and for how long a claim holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Claims an operation may use; a failure on the last one makes it dead.
    pub max_attempts: u32,
    /// The backoff ceiling after the first attempt; it doubles per attempt.
    pub base_delay_ms: u64,
    /// The ceiling never grows past this.
    pub max_delay_ms: u64,
    /// How long a claim holds before another consumer may take it.
    pub lease_ms: u64,
    /// How long after its creation an operation whose handler says the
    /// downstream is unavailable is still retried (those retries give their
    /// attempt back, so `max_attempts` does not count them).
    pub outage_budget_ms: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_delay_ms: DEFAULT_BASE_DELAY_MS,
            max_delay_ms: DEFAULT_MAX_DELAY_MS,
            lease_ms: DEFAULT_LEASE_MS,
            outage_budget_ms: DEFAULT_OUTAGE_BUDGET_MS,
        }
    }
}

fn setting(source: &dyn Source, name: &str, default: u64, min: u64, max: u64) -> Result<u64> {
    match source.field(name) {
        Input::Absent | Input::Null => Ok(default),
        Input::Number(n) => whole(n, name, min, max),
        Input::Unreadable(why) => Err(invalid(format!("{name} could not be read: {why}"))),
        other => Err(invalid(format!("{name} must be a number, not {}", other.kind()))),
    }
}

/// The options a policy reads, in the order a host lays them out as one record.
pub const OPTIONS: [&str; 5] = ["maxAttempts", "baseDelayMs", "maxDelayMs", "leaseMs", "outageBudgetMs"];

impl Policy {
    /// Reads `maxAttempts`, `baseDelayMs`, `maxDelayMs`, `leaseMs` and
    /// `outageBudgetMs`; an absent one takes its default.
    pub fn from_source(source: &dyn Source) -> Result<Policy> {
        let max_attempts =
            setting(source, "maxAttempts", DEFAULT_MAX_ATTEMPTS as u64, 1, MAX_ATTEMPTS_LIMIT as u64)? as u32;
        let base_delay_ms = setting(source, "baseDelayMs", DEFAULT_BASE_DELAY_MS, 1, MAX_DELAY_LIMIT_MS)?;
        let max_delay_ms =
            setting(source, "maxDelayMs", DEFAULT_MAX_DELAY_MS.max(base_delay_ms), 1, MAX_DELAY_LIMIT_MS)?;
        let lease_ms = setting(source, "leaseMs", DEFAULT_LEASE_MS, 1, MAX_LEASE_MS)?;
        let outage_budget_ms = setting(source, "outageBudgetMs", DEFAULT_OUTAGE_BUDGET_MS, 0, MAX_OUTAGE_BUDGET_MS)?;
        if base_delay_ms > max_delay_ms {
            return Err(invalid(format!("baseDelayMs ({base_delay_ms}) must not exceed maxDelayMs ({max_delay_ms})")));
        }
        Ok(Policy { max_attempts, base_delay_ms, max_delay_ms, lease_ms, outage_budget_ms })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "maxAttempts": self.max_attempts,
            "baseDelayMs": self.base_delay_ms,
            "maxDelayMs": self.max_delay_ms,
            "leaseMs": self.lease_ms,
            "outageBudgetMs": self.outage_budget_ms,
            "renewEveryMs": self.renew_every_ms(),
        })
    }

    /// How often a consumer renews the leases of running handlers: three
    /// renewals fit in one lease, so one slow or failed renewal loses nothing.
    pub fn renew_every_ms(&self) -> u64 {
        (self.lease_ms / 3).max(1)
    }

    /// When a claim taken (or renewed) at `now` expires.
    pub fn lease_expires_at(&self, now: u64) -> u64 {
        now.saturating_add(self.lease_ms).min(MAX_SAFE_INTEGER)
    }

    /// The upper bound of the wait after failed attempt `attempt`:
    /// `min(maxDelayMs, baseDelayMs × 2^(attempt − 1))`.
    pub fn backoff_ceiling_ms(&self, attempt: u32) -> u64 {
        let factor = 1u64.checked_shl(attempt.saturating_sub(1)).unwrap_or(u64::MAX);
        self.base_delay_ms.saturating_mul(factor).min(self.max_delay_ms)
    }

    /// Full jitter: a wait drawn uniformly from `[0, ceiling]`, where the draw
    /// is the first 8 bytes (big-endian) of SHA-256 over the domain tag, a
    /// zero byte, the attempt (u32 big-endian) and the operation id's UTF-8
    /// bytes, scaled as `draw × (ceiling + 1) / 2^64`. The same operation and
    /// attempt always wait the same time, so a test can pin it; different
    /// operations spread out instead of retrying in lockstep.
    pub fn backoff_delay_ms(&self, operation_id: &str, attempt: u32) -> u64 {
        let ceiling = self.backoff_ceiling_ms(attempt);
        let draw = jitter_draw(operation_id, attempt);
        ((draw as u128 * (ceiling as u128 + 1)) >> 64) as u64
    }

    /// When failed attempt `attempt` may be tried again.
    pub fn next_attempt_at(&self, operation_id: &str, attempt: u32, now: u64) -> u64 {
        now.saturating_add(self.backoff_delay_ms(operation_id, attempt)).min(MAX_SAFE_INTEGER)
    }

    /// Whether a freshly claimed operation may run. A claim past
    /// `maxAttempts` means the previous claims expired without a result (the
    /// worker died or hung each time): it is not run again.
    pub fn admit(&self, attempts: u32) -> Result<Admission> {
        if attempts == 0 {
            return Err(invalid("a claimed operation has at least one attempt (the claim counts one), not 0"));
        }
        if attempts <= self.max_attempts {
            return Ok(Admission::Run);
        }
        Ok(Admission::Dead {
            reason: DeadReason::ClaimsExpired,
            last_error: format!(
                "CLAIMS_EXPIRED: gave up after {} attempts; the last claim expired without a result (its worker may have crashed or hung)",
                self.max_attempts
            ),
        })
    }

    /// The wait before the next try of an operation created at `created_at`
    /// whose downstream has been unavailable: the backoff of step `n`, where
    /// the ceiling `baseDelayMs × 2^(n−1)` is the first to reach the time
    /// the operation has existed (capped by `maxDelayMs`), so the waits grow
    /// exponentially with the outage however often the attempt is given back.
    pub fn outage_delay_ms(&self, operation_id: &str, created_at: u64, now: u64) -> u64 {
        let elapsed = now.saturating_sub(created_at);
        let mut step = 1u32;
        while step < 64 && self.backoff_ceiling_ms(step) < elapsed && self.backoff_ceiling_ms(step) < self.max_delay_ms
        {
            step += 1;
        }
        self.backoff_delay_ms(operation_id, step)
    }

    /// What to record after attempt `attempt` of `operation_id` (created at
    /// `created_at`, when known) ended with `result` at `now`.
    pub fn classify(
        &self,
        operation_id: &str,
        attempt: u32,
        created_at: Option<u64>,
        now: u64,
        result: &HandlerResult,
    ) -> Verdict {
        let failure = match result {
            HandlerResult::Succeeded => return Verdict::Done,
            HandlerResult::Failed(failure) => failure,
        };
        match class_of(signal_of(result)) {
            Class::Done => Verdict::Done,
            Class::Release => Verdict::Release,
            Class::Dead => Verdict::Dead { reason: DeadReason::NonRetryable, last_error: failure.last_error() },
            Class::Outage => match created_at {
                Some(created) if now < created.saturating_add(self.outage_budget_ms) => {
                    let delay_ms = self.outage_delay_ms(operation_id, created, now);
                    Verdict::Retry {
                        attempt,
                        delay_ms,
                        next_attempt_at: now.saturating_add(delay_ms).min(MAX_SAFE_INTEGER),
                        last_error: failure.last_error(),
                        attempt_counted: false,
                    }
                }
                Some(_) => Verdict::Dead { reason: DeadReason::OutageBudget, last_error: failure.last_error() },
                // Without a creation time there is no budget to measure: an ordinary retry.
                None => self.counted_retry(operation_id, attempt, now, failure),
            },
            Class::Retry => self.counted_retry(operation_id, attempt, now, failure),
        }
    }

    fn counted_retry(&self, operation_id: &str, attempt: u32, now: u64, failure: &Failure) -> Verdict {
        match () {
            () if attempt >= self.max_attempts => {
                Verdict::Dead { reason: DeadReason::MaxAttempts, last_error: failure.last_error() }
            }
            () => {
                let delay_ms = self.backoff_delay_ms(operation_id, attempt);
                Verdict::Retry {
                    attempt,
                    delay_ms,
                    next_attempt_at: now.saturating_add(delay_ms).min(MAX_SAFE_INTEGER),
                    last_error: failure.last_error(),
                    attempt_counted: true,
                }
            }
        }
    }
}

fn jitter_draw(operation_id: &str, attempt: u32) -> u64 {
    let mut message = Vec::with_capacity(BACKOFF_DOMAIN.len() + 5 + operation_id.len());
    message.extend_from_slice(BACKOFF_DOMAIN.as_bytes());
    message.push(0);
    message.extend_from_slice(&attempt.to_be_bytes());
    message.extend_from_slice(operation_id.as_bytes());
    let digest = crate::sha256::digest(&message);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Pending,
    Claimed,
    Done,
    Dead,
}

impl Status {
    pub fn parse(text: &str) -> Option<Status> {
        match text {
            "pending" => Some(Status::Pending),
            "claimed" => Some(Status::Claimed),
            "done" => Some(Status::Done),
            "dead" => Some(Status::Dead),
            _ => None,
        }
    }
}

/// A claim has expired once `now` reaches its expiry; from then on another
/// consumer may take it. The store's claim condition is `lease_expires_at <= now`.
pub fn lease_expired(lease_expires_at: u64, now: u64) -> bool {
    now >= lease_expires_at
}

/// Whether a consumer may claim the operation at `now`: a pending one whose
/// next attempt is due, or a claimed one whose lease has expired.
pub fn claimable(status: Status, next_attempt_at: u64, lease_expires_at: Option<u64>, now: u64) -> Result<bool> {
    match status {
        Status::Pending => Ok(next_attempt_at <= now),
        Status::Claimed => match lease_expires_at {
            Some(expiry) => Ok(lease_expired(expiry, now)),
            None => Err(Error::InvalidRecord {
                record: "operation",
                field: "leaseExpiresAt".into(),
                reason: "a claimed operation must have a lease expiry".into(),
            }),
        },
        Status::Done | Status::Dead => Ok(false),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Admission {
    Run,
    #[serde(rename_all = "camelCase")]
    Dead {
        reason: DeadReason,
        last_error: String,
    },
}

/// How a handler's attempt ended, as the consumer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerResult {
    Succeeded,
    Failed(Failure),
}

/// What a thrown value said about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Failure {
    pub name: Option<String>,
    pub code: Option<String>,
    pub message: String,
    /// `error.retryable` when it is a boolean.
    pub retryable: Option<bool>,
    /// `error.disposition` (an IdemflowError's) when it is one of ours.
    pub disposition: Option<Disposition>,
    /// The consumer had asked the handler to stop (it is shutting down).
    pub stopping: bool,
    /// The failure says the downstream is unavailable (connection refused or
    /// reset, a timeout, HTTP 429/503, or the handler's `unavailable: true`).
    pub unavailable: bool,
}

impl Failure {
    /// `CODE: message` (or `Name: message`), at most [`MAX_ERROR_CHARS`] characters.
    pub fn last_error(&self) -> String {
        let label = self.code.as_deref().or(self.name.as_deref()).filter(|s| !s.is_empty()).unwrap_or("Error");
        let text = if self.message.is_empty() { label.to_string() } else { format!("{label}: {}", self.message) };
        match text.char_indices().nth(MAX_ERROR_CHARS) {
            Some((cut, _)) => text[..cut].to_string(),
            None => text,
        }
    }
}

/// What the classification looks at, in the order it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Succeeded,
    FailedWhileStopping,
    MarkedRetryable(bool),
    Unavailable,
    Disposition(Disposition),
    Unmarked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Done,
    /// Back to pending at once, the attempt not counted.
    Release,
    /// Tried again after the backoff, unless this was the last attempt.
    Retry,
    /// The downstream is down: tried again, the attempt given back, until
    /// the outage budget since the operation's creation is spent.
    Outage,
    Dead,
}

/// The classification table, one row per signal; the consumer's docs print it.
pub const CLASSIFICATION: &[(Signal, Class, &str)] = &[
    (Signal::Succeeded, Class::Done, "the handler returned (or its promise resolved)"),
    (
        Signal::FailedWhileStopping,
        Class::Release,
        "it failed after the consumer asked it to stop: released for another worker, the attempt not counted",
    ),
    (Signal::MarkedRetryable(false), Class::Dead, "error.retryable === false: a permanent failure"),
    (
        Signal::Unavailable,
        Class::Outage,
        "the downstream is unavailable (error.unavailable === true, connection refused or reset, a timeout, HTTP 429 or 503): retried within the outage budget, the attempt given back",
    ),
    (Signal::MarkedRetryable(true), Class::Retry, "error.retryable === true"),
    (Signal::Disposition(Disposition::Retry), Class::Retry, "an IdemflowError whose disposition is retry"),
    (Signal::Disposition(Disposition::Reject), Class::Dead, "an IdemflowError whose disposition is reject"),
    (
        Signal::Disposition(Disposition::Reconcile),
        Class::Dead,
        "an IdemflowError whose disposition is reconcile: a person must look",
    ),
    (
        Signal::Disposition(Disposition::Fatal),
        Class::Retry,
        "an IdemflowError whose disposition is fatal: the handler's worker is misconfigured; the operation is kept for a fixed worker",
    ),
    (Signal::Unmarked, Class::Retry, "any other error is presumed transient"),
];

pub fn signal_of(result: &HandlerResult) -> Signal {
    match result {
        HandlerResult::Succeeded => Signal::Succeeded,
        HandlerResult::Failed(f) if f.stopping => Signal::FailedWhileStopping,
        HandlerResult::Failed(Failure { retryable: Some(false), .. }) => Signal::MarkedRetryable(false),
        HandlerResult::Failed(f) if f.unavailable => Signal::Unavailable,
        HandlerResult::Failed(Failure { retryable: Some(flag), .. }) => Signal::MarkedRetryable(*flag),
        HandlerResult::Failed(Failure { disposition: Some(d), .. }) => Signal::Disposition(*d),
        HandlerResult::Failed(_) => Signal::Unmarked,
    }
}

pub fn class_of(signal: Signal) -> Class {
    CLASSIFICATION.iter().find(|(s, _, _)| *s == signal).map(|(_, c, _)| *c).unwrap_or(Class::Retry)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeadReason {
    /// A retryable failure on the last attempt.
    MaxAttempts,
    /// A failure that says it will never succeed.
    NonRetryable,
    /// Claimed past `maxAttempts`: the earlier claims expired without a result.
    ClaimsExpired,
    /// The downstream was still unavailable once the outage budget was spent.
    OutageBudget,
}

/// What the consumer asks the store to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    Done,
    Release,
    #[serde(rename_all = "camelCase")]
    Retry {
        attempt: u32,
        delay_ms: u64,
        next_attempt_at: u64,
        last_error: String,
        /// False for an outage retry: the store gives the claim's attempt back.
        attempt_counted: bool,
    },
    #[serde(rename_all = "camelCase")]
    Dead {
        reason: DeadReason,
        last_error: String,
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::Map;

    use super::*;

    pub(crate) fn policy(max_attempts: u32, base: u64, max: u64) -> Policy {
        Policy {
            max_attempts,
            base_delay_ms: base,
            max_delay_ms: max,
            lease_ms: 30_000,
            outage_budget_ms: DEFAULT_OUTAGE_BUDGET_MS,
        }
    }

    pub(crate) fn settings(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn failure(message: &str) -> Failure {
        Failure { name: Some("Error".into()), message: message.into(), ..Failure::default() }
    }

    fn failed(f: Failure) -> HandlerResult {
        HandlerResult::Failed(f)
    }

    #[test]
    fn absent_settings_take_the_defaults() {
        let p = Policy::from_source(&Map::new()).unwrap();
        assert_eq!(p, Policy::default());
        assert_eq!(
            p.to_json(),
            json!({"maxAttempts": 5, "baseDelayMs": 1000, "maxDelayMs": 300000, "leaseMs": 30000, "outageBudgetMs": 172_800_000u64, "renewEveryMs": 10000})
        );
    }

    #[test]
    fn a_base_delay_above_the_default_cap_raises_the_default_cap() {
        let p = Policy::from_source(&settings(json!({"baseDelayMs": 600000}))).unwrap();
        assert_eq!(p.max_delay_ms, 600_000);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for bad in [
            json!({"maxAttempts": 0}),
            json!({"maxAttempts": 1001}),
            json!({"maxAttempts": 2.5}),
            json!({"maxAttempts": "3"}),
            json!({"baseDelayMs": 0}),
            json!({"baseDelayMs": -1}),
            json!({"maxDelayMs": 604800001}),
            json!({"leaseMs": 0}),
            json!({"leaseMs": 86400001}),
            json!({"baseDelayMs": 500, "maxDelayMs": 100}),
        ] {
            let error = Policy::from_source(&settings(bad.clone())).unwrap_err();
            assert_eq!(error.code(), "INVALID_ARGUMENT", "{bad}");
        }
    }

    #[test]
    fn the_ceiling_doubles_per_attempt_and_stops_at_the_cap() {
        let p = policy(10, 100, 1_000);
        let ceilings: Vec<u64> = (1..=6).map(|a| p.backoff_ceiling_ms(a)).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1_000, 1_000]);
    }

    #[test]
    fn a_huge_attempt_number_saturates_instead_of_overflowing() {
        let p = policy(10, MAX_DELAY_LIMIT_MS, MAX_DELAY_LIMIT_MS);
        assert_eq!(p.backoff_ceiling_ms(u32::MAX), MAX_DELAY_LIMIT_MS);
        assert_eq!(p.backoff_ceiling_ms(64), MAX_DELAY_LIMIT_MS);
        assert!(p.backoff_delay_ms("op", u32::MAX) <= MAX_DELAY_LIMIT_MS);
    }

    #[test]
    fn the_delay_is_drawn_from_zero_to_the_ceiling() {
        let p = policy(10, 100, 1_000);
        for attempt in 1..=6 {
            for i in 0..500 {
                let id = format!("start-exchange:swap-{i}");
                assert!(p.backoff_delay_ms(&id, attempt) <= p.backoff_ceiling_ms(attempt));
            }
        }
    }

    #[test]
    fn the_delay_spreads_over_the_whole_range() {
        let p = policy(10, 1_000, 1_000);
        let delays: Vec<u64> = (0..1_000).map(|i| p.backoff_delay_ms(&format!("op-{i}"), 1)).collect();
        assert!(delays.iter().any(|d| *d < 100), "some waits fall in the lowest tenth");
        assert!(delays.iter().any(|d| *d > 900), "some waits fall in the highest tenth");
    }

    #[test]
    fn the_delay_is_pinned_by_operation_id_and_attempt() {
        // The same numbers are derived independently (node:crypto) in the JS tests.
        let p = policy(5, 1_000, 300_000);
        assert_eq!(p.backoff_delay_ms("start-exchange:swap-42", 1), 479);
        assert_eq!(p.backoff_delay_ms("start-exchange:swap-42", 2), 1_557);
        assert_eq!(p.backoff_delay_ms("start-exchange:swap-42", 3), 3_761);
        assert_eq!(p.backoff_delay_ms("send-payout:swap-42", 1), 521);
    }

    #[test]
    fn next_attempt_time_is_now_plus_the_delay() {
        let p = policy(5, 1_000, 300_000);
        let delay = p.backoff_delay_ms("op-1", 2);
        assert_eq!(p.next_attempt_at("op-1", 2, 1_700_000_000_000), 1_700_000_000_000 + delay);
        assert_eq!(p.next_attempt_at("op-1", 2, MAX_SAFE_INTEGER), MAX_SAFE_INTEGER);
    }

    #[test]
    fn a_lease_expires_when_now_reaches_its_expiry() {
        assert!(!lease_expired(1_000, 999));
        assert!(lease_expired(1_000, 1_000));
        assert!(lease_expired(1_000, 1_001));
        assert_eq!(Policy::default().lease_expires_at(1_000), 31_000);
    }

    #[test]
    fn due_pending_and_expired_claims_are_claimable_nothing_else() {
        assert!(claimable(Status::Pending, 100, None, 100).unwrap());
        assert!(!claimable(Status::Pending, 101, None, 100).unwrap());
        assert!(claimable(Status::Claimed, 0, Some(100), 100).unwrap());
        assert!(!claimable(Status::Claimed, 0, Some(101), 100).unwrap());
        assert!(!claimable(Status::Done, 0, None, 100).unwrap());
        assert!(!claimable(Status::Dead, 0, None, 100).unwrap());
    }

    #[test]
    fn a_claim_without_an_expiry_is_an_invalid_record() {
        let error = claimable(Status::Claimed, 0, None, 100).unwrap_err();
        assert_eq!(error.code(), "INVALID_RECORD");
    }

    #[test]
    fn claims_up_to_max_attempts_run() {
        let p = policy(3, 100, 1_000);
        for attempts in 1..=3 {
            assert_eq!(p.admit(attempts).unwrap(), Admission::Run);
        }
    }

    #[test]
    fn a_claim_past_max_attempts_is_dead_without_running() {
        let p = policy(3, 100, 1_000);
        match p.admit(4).unwrap() {
            Admission::Dead { reason, last_error } => {
                assert_eq!(reason, DeadReason::ClaimsExpired);
                assert!(last_error.starts_with("CLAIMS_EXPIRED: gave up after 3 attempts"));
            }
            other => panic!("expected dead, got {other:?}"),
        }
        assert_eq!(p.admit(0).unwrap_err().code(), "INVALID_ARGUMENT");
    }

    #[test]
    fn success_is_done() {
        assert_eq!(policy(3, 100, 1_000).classify("op", 3, None, 0, &HandlerResult::Succeeded), Verdict::Done);
    }

    #[test]
    fn an_unmarked_failure_is_retried_after_the_backoff() {
        let p = policy(3, 100, 1_000);
        let verdict = p.classify("op", 1, None, 5_000, &failed(failure("socket hang up")));
        let delay = p.backoff_delay_ms("op", 1);
        assert_eq!(
            verdict,
            Verdict::Retry {
                attempt: 1,
                delay_ms: delay,
                next_attempt_at: 5_000 + delay,
                last_error: "Error: socket hang up".into(),
                attempt_counted: true,
            }
        );
    }

    #[test]
    fn a_retryable_failure_on_the_last_attempt_is_dead() {
        let p = policy(3, 100, 1_000);
        let verdict = p.classify("op", 3, None, 0, &failed(failure("still down")));
        assert_eq!(verdict, Verdict::Dead { reason: DeadReason::MaxAttempts, last_error: "Error: still down".into() });
    }

    #[test]
    fn a_failure_marked_not_retryable_is_dead_at_once() {
        let f = Failure { retryable: Some(false), code: Some("REJECTED".into()), ..failure("amount below minimum") };
        let verdict = policy(3, 100, 1_000).classify("op", 1, None, 0, &failed(f));
        assert_eq!(
            verdict,
            Verdict::Dead { reason: DeadReason::NonRetryable, last_error: "REJECTED: amount below minimum".into() }
        );
    }

    #[test]
    fn the_retryable_flag_outranks_the_disposition() {
        let f = Failure { retryable: Some(true), disposition: Some(Disposition::Reject), ..failure("x") };
        assert_eq!(signal_of(&failed(f)), Signal::MarkedRetryable(true));
    }

    #[test]
    fn dispositions_classify_as_the_table_says() {
        let p = policy(3, 100, 1_000);
        let with = |d| failed(Failure { disposition: Some(d), ..failure("x") });
        assert!(matches!(p.classify("op", 1, None, 0, &with(Disposition::Retry)), Verdict::Retry { .. }));
        assert!(matches!(
            p.classify("op", 1, None, 0, &with(Disposition::Reject)),
            Verdict::Dead { reason: DeadReason::NonRetryable, .. }
        ));
        assert!(matches!(
            p.classify("op", 1, None, 0, &with(Disposition::Reconcile)),
            Verdict::Dead { reason: DeadReason::NonRetryable, .. }
        ));
    }

    #[test]
    fn a_failure_while_stopping_is_released_even_on_the_last_attempt() {
        let f = Failure { stopping: true, retryable: Some(false), ..failure("aborted") };
        assert_eq!(policy(3, 100, 1_000).classify("op", 3, None, 0, &failed(f)), Verdict::Release);
    }

    #[test]
    fn every_signal_has_exactly_one_row() {
        let signals = [
            Signal::Succeeded,
            Signal::FailedWhileStopping,
            Signal::MarkedRetryable(false),
            Signal::MarkedRetryable(true),
            Signal::Unavailable,
            Signal::Disposition(Disposition::Retry),
            Signal::Disposition(Disposition::Reject),
            Signal::Disposition(Disposition::Reconcile),
            Signal::Disposition(Disposition::Fatal),
            Signal::Unmarked,
        ];
        for signal in signals {
            assert_eq!(CLASSIFICATION.iter().filter(|(s, _, _)| *s == signal).count(), 1, "{signal:?}");
        }
        assert_eq!(CLASSIFICATION.len(), signals.len());
    }

    #[test]
    fn last_error_is_labelled_and_cut_on_a_character_boundary() {
        assert_eq!(Failure { code: Some("E1".into()), ..failure("boom") }.last_error(), "E1: boom");
        assert_eq!(Failure { name: None, ..failure("") }.last_error(), "Error");
        let long = Failure { name: Some("TypeError".into()), ..failure(&"é".repeat(5_000)) };
        let text = long.last_error();
        assert_eq!(text.chars().count(), MAX_ERROR_CHARS);
        assert!(text.starts_with("TypeError: éé"));
    }

    fn unavailable(message: &str) -> HandlerResult {
        failed(Failure { unavailable: true, ..failure(message) })
    }

    #[test]
    fn an_outage_retry_gives_its_attempt_back_past_max_attempts_within_the_budget() {
        let p = Policy { outage_budget_ms: 10_000, ..policy(3, 100, 1_000) };
        match p.classify("op", 7, Some(0), 9_999, &unavailable("ECONNREFUSED")) {
            Verdict::Retry { attempt_counted, delay_ms, .. } => {
                assert!(!attempt_counted);
                assert!(delay_ms <= 1_000);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_outage_past_the_budget_is_dead() {
        let p = Policy { outage_budget_ms: 10_000, ..policy(3, 100, 1_000) };
        assert_eq!(
            p.classify("op", 1, Some(0), 10_000, &unavailable("down")),
            Verdict::Dead { reason: DeadReason::OutageBudget, last_error: "Error: down".into() }
        );
    }

    #[test]
    fn outage_waits_grow_with_the_time_the_operation_has_existed_up_to_the_cap() {
        let p = policy(3, 100, 1_000);
        assert_eq!(p.outage_delay_ms("op", 0, 50), p.backoff_delay_ms("op", 1));
        assert_eq!(p.outage_delay_ms("op", 0, 350), p.backoff_delay_ms("op", 3));
        assert_eq!(p.outage_delay_ms("op", 0, 86_400_000), p.backoff_delay_ms("op", 5));
    }

    #[test]
    fn retryable_false_wins_over_unavailable() {
        let f = Failure { unavailable: true, retryable: Some(false), ..failure("gone") };
        assert_eq!(signal_of(&failed(f)), Signal::MarkedRetryable(false));
    }
}
