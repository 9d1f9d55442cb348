//! The kinds of value an event field can hold, and their rules.

use crate::input::Input;
use crate::jcs::MAX_SAFE_INTEGER;

/// The longest text value, in UTF-8 bytes.
pub const MAX_TEXT_BYTES: usize = 512;
/// The most digits an amount may have: 78 digits hold any unsigned 256-bit integer.
pub const MAX_UNITS_DIGITS: usize = 78;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// An identifier or reference: not blank, at most 512 UTF-8 bytes, no
    /// control characters: C0 (U+0000-U+001F), DEL (U+007F) and C1
    /// (U+0080-U+009F), which are invisible in logs and dashboards.
    Text,
    /// A positive integer amount in base units, as decimal digits without a leading zero.
    Units,
    /// A producer's counter (an observation's number, a billing period): a
    /// JSON number that is a safe integer of at least 1. Sent, fingerprinted
    /// (an RFC 8785 integer) and recorded as a number, never as a string.
    Count,
}

/// A checked field value: a string (text, units) or a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    Text(&'a str),
    Count(u64),
}

impl<'a> FieldValue<'a> {
    /// The value as JSON: a string, or a count as a number.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            FieldValue::Text(text) => serde_json::Value::String(text.to_string()),
            FieldValue::Count(n) => serde_json::Value::from(n),
        }
    }

    /// As a person reads it in an error: the text, or the count's digits.
    pub fn display(self) -> String {
        match self {
            FieldValue::Text(text) => text.to_string(),
            FieldValue::Count(n) => n.to_string(),
        }
    }
}

impl FieldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldKind::Text => "text",
            FieldKind::Units => "units",
            FieldKind::Count => "count",
        }
    }

    pub fn parse(text: &str) -> Option<FieldKind> {
        match text {
            "text" => Some(FieldKind::Text),
            "units" => Some(FieldKind::Units),
            "count" => Some(FieldKind::Count),
            _ => None,
        }
    }

    /// Whether values of this kind are integers a `when` can compare.
    pub fn is_integer(self) -> bool {
        matches!(self, FieldKind::Units | FieldKind::Count)
    }

    /// The value of a string kind (text, units) as a string, or the reason
    /// it is not acceptable. Counts are read with [`FieldKind::check_value`].
    pub fn check<'a>(self, input: Input<'a>) -> Result<&'a str, String> {
        match self.check_value(input)? {
            FieldValue::Text(text) => Ok(text),
            FieldValue::Count(_) => Err("must be a string".into()),
        }
    }

    /// The value of any kind, or the reason it is not acceptable.
    pub fn check_value<'a>(self, input: Input<'a>) -> Result<FieldValue<'a>, String> {
        if self == FieldKind::Count {
            return check_count(input).map(FieldValue::Count);
        }
        let text = match input {
            Input::Text(text) => text,
            Input::TooLong => return Err(self.too_long()),
            Input::IllFormedText => return Err("must be well-formed Unicode (it contains a lone surrogate)".into()),
            Input::Absent => return Err("is required".into()),
            Input::Unreadable(why) => return Err(format!("could not be read: {why}")),
            Input::Number(_) if self == FieldKind::Units => {
                return Err(
                    "must be a string of decimal digits, not a number (amounts are integer base units in strings)"
                        .into(),
                )
            }
            other => return Err(format!("must be a string, not {}", other.kind())),
        };
        match self {
            FieldKind::Text => check_text(text)?,
            FieldKind::Units | FieldKind::Count => check_units(text)?,
        }
        Ok(FieldValue::Text(text))
    }

    fn too_long(self) -> String {
        match self {
            FieldKind::Text => format!("must be at most {MAX_TEXT_BYTES} UTF-8 bytes"),
            FieldKind::Units => format!("must be at most {MAX_UNITS_DIGITS} digits"),
            FieldKind::Count => "must be a number, not a string".into(),
        }
    }
}

/// A count: a JSON number that is a whole number from 1 to 2^53 - 1.
fn check_count(input: Input<'_>) -> Result<u64, String> {
    match input {
        Input::Number(n) if n.is_finite() && n.fract() == 0.0 && n >= 1.0 && n <= MAX_SAFE_INTEGER as f64 => {
            Ok(n as u64)
        }
        Input::Number(n) if !n.is_finite() || n.fract() != 0.0 => {
            Err("must be a whole number (a count such as 3)".into())
        }
        Input::Number(n) if n < 1.0 => Err("must be at least 1 (counts start at 1)".into()),
        Input::Number(_) => Err("must be at most 2^53 - 1".into()),
        Input::Absent => Err("is required".into()),
        Input::Unreadable(why) => Err(format!("could not be read: {why}")),
        Input::Text(_) | Input::TooLong | Input::IllFormedText => {
            Err("must be a number, not a string (a count is a JSON number such as 3)".into())
        }
        other => Err(format!("must be a number, not {}", other.kind())),
    }
}

/// Compares two integers of one kind: counts as numbers, amounts (decimal
/// digits without a leading zero, checked) by length and then digit by digit.
pub fn compare(a: FieldValue<'_>, b: FieldValue<'_>) -> std::cmp::Ordering {
    match (a, b) {
        (FieldValue::Count(x), FieldValue::Count(y)) => x.cmp(&y),
        (FieldValue::Text(x), FieldValue::Text(y)) => x.len().cmp(&y.len()).then_with(|| x.cmp(y)),
        // Loading refuses a comparison of two kinds; a count sorts below an amount only to stay total.
        (FieldValue::Count(_), FieldValue::Text(_)) => std::cmp::Ordering::Less,
        (FieldValue::Text(_), FieldValue::Count(_)) => std::cmp::Ordering::Greater,
    }
}

fn check_text(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(FieldKind::Text.too_long());
    }
    // Printable ASCII with one non-space is valid: no control character, not
    // only whitespace (the one printable ASCII whitespace is the space).
    // Anything else takes the full check below, which also says why.
    let mut printable = true;
    let mut blank = true;
    for &b in text.as_bytes() {
        printable &= (0x20..0x7f).contains(&b);
        blank &= b == b' ';
    }
    if printable && !blank {
        return Ok(());
    }
    if let Some(c) = text.chars().find(|c| is_control(*c)) {
        return Err(format!("must not contain control characters (found U+{:04X})", c as u32));
    }
    if text.chars().all(is_js_whitespace) {
        return Err("must not be only whitespace".into());
    }
    Ok(())
}

/// C0, DEL and C1: Unicode's `Cc` category, exactly `char::is_control`.
fn is_control(c: char) -> bool {
    matches!(c as u32, 0x00..=0x1f | 0x7f..=0x9f)
}

fn check_units(text: &str) -> Result<(), String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("must be a positive integer of decimal digits".into());
    }
    if text.len() > MAX_UNITS_DIGITS {
        return Err(FieldKind::Units.too_long());
    }
    if text.starts_with('0') {
        return Err("must be positive and have no leading zero".into());
    }
    Ok(())
}

/// What JavaScript's `String.prototype.trim` removes (WhiteSpace and
/// LineTerminator), so "blank" means the same on both sides of the boundary.
fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{d}'
            | ' '
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
            | '\u{feff}'
    )
}
