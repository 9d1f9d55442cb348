//! Proves a rule set's properties by exploring every state a workflow can
//! reach. A state is abstract but exact for what the properties need: the
//! status, which once-only operation ids have been emitted (a recurring
//! one's id carries the revision: see `operation-ids-unique` below), and
//! which fields are recorded. Guards are assumed to pass (a failing guard
//! changes nothing), and a `when` may go either way: both answers are explored.

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::limits::MAX_STATES_EXPLORED;
use crate::ruleset::{Answer, RuleSet, StateIndex, NONE};

#[derive(Debug, Clone)]
pub struct Property {
    pub name: &'static str,
    pub description: &'static str,
    pub ok: bool,
    pub counterexample: Option<Value>,
    /// More counterexamples, when the property reports several (reorder-safe).
    pub more_counterexamples: Vec<Value>,
    /// What the check covered (bounds, declared races, work done, or why it was skipped).
    pub info: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub id: String,
    pub version: u64,
    pub hash: String,
    pub states_explored: usize,
    pub properties: Vec<Property>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.properties.iter().all(|p| p.ok)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "ruleSet": { "id": self.id, "version": self.version, "hash": self.hash },
            "statesExplored": self.states_explored,
            "properties": self.properties.iter().map(|p| {
                let mut property = json!({
                    "name": p.name,
                    "description": p.description,
                    "ok": p.ok,
                    "counterexample": p.counterexample,
                });
                if !p.more_counterexamples.is_empty() {
                    property["moreCounterexamples"] = json!(p.more_counterexamples);
                }
                if let Some(info) = &p.info {
                    property["checked"] = info.clone();
                }
                property
            }).collect::<Vec<_>>(),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct State {
    at: StateIndex,
    emitted: u64,
    recorded: u64,
}

#[derive(Debug, Clone)]
struct Step {
    event: usize,
    rule: usize,
    from: StateIndex,
    to: StateIndex,
}

struct Explorer<'a> {
    rule_set: &'a RuleSet,
    /// Distinct operation-id templates; a once-only template makes one id
    /// per workflow, so the state remembers whether it was emitted.
    templates: Vec<&'a str>,
    states: Vec<State>,
    parents: Vec<Option<(usize, Step)>>,
    seen: HashMap<State, usize>,
}

impl<'a> Explorer<'a> {
    fn path(&self, mut node: usize, last: Option<&Step>) -> Value {
        let mut steps = Vec::new();
        if let Some(step) = last {
            steps.push(self.step_json(step));
        }
        while let Some((parent, step)) = &self.parents[node] {
            steps.push(self.step_json(step));
            node = *parent;
        }
        steps.reverse();
        json!({ "start": self.rule_set.state_name(self.states[node].at), "steps": steps })
    }

    fn step_json(&self, step: &Step) -> Value {
        let rs = self.rule_set;
        json!({
            "event": rs.events[step.event].name,
            "from": rs.state_name(step.from),
            "to": rs.state_name(step.to),
            "rule": rs.rules[step.rule].origin,
        })
    }

    fn visit(&mut self, state: State, parent: Option<(usize, Step)>) -> Result<()> {
        if self.seen.contains_key(&state) {
            return Ok(());
        }
        if self.states.len() >= MAX_STATES_EXPLORED {
            return Err(Error::RuleSetInvalid {
                path: "$".into(),
                reason: format!(
                    "limit maxStatesExplored: at most {MAX_STATES_EXPLORED} states, this definition reaches more; split the rule set"
                ),
                report: None,
            });
        }
        self.seen.insert(state, self.states.len());
        self.states.push(state);
        self.parents.push(parent);
        Ok(())
    }
}

struct Failure {
    name: &'static str,
    counterexample: Value,
}

pub fn verify(rule_set: &RuleSet) -> Result<Report> {
    let templates = rule_set.templates();
    let mut explorer = Explorer { rule_set, templates, states: Vec::new(), parents: Vec::new(), seen: HashMap::new() };
    let mut failures: Vec<Failure> = Vec::new();
    // A counterexample is built once, for the first failure of a property:
    // building a path walks the parents, so it must not run at every step.
    let fail = |failures: &mut Vec<Failure>, name: &'static str, counterexample: &dyn Fn() -> Value| {
        if !failures.iter().any(|f| f.name == name) {
            failures.push(Failure { name, counterexample: counterexample() });
        }
    };

    explorer.visit(State { at: 0, emitted: 0, recorded: 0 }, None)?;
    for (i, status) in rule_set.statuses.iter().enumerate() {
        if status.initial {
            explorer.visit(State { at: i + 1, emitted: 0, recorded: 0 }, None)?;
        }
    }

    let mut queue: VecDeque<usize> = (0..explorer.states.len()).collect();
    while let Some(node) = queue.pop_front() {
        let state = explorer.states[node];
        for event in 0..rule_set.events.len() {
            // A rule with a `when` may answer with itself or its `else`: both are explored.
            let answers = rule_set.cells[event][state.at].iter().flat_map(|r| rule_set.answers_of(*r));
            for rule_index in answers {
                let rule = &rule_set.rules[rule_index];
                if state.at != 0 {
                    // On a fact event a guard on a fact's own field holds with no entry.
                    let from_entry: &[usize] = match rule_set.facts() {
                        Some(facts) if facts.events.contains(&event) => &facts.record,
                        _ => &[],
                    };
                    if let Some(field) =
                        rule.guard.iter().find(|f| state.recorded & (1 << **f) == 0 && !from_entry.contains(f))
                    {
                        let step = Step { event, rule: rule_index, from: state.at, to: state.at };
                        fail(&mut failures, "guards-read-recorded-fields", &|| {
                            let mut example = explorer.path(node, Some(&step));
                            let name = &rule_set.fields[*field].name;
                            example["field"] = json!(name);
                            example["status"] = json!(rule_set.state_name(state.at));
                            example["rule"] = json!(rule.origin);
                            // Say what to change, not only where it breaks.
                            let guard_rule = &rule.origin;
                            let status = rule_set.state_name(state.at);
                            example["fix"] = json!(match &explorer.parents[node] {
                                Some((_, entered)) => format!(
                                    "{status:?} is entered by {} ({}) without {name:?} recorded: record {name:?} in that rule, or take {name:?} out of the guard of {guard_rule}",
                                    rule_set.rules[entered.rule].origin,
                                    rule_set.events[entered.event].name,
                                ),
                                None => format!(
                                    "{status:?} is a start status, where nothing is recorded: take {name:?} out of the guard of {guard_rule} for {status:?}"
                                ),
                            });
                            example
                        });
                    }
                }
                let Answer::Applied(transition) = &rule.answer else { continue };
                let to = transition.to + 1;
                let step = Step { event, rule: rule_index, from: state.at, to };
                if state.at != 0 && rule_set.statuses[state.at - 1].terminal {
                    fail(&mut failures, "terminal-statuses-final", &|| explorer.path(node, Some(&step)));
                }
                if transition.revision_step == 0 {
                    fail(&mut failures, "revision-increases", &|| explorer.path(node, Some(&step)));
                }
                let mut emitted = state.emitted;
                for (j, emit) in transition.emit.iter().enumerate() {
                    let template = &emit.id_template;
                    if template.recurring {
                        // `<name>:{revision}:{workflowId}` renders the workflow's
                        // revision after the emitting transition. Let transitions
                        // t1 before t2 on one path both emit it, with new revisions
                        // r1 and r2. Then r2 = r1 + the steps of every transition
                        // after t1 up to and including t2; steps are never negative
                        // and t2's own step is at least 1 (checked here), so
                        // r2 > r1 and the two ids differ. Nothing else on the path
                        // matters, so recurring templates need no bit in `emitted`.
                        // What remains: a step of 0 (t2 would repeat t1's revision)
                        // and the same template twice in one transition (one
                        // revision, one id).
                        let reason = if transition.revision_step == 0 {
                            Some("a recurring operation emitted by a transition with revisionStep 0 repeats the revision, and so the id, of the last applied transition")
                        } else if transition.emit[..j].iter().any(|e| e.id_template == *template) {
                            Some("a recurring operation emitted twice by one transition: one revision, one id")
                        } else {
                            None
                        };
                        if let Some(reason) = reason {
                            fail(&mut failures, "operation-ids-unique", &|| {
                                let mut example = explorer.path(node, Some(&step));
                                example["operationId"] = json!(template.text);
                                example["reason"] = json!(reason);
                                example
                            });
                        }
                        continue;
                    }
                    if template.per_fact {
                        // One id per fact: whether a fact's entry lists it is
                        // in no abstract state; the concrete explorer
                        // (`proof::search`) checks these ids along every order.
                        continue;
                    }
                    let bit = 1u64 << explorer.templates.iter().position(|t| *t == template.text).unwrap_or(0);
                    if emitted & bit != 0 {
                        fail(&mut failures, "operation-ids-unique", &|| {
                            let mut example = explorer.path(node, Some(&step));
                            example["operationId"] = json!(template.text);
                            example
                        });
                    }
                    emitted |= bit;
                }
                let mut recorded = state.recorded;
                for f in &transition.record {
                    recorded |= 1 << f;
                }
                for f in &transition.clear {
                    recorded &= !(1 << f);
                }
                let next = State { at: to, emitted, recorded };
                if !explorer.seen.contains_key(&next) {
                    explorer.visit(next, Some((node, step)))?;
                    queue.push_back(explorer.states.len() - 1);
                }
            }
        }
    }

    // Exactly one answer in every cell, reachable or not.
    'cells: for (event, row) in rule_set.cells.iter().enumerate() {
        for (at, cell) in row.iter().enumerate() {
            if cell.len() != 1 {
                fail(&mut failures, "one-answer-per-pair", &|| {
                    let mut example = json!({
                        "event": rule_set.events[event].name,
                        "status": rule_set.state_name(at),
                        "rules": cell.iter().map(|r| rule_set.rules[*r].origin.clone()).collect::<Vec<_>>(),
                    });
                    if let Some(node) = explorer.states.iter().position(|s| s.at == at) {
                        example["path"] = explorer.path(node, None);
                    }
                    example
                });
                break 'cells;
            }
        }
    }
    let unreachable: Vec<&str> = rule_set
        .statuses
        .iter()
        .enumerate()
        .filter(|(i, _)| !explorer.states.iter().any(|s| s.at == i + 1))
        .map(|(_, s)| s.name.as_str())
        .collect();
    if !unreachable.is_empty() {
        fail(
            &mut failures,
            "every-status-reachable",
            &|| json!({ "unreachable": unreachable, "from": initial_names(rule_set) }),
        );
    }

    let reorder = super::search::check(rule_set)?;

    let properties = PROPERTIES
        .iter()
        .map(|(name, description)| {
            if *name == INVARIANTS {
                let mut info = reorder.info(rule_set);
                info["invariants"] = rule_set
                    .invariants
                    .iter()
                    .map(|i| json!({ "name": i.name, "says": i.says(rule_set) }))
                    .collect();
                if rule_set.invariants.is_empty() {
                    info = json!({ "skipped": "no 'invariants' stated: state what must never happen to a workflow (docs/rulesets.md)" });
                } else if reorder.unproven.is_some() {
                    info["skipped"] = json!(reorder.skipped);
                }
                let first = reorder.broken.first().cloned().or_else(|| {
                    reorder.unproven.clone().filter(|_| !rule_set.invariants.is_empty())
                });
                return Property {
                    name,
                    description,
                    ok: first.is_none(),
                    counterexample: first,
                    more_counterexamples: reorder.broken.iter().skip(1).cloned().collect(),
                    info: Some(info),
                };
            }
            if *name == REORDER_SAFE {
                let mut examples = reorder.counterexamples.clone();
                let first = (!examples.is_empty()).then(|| examples.remove(0)).or_else(|| reorder.unproven.clone());
                return Property {
                    name,
                    description,
                    ok: first.is_none(),
                    counterexample: first,
                    more_counterexamples: examples,
                    info: Some(reorder.info(rule_set)),
                };
            }
            let failure = failures.iter().find(|f| f.name == *name);
            Property {
                name,
                description,
                ok: failure.is_none(),
                counterexample: failure.map(|f| f.counterexample.clone()),
                more_counterexamples: Vec::new(),
                info: None,
            }
        })
        .collect();
    Ok(Report {
        id: rule_set.id.clone(),
        version: rule_set.version,
        hash: rule_set.hash.clone(),
        states_explored: explorer.states.len(),
        properties,
    })
}

fn initial_names(rule_set: &RuleSet) -> Vec<&str> {
    std::iter::once(NONE).chain(rule_set.statuses.iter().filter(|s| s.initial).map(|s| s.name.as_str())).collect()
}

pub const PROPERTIES: &[(&str, &str)] = &[
    ("one-answer-per-pair", "every (event type, status) pair, and every event type with no workflow yet, has exactly one answer"),
    ("every-status-reachable", "every status can be reached from \"(none)\" or an initial status"),
    ("terminal-statuses-final", "no 'applied' answer leaves a terminal status"),
    ("operation-ids-unique", "no outbox operation id can be emitted twice along any path (a recurring operation's id carries the revision, which its emitting transition raises)"),
    ("revision-increases", "every applied transition increases the workflow revision"),
    ("guards-read-recorded-fields", "every guard compares a field that is recorded on every path to its status"),
    (INVARIANTS, "every invariant the rule set states holds after every delivery of every explored history, in every delivery order"),
    (REORDER_SAFE, "with an 'order' section: every delivery order of every legal history ends as the history in order does (same status, recorded fields, operations, errors), where 'retry' means redeliver later and declared races keep the order the workflow saw"),
];

pub const REORDER_SAFE: &str = "reorder-safe";
pub const INVARIANTS: &str = "invariants";

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::proof::verify_definition;
    use crate::ruleset::BUILTIN_SUBSCRIPTION_V1 as BUILTIN_SUBSCRIPTION;

    fn subscription() -> Value {
        serde_json::from_str(BUILTIN_SUBSCRIPTION).unwrap()
    }

    fn property(definition: &Value, name: &str) -> Value {
        let report = verify_definition(definition).unwrap().to_json();
        report["properties"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone()
    }

    /// The rule that starts a renewal (and emits the charge).
    fn renewal(definition: &mut Value) -> &mut Value {
        definition["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["on"] == "RENEWAL_DUE" && r["in"] == "active")
            .unwrap()
    }

    #[test]
    fn a_recurring_operation_emitted_on_every_renewal_has_unique_ids() {
        // active → renewing → active → renewing … emits the charge on every lap.
        assert_eq!(property(&subscription(), "operation-ids-unique")["ok"], true);
    }

    #[test]
    fn the_same_template_without_the_revision_fails_on_the_second_renewal() {
        let mut definition = subscription();
        let rule = renewal(&mut definition);
        rule["then"]["emit"][0]["id"] = json!("charge-renewal:{workflowId}");
        rule["then"]["emit"][0].as_object_mut().unwrap().remove("recurring");
        let failed = property(&definition, "operation-ids-unique");
        assert_eq!(failed["ok"], false);
        let example = &failed["counterexample"];
        assert_eq!(example["operationId"], "charge-renewal:{workflowId}");
        let events: Vec<&Value> = example["steps"].as_array().unwrap().iter().map(|s| &s["event"]).collect();
        assert_eq!(events, ["SUBSCRIPTION_STARTED", "RENEWAL_DUE", "RENEWAL_PAID", "RENEWAL_DUE"], "{example}");
    }

    #[test]
    fn a_recurring_operation_on_a_transition_with_revision_step_0_fails() {
        let mut definition = subscription();
        renewal(&mut definition)["then"]["revisionStep"] = json!(0);
        let failed = property(&definition, "operation-ids-unique");
        assert_eq!(failed["ok"], false, "{failed}");
        let example = &failed["counterexample"];
        assert_eq!(example["operationId"], "charge-renewal:{revision}:{workflowId}");
        assert!(example["reason"].as_str().unwrap().contains("revisionStep 0"), "{example}");
        assert_eq!(example["steps"].as_array().unwrap().last().unwrap()["rule"], "rules[3]");
        // The step alone matters: revision-increases fails too, for its own reason.
        assert_eq!(property(&definition, "revision-increases")["ok"], false);
    }

    #[test]
    fn a_revision_step_0_elsewhere_does_not_make_recurring_ids_collide() {
        // The payment keeps the revision; the renewal after it still raises it.
        let mut definition = subscription();
        let paid = definition["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["on"] == "RENEWAL_PAID" && r["in"] == "renewing")
            .unwrap();
        paid["then"]["revisionStep"] = json!(0);
        assert_eq!(property(&definition, "operation-ids-unique")["ok"], true);
        assert_eq!(property(&definition, "revision-increases")["ok"], false);
    }

    #[test]
    fn a_recurring_operation_emitted_twice_by_one_transition_fails() {
        let mut definition = subscription();
        let rule = renewal(&mut definition);
        let charge = rule["then"]["emit"][0].clone();
        let mut second = charge.clone();
        second["type"] = json!("NOTIFY_RENEWAL");
        rule["then"]["emit"] = json!([charge, second]);
        let failed = property(&definition, "operation-ids-unique");
        assert_eq!(failed["ok"], false);
        assert!(failed["counterexample"]["reason"].as_str().unwrap().contains("twice by one transition"));
        assert_eq!(property(&definition, "revision-increases")["ok"], true);
    }

    #[test]
    fn a_renewal_with_a_revision_step_of_two_is_still_unique() {
        let mut definition = subscription();
        renewal(&mut definition)["then"]["revisionStep"] = json!(2);
        assert_eq!(property(&definition, "operation-ids-unique")["ok"], true);
    }
}
