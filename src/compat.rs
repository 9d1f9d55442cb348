//! The seed's API, kept for callers written against it. Everything here is
//! a thin answer over the decision core; new code calls `decide`.

use serde_json::{Map, Value};

use crate::decide::{decide_valid, Work};
use crate::error::{Error, Result};
use crate::event;
use crate::fingerprint;
use crate::outcome::Outcome;
use crate::packed::{self, Item, Layout, Packer};
use crate::ruleset::RuleSet;
use crate::stored::record_arg;

/// The rule set the seed's answers come from: deposit-swap v1 (no jump from
/// waiting to exchange). A host lays the event and workflow out for it.
pub fn plan_rule_set() -> Result<&'static RuleSet> {
    RuleSet::builtin_version("deposit-swap", Some(1))
}

/// What the seed's `planDepositConfirmation` answered: `advance` or
/// `already-applied` for a DEPOSIT_CONFIRMED event, from an item laid out
/// for [`plan_rule_set`] (a receipt is not read).
pub fn plan_item(item: &Item, work: &mut Work) -> Result<&'static str> {
    let rule_set = plan_rule_set()?;
    let layout = Layout::new(rule_set);
    event::check_arg(item)?;
    let has_workflow = record_arg(item, 2, "workflow")?;
    let event = event::check(rule_set, item, layout)?;
    if event.type_name(rule_set) != "DEPOSIT_CONFIRMED" {
        return Err(Error::InvalidEvent {
            field: "type".into(),
            reason: "must be \"DEPOSIT_CONFIRMED\"".into(),
            event_id: Some(event.event_id.to_string()),
        });
    }
    let mut fingerprint = [0u8; fingerprint::LEN];
    let decided =
        decide_valid(rule_set, item, layout, &event, false, has_workflow, &mut fingerprint, &mut work.canonical)?;
    Ok(match decided.outcome {
        Outcome::Applied => "advance",
        Outcome::AlreadyApplied => "already-applied",
        Outcome::Stale => "stale",
        Outcome::DuplicateDelivery => "duplicate-delivery",
    })
}

/// `plan_item` over JSON values (native callers and tests).
pub fn plan_deposit_confirmation(
    event: &Map<String, Value>,
    workflow: Option<&Map<String, Value>>,
) -> Result<&'static str> {
    let rule_set = plan_rule_set()?;
    let layout = Layout::new(rule_set);
    let mut packer = Packer::default();
    packer.item(rule_set, event, None, workflow);
    let packed = packer.packed();
    let mut work = Work::default();
    packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut work.spans);
    let spans = std::mem::take(&mut work.spans);
    plan_item(&Item::of(&packed, &spans, layout.entries(), 0), &mut work)
}
