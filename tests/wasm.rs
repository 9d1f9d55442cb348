#![cfg(target_arch = "wasm32")]
//! Layer 2: the shared vectors through the wasm binding in Node
//! (wasm-bindgen-test): items laid out in a `Decider`'s regions as the
//! package's JS lays them out (here by the core's own packer), one call, the
//! answers read back; rule sets, the outbox policy and memory. The hazards of
//! JavaScript objects (getters, proxies, lone surrogates) are the package's,
//! which reads objects: tests/js/test/object-input.test.mjs.

use js_sys::{JsString, Reflect, JSON};
use serde_json::{json, Map, Value};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::wasm_bindgen_test;

use idemflow::answer::{ANSWER_INTS, ANSWER_NUMBERS, DECIDED};
use idemflow::binding::{self, CompiledRuleSet, Decider};
use idemflow::outcome::OUTCOMES;
use idemflow::packed::Packer;
use idemflow::RuleSet;

#[path = "hostile/definitions.rs"]
mod hostile;

#[path = "shared/jcs.rs"]
mod shared_jcs;
use shared_jcs::{SplitMix, JCS_FILES, JCS_NUMBERS};

const FINGERPRINT: &str = include_str!("vectors/fingerprint.json");
const VALIDATION: &str = include_str!("vectors/validation.json");
const DECISIONS: &str = include_str!("vectors/decisions.json");
const RULESETS: &str = include_str!("vectors/rulesets.json");
const OUTBOX: &str = include_str!("vectors/outbox.json");

// ------------------------------------------------------------------ helpers

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON")
}

fn cases(text: &str) -> Vec<Value> {
    parse(text)["cases"].as_array().expect("vector file has cases").clone()
}

fn name(case: &Value) -> &str {
    case["name"].as_str().expect("case has a name")
}

/// A JSON text argument as the package passes it: a JS string.
fn text_arg(text: &str) -> JsValue {
    JsValue::from_str(text)
}

fn builtin(name: &str) -> CompiledRuleSet {
    binding::builtin_rule_set(name, None).unwrap_or_else(|_| panic!("built-in {name}"))
}

/// The case's built-in rule set at the case's `ruleSetVersion` (the current one when absent).
fn rule_set(case: &Value) -> CompiledRuleSet {
    let name = case["ruleSet"].as_str().unwrap_or("deposit-swap");
    binding::builtin_rule_set(name, case["ruleSetVersion"].as_f64()).unwrap_or_else(|_| panic!("built-in {name}"))
}

fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().all(|(k, v)| a.get(k).is_some_and(|x| contains(x, v))),
        (Value::Array(a), Value::Array(e)) => a.len() == e.len() && a.iter().zip(e).all(|(x, v)| contains(x, v)),
        _ => actual == expected,
    }
}

/// What the binding threw, read back as JS sees it.
struct Thrown {
    code: String,
    disposition: String,
    details: Value,
    message: String,
}

fn thrown(label: &str, error: JsValue) -> Thrown {
    let error = error.dyn_into::<js_sys::Error>().unwrap_or_else(|v| panic!("{label}: threw a non-Error {v:?}"));
    let get = |key: &str| Reflect::get(&error, &JsValue::from_str(key)).expect("readable");
    let details = JSON::stringify(&get("details")).expect("details are JSON");
    Thrown {
        code: get("idemflowCode").as_string().unwrap_or_else(|| panic!("{label}: no idemflowCode")),
        disposition: get("disposition").as_string().unwrap_or_else(|| panic!("{label}: no disposition")),
        details: parse(&String::from(details)),
        message: error.message().into(),
    }
}

/// Checks a thrown error against `{code, disposition?, details?, field?, path?}`.
fn assert_thrown(label: &str, error: JsValue, expected: &Value) -> Thrown {
    let t = thrown(label, error);
    assert_eq!(t.code, expected["code"].as_str().unwrap(), "{label}: code ({})", t.message);
    if let Some(disposition) = expected.get("disposition") {
        assert_eq!(t.disposition, disposition.as_str().unwrap(), "{label}: disposition");
    }
    if let Some(subset) = expected.get("details") {
        assert!(contains(&t.details, subset), "{label}: details {} do not contain {subset}", t.details);
    }
    for key in ["field", "path"] {
        if let Some(value) = expected.get(key) {
            assert_eq!(&t.details[key], value, "{label}: details.{key} ({})", t.message);
        }
    }
    assert!(!t.message.is_empty(), "{label}: message");
    t
}

fn invalid_event(field: &str) -> Value {
    json!({ "code": "INVALID_EVENT", "disposition": "reject", "field": field })
}

fn expect_err<T>(label: &str, result: Result<T, JsValue>) -> JsValue {
    match result {
        Ok(_) => panic!("{label}: expected a thrown error"),
        Err(error) => error,
    }
}

fn expected_decision(case: &Value) -> Value {
    let (event, expect) = (&case["event"], &case["expect"]);
    let mut decision = json!({
        "outcome": expect["outcome"], "eventId": event["eventId"], "workflowId": event["workflowId"],
        "eventType": event["type"], "fingerprint": expect["fingerprint"], "writeSet": expect["writeSet"],
    });
    if let Some(original) = expect.get("original") {
        decision["original"] = original.clone();
    }
    decision
}

/// The seed's confirmation as deposit-swap v3 and v4 (the current version) take it:
/// the chain watcher's second observation of the deposit (its detection was 1).
fn seed() -> Value {
    json!({ "eventId": "chain-watcher:event-001", "workflowId": "swap-42", "type": "DEPOSIT_CONFIRMED",
            "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000", "sequence": 2 })
}

const SEED_FINGERPRINT: &str = "fp1:d8e288dea415099a5dc24517655e59c8358a1b1154054650d2816742507359fa";

/// The size of the wasm linear memory in bytes (it only ever grows).
fn memory_bytes() -> f64 {
    (core::arch::wasm32::memory_size(0) * 65536) as f64
}

/// `null` is no record; an object is one; anything else cannot be laid out
/// (the package refuses it before: object-input.test.mjs).
fn record(value: &Value) -> Option<Option<&Map<String, Value>>> {
    match value {
        Value::Null => Some(None),
        Value::Object(map) => Some(Some(map)),
        _ => None,
    }
}

/// What a `Decider` answered for one item.
#[derive(Debug)]
enum Answered {
    Decided { outcome: &'static str, fingerprint: String, revisions: (f64, f64), original: Option<Value> },
    Failed(Value),
}

/// The binding driven as the package's JS drives it: a batch laid out in a
/// Decider's regions (views over its pointers), one call, answers read back.
struct Host {
    decider: Decider,
}

impl Host {
    fn new() -> Host {
        Host { decider: Decider::new() }
    }

    /// Copies what `packer` laid out into the regions; the text's length.
    fn load(&mut self, packer: &Packer, items: usize) -> u32 {
        let text = packer.text.as_bytes();
        self.decider
            .reserve(items as u32, packer.entries.len() as u32, packer.numbers.len() as u32, text.len() as u32)
            .map_err(|e| thrown("reserve", e).message)
            .unwrap();
        let regions = self.decider.regions();
        // SAFETY: each region is a live allocation of at least the length reserved above,
        // in this module's memory, which nothing else touches during the copy.
        unsafe {
            std::ptr::copy_nonoverlapping(packer.entries.as_ptr(), regions[0] as *mut i32, packer.entries.len());
            std::ptr::copy_nonoverlapping(packer.numbers.as_ptr(), regions[2] as *mut f64, packer.numbers.len());
            std::ptr::copy_nonoverlapping(text.as_ptr(), regions[4] as *mut u8, text.len());
        }
        text.len() as u32
    }

    /// Decides the `count` items `packer` laid out.
    fn decide(&mut self, rules: &CompiledRuleSet, packer: &Packer, count: usize) -> Vec<Answered> {
        let text_len = self.load(packer, count);
        let extra_len =
            self.decider.decide(rules, count as u32, text_len, true).map_err(|e| thrown("decide", e).message).unwrap();
        let regions = self.decider.regions();
        // SAFETY: as in `load`: the answer regions hold at least `count` answers after the call.
        let (ints, numbers, fingerprints, extra) = unsafe {
            (
                std::slice::from_raw_parts(regions[6] as *const i32, count * ANSWER_INTS).to_vec(),
                std::slice::from_raw_parts(regions[8] as *const f64, count * ANSWER_NUMBERS).to_vec(),
                std::slice::from_raw_parts(regions[10] as *const u8, count * 68).to_vec(),
                std::slice::from_raw_parts(self.decider.extra_pointer() as *const u8, extra_len as usize).to_vec(),
            )
        };
        (0..count)
            .map(|i| {
                let a = &ints[i * ANSWER_INTS..(i + 1) * ANSWER_INTS];
                let extra = (a[6] > 0)
                    .then(|| parse(std::str::from_utf8(&extra[a[5] as usize..(a[5] + a[6]) as usize]).unwrap()));
                if a[0] != DECIDED {
                    return Answered::Failed(extra.expect("an error's JSON"));
                }
                Answered::Decided {
                    outcome: OUTCOMES[a[1] as usize].as_str(),
                    fingerprint: String::from_utf8(fingerprints[i * 68..(i + 1) * 68].to_vec()).unwrap(),
                    revisions: (numbers[i * ANSWER_NUMBERS], numbers[i * ANSWER_NUMBERS + 1]),
                    original: extra,
                }
            })
            .collect()
    }
}

/// A case's inputs laid out, or `None` when a record is neither an object nor null.
fn laid_out(rules: &RuleSet, packer: &mut Packer, case: &Value) -> Option<()> {
    let event = case["event"].as_object()?;
    packer.item(rules, event, record(&case["receipt"])?, record(&case["workflow"])?);
    Some(())
}

fn native_rule_set(case: &Value) -> &'static RuleSet {
    RuleSet::builtin_version(case["ruleSet"].as_str().unwrap_or("deposit-swap"), case["ruleSetVersion"].as_u64())
        .unwrap()
}

fn check_answer(case: &Value, answer: &Answered, via: &str) {
    let label = format!("{} (v{} via {via})", name(case), case["ruleSetVersion"]);
    let expect = &case["expect"];
    match (answer, expect.get("error")) {
        (Answered::Decided { outcome, fingerprint, original, revisions }, None) => {
            assert_eq!(*outcome, expect["outcome"], "{label}");
            assert_eq!(fingerprint, &expect["fingerprint"], "{label}");
            assert_eq!(original.as_ref(), expect.get("original"), "{label}");
            // The revision read and the one written, when the write set updates the workflow.
            let workflow = &expect["writeSet"]["workflow"];
            if !workflow.is_null() {
                let read = workflow["expect"]["revision"].as_f64().unwrap_or(0.0);
                assert_eq!(*revisions, (read, workflow["set"]["revision"].as_f64().unwrap()), "{label}");
            }
        }
        (Answered::Failed(error), Some(expected)) => {
            assert_eq!(error["code"], expected["code"], "{label}: {error}");
            if let Some(disposition) = expected.get("disposition") {
                assert_eq!(&error["disposition"], disposition, "{label}");
            }
            if let Some(details) = expected.get("details") {
                assert!(
                    contains(&error["details"], details),
                    "{label}: details {} do not contain {details}",
                    error["details"]
                );
            }
        }
        (answer, expected) => panic!("{label}: expected {expected:?}, answered {answer:?}"),
    }
}

// ------------------------------------------------------------------ vectors

/// One event laid out alone (no receipt, no workflow).
fn one_event(rules: &RuleSet, event: &Value) -> Packer {
    let mut packer = Packer::default();
    packer.item(rules, event.as_object().expect("an object"), None, None);
    packer
}

#[wasm_bindgen_test]
fn fingerprint_vectors_through_the_decider() {
    let mut host = Host::new();
    for case in cases(FINGERPRINT) {
        let (rules, native) = (rule_set(&case), native_rule_set(&case));
        let packer = one_event(native, &case["event"]);
        let text_len = host.load(&packer, 1);
        assert!(host.decider.validate(&rules, text_len, true, None).is_ok(), "{}", name(&case));
        let fp = host
            .decider
            .fingerprint(&rules, text_len, true)
            .unwrap_or_else(|e| panic!("{}: {}", name(&case), thrown("", e).message));
        assert_eq!(fp, case["fingerprint"].as_str().unwrap(), "{}", name(&case));
    }
}

#[wasm_bindgen_test]
fn validation_vectors_through_validate_fingerprint_and_decide() {
    let mut host = Host::new();
    for case in cases(VALIDATION) {
        let (rules, native) = (rule_set(&case), native_rule_set(&case));
        let packer = one_event(native, &case["event"]);
        let text_len = host.load(&packer, 1);
        let validated = host.decider.validate(&rules, text_len, true, None);
        let fp = host.decider.fingerprint(&rules, text_len, true);
        let decided = host.decide(&rules, &packer, 1).remove(0);
        match case.get("error") {
            None => {
                assert!(validated.is_ok(), "{}", name(&case));
                assert!(fp.is_ok(), "{}", name(&case));
                if let Answered::Failed(error) = decided {
                    assert_ne!(error["code"], "INVALID_EVENT", "{}", name(&case));
                }
            }
            Some(expected) => {
                let label = |via: &str| format!("{} ({via})", name(&case));
                assert_thrown(&label("validate"), expect_err("", validated), expected);
                assert_thrown(&label("fingerprint"), expect_err("", fp), expected);
                let Answered::Failed(error) = decided else { panic!("{}: decided", label("decide")) };
                assert_eq!(error["code"], expected["code"], "{}", label("decide"));
                assert_eq!(error["details"]["field"], expected["field"], "{}", label("decide"));
            }
        }
    }
}

#[wasm_bindgen_test]
fn decision_vectors_through_the_decider_one_by_one_and_as_one_batch() {
    let mut host = Host::new();
    let cases = cases(DECISIONS);
    let mut batches: Vec<(String, Option<u64>, Packer, Vec<Value>)> = Vec::new();
    for case in &cases {
        let (rules, native) = (rule_set(case), native_rule_set(case));
        let mut packer = Packer::default();
        if laid_out(native, &mut packer, case).is_none() {
            continue;
        }
        check_answer(case, &host.decide(&rules, &packer, 1)[0], "one item");
        let key = (case["ruleSet"].as_str().unwrap_or("deposit-swap").to_string(), case["ruleSetVersion"].as_u64());
        match batches.iter_mut().find(|b| (b.0.as_str(), b.1) == (key.0.as_str(), key.1)) {
            Some(batch) => {
                laid_out(native, &mut batch.2, case);
                batch.3.push(case.clone());
            }
            None => batches.push((key.0, key.1, packer, vec![case.clone()])),
        }
    }
    // Every case of one rule set in one call: each item's answer is its own.
    for (name, version, packer, cases) in batches {
        let rules = binding::builtin_rule_set(&name, version.map(|v| v as f64)).map_err(|_| ()).unwrap();
        for (case, answer) in cases.iter().zip(host.decide(&rules, &packer, cases.len())) {
            check_answer(case, &answer, "a batch");
        }
    }
}

#[wasm_bindgen_test]
fn decision_vectors_through_decide_in_wasm() {
    // The write sets in full, from the same decider compiled to wasm.
    for case in cases(DECISIONS) {
        let (Some(receipt), Some(workflow)) = (record(&case["receipt"]), record(&case["workflow"])) else { continue };
        let result =
            idemflow::decide::decide(native_rule_set(&case), case["event"].as_object().unwrap(), receipt, workflow);
        match (result, case["expect"].get("error")) {
            (Ok(decision), None) => {
                assert_eq!(serde_json::to_value(decision).unwrap(), expected_decision(&case), "{}", name(&case))
            }
            (Err(error), Some(expected)) => assert_eq!(error.code(), expected["code"], "{}", name(&case)),
            (result, _) => panic!("{}: {result:?}", name(&case)),
        }
    }
}

#[wasm_bindgen_test]
fn broken_rule_set_vectors_through_verify_rule_set_and_load_rule_set() {
    let vectors = parse(RULESETS);
    for case in vectors["broken"].as_array().unwrap() {
        let text = case["definition"].to_string();
        let report = parse(
            &binding::verify_rule_set(text_arg(&text))
                .unwrap_or_else(|e| panic!("{}: {}", name(case), thrown("", e).message)),
        );
        assert_eq!(report["ok"], false, "{}", name(case));
        let properties = report["properties"].as_array().unwrap();
        assert_eq!(properties.len(), vectors["properties"].as_array().unwrap().len());
        for (property, listed) in properties.iter().zip(vectors["properties"].as_array().unwrap()) {
            assert_eq!(&property["name"], listed);
            let should_fail = property["name"] == case["failing"];
            assert_eq!(property["ok"], !should_fail, "{}: {property}", name(case));
            if should_fail {
                assert!(contains(&property["counterexample"], &case["counterexample"]), "{}: {property}", name(case));
            }
        }
        let refused = assert_thrown(
            name(case),
            expect_err(name(case), binding::load_rule_set(text_arg(&text))),
            &case["loadError"],
        );
        assert_eq!(refused.details["report"]["ok"], false, "{}", name(case));
    }
}

#[wasm_bindgen_test]
fn malformed_rule_set_vectors_are_thrown_with_their_path() {
    for case in parse(RULESETS)["malformed"].as_array().unwrap() {
        let text =
            case["definitionText"].as_str().map(str::to_string).unwrap_or_else(|| case["definition"].to_string());
        let label = |via: &str| format!("{} ({via})", name(case));
        assert_thrown(
            &label("verifyRuleSet"),
            expect_err(name(case), binding::verify_rule_set(text_arg(&text))),
            &case["error"],
        );
        assert_thrown(
            &label("loadRuleSet"),
            expect_err(name(case), binding::load_rule_set(text_arg(&text))),
            &case["error"],
        );
    }
}

#[wasm_bindgen_test]
fn rule_set_hash_vectors_through_load_rule_set() {
    for case in parse(RULESETS)["hashes"].as_array().unwrap() {
        let loaded = binding::load_rule_set(text_arg(case["definitionText"].as_str().unwrap()))
            .unwrap_or_else(|e| panic!("{}: {}", name(case), thrown("", e).message));
        assert_eq!(loaded.hash(), case["hash"].as_str().unwrap(), "{}", name(case));
    }
}

#[wasm_bindgen_test]
fn builtin_rule_sets_carry_their_id_version_hash_and_table() {
    for expected in parse(RULESETS)["builtins"].as_array().unwrap() {
        let name = expected["name"].as_str().unwrap();
        // Each listed version loads by its number; the current one also by name alone.
        let rules = binding::builtin_rule_set(name, expected["version"].as_f64())
            .unwrap_or_else(|_| panic!("built-in {name} v{}", expected["version"]));
        if expected["current"] == true {
            assert_eq!(builtin(name).hash(), expected["hash"].as_str().unwrap(), "{name}: the current version");
        }
        assert_eq!(rules.id(), expected["id"].as_str().unwrap());
        assert_eq!(rules.version(), expected["version"].as_f64().unwrap());
        assert_eq!(rules.hash(), expected["hash"].as_str().unwrap());
        let report = parse(&binding::verify_rule_set(text_arg(&rules.definition_json())).map_err(|_| ()).unwrap());
        assert_eq!(report["ok"], true);
        assert_eq!(report["ruleSet"]["hash"], expected["hash"]);
        assert!(rules.table_markdown().contains(&rules.hash()));
    }
    // One row per rule and event type: 24 in deposit-swap v1, 34 in v3, 40 in v4 (the current one: a
    // partial deposit's answer keeps the status, so its rules are one per status).
    let v1 = binding::builtin_rule_set("deposit-swap", Some(1.0)).unwrap_or_else(|_| panic!("deposit-swap v1"));
    assert_eq!(parse(&v1.table_json()).as_array().unwrap().len(), 24);
    let v3 = binding::builtin_rule_set("deposit-swap", Some(3.0)).unwrap_or_else(|_| panic!("deposit-swap v3"));
    assert_eq!(parse(&v3.table_json()).as_array().unwrap().len(), 34);
    assert_eq!(parse(&builtin("deposit-swap").table_json()).as_array().unwrap().len(), 40);
}

#[wasm_bindgen_test]
fn an_unknown_builtin_is_thrown_as_invalid_argument() {
    let error = expect_err("builtin", binding::builtin_rule_set("deposit_swap", None));
    assert_thrown("builtin", error, &json!({ "code": "INVALID_ARGUMENT", "disposition": "fatal" }));
}

#[wasm_bindgen_test]
fn error_codes_list_every_code_with_its_disposition() {
    assert_eq!(
        parse(&binding::error_codes()),
        json!({
            "INVALID_EVENT": "reject", "EVENT_ID_CONFLICT": "reconcile", "UNKNOWN_WORKFLOW": "retry",
            "IDENTITY_MISMATCH": "reconcile", "INVALID_TRANSITION": "reconcile", "OUTBOX_CONFLICT": "reconcile",
            "CONCURRENT_UPDATE": "retry", "INVALID_RECORD": "reconcile", "INVALID_ARGUMENT": "fatal",
            "RULESET_INVALID": "fatal", "STORE_UNAVAILABLE": "retry",
            "HANDLER_FAILED": "retry", "INVALID_PAYLOAD": "reject",
            "IDEMPOTENCY_KEY_CONFLICT": "reconcile", "IDEMPOTENCY_KEY_IN_PROGRESS": "retry",
            "WRITE_TOO_LARGE": "reconcile", "BOUND_EXCEEDED": "reconcile",
        })
    );
}

#[wasm_bindgen_test]
fn plan_deposit_confirmation_answers_as_the_seed_did() {
    let mut host = Host::new();
    let v1 = RuleSet::builtin_version("deposit-swap", Some(1)).unwrap();
    let mut plan = |event: &Value, status: Option<&str>| {
        let workflow = status.map(|status| {
            json!({ "id": "swap-42", "status": status, "revision": 3,
                    "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" })
        });
        let mut packer = Packer::default();
        packer.item(v1, event.as_object().unwrap(), None, workflow.as_ref().and_then(Value::as_object));
        let text_len = host.load(&packer, 1);
        host.decider.plan(text_len, true)
    };
    assert_eq!(plan(&seed(), Some("deposit")).map_err(|_| ()), Ok("advance".to_string()));
    assert_eq!(plan(&seed(), Some("success")).map_err(|_| ()), Ok("already-applied".to_string()));
    assert_thrown(
        "waiting",
        expect_err("waiting", plan(&seed(), Some("waiting"))),
        &json!({ "code": "INVALID_TRANSITION" }),
    );
    assert_thrown(
        "none",
        expect_err("none", plan(&seed(), None)),
        &json!({ "code": "UNKNOWN_WORKFLOW", "disposition": "retry" }),
    );
    let mut detected = seed();
    detected["type"] = json!("DEPOSIT_DETECTED");
    assert_thrown("type", expect_err("type", plan(&detected, Some("deposit"))), &invalid_event("type"));
}

// ------------------------------------------------- issue 9: hostile inputs

fn assert_limit(label: &str, error: JsValue, path: &str, limit: &str) {
    let t = thrown(label, error);
    assert_eq!(t.code, "RULESET_INVALID", "{label}: {}", t.message);
    assert_eq!(t.details["path"], json!(path), "{label}: {}", t.message);
    let reason = t.details["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with(&format!("limit {limit}: ")), "{label}: reason {reason:?} does not name {limit}");
}

fn a_valid_decision_still_works(label: &str) {
    let rules = builtin("deposit-swap");
    let workflow = json!({ "id": "swap-42", "status": "deposit", "revision": 2,
                           "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000", "sequence": 1 });
    let mut packer = Packer::default();
    packer.item(RuleSet::builtin("deposit-swap").unwrap(), seed().as_object().unwrap(), None, workflow.as_object());
    match &Host::new().decide(&rules, &packer, 1)[0] {
        Answered::Decided { outcome, fingerprint, .. } => {
            assert_eq!((*outcome, fingerprint.as_str()), ("applied", SEED_FINGERPRINT), "{label}");
        }
        failed => panic!("{label}: {failed:?}"),
    }
}

#[wasm_bindgen_test]
fn hostile_definitions_are_refused_by_their_limit_and_the_module_keeps_working() {
    for case in hostile::all() {
        let text = text_arg(&case.text);
        assert_limit(case.name, expect_err(case.name, binding::load_rule_set(text.clone())), case.path, case.limit);
        assert_limit(case.name, expect_err(case.name, binding::verify_rule_set(text)), case.path, case.limit);
        a_valid_decision_still_works(case.name);
    }
}

#[wasm_bindgen_test]
fn a_definition_past_the_reorder_budget_in_total_is_refused() {
    // The CPU bound is asserted natively and in JS (release wasm); here, that the refusal names the budget.
    for (types, statuses, limit) in [(15, 256, "maxReorderHistories"), (10, 18, "maxReorderConfigurations")] {
        let text = text_arg(&hostile::reorder_budget(types, statuses).to_string());
        let label = format!("{types} types from {statuses} statuses");
        assert_limit(&label, expect_err(&label, binding::load_rule_set(text.clone())), "$.order", limit);
        assert_limit(&label, expect_err(&label, binding::verify_rule_set(text)), "$.order", limit);
        a_valid_decision_still_works(&label);
    }
}

#[wasm_bindgen_test]
fn an_oversized_definition_is_refused_before_it_is_copied_into_wasm_memory() {
    let before = memory_bytes();
    // 64 MiB of UTF-16: refused by its length alone.
    let huge: JsValue = JsString::from("x").repeat(64 << 20).into();
    assert_limit("64 MiB", expect_err("64 MiB", binding::load_rule_set(huge.clone())), "$", "maxDefinitionBytes");
    assert_limit("64 MiB", expect_err("64 MiB", binding::verify_rule_set(huge)), "$", "maxDefinitionBytes");
    assert!(memory_bytes() - before < 8.0 * 1024.0 * 1024.0, "the text was copied into wasm memory");
    a_valid_decision_still_works("after 64 MiB");
}

#[wasm_bindgen_test]
fn a_field_named_after_an_object_prototype_member_is_refused() {
    for name in ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__"] {
        let error = expect_err(name, binding::load_rule_set(text_arg(&hostile::prototype_field(name))));
        assert_thrown(name, error, &json!({ "code": "RULESET_INVALID", "path": "$.fields[0].name" }));
    }
}

// ------------------------------------------------------------ outbox policy

/// The options objects the handle is compared under.
fn outbox_options() -> Vec<Value> {
    vec![
        json!({}),
        json!({ "maxAttempts": 3, "baseDelayMs": 50, "maxDelayMs": 400, "leaseMs": 900 }),
        json!({ "baseDelayMs": 600000 }),
        json!({ "maxAttempts": 1, "leaseMs": 1 }),
        json!({ "maxAttempts": null }),
    ]
}

/// The handle for `options`, laid out as the package lays them out: one record.
fn policy_handle(options: &Value) -> Result<binding::CompiledOutboxPolicy, JsValue> {
    let mut packer = Packer::default();
    packer.record(options.as_object().unwrap(), &idemflow::outbox::OPTIONS);
    // The handle takes lengths in UTF-16 units: these texts are ASCII.
    binding::CompiledOutboxPolicy::new(&packer.entries, &packer.numbers, &packer.text)
}

/// The handle answers as the core does: the same value, or the same code, disposition, message and details.
fn same_answer<T: PartialEq + std::fmt::Debug>(
    label: &str,
    handle: Result<T, JsValue>,
    core: Result<T, idemflow::Error>,
) {
    match (handle, core) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{label}"),
        (Err(a), Err(b)) => {
            let a = thrown(label, a);
            assert_eq!(
                (a.code.as_str(), a.disposition.as_str(), a.message, a.details),
                (b.code(), b.disposition().as_str(), b.to_string(), Value::Object(b.details())),
                "{label}"
            );
        }
        (a, b) => panic!("{label}: the handle answered {a:?}, the core {b:?}"),
    }
}

#[wasm_bindgen_test]
fn the_outbox_policy_handle_answers_as_the_core() {
    use idemflow::json::outbox;
    use idemflow::outbox::Policy;
    let backoffs = [
        r#"{"operationId":"start-exchange:swap-42","attempt":1}"#,
        r#"{"operationId":"start-exchange:swap-42","attempt":3}"#,
        r#"{"operationId":"send-payout:swap-42","attempt":64}"#,
        r#"{"operationId":"op","attempt":0}"#,
        r#"{"operationId":"op","attempt":1.5}"#,
        r#"{"operationId":"op"}"#,
        r#"{"operationId":"op","attempt":1,"extra":true}"#,
        "[]",
        "not json",
    ];
    let classifies = [
        r#"{"operationId":"op","attempt":1,"now":10,"result":{"ok":true}}"#,
        r#"{"operationId":"op","attempt":1,"now":10,"result":{"ok":false,"message":"down"}}"#,
        r#"{"operationId":"op","attempt":3,"now":10,"result":{"ok":false,"message":"down","disposition":"retry"}}"#,
        r#"{"operationId":"op","attempt":2,"now":10,"result":{"ok":false,"code":"REJECTED","retryable":false}}"#,
        r#"{"operationId":"op","attempt":5,"now":10,"result":{"ok":false,"stopping":true}}"#,
        r#"{"operationId":"op","attempt":1,"now":9007199254740991,"result":{"ok":false}}"#,
        r#"{"operationId":"op","attempt":1,"now":-1,"result":{"ok":true}}"#,
        r#"{"operationId":"op","attempt":1,"now":0,"result":{"ok":"yes"}}"#,
        "{}",
    ];
    let nows = [0.0, 1_000.0, 1_700_000_000_000.0, 9_007_199_254_740_991.0, -1.0, 0.5, f64::NAN, f64::INFINITY];
    let attempts = [0.0, 1.0, 3.0, 4.0, 6.0, 1_000.0, 1.5, -1.0, f64::NAN];
    for options in outbox_options() {
        let label = options.to_string();
        let handle = policy_handle(&options).unwrap_or_else(|_| panic!("{label}: compiles"));
        let policy = Policy::from_source(options.as_object().unwrap()).unwrap();
        assert_eq!(handle.settings_json(), outbox::settings_json(&policy), "{label}: settingsJson");
        for request in backoffs {
            same_answer(
                &format!("{label} backoff {request}"),
                handle.backoff(request),
                outbox::backoff(&policy, request),
            );
        }
        for request in classifies {
            same_answer(
                &format!("{label} classify {request}"),
                handle.classify(request),
                outbox::classify(&policy, request),
            );
        }
        for now in nows {
            let label = format!("{label} leaseExpiresAt {now}");
            same_answer(&label, handle.lease_expires_at(now), outbox::lease_expires_at(&policy, now).map(|t| t as f64));
        }
        for n in attempts {
            same_answer(&format!("{label} admit {n}"), handle.admit(n), outbox::admit(&policy, n));
        }
    }
}

#[wasm_bindgen_test]
fn the_outbox_policy_handle_gives_the_pinned_answers() {
    // The same figures as the core's own tests: the handle is not merely
    // consistent with the core, it is right.
    let handle = policy_handle(&json!({})).map_err(|_| ()).unwrap();
    assert_eq!(
        parse(&handle.settings_json()),
        json!({ "maxAttempts": 5, "baseDelayMs": 1000, "maxDelayMs": 300000, "leaseMs": 30000, "outageBudgetMs": 172800000, "renewEveryMs": 10000 })
    );
    let backoff = handle.backoff(r#"{"operationId":"start-exchange:swap-42","attempt":1}"#).map_err(|_| ()).unwrap();
    assert_eq!(parse(&backoff), json!({ "attempt": 1, "ceilingMs": 1000, "delayMs": 479 }));
    assert_eq!(handle.lease_expires_at(1_000.0).map_err(|_| ()).unwrap(), 31_000.0);
    assert_eq!(handle.admit(5.0).map_err(|_| ()).unwrap(), r#"{"verdict":"run"}"#);
    assert!(handle.admit(6.0).map_err(|_| ()).unwrap().starts_with(r#"{"verdict":"dead","reason":"claims-expired""#));
    let done = handle.classify(r#"{"operationId":"op","attempt":1,"now":10,"result":{"ok":true}}"#);
    assert_eq!(done.map_err(|_| ()).unwrap(), r#"{"verdict":"done"}"#);
}

#[wasm_bindgen_test]
fn bad_outbox_options_are_the_cores_coded_error() {
    let bad = [
        json!({ "maxAttempts": 0 }),
        json!({ "maxAttempts": "3" }),
        json!({ "leaseMs": 86400001 }),
        json!({ "baseDelayMs": 500, "maxDelayMs": 100 }),
        json!({ "leaseMs": [] }),
        json!({ "baseDelayMs": true }),
    ];
    for options in bad {
        let label = options.to_string();
        let core = idemflow::outbox::Policy::from_source(options.as_object().unwrap()).map(|_| ());
        let error = core.clone().unwrap_err();
        assert_eq!((error.code(), error.disposition().as_str()), ("INVALID_ARGUMENT", "fatal"), "{label}");
        same_answer(&label, policy_handle(&options).map(|_| ()), core);
    }
    // A record that is not one row of the options is refused with a code, not a trap.
    let refused = binding::CompiledOutboxPolicy::new(&[0, -1], &[], "");
    assert_eq!(thrown("short record", expect_err("short record", refused)).code, "INVALID_ARGUMENT");
}

#[wasm_bindgen_test]
fn outbox_claim_vectors_through_outbox_claimable() {
    for case in cases(OUTBOX) {
        let operation = &case["operation"];
        // Times reach the binding as JS numbers: 2^53 - 1 is exact in an f64.
        let time = |value: &Value| value.as_f64().expect("a time is a number");
        let answer = binding::outbox_claimable(
            operation["status"].as_str().unwrap(),
            time(&operation["nextAttemptAt"]),
            operation["leaseExpiresAt"].as_f64(),
            time(&case["now"]),
        );
        match (answer, case.get("error")) {
            (Ok(claimable), None) => assert_eq!(Value::Bool(claimable), case["claimable"], "{}", name(&case)),
            (Err(error), Some(expected)) => {
                assert_thrown(name(&case), error, expected);
            }
            (Ok(claimable), Some(expected)) => panic!("{}: expected {expected}, got {claimable}", name(&case)),
            (Err(error), None) => panic!("{}: threw {}", name(&case), thrown(name(&case), error).message),
        }
    }
}

#[wasm_bindgen_test]
fn the_wasm_sha256_gives_the_nist_digests() {
    // Checked against values computed elsewhere, in the build the package ships.
    let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(idemflow::sha256::digest(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(
        hex(idemflow::sha256::digest(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        hex(idemflow::sha256::digest(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
    assert_eq!(
        hex(idemflow::sha256::digest(&[b'a'; 1_000_000])),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    );
    // And the fingerprint vectors' independently computed digests.
    for case in cases(FINGERPRINT) {
        let canonical = case["canonical"].as_str().unwrap();
        let expected = case["fingerprint"].as_str().unwrap().trim_start_matches("fp1:");
        assert_eq!(hex(idemflow::sha256::digest(canonical.as_bytes())), expected, "{}", name(&case));
    }
}

#[wasm_bindgen_test]
fn four_fingerprints_hashed_side_by_side_equal_one_at_a_time() {
    // In wasm, up to four messages share the SIMD lanes of one compression.
    let message: Vec<u8> = (0..300u32).map(|i| (i * 17 + 3) as u8).collect();
    for lengths in [[0, 1, 55, 56], [63, 64, 65, 119], [120, 127, 128, 200], [116, 116, 300, 0], [7, 300, 3, 129]] {
        for count in 2..=4 {
            let messages: Vec<&[u8]> = lengths[..count].iter().map(|n| &message[..*n]).collect();
            let mut out = [[0u8; 32]; 4];
            idemflow::sha256::digest_up_to_four(&messages, &mut out);
            for (lane, m) in messages.iter().enumerate() {
                assert_eq!(out[lane], idemflow::sha256::digest(m), "lengths {lengths:?}, lane {lane} of {count}");
            }
        }
    }
}

// ------------------------------------------- issue 23: payloads (RFC 8785)

/// A JS value as JS's own JSON.parse makes it from `text`.
fn js_text(text: &str) -> JsValue {
    JSON::parse(text).expect("JSON.parse")
}

fn canonical(value: JsValue) -> String {
    binding::canonical_json(value).unwrap_or_else(|e| panic!("refused: {}", thrown("canonicalJson", e).message))
}

fn payload_refusal(label: &str, result: Result<String, JsValue>) -> Thrown {
    let error = expect_err(label, result);
    assert_thrown(label, error, &json!({ "code": "INVALID_PAYLOAD", "disposition": "reject" }))
}

#[wasm_bindgen_test]
fn the_six_rfc_8785_test_files_through_text_bytes_and_values() {
    for (name, input, output) in JCS_FILES {
        assert_eq!(
            binding::canonical_json_text(text_arg(input)).map_err(|_| ()),
            Ok(output.to_string()),
            "{name} as text"
        );
        let bytes: JsValue = js_sys::Uint8Array::from(input.as_bytes()).into();
        assert_eq!(
            binding::canonical_json_text(bytes).map_err(|_| ()),
            Ok(output.to_string()),
            "{name} as UTF-8 bytes"
        );
        assert_eq!(canonical(js_text(input)), *output, "{name} as the value JSON.parse made");
    }
}

#[wasm_bindgen_test]
fn number_vectors_through_canonical_json() {
    for case in cases(JCS_NUMBERS) {
        let bits = u64::from_str_radix(case["bits"].as_str().unwrap(), 16).unwrap();
        let x = JsValue::from_f64(f64::from_bits(bits));
        match case["text"].as_str() {
            Some(text) => {
                assert_eq!(canonical(x), text, "bits {bits:016x}");
                assert_eq!(binding::canonical_json_text(text_arg(text)).map_err(|_| ()), Ok(text.to_string()));
            }
            None => {
                let t = payload_refusal(case["value"].as_str().unwrap(), binding::canonical_json(x));
                assert_eq!(t.details["path"], "$");
            }
        }
    }
}

#[wasm_bindgen_test]
fn random_doubles_are_written_as_node_writes_them() {
    // Node's JSON.stringify of a finite double is RFC 8785's form (the README
    // of tests/vectors/jcs): the oracle, over random bit patterns and ties.
    let mut random = SplitMix(23);
    for i in 0..60_000u64 {
        let x = match i % 3 {
            0 => f64::from_bits(random.next()),
            1 => ((random.next() >> 11) | 1) as f64 / (1u64 << (1 + random.next() % 4)) as f64,
            _ => (random.next() % 1_000_000_000) as f64 / 10f64.powi((random.next() % 30) as i32),
        };
        if !x.is_finite() {
            continue;
        }
        let expected = String::from(JSON::stringify(&JsValue::from_f64(x)).unwrap());
        assert_eq!(canonical(JsValue::from_f64(x)), expected, "bits {:016x}", x.to_bits());
        let text = format!("[{expected}]");
        assert_eq!(
            binding::canonical_json_text(text_arg(&text)).map_err(|_| ()),
            Ok(text),
            "bits {:016x} read back",
            x.to_bits()
        );
    }
}

#[wasm_bindgen_test]
fn a_payload_fingerprint_is_pf1_and_the_sha_256_of_the_canonical_text() {
    use sha2::{Digest, Sha256};
    let value = js_text("{\"b\": [1.0, 2.5e0, \"é\"], \"a\": null}");
    let text = canonical(value.clone());
    assert_eq!(text, "{\"a\":null,\"b\":[1,2.5,\"é\"]}");
    let expected = format!("pf1:{}", idemflow::jcs::hex(&Sha256::digest(text.as_bytes())));
    assert_eq!(binding::fingerprint_payload(value).map_err(|_| ()), Ok(expected.clone()));
    assert_eq!(
        binding::fingerprint_payload_text(text_arg("{ \"a\": null, \"b\": [1, 25e-1, \"\\u00e9\"] }")).map_err(|_| ()),
        Ok(expected)
    );
}

/// A JS value from a JS expression (`new Map()`, a function, a cycle).
fn eval(expression: &str) -> JsValue {
    js_sys::Function::new_no_args(&format!("return {expression};")).call0(&JsValue::NULL).expect("the expression runs")
}

#[wasm_bindgen_test]
fn what_json_stringify_would_change_silently_is_refused_with_its_path() {
    let cases = [
        ("({ a: { b: undefined } })", "$.a.b", "undefined"),
        ("({ a: [1, () => 1] })", "$.a[1]", "function"),
        ("({ s: Symbol('x') })", "$.s", "symbol"),
        ("({ n: [0, NaN] })", "$.n[1]", "NaN"),
        ("({ 'odd key': Infinity })", "$[\"odd key\"]", "Infinity"),
        ("({ big: 10n })", "$.big", "BigInt"),
        ("({ m: new Map([[1, 2]]) })", "$.m", "Map"),
        ("({ r: /x/ })", "$.r", "RegExp"),
        ("({ x: new (class Order {})() })", "$.x", "Order"),
        ("[1, , 3]", "$[1]", "undefined"),
        ("({ s: 'a\\uD800b' })", "$.s", "lone surrogate"),
        ("({ ['\\uDC00']: 1 })", "$[\"\\udc00\"]", "lone surrogate"),
        ("undefined", "$", "undefined"),
    ];
    for (expression, path, words) in cases {
        let t = payload_refusal(expression, binding::canonical_json(eval(expression)));
        assert_eq!(t.details["path"], path, "{expression}: {}", t.message);
        assert!(t.details["reason"].as_str().unwrap().contains(words), "{expression}: {}", t.message);
        payload_refusal(expression, binding::fingerprint_payload(eval(expression)));
    }
}

#[wasm_bindgen_test]
fn cycles_depth_size_and_throwing_getters_are_refused_not_walked() {
    let cycle = eval("(() => { const a = { b: {} }; a.b.a = a; return a; })()");
    assert!(payload_refusal("cycle", binding::canonical_json(cycle)).message.contains("cycle"));
    let nested = |depth: usize| {
        eval(&format!("(() => {{ let a = []; for (let i = 1; i < {depth}; i++) a = [a]; return a; }})()"))
    };
    assert_eq!(canonical(nested(64)), format!("{}{}", "[".repeat(64), "]".repeat(64)));
    assert!(payload_refusal("65 deep", binding::canonical_json(nested(65))).message.contains("deeper than 64"));
    assert!(payload_refusal("100000 deep", binding::canonical_json(nested(100_000)))
        .message
        .contains("deeper than 64"));
    let large = eval("({ a: 'x'.repeat(600000), b: 'y'.repeat(600000) })");
    assert!(payload_refusal("large", binding::canonical_json(large)).message.contains("maxPayloadBytes"));
    let getter = eval("({ get a() { throw new Error('boom'); } })");
    assert!(payload_refusal("getter", binding::canonical_json(getter)).message.contains("boom"));
    // A Date is what JSON.stringify makes of it (toJSON): its ISO text.
    assert_eq!(canonical(eval("({ at: new Date(0) })")), "{\"at\":\"1970-01-01T00:00:00.000Z\"}");
    let text = binding::canonical_json_text(text_arg("[\"\\ud800\"]"));
    assert!(payload_refusal("lone escape", text).message.contains("lone surrogate"));
    assert_eq!(
        thrown("not text", expect_err("not text", binding::canonical_json_text(JsValue::from_f64(1.0)))).code,
        "INVALID_ARGUMENT"
    );
}

#[wasm_bindgen_test]
fn ten_thousand_refused_payloads_do_not_grow_memory() {
    let bad = [
        eval("({ a: [1, 2, undefined] })"),
        eval("({ n: NaN })"),
        eval("(() => { const a = []; a.push(a); return a; })()"),
    ];
    let round = |i: usize| {
        let refused = match i % 5 {
            0..=2 => binding::canonical_json(bad[i % 5].clone()).is_err(),
            3 => binding::canonical_json_text(text_arg("{\"a\": [1, 2,]}")).is_err(),
            _ => binding::fingerprint_payload_text(text_arg("[1e400]")).is_err(),
        };
        assert!(refused, "call {i} was not refused");
    };
    for i in 0..500 {
        round(i);
    }
    let before = memory_bytes();
    for i in 0..10_000 {
        round(i);
    }
    assert_eq!(memory_bytes(), before, "refused payloads grew wasm memory");
}
