//! Every `#[wasm_bindgen]` item of idemflow. This module converts values and
//! maps errors; it decides nothing. Values a host hands over arrive packed
//! (`crate::packed`): the host reads its objects, says what each value was,
//! and lays them out in a `Decider`'s regions of wasm memory; nothing here
//! reads a JS object. Rust values are dropped on every way out, so rejected
//! calls do not leak memory.

use js_sys::{JsString, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::compat;
use crate::decide::{self, Work, ANSWER_INTS, ANSWER_NUMBERS};
use crate::error::{Error, CODES};
use crate::event;
use crate::fingerprint;
use crate::json;
use crate::limits::{self, MAX_DEFINITION_BYTES};
use crate::outbox::{Policy, OPTIONS};
use crate::packed::{self, Item, Layout, Packed, Record, Spans};
use crate::ruleset::{table, verify, RuleSet};
use crate::writes;

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

enum Rules {
    Builtin(&'static RuleSet),
    Loaded(Box<RuleSet>),
}

/// A loaded, verified rule set held in wasm memory, so a worker parses its
/// rules once and not per event.
#[wasm_bindgen(js_name = CompiledRuleSet)]
pub struct CompiledRuleSet(Rules);

impl CompiledRuleSet {
    fn rules(&self) -> &RuleSet {
        match &self.0 {
            Rules::Builtin(r) => r,
            Rules::Loaded(r) => r,
        }
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

    /// How a host lays items out for this rule set (`packed::layout_json`).
    #[wasm_bindgen(js_name = layoutJson)]
    pub fn layout_json(&self) -> String {
        packed::layout_json(self.rules())
    }

    /// The write a rule makes for an event type, as a template (see
    /// `writes::Write::to_json`); `undefined` for a rule that applies no transition.
    #[wasm_bindgen(js_name = writeTemplateJson)]
    pub fn write_template_json(&self, rule: u32, event_type: u32) -> Option<String> {
        writes::template(self.rules(), rule as usize, event_type as usize).map(|t| t.to_json())
    }
}

/// A built-in rule set; `version` picks an older one (for audit), `None` the current.
#[wasm_bindgen(js_name = builtinRuleSet)]
pub fn builtin_rule_set(name: &str, version: Option<f64>) -> JsResult<CompiledRuleSet> {
    let version = match version {
        None => None,
        Some(v) if v.fract() == 0.0 && (1.0..=crate::jcs::MAX_SAFE_INTEGER as f64).contains(&v) => Some(v as u64),
        Some(v) => {
            return Err(throw(Error::InvalidArgument { reason: format!("version must be a positive whole number, not {}", crate::error::number_text(v)) }))
        }
    };
    RuleSet::builtin_version(name, version).map(|r| CompiledRuleSet(Rules::Builtin(r))).map_err(throw)
}

/// A definition's JSON text, copied into wasm memory only when it can be
/// within the size limit: a UTF-8 text is never shorter than its UTF-16
/// form, so a longer string is refused by its length alone, before it costs
/// memory (wasm memory never shrinks, and a copy too large for it traps the module).
fn definition_text(value: &JsValue) -> Result<String, Error> {
    let Some(text) = value.dyn_ref::<JsString>() else {
        return Err(Error::RuleSetInvalid { path: "$".into(), reason: "must be JSON text".into(), report: None });
    };
    let refuse = |found| limits::exceeded("$", "maxDefinitionBytes", MAX_DEFINITION_BYTES, "bytes of JSON text", found);
    let units = text.length() as usize;
    if units > MAX_DEFINITION_BYTES {
        return Err(refuse(units));
    }
    let text = String::from(text);
    limits::check_definition_text(&text)?;
    Ok(text)
}

#[wasm_bindgen(js_name = loadRuleSet)]
pub fn load_rule_set(definition: JsValue) -> JsResult<CompiledRuleSet> {
    let text = definition_text(&definition).map_err(throw)?;
    let value = limits::parse_definition(&text).map_err(throw)?;
    RuleSet::from_value(&value).map(|r| CompiledRuleSet(Rules::Loaded(Box::new(r)))).map_err(throw)
}

/// The property report as JSON; throws only when the definition is malformed.
#[wasm_bindgen(js_name = verifyRuleSet)]
pub fn verify_rule_set(definition: JsValue) -> JsResult<String> {
    let text = definition_text(&definition).map_err(throw)?;
    let rule_set = crate::ruleset::load_unverified(&limits::parse_definition(&text).map_err(throw)?).map_err(throw)?;
    verify::verify(&rule_set).map(|r| r.to_json().to_string()).map_err(throw)
}

/// `{code: disposition}` for every error code.
#[wasm_bindgen(js_name = errorCodes)]
pub fn error_codes() -> String {
    let mut w = json::text::Writer::default();
    w.open_object();
    for (code, disposition) in CODES {
        w.key(code).string(disposition.as_str());
    }
    w.close_object();
    w.finish()
}

/// What every rule set's packed input shares (`packed::description_json`).
#[wasm_bindgen(js_name = packedDescriptionJson)]
pub fn packed_description_json() -> String {
    packed::description_json()
}

/// The module's memory, for typed-array views over a `Decider`'s regions.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

// ---------------------------------------------------------------------------
// The decider's regions: the host lays items out in them (typed-array views
// over the pointers `regions` gives), one call decides, and the host reads
// the answers from the same memory. No JSON and no crossing per value.
// ---------------------------------------------------------------------------

/// The most items, entries and text one decider holds: far above any useful
/// batch, and well inside wasm's 4 GiB, so a growth request cannot trap the module.
const MAX_ITEMS: u32 = 1 << 16;
const MAX_ENTRIES: u32 = 1 << 24;
const MAX_TEXT: u32 = 64 << 20;

#[wasm_bindgen(js_name = Decider)]
#[derive(Default)]
pub struct Decider {
    entries: Vec<i32>,
    numbers: Vec<f64>,
    text: Vec<u8>,
    answer_ints: Vec<i32>,
    answer_numbers: Vec<f64>,
    fingerprints: Vec<u8>,
    /// Errors and duplicates' originals of the last call, as JSON text.
    extra: String,
    work: Work,
    batch: decide::BatchWork,
}

fn grow<T: Default + Clone>(region: &mut Vec<T>, len: usize) {
    if region.len() < len {
        region.resize(len, T::default());
    }
}

impl Decider {
    /// Item 0 of the input, located with the rule set's layout.
    fn one<'a>(&'a mut self, rule_set: &RuleSet, text_len: u32, byte_lengths: bool) -> Result<(Item<'a>, &'a mut String), Error> {
        let layout = Layout::new(rule_set);
        let Decider { entries, numbers, text, work, .. } = self;
        let packed = match (text.get(..text_len as usize), entries.get(..layout.entries())) {
            (Some(text), Some(entries)) => Packed::new(text, entries, numbers, byte_lengths),
            _ => return Err(Error::InvalidArgument { reason: "the laid-out input is past its regions".into() }),
        };
        packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut work.spans);
        Ok((Item::of(&packed, &work.spans, layout.entries(), 0), &mut work.canonical))
    }
}

#[wasm_bindgen(js_class = Decider)]
impl Decider {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Decider {
        Decider::default()
    }

    /// Room for `items` items of `entries` entries in all, `numbers` numbers
    /// and `text_bytes` bytes of text. The regions may move: read them again after.
    pub fn reserve(&mut self, items: u32, entries: u32, numbers: u32, text_bytes: u32) -> JsResult<()> {
        if items > MAX_ITEMS || entries > MAX_ENTRIES || numbers > MAX_ENTRIES || text_bytes > MAX_TEXT {
            return Err(throw(Error::InvalidArgument {
                reason: format!("a decider holds at most {MAX_ITEMS} items, {MAX_ENTRIES} entries and {MAX_TEXT} bytes of text"),
            }));
        }
        let items = items as usize;
        grow(&mut self.entries, entries as usize);
        grow(&mut self.numbers, numbers as usize);
        grow(&mut self.answer_ints, items * ANSWER_INTS);
        grow(&mut self.answer_numbers, items * ANSWER_NUMBERS);
        grow(&mut self.fingerprints, items * fingerprint::LEN);
        grow(&mut self.text, text_bytes as usize);
        Ok(())
    }

    /// The regions: `[pointer, length]` pairs, in elements, for entries,
    /// numbers, text, answer ints, answer numbers and fingerprints.
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

    /// Where the last call's JSON text of errors and originals is (its length is what the call returned).
    #[wasm_bindgen(js_name = extraPointer)]
    pub fn extra_pointer(&self) -> u32 {
        self.extra.as_ptr() as u32
    }

    /// Decides the `count` items laid out (`text_len` bytes of text;
    /// `byte_lengths` when string lengths are in bytes, i.e. the text is
    /// ASCII). Every item is answered, an error as the JSON of its
    /// `{code, disposition, message, details}`; returns the extra text's length.
    pub fn decide(&mut self, rules: &CompiledRuleSet, count: u32, text_len: u32, byte_lengths: bool) -> JsResult<u32> {
        let rule_set = rules.rules();
        let layout = Layout::new(rule_set);
        let count = count as usize;
        let per_item = layout.entries();
        let Decider { entries, numbers, text, answer_ints, answer_numbers, fingerprints, extra, work, batch } = self;
        let too_small = answer_ints.len() < count * ANSWER_INTS
            || answer_numbers.len() < count * ANSWER_NUMBERS
            || fingerprints.len() < count * fingerprint::LEN;
        let packed = match (text.get(..text_len as usize), entries.get(..count * per_item)) {
            (Some(text), Some(entries)) if !too_small => Packed::new(text, entries, numbers, byte_lengths),
            _ => return Err(throw(Error::InvalidArgument { reason: format!("{count} items do not fit the decider's regions") })),
        };
        packed::locate(&packed, per_item, count, |s| layout.same_as(s), &mut work.spans);
        extra.clear();
        decide::decide_batch(rule_set, &packed, &work.spans, count, batch, |i, answer, fingerprint| {
            fingerprints[i * fingerprint::LEN..(i + 1) * fingerprint::LEN].copy_from_slice(fingerprint);
            decide::write_answer(
                &answer,
                &mut answer_ints[i * ANSWER_INTS..(i + 1) * ANSWER_INTS],
                &mut answer_numbers[i * ANSWER_NUMBERS..(i + 1) * ANSWER_NUMBERS],
                extra,
            );
        });
        Ok(extra.len() as u32)
    }

    /// Validates item 0's event (and, given `expected`, that it is of that
    /// type); returns its event type's index.
    pub fn validate(&mut self, rules: &CompiledRuleSet, text_len: u32, byte_lengths: bool, expected: Option<String>) -> JsResult<u32> {
        let rule_set = rules.rules();
        let (item, _) = self.one(rule_set, text_len, byte_lengths).map_err(throw)?;
        event::check_arg(&item).map_err(throw)?;
        let valid = event::check(rule_set, &item, Layout::new(rule_set)).map_err(throw)?;
        if let Some(expected) = expected {
            event::expect_type(rule_set, &valid, &expected).map_err(throw)?;
        }
        Ok(valid.event_type as u32)
    }

    /// Item 0's event validated and fingerprinted: `fp1:…`.
    pub fn fingerprint(&mut self, rules: &CompiledRuleSet, text_len: u32, byte_lengths: bool) -> JsResult<String> {
        let rule_set = rules.rules();
        let (item, canonical) = self.one(rule_set, text_len, byte_lengths).map_err(throw)?;
        event::check_arg(&item).map_err(throw)?;
        let valid = event::check(rule_set, &item, Layout::new(rule_set)).map_err(throw)?;
        fingerprint::write_canonical(rule_set, valid.event_type, valid.workflow_id, |f| valid.value_of(rule_set, f), canonical);
        let mut out = [0u8; fingerprint::LEN];
        fingerprint::write_fingerprint(canonical, &mut out);
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The seed's `planDepositConfirmation` for item 0, laid out for
    /// `planRuleSet()`: `advance` or `already-applied`.
    pub fn plan(&mut self, text_len: u32, byte_lengths: bool) -> JsResult<String> {
        let rule_set = compat::plan_rule_set().map_err(throw)?;
        let layout = Layout::new(rule_set);
        let Decider { entries, numbers, text, work, .. } = self;
        let packed = match (text.get(..text_len as usize), entries.get(..layout.entries())) {
            (Some(text), Some(entries)) => Packed::new(text, entries, numbers, byte_lengths),
            _ => return Err(throw(Error::InvalidArgument { reason: "the laid-out input is past its regions".into() })),
        };
        let mut spans = std::mem::take(&mut work.spans);
        packed::locate(&packed, layout.entries(), 1, |s| layout.same_as(s), &mut spans);
        let answer = compat::plan_item(&Item::of(&packed, &spans, layout.entries(), 0), work);
        work.spans = spans;
        answer.map(str::to_string).map_err(throw)
    }
}

/// The rule set the seed's `planDepositConfirmation` is laid out for.
#[wasm_bindgen(js_name = planRuleSet)]
pub fn plan_rule_set() -> JsResult<CompiledRuleSet> {
    compat::plan_rule_set().map(|r| CompiledRuleSet(Rules::Builtin(r))).map_err(throw)
}

// ---------------------------------------------------------------------------
// Outbox policy (issue 5). Each item converts its arguments and hands them to
// `crate::outbox`, which decides. Times are integer ms since the epoch,
// checked in the core (a fraction, NaN or a negative is refused).
// ---------------------------------------------------------------------------

/// An outbox policy read once and held in wasm memory, as `CompiledRuleSet`
/// holds rules: a consumer's calls per operation do not re-read its settings.
#[wasm_bindgen(js_name = OutboxPolicy)]
pub struct CompiledOutboxPolicy(Policy);

#[wasm_bindgen(js_class = OutboxPolicy)]
impl CompiledOutboxPolicy {
    /// The options packed as one record of `outbox::OPTIONS`, in order
    /// (entries, numbers, text; lengths in UTF-16 units); absent ones default.
    #[wasm_bindgen(constructor)]
    pub fn new(entries: &[i32], numbers: &[f64], text: &str) -> JsResult<CompiledOutboxPolicy> {
        let packed = Packed { text, entries, numbers, byte_lengths: false };
        let mut spans = Spans::new();
        let record = Record::of(&packed, &OPTIONS, &mut spans)
            .ok_or_else(|| throw(Error::InvalidArgument { reason: "outbox options are not one record".into() }))?;
        Policy::from_source(&record).map(CompiledOutboxPolicy).map_err(throw)
    }

    /// The settings (absent ones defaulted, with `renewEveryMs`).
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

/// Whether a stored operation may be claimed at `now`.
#[wasm_bindgen(js_name = outboxClaimable)]
pub fn outbox_claimable(status: &str, next_attempt_at: f64, lease_expires_at: Option<f64>, now: f64) -> JsResult<bool> {
    json::outbox::claimable_args(status, next_attempt_at, lease_expires_at, now).map_err(throw)
}
