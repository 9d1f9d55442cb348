//! Proving a rule set: the properties of every reachable state
//! ([`verify`]), and one search over delivery orders that drives the real
//! decider ([`search`]) for `reorder-safe` and `invariants`. Loading
//! (`ruleset`) knows nothing of it; `RuleSet::from_value` here is load and
//! prove, the only place the two meet, and a definition proven once in a
//! process is never proven again ([`proven`]).

mod check;
mod search;
pub mod verify;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::ruleset::{load_checked, RuleSet};

pub use check::Check;

impl RuleSet {
    /// Loads and verifies a definition. A definition that fails any property
    /// is refused: a worker never runs rules that were not proven.
    ///
    /// A definition proven once in this process is not proven again: its
    /// hash (of the canonical definition, so of what the rules say, not of
    /// how the text is spaced) is remembered, and loading it again, after a
    /// cache evicted its compiled form for example, only checks its structure.
    pub fn from_value(definition: &Value) -> Result<RuleSet> {
        let rule_set = load_checked(definition)?;
        if proven::contains(&rule_set.hash) {
            return Ok(rule_set);
        }
        let report = prove(&rule_set)?;
        refuse_failed(&report)?;
        Ok(rule_set)
    }

    /// Loads a definition with the record of an earlier proof of it
    /// ([`prove_record`], `idemflow rules prove`): when the record names this
    /// definition's hash and this proof engine, the structure is checked and
    /// nothing is proven again, so a worker starts in milliseconds. A record
    /// of another definition is refused (`INVALID_ARGUMENT`); one made by
    /// another engine is set aside and the definition proven in full.
    pub fn from_value_with_proof(definition: &Value, proof: &Value) -> Result<RuleSet> {
        let refuse = |reason: String| Error::InvalidArgument { reason };
        let Some(record) = proof.as_object() else {
            return Err(refuse("the proof record must be the object `idemflow rules prove` writes".into()));
        };
        let hash = record.get("ruleSet").and_then(|r| r.get("hash")).and_then(Value::as_str);
        let rule_set = load_checked(definition)?;
        match hash {
            None => {
                return Err(refuse("the proof record has no ruleSet.hash: write it with `idemflow rules prove`".into()))
            }
            Some(hash) if hash != rule_set.hash => {
                return Err(refuse(format!(
                    "the proof record is of {}, this definition is {}: prove this one (`idemflow rules prove`)",
                    if hash.len() <= 80 { hash.to_string() } else { crate::error::truncate(hash) },
                    rule_set.hash
                )))
            }
            Some(_) => {}
        }
        if record.get("engine").and_then(Value::as_str) == Some(PROOF_ENGINE)
            && record.get("ok") == Some(&Value::Bool(true))
        {
            proven::insert(&rule_set.hash);
            return Ok(rule_set);
        }
        RuleSet::from_value(definition)
    }

    pub fn from_json(text: &str) -> Result<RuleSet> {
        // The size is checked before the text is parsed.
        let value = crate::limits::parse_definition(text)?;
        RuleSet::from_value(&value)
    }
}

/// The property report for a definition; errs only when it is malformed.
/// It always runs the proof (the report is what was asked for), and a
/// definition it proves is remembered as proven.
pub fn verify_definition(definition: &Value) -> Result<verify::Report> {
    prove(&load_checked(definition)?)
}

/// What proves rule sets here: a proof record made by another engine (whose
/// search explored other histories) is not trusted, and the definition is
/// proven again.
pub const PROOF_ENGINE: &str = "idemflow-search/1";

/// Proves a definition and returns its proof record (for
/// [`RuleSet::from_value_with_proof`]): the engine, the rule set, what was
/// explored and every property's result. A definition that fails a property
/// is refused as by `from_value`, with the report.
pub fn prove_record(definition: &Value) -> Result<Value> {
    let rule_set = load_checked(definition)?;
    let report = prove(&rule_set)?;
    refuse_failed(&report)?;
    let search = report.properties.iter().find(|p| p.name == verify::REORDER_SAFE).and_then(|p| p.info.as_ref());
    Ok(serde_json::json!({
        "proof": 1,
        "engine": PROOF_ENGINE,
        "ok": true,
        "ruleSet": { "id": rule_set.id, "version": rule_set.version, "hash": rule_set.hash },
        "properties": report.properties.iter().map(|p| p.name).collect::<Vec<_>>(),
        "explored": search.map(|s| serde_json::json!({
            "says": s["bound"]["says"],
            "histories": s["histories"],
            "configurations": s["configurations"],
        })),
        "statesExplored": report.states_explored,
    }))
}

/// RULESET_INVALID naming the first property a report fails, with the report.
fn refuse_failed(report: &verify::Report) -> Result<()> {
    match report.properties.iter().find(|p| !p.ok) {
        None => Ok(()),
        Some(failed) => Err(Error::RuleSetInvalid {
            path: failed.name.to_string(),
            reason: format!("verification failed: {}", failed.description),
            report: Some(report.to_json()),
        }),
    }
}

/// Runs the proof, counted, and remembers the hash of a definition that passes.
fn prove(rule_set: &RuleSet) -> Result<verify::Report> {
    let report = verify::verify(rule_set)?;
    proven::ran();
    if report.properties.iter().all(|p| p.ok) {
        proven::insert(&rule_set.hash);
    }
    Ok(report)
}

/// The hashes of the definitions this process proved, so that none is
/// proven twice. Bounded: past `MAX` the oldest is forgotten (and would be
/// proven again), so hostile input cannot grow it without end.
pub mod proven {
    use std::collections::{HashSet, VecDeque};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    /// 4,096 hashes of 71 bytes: under 1 MiB with the set's overhead.
    pub const MAX: usize = 4096;

    struct Hashes {
        set: HashSet<String>,
        order: VecDeque<String>,
    }

    static HASHES: Mutex<Option<Hashes>> = Mutex::new(None);
    static PROOFS: AtomicU64 = AtomicU64::new(0);

    fn with<T>(f: impl FnOnce(&mut Hashes) -> T) -> T {
        // A panic while holding the lock cannot leave the set inconsistent.
        let mut guard = HASHES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(guard.get_or_insert_with(|| Hashes { set: HashSet::new(), order: VecDeque::new() }))
    }

    pub fn contains(hash: &str) -> bool {
        with(|h| h.set.contains(hash))
    }

    pub(super) fn insert(hash: &str) {
        with(|h| {
            if h.set.insert(hash.to_string()) {
                h.order.push_back(hash.to_string());
                while h.order.len() > MAX {
                    if let Some(oldest) = h.order.pop_front() {
                        h.set.remove(&oldest);
                    }
                }
            }
        });
    }

    pub(super) fn ran() {
        PROOFS.fetch_add(1, Ordering::Relaxed);
    }

    /// (proofs run, hashes remembered) since the process started.
    pub fn stats() -> (u64, usize) {
        (PROOFS.load(Ordering::Relaxed), with(|h| h.set.len()))
    }
}
