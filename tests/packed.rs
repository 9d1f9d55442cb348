#![cfg(not(target_arch = "wasm32"))]
//! The packed input (src/packed.rs) on generated inputs, hostile values
//! included, for every built-in rule set: the ways a host may lay one value
//! out (its UTF-8 or UTF-16 length, the event's string repeated as SAME, a
//! type or status named by index) decide alike, and a batch decides each of
//! its items as that item alone. The decisions themselves are pinned by the
//! shared vectors (tests/vectors.rs).

// idemflow::Error is large by design.
#![allow(clippy::result_large_err)]

use serde_json::{json, Map, Value};

use idemflow::decide::{decide_batch, decide_item, BatchWork, Decided, Work};
use idemflow::field::FieldKind;
use idemflow::fingerprint;
use idemflow::input::Input;
use idemflow::packed::{self, Item, Layout, Packed, Packer, Spans};
use idemflow::{Error, RuleSet};

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

const TEXTS: &[&str] =
    &["ref-a", "ref-b", "btc-mainnet:tx-9f:vout-0", "réf-☃", "😀-emoji", "a\"quote\\", "2026-11", "2026-12"];
const UNITS: &[&str] = &["1", "250", "1000000", "99999999999999999999999999"];
const BUILTINS: [(&str, u64); 5] =
    [("deposit-swap", 1), ("deposit-swap", 2), ("order-shipment", 1), ("order-shipment", 2), ("subscription", 1)];

/// A value a host can meet in a field, mostly valid.
fn field_value(rng: &mut Rng, units: bool, valid_percent: usize) -> Option<Value> {
    if rng.chance(valid_percent) {
        return Some(Value::String(rng.pick(if units { UNITS } else { TEXTS }).to_string()));
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
    if rng.chance(valid) {
        event.insert("eventId".into(), json!(rng.pick(&ids)));
    } else if let Some(v) = field_value(rng, false, 0) {
        event.insert("eventId".into(), v);
    }
    let event_type = rng.below(rule_set.events().len());
    let type_name =
        if rng.chance(valid) { json!(rule_set.events()[event_type].name) } else { json!(rng.pick(&["NOPE", "", "x"])) };
    event.insert("type".into(), type_name);
    if rng.chance(valid) {
        event.insert("workflowId".into(), json!(rng.pick(&workflows)));
    } else if let Some(v) = field_value(rng, false, 0) {
        event.insert("workflowId".into(), v);
    }
    for field in rule_set.fields() {
        if let Some(v) = field_value(rng, field.kind == FieldKind::Units, valid.max(90)) {
            event.insert(field.name.clone(), v);
        }
    }
    let receipt = rng.chance(25).then(|| {
        let mut receipt = Map::new();
        match rng.below(5) {
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
        let computed = idemflow::event::validate(rule_set, &event).ok().map(|e| fingerprint::fingerprint(rule_set, &e));
        let stored = match (rng.below(6), computed) {
            (0, _) => json!(format!("fp1:{}", "0".repeat(64))),
            (1, _) => json!("garbage"),
            (2, _) => json!(null),
            (_, Some(fp)) => json!(fp),
            (_, None) => json!("fp1:x"),
        };
        receipt.insert("fingerprint".into(), stored);
        if rng.chance(50) {
            let results = [
                json!({ "operationIds": ["op:1"], "status": "done", "revision": 3 }),
                json!({ "operationIds": [], "status": null, "revision": null }),
                json!({ "operationIds": [""] }),
                json!("{\"operationIds\":[]}"),
                json!([1]),
            ];
            receipt.insert("result".into(), rng.pick(&results).clone());
            receipt.insert("outcome".into(), json!(rng.pick(&["applied", "stale", "nope"])));
            receipt.insert("recordedAt".into(), rng.pick(&[json!(1700000000000u64), json!(-1), json!(null)]).clone());
        }
        receipt
    });
    let workflow = rng.chance(80).then(|| {
        let mut workflow = Map::new();
        let id =
            if rng.chance(90) { event.get("workflowId").cloned().unwrap_or(json!("x")) } else { json!("other-wf") };
        workflow.insert("id".into(), id);
        let status = if rng.chance(95) {
            json!(rule_set.statuses()[rng.below(rule_set.statuses().len())].name)
        } else {
            json!(rng.pick(&["nope", ""]))
        };
        workflow.insert("status".into(), status);
        let revisions = [
            json!(0),
            json!(1),
            json!(41),
            json!(9007199254740991u64),
            json!(9007199254740990u64),
            json!(-1),
            json!(1.5),
            json!("3"),
        ];
        workflow.insert(
            "revision".into(),
            if rng.chance(90) { revisions[rng.below(4)].clone() } else { rng.pick(&revisions).clone() },
        );
        for field in rule_set.fields() {
            // Mostly what the event says, so guards pass and transitions apply.
            let value = if rng.chance(75) {
                event.get(&field.name).cloned()
            } else {
                field_value(rng, field.kind == FieldKind::Units, 70)
            };
            if let Some(v) = value {
                workflow.insert(field.name.clone(), v);
            }
        }
        workflow
    });
    Case { event, receipt, workflow }
}

/// Cases laid out as the package's JS lays objects out: lengths in UTF-16
/// units, the event's string as SAME where a receipt's or workflow's repeats
/// it, the type and status by index, and a structured result as its JSON.
struct HostLayout {
    entries: Vec<i32>,
    numbers: Vec<f64>,
    text: String,
}

impl HostLayout {
    fn new() -> HostLayout {
        HostLayout { entries: Vec::new(), numbers: Vec::new(), text: String::new() }
    }

    fn value(&mut self, value: Option<&Value>) -> i32 {
        match value {
            None => packed::ABSENT,
            Some(Value::Null) => packed::NULL,
            Some(Value::Number(n)) => {
                self.numbers.push(n.as_f64().unwrap());
                packed::NUMBER
            }
            Some(Value::String(s)) => {
                self.text.push_str(s);
                s.encode_utf16().count() as i32
            }
            Some(Value::Bool(_)) => packed::OTHER - packed::KINDS.iter().position(|k| *k == "boolean").unwrap() as i32,
            Some(Value::Array(_)) => packed::OTHER - packed::KINDS.iter().position(|k| *k == "array").unwrap() as i32,
            Some(Value::Object(_)) => packed::OTHER - packed::KINDS.iter().position(|k| *k == "object").unwrap() as i32,
        }
    }

    fn known(&mut self, value: Option<&Value>, names: &[&str]) -> i32 {
        match value.and_then(Value::as_str).and_then(|name| names.iter().position(|n| *n == name)) {
            Some(i) => packed::KNOWN - i as i32,
            None => self.value(value),
        }
    }

    fn same(&mut self, value: Option<&Value>, event_value: Option<&Value>) -> i32 {
        match (value, event_value) {
            (Some(Value::String(a)), Some(Value::String(b))) if a == b => packed::SAME,
            _ => self.value(value),
        }
    }

    fn item(&mut self, rule_set: &RuleSet, case: &Case) {
        let arg =
            |record: &Option<Map<String, Value>>| if record.is_some() { packed::ARG_OBJECT } else { packed::ARG_NULL };
        self.entries.push(
            packed::ARG_OBJECT | arg(&case.receipt) << packed::ARG_BITS | arg(&case.workflow) << (2 * packed::ARG_BITS),
        );
        let types: Vec<&str> = rule_set.events().iter().map(|e| e.name.as_str()).collect();
        let statuses: Vec<&str> = rule_set.statuses().iter().map(|s| s.name.as_str()).collect();
        let event = &case.event;
        let mut row = Vec::new();
        row.push(self.value(event.get("eventId")));
        row.push(self.known(event.get("type"), &types));
        row.push(self.value(event.get("workflowId")));
        for field in rule_set.fields() {
            row.push(self.value(event.get(&field.name)));
        }
        let empty = Map::new();
        let receipt = case.receipt.as_ref().unwrap_or(&empty);
        row.push(self.same(receipt.get("eventId"), event.get("eventId")));
        for key in ["fingerprint", "result", "outcome", "recordedAt"] {
            row.push(match receipt.get(key) {
                Some(structured @ (Value::Object(_) | Value::Array(_))) => {
                    self.value(Some(&Value::String(structured.to_string())))
                }
                value => self.value(value),
            });
        }
        let workflow = case.workflow.as_ref().unwrap_or(&empty);
        row.push(self.same(workflow.get("id"), event.get("workflowId")));
        row.push(self.known(workflow.get("status"), &statuses));
        row.push(self.value(workflow.get("revision")));
        for field in rule_set.fields() {
            row.push(self.same(workflow.get(&field.name), event.get(&field.name)));
        }
        self.entries.extend(row);
    }

    fn packed(&self) -> Packed<'_> {
        // A host says lengths are bytes only when the whole text is ASCII.
        let ascii = self.text.is_ascii();
        Packed { text: &self.text, entries: &self.entries, numbers: &self.numbers, byte_lengths: ascii }
    }
}

/// Every item of a packed batch decided one at a time.
fn one_by_one(rule_set: &RuleSet, packed: &Packed, count: usize) -> Vec<(Result<Decided, Error>, String)> {
    let layout = Layout::new(rule_set);
    let mut spans = Spans::new();
    packed::locate(packed, layout.entries(), count, |s| layout.same_as(s), &mut spans);
    let mut work = Work::default();
    (0..count)
        .map(|i| {
            let item = Item::of(packed, &spans, layout.entries(), i);
            let mut fp = [0u8; fingerprint::LEN];
            let answer = decide_item(rule_set, &item, layout, &mut fp, &mut work.canonical).map(|(_, d)| d);
            let fp = if answer.is_ok() { String::from_utf8(fp.to_vec()).unwrap() } else { String::new() };
            (answer, fp)
        })
        .collect()
}

#[test]
fn every_way_a_host_lays_a_value_out_decides_alike_one_by_one_and_in_batches() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (name, version) in BUILTINS {
        let rule_set = RuleSet::builtin_version(name, Some(version)).unwrap();
        let layout = Layout::new(rule_set);
        let mut outcomes = [0usize; 4];
        let mut errors = 0;
        for round in 0..40 {
            let cases: Vec<Case> = (0..1 + rng.below(40)).map(|_| generate(&mut rng, rule_set)).collect();
            let mut packer = Packer::default();
            let mut host = HostLayout::new();
            for case in &cases {
                packer.item(rule_set, &case.event, case.receipt.as_ref(), case.workflow.as_ref());
                host.item(rule_set, case);
            }
            assert_eq!(host.entries.len(), cases.len() * layout.entries());
            let rust = one_by_one(rule_set, &packer.packed(), cases.len());
            let js = one_by_one(rule_set, &host.packed(), cases.len());
            // The whole batch in one call, four fingerprints at a time.
            let mut batched = vec![None; cases.len()];
            let mut spans = Spans::new();
            let packed = host.packed();
            packed::locate(&packed, layout.entries(), cases.len(), |s| layout.same_as(s), &mut spans);
            decide_batch(rule_set, &packed, &spans, cases.len(), &mut BatchWork::default(), |i, answer, fp| {
                let fp = if answer.is_ok() { String::from_utf8(fp.to_vec()).unwrap() } else { String::new() };
                assert!(batched[i].replace((answer, fp)).is_none(), "item {i} answered twice");
            });
            let batched: Vec<_> = batched.into_iter().map(|answer| answer.expect("every item is answered")).collect();
            for (i, case) in cases.iter().enumerate() {
                let label = || {
                    format!(
                        "{name} v{version} round {round} item {i}: {:?} {:?} {:?}",
                        case.event, case.receipt, case.workflow
                    )
                };
                assert_eq!(js[i], rust[i], "laid out as the host does: {}", label());
                assert_eq!(batched[i], rust[i], "in a batch: {}", label());
                match &rust[i].0 {
                    Ok(decided) => outcomes[outcome_index(decided)] += 1,
                    Err(_) => errors += 1,
                }
            }
        }
        assert!(
            errors > 50 && outcomes.iter().filter(|n| **n > 0).count() >= 2,
            "{name} v{version}: {outcomes:?}, {errors} errors"
        );
    }
}

fn outcome_index(decided: &Decided) -> usize {
    idemflow::outcome::OUTCOMES.iter().position(|o| *o == decided.outcome).unwrap()
}

#[test]
fn two_lone_halves_in_adjacent_strings_are_not_the_pair_they_encode_as() {
    // "evt-a\u{D83D}" then "\u{DE00}b": an encoder joins the halves into one
    // valid pair; the unit counts say the boundary falls inside it.
    let rule_set = RuleSet::builtin("deposit-swap").unwrap();
    let layout = Layout::new(rule_set);
    let mut entries = vec![packed::ABSENT; layout.entries()];
    entries[0] = packed::ARG_OBJECT | packed::ARG_NULL << packed::ARG_BITS | packed::ARG_NULL << (2 * packed::ARG_BITS);
    entries[layout.event(packed::EVENT_ID)] = 6; // "evt-a" and the high half
    entries[layout.event(packed::EVENT_TYPE)] = packed::KNOWN;
    entries[layout.event(packed::EVENT_WORKFLOW_ID)] = 2; // the low half and "b"
    let packed = Packed { text: "evt-a\u{1F600}b", entries: &entries, numbers: &[], byte_lengths: false };
    let mut spans = Spans::new();
    packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut spans);
    let item = Item::of(&packed, &spans, layout.entries(), 0);
    assert_eq!(item.read(layout.event(packed::EVENT_ID)), Input::IllFormedText);
    assert_eq!(item.read(layout.event(packed::EVENT_WORKFLOW_ID)), Input::IllFormedText);
    let error = decide_item(rule_set, &item, layout, &mut [0; fingerprint::LEN], &mut String::new()).err().unwrap();
    assert_eq!(error.details()["field"], "eventId");
    assert!(error.to_string().contains("lone surrogate"), "{error}");
}

#[test]
fn entries_the_text_cannot_hold_are_refused_without_a_panic() {
    // Lengths past the text, numbers past their region, tags no host writes:
    // every item is answered, none decided from bytes it does not have.
    let rule_set = RuleSet::builtin("deposit-swap").unwrap();
    let layout = Layout::new(rule_set);
    let mut rng = Rng(7);
    for _ in 0..20_000 {
        let count = 1 + rng.below(3);
        let entries: Vec<i32> = (0..count * layout.entries())
            .map(|_| match rng.below(4) {
                0 => rng.below(40) as i32,
                1 => -(rng.below(80) as i32),
                2 => packed::UNREADABLE - rng.below(2000) as i32,
                _ => rng.next() as i32,
            })
            .collect();
        let text: String = (0..rng.below(60)).map(|_| *rng.pick(&['a', 'é', '😀', '"'])).collect();
        let numbers: Vec<f64> = (0..rng.below(3)).map(|i| i as f64).collect();
        for byte_lengths in [true, false] {
            let packed = Packed { text: &text, entries: &entries, numbers: &numbers, byte_lengths };
            let mut spans = Spans::new();
            packed::locate(&packed, layout.entries(), count, |s| layout.same_as(s), &mut spans);
            decide_batch(rule_set, &packed, &spans, count, &mut BatchWork::default(), |_, answer, _| {
                if let Err(error) = answer {
                    let _ = error.to_json();
                }
            });
        }
    }
}

#[test]
fn text_checks_and_json_strings_agree_with_their_definitions_on_random_strings() {
    // The ASCII shortcuts in `check_text` and `write_string` against what they stand for.
    let alphabet = [
        'a', 'Z', '0', ' ', '"', '\\', '\t', '\n', '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', '\u{a0}', 'é',
        '\u{2028}', '\u{3000}', '\u{feff}', '😀', '~', '/',
    ];
    let js_whitespace = |c: char| matches!(c, '\u{9}'..='\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}' | '\u{feff}');
    let mut rng = Rng(11);
    for _ in 0..50_000 {
        let len = rng.below(6);
        let text: String = (0..len).map(|_| *rng.pick(&alphabet)).collect();
        let valid = !text.is_empty()
            && !text.chars().any(|c| matches!(c as u32, 0x00..=0x1f | 0x7f..=0x9f))
            && !text.chars().all(js_whitespace);
        assert_eq!(FieldKind::Text.check(Input::Text(&text)).is_ok(), valid, "{text:?}");
        let mut written = String::new();
        idemflow::jcs::write_string(&mut written, &text);
        assert_eq!(written, serde_json::to_string(&text).unwrap(), "{text:?}");
    }
}
