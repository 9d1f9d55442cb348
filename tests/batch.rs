#![cfg(not(target_arch = "wasm32"))]
//! The batch decider (src/batch.rs) against `decide::decide` on generated
//! inputs: every built-in rule set, every status, receipts (same meaning,
//! conflicts, corrupt), stale and mismatched workflows, invalid events. Where
//! the batch path decides, its decision (rebuilt from its answers and the rule
//! templates, as the JS host does) must equal `decide`'s; where `decide`
//! refuses, the batch path must leave the item to it (SLOW); and an item
//! `decide` accepts that holds only plain strings must be decided by the batch
//! path itself, not left to the slow one.

// idemflow::Error is large by design.
#![allow(clippy::result_large_err)]

use serde_json::{json, Map, Value};

use idemflow::batch::{self, Answers, Batch, Layout, Work};
use idemflow::event::validate;
use idemflow::fingerprint::fingerprint;
use idemflow::input::Source;
use idemflow::{decide, RuleSet};

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const TEXTS: &[&str] = &["ref-a", "ref-b", "btc-mainnet:tx-9f:vout-0", "réf-☃", "😀-emoji", "a\"quote\\", "2026-11", "2026-12"];
const UNITS: &[&str] = &["1", "250", "1000000", "99999999999999999999999999"];

/// Every built-in rule set, by name and version.
const BUILTINS: [(&str, u64); 5] = [("deposit-swap", 1), ("deposit-swap", 2), ("order-shipment", 1), ("order-shipment", 2), ("subscription", 1)];

/// The answers of one batch: per item its ints, numbers and fingerprint, and how many the batch path decided.
struct Answered {
    ints: Vec<i32>,
    numbers: Vec<f64>,
    hex: Vec<u8>,
    decided: usize,
}

/// Runs `n` encoded items through the batch path.
fn answer(rule_set: &RuleSet, encoded: &Encoded, n: usize, work: &mut Work) -> Answered {
    let mut ints = vec![0; n * batch::RESULT_INTS];
    let mut numbers = vec![0.0; n * batch::RESULT_NUMBERS];
    let mut hex = vec![0; n * batch::FINGERPRINT_BYTES];
    let ascii = encoded.text.len() == encoded.units;
    let decided = batch::decide_batch(
        rule_set,
        &batch::Prepared::new(rule_set),
        n,
        Batch { text: encoded.text.as_bytes(), entries: &encoded.entries, numbers: &encoded.numbers, ascii },
        Answers { ints: &mut ints, numbers: &mut numbers, fingerprints: &mut hex },
        work,
    )
    .expect("regions are large enough");
    Answered { ints, numbers, hex, decided }
}

/// A value the host can meet in a field, mostly valid.
fn field_value(rng: &mut Rng, kind_units: bool, valid_percent: usize) -> Option<Value> {
    if rng.chance(valid_percent) {
        return Some(Value::String(rng.pick(if kind_units { UNITS } else { TEXTS }).to_string()));
    }
    let hostile: [Option<Value>; 14] = [
        None,
        Some(Value::Null),
        Some(json!("")),
        Some(json!("   ")),
        Some(json!("0")),
        Some(json!("012")),
        Some(json!("12a")),
        Some(json!(5)),
        Some(json!(true)),
        Some(json!("a\u{1}b")),
        Some(json!("a\u{FFFD}b")),
        Some(Value::String("x".repeat(600))),
        Some(Value::String("é".repeat(300))),
        Some(json!({"nested": 1})),
    ];
    rng.pick(&hostile).clone()
}

struct Case {
    event: Map<String, Value>,
    receipt: Option<Map<String, Value>>,
    workflow: Option<Map<String, Value>>,
}

fn generate(rng: &mut Rng, rule_set: &RuleSet) -> Case {
    let ids = ["evt-1", "evt-2", "watcher:evt-☃"];
    let workflows = ["swap-1", "swap-2", "wf 😀"];
    let valid = if rng.chance(70) { 100 } else { 85 };
    let mut event = Map::new();
    let event_type = rng.below(rule_set.events().len());
    if rng.chance(valid) {
        event.insert("eventId".into(), json!(rng.pick(&ids)));
    } else if let Some(v) = field_value(rng, false, 0) {
        event.insert("eventId".into(), v);
    }
    event.insert(
        "type".into(),
        if rng.chance(valid) { json!(rule_set.events()[event_type].name) } else { json!(rng.pick(&["NOPE", "", "deposit_confirmed"])) },
    );
    if rng.chance(valid) {
        event.insert("workflowId".into(), json!(rng.pick(&workflows)));
    } else if let Some(v) = field_value(rng, false, 0) {
        event.insert("workflowId".into(), v);
    }
    for field in rule_set.fields() {
        let units = field.kind == idemflow::field::FieldKind::Units;
        if let Some(v) = field_value(rng, units, valid.max(90)) {
            event.insert(field.name.clone(), v);
        }
    }

    let receipt = rng.chance(25).then(|| {
        let mut receipt = Map::new();
        match rng.below(6) {
            0 => {}
            1 => {
                receipt.insert("eventId".into(), json!("another-id"));
            }
            2 => {
                receipt.insert("eventId".into(), json!(7));
            }
            _ => {
                receipt.insert("eventId".into(), event.get("eventId").cloned().unwrap_or(Value::Null));
            }
        }
        let computed = validate(rule_set, &event).ok().map(|e| fingerprint(rule_set, &e));
        let stored = match (rng.below(6), computed) {
            (0, _) => json!(format!("fp1:{}", "0".repeat(64))),
            (1, _) => json!("garbage"),
            (2, _) => json!(null),
            (_, Some(fp)) => json!(fp),
            (_, None) => json!("fp1:x"),
        };
        receipt.insert("fingerprint".into(), stored);
        receipt
    });

    let workflow = rng.chance(80).then(|| {
        let mut workflow = Map::new();
        let id = if rng.chance(90) { event.get("workflowId").cloned().unwrap_or(json!("x")) } else { json!("other-wf") };
        workflow.insert("id".into(), id);
        let status = if rng.chance(95) {
            json!(rule_set.statuses()[rng.below(rule_set.statuses().len())].name)
        } else {
            json!(rng.pick(&["nope", ""]))
        };
        workflow.insert("status".into(), status);
        let revisions = [json!(0), json!(1), json!(41), json!(9007199254740991u64), json!(9007199254740990u64), json!(-1), json!(1.5), json!("3")];
        workflow.insert("revision".into(), if rng.chance(90) { revisions[rng.below(4)].clone() } else { rng.pick(&revisions).clone() });
        for field in rule_set.fields() {
            // Mostly what the event says, so guards pass and transitions apply.
            let value = if rng.chance(75) {
                event.get(&field.name).cloned()
            } else {
                let units = field.kind == idemflow::field::FieldKind::Units;
                field_value(rng, units, 70)
            };
            if let Some(v) = value {
                workflow.insert(field.name.clone(), v);
            }
        }
        workflow
    });
    Case { event, receipt, workflow }
}

/// Lays cases out as the JS host does.
struct Encoded {
    text: String,
    units: usize,
    entries: Vec<i32>,
    numbers: Vec<f64>,
}

fn push(encoded: &mut Encoded, value: Option<&Value>) {
    let entry = match value {
        None => batch::ABSENT,
        Some(Value::Null) => batch::NULL,
        Some(Value::Number(_)) => batch::NUMBER,
        Some(Value::String(s)) => {
            let units = s.encode_utf16().count();
            if units > 512 {
                batch::TOO_LONG
            } else {
                encoded.text.push_str(s);
                encoded.units += units;
                units as i32
            }
        }
        Some(_) => batch::OTHER,
    };
    encoded.entries.push(entry);
}

/// As `push`, or SAME when the value is the event's very string (as the host
/// lays a workflow's copy of an event field out).
fn push_or_same(encoded: &mut Encoded, value: Option<&Value>, event_value: Option<&Value>, same: bool) {
    match (value, event_value) {
        (Some(Value::String(a)), Some(Value::String(b))) if same && a == b && a.encode_utf16().count() <= 512 => {
            encoded.entries.push(batch::SAME)
        }
        _ => push(encoded, value),
    }
}

fn encode(rule_set: &RuleSet, cases: &[Case]) -> Encoded {
    let mut encoded = Encoded { text: String::new(), units: 0, entries: Vec::new(), numbers: Vec::new() };
    let layout = Layout::new(rule_set);
    for (index, case) in cases.iter().enumerate() {
        // Every other item uses SAME where it can.
        let same = index % 2 == 0;
        let start = encoded.entries.len();
        let header = if case.receipt.is_some() { batch::HAS_RECEIPT } else { 0 }
            | if case.workflow.is_some() { batch::HAS_WORKFLOW } else { 0 };
        encoded.entries.push(header);
        // Every other item names its type and status by index, where the host can.
        let known = |value: Option<&Value>, names: Vec<&String>| -> Option<i32> {
            let name = value?.as_str()?;
            names.iter().position(|n| *n == name).map(|i| batch::KNOWN - i as i32)
        };
        push(&mut encoded, case.event.get("eventId"));
        match known(case.event.get("type"), rule_set.events().iter().map(|e| &e.name).collect()) {
            Some(entry) if same => encoded.entries.push(entry),
            _ => push(&mut encoded, case.event.get("type")),
        }
        push(&mut encoded, case.event.get("workflowId"));
        for field in rule_set.fields() {
            push(&mut encoded, case.event.get(&field.name));
        }
        let empty = Map::new();
        let receipt = case.receipt.as_ref().unwrap_or(&empty);
        push_or_same(&mut encoded, receipt.get("eventId"), case.event.get("eventId"), same);
        push(&mut encoded, receipt.get("fingerprint"));
        let workflow = case.workflow.as_ref().unwrap_or(&empty);
        push_or_same(&mut encoded, workflow.get("id"), case.event.get("workflowId"), same);
        match known(workflow.get("status"), rule_set.statuses().iter().map(|s| &s.name).collect()) {
            Some(entry) if same => encoded.entries.push(entry),
            _ => push(&mut encoded, workflow.get("status")),
        }
        push(&mut encoded, workflow.get("revision"));
        for field in rule_set.fields() {
            push_or_same(&mut encoded, workflow.get(&field.name), case.event.get(&field.name), same);
        }
        assert_eq!(encoded.entries.len() - start, layout.entries());
        encoded.numbers.push(workflow.get("revision").and_then(Value::as_f64).unwrap_or(0.0));
    }
    encoded
}

/// The decision rebuilt from the batch answers, as js/core/fast.cjs does.
fn rebuild(rule_set: &RuleSet, case: &Case, ints: &[i32], numbers: &[f64], hex: &[u8]) -> Value {
    let [_, outcome, rule, state, event_type] = ints.try_into().unwrap();
    let outcome = batch::OUTCOMES[outcome as usize];
    let event_id = &case.event["eventId"];
    let workflow_id = &case.event["workflowId"];
    let event_type_name = &rule_set.events()[event_type as usize].name;
    let fp = std::str::from_utf8(hex).unwrap().to_string();
    let mut decision = json!({
        "outcome": outcome, "eventId": event_id, "workflowId": workflow_id,
        "eventType": event_type_name, "fingerprint": fp,
        "writeSet": { "receipt": null, "workflow": null, "outbox": [] },
    });
    if outcome == "duplicate-delivery" {
        return decision;
    }
    decision["writeSet"]["receipt"] = json!({
        "eventId": event_id, "fingerprint": fp, "workflowId": workflow_id, "eventType": event_type_name,
        "outcome": outcome, "ruleSet": { "id": rule_set.id, "version": rule_set.version, "hash": rule_set.hash },
        "result": { "operationIds": [], "status": null, "revision": null },
    });
    if outcome != "applied" {
        return decision;
    }
    let template = batch::template(rule_set, rule as usize, event_type as usize).expect("an applied rule has a template");
    let value = |source: &Value| -> Value {
        match source[1].as_u64().unwrap() as u8 {
            batch::CONSTANT => source[2].clone(),
            batch::REVISION => json!(numbers[1] as u64),
            batch::EVENT_FIELD => case.event[&rule_set.fields()[source[2].as_u64().unwrap() as usize].name].clone(),
            _ => Value::Null,
        }
    };
    let object = |entries: &Value| -> Value {
        Value::Object(entries.as_array().unwrap().iter().map(|e| (e[0].as_str().unwrap().to_string(), value(e))).collect())
    };
    let expect = if state == 0 {
        Value::Null
    } else {
        json!({ "status": rule_set.statuses()[state as usize - 1].name, "revision": numbers[0] as u64 })
    };
    decision["writeSet"]["workflow"] = json!({ "id": workflow_id, "expect": expect, "set": object(&template["set"]) });
    let outbox: Vec<Value> = template["outbox"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| {
            let revision = if op["recurring"].as_bool().unwrap() { format!("{}:", numbers[1] as u64) } else { String::new() };
            json!({
                "id": format!("{}{}{}", op["prefix"].as_str().unwrap(), revision, workflow_id.as_str().unwrap()),
                "type": op["type"], "workflowId": workflow_id, "eventId": event_id, "status": "pending",
                "payload": object(&op["payload"]),
            })
        })
        .collect();
    // What the receipt keeps of it, as decide writes it: the operations' ids, the status and revision after.
    decision["writeSet"]["receipt"]["result"] = json!({
        "operationIds": outbox.iter().map(|op| op["id"].clone()).collect::<Vec<_>>(),
        "status": decision["writeSet"]["workflow"]["set"]["status"],
        "revision": decision["writeSet"]["workflow"]["set"]["revision"],
    });
    decision["writeSet"]["outbox"] = Value::Array(outbox);
    decision
}

/// Holds only strings (and a number where the revision is): the batch path must decide it.
fn plain(case: &Case) -> bool {
    let plain_value = |v: &Value| match v {
        Value::String(s) => !s.contains('\u{FFFD}') && s.encode_utf16().count() <= 512,
        _ => false,
    };
    case.event.values().all(plain_value)
        && case.receipt.as_ref().map_or(true, |r| r.values().all(plain_value))
        && case.workflow.as_ref().map_or(true, |w| {
            w.iter().all(|(k, v)| if k == "revision" { v.is_number() } else { plain_value(v) })
        })
}

#[derive(Default, Debug)]
struct Counts {
    decided: usize,
    left_to_decide: usize,
    refused: usize,
    outcomes: [usize; 4],
    ascii_batches: usize,
}

fn run(rule_set: &RuleSet, rng: &mut Rng, cases: usize, work: &mut Work, counts: &mut Counts) {
    let mut done = 0;
    let mut round = 0;
    while done < cases {
        let size = (1 + rng.below(300)).min(cases - done);
        // One batch in three is all ASCII, which the host lays out more simply.
        let ascii_only = round % 3 == 0;
        round += 1;
        let mut batch_cases: Vec<Case> = Vec::with_capacity(size);
        while batch_cases.len() < size {
            let case = generate(rng, rule_set);
            let text = serde_json::to_string(&json!([case.event, case.receipt, case.workflow])).unwrap();
            if !ascii_only || text.is_ascii() {
                batch_cases.push(case);
            }
        }
        let n = batch_cases.len();
        let encoded = encode(rule_set, &batch_cases);
        let ascii = encoded.text.len() == encoded.units;
        assert!(ascii || !ascii_only);
        counts.ascii_batches += ascii as usize;
        let Answered { ints, numbers, hex, decided } = answer(rule_set, &encoded, n, work);
        let mut fast = 0;
        for (i, case) in batch_cases.iter().enumerate() {
            let slow = decide(
                rule_set,
                &case.event,
                case.receipt.as_ref().map(|r| r as &dyn Source),
                case.workflow.as_ref().map(|w| w as &dyn Source),
            );
            let answer = &ints[i * batch::RESULT_INTS..(i + 1) * batch::RESULT_INTS];
            let context = || format!("{}: {:?}", rule_set.id, serde_json::to_string(&json!({"event": case.event, "receipt": case.receipt, "workflow": case.workflow})));
            match (&slow, answer[0]) {
                (Ok(decision), batch::DECIDED) => {
                    let rebuilt = rebuild(
                        rule_set,
                        case,
                        answer,
                        &numbers[i * batch::RESULT_NUMBERS..(i + 1) * batch::RESULT_NUMBERS],
                        &hex[i * batch::FINGERPRINT_BYTES..(i + 1) * batch::FINGERPRINT_BYTES],
                    );
                    assert_eq!(rebuilt, serde_json::to_value(decision).unwrap(), "{}", context());
                    counts.outcomes[answer[1] as usize] += 1;
                    counts.decided += 1;
                    fast += 1;
                }
                (Ok(_), _) => {
                    assert!(!plain(case), "a plain input was left to the slow path: {}", context());
                    counts.left_to_decide += 1;
                }
                (Err(_), code) => {
                    assert_eq!(code, batch::SLOW, "decide refuses what the batch path decided: {}", context());
                    counts.refused += 1;
                }
            }
        }
        assert_eq!(decided, fast);
        done += n;
    }
}

#[test]
fn the_batch_path_decides_as_decide_does_on_every_builtin_rule_set() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut work = Work::default();
    for (name, version) in BUILTINS {
        let rule_set = RuleSet::builtin_version(name, Some(version)).unwrap();
        let mut counts = Counts::default();
        run(rule_set, &mut rng, 6000, &mut work, &mut counts);
        eprintln!("{name} v{version}: {counts:?}");
        // Each kind of answer is reached, so the comparison means something.
        assert!(counts.decided > 1000, "{name}: {counts:?}");
        assert!(counts.refused > 500, "{name}: {counts:?}");
        assert!(counts.ascii_batches > 5, "{name}: {counts:?}");
        for (outcome, n) in batch::OUTCOMES.iter().zip(counts.outcomes) {
            let reachable = (0..rule_set.events().len())
                .flat_map(|e| (0..rule_set.state_count()).filter_map(move |s| rule_set.rule_for(e, s).ok()))
                .any(|r| {
                matches!(
                    (&r.answer, *outcome),
                    (idemflow::ruleset::Answer::Applied(_), "applied")
                        | (idemflow::ruleset::Answer::AlreadyApplied, "already-applied")
                        | (idemflow::ruleset::Answer::Stale, "stale")
                        | (_, "duplicate-delivery")
                )
            });
            assert!(!reachable || n > 0, "{name} v{version}: no {outcome} decided: {counts:?}");
        }
    }
}

#[test]
fn a_lone_surrogate_pair_split_across_two_strings_is_left_to_decide() {
    // "a\u{D83D}" then "\u{DE00}b": encodeInto joins the two halves into one
    // valid pair; the unit counts say the boundary falls inside it.
    let rule_set = RuleSet::builtin("deposit-swap").unwrap();
    let layout = Layout::new(rule_set);
    let mut entries = vec![batch::ABSENT; layout.entries()];
    entries[0] = batch::HAS_WORKFLOW;
    let text = "evt-a\u{1F600}bDEPOSIT_DETECTEDswap-1";
    entries[layout.event(0)] = 6; // "evt-a" + the high half
    entries[layout.event(1)] = 18; // the low half + "bDEPOSIT_DETECTED"... misaligned on purpose
    entries[layout.event(2)] = 6;
    let mut ints = vec![0; batch::RESULT_INTS];
    let mut numbers = vec![0.0; batch::RESULT_NUMBERS];
    let mut hex = vec![0; batch::FINGERPRINT_BYTES];
    batch::decide_batch(
        rule_set,
        &batch::Prepared::new(rule_set),
        1,
        Batch { text: text.as_bytes(), entries: &entries, numbers: &[0.0], ascii: false },
        Answers { ints: &mut ints, numbers: &mut numbers, fingerprints: &mut hex },
        &mut Work::default(),
    )
    .unwrap();
    assert_eq!(ints[0], batch::SLOW);
}

#[test]
fn regions_too_small_for_the_count_are_refused() {
    let rule_set = RuleSet::builtin("deposit-swap").unwrap();
    let result = batch::decide_batch(
        rule_set,
        &batch::Prepared::new(rule_set),
        2,
        Batch { text: b"", entries: &[0; 10], numbers: &[0.0; 2], ascii: true },
        Answers { ints: &mut [0; 10], numbers: &mut [0.0; 4], fingerprints: &mut [0; 136] },
        &mut Work::default(),
    );
    assert_eq!(result.unwrap_err().code(), "INVALID_ARGUMENT");
}

#[test]
fn a_batch_prepared_for_another_rule_set_is_refused() {
    let deposit = RuleSet::builtin("deposit-swap").unwrap();
    let order = RuleSet::builtin("order-shipment").unwrap();
    let layout = Layout::new(order);
    let result = batch::decide_batch(
        order,
        &batch::Prepared::new(deposit),
        1,
        Batch { text: b"", entries: &vec![batch::HOST_SLOW; layout.entries()], numbers: &[0.0], ascii: true },
        Answers { ints: &mut [0; 5], numbers: &mut [0.0; 2], fingerprints: &mut [0; 68] },
        &mut Work::default(),
    );
    assert_eq!(result.unwrap_err().code(), "INVALID_ARGUMENT");
}


#[test]
fn text_checks_and_json_strings_agree_with_their_definitions_on_random_strings() {
    // The ASCII shortcuts in `check_text` and `write_string` against what they stand for.
    use idemflow::field::FieldKind;
    use idemflow::input::Input;
    let alphabet = ['a', 'Z', '0', ' ', '"', '\\', '\t', '\n', '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', '\u{a0}', 'é', '\u{2028}', '\u{3000}', '\u{feff}', '😀', '~', '/'];
    let js_whitespace = |c: char| matches!(c, '\u{9}'..='\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}' | '\u{feff}');
    let mut rng = Rng(11);
    for _ in 0..50_000 {
        let len = rng.below(6);
        let text: String = (0..len).map(|_| *rng.pick(&alphabet)).collect();
        let valid = !text.is_empty() && !text.chars().any(|c| matches!(c as u32, 0x00..=0x1f | 0x7f..=0x9f)) && !text.chars().all(js_whitespace);
        assert_eq!(FieldKind::Text.check(Input::Text(text.clone())).is_ok(), valid, "{text:?}");
        assert_eq!(FieldKind::Text.accepts(&text), valid, "{text:?}");
        let mut written = String::new();
        idemflow::jcs::write_string(&mut written, &text);
        assert_eq!(written, serde_json::to_string(&text).unwrap(), "{text:?}");
    }
}

#[test]
fn validate_only_items_answer_as_validate_does() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut work = Work::default();
    for (name, version) in BUILTINS {
        let rule_set = RuleSet::builtin_version(name, Some(version)).unwrap();
        let (mut valid, mut refused) = (0, 0);
        for _ in 0..20 {
            // The events alone, as normalizeEvent lays them out.
            let cases: Vec<Case> = (0..100)
                .map(|_| Case { event: generate(&mut rng, rule_set).event, receipt: None, workflow: None })
                .collect();
            let mut encoded = encode(rule_set, &cases);
            let per_item = Layout::new(rule_set).entries();
            for i in 0..cases.len() {
                encoded.entries[i * per_item] = batch::VALIDATE_ONLY;
            }
            let ints = answer(rule_set, &encoded, cases.len(), &mut work).ints;
            for (i, case) in cases.iter().enumerate() {
                let answer = &ints[i * batch::RESULT_INTS..(i + 1) * batch::RESULT_INTS];
                let context = || format!("{name} v{version}: {:?}", serde_json::to_string(&case.event));
                match validate(rule_set, &case.event) {
                    Ok(event) => {
                        valid += 1;
                        if plain(case) {
                            assert_eq!(answer[0], batch::DECIDED, "a plain valid event was left to the slow path: {}", context());
                        }
                        if answer[0] == batch::DECIDED {
                            assert_eq!(answer[4] as usize, event.event_type, "{}", context());
                        }
                    }
                    Err(_) => {
                        refused += 1;
                        assert_eq!(answer[0], batch::SLOW, "validate refuses what the batch path found valid: {}", context());
                    }
                }
            }
        }
        assert!(valid > 300 && refused > 100, "{name} v{version}: {valid} valid, {refused} refused");
    }
}
