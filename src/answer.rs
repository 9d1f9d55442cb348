//! The decider's answers in the host's regions: per item a few `i32`s and
//! numbers, and a duplicate's original or an error as JSON text; and the
//! description of those regions the host reads once.

use crate::decide::Decided;
use crate::error::Result;
use crate::fingerprint;
use crate::json::text::Writer;
use crate::outcome::{Outcome, OUTCOMES};
use crate::writes;

/// Per item, the answer's `i32`s: whether it was decided, then what.
pub const ANSWER_INTS: usize = 7;
pub const DECIDED: i32 = 0;
pub const FAILED: i32 = 1;
/// Per item, the answer's numbers: the revision read and the one written.
pub const ANSWER_NUMBERS: usize = 2;

/// One item's answer in the host's regions: `ints` (`ANSWER_INTS`), `numbers`
/// (`ANSWER_NUMBERS`); a duplicate's original or an error goes into `extra`
/// as JSON text, at the offset and length the ints say.
pub fn write_answer(answer: &Result<Decided>, ints: &mut [i32], numbers: &mut [f64], extra: &mut String) {
    let start = extra.len();
    match answer {
        Ok(decided) => {
            if let Some(original) = &decided.original {
                extra.push_str(&serde_json::to_string(original).unwrap_or_default());
            }
            ints.copy_from_slice(&[
                DECIDED,
                decided.outcome.code(),
                decided.rule as i32,
                decided.state as i32,
                decided.event_type as i32,
                start as i32,
                (extra.len() - start) as i32,
            ]);
            numbers[0] = decided.expect_revision as f64;
            numbers[1] = decided.revision as f64;
        }
        Err(error) => {
            extra.push_str(&error.to_json().to_string());
            ints.copy_from_slice(&[FAILED, -1, -1, -1, -1, start as i32, (extra.len() - start) as i32]);
            numbers[0] = 0.0;
            numbers[1] = 0.0;
        }
    }
}

/// The answer regions as the layout describes them to a host.
pub fn describe_answers(w: &mut Writer) {
    w.open_object();
    w.key("ints").int(ANSWER_INTS as i64).key("numbers").int(ANSWER_NUMBERS as i64);
    w.key("fingerprintBytes").int(fingerprint::LEN as i64);
    w.key("decided").int(DECIDED as i64).key("failed").int(FAILED as i64);
    w.key("outcomes").strings(OUTCOMES.iter().map(|o| o.as_str()));
    w.key("duplicate").int(Outcome::DuplicateDelivery.code() as i64).key("applied").int(Outcome::Applied.code() as i64);
    w.key("from").open_object();
    for (name, kind) in [
        ("CONSTANT", writes::CONSTANT),
        ("REVISION", writes::REVISION),
        ("EVENT_FIELD", writes::EVENT_FIELD),
        ("REMOVED", writes::REMOVED),
        ("WORKFLOW_ID", writes::WORKFLOW_ID),
        ("FACT_KEY", writes::FACT_KEY),
        ("FACTS", writes::FACTS),
    ] {
        w.key(name).int(kind as i64);
    }
    w.close_object();
    // How a fact key is escaped in a per-fact operation id (FACT_KEY): `[from, to]`, in order.
    w.key("factKeyEscapes").open_array();
    for (from, to) in crate::ruleset::FACT_KEY_ESCAPES {
        w.open_array().string(&from.to_string()).string(to).close_array();
    }
    w.close_array();
    // How long an operation id may be, and what replaces a fact key that would make it longer (crate::operation_id).
    w.key("operationIdMaxBytes").int(crate::operation_id::MAX_OPERATION_ID_BYTES as i64);
    w.key("hashedFactKeyPrefix").string(crate::operation_id::HASHED_FACT_KEY_PREFIX);
    w.close_object();
}
