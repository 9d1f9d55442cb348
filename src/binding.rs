//! Every `#[wasm_bindgen]` item of idemflow. This module converts values and
//! maps errors; it decides nothing. Inputs are read inside the function bodies
//! (never in the ABI layer), so a bad input returns an ordinary `Err` and every
//! Rust value is dropped on the way out: rejected calls do not leak memory.

use js_sys::{JsString, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::batch;
use crate::compat::plan_deposit_confirmation;
use crate::decide::{self};
use crate::error::{Error, CODES};
use crate::event::{validate, validate_as};
use crate::field::MAX_TEXT_BYTES;
use crate::fingerprint::fingerprint as fingerprint_of;
use crate::input::{Input, Source};
use crate::json;
use crate::limits::{self, MAX_DEFINITION_BYTES, MAX_JSON_INPUT_BYTES};
use crate::outbox::Policy;
use crate::ruleset::{table, verify, RuleSet};

/// Throws a JS `Error` carrying `idemflowCode`, `disposition` and `details`;
/// the package's JS turns it into an `IdemflowError`.
fn throw(error: Error) -> JsValue {
    let js = js_sys::Error::new(&error.to_string());
    let details = serde_json::to_string(&error.details()).unwrap_or_else(|_| "{}".into());
    let details = js_sys::JSON::parse(&details).unwrap_or_else(|_| js_sys::Object::new().into());
    let _ = Reflect::set(&js, &"idemflowCode".into(), &error.code().into());
    let _ = Reflect::set(&js, &"disposition".into(), &error.disposition().as_str().into());
    let _ = Reflect::set(&js, &"details".into(), &details);
    js.into()
}

type JsResult<T> = Result<T, JsValue>;

/// A JS object read one property at a time, only when the core asks.
struct JsObject<'a>(&'a JsValue);

impl Source for JsObject<'_> {
    fn field(&self, name: &str) -> Input {
        // A UTF-8 string is never shorter than its UTF-16 form: longer than the
        // longest field in units means too long in bytes, and it is not copied.
        to_input(read_field(self.0, &key(name), MAX_TEXT_BYTES as u32))
    }

    fn json_text(&self, name: &str) -> Input {
        to_input(read_json(self.0, &key(name), MAX_RESULT_UNITS))
    }
}

/// The longest JSON text a structured record field is read as (a receipt's
/// `result`); longer is too long, and the core refuses it.
const MAX_RESULT_UNITS: u32 = 64 * 1024;

// Reading a property can run a getter or a proxy trap that throws. The throw
// is caught inside JS and reported as a sentinel symbol: an exception that
// reaches wasm through a `catch` import costs an externref slot in
// wasm-bindgen 0.2.130, so 100,000 throwing getters would grow the memory.
//
// Only own properties are read: a member inherited through the prototype
// chain (`Object.create(event)`, a polluted `Object.prototype.amountUnits`)
// is absent. An own accessor is part of the object the caller built, so its
// getter runs (once per read, as a data property's value would be read); a
// getter that throws is an unreadable field, a coded error like any other.
// `Object.hasOwn` is captured at load, so later pollution of `Object` cannot
// change what it does.
#[wasm_bindgen(inline_js = "
const FAILED = Symbol('idemflow: property read failed');
const TOO_LONG = Symbol('idemflow: string too long');
const hasOwn = Object.hasOwn;
let lastThrown;
module.exports.read_field = function (target, key, maxUnits) {
  let value;
  try {
    if (!hasOwn(target, key)) return undefined;
    value = target[key];
  } catch (thrown) { lastThrown = thrown; return FAILED; }
  if (typeof value === 'string' && value.length > maxUnits) return TOO_LONG;
  return value;
};
module.exports.read_failure = function (value) {
  if (value !== FAILED) return undefined;
  const thrown = lastThrown;
  lastThrown = undefined;
  try {
    if (typeof thrown === 'string') return thrown.slice(0, 200);
    const message = thrown !== null && typeof thrown === 'object' ? thrown.message : undefined;
    return typeof message === 'string' ? message.slice(0, 200) : 'a value without a message was thrown';
  } catch (_) {
    return 'a value that cannot be inspected was thrown';
  }
};
module.exports.read_json = function (target, key, maxUnits) {
  const value = module.exports.read_field(target, key, maxUnits);
  if (value === null || typeof value !== 'object') return value;
  let text;
  try { text = JSON.stringify(value); } catch (thrown) { lastThrown = thrown; return FAILED; }
  if (typeof text !== 'string') return undefined;
  return text.length > maxUnits ? TOO_LONG : text;
};
module.exports.is_too_long = function (value) { return value === TOO_LONG; };
module.exports.is_well_formed = function (text) {
  for (let i = 0; i < text.length; i += 1) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
      i += 1;
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      return false;
    }
  }
  return true;
};
module.exports.is_array = function (value) {
  try { return Array.isArray(value); } catch (_) { return false; }
};
module.exports.is_binary = function (value) {
  try {
    return ArrayBuffer.isView(value) || value instanceof ArrayBuffer ||
      (typeof SharedArrayBuffer === 'function' && value instanceof SharedArrayBuffer);
  } catch (_) { return false; }
};
")]
extern "C" {
    /// `target[key]` when `key` is an own property (undefined otherwise), or a
    /// sentinel symbol when the read threw (a getter, a proxy) or the value is
    /// a string longer than `max_units` UTF-16 units.
    /// Catching inside JS keeps exceptions out of the wasm call path: one that
    /// reaches wasm through a `catch` import costs an externref slot in
    /// wasm-bindgen 0.2.130, so 100,000 throwing getters would grow memory.
    fn read_field(target: &JsValue, key: &JsValue, max_units: u32) -> JsValue;
    /// As `read_field`, but an object or array comes back as its JSON text
    /// (`JSON.stringify`, caught the same way).
    fn read_json(target: &JsValue, key: &JsValue, max_units: u32) -> JsValue;
    fn read_failure(value: &JsValue) -> Option<String>;
    fn is_too_long(value: &JsValue) -> bool;
    fn is_well_formed(text: &JsValue) -> bool;
    /// `Array.isArray`, false for a revoked proxy (which can be neither read nor listed).
    fn is_array(value: &JsValue) -> bool;
    /// A Buffer, typed array, DataView or ArrayBuffer: bytes, not an object to read fields from.
    fn is_binary(value: &JsValue) -> bool;
}

thread_local! {
    /// Property names as JS strings, made once: decoding a name on every read
    /// was a measurable share of a decision.
    static KEYS: std::cell::RefCell<std::collections::HashMap<String, JsValue>> = Default::default();
}

fn key(name: &str) -> JsValue {
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        match keys.get(name) {
            Some(key) => key.clone(),
            None => {
                let key = JsValue::from_str(name);
                keys.insert(name.to_string(), key.clone());
                key
            }
        }
    })
}

fn to_input(value: JsValue) -> Input {
    // The common case first: one crossing copies a string in.
    if let Some(text) = value.as_string() {
        // wasm-bindgen turns a lone surrogate into U+FFFD on the way in; only
        // a string that now holds U+FFFD needs the exact check.
        if text.contains('\u{FFFD}') && !is_well_formed(&value) {
            return Input::IllFormedText;
        }
        return Input::Text(text);
    }
    if value.is_undefined() {
        return Input::Absent;
    }
    if value.is_null() {
        return Input::Null;
    }
    if let Some(number) = value.as_f64() {
        return Input::Number(number);
    }
    if value.is_symbol() {
        if is_too_long(&value) {
            return Input::TooLong { utf16_units: MAX_TEXT_BYTES as u64 + 1 };
        }
        if let Some(why) = read_failure(&value) {
            return Input::Unreadable(why);
        }
    }
    Input::Other(kind(&value))
}

fn kind(value: &JsValue) -> &'static str {
    if value.as_bool().is_some() {
        "boolean"
    } else if value.is_bigint() {
        "bigint"
    } else if value.is_symbol() {
        "symbol"
    } else if value.is_function() {
        "function"
    } else if is_array(value) {
        "array"
    } else if value.is_object() {
        "object"
    } else {
        "unknown"
    }
}

fn as_event(value: &JsValue) -> Result<JsObject<'_>, Error> {
    // The JSON text of an event, or its bytes, is a common slip at a queue
    // boundary: say what was passed and what to do, not "eventId is required".
    if value.is_object() && !is_array(value) && !is_binary(value) {
        Ok(JsObject(value))
    } else {
        let what = if value.is_undefined() {
            "missing"
        } else if value.is_null() {
            "null"
        } else if value.is_string() {
            "a string: parse it first"
        } else if is_binary(value) {
            "a Buffer: decode and parse it first"
        } else {
            kind(value)
        };
        Err(Error::InvalidEvent { field: "event".into(), reason: format!("must be an object, not {what}"), event_id: None })
    }
}

fn as_record<'a>(value: &'a JsValue, name: &str) -> Result<Option<JsObject<'a>>, Error> {
    if value.is_undefined() || value.is_null() {
        Ok(None)
    } else if value.is_object() && !is_array(value) {
        Ok(Some(JsObject(value)))
    } else {
        Err(Error::InvalidArgument { reason: format!("{name} must be an object or null, not {}", kind(value)) })
    }
}

enum Rules {
    Builtin(&'static RuleSet),
    Loaded(Box<RuleSet>),
}

/// A loaded, verified rule set held in wasm memory, so a worker parses its
/// rules once and not per event; what the fast decide path needs of it is
/// made on its first use.
#[wasm_bindgen(js_name = CompiledRuleSet)]
pub struct CompiledRuleSet(Rules, std::cell::OnceCell<batch::Prepared>);

impl CompiledRuleSet {
    fn new(rules: Rules) -> CompiledRuleSet {
        CompiledRuleSet(rules, std::cell::OnceCell::new())
    }

    fn rules(&self) -> &RuleSet {
        match &self.0 {
            Rules::Builtin(r) => r,
            Rules::Loaded(r) => r,
        }
    }

    fn prepared(&self) -> &batch::Prepared {
        self.1.get_or_init(|| batch::Prepared::new(self.rules()))
    }
}

#[wasm_bindgen(js_class = CompiledRuleSet)]
impl CompiledRuleSet {
    #[wasm_bindgen(getter)]
    pub fn id(&self) -> String {
        self.rules().id.clone()
    }

    #[wasm_bindgen(getter)]
    pub fn version(&self) -> f64 {
        self.rules().version as f64
    }

    #[wasm_bindgen(getter)]
    pub fn hash(&self) -> String {
        self.rules().hash.clone()
    }

    #[wasm_bindgen(js_name = definitionJson)]
    pub fn definition_json(&self) -> String {
        self.rules().definition.to_string()
    }

    #[wasm_bindgen(js_name = tableJson)]
    pub fn table_json(&self) -> String {
        table::rows_json(self.rules()).to_string()
    }

    #[wasm_bindgen(js_name = tableMarkdown)]
    pub fn table_markdown(&self) -> String {
        table::markdown(self.rules())
    }

    /// What a host needs to lay items out for `DecideScratch` (see `batch::layout_json`).
    #[wasm_bindgen(js_name = fastLayoutJson)]
    pub fn fast_layout_json(&self) -> String {
        batch::layout_json(self.rules()).to_string()
    }

    /// The write a rule applies for an event type, as a template (see
    /// `batch::template`); `undefined` for a rule that applies no transition.
    #[wasm_bindgen(js_name = fastTemplateJson)]
    pub fn fast_template_json(&self, rule: u32, event_type: u32) -> Option<String> {
        batch::template(self.rules(), rule as usize, event_type as usize).map(|t| t.to_string())
    }
}

/// A built-in rule set; `version` picks an older one (for audit), `None` the current.
#[wasm_bindgen(js_name = builtinRuleSet)]
pub fn builtin_rule_set(name: &str, version: Option<f64>) -> JsResult<CompiledRuleSet> {
    let version = match version {
        None => None,
        Some(v) if v.fract() == 0.0 && (1.0..=crate::jcs::MAX_SAFE_INTEGER as f64).contains(&v) => {
            Some(v as u64)
        }
        Some(v) => {
            return Err(throw(Error::InvalidArgument {
                reason: format!("version must be a positive whole number, not {v}"),
            }))
        }
    };
    RuleSet::builtin_version(name, version)
        .map(|r| CompiledRuleSet::new(Rules::Builtin(r)))
        .map_err(throw)
}

/// A JS string argument copied into wasm memory only when it can be within
/// `max_bytes` of UTF-8: a UTF-8 text is never shorter than its UTF-16 form,
/// so a longer string is refused by its length alone, before it costs memory
/// (wasm memory never shrinks, and a copy too large for it traps the module).
fn bounded_text(value: &JsValue, max_bytes: usize, refuse: impl Fn(usize) -> Error) -> Result<String, Error> {
    let Some(text) = value.dyn_ref::<JsString>() else {
        return Err(Error::InvalidArgument { reason: format!("expected JSON text, not {}", kind(value)) });
    };
    let units = text.length() as usize;
    if units > max_bytes {
        return Err(refuse(units));
    }
    let text = String::from(text);
    if text.len() > max_bytes {
        return Err(refuse(text.len()));
    }
    Ok(text)
}

fn definition_text(value: &JsValue) -> Result<String, Error> {
    if !value.is_string() {
        return Err(Error::RuleSetInvalid { path: "$".into(), reason: "must be JSON text".into(), report: None });
    }
    bounded_text(value, MAX_DEFINITION_BYTES, |found| {
        limits::exceeded("$", "maxDefinitionBytes", MAX_DEFINITION_BYTES, "bytes of JSON text", found)
    })
}

fn json_input(value: &JsValue, what: &str) -> Result<String, Error> {
    bounded_text(value, MAX_JSON_INPUT_BYTES, |found| Error::InvalidArgument {
        reason: format!("{what} is at least {found} bytes of JSON text; limit maxJsonInputBytes is {MAX_JSON_INPUT_BYTES}"),
    })
}

/// A definition's JSON text, size-checked, parsed and loaded (not verified).
fn load_definition(definition: &JsValue) -> Result<RuleSet, Error> {
    let text = definition_text(definition)?;
    crate::ruleset::load_unverified(&limits::parse_definition(&text)?)
}

#[wasm_bindgen(js_name = loadRuleSet)]
pub fn load_rule_set(definition: JsValue) -> JsResult<CompiledRuleSet> {
    let text = definition_text(&definition).map_err(throw)?;
    let value = limits::parse_definition(&text).map_err(throw)?;
    RuleSet::from_value(&value).map(|r| CompiledRuleSet::new(Rules::Loaded(Box::new(r)))).map_err(throw)
}

/// The property report as JSON; throws only when the definition is malformed.
#[wasm_bindgen(js_name = verifyRuleSet)]
pub fn verify_rule_set(definition: JsValue) -> JsResult<String> {
    let rule_set = load_definition(&definition).map_err(throw)?;
    verify::verify(&rule_set).map(|r| r.to_json().to_string()).map_err(throw)
}

#[wasm_bindgen(js_name = validateEvent)]
pub fn validate_event(rules: &CompiledRuleSet, event: JsValue) -> JsResult<()> {
    let event = as_event(&event).map_err(throw)?;
    validate(rules.rules(), &event).map(|_| ()).map_err(throw)
}

/// The validated event as JSON text: a plain copy the host works from, so a
/// getter is read once and a later change to the caller's object changes nothing.
#[wasm_bindgen(js_name = normalizeEvent)]
pub fn normalize_event(rules: &CompiledRuleSet, event: JsValue, expected_type: Option<String>) -> JsResult<String> {
    let event = as_event(&event).map_err(throw)?;
    let valid = validate_as(rules.rules(), &event, expected_type.as_deref()).map_err(throw)?;
    Ok(valid.to_json(rules.rules()).to_string())
}

#[wasm_bindgen]
pub fn fingerprint(rules: &CompiledRuleSet, event: JsValue) -> JsResult<String> {
    let event = as_event(&event).map_err(throw)?;
    let valid = validate(rules.rules(), &event).map_err(throw)?;
    Ok(fingerprint_of(rules.rules(), &valid))
}

#[wasm_bindgen(js_name = fingerprintJson)]
pub fn fingerprint_json(rules: &CompiledRuleSet, event: JsValue) -> JsResult<String> {
    let event = json_input(&event, "event").map_err(throw)?;
    json::fingerprint_json(rules.rules(), &event).map_err(throw)
}

/// The decision as JSON text (one string across the boundary is cheaper than
/// building the object property by property).
#[wasm_bindgen]
pub fn decide(rules: &CompiledRuleSet, event: JsValue, receipt: JsValue, workflow: JsValue) -> JsResult<String> {
    let event = as_event(&event).map_err(throw)?;
    let receipt = as_record(&receipt, "receipt").map_err(throw)?;
    let workflow = as_record(&workflow, "workflow").map_err(throw)?;
    let decision = decide::decide(
        rules.rules(),
        &event,
        receipt.as_ref().map(|r| r as &dyn Source),
        workflow.as_ref().map(|w| w as &dyn Source),
    )
    .map_err(throw)?;
    serde_json::to_string(&decision).map_err(|e| throw(Error::InvalidArgument { reason: e.to_string() }))
}

#[wasm_bindgen(js_name = decideJson)]
pub fn decide_json(rules: &CompiledRuleSet, input: JsValue) -> JsResult<String> {
    let input = json_input(&input, "decide input").map_err(throw)?;
    json::decide_json(rules.rules(), &input).map_err(throw)
}

#[wasm_bindgen(js_name = planDepositConfirmation)]
pub fn plan_deposit(workflow: JsValue, event: JsValue) -> JsResult<String> {
    let event = as_event(&event).map_err(throw)?;
    let workflow = as_record(&workflow, "workflow").map_err(throw)?;
    plan_deposit_confirmation(&event, workflow.as_ref().map(|w| w as &dyn Source)).map(str::to_string).map_err(throw)
}

/// `{code: disposition}` for every error code.
#[wasm_bindgen(js_name = errorCodes)]
pub fn error_codes() -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        CODES.iter().map(|(code, d)| (code.to_string(), d.as_str().into())).collect();
    serde_json::Value::Object(map).to_string()
}

/// The size of the wasm linear memory in bytes (it only ever grows): tests pin
/// that rejected calls do not make it grow.
#[wasm_bindgen(js_name = memoryBytes)]
pub fn memory_bytes() -> f64 {
    (core::arch::wasm32::memory_size(0) * 65536) as f64
}

// ---------------------------------------------------------------------------
// The fast decide path (issue 11): the host lays a batch out in these regions
// of wasm memory (typed-array views over the pointers below), one call
// decides it, and the host reads the answers from the same memory. No JSON
// and no per-field crossing; `batch` says what each region holds.
// ---------------------------------------------------------------------------

/// The most items and text one scratch holds: far above any useful batch,
/// and well inside wasm's 4 GiB, so a growth request cannot trap the module.
const MAX_SCRATCH_ITEMS: u32 = 1 << 16;
const MAX_SCRATCH_TEXT: u32 = 64 << 20;

#[wasm_bindgen(js_name = DecideScratch)]
#[derive(Default)]
pub struct DecideScratch {
    entries: Vec<i32>,
    numbers: Vec<f64>,
    text: Vec<u8>,
    answer_ints: Vec<i32>,
    answer_numbers: Vec<f64>,
    fingerprints: Vec<u8>,
    work: batch::Work,
}

fn grow<T: Default + Clone>(region: &mut Vec<T>, len: usize) {
    if region.len() < len {
        region.resize(len, T::default());
    }
}

#[wasm_bindgen(js_class = DecideScratch)]
impl DecideScratch {
    #[wasm_bindgen(constructor)]
    pub fn new() -> DecideScratch {
        DecideScratch::default()
    }

    /// Room for `items` items of `entries_per_item` entries and `text_bytes`
    /// bytes of text. The regions may move: read the pointers again after.
    pub fn reserve(&mut self, items: u32, entries_per_item: u32, text_bytes: u32) -> JsResult<()> {
        if items > MAX_SCRATCH_ITEMS || entries_per_item > 4096 || text_bytes > MAX_SCRATCH_TEXT {
            return Err(throw(Error::InvalidArgument {
                reason: format!("a decide batch holds at most {MAX_SCRATCH_ITEMS} items and {MAX_SCRATCH_TEXT} bytes of text"),
            }));
        }
        let items = items as usize;
        grow(&mut self.entries, items * entries_per_item as usize);
        grow(&mut self.numbers, items);
        grow(&mut self.answer_ints, items * batch::RESULT_INTS);
        grow(&mut self.answer_numbers, items * batch::RESULT_NUMBERS);
        grow(&mut self.fingerprints, items * batch::FINGERPRINT_BYTES);
        grow(&mut self.text, text_bytes as usize);
        Ok(())
    }

    /// The regions: `[pointer, length]` pairs, in elements, for entries, numbers,
    /// text, answer ints, answer numbers and fingerprints.
    pub fn regions(&self) -> Vec<u32> {
        vec![
            self.entries.as_ptr() as u32,
            self.entries.len() as u32,
            self.numbers.as_ptr() as u32,
            self.numbers.len() as u32,
            self.text.as_ptr() as u32,
            self.text.len() as u32,
            self.answer_ints.as_ptr() as u32,
            self.answer_ints.len() as u32,
            self.answer_numbers.as_ptr() as u32,
            self.answer_numbers.len() as u32,
            self.fingerprints.as_ptr() as u32,
            self.fingerprints.len() as u32,
        ]
    }

    /// Decides the `count` items laid out (`text_len` bytes of text; `ascii`
    /// when that is as many bytes as UTF-16 units); returns how many were
    /// decided here. The rest are answered SLOW: the host calls `decide`.
    pub fn decide(&mut self, rules: &CompiledRuleSet, count: u32, text_len: u32, ascii: bool) -> JsResult<u32> {
        let Some(text) = self.text.get(..text_len as usize) else {
            return Err(throw(Error::InvalidArgument { reason: "text_len is past the text region".into() }));
        };
        batch::decide_batch(
            rules.rules(),
            rules.prepared(),
            count as usize,
            batch::Batch { text, entries: &self.entries, numbers: &self.numbers, ascii },
            batch::Answers { ints: &mut self.answer_ints, numbers: &mut self.answer_numbers, fingerprints: &mut self.fingerprints },
            &mut self.work,
        )
        .map(|n| n as u32)
        .map_err(throw)
    }
}

/// The module's memory, for typed-array views over a `DecideScratch`.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

// ---------------------------------------------------------------------------
// Outbox policy (issue 5). New items only; each converts its arguments and
// hands them to `crate::outbox`, which decides. Times are integer ms since
// the epoch, checked in the core (a fraction, NaN or a negative is refused).
// ---------------------------------------------------------------------------

/// The settings an options object (or `undefined`/`null`: every default) gives.
fn policy_of(options: &JsValue) -> Result<Policy, Error> {
    match as_record(options, "outbox options")? {
        Some(source) => Policy::from_source(&source),
        None => Policy::from_source(&serde_json::Map::new()),
    }
}

/// An outbox policy read once and held in wasm memory, as `CompiledRuleSet`
/// holds rules: a consumer's calls per operation do not re-read its settings.
/// The free functions below answer alike: both call `json::outbox` on a `Policy`.
#[wasm_bindgen(js_name = OutboxPolicy)]
pub struct CompiledOutboxPolicy(Policy);

#[wasm_bindgen(js_class = OutboxPolicy)]
impl CompiledOutboxPolicy {
    /// `{maxAttempts?, baseDelayMs?, maxDelayMs?, leaseMs?}`; throws as `outboxPolicy` does.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> JsResult<CompiledOutboxPolicy> {
        policy_of(&options).map(CompiledOutboxPolicy).map_err(throw)
    }

    /// The settings (absent ones defaulted, with `renewEveryMs`): the text `outboxPolicy` returns.
    #[wasm_bindgen(js_name = settingsJson)]
    pub fn settings_json(&self) -> String {
        json::outbox::settings_json(&self.0)
    }

    /// `{"operationId", "attempt"}` (JSON text) in; `{"attempt", "ceilingMs", "delayMs"}` out.
    pub fn backoff(&self, request: &str) -> JsResult<String> {
        json::outbox::backoff(&self.0, request).map_err(throw)
    }

    /// When a claim taken or renewed at `now` expires.
    #[wasm_bindgen(js_name = leaseExpiresAt)]
    pub fn lease_expires_at(&self, now: f64) -> JsResult<f64> {
        json::outbox::lease_expires_at(&self.0, now).map(|t| t as f64).map_err(throw)
    }

    /// `{"verdict":"run"}`, or dead when the claim is past `maxAttempts`.
    pub fn admit(&self, attempts: f64) -> JsResult<String> {
        json::outbox::admit(&self.0, attempts).map_err(throw)
    }

    /// A handler's result (JSON text) in; the verdict to record out.
    pub fn classify(&self, request: &str) -> JsResult<String> {
        json::outbox::classify(&self.0, request).map_err(throw)
    }
}

/// `new OutboxPolicy(options)` as a function.
#[wasm_bindgen(js_name = compileOutboxPolicy)]
pub fn compile_outbox_policy(options: JsValue) -> JsResult<CompiledOutboxPolicy> {
    CompiledOutboxPolicy::new(options)
}

// The policy as text, re-read on every call: kept for callers that hold the
// text (the JS consumer until it moves to `OutboxPolicy`).

/// The policy's settings (absent ones defaulted) as JSON text; the consumer
/// passes this text back to the functions below.
#[wasm_bindgen(js_name = outboxPolicy)]
pub fn outbox_policy(options: JsValue) -> JsResult<String> {
    policy_of(&options).map(|policy| json::outbox::settings_json(&policy)).map_err(throw)
}

/// `{"operationId", "attempt"}` (JSON text) in; `{"attempt", "ceilingMs", "delayMs"}` out.
#[wasm_bindgen(js_name = outboxBackoff)]
pub fn outbox_backoff(policy: &str, request: &str) -> JsResult<String> {
    json::outbox::backoff_json(policy, request).map_err(throw)
}

/// When a claim taken or renewed at `now` expires.
#[wasm_bindgen(js_name = outboxLeaseExpiresAt)]
pub fn outbox_lease_expires_at(policy: &str, now: f64) -> JsResult<f64> {
    json::outbox::lease_expires_at_args(policy, now).map(|t| t as f64).map_err(throw)
}

/// Whether a stored operation may be claimed at `now`.
#[wasm_bindgen(js_name = outboxClaimable)]
pub fn outbox_claimable(status: &str, next_attempt_at: f64, lease_expires_at: Option<f64>, now: f64) -> JsResult<bool> {
    json::outbox::claimable_args(status, next_attempt_at, lease_expires_at, now).map_err(throw)
}

/// `{"verdict":"run"}`, or dead when the claim is past `maxAttempts`.
#[wasm_bindgen(js_name = outboxAdmit)]
pub fn outbox_admit(policy: &str, attempts: f64) -> JsResult<String> {
    json::outbox::admit_json(policy, attempts).map_err(throw)
}

/// A handler's result (JSON text) in; the verdict to record out.
#[wasm_bindgen(js_name = outboxClassify)]
pub fn outbox_classify(policy: &str, request: &str) -> JsResult<String> {
    json::outbox::classify_json(policy, request).map_err(throw)
}

// ---------------------------------------------------------------------------
// Payloads (issue 23): the RFC 8785 text and the `pf1:` fingerprint of any
// JSON value a host holds (a request body, a keyed call's arguments), as a
// value or as the JSON text it came in. `json::payload` decides; this block
// only brings the value across.
// ---------------------------------------------------------------------------

// A value becomes text through JSON.stringify, whose replacer sees every
// value once, as it is serialised (after toJSON, so a Date is its ISO text):
// what JSON.stringify would drop or change without a word (undefined, a
// function, a symbol, NaN and the infinities, a Map or any object that is
// not plain) is refused with its path, and so are a BigInt, a lone surrogate,
// nesting beyond the bound and text beyond the bound (counted as it grows, so
// a huge value is not serialised first). A refusal is an object, never an
// exception, for the reason `read_field` gives above.
#[wasm_bindgen(inline_js = "
const REFUSED = Symbol('idemflow: payload refused');
const stringify = JSON.stringify;
const isArray = Array.isArray;
const getPrototypeOf = Object.getPrototypeOf;
const objectPrototype = Object.prototype;
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
function step(parent, holder, key) {
  if (isArray(holder)) return `${parent}[${key}]`;
  if (IDENTIFIER.test(key) && key.length <= 64) return `${parent}.${key}`;
  return `${parent}[${stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key)}]`;
}
function kindOf(value) {
  const proto = getPrototypeOf(value);
  const name = proto !== null && typeof proto.constructor === 'function' ? proto.constructor.name : '';
  return name ? `a ${name}` : 'an object with a prototype';
}
module.exports.payload_json = function (value, maxUnits, maxDepth) {
  const seen = new Map();
  let units = 0;
  let refusal = null;
  let top = true;
  const refuse = (path, reason) => { refusal = { path, reason }; throw REFUSED; };
  function replacer(key, item) {
    let depth = 0;
    let path = '$';
    if (top) {
      top = false;
    } else {
      const parent = seen.get(this);
      depth = parent.depth;
      path = step(parent.path, this, key);
      if (!isArray(this)) {
        if (!key.isWellFormed()) refuse(path, 'is a member name with a lone surrogate (not well-formed Unicode)');
        units += key.length + 3;
      }
    }
    switch (typeof item) {
      case 'string':
        if (!item.isWellFormed()) refuse(path, 'is a string with a lone surrogate (not well-formed Unicode)');
        units += item.length + 2;
        break;
      case 'number':
        if (!Number.isFinite(item)) refuse(path, `is ${item}: JSON has only finite numbers`);
        units += 24;
        break;
      case 'boolean':
        units += 5;
        break;
      case 'object':
        if (item === null) {
          units += 4;
          break;
        }
        if (depth + 1 > maxDepth) refuse(path, `nests deeper than ${maxDepth} arrays and objects`);
        if (!isArray(item)) {
          const proto = getPrototypeOf(item);
          if (proto !== objectPrototype && proto !== null) refuse(path, `is ${kindOf(item)}, not a plain object or an array`);
        }
        seen.set(item, { depth: depth + 1, path });
        units += 2;
        break;
      case 'bigint':
        refuse(path, 'is a BigInt: JSON numbers are doubles (write a large integer as a decimal string)');
        break;
      case 'undefined':
        refuse(path, 'is undefined: JSON has none (leave the member out, or write null)');
        break;
      default:
        refuse(path, `is a ${typeof item}: JSON has none`);
    }
    if (units > maxUnits) refuse('$', `is more than ${maxUnits} characters of JSON text; limit maxPayloadBytes is ${maxUnits}`);
    return item;
  }
  try {
    return stringify(value, replacer);
  } catch (thrown) {
    if (thrown === REFUSED) return refusal;
    if (thrown instanceof TypeError && /circular/i.test(thrown.message)) return { path: '$', reason: 'holds a cycle (an object inside itself)' };
    if (thrown instanceof RangeError) return { path: '$', reason: `nests deeper than ${maxDepth} arrays and objects` };
    let message = 'a value without a message was thrown';
    try {
      if (thrown !== null && typeof thrown === 'object' && typeof thrown.message === 'string') message = thrown.message.slice(0, 200);
      else if (typeof thrown === 'string') message = thrown.slice(0, 200);
    } catch (_) { message = 'a value that cannot be inspected was thrown'; }
    return { path: '$', reason: `could not be read: ${message}` };
  }
};
")]
extern "C" {
    /// The JSON text of `value`, or `{path, reason}` when it is no JSON value
    /// within the bounds.
    fn payload_json(value: &JsValue, max_units: u32, max_depth: u32) -> JsValue;
}

/// The JSON text of a value a host holds, or INVALID_PAYLOAD naming where it is not JSON.
fn payload_text(value: &JsValue) -> Result<String, Error> {
    use crate::json::payload::{invalid, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH};
    let text = payload_json(value, MAX_PAYLOAD_BYTES as u32, MAX_PAYLOAD_DEPTH as u32);
    if text.is_string() {
        return bounded_text(&text, MAX_PAYLOAD_BYTES, |found| {
            invalid("$", format!("is {found} bytes of JSON text; limit maxPayloadBytes is {MAX_PAYLOAD_BYTES}"))
        });
    }
    let read = |name: &str| Reflect::get(&text, &name.into()).ok().and_then(|v| v.as_string()).unwrap_or_default();
    Err(invalid(read("path"), read("reason")))
}

/// A finite double as the host's Number::toString writes it.
fn write_js_number(out: &mut String, value: f64) -> Result<(), String> {
    if !value.is_finite() {
        return Err("is not a finite number".into());
    }
    out.push_str(&String::from(JsValue::from_f64(value).unchecked_into::<js_sys::Number>().to_string(10).unwrap_or_default()));
    Ok(())
}

/// The RFC 8785 text of JSON text a host hands over: a string, or its UTF-8
/// bytes (a Uint8Array, a Buffer). Numbers are read by the host's parseFloat,
/// which reads a JSON number token exactly as JSON.parse does, and written by
/// its Number::toString, which RFC 8785 §3.2.2.3 names.
fn canonical_of_text(text: &JsValue) -> Result<String, Error> {
    use crate::json::payload::{canonical_text_with, canonical_utf8, invalid, Numbers, MAX_PAYLOAD_BYTES};
    let numbers = Numbers { read: &|token| Some(js_sys::parse_float(token)), write: &write_js_number };
    if let Some(view) = text.dyn_ref::<js_sys::Uint8Array>() {
        let found = view.length() as usize;
        if found > MAX_PAYLOAD_BYTES {
            return Err(invalid("$", format!("is {found} bytes of JSON text; limit maxPayloadBytes is {MAX_PAYLOAD_BYTES}")));
        }
        return canonical_utf8(&view.to_vec(), &numbers);
    }
    if !text.is_string() {
        return Err(Error::InvalidArgument { reason: format!("JSON text must be a string or a Uint8Array, not {}", kind(text)) });
    }
    let text = bounded_text(text, MAX_PAYLOAD_BYTES, |found| {
        invalid("$", format!("is at least {found} bytes of JSON text; limit maxPayloadBytes is {MAX_PAYLOAD_BYTES}"))
    })?;
    canonical_text_with(&text, &numbers)
}

/// The RFC 8785 text of any JSON value.
#[wasm_bindgen(js_name = canonicalJson)]
pub fn canonical_json(value: JsValue) -> JsResult<String> {
    payload_text(&value).and_then(|text| canonical_of_text(&text.into())).map_err(throw)
}

/// `pf1:` + SHA-256 of the RFC 8785 text of any JSON value.
#[wasm_bindgen(js_name = fingerprintPayload)]
pub fn fingerprint_payload(value: JsValue) -> JsResult<String> {
    canonical_json(value).map(|canonical| json::payload::fingerprint_canonical(&canonical))
}

/// The RFC 8785 text of JSON text (a string or UTF-8 bytes).
#[wasm_bindgen(js_name = canonicalJsonText)]
pub fn canonical_json_text(text: JsValue) -> JsResult<String> {
    canonical_of_text(&text).map_err(throw)
}

/// `pf1:` + SHA-256 of the RFC 8785 text of JSON text (a string or UTF-8 bytes).
#[wasm_bindgen(js_name = fingerprintPayloadText)]
pub fn fingerprint_payload_text(text: JsValue) -> JsResult<String> {
    canonical_json_text(text).map(|canonical| json::payload::fingerprint_canonical(&canonical))
}

/// The keyed mode's decision (`json::keyed`): JSON text in and out.
#[wasm_bindgen(js_name = decideKey)]
pub fn decide_key(request: &str) -> JsResult<String> {
    json::keyed::decide_key(request).map_err(throw)
}
