#![cfg(target_arch = "wasm32")]
//! Layer 2: the shared vectors and the JavaScript-only hazards (lone
//! surrogates, throwing getters, huge strings, leaks), run through the wasm
//! binding in Node with wasm-bindgen-test.

use js_sys::{Function, JsString, Object, Reflect, JSON};
use serde_json::{json, Value};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::wasm_bindgen_test;

use idemflow::binding::{self, CompiledRuleSet};

#[path = "shared/jcs.rs"]
mod shared_jcs;
use shared_jcs::{SplitMix, JCS_FILES, JCS_NUMBERS};

#[path = "hostile/definitions.rs"]
mod hostile;

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

/// A JS value built by JS's own JSON.parse.
fn js(value: &Value) -> JsValue {
    JSON::parse(&value.to_string()).expect("JSON.parse")
}

/// A JSON text argument as the package passes it: a JS string.
fn text_arg(text: &str) -> JsValue {
    JsValue::from_str(text)
}

fn js_text(text: &str) -> JsValue {
    JSON::parse(text).expect("JSON.parse")
}

fn builtin(name: &str) -> CompiledRuleSet {
    binding::builtin_rule_set(name, None).unwrap_or_else(|_| panic!("built-in {name}"))
}

/// The case's built-in rule set at the case's `ruleSetVersion` (the current one when absent).
fn rule_set(case: &Value) -> CompiledRuleSet {
    let name = case["ruleSet"].as_str().unwrap_or("deposit-swap");
    binding::builtin_rule_set(name, case["ruleSetVersion"].as_f64())
        .unwrap_or_else(|_| panic!("built-in {name}"))
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

fn check_decision(case: &Value, result: Result<String, JsValue>, via: &str) {
    // v1 and v2 cell cases share their names: the label says which version failed.
    let label = format!("{} (v{} via {via})", name(case), case["ruleSetVersion"]);
    match (result, case["expect"].get("error")) {
        (Ok(text), None) => assert_eq!(parse(&text), expected_decision(case), "{label}"),
        (Err(error), Some(expected)) => {
            assert_thrown(&label, error, expected);
        }
        (Ok(text), Some(expected)) => panic!("{label}: expected {expected}, decided {text}"),
        (Err(error), None) => panic!("{label}: expected a decision, got {}", thrown(&label, error).message),
    }
}

fn seed() -> Value {
    json!({ "eventId": "chain-watcher:event-001", "workflowId": "swap-42", "type": "DEPOSIT_CONFIRMED",
            "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" })
}

const SEED_FINGERPRINT: &str = "fp1:f7aec2ec118bdfeaf8378d30fc20a30c1e4a1ff4be23ea1ca294215f182989fb";

/// The seed event as a JS object, with `key` replaced by `value`.
fn seed_with(key: &str, value: &JsValue) -> JsValue {
    let event = js(&seed());
    Reflect::set(&event, &JsValue::from_str(key), value).unwrap();
    event
}

// ------------------------------------------------------------------ vectors

#[wasm_bindgen_test]
fn fingerprint_vectors_through_the_binding() {
    for case in cases(FINGERPRINT) {
        let rules = rule_set(&case);
        let expected = case["fingerprint"].as_str().unwrap();
        let event = js(&case["event"]);
        assert!(binding::validate_event(&rules, event.clone()).is_ok(), "{}", name(&case));
        let fp = binding::fingerprint(&rules, event).unwrap_or_else(|e| panic!("{}: {}", name(&case), thrown("", e).message));
        assert_eq!(fp, expected, "{}", name(&case));
        let via_json = binding::fingerprint_json(&rules, text_arg(&case["event"].to_string())).map_err(|e| thrown("", e).message);
        assert_eq!(via_json.as_deref(), Ok(expected), "{} (fingerprintJson)", name(&case));
    }
}

#[wasm_bindgen_test]
fn validation_vectors_through_validate_event_fingerprint_and_decide() {
    for case in cases(VALIDATION) {
        let rules = rule_set(&case);
        let event = js(&case["event"]);
        let validated = binding::validate_event(&rules, event.clone());
        let fp = binding::fingerprint(&rules, event.clone());
        let decided = binding::decide(&rules, event, JsValue::NULL, JsValue::NULL);
        let input = json!({ "event": case["event"], "receipt": null, "workflow": null }).to_string();
        let decided_json = binding::decide_json(&rules, text_arg(&input));
        match case.get("error") {
            None => {
                assert!(validated.is_ok(), "{}", name(&case));
                assert!(fp.is_ok(), "{}", name(&case));
                for result in [decided, decided_json] {
                    if let Err(error) = result {
                        assert_ne!(thrown(name(&case), error).code, "INVALID_EVENT", "{}", name(&case));
                    }
                }
            }
            Some(expected) => {
                let label = |via: &str| format!("{} ({via})", name(&case));
                assert_thrown(&label("validateEvent"), expect_err("", validated), expected);
                assert_thrown(&label("fingerprint"), expect_err("", fp), expected);
                assert_thrown(&label("decide"), expect_err("", decided), expected);
                assert_thrown(&label("decideJson"), expect_err("", decided_json), expected);
            }
        }
    }
}

#[wasm_bindgen_test]
fn decision_vectors_through_decide() {
    for case in cases(DECISIONS) {
        let rules = rule_set(&case);
        let result = binding::decide(&rules, js(&case["event"]), js(&case["receipt"]), js(&case["workflow"]));
        check_decision(&case, result, "decide");
    }
}

#[wasm_bindgen_test]
fn decision_vectors_through_decide_json() {
    for case in cases(DECISIONS) {
        let input = json!({ "event": case["event"], "receipt": case["receipt"], "workflow": case["workflow"] });
        let result = binding::decide_json(&rule_set(&case), text_arg(&input.to_string()));
        check_decision(&case, result, "decideJson");
    }
}

#[wasm_bindgen_test]
fn broken_rule_set_vectors_through_verify_rule_set_and_load_rule_set() {
    let vectors = parse(RULESETS);
    for case in vectors["broken"].as_array().unwrap() {
        let text = case["definition"].to_string();
        let report = parse(&binding::verify_rule_set(text_arg(&text)).unwrap_or_else(|e| panic!("{}: {}", name(case), thrown("", e).message)));
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
        let refused = assert_thrown(name(case), expect_err(name(case), binding::load_rule_set(text_arg(&text))), &case["loadError"]);
        assert_eq!(refused.details["report"]["ok"], false, "{}", name(case));
    }
}

#[wasm_bindgen_test]
fn malformed_rule_set_vectors_are_thrown_with_their_path() {
    for case in parse(RULESETS)["malformed"].as_array().unwrap() {
        let text = case["definitionText"].as_str().map(str::to_string).unwrap_or_else(|| case["definition"].to_string());
        let label = |via: &str| format!("{} ({via})", name(case));
        assert_thrown(&label("verifyRuleSet"), expect_err(name(case), binding::verify_rule_set(text_arg(&text))), &case["error"]);
        assert_thrown(&label("loadRuleSet"), expect_err(name(case), binding::load_rule_set(text_arg(&text))), &case["error"]);
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
    // One row per rule and event type: 24 in deposit-swap v1, 30 in v2 (the current one).
    let v1 = binding::builtin_rule_set("deposit-swap", Some(1.0)).unwrap_or_else(|_| panic!("deposit-swap v1"));
    assert_eq!(parse(&v1.table_json()).as_array().unwrap().len(), 24);
    assert_eq!(parse(&builtin("deposit-swap").table_json()).as_array().unwrap().len(), 30);
}

#[wasm_bindgen_test]
fn an_unknown_builtin_is_thrown_as_invalid_argument() {
    let error = expect_err("builtin", binding::builtin_rule_set("deposit_swap", None));
    assert_thrown(
        "builtin",
        error,
        &json!({ "code": "INVALID_ARGUMENT", "disposition": "fatal" }),
    );
}

#[wasm_bindgen_test]
fn error_codes_list_every_code_with_its_disposition() {
    assert_eq!(
        parse(&binding::error_codes()),
        json!({
            "INVALID_EVENT": "reject", "EVENT_ID_CONFLICT": "reconcile", "UNKNOWN_WORKFLOW": "retry",
            "IDENTITY_MISMATCH": "reconcile", "INVALID_TRANSITION": "reconcile", "OUTBOX_CONFLICT": "reconcile",
            "CONCURRENT_UPDATE": "retry", "INVALID_RECORD": "reconcile", "INVALID_ARGUMENT": "fatal",
            "RULESET_INVALID": "fatal", "STORE_UNAVAILABLE": "retry", "HANDLER_FAILED": "retry", "INVALID_PAYLOAD": "reject",
            "IDEMPOTENCY_KEY_CONFLICT": "reconcile", "IDEMPOTENCY_KEY_IN_PROGRESS": "retry",
        })
    );
}

#[wasm_bindgen_test]
fn plan_deposit_confirmation_answers_as_the_seed_did() {
    let workflow = |status: &str| {
        js(&json!({ "id": "swap-42", "status": status, "revision": 3,
                    "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" }))
    };
    let plan = |wf: JsValue| binding::plan_deposit(wf, js(&seed()));
    assert_eq!(plan(workflow("deposit")).map_err(|_| ()), Ok("advance".to_string()));
    assert_eq!(plan(workflow("success")).map_err(|_| ()), Ok("already-applied".to_string()));
    assert_thrown("waiting", expect_err("waiting", plan(workflow("waiting"))), &json!({ "code": "INVALID_TRANSITION" }));
    assert_thrown("none", expect_err("none", plan(JsValue::NULL)), &json!({ "code": "UNKNOWN_WORKFLOW", "disposition": "retry" }));
    let mut detected = seed();
    detected["type"] = json!("DEPOSIT_DETECTED");
    let error = expect_err("type", binding::plan_deposit(workflow("deposit"), js(&detected)));
    assert_thrown("type", error, &invalid_event("type"));
}

// ------------------------------------------------------- values that are not events

#[wasm_bindgen_test]
fn a_value_that_is_not_an_object_is_an_invalid_event_named_event() {
    let rules = builtin("deposit-swap");
    let values = [
        JsValue::NULL,
        JsValue::UNDEFINED,
        JsValue::from_f64(5.0),
        JsValue::from_str("{\"eventId\":\"e\"}"),
        JsValue::TRUE,
        js(&json!([seed()])),
    ];
    for value in values {
        let label = format!("{value:?}");
        assert_thrown(&label, expect_err(&label, binding::validate_event(&rules, value.clone())), &invalid_event("event"));
        assert_thrown(&label, expect_err(&label, binding::fingerprint(&rules, value.clone())), &invalid_event("event"));
        let decided = binding::decide(&rules, value, JsValue::NULL, JsValue::NULL);
        assert_thrown(&label, expect_err(&label, decided), &invalid_event("event"));
    }
}

#[wasm_bindgen_test]
fn a_receipt_or_workflow_that_is_not_an_object_is_an_invalid_argument() {
    let rules = builtin("deposit-swap");
    let bad = json!({ "code": "INVALID_ARGUMENT", "disposition": "fatal" });
    let as_receipt = binding::decide(
        &rules,
        js(&seed()),
        JsValue::from_str("fp1:0"),
        JsValue::NULL,
    );
    assert_thrown("receipt", expect_err("receipt", as_receipt), &bad);
    let as_workflow = binding::decide(&rules, js(&seed()), JsValue::UNDEFINED, JsValue::from_f64(1.0));
    assert_thrown("workflow", expect_err("workflow", as_workflow), &bad);
}

#[wasm_bindgen_test]
fn an_amount_given_as_a_bigint_is_an_invalid_event() {
    let rules = builtin("deposit-swap");
    let event = seed_with("amountUnits", &js_sys::BigInt::from(12_500_000u64).into());
    assert_thrown("bigint", expect_err("bigint", binding::fingerprint(&rules, event)), &invalid_event("amountUnits"));
}

#[wasm_bindgen_test]
fn a_revision_that_is_nan_or_infinite_is_an_invalid_record() {
    let rules = builtin("deposit-swap");
    for revision in [f64::NAN, f64::INFINITY, -0.5] {
        let workflow = js(&json!({ "id": "swap-42", "status": "deposit",
                                   "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" }));
        Reflect::set(&workflow, &"revision".into(), &JsValue::from_f64(revision)).unwrap();
        let error = expect_err("revision", binding::decide(&rules, js(&seed()), JsValue::NULL, workflow));
        assert_thrown("revision", error, &json!({ "code": "INVALID_RECORD", "details": { "record": "workflow", "field": "revision" } }));
    }
}

// ---------------------------------------------------------- lone surrogates

#[wasm_bindgen_test]
fn a_lone_surrogate_event_id_is_an_invalid_event() {
    let rules = builtin("deposit-swap");
    let event = js_text(
        r#"{"eventId":"\ud800","workflowId":"swap-42","type":"DEPOSIT_CONFIRMED","depositRef":"r","amountUnits":"1"}"#,
    );
    let t = assert_thrown("eventId", expect_err("eventId", binding::validate_event(&rules, event)), &invalid_event("eventId"));
    assert!(t.details["reason"].as_str().unwrap().contains("surrogate"), "{}", t.details);
}

#[wasm_bindgen_test]
fn a_lone_surrogate_is_not_fingerprinted_like_u_fffd() {
    let rules = builtin("deposit-swap");
    let lone = JsString::from("swap-42-").concat(&JsString::from_char_code1(0xD800));
    let replacement = JsValue::from_str("swap-42-\u{FFFD}");
    let with_lone = binding::fingerprint(&rules, seed_with("workflowId", &lone));
    assert_thrown("lone", expect_err("lone", with_lone), &invalid_event("workflowId"));
    let with_replacement = binding::fingerprint(&rules, seed_with("workflowId", &replacement)).map_err(|_| ()).unwrap();
    assert!(with_replacement.starts_with("fp1:"));

    // The same holds for an identity field, where a collision would merge two deposits.
    let lone_ref = JsString::from("btc:tx-").concat(&JsString::from_char_code1(0xDC00));
    let with_lone_ref = binding::fingerprint(&rules, seed_with("depositRef", &lone_ref));
    assert_thrown("lone ref", expect_err("lone ref", with_lone_ref), &invalid_event("depositRef"));
}

#[wasm_bindgen_test]
fn a_lone_surrogate_next_to_a_real_u_fffd_is_still_refused() {
    let rules = builtin("deposit-swap");
    for text in [r#""\ufffd\ud800""#, r#""\ud800\ufffd""#, r#""\ude00\ud83d""#, r#""a\udfff""#] {
        let event = seed_with("depositRef", &js_text(text));
        assert_thrown(text, expect_err(text, binding::validate_event(&rules, event)), &invalid_event("depositRef"));
    }
    for text in [r#""\ud83d\ude00""#, r#""\ufffd""#, r#""\ud800\udc00""#] {
        let event = seed_with("depositRef", &js_text(text));
        assert!(binding::validate_event(&rules, event).is_ok(), "{text}");
    }
}

#[wasm_bindgen_test]
fn a_lone_surrogate_in_the_type_is_an_invalid_event() {
    let rules = builtin("deposit-swap");
    let event = seed_with("type", &js_text(r#""DEPOSIT_CONFIRMED\ud800""#));
    assert_thrown("type", expect_err("type", binding::fingerprint(&rules, event)), &invalid_event("type"));
}

#[wasm_bindgen_test]
fn a_lone_surrogate_in_a_recorded_field_is_an_invalid_record() {
    let rules = builtin("deposit-swap");
    let workflow = js(&json!({ "id": "swap-42", "status": "deposit", "revision": 2, "amountUnits": "12500000" }));
    Reflect::set(&workflow, &"depositRef".into(), &js_text(r#""btc-mainnet:tx-abc:vout-0\ud800""#)).unwrap();
    let error = expect_err("record", binding::decide(&rules, js(&seed()), JsValue::NULL, workflow));
    assert_thrown("record", error, &json!({ "code": "INVALID_RECORD", "details": { "record": "workflow", "field": "depositRef" } }));
}

// ------------------------------------------------------------ hostile objects

/// `Object.defineProperty(target, key, { get() { throw new Error(message) }, enumerable: true })`.
fn define_throwing_getter(target: &JsValue, key: &str, message: &str) {
    let getter = Function::new_no_args(&format!("throw new Error({});", Value::String(message.into())));
    let descriptor = Object::new();
    Reflect::set(&descriptor, &"get".into(), &getter).unwrap();
    Reflect::set(&descriptor, &"enumerable".into(), &JsValue::TRUE).unwrap();
    Object::define_property(target.unchecked_ref::<Object>(), &JsValue::from_str(key), &descriptor);
}

#[wasm_bindgen_test]
fn a_getter_that_throws_is_an_invalid_event_for_its_field() {
    let rules = builtin("deposit-swap");
    let event = js(&json!({ "eventId": "e-1", "workflowId": "swap-42", "type": "DEPOSIT_CONFIRMED", "amountUnits": "1" }));
    define_throwing_getter(&event, "depositRef", "boom");
    for (via, result) in [
        ("validateEvent", binding::validate_event(&rules, event.clone()).map(|_| String::new())),
        ("fingerprint", binding::fingerprint(&rules, event.clone())),
        ("decide", binding::decide(&rules, event.clone(), JsValue::NULL, JsValue::NULL)),
    ] {
        let t = assert_thrown(via, expect_err(via, result), &invalid_event("depositRef"));
        assert!(t.details["reason"].as_str().unwrap().contains("boom"), "{via}: {}", t.details);
        assert_eq!(t.details["eventId"], "e-1");
    }
}

#[wasm_bindgen_test]
fn a_throwing_getter_on_a_property_the_rules_do_not_read_is_never_touched() {
    let rules = builtin("deposit-swap");
    let event = js(&seed());
    define_throwing_getter(&event, "observedAt", "must not be read");
    assert_eq!(binding::fingerprint(&rules, event).map_err(|e| thrown("", e).message), Ok(SEED_FINGERPRINT.to_string()));
}

#[wasm_bindgen_test]
fn a_proxy_whose_get_trap_throws_is_an_invalid_event() {
    let rules = builtin("deposit-swap");
    let handler = Object::new();
    let trap = Function::new_with_args("target, key", "throw new Error('trap for ' + String(key));");
    Reflect::set(&handler, &"get".into(), &trap).unwrap();
    let proxy = js_sys::Proxy::new(&js(&seed()), &handler);
    let error = expect_err("proxy", binding::fingerprint(&rules, proxy.into()));
    let t = assert_thrown("proxy", error, &invalid_event("eventId"));
    assert!(t.details["reason"].as_str().unwrap().contains("trap for eventId"), "{}", t.details);
}

#[wasm_bindgen_test]
fn a_revoked_proxy_is_an_invalid_event() {
    let rules = builtin("deposit-swap");
    let pair = js_sys::Proxy::revocable(&js(&seed()), &Object::new());
    let proxy = Reflect::get(&pair, &"proxy".into()).unwrap();
    let revoke: Function = Reflect::get(&pair, &"revoke".into()).unwrap().unchecked_into();
    revoke.call0(&JsValue::NULL).unwrap();
    let error = expect_err("revoked", binding::fingerprint(&rules, proxy.clone()));
    assert_thrown("revoked", error, &invalid_event("eventId"));
    let error = expect_err("revoked workflow", binding::decide(&rules, js(&seed()), JsValue::NULL, proxy));
    assert_thrown("revoked workflow", error, &json!({ "code": "INVALID_RECORD", "details": { "field": "id" } }));
}

#[wasm_bindgen_test]
fn a_throwing_getter_on_a_stored_workflow_is_an_invalid_record() {
    let rules = builtin("deposit-swap");
    let workflow = js(&json!({ "id": "swap-42", "revision": 2 }));
    define_throwing_getter(&workflow, "status", "storage layer exploded");
    let error = expect_err("workflow", binding::decide(&rules, js(&seed()), JsValue::NULL, workflow));
    assert_thrown("workflow", error, &json!({ "code": "INVALID_RECORD", "details": { "record": "workflow", "field": "status" } }));
}

// ------------------------------------------------------------------ memory

const MIB: f64 = 1024.0 * 1024.0;

/// A 10 MB JS string made in JS: it never passes through wasm memory on the way in.
fn ten_megabytes(unit: &str) -> JsValue {
    JsString::from(unit).repeat(10_000_000 / unit.len() as i32).into()
}

#[wasm_bindgen_test]
fn the_memory_meter_sees_a_ten_megabyte_allocation() {
    // The control for the tests below: memory_bytes() does move when wasm copies 10 MB.
    let before = binding::memory_bytes();
    let copied = "x".repeat(10_000_000);
    let grown = binding::memory_bytes() - before;
    assert!(grown >= 9.0 * MIB, "memory grew by only {grown} bytes");
    drop(copied);
}

#[wasm_bindgen_test]
fn a_ten_megabyte_string_is_an_invalid_event_without_growing_memory() {
    let rules = builtin("deposit-swap");
    // Warm up allocator paths first so the measurement sees only the big calls.
    let _ = binding::fingerprint(&rules, seed_with("eventId", &JsValue::from_str(&"e".repeat(600))));
    let before = binding::memory_bytes();
    for (field, unit) in [("eventId", "e"), ("workflowId", "w"), ("depositRef", "é"), ("amountUnits", "1"), ("type", "T")] {
        let event = seed_with(field, &ten_megabytes(unit));
        let t = assert_thrown(field, expect_err(field, binding::fingerprint(&rules, event.clone())), &invalid_event(field));
        assert!(t.message.len() < 1000, "{field}: the message does not quote the string");
        let decided = binding::decide(&rules, event, JsValue::NULL, JsValue::NULL);
        assert_thrown(field, expect_err(field, decided), &invalid_event(field));
    }
    let workflow = js(&json!({ "id": "swap-42", "revision": 2 }));
    Reflect::set(&workflow, &"status".into(), &ten_megabytes("s")).unwrap();
    let error = expect_err("status", binding::decide(&rules, js(&seed()), JsValue::NULL, workflow));
    assert_thrown("status", error, &json!({ "code": "INVALID_RECORD", "details": { "field": "status" } }));
    let grown = binding::memory_bytes() - before;
    assert!(grown <= MIB, "memory grew by {grown} bytes");
}

#[wasm_bindgen_test]
fn ten_thousand_rejected_calls_do_not_grow_memory() {
    let rules = builtin("deposit-swap");
    let bad_event = seed_with("amountUnits", &JsValue::from_str("012"));
    let lone = seed_with("eventId", &JsString::from_char_code1(0xD800).into());
    let getter = js(&seed());
    define_throwing_getter(&getter, "depositRef", "boom");
    let bad_workflow = js(&json!({ "id": "swap-42", "status": "archived", "revision": 1 }));
    let conflict = js(&json!({ "fingerprint": "fp1:0000" }));
    let malformed = parse(RULESETS)["malformed"][0]["definitionText"].as_str().unwrap().to_string();
    let broken = parse(RULESETS)["broken"][0]["definition"].to_string();

    let round = |i: usize| {
        let error = match i % 9 {
            0 => binding::fingerprint(&rules, bad_event.clone()).err(),
            1 => binding::validate_event(&rules, lone.clone()).err(),
            2 => binding::decide(&rules, getter.clone(), JsValue::NULL, JsValue::NULL).err(),
            3 => binding::decide(&rules, js(&seed()), JsValue::NULL, bad_workflow.clone()).err(),
            4 => binding::decide(&rules, js(&seed()), conflict.clone(), JsValue::NULL).err(),
            5 => binding::decide_json(&rules, text_arg("{\"event\": {\"eventId\": \"\"}}")).err(),
            6 => binding::fingerprint(&rules, JsValue::NULL).err(),
            7 => binding::load_rule_set(text_arg(&malformed)).err(),
            _ => binding::load_rule_set(text_arg(&broken)).err(),
        };
        assert!(error.is_some(), "call {i} was not rejected");
    };
    for i in 0..900 {
        round(i);
    }
    let before = binding::memory_bytes();
    for i in 0..10_000 {
        round(i);
    }
    assert_eq!(binding::memory_bytes(), before, "rejected calls grew wasm memory");
}

#[wasm_bindgen_test]
fn accepted_calls_do_not_grow_memory_either() {
    let rules = builtin("deposit-swap");
    let workflow = js(&json!({ "id": "swap-42", "status": "deposit", "revision": 2,
                               "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" }));
    let event = js(&seed());
    for _ in 0..500 {
        binding::decide(&rules, event.clone(), JsValue::NULL, workflow.clone()).map_err(|_| ()).unwrap();
    }
    let before = binding::memory_bytes();
    for _ in 0..10_000 {
        binding::decide(&rules, event.clone(), JsValue::NULL, workflow.clone()).map_err(|_| ()).unwrap();
        assert_eq!(binding::fingerprint(&rules, event.clone()).map_err(|_| ()).unwrap(), SEED_FINGERPRINT);
    }
    assert_eq!(binding::memory_bytes(), before, "accepted calls grew wasm memory");
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
    let fingerprint = binding::fingerprint(&rules, js(&seed())).unwrap_or_else(|e| panic!("{label}: {}", thrown("", e).message));
    assert_eq!(fingerprint, SEED_FINGERPRINT, "{label}");
    let workflow = js(&json!({ "id": "swap-42", "status": "deposit", "revision": 2,
                               "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" }));
    let decided = binding::decide(&rules, js(&seed()), JsValue::NULL, workflow).map_err(|e| thrown(label, e).message);
    assert_eq!(parse(&decided.unwrap())["outcome"], json!("applied"), "{label}");
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
    for (types, statuses, limit) in [(15, 256, "maxReorderHistories"), (6, 200, "maxReorderConfigurations")] {
        let text = text_arg(&hostile::reorder_budget(types, statuses).to_string());
        let label = format!("{types} types from {statuses} statuses");
        assert_limit(&label, expect_err(&label, binding::load_rule_set(text.clone())), "$.order", limit);
        assert_limit(&label, expect_err(&label, binding::verify_rule_set(text)), "$.order", limit);
        a_valid_decision_still_works(&label);
    }
}

#[wasm_bindgen_test]
fn an_oversized_definition_is_refused_before_it_is_copied_into_wasm_memory() {
    let before = binding::memory_bytes();
    // 64 MiB of UTF-16: refused by its length alone.
    let huge: JsValue = JsString::from("x").repeat(64 << 20).into();
    assert_limit("64 MiB", expect_err("64 MiB", binding::load_rule_set(huge.clone())), "$", "maxDefinitionBytes");
    assert_limit("64 MiB", expect_err("64 MiB", binding::verify_rule_set(huge.clone())), "$", "maxDefinitionBytes");
    let decided = expect_err("decideJson", binding::decide_json(&builtin("deposit-swap"), huge));
    assert_eq!(thrown("decideJson", decided).code, "INVALID_ARGUMENT");
    assert!(binding::memory_bytes() - before < 8.0 * 1024.0 * 1024.0, "the text was copied into wasm memory");
    a_valid_decision_still_works("after 64 MiB");
}

#[wasm_bindgen_test]
fn a_field_named_after_an_object_prototype_member_is_refused() {
    for name in ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__"] {
        let error = expect_err(name, binding::load_rule_set(text_arg(&hostile::prototype_field(name))));
        assert_thrown(name, error, &json!({ "code": "RULESET_INVALID", "path": "$.fields[0].name" }));
    }
}

/// `body`'s answer with `Object.prototype[key] = value`; the pollution is
/// removed before the caller asserts anything, so no other test sees it.
fn with_polluted_prototype<R>(key: &str, value: &JsValue, body: impl FnOnce() -> R) -> R {
    let prototype: JsValue = Object::get_prototype_of(&Object::new().into()).into();
    let key = JsValue::from_str(key);
    Reflect::set(&prototype, &key, value).unwrap();
    let answer = body();
    Reflect::delete_property(prototype.unchecked_ref::<Object>(), &key).unwrap();
    answer
}

#[wasm_bindgen_test]
fn an_event_that_only_inherits_its_fields_is_invalid() {
    let rules = builtin("deposit-swap");
    let inherited: JsValue = Object::create(js(&seed()).unchecked_ref::<Object>()).into();
    let error = expect_err("Object.create", binding::validate_event(&rules, inherited));
    assert_thrown("Object.create(event)", error, &invalid_event("eventId"));
}

#[wasm_bindgen_test]
fn a_polluted_object_prototype_does_not_supply_a_missing_field() {
    let rules = builtin("deposit-swap");
    let mut event = seed();
    event.as_object_mut().unwrap().remove("amountUnits");
    let event = js(&event);
    let answer = with_polluted_prototype("amountUnits", &JsValue::from_str("999"), || binding::fingerprint(&rules, event));
    assert_thrown("polluted amountUnits", expect_err("polluted amountUnits", answer), &invalid_event("amountUnits"));
    // The stored workflow is read the same way: an inherited status is no status.
    let workflow = js(&json!({ "id": "swap-42", "revision": 2,
                               "depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000" }));
    let answer = with_polluted_prototype("status", &JsValue::from_str("deposit"), || {
        binding::decide(&rules, js(&seed()), JsValue::NULL, workflow)
    });
    let expected = json!({ "code": "INVALID_RECORD", "details": { "field": "status" } });
    assert_thrown("polluted status", expect_err("polluted status", answer), &expected);
}

#[wasm_bindgen_test]
fn an_own_getter_is_read_and_one_that_throws_is_a_coded_error() {
    let rules = builtin("deposit-swap");
    let event = js(&seed());
    let getter = Function::new_no_args("return 'btc-mainnet:tx-abc:vout-0';");
    let descriptor = Object::new();
    Reflect::set(&descriptor, &"get".into(), &getter).unwrap();
    Object::define_property(event.unchecked_ref::<Object>(), &"depositRef".into(), &descriptor);
    assert_eq!(binding::fingerprint(&rules, event).map_err(|_| ()).unwrap(), SEED_FINGERPRINT);
}

// ------------------------------------------------------------ outbox policy

/// The options objects the handle and the free functions are compared under.
fn outbox_options() -> Vec<JsValue> {
    vec![
        JsValue::UNDEFINED,
        JsValue::NULL,
        js(&json!({})),
        js(&json!({ "maxAttempts": 3, "baseDelayMs": 50, "maxDelayMs": 400, "leaseMs": 900 })),
        js(&json!({ "baseDelayMs": 600000 })),
        js(&json!({ "maxAttempts": 1, "leaseMs": 1 })),
    ]
}

/// Both answered alike: the same value, or the same code, disposition, message and details.
fn same_answer<T: PartialEq + std::fmt::Debug>(label: &str, handle: Result<T, JsValue>, free: Result<T, JsValue>) {
    match (handle, free) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{label}"),
        (Err(a), Err(b)) => {
            let (a, b) = (thrown(label, a), thrown(label, b));
            assert!(!a.code.is_empty(), "{label}: a coded error");
            assert_eq!(
                (a.code, a.disposition, a.message, a.details),
                (b.code, b.disposition, b.message, b.details),
                "{label}"
            );
        }
        (a, b) => panic!("{label}: the handle answered {a:?}, the free function {b:?}"),
    }
}

#[wasm_bindgen_test]
fn the_outbox_policy_handle_answers_as_the_free_functions() {
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
        let label = format!("{options:?}");
        let handle = binding::CompiledOutboxPolicy::new(options.clone()).unwrap_or_else(|_| panic!("{label}: compiles"));
        let text = binding::outbox_policy(options.clone()).unwrap_or_else(|_| panic!("{label}: outboxPolicy"));
        assert_eq!(handle.settings_json(), text, "{label}: settingsJson");
        let compiled = binding::compile_outbox_policy(options).unwrap_or_else(|_| panic!("{label}: compileOutboxPolicy"));
        assert_eq!(compiled.settings_json(), text, "{label}: compileOutboxPolicy's settingsJson");
        for request in backoffs {
            same_answer(&format!("{label} backoff {request}"), handle.backoff(request), binding::outbox_backoff(&text, request));
        }
        for request in classifies {
            let label = format!("{label} classify {request}");
            same_answer(&label, handle.classify(request), binding::outbox_classify(&text, request));
        }
        for now in nows {
            let label = format!("{label} leaseExpiresAt {now}");
            same_answer(&label, handle.lease_expires_at(now), binding::outbox_lease_expires_at(&text, now));
        }
        for n in attempts {
            same_answer(&format!("{label} admit {n}"), handle.admit(n), binding::outbox_admit(&text, n));
        }
    }
}

#[wasm_bindgen_test]
fn the_outbox_policy_handle_gives_the_pinned_answers() {
    // The same figures as the core's own tests: the handle is not merely
    // consistent with the free functions, it is right.
    let handle = binding::compile_outbox_policy(JsValue::UNDEFINED).map_err(|_| ()).unwrap();
    assert_eq!(
        parse(&handle.settings_json()),
        json!({ "maxAttempts": 5, "baseDelayMs": 1000, "maxDelayMs": 300000, "leaseMs": 30000, "renewEveryMs": 10000 })
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
fn bad_outbox_options_are_the_same_coded_error_everywhere() {
    let bad = [
        js(&json!({ "maxAttempts": 0 })),
        js(&json!({ "maxAttempts": "3" })),
        js(&json!({ "leaseMs": 86400001 })),
        js(&json!({ "baseDelayMs": 500, "maxDelayMs": 100 })),
        js(&json!([])),
        JsValue::from_str("{}"),
        JsValue::from_f64(5.0),
    ];
    for options in bad {
        let label = format!("{options:?}");
        let free = expect_err(&label, binding::outbox_policy(options.clone()));
        let expected = thrown(&label, free.clone());
        assert_eq!(expected.code, "INVALID_ARGUMENT", "{label}: {}", expected.message);
        assert_eq!(expected.disposition, "fatal", "{label}");
        same_answer(&label, binding::CompiledOutboxPolicy::new(options.clone()).map(|_| ()), Err::<(), _>(free.clone()));
        same_answer(&label, binding::compile_outbox_policy(options).map(|_| ()), Err::<(), _>(free));
    }
    // A getter that throws is read once and refused with a code, not a raw throw.
    let options = js(&json!({}));
    define_throwing_getter(&options, "leaseMs", "boom");
    let free = expect_err("throwing getter", binding::outbox_policy(options.clone()));
    same_answer("throwing getter", binding::compile_outbox_policy(options).map(|_| ()), Err::<(), _>(free));
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

// ------------------------------------------- issue 23: payloads (RFC 8785)


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
        assert_eq!(binding::canonical_json_text(text_arg(input)).map_err(|_| ()), Ok(output.to_string()), "{name} as text");
        let bytes: JsValue = js_sys::Uint8Array::from(input.as_bytes()).into();
        assert_eq!(binding::canonical_json_text(bytes).map_err(|_| ()), Ok(output.to_string()), "{name} as UTF-8 bytes");
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
        assert_eq!(binding::canonical_json_text(text_arg(&text)).map_err(|_| ()), Ok(text), "bits {:016x} read back", x.to_bits());
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
    assert_eq!(binding::fingerprint_payload_text(text_arg("{ \"a\": null, \"b\": [1, 25e-1, \"\\u00e9\"] }")).map_err(|_| ()), Ok(expected));
}

/// A JS value from a JS expression (`new Map()`, a function, a cycle).
fn eval(expression: &str) -> JsValue {
    Function::new_no_args(&format!("return {expression};")).call0(&JsValue::NULL).expect("the expression runs")
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
    let nested = |depth: usize| eval(&format!("(() => {{ let a = []; for (let i = 1; i < {depth}; i++) a = [a]; return a; }})()"));
    assert_eq!(canonical(nested(64)), format!("{}{}", "[".repeat(64), "]".repeat(64)));
    assert!(payload_refusal("65 deep", binding::canonical_json(nested(65))).message.contains("deeper than 64"));
    assert!(payload_refusal("100000 deep", binding::canonical_json(nested(100_000))).message.contains("deeper than 64"));
    let large = eval("({ a: 'x'.repeat(600000), b: 'y'.repeat(600000) })");
    assert!(payload_refusal("large", binding::canonical_json(large)).message.contains("maxPayloadBytes"));
    let getter = eval("({ get a() { throw new Error('boom'); } })");
    assert!(payload_refusal("getter", binding::canonical_json(getter)).message.contains("boom"));
    // A Date is what JSON.stringify makes of it (toJSON): its ISO text.
    assert_eq!(canonical(eval("({ at: new Date(0) })")), "{\"at\":\"1970-01-01T00:00:00.000Z\"}");
    let text = binding::canonical_json_text(text_arg("[\"\\ud800\"]"));
    assert!(payload_refusal("lone escape", text).message.contains("lone surrogate"));
    assert_eq!(thrown("not text", expect_err("not text", binding::canonical_json_text(JsValue::from_f64(1.0)))).code, "INVALID_ARGUMENT");
}

#[wasm_bindgen_test]
fn ten_thousand_refused_payloads_do_not_grow_memory() {
    let bad = [eval("({ a: [1, 2, undefined] })"), eval("({ n: NaN })"), eval("(() => { const a = []; a.push(a); return a; })()")];
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
    let before = binding::memory_bytes();
    for i in 0..10_000 {
        round(i);
    }
    assert_eq!(binding::memory_bytes(), before, "refused payloads grew wasm memory");
}
