//! A host's payload (a request body, a keyed call's arguments: any JSON
//! value) as RFC 8785 text, and its fingerprint. What a keyed call or an HTTP
//! request compares with the record its key left is this fingerprint, so two
//! payloads that differ only in whitespace, member order or the spelling of a
//! number (`1.0`, `1`, `1e0`) are the same payload.
//!
//! The text is read here rather than by serde_json: RFC 8785 needs each
//! number as the double nearest to its decimal text, which serde_json reads
//! exactly only with its `float_roundtrip` feature (39 KB more wasm), and
//! core's `str::parse::<f64>` costs 18 KB. So the reader takes that one step
//! as a function: natively `str::parse`, in wasm the host's own `Number`
//! (which is ECMAScript's JSON.parse reading, by definition, and costs nothing).

use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};
use crate::jcs::{canonical_json_with, ecmascript_number, hex, WriteNumber, MAX_DEPTH};

/// `pf1:` + lowercase hex SHA-256 of the UTF-8 bytes of the payload's RFC 8785
/// text: versioned, as an event's `fp1:` is, and never equal to one.
pub const PAYLOAD_PREFIX: &str = "pf1:";

/// The largest payload, in bytes of JSON text (in and out): far above a
/// request body an idempotent API takes, far below what could exhaust the
/// wasm memory once read.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

/// The deepest nesting of arrays and objects a payload may have.
pub const MAX_PAYLOAD_DEPTH: usize = MAX_DEPTH;

/// How numbers are read from text and written canonically: natively
/// `str::parse` and [`ecmascript_number`]; in wasm the host's own parseFloat
/// and Number::toString (ECMAScript's JSON.parse reading and RFC 8785's
/// writing, by definition, at no cost in wasm bytes).
pub struct Numbers<'a> {
    /// A number token (already checked against the grammar) as the nearest
    /// double; None when the host cannot read it.
    pub read: &'a dyn Fn(&str) -> Option<f64>,
    pub write: WriteNumber<'a>,
}

/// The native readers and writers of numbers.
pub fn native_numbers() -> Numbers<'static> {
    Numbers { read: &|token| token.parse().ok(), write: &ecmascript_number }
}

pub(crate) fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::InvalidPayload { path: path.into(), reason: reason.into() }
}

#[cold]
fn too_deep() -> Error {
    invalid("$", format!("nests deeper than {MAX_PAYLOAD_DEPTH} arrays and objects"))
}

#[cold]
fn too_large(bytes: usize) -> Error {
    invalid("$", format!("is {bytes} bytes of JSON text; limit maxPayloadBytes is {MAX_PAYLOAD_BYTES}"))
}

/// JSON text (one value) in, its RFC 8785 text out. As with JSON.parse, a
/// name given twice in one object keeps its last value. Refused: text that is
/// not JSON, an escaped lone surrogate, a number beyond the doubles' range,
/// nesting deeper than [`MAX_PAYLOAD_DEPTH`], more than [`MAX_PAYLOAD_BYTES`].
pub fn canonical_text(text: &str) -> Result<String> {
    canonical_text_with(text, &native_numbers())
}

/// [`canonical_text`] with the host's reader of number tokens.
pub fn canonical_text_with(text: &str, numbers: &Numbers) -> Result<String> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(too_large(text.len()));
    }
    let mut reader = Reader { source: text, text: text.as_bytes(), at: 0, read: numbers.read };
    let value = reader.document()?;
    // The reader's depth bound is the writer's: it refuses nothing the reader took.
    let out = canonical_json_with(&value, numbers.write).map_err(|reason| invalid("$", reason))?;
    if out.len() > MAX_PAYLOAD_BYTES {
        return Err(too_large(out.len()));
    }
    Ok(out)
}

/// [`canonical_text`] of UTF-8 bytes (a request body as received).
pub fn canonical_utf8(bytes: &[u8], numbers: &Numbers) -> Result<String> {
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(too_large(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| invalid("$", format!("is not UTF-8: {e}")))?;
    canonical_text_with(text, numbers)
}

/// The fingerprint of RFC 8785 text as [`canonical_text`] writes it.
pub fn fingerprint_canonical(canonical: &str) -> String {
    let digest = crate::sha256::digest(canonical.as_bytes());
    let mut out = String::with_capacity(PAYLOAD_PREFIX.len() + 64);
    out.push_str(PAYLOAD_PREFIX);
    out.push_str(&hex(&digest));
    out
}

/// `pf1:…` of the payload given as JSON text.
pub fn fingerprint_text(text: &str) -> Result<String> {
    canonical_text(text).map(|canonical| fingerprint_canonical(&canonical))
}

/// RFC 8259 over bytes of valid UTF-8, bounded in depth, into a serde_json
/// value: a name given twice keeps its last value, as JSON.parse keeps it.
struct Reader<'a, 'n> {
    source: &'a str,
    /// `source` as bytes: the reader stops only at ASCII bytes, so every
    /// slice of `source` it takes is on character boundaries.
    text: &'a [u8],
    at: usize,
    read: &'n dyn Fn(&str) -> Option<f64>,
}

impl<'a> Reader<'a, '_> {
    fn document(&mut self) -> Result<Value> {
        let value = self.value(1)?;
        self.space();
        if self.at < self.text.len() {
            return Err(self.fail("is not JSON: more after the value"));
        }
        Ok(value)
    }

    #[cold]
    fn fail(&self, reason: &str) -> Error {
        invalid("$", format!("{reason} (at byte {})", self.at))
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        self.space();
        match self.peek() {
            Some(b'{') | Some(b'[') if depth > MAX_PAYLOAD_DEPTH => Err(too_deep()),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.fail("is not JSON: no value starts here")),
            None => Err(self.fail("is not JSON: it ends where a value should be")),
        }
    }

    fn literal(&mut self, word: &str, value: Value) -> Result<Value> {
        if self.text[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.fail("is not JSON: no value starts here"))
        }
    }

    /// An array's or an object's members, each read by `member`, from its
    /// opening byte to `close`.
    fn members(&mut self, close: u8, mut member: impl FnMut(&mut Self) -> Result<()>) -> Result<()> {
        self.at += 1;
        self.space();
        if self.eat(close) {
            return Ok(());
        }
        loop {
            member(self)?;
            self.space();
            if self.eat(close) {
                return Ok(());
            }
            if !self.eat(b',') {
                let expected =
                    if close == b']' { "is not JSON: ',' or ']' expected" } else { "is not JSON: ',' or '}' expected" };
                return Err(self.fail(expected));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value> {
        let mut items = Vec::new();
        self.members(b']', |reader| {
            items.push(reader.value(depth + 1)?);
            Ok(())
        })?;
        Ok(Value::Array(items))
    }

    fn object(&mut self, depth: usize) -> Result<Value> {
        let mut members = Map::new();
        self.members(b'}', |reader| {
            reader.space();
            if reader.peek() != Some(b'"') {
                return Err(reader.fail("is not JSON: a member name expected"));
            }
            let name = reader.string()?;
            reader.space();
            if !reader.eat(b':') {
                return Err(reader.fail("is not JSON: ':' expected"));
            }
            members.insert(name, reader.value(depth + 1)?);
            Ok(())
        })?;
        Ok(Value::Object(members))
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.at;
        self.eat(b'-');
        let digits = |reader: &mut Self| {
            let from = reader.at;
            while let Some(b'0'..=b'9') = reader.peek() {
                reader.at += 1;
            }
            reader.at - from
        };
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.fail("is not JSON: a digit expected")),
        }
        if self.eat(b'.') && digits(self) == 0 {
            return Err(self.fail("is not JSON: a digit expected after '.'"));
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if digits(self) == 0 {
                return Err(self.fail("is not JSON: a digit expected in the exponent"));
            }
        }
        // ASCII only from start to here, so this is text.
        let token = self.slice(start, self.at);
        match (self.read)(token).and_then(Number::from_f64) {
            Some(number) => Ok(Value::Number(number)),
            None => Err(invalid("$", format!("holds {token}, a number beyond the range of a double"))),
        }
    }

    /// A string at its opening quote, decoded.
    fn string(&mut self) -> Result<String> {
        self.at += 1;
        let start = self.at;
        let mut decoded = String::new();
        let mut run = start;
        loop {
            match self.peek() {
                None => return Err(self.fail("is not JSON: a string is not closed")),
                Some(b'"') => {
                    decoded.push_str(self.slice(run, self.at));
                    self.at += 1;
                    return Ok(decoded);
                }
                Some(0x00..=0x1f) => {
                    return Err(self.fail("is not JSON: a control character in a string must be escaped"))
                }
                Some(b'\\') => {
                    decoded.push_str(self.slice(run, self.at));
                    let letter = self.text.get(self.at + 1).copied();
                    self.at += 2;
                    let escaped = match letter {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => return Err(self.fail("is not JSON: an unknown escape")),
                    };
                    decoded.push(escaped);
                    run = self.at;
                }
                Some(_) => self.at += 1,
            }
        }
    }

    fn slice(&self, from: usize, to: usize) -> &'a str {
        self.source.get(from..to).unwrap_or_default()
    }

    fn hex4(&mut self) -> Result<u32> {
        let Some(digits) = self.text.get(self.at..self.at + 4) else {
            return Err(self.fail("is not JSON: \\u needs four hex digits"));
        };
        let mut value = 0;
        for &digit in digits {
            let nibble = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                b'A'..=b'F' => digit - b'A' + 10,
                _ => return Err(self.fail("is not JSON: \\u needs four hex digits")),
            };
            value = value * 16 + u32::from(nibble);
        }
        self.at += 4;
        Ok(value)
    }

    /// After `\u`: one character, from a pair of escapes for a surrogate pair.
    fn unicode_escape(&mut self) -> Result<char> {
        let lone = |reader: &Self| reader.fail("holds a lone surrogate (not well-formed Unicode)");
        let unit = self.hex4()?;
        let code = match unit {
            0xd800..=0xdbff => {
                if !self.text[self.at..].starts_with(b"\\u") {
                    return Err(lone(self));
                }
                self.at += 2;
                let low = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&low) {
                    return Err(lone(self));
                }
                0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)
            }
            0xdc00..=0xdfff => return Err(lone(self)),
            _ => unit,
        };
        char::from_u32(code).ok_or_else(|| lone(self))
    }
}
