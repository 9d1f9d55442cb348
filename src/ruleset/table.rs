//! The decision table as rows a person can read: one row per rule and event
//! type, listing the statuses it answers.

use serde_json::{json, Value};

use super::{Answer, Cond, RuleSet};

pub struct Row {
    pub event: String,
    pub states: Vec<String>,
    pub guard: Vec<String>,
    pub answer: Value,
    pub summary: String,
    /// The answer case by case, for the narrow layout: (the condition, or "" for
    /// a rule with one answer and "else" for the last case; the answer's summary).
    pub cases: Vec<(String, String)>,
    pub origin: String,
}

pub fn rows(rule_set: &RuleSet) -> Vec<Row> {
    let mut rows = Vec::new();
    for (e, event) in rule_set.events.iter().enumerate() {
        let mut grouped: Vec<(usize, Vec<String>)> = Vec::new();
        for at in 0..rule_set.state_count() {
            for &rule in &rule_set.cells[e][at] {
                let name = rule_set.state_name(at).to_string();
                match grouped.iter_mut().find(|(r, _)| *r == rule) {
                    Some((_, states)) => states.push(name),
                    None => grouped.push((rule, vec![name])),
                }
            }
        }
        for (rule_index, states) in grouped {
            let rule = &rule_set.rules[rule_index];
            let (mut answer, mut text) = (answer_json(rule_set, &rule.answer), summary(rule_set, &rule.answer));
            let mut by_case = vec![(String::new(), text.clone())];
            let chain: Vec<usize> = rule_set.answers_of(rule_index).collect();
            if chain.len() > 1 {
                let classic = chain.len() == 2
                    && rule.when.len() == 1
                    && matches!(rule.when[0], Cond::Compare { .. })
                    && rule_set.rules[chain[1]].origin.ends_with(".else");
                let otherwise = &rule_set.rules[chain[chain.len() - 1]].answer;
                if classic {
                    // `when`/`then`/`else` as written.
                    answer = json!({ "when": condition_json(rule_set, &rule.when[0]), "then": answer, "else": answer_json(rule_set, otherwise) });
                    by_case = vec![
                        (condition_text(rule_set, &rule.when[0]), text.clone()),
                        ("else".to_string(), summary(rule_set, otherwise)),
                    ];
                    text = format!("when {}: {}; else {}", by_case[0].0, by_case[0].1, by_case[1].1);
                } else {
                    let mut cases = Vec::new();
                    let mut parts = Vec::new();
                    by_case.clear();
                    for &r in &chain {
                        let case = &rule_set.rules[r];
                        if case.when.is_empty() {
                            cases.push(json!({ "then": answer_json(rule_set, &case.answer) }));
                            parts.push(format!("else {}", summary(rule_set, &case.answer)));
                            by_case.push(("else".to_string(), summary(rule_set, &case.answer)));
                        } else {
                            let when: Vec<Value> = case.when.iter().map(|c| condition_json(rule_set, c)).collect();
                            let when_text: Vec<String> =
                                case.when.iter().map(|c| condition_text(rule_set, c)).collect();
                            cases.push(json!({ "when": when, "then": answer_json(rule_set, &case.answer) }));
                            parts.push(format!(
                                "when {}: {}",
                                when_text.join(" and "),
                                summary(rule_set, &case.answer)
                            ));
                            by_case.push((when_text.join(" and "), summary(rule_set, &case.answer)));
                        }
                    }
                    answer = json!({ "cases": cases });
                    text = parts.join("; ");
                }
            }
            rows.push(Row {
                event: event.name.clone(),
                states,
                guard: rule.guard.iter().map(|f| rule_set.fields[*f].name.clone()).collect(),
                answer,
                summary: text,
                cases: by_case,
                // A decision list is the row's rule, not its first case.
                origin: rule.origin.strip_suffix(".cases[0]").unwrap_or(&rule.origin).to_string(),
            });
        }
    }
    rows
}

/// A condition as written: `[a, op, b]`, `{"other": [...]}` or `{"emitted": name}`.
fn condition_json(rule_set: &RuleSet, condition: &Cond) -> Value {
    match condition {
        Cond::Compare { event_field, op, workflow_field } => {
            json!([rule_set.fields[*event_field].name, op.as_str(), rule_set.fields[*workflow_field].name])
        }
        Cond::Other(types) => {
            json!({ "other": types.iter().map(|t| rule_set.events[*t].name.clone()).collect::<Vec<_>>() })
        }
        Cond::Emitted(name) => json!({ "emitted": name }),
    }
}

fn condition_text(rule_set: &RuleSet, condition: &Cond) -> String {
    match condition {
        Cond::Compare { event_field, op, workflow_field } => format!(
            "{} {} recorded {}",
            rule_set.fields[*event_field].name,
            op.as_str(),
            rule_set.fields[*workflow_field].name
        ),
        Cond::Other(types) => format!(
            "another fact's last event is {}",
            types.iter().map(|t| rule_set.events[*t].name.as_str()).collect::<Vec<_>>().join(" or ")
        ),
        Cond::Emitted(name) => format!("this fact emitted {name}"),
    }
}

fn answer_json(rule_set: &RuleSet, answer: &Answer) -> Value {
    let names = |fields: &[usize]| fields.iter().map(|f| rule_set.fields[*f].name.clone()).collect::<Vec<_>>();
    match answer {
        Answer::Applied(t) => {
            let mut answer = json!({
            "outcome": "applied",
            "to": rule_set.statuses[t.to].name,
            "record": names(&t.record),
            "clear": names(&t.clear),
            "emit": t.emit.iter().map(|e| json!({
                "type": e.operation_type, "id": e.id_template.text, "payload": names(&e.payload),
                "recurring": e.id_template.recurring,
            })).collect::<Vec<_>>(),
            "revisionStep": t.revision_step,
            });
            if t.untracked {
                answer["untracked"] = json!(true);
            }
            answer
        }
        Answer::AlreadyApplied => json!({ "outcome": "already-applied" }),
        Answer::Stale => json!({ "outcome": "stale" }),
        Answer::Fail { code, disposition } => json!({ "error": code.as_str(), "disposition": disposition.as_str() }),
    }
}

fn summary(rule_set: &RuleSet, answer: &Answer) -> String {
    match answer {
        Answer::Applied(t) => {
            let mut text = format!("applied → {}", rule_set.statuses[t.to].name);
            let names = |fields: &[usize]| {
                fields.iter().map(|f| rule_set.fields[*f].name.as_str()).collect::<Vec<_>>().join(", ")
            };
            if !t.record.is_empty() {
                text.push_str(&format!("; records {}", names(&t.record)));
            }
            if !t.clear.is_empty() {
                text.push_str(&format!("; clears {}", names(&t.clear)));
            }
            for e in &t.emit {
                text.push_str(&format!("; emits {} `{}`", e.operation_type, e.id_template.text));
            }
            if t.untracked {
                text.push_str("; the fact untracked");
            }
            text
        }
        Answer::AlreadyApplied => "already-applied".into(),
        Answer::Stale => "stale (receipt only)".into(),
        Answer::Fail { code, disposition } => format!("{} ({})", code.as_str(), disposition.as_str()),
    }
}

pub fn rows_json(rule_set: &RuleSet) -> Value {
    Value::Array(
        rows(rule_set)
            .into_iter()
            .map(|r| {
                json!({
                    "event": r.event, "statuses": r.states, "guard": r.guard,
                    "answer": r.answer, "summary": r.summary, "rule": r.origin,
                })
            })
            .collect(),
    )
}

/// A Markdown table: what `idemflow rules table` prints and the README shows.
/// The table in Markdown, one line per case: a rule whose answer depends on
/// conditions takes a line per case, the event, statuses and guard written on
/// its first line only, so no line holds a whole decision list.
pub fn markdown(rule_set: &RuleSet) -> String {
    let mut out = format!(
        "Rule set `{}` v{} (`{}`)\n\n| Event | In status | Guard | When | Answer |\n| --- | --- | --- | --- | --- |\n",
        rule_set.id, rule_set.version, rule_set.hash
    );
    for row in rows(rule_set) {
        for (i, (when, answer)) in row.cases.iter().enumerate() {
            if i == 0 {
                out.push_str(&format!(
                    "| {} | {} | {} | {when} | {answer} |\n",
                    row.event,
                    row.states.join(", "),
                    row.guard.join(", ")
                ));
            } else {
                out.push_str(&format!("| | | | {when} | {answer} |\n"));
            }
        }
    }
    out
}
