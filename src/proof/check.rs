//! The `reorder-safe` and `invariants` properties: any delivery order, any
//! duplication, one outcome, and nothing the rule set's author forbids.
//!
//! Both are proven by one search (`search`) that decides every
//! delivery with the real decider on a concrete workflow; this module holds
//! what the search reports ([`Check`]) and how the report reads it.

use serde_json::{json, Value};

use crate::limits::{MAX_REORDER_CONFIGURATIONS, MAX_REORDER_HISTORIES};
use crate::ruleset::order::After;
use crate::ruleset::RuleSet;

/// Events in a history without facts' observations, at most.
pub const BOUND: usize = 6;

pub struct Check {
    /// `None` when the rule set makes no reorder claim or cannot be checked.
    pub skipped: Option<String>,
    /// A claim the check cannot prove (a comparison the model cannot
    /// evaluate): the property fails with this as its counterexample.
    pub unproven: Option<Value>,
    pub counterexamples: Vec<Value>,
    /// (history, start status) pairs explored: the `maxReorderHistories` budget used.
    pub histories: usize,
    /// Delivery configurations over all of them: the `maxReorderConfigurations` budget used.
    pub configurations: usize,
    /// For a rule set with facts, what the concrete explorer adds to the
    /// report: histories and configurations by number of facts.
    pub by_facts: Option<[(usize, usize); 3]>,
    /// Orders whose last delivery broke an invariant the rule set states (the shortest found).
    pub broken: Vec<Value>,
}

impl Check {
    pub fn info(&self, rule_set: &RuleSet) -> Value {
        let mut info = json!({
            "bound": super::search::bound(rule_set),
            "histories": self.histories,
            "configurations": self.configurations,
            "budget": {
                "histories": { "used": self.histories, "limit": MAX_REORDER_HISTORIES },
                "configurations": { "used": self.configurations, "limit": MAX_REORDER_CONFIGURATIONS },
            },
        });
        if let Some(order) = &rule_set.order {
            info["races"] = order
                .races
                .iter()
                .map(|r| {
                    let mut race = json!([rule_set.events[r.a].name, rule_set.events[r.b].name]);
                    if let Some(d) = &r.description {
                        race = json!({ "between": race, "description": d });
                    }
                    race
                })
                .collect();
            info["follows"] = order
                .follows
                .iter()
                .map(|f| {
                    let after = match &f.after {
                        After::Event(e) => rule_set.events[*e].name.clone(),
                        After::Operation(op) => op.clone(),
                    };
                    json!({ "event": rule_set.events[f.event].name, "after": after })
                })
                .collect();
        }
        if let Some(by_facts) = &self.by_facts {
            info["byFacts"] = by_facts
                .iter()
                .zip(["none", "one", "two"])
                .map(|((histories, configurations), facts)| json!({ "facts": facts, "histories": histories, "configurations": configurations }))
                .collect();
        }
        if let Some(reason) = &self.skipped {
            info["skipped"] = json!(reason);
        }
        info
    }
}

/// The race bookkeeping of the first delivery of local type `t`: for every
/// racing pair `(low, high, pair)` with `t` on one side and the other side
/// `undelivered`, the pair's two bits of `seen` say it is decided and
/// whether `low` came first. Used by the search (`search`).
pub(super) fn seen_first(
    mut seen: u64,
    t: usize,
    races: impl Iterator<Item = (usize, usize, usize)>,
    undelivered: impl Fn(usize) -> bool,
) -> u64 {
    for (low, high, pair) in races {
        let other = if low == t {
            high
        } else if high == t {
            low
        } else {
            continue;
        };
        if undelivered(other) {
            seen |= 1 << (2 * pair);
            if low == t {
                seen |= 1 << (2 * pair + 1);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::proof::verify_definition;
    use crate::ruleset::{BUILTIN_DEPOSIT_SWAP_V1, BUILTIN_DEPOSIT_SWAP_V2};

    fn reorder_property(definition: &Value) -> Value {
        let report = verify_definition(definition).unwrap().to_json();
        report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap().clone()
    }

    fn v2() -> Value {
        serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V2).unwrap()
    }

    /// Replaces the answer of the rule written for `on` in `in`.
    fn set_answer(definition: &mut Value, on: &str, status: &str, then: Value) {
        let rule = definition["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| {
                let names =
                    |v: &Value, name: &str| v == name || v.as_array().is_some_and(|a| a.iter().any(|x| x == name));
                names(&r["on"], on) && names(&r["in"], status)
            })
            .unwrap_or_else(|| panic!("no rule for {on} in {status}"));
        rule["then"] = then;
        rule.as_object_mut().unwrap().remove("guard");
    }

    #[test]
    fn deposit_swap_v2_is_reorder_safe_and_says_what_it_checked() {
        let property = reorder_property(&v2());
        assert_eq!(property["ok"], true, "{property}");
        let checked = &property["checked"];
        assert_eq!((&checked["bound"]["events"], &checked["bound"]["copiesPerType"]), (&json!(6), &json!(2)));
        assert!(checked["bound"]["says"].as_str().unwrap().starts_with("every history of up to 6 events"));
        assert!(checked["histories"].as_u64().unwrap() > 100);
        assert!(checked["configurations"].as_u64().unwrap() > checked["histories"].as_u64().unwrap());
        assert_eq!(checked["races"].as_array().unwrap().len(), 6);
        assert!(checked.get("skipped").is_none());
        // The budget is the whole verification's: what it used is what it explored.
        let budget = &checked["budget"];
        assert_eq!(budget["histories"]["used"], checked["histories"]);
        assert_eq!(budget["configurations"]["used"], checked["configurations"]);
        assert_eq!(budget["histories"]["limit"], 100_000);
        assert_eq!(budget["configurations"]["limit"], 12_000_000);
    }

    #[test]
    fn v1_with_the_same_order_fails_on_both_overtakings() {
        let mut v1: Value = serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V1).unwrap();
        v1["order"] = v2()["order"].clone();
        let property = reorder_property(&v1);
        assert_eq!(property["ok"], false);
        let mut all = vec![property["counterexample"].clone()];
        all.extend(property["moreCounterexamples"].as_array().unwrap().iter().cloned());
        let overtaken = |first: &str, second: &str| {
            all.iter().any(|c| {
                c["history"] == json!(["DEPOSIT_DETECTED", second])
                    && c["actual"]["deliveries"][0]["event"] == first
                    && c["divergesAt"] == 0
            })
        };
        assert!(overtaken("DEPOSIT_CONFIRMED", "DEPOSIT_CONFIRMED"), "{property}");
        assert!(overtaken("DEPOSIT_REVERSED", "DEPOSIT_REVERSED"), "{property}");
    }

    #[test]
    fn a_confirmation_parked_in_waiting_is_a_counterexample() {
        let mut definition = v2();
        set_answer(&mut definition, "DEPOSIT_CONFIRMED", "waiting", json!({ "error": "INVALID_TRANSITION" }));
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false);
        let example = &property["counterexample"];
        assert_eq!(example["expected"]["inOrder"], true);
        assert_eq!(example["actual"]["deliveries"][0]["answer"], "INVALID_TRANSITION (reconcile)");
        assert_eq!(example["actual"]["end"]["answeredWithError"], json!(["DEPOSIT_CONFIRMED"]));
    }

    #[test]
    fn a_confirmation_deferred_in_waiting_is_reorder_safe() {
        // Deferring (retry) instead of absorbing: redelivered after the detection, it ends the same.
        let mut definition = v2();
        set_answer(
            &mut definition,
            "DEPOSIT_CONFIRMED",
            "waiting",
            json!({ "error": "INVALID_TRANSITION", "disposition": "retry" }),
        );
        // A reversal seen first would then defer the confirmation forever: a reversed swap must answer it.
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], true, "{property}");
    }

    #[test]
    fn an_event_deferred_forever_is_a_counterexample() {
        // A reversed swap that answers its deposit's detection with retry never settles it.
        let mut definition = v2();
        set_answer(
            &mut definition,
            "DEPOSIT_DETECTED",
            "reversed",
            json!({ "error": "INVALID_TRANSITION", "disposition": "retry" }),
        );
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false);
        let undelivered = |c: &Value| c["actual"]["end"]["undelivered"].clone();
        assert_eq!(undelivered(&property["counterexample"]), json!(["DEPOSIT_DETECTED"]), "{property}");
    }

    #[test]
    fn an_undeclared_race_is_a_counterexample_that_names_no_race() {
        let mut definition = v2();
        definition["order"]["races"].as_array_mut().unwrap().remove(0);
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false);
        let example = &property["counterexample"];
        assert!(example["history"].as_array().unwrap().contains(&json!("DEADLINE_PASSED")), "{example}");
        assert_eq!(example["races"], json!([]));
    }

    #[test]
    fn a_rule_set_without_an_order_section_claims_nothing() {
        let v1: Value = serde_json::from_str(BUILTIN_DEPOSIT_SWAP_V1).unwrap();
        let property = reorder_property(&v1);
        assert_eq!(property["ok"], true);
        assert!(property["checked"]["skipped"].as_str().unwrap().contains("in-order"));
        assert_eq!(property["checked"]["histories"], 0);
    }
}

#[cfg(test)]
mod recurring_tests {
    use serde_json::{json, Value};

    use crate::proof::verify_definition;
    use crate::ruleset::BUILTIN_SUBSCRIPTION_V1 as BUILTIN_SUBSCRIPTION;

    fn reorder_property(definition: &Value) -> Value {
        let report = verify_definition(definition).unwrap().to_json();
        report["properties"].as_array().unwrap().iter().find(|p| p["name"] == "reorder-safe").unwrap().clone()
    }

    /// Renewals without the paidThrough chain: a renewal in `active` is not
    /// guarded, so nothing tells a re-published one from the next period's.
    fn unchained(order: Value) -> Value {
        json!({
            "id": "renewals", "version": 1,
            "statuses": [{ "name": "active", "initial": true }, { "name": "renewing" }],
            "fields": [{ "name": "period", "kind": "text" }],
            "events": [{ "type": "RENEWAL_DUE", "fields": ["period"] }, { "type": "RENEWAL_PAID", "fields": ["period"] }],
            "order": order,
            "rules": [
                { "on": "*", "in": "(none)", "then": { "error": "UNKNOWN_WORKFLOW", "disposition": "retry" } },
                { "on": "RENEWAL_DUE", "in": "active", "then": { "outcome": "applied", "to": "renewing", "record": ["period"],
                  "emit": [{ "type": "CHARGE", "id": "charge:{revision}:{workflowId}", "recurring": true, "payload": ["period"] }] } },
                { "on": "RENEWAL_DUE", "in": "renewing", "guard": ["period"], "then": { "outcome": "already-applied" } },
                { "on": "RENEWAL_PAID", "in": "renewing", "guard": ["period"], "then": { "outcome": "applied", "to": "active" } },
                { "on": "RENEWAL_PAID", "in": "active", "then": { "outcome": "already-applied" } }
            ]
        })
    }

    #[test]
    fn a_second_charge_for_one_renewal_is_a_counterexample_though_every_status_agrees() {
        // In order: due, due again (already-applied), paid, paid again: one
        // charge. Due, paid, due again, paid again ends in the same status with
        // the same fields and answers, but charges twice: only the count of
        // the recurring operation tells them apart.
        let property =
            reorder_property(&unchained(json!({ "follows": [{ "event": "RENEWAL_PAID", "after": "CHARGE" }] })));
        assert_eq!(property["ok"], false, "{property}");
        let mut all = vec![property["counterexample"].clone()];
        all.extend(property["moreCounterexamples"].as_array().into_iter().flatten().cloned());
        // A recurring operation counts by its name: its ids carry revisions, which differ between orders.
        let charge = "charge";
        let found = all.iter().find(|c| {
            c["expected"]["end"]["emitted"] == json!([charge])
                && c["actual"]["end"]["emitted"] == json!([charge, charge])
                && c["expected"]["end"]["status"] == c["actual"]["end"]["status"]
        });
        assert!(found.is_some(), "{property}");
        let example = found.unwrap();
        let history = example["history"].as_array().unwrap();
        assert_eq!(history.iter().filter(|e| *e == "RENEWAL_DUE").count(), 2, "{example}");
    }

    #[test]
    fn every_counterexample_of_the_unchained_renewals_re_publishes_the_renewal() {
        // A history holds one fact: without re-publications past the payment
        // (each type at most once), the unchained renewals agree in every order.
        let definition = unchained(json!({ "follows": [{ "event": "RENEWAL_PAID", "after": "CHARGE" }] }));
        let report = verify_definition(&definition).unwrap();
        // Everything but reorder-safe holds.
        for p in &report.properties {
            assert!(p.ok || p.name == "reorder-safe", "{}", report.to_json());
        }
        let property = reorder_property(&definition);
        for example in std::iter::once(&property["counterexample"])
            .chain(property["moreCounterexamples"].as_array().into_iter().flatten())
        {
            let history = example["history"].as_array().unwrap();
            let dues = history.iter().filter(|e| *e == "RENEWAL_DUE").count();
            assert_eq!(dues, 2, "every counterexample re-publishes the renewal: {example}");
        }
    }

    #[test]
    fn the_subscription_with_an_order_section_is_not_reorder_safe() {
        // What its description says: a renewal re-published after its payment
        // ends elsewhere than the same renewal re-published before it.
        let mut definition: Value = serde_json::from_str(BUILTIN_SUBSCRIPTION).unwrap();
        definition["order"] = json!({ "follows": [
            { "event": "RENEWAL_DUE", "after": "SUBSCRIPTION_STARTED" },
            { "event": "RENEWAL_PAID", "after": "CHARGE_RENEWAL" },
            { "event": "SUBSCRIPTION_CANCELLED", "after": "SUBSCRIPTION_STARTED" }
        ] });
        let property = reorder_property(&definition);
        assert_eq!(property["ok"], false, "{property}");
        let mut all = vec![property["counterexample"].clone()];
        all.extend(property["moreCounterexamples"].as_array().into_iter().flatten().cloned());
        let late_republication = all.iter().any(|c| {
            let deliveries = c["actual"]["deliveries"].as_array().unwrap();
            let paid = deliveries.iter().position(|d| d["event"] == "RENEWAL_PAID" && d["answer"] == "applied");
            let due_after = deliveries.iter().rposition(|d| d["event"] == "RENEWAL_DUE");
            matches!((paid, due_after), (Some(p), Some(d)) if d > p)
        });
        assert!(late_republication, "{property}");
    }
}
