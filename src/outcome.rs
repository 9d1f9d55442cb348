//! What a delivery amounts to ([`Outcome`]) and what a duplicate answers of
//! the first delivery of its event id ([`Original`]): the decider's words,
//! which the stored records (`crate::stored`) are read into and its answers
//! (`crate::answer`) carry.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The event moved the workflow: write the receipt, the update and the operations.
    Applied,
    /// The workflow already reflects this fact (a new event id for it): write the receipt only.
    AlreadyApplied,
    /// A valid event that no longer changes anything (a timer that lost the race): receipt only.
    Stale,
    /// This event id was recorded before with the same meaning: write nothing.
    DuplicateDelivery,
}

/// Outcomes by the code the decider answers with.
pub const OUTCOMES: [Outcome; 4] =
    [Outcome::Applied, Outcome::AlreadyApplied, Outcome::Stale, Outcome::DuplicateDelivery];

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::AlreadyApplied => "already-applied",
            Outcome::Stale => "stale",
            Outcome::DuplicateDelivery => "duplicate-delivery",
        }
    }

    /// The outcome's number in the host's answer regions (`crate::answer`).
    pub(crate) fn code(self) -> i32 {
        OUTCOMES.iter().position(|o| *o == self).unwrap_or(0) as i32
    }
}

/// A duplicate's answer: what the first delivery of its event id produced,
/// read back from the stored receipt. `decided_at` is the receipt's
/// `recordedAt` (integer ms), `None` when the host passed none.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Original {
    pub outcome: Outcome,
    pub operation_ids: Vec<String>,
    pub status: Option<String>,
    pub revision: Option<u64>,
    pub decided_at: Option<u64>,
}
