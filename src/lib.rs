//! idemflow: the rule core shared by Node workers that consume at-least-once
//! deliveries. It validates events, fingerprints what they mean, and decides
//! (duplicate-delivery, already-applied, stale, applied) with the exact write
//! set a host commits in one transaction. It performs no I/O.
//!
//! This crate is pure Rust; `binding` (wasm32 only) is the one module that
//! talks to JavaScript.

pub mod answer;
pub mod compat;
pub mod decide;
pub mod error;
pub mod event;
pub mod field;
pub mod fingerprint;
pub mod input;
pub mod jcs;
pub mod json;
pub mod limits;
pub mod operation_id;
pub mod outbox;
pub mod outcome;
pub mod packed;
pub mod proof;
pub mod ruleset;
pub mod sha256;
pub mod sort;
pub mod stored;
pub mod writes;

#[cfg(target_arch = "wasm32")]
pub mod binding;

pub use decide::{decide, Decision};
pub use error::{Disposition, Error, Result};
pub use outcome::Outcome;
pub use ruleset::RuleSet;
