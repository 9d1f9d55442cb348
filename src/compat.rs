//! The seed's API, kept for callers written against it. Everything here is
//! a thin answer over the decision core; new code calls `decide`.

use crate::decide::{decide_valid, Outcome};
use crate::error::{Error, Result};
use crate::event::validate;
use crate::input::Source;
use crate::ruleset::RuleSet;

/// What the seed's `planDepositConfirmation` answered: `advance` or
/// `already-applied` for a DEPOSIT_CONFIRMED event under `deposit-swap`.
pub fn plan_deposit_confirmation(
    event: &dyn Source,
    workflow: Option<&dyn Source>,
) -> Result<&'static str> {
    // The seed's rules are deposit-swap v1: no jump from waiting to exchange.
    let rule_set = RuleSet::builtin_version("deposit-swap", Some(1))?;
    let event = validate(rule_set, event)?;
    if event.type_name(rule_set) != "DEPOSIT_CONFIRMED" {
        return Err(Error::InvalidEvent {
            field: "type".into(),
            reason: "must be \"DEPOSIT_CONFIRMED\"".into(),
            event_id: Some(event.event_id.clone()),
        });
    }
    let decision = decide_valid(rule_set, &event, None, workflow)?;
    Ok(match decision.outcome {
        Outcome::Applied => "advance",
        Outcome::AlreadyApplied => "already-applied",
        Outcome::Stale => "stale",
        Outcome::DuplicateDelivery => "duplicate-delivery",
    })
}
