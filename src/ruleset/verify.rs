//! Proves a rule set's properties by exploring every state a workflow can
//! reach. A state is abstract but exact for what the properties need: the
//! status, which operation ids have been emitted, and which fields are
//! recorded. Guards are assumed to pass (a failing guard changes nothing).

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Value};

use super::{reorder, Answer, RuleSet, StateIndex, NONE};
use crate::error::{Error, Result};

const MAX_STATES: usize = 200_000;

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
    /// Distinct operation-id templates: one id per template and workflow.
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
        if self.states.len() >= MAX_STATES {
            return Err(Error::RuleSetInvalid {
                path: "$".into(),
                reason: format!("more than {MAX_STATES} reachable states; split the rule set"),
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
    let mut explorer = Explorer {
        rule_set,
        templates,
        states: Vec::new(),
        parents: Vec::new(),
        seen: HashMap::new(),
    };
    let mut failures: Vec<Failure> = Vec::new();
    // A counterexample is built once, for the first failure of a property:
    // building a path walks the parents, so it must not run at every step.
    let fail =
        |failures: &mut Vec<Failure>, name: &'static str, counterexample: &dyn Fn() -> Value| {
            if !failures.iter().any(|f| f.name == name) {
                failures.push(Failure {
                    name,
                    counterexample: counterexample(),
                });
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
            for &rule_index in &rule_set.cells[event][state.at] {
                let rule = &rule_set.rules[rule_index];
                if state.at != 0 {
                    if let Some(field) =
                        rule.guard.iter().find(|f| state.recorded & (1 << **f) == 0)
                    {
                        let step = Step {
                            event,
                            rule: rule_index,
                            from: state.at,
                            to: state.at,
                        };
                        fail(&mut failures, "guards-read-recorded-fields", &|| {
                            let mut example = explorer.path(node, Some(&step));
                            example["field"] = json!(rule_set.fields[*field].name);
                            example
                        });
                    }
                }
                let Answer::Applied(transition) = &rule.answer else { continue };
                let to = transition.to + 1;
                let step = Step { event, rule: rule_index, from: state.at, to };
                if state.at != 0 && rule_set.statuses[state.at - 1].terminal {
                    fail(&mut failures, "terminal-statuses-final", &|| {
                        explorer.path(node, Some(&step))
                    });
                }
                if transition.revision_step == 0 {
                    fail(&mut failures, "revision-increases", &|| {
                        explorer.path(node, Some(&step))
                    });
                }
                let mut emitted = state.emitted;
                for emit in &transition.emit {
                    let bit = 1u64 << explorer.templates.iter().position(|t| *t == emit.id_template.text).unwrap_or(0);
                    if emitted & bit != 0 {
                        fail(&mut failures, "operation-ids-unique", &|| {
                            let mut example = explorer.path(node, Some(&step));
                            example["operationId"] = json!(emit.id_template.text);
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

    let reorder = reorder::check(rule_set)?;

    let properties = PROPERTIES
        .iter()
        .map(|(name, description)| {
            if *name == REORDER_SAFE {
                let mut examples = reorder.counterexamples.clone();
                let first = (!examples.is_empty()).then(|| examples.remove(0));
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
    std::iter::once(NONE)
        .chain(rule_set.statuses.iter().filter(|s| s.initial).map(|s| s.name.as_str()))
        .collect()
}

pub const PROPERTIES: &[(&str, &str)] = &[
    ("one-answer-per-pair", "every (event type, status) pair, and every event type with no workflow yet, has exactly one answer"),
    ("every-status-reachable", "every status can be reached from \"(none)\" or an initial status"),
    ("terminal-statuses-final", "no 'applied' answer leaves a terminal status"),
    ("operation-ids-unique", "no outbox operation id can be emitted twice along any path"),
    ("revision-increases", "every applied transition increases the workflow revision"),
    ("guards-read-recorded-fields", "every guard compares a field that is recorded on every path to its status"),
    (REORDER_SAFE, "with an 'order' section: every delivery order of every legal history ends as the history in order does (same status, recorded fields, operations, errors), where 'retry' means redeliver later and declared races keep the order the workflow saw"),
];

pub const REORDER_SAFE: &str = "reorder-safe";
