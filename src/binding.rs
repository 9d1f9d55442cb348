//! Every `#[wasm_bindgen]` item of idemflow. This module converts values and
//! maps errors; it decides nothing. Values a host hands over arrive packed
//! (`crate::packed`): the host reads its objects, says what each value was,
//! and lays them out in a `Decider`'s regions of wasm memory; nothing here
//! reads a JS object. Rust values are dropped on every way out, so rejected
//! calls do not leak memory.

use js_sys::{JsString, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::answer::{self, ANSWER_INTS, ANSWER_NUMBERS};
use crate::compat;
use crate::decide::{self, Work};
use crate::error::{Error, CODES};
use crate::event;
use crate::fingerprint;
use crate::json;
use crate::limits::{self, MAX_DEFINITION_BYTES};
use crate::outbox::{Policy, OPTIONS};
use crate::packed::{self, Item, Layout, Packed, Record, Spans};
use crate::ruleset::{table, RuleSet};
use crate::stored;
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

    /// Checks a workflow's facts map, given as its JSON text, as a decision
    /// reads it (`stored::facts_of_text`): INVALID_RECORD naming the entry.
    #[wasm_bindgen(js_name = checkFacts)]
    pub fn check_facts(&self, text: &str) -> JsResult<()> {
        stored::facts_of_text(self.rules(), text).map(|_| ()).map_err(throw)
    }

    /// The operation types its rules can emit, sorted, as a JSON array.
    #[wasm_bindgen(js_name = emittedTypesJson)]
    pub fn emitted_types_json(&self) -> String {
        serde_json::Value::from(writes::emitted_types(self.rules())).to_string()
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
            return Err(throw(Error::InvalidArgument {
                reason: format!("version must be a positive whole number, not {}", crate::error::number_text(v)),
            }))
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

/// Loads a definition with its proof record (`proveRuleSet`'s JSON text):
/// nothing is proven again when the record is of this definition and engine.
#[wasm_bindgen(js_name = loadRuleSetWithProof)]
pub fn load_rule_set_with_proof(definition: JsValue, proof: &str) -> JsResult<CompiledRuleSet> {
    let text = definition_text(&definition).map_err(throw)?;
    let value = limits::parse_definition(&text).map_err(throw)?;
    let record = limits::parse_definition(proof).map_err(|_| {
        throw(Error::InvalidArgument {
            reason: "the proof record is not JSON: write it with `idemflow rules prove`".into(),
        })
    })?;
    RuleSet::from_value_with_proof(&value, &record).map(|r| CompiledRuleSet(Rules::Loaded(Box::new(r)))).map_err(throw)
}

/// Proves a definition and returns its proof record as JSON; throws
/// RULESET_INVALID (with the report) when a property fails.
#[wasm_bindgen(js_name = proveRuleSet)]
pub fn prove_rule_set(definition: JsValue) -> JsResult<String> {
    let text = definition_text(&definition).map_err(throw)?;
    let definition = limits::parse_definition(&text).map_err(throw)?;
    crate::proof::prove_record(&definition).map(|r| r.to_string()).map_err(throw)
}

/// The property report as JSON; throws only when the definition is malformed.
#[wasm_bindgen(js_name = verifyRuleSet)]
pub fn verify_rule_set(definition: JsValue) -> JsResult<String> {
    let text = definition_text(&definition).map_err(throw)?;
    let definition = limits::parse_definition(&text).map_err(throw)?;
    crate::proof::verify_definition(&definition).map(|r| r.to_json().to_string()).map_err(throw)
}

/// The decision table of a well-formed definition that need not verify, for
/// inspecting a draft (`idemflow rules table draft.json`): `{id, version,
/// hash, rows, markdown}`, laid out as a verified rule set's table is (a pair
/// two rules claim shows both). Throws only when the definition is malformed.
#[wasm_bindgen(js_name = draftTableJson)]
pub fn draft_table_json(definition: JsValue) -> JsResult<String> {
    let text = definition_text(&definition).map_err(throw)?;
    let rule_set = crate::ruleset::load_unverified(&limits::parse_definition(&text).map_err(throw)?).map_err(throw)?;
    let draft = serde_json::json!({
        "id": rule_set.id, "version": rule_set.version, "hash": rule_set.hash,
        "rows": table::rows_json(&rule_set), "markdown": table::markdown(&rule_set),
    });
    Ok(draft.to_string())
}

/// `{proofsRun, provenRemembered}`: how many proofs this wasm instance ran
/// and how many proven definitions it remembers (so a test can count them).
#[wasm_bindgen(js_name = proofStatsJson)]
pub fn proof_stats_json() -> String {
    let (proofs, remembered) = crate::proof::proven::stats();
    serde_json::json!({ "proofsRun": proofs, "provenRemembered": remembered }).to_string()
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
    fn one<'a>(
        &'a mut self,
        rule_set: &RuleSet,
        text_len: u32,
        byte_lengths: bool,
    ) -> Result<(Item<'a>, &'a mut String), Error> {
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
                reason: format!(
                    "a decider holds at most {MAX_ITEMS} items, {MAX_ENTRIES} entries and {MAX_TEXT} bytes of text"
                ),
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
        fn region<T>(elements: &[T]) -> [u32; 2] {
            [elements.as_ptr() as u32, elements.len() as u32]
        }
        [
            region(&self.entries),
            region(&self.numbers),
            region(&self.text),
            region(&self.answer_ints),
            region(&self.answer_numbers),
            region(&self.fingerprints),
        ]
        .concat()
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
            _ => {
                return Err(throw(Error::InvalidArgument {
                    reason: format!("{count} items do not fit the decider's regions"),
                }))
            }
        };
        packed::locate(&packed, per_item, count, |s| layout.same_as(s), &mut work.spans);
        extra.clear();
        decide::decide_batch(rule_set, &packed, &work.spans, count, batch, |i, answer, fingerprint| {
            fingerprints[i * fingerprint::LEN..(i + 1) * fingerprint::LEN].copy_from_slice(fingerprint);
            answer::write_answer(
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
    pub fn validate(
        &mut self,
        rules: &CompiledRuleSet,
        text_len: u32,
        byte_lengths: bool,
        expected: Option<String>,
    ) -> JsResult<u32> {
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
        fingerprint::write_canonical(
            rule_set,
            valid.event_type,
            valid.workflow_id,
            |f| valid.value_of(rule_set, f),
            canonical,
        );
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

/// A JS string copied into wasm memory only when it can be within the payload
/// bound: a UTF-8 text is never shorter than its UTF-16 form, so a longer
/// string is refused by its length alone, before it costs memory.
fn payload_string(text: &JsString) -> Result<String, Error> {
    use crate::json::payload::{invalid, MAX_PAYLOAD_BYTES};
    let refuse = |found| {
        invalid("$", format!("is at least {found} bytes of JSON text; limit maxPayloadBytes is {MAX_PAYLOAD_BYTES}"))
    };
    if text.length() as usize > MAX_PAYLOAD_BYTES {
        return Err(refuse(text.length() as usize));
    }
    let text = String::from(text);
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(refuse(text.len()));
    }
    Ok(text)
}

/// The JSON text of a value a host holds, or INVALID_PAYLOAD naming where it is not JSON.
fn payload_text(value: &JsValue) -> Result<String, Error> {
    use crate::json::payload::{invalid, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH};
    let text = payload_json(value, MAX_PAYLOAD_BYTES as u32, MAX_PAYLOAD_DEPTH as u32);
    if let Some(text) = text.dyn_ref::<JsString>() {
        return payload_string(text);
    }
    let read = |name: &str| Reflect::get(&text, &name.into()).ok().and_then(|v| v.as_string()).unwrap_or_default();
    Err(invalid(read("path"), read("reason")))
}

/// A finite double as the host's Number::toString writes it.
fn write_js_number(out: &mut String, value: f64) -> Result<(), String> {
    if !value.is_finite() {
        return Err("is not a finite number".into());
    }
    out.push_str(&String::from(
        JsValue::from_f64(value).unchecked_into::<js_sys::Number>().to_string_with_radix(10).unwrap_or_default(),
    ));
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
            return Err(invalid(
                "$",
                format!("is {found} bytes of JSON text; limit maxPayloadBytes is {MAX_PAYLOAD_BYTES}"),
            ));
        }
        return canonical_utf8(&view.to_vec(), &numbers);
    }
    let Some(text) = text.dyn_ref::<JsString>() else {
        let kind = text.js_typeof().as_string().unwrap_or_default();
        return Err(Error::InvalidArgument {
            reason: format!("JSON text must be a string or a Uint8Array, not {kind}"),
        });
    };
    canonical_text_with(&payload_string(text)?, &numbers)
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
