//! Rule sets: a workflow's statuses, the events it accepts and a decision
//! table that gives exactly one answer for every (event type, status) pair.
//! A definition is JSON data; loading checks its structure (with a path to
//! the bad part); `proof` proves its properties.

pub mod invariants;
mod load;
pub(crate) mod order;
pub mod table;

use std::sync::OnceLock;

use serde_json::Value;

use crate::error::{Disposition, Error, Result};
use crate::field::{FieldKind, FieldValue};

pub use load::NONE;

/// The state of a workflow as the decision table sees it: absent, or a status.
/// Index 0 is "no workflow yet"; index `i + 1` is `statuses[i]`.
pub type StateIndex = usize;

#[derive(Debug, Clone)]
pub struct Status {
    pub name: String,
    pub initial: bool,
    pub terminal: bool,
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub kind: FieldKind,
}

#[derive(Debug, Clone)]
pub struct EventType {
    pub name: String,
    /// Indices into `RuleSet::fields`, in declared order.
    pub fields: Vec<usize>,
    /// The canonical (RFC 8785) JSON of the fingerprint object
    /// `{type, workflowId, ...identity fields}`, as its constant parts, each
    /// followed by the value that comes after it.
    pub canonical: Vec<(String, Hole)>,
}

/// What follows a constant part of an event type's canonical JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hole {
    WorkflowId,
    /// A rule-set field index.
    Field(usize),
    End,
}

#[derive(Debug, Clone)]
pub enum Answer {
    Applied(Transition),
    AlreadyApplied,
    Stale,
    Fail { code: FailCode, disposition: Disposition },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailCode {
    UnknownWorkflow,
    InvalidTransition,
}

impl FailCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailCode::UnknownWorkflow => "UNKNOWN_WORKFLOW",
            FailCode::InvalidTransition => "INVALID_TRANSITION",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Transition {
    /// Status index (into `statuses`) the workflow moves to.
    pub to: usize,
    /// Field indices (into `RuleSet::fields`) copied from the event onto the workflow.
    pub record: Vec<usize>,
    /// Field indices removed from the workflow.
    pub clear: Vec<usize>,
    pub emit: Vec<Emit>,
    pub revision_step: u64,
    /// On a fact event: the fact's entry is not kept (one already there is
    /// removed), and its per-fact operations are written only where no
    /// operation of the id exists (a later word of the fact, which finds no
    /// entry, emits the same id again).
    pub untracked: bool,
}

#[derive(Debug, Clone)]
pub struct Emit {
    pub operation_type: String,
    pub id_template: Template,
    /// Field indices (into `RuleSet::fields`) copied from the event into the payload.
    pub payload: Vec<usize>,
}

/// An operation id template: `<name>:{workflowId}` for an operation a
/// workflow schedules at most once, `<name>:{revision}:{workflowId}` for a
/// recurring one (a renewal, one refund per reversed deposit), which a rule
/// marks with `"recurring": true`.
///
/// Rendered ids split back one way: the name has no colon and, for a
/// recurring template, the revision is decimal digits (no colon), so the
/// workflow id is the rest. Within one rule set a name has one form (see
/// `check_operation_names`), so the name says whether a revision follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// As written, e.g. `start-exchange:{workflowId}`.
    pub text: String,
    /// The part before the first colon, e.g. `start-exchange`.
    pub name: String,
    /// `<name>:{revision}:{workflowId}`: the id carries the workflow's
    /// revision after the transition that emits it.
    pub recurring: bool,
    /// `<name>:{<facts.key>}:{workflowId}`: the id carries the event's fact
    /// key, escaped (see [`escape_fact_key`]); one operation per fact.
    pub per_fact: bool,
}

/// A fact key inside an operation id: `%` as `%25` and `:` as `%3A`, so the
/// id has no colon between the name's and the workflow id's and splits back
/// one way.
pub fn escape_fact_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        match FACT_KEY_ESCAPES.iter().find(|(from, _)| *from == c) {
            Some((_, to)) => out.push_str(to),
            None => out.push(c),
        }
    }
    out
}

/// What [`escape_fact_key`] replaces, in the order a host applies it (`%` first).
pub const FACT_KEY_ESCAPES: [(char, &str); 2] = [('%', "%25"), (':', "%3A")];

impl Template {
    /// What the operation id is made of, in order: the name and a colon,
    /// then for a recurring template the workflow's new revision after the
    /// emitting transition (decimal digits: no colon) and a colon, then the
    /// workflow id.
    pub fn parts(&self) -> Vec<IdPart> {
        let mut parts = vec![IdPart::Constant(format!("{}:", self.name))];
        if self.per_fact {
            parts.push(IdPart::FactKey);
            parts.push(IdPart::Constant(":".into()));
        }
        if self.recurring {
            parts.push(IdPart::Revision);
            parts.push(IdPart::Constant(":".into()));
        }
        parts.push(IdPart::WorkflowId);
        parts
    }
}

/// A part of an operation id (see [`Template::parts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdPart {
    Constant(String),
    Revision,
    /// The event's fact key, escaped (see [`escape_fact_key`]).
    FactKey,
    WorkflowId,
}

/// One row of the decision table as written (or the `otherwise` row), or
/// one case of a row's decision list.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Where it was written: `rules[3]`, `rules[3].else`, `rules[3].cases[1]` or `otherwise`.
    pub origin: String,
    pub guard: Vec<usize>,
    pub answer: Answer,
    /// The conditions under which this rule answers (all of them; none:
    /// it always does), checked after the guard.
    pub when: Vec<Cond>,
    /// When `when` does not hold: the index in `RuleSet::rules` of the next
    /// rule of the chain (a rule in no cell of its own). The last rule of a
    /// chain has no `when` and no `otherwise`.
    pub otherwise: Option<usize>,
}

/// One condition of a `when`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// `[eventField, op, recordedField]`: field indices, the event's value
    /// and the recorded one as the rule reads it (an unrecorded one is 0 or "").
    Compare { event_field: usize, op: Comparison, workflow_field: usize },
    /// `{"other": [types]}`: an entry of the facts map other than the
    /// event's has one of these event types (indices) as its `event`.
    Other(Vec<usize>),
    /// `{"emitted": name}`: the event's fact entry lists this per-fact operation name.
    Emitted(String),
}

/// `facts`: several facts per workflow, kept in one map of the workflow's data.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The workflow data key of the map.
    pub name: String,
    /// The text field (index) whose value keys an event's fact.
    pub key: usize,
    /// Event type indices whose events are observations of a fact.
    pub events: Vec<usize>,
    /// Field indices kept per fact, in declared order.
    pub record: Vec<usize>,
}

/// What a rule's conditions read, for [`RuleSet::choose`]: the decider's
/// stored workflow and event, or a model's abstract state.
pub trait View<'a> {
    /// The recorded value of `field` as the rule reads it (a fact's own field
    /// from its entry, any other from the workflow): `None` when unrecorded.
    fn recorded(&self, field: usize) -> Result<Option<FieldValue<'a>>>;
    /// The event's value of `field`.
    fn event_value(&self, field: usize) -> FieldValue<'a>;
    /// Some entry of the facts map other than the event's has one of these event types.
    fn other_has_event(&self, types: &[usize]) -> bool;
    /// The event's fact entry lists this per-fact operation name.
    fn emitted(&self, name: &str) -> bool;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Greater,
    GreaterOrEqual,
    Equal,
    LessOrEqual,
    Less,
}

impl Comparison {
    pub const ALL: [(&'static str, Comparison); 5] = [
        (">", Comparison::Greater),
        (">=", Comparison::GreaterOrEqual),
        ("=", Comparison::Equal),
        ("<=", Comparison::LessOrEqual),
        ("<", Comparison::Less),
    ];

    pub fn as_str(self) -> &'static str {
        Comparison::ALL.iter().find(|(_, c)| *c == self).map_or("?", |(s, _)| s)
    }

    /// Whether `event op recorded` holds, given how the two compare.
    pub fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Comparison::Greater => ordering == Greater,
            Comparison::GreaterOrEqual => ordering != Less,
            Comparison::Equal => ordering == Equal,
            Comparison::LessOrEqual => ordering != Greater,
            Comparison::Less => ordering == Less,
        }
    }
}

#[derive(Debug)]
pub struct RuleSet {
    pub id: String,
    pub version: u64,
    pub description: Option<String>,
    pub hash: String,
    pub(crate) definition: Value,
    pub(crate) statuses: Vec<Status>,
    pub(crate) fields: Vec<Field>,
    pub(crate) events: Vec<EventType>,
    pub(crate) rules: Vec<Rule>,
    /// `cells[event][state]`: the rules that answer that pair. A verified rule
    /// set has exactly one in every cell.
    pub(crate) cells: Vec<Vec<Vec<usize>>>,
    /// What the producers promise about the order of events, when the rule
    /// set claims to be reorder-safe (its `order` section).
    pub(crate) order: Option<order::Order>,
    /// Several facts per workflow (the `facts` block).
    pub(crate) facts: Option<Facts>,
    /// What must never happen to a workflow (the `invariants` block), checked by the proof.
    pub(crate) invariants: Vec<invariants::Invariant>,
}

impl RuleSet {
    /// The current version of a built-in rule set.
    pub fn builtin(name: &str) -> Result<&'static RuleSet> {
        RuleSet::builtin_version(name, None)
    }

    /// A built-in rule set by name and version (`None`: the current one).
    /// Older versions stay loadable so stored receipts can be audited against
    /// the rules that wrote them.
    pub fn builtin_version(name: &str, version: Option<u64>) -> Result<&'static RuleSet> {
        let Some(versions) = BUILTINS.iter().find(|b| b.name == name) else {
            return Err(Error::InvalidArgument {
                reason: format!("no built-in rule set named {name:?} (there are: {})", BUILTIN_NAMES.join(", ")),
            });
        };
        let builtin = match version {
            None => versions.versions.last(),
            Some(v) => versions.versions.iter().find(|b| b.version == v),
        }
        .ok_or_else(|| Error::InvalidArgument {
            reason: format!(
                "built-in rule set {name} has no version {} (there are: {})",
                version.unwrap_or_default(),
                versions.versions.iter().map(|b| b.version.to_string()).collect::<Vec<_>>().join(", ")
            ),
        })?;
        if let Some(loaded) = builtin.cell.get() {
            return Ok(loaded);
        }
        let loaded = builtin.load(name)?;
        Ok(builtin.cell.get_or_init(|| loaded))
    }

    /// The definition as loaded (the JSON its hash is taken over).
    pub fn definition(&self) -> &Value {
        &self.definition
    }

    /// Read-only views: the tables are filled and cross-checked by loading,
    /// so they are not open to change from outside the crate.
    pub fn statuses(&self) -> &[Status] {
        &self.statuses
    }

    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    pub fn events(&self) -> &[EventType] {
        &self.events
    }

    pub fn status_index(&self, name: &str) -> Option<usize> {
        self.statuses.iter().position(|s| s.name == name)
    }

    pub fn event_index(&self, name: &str) -> Option<usize> {
        self.events.iter().position(|e| e.name == name)
    }

    pub fn state_name(&self, state: StateIndex) -> &str {
        if state == 0 {
            NONE
        } else {
            &self.statuses[state - 1].name
        }
    }

    /// Distinct operation-id templates, in the order rules first emit them:
    /// bit `i` of an emitted set stands for `templates()[i]`.
    pub fn templates(&self) -> Vec<&str> {
        let mut templates: Vec<&str> = Vec::new();
        for rule in &self.rules {
            if let Answer::Applied(t) = &rule.answer {
                for emit in &t.emit {
                    if !templates.contains(&emit.id_template.text.as_str()) {
                        templates.push(&emit.id_template.text);
                    }
                }
            }
        }
        templates
    }

    pub fn state_count(&self) -> usize {
        self.statuses.len() + 1
    }

    /// The rule that answers `event` in `state`. A verified rule set has exactly
    /// one; an unverified one (see `load_unverified`) may not, and is refused here.
    pub fn rule_for(&self, event: usize, state: StateIndex) -> Result<&Rule> {
        self.rule_index_for(event, state).map(|r| &self.rules[r])
    }

    /// The rules a cell's rule may answer with: itself and the rest of its chain.
    pub fn answers_of(&self, rule: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(rule), move |r| self.rules[*r].otherwise)
    }

    /// The `facts` block, when the rule set keeps several facts per workflow.
    pub fn facts(&self) -> Option<&Facts> {
        self.facts.as_ref()
    }

    /// Whether events of this type are observations of a fact.
    pub fn is_fact_event(&self, event: usize) -> bool {
        self.facts.as_ref().is_some_and(|f| f.events.contains(&event))
    }

    /// The rule of `first`'s chain that answers (the guard already held):
    /// the first whose conditions all hold. The one evaluation of a `when`:
    /// the decider and the models call it alike.
    pub fn choose<'a>(&self, first: usize, view: &impl View<'a>) -> Result<usize> {
        let mut at = first;
        loop {
            let rule = &self.rules[at];
            let mut holds = true;
            for condition in &rule.when {
                if !self.holds(condition, view)? {
                    holds = false;
                    break;
                }
            }
            match rule.otherwise {
                // The loader makes a chain point forward only: the walk ends.
                Some(next) if !holds && next > at && next < self.rules.len() => at = next,
                _ => return Ok(at),
            }
        }
    }

    fn holds<'a>(&self, condition: &Cond, view: &impl View<'a>) -> Result<bool> {
        Ok(match condition {
            Cond::Compare { event_field, op, workflow_field } => {
                // An unrecorded count compares as 0, an unrecorded amount or text as "".
                let zero = if self.fields[*workflow_field].kind == FieldKind::Count {
                    FieldValue::Count(0)
                } else {
                    FieldValue::Text("")
                };
                let recorded = view.recorded(*workflow_field)?.unwrap_or(zero);
                op.holds(crate::field::compare(view.event_value(*event_field), recorded))
            }
            Cond::Other(types) => view.other_has_event(types),
            Cond::Emitted(name) => view.emitted(name),
        })
    }

    /// The index of `rule_for`'s rule.
    pub fn rule_index_for(&self, event: usize, state: StateIndex) -> Result<usize> {
        match self.cells.get(event).and_then(|row| row.get(state)).map(Vec::as_slice) {
            Some([only]) => Ok(*only),
            other => Err(Error::InvalidArgument {
                reason: format!(
                    "rule set {} has {} answers for {} in {}; load it with RuleSet::from_value, which verifies it",
                    self.id,
                    other.map_or(0, <[usize]>::len),
                    self.events.get(event).map_or("?", |e| e.name.as_str()),
                    if state < self.state_count() { self.state_name(state) } else { "?" },
                ),
            }),
        }
    }
}

/// Checks a definition's structure only; `proof::verify` then reports its
/// properties. Workers load rule sets with `RuleSet::from_value` (`proof`).
pub fn load_unverified(definition: &Value) -> Result<RuleSet> {
    load_checked(definition)
}

/// The structure (`load::load`) and the one check that needs every rule at
/// once: operation names.
pub(crate) fn load_checked(definition: &Value) -> Result<RuleSet> {
    let rule_set = load::load(definition)?;
    check_operation_names(&rule_set)?;
    Ok(rule_set)
}

/// Within one rule set an operation name is either once-only or recurring,
/// never both: `charge:{workflowId}` for workflow `7:w` renders the same id as
/// `charge:{revision}:{workflowId}` at revision 7 for workflow `w`. With one
/// form per name, a name tells how the rest of an id splits, so ids stay
/// injective across workflows.
fn check_operation_names(rule_set: &RuleSet) -> Result<()> {
    let mut forms: Vec<(&str, &Template)> = Vec::new();
    for rule in &rule_set.rules {
        let Answer::Applied(transition) = &rule.answer else { continue };
        for (j, emit) in transition.emit.iter().enumerate() {
            let template = &emit.id_template;
            match forms.iter().find(|(_, t)| t.name == template.name) {
                Some((origin, first))
                    if (first.recurring, first.per_fact) != (template.recurring, template.per_fact) =>
                {
                    return Err(Error::RuleSetInvalid {
                        path: format!("$.{}.then.emit[{j}].id", rule.origin),
                        reason: format!(
                            "{:?} uses the name {:?}, which {origin} emits as {:?}: one name, one form (once, recurring or per fact), or two workflows can share an id",
                            template.text, template.name, first.text
                        ),
                        report: None,
                    });
                }
                Some(_) => {}
                None => forms.push((&rule.origin, template)),
            }
        }
    }
    Ok(())
}

pub const BUILTIN_NAMES: &[&str] = &["deposit-swap", "order-shipment", "subscription"];
/// The current `deposit-swap` (version 4): reorder-safe over numbered
/// observations (`sequence`), so a reorganisation's re-inclusion is exchanged
/// once; a partial deposit never moves the swap and is never kept in the
/// bounded deposits map (its review is written if absent), so dust cannot
/// fill the map.
pub const BUILTIN_DEPOSIT_SWAP: &str = include_str!("deposit-swap.v4.json");
/// The third `deposit-swap`, kept for audit of receipts it wrote: it kept
/// every deposit, partial ones included, so 64 of them filled its map.
pub const BUILTIN_DEPOSIT_SWAP_V3: &str = include_str!("deposit-swap.v3.json");
/// The second `deposit-swap`, kept for audit of receipts it wrote: reorder-safe
/// for one observation of each kind, so it loses a re-included deposit.
pub const BUILTIN_DEPOSIT_SWAP_V2: &str = include_str!("deposit-swap.v2.json");
/// The first `deposit-swap`, kept for audit of receipts it wrote. It assumes
/// per-workflow in-order delivery.
pub const BUILTIN_DEPOSIT_SWAP_V1: &str = include_str!("deposit-swap.v1.json");
pub const BUILTIN_ORDER_SHIPMENT: &str = include_str!("order-shipment.v2.json");
pub const BUILTIN_ORDER_SHIPMENT_V1: &str = include_str!("order-shipment.v1.json");
/// Renewals: a recurring operation (`charge-renewal:{revision}:{workflowId}`),
/// periods as counts (version 2, current).
pub const BUILTIN_SUBSCRIPTION: &str = include_str!("subscription.v2.json");
/// The first `subscription`, periods as text, kept for audit of receipts it wrote.
pub const BUILTIN_SUBSCRIPTION_V1: &str = include_str!("subscription.v1.json");

struct Builtin {
    version: u64,
    text: &'static str,
    /// The definition hash whose properties `cargo test` proved: the test
    /// `builtin_proofs` runs the full verification of `text` and fails until
    /// this says its hash. A worker loads a built-in without verifying it
    /// again, but only when its hash is this one.
    proven_hash: &'static str,
    cell: OnceLock<RuleSet>,
}

impl Builtin {
    /// The structure is checked as for any definition; the properties are
    /// not proven again (that is what makes a built-in quick to start), so
    /// a definition other than the proven one is refused.
    fn load(&self, name: &str) -> Result<RuleSet> {
        let rule_set = load_checked(&crate::limits::parse_definition(self.text)?)?;
        if rule_set.hash != self.proven_hash {
            return Err(Error::RuleSetInvalid {
                path: "$".into(),
                reason: format!(
                    "built-in rule set {name} v{} has hash {}, not the proven {}: run cargo test, which proves it and says the hash to record",
                    self.version, rule_set.hash, self.proven_hash
                ),
                report: None,
            });
        }
        Ok(rule_set)
    }
}

struct BuiltinVersions {
    name: &'static str,
    /// Oldest first; the last is the current version.
    versions: &'static [Builtin],
}

static BUILTINS: [BuiltinVersions; 3] = [
    BuiltinVersions { name: "deposit-swap", versions: &DEPOSIT_SWAP_VERSIONS },
    BuiltinVersions { name: "order-shipment", versions: &ORDER_SHIPMENT_VERSIONS },
    BuiltinVersions { name: "subscription", versions: &SUBSCRIPTION_VERSIONS },
];

static DEPOSIT_SWAP_VERSIONS: [Builtin; 4] = [
    Builtin {
        version: 1,
        text: BUILTIN_DEPOSIT_SWAP_V1,
        proven_hash: "sha256:0a586df9ceaa903be56dca1d1e892be725d0a675262020f02d3b0abc90ef664f",
        cell: OnceLock::new(),
    },
    Builtin {
        version: 2,
        text: BUILTIN_DEPOSIT_SWAP_V2,
        proven_hash: "sha256:5eeb4135240c8f3407ce347771b275987e9e8e1753d02197e50ae31ed1bfb624",
        cell: OnceLock::new(),
    },
    Builtin {
        version: 3,
        text: BUILTIN_DEPOSIT_SWAP_V3,
        proven_hash: "sha256:4ed1301d29aec15995b3350bddafd4efc5a4abf29c3017b7a1cc7bded11e3ddf",
        cell: OnceLock::new(),
    },
    Builtin {
        version: 4,
        text: BUILTIN_DEPOSIT_SWAP,
        proven_hash: "sha256:8fb8b482cd9c5b31899f4d74b344d60d75eef01b8096da9c7a0874537e30b2aa",
        cell: OnceLock::new(),
    },
];

static ORDER_SHIPMENT_VERSIONS: [Builtin; 2] = [
    Builtin {
        version: 1,
        text: BUILTIN_ORDER_SHIPMENT_V1,
        proven_hash: "sha256:aa3f81f97c957ad6dd8c5d44942b8220d84891ad08b3a1a1e3f2ea5eea6e2955",
        cell: OnceLock::new(),
    },
    Builtin {
        version: 2,
        text: BUILTIN_ORDER_SHIPMENT,
        proven_hash: "sha256:ce47e0b168bd926e68ae7ad04ec085ffd61ab4ddb2a1ed8b830d2e51b5cd7785",
        cell: OnceLock::new(),
    },
];

static SUBSCRIPTION_VERSIONS: [Builtin; 2] = [
    Builtin {
        version: 1,
        text: BUILTIN_SUBSCRIPTION_V1,
        proven_hash: "sha256:befe7a6db2c7ae1e2605c8fbcdcb2b9ee7a1bcd94dc80f09c770f81daa39e4fb",
        cell: OnceLock::new(),
    },
    Builtin {
        version: 2,
        text: BUILTIN_SUBSCRIPTION,
        proven_hash: "sha256:4803f6db5a600ab3c9089024cf3c4c4afc52c7db97457ca1ad24baddcf111f92",
        cell: OnceLock::new(),
    },
];

#[cfg(test)]
mod builtin_proofs;
