//! The two kinds of value an event field can hold, and their rules.

use crate::input::Input;

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
}

impl FieldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldKind::Text => "text",
            FieldKind::Units => "units",
        }
    }

    pub fn parse(text: &str) -> Option<FieldKind> {
        match text {
            "text" => Some(FieldKind::Text),
            "units" => Some(FieldKind::Units),
            _ => None,
        }
    }

    /// The value as a string, or the reason it is not acceptable.
    pub fn check<'a>(self, input: Input<'a>) -> Result<&'a str, String> {
        let text = match input {
            Input::Text(text) => text,
            Input::TooLong => return Err(self.too_long()),
            Input::IllFormedText => {
                return Err("must be well-formed Unicode (it contains a lone surrogate)".into())
            }
            Input::Absent => return Err("is required".into()),
            Input::Unreadable(why) => return Err(format!("could not be read: {why}")),
            Input::Number(_) if self == FieldKind::Units => {
                return Err("must be a string of decimal digits, not a number (amounts are integer base units in strings)".into())
            }
            other => return Err(format!("must be a string, not {}", other.kind())),
        };
        match self {
            FieldKind::Text => check_text(text)?,
            FieldKind::Units => check_units(text)?,
        }
        Ok(text)
    }

    /// Whether `text` is an acceptable value (what `check` answers for a string, without copying it).
    pub fn accepts(self, text: &str) -> bool {
        match self {
            FieldKind::Text => check_text(text).is_ok(),
            FieldKind::Units => check_units(text).is_ok(),
        }
    }

    fn too_long(self) -> String {
        match self {
            FieldKind::Text => format!("must be at most {MAX_TEXT_BYTES} UTF-8 bytes"),
            FieldKind::Units => format!("must be at most {MAX_UNITS_DIGITS} digits"),
        }
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
