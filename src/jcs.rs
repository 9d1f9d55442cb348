//! RFC 8785 (JSON Canonicalization Scheme) for any JSON value: members
//! sorted by the UTF-16 code units of their names, strings escaped as
//! ECMAScript's JSON.stringify escapes them, and numbers written as IEEE 754
//! doubles exactly as ECMAScript's Number::toString writes them.

use std::fmt::Write;

use serde_json::Value;

/// The largest integer a JavaScript number holds exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Nesting of arrays and objects a canonical text may have: writing recurses
/// once per level (serde_json's own parser stops at 128). Stored results are
/// read back with the same bound (records.cjs).
pub const MAX_DEPTH: usize = 64;

/// How a canonical writer spells a number that is not a whole number within
/// ±(2^53 - 1) (those it writes itself), or why it refuses it.
/// [`ecmascript_number`] natively; the wasm binding hands in the host's own
/// Number::toString, which is the definition RFC 8785 cites and costs no wasm.
pub type WriteNumber<'a> = &'a dyn Fn(&mut String, f64) -> Result<(), String>;

/// The RFC 8785 text of `value`; refused only when it nests deeper than
/// [`MAX_DEPTH`] (a `Value` holds no NaN or infinity, and no lone surrogate).
pub fn canonical_json(value: &Value) -> Result<String, String> {
    canonical_json_with(value, &ecmascript_number)
}

/// [`canonical_json`] with numbers spelled by `numbers`.
pub fn canonical_json_with(value: &Value, numbers: WriteNumber) -> Result<String, String> {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value, 1, numbers)?;
    Ok(out)
}

/// [`write_number`], refusing NaN and the infinities with a reason.
pub fn ecmascript_number(out: &mut String, value: f64) -> Result<(), String> {
    if write_number(out, value) {
        Ok(())
    } else {
        Err(format!("{value} is not a finite number"))
    }
}

/// For texts that hold whole numbers only (rule-set definitions, whose hash
/// has always been written so): every other number is refused.
pub fn whole_numbers_only(_: &mut String, value: f64) -> Result<(), String> {
    Err(format!("number {value} is not an integer within ±(2^53 - 1)"))
}

fn write_value(out: &mut String, value: &Value, depth: usize, numbers: WriteNumber) -> Result<(), String> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_json_number(out, n, numbers)?,
        Value::String(s) => write_string(out, s),
        Value::Array(_) | Value::Object(_) if depth > MAX_DEPTH => {
            return Err(format!("nested deeper than {MAX_DEPTH} arrays and objects"));
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth + 1, numbers)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // RFC 8785 §3.2.3: members sorted by the UTF-16 code units of their
            // names (unique, so the unstable sort is exact).
            crate::sort::sort_by(&mut entries, &mut |a, b| a.0.encode_utf16().lt(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item, depth + 1, numbers)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// A parsed number as the double ECMAScript would hold (RFC 8785 §3.2.2.3).
/// An integer beyond 2^53 rounds to the nearest double, as JSON.parse rounds it.
fn write_json_number(out: &mut String, n: &serde_json::Number, numbers: WriteNumber) -> Result<(), String> {
    match (n.as_u64(), n.as_i64(), n.as_f64()) {
        // Exact in a double, and written alike: no digits to find.
        (Some(u), _, _) if u <= MAX_SAFE_INTEGER => write_whole(out, u),
        (None, Some(i), _) if i.unsigned_abs() <= MAX_SAFE_INTEGER => {
            out.push('-');
            write_whole(out, i.unsigned_abs());
        }
        (_, _, Some(x)) => return numbers(out, x),
        // Without serde_json's arbitrary_precision every number is a double.
        (_, _, None) => return Err(format!("number {n} is not a double")),
    }
    Ok(())
}

/// A whole number's decimal digits (RFC 8785 writes a safe integer so).
pub(crate) fn write_whole(out: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(digit as char);
    }
}

/// The shortest decimal digits of a double: at most 17.
const MAX_DIGITS: usize = 17;

/// Writes a finite double exactly as ECMAScript's Number::toString (radix 10)
/// does; false (nothing written) for NaN and the infinities, which JSON has not.
///
/// The digits are the shortest that read back as the same double and, of
/// those, the closest to it (Rust's `{:e}`: Grisu with a Dragon4 fallback),
/// except at an exact tie, where ECMAScript takes the even digit and Rust
/// rounds up ([`even_of_tie`]). ECMAScript then chooses only the layout: plain
/// digits up to 21 places before the point, `0.` and up to six zeros before
/// the digits, an exponent with its sign otherwise.
pub fn write_number(out: &mut String, value: f64) -> bool {
    if !value.is_finite() {
        return false;
    }
    if value == 0.0 {
        // -0 too: Number::toString(-0) is "0".
        out.push('0');
        return true;
    }
    let mut scientific = String::with_capacity(32);
    let _ = write!(scientific, "{:e}", value.abs());
    // "d[.ddd]e[-]x" into ECMAScript's s (digits, k of them) and n (where the point goes).
    let mut digits = [0u8; MAX_DIGITS];
    let mut k = 0;
    let mut exponent = 0i32;
    let mut exponent_sign = 1;
    let mut in_exponent = false;
    for byte in scientific.bytes() {
        match byte {
            b'e' => in_exponent = true,
            b'-' => exponent_sign = -1,
            b'0'..=b'9' if in_exponent => exponent = exponent * 10 + i32::from(byte - b'0'),
            b'0'..=b'9' if k < MAX_DIGITS => {
                digits[k] = byte;
                k += 1;
            }
            _ => {}
        }
    }
    let n = exponent_sign * exponent + 1;
    even_of_tie(value.abs(), &mut digits[..k], n - k as i32);
    let digits = &digits[..k];
    let k = k as i32;
    let push = |out: &mut String, digits: &[u8]| digits.iter().for_each(|&d| out.push(d as char));
    if value < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        push(out, digits);
        push_zeros(out, n - k);
    } else if 0 < n && n <= 21 {
        push(out, &digits[..n as usize]);
        out.push('.');
        push(out, &digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        push_zeros(out, -n);
        push(out, digits);
    } else {
        push(out, &digits[..1]);
        if k > 1 {
            out.push('.');
            push(out, &digits[1..]);
        }
        out.push('e');
        out.push(if n - 1 < 0 { '-' } else { '+' });
        write_whole(out, u64::from((n - 1).unsigned_abs()));
    }
    true
}

/// When `x` lies exactly halfway between the shortest digits Rust chose and a
/// neighbour of as many digits, ECMAScript takes the even one
/// (Number::toString, step 5: "if there are two such possible values of n,
/// choose the one that is even") where Rust rounds the half up; the digits
/// are changed in place. `scale` is the power of ten of the last digit.
fn even_of_tie(x: f64, digits: &mut [u8], scale: i32) {
    let Some(&last) = digits.last() else { return };
    if (last - b'0') % 2 == 0 {
        return;
    }
    let value = digits.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
    let (bits, mantissa, power) = parts(x);
    // x = 2^e (an exact power of two above the subnormals) has its next
    // double below at half the distance of the one above, so the digits below
    // read back as x only when they are within that half gap.
    let power_of_two = bits & ((1 << 52) - 1) == 0 && (bits >> 52 & 0x7ff) > 1;
    // The neighbour below (an odd last digit is at least 1, so no borrow).
    if is_midpoint(mantissa, power, value - 1, scale) {
        if !power_of_two || below_reads_back(power) {
            if let Some(at) = digits.last_mut() {
                *at -= 1;
            }
        }
        return;
    }
    // The neighbour above (an odd last digit is at most 9, so no carry past 9: 9 + 1 would be
    // the 10 of a shorter candidate, which the shortest digits already are not).
    if last < b'9' && is_midpoint(mantissa, power, value, scale) {
        if let Some(at) = digits.last_mut() {
            *at += 1;
        }
    }
}

/// x as m × 2^e with m odd (x finite, not zero): its bits, m and e.
fn parts(x: f64) -> (u64, u64, i32) {
    let bits = x.to_bits();
    let biased = (bits >> 52 & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (m, e) = if biased == 0 { (fraction, -1074) } else { (fraction | 1 << 52, biased - 1075) };
    let shift = m.trailing_zeros();
    (bits, m >> shift, e + shift as i32)
}

/// Whether m × 2^e is exactly (low + 1/2) × 10^scale, compared in integers.
fn is_midpoint(m: u64, e: i32, low: u64, scale: i32) -> bool {
    let odd = 2 * u128::from(low) + 1;
    let power_of_five = |p: i32| u32::try_from(p).ok().and_then(|p| 5u128.checked_pow(p));
    if e < 0 {
        // m × 5^-e / 10^-e has -e decimals (the last a 5); the midpoint has 1 - scale.
        1 - scale == -e && power_of_five(-e - 1).and_then(|p| p.checked_mul(u128::from(m))) == Some(odd)
    } else {
        // An integer: (2 low + 1) × 5^scale × 2^(scale - 1).
        scale >= 1 && e == scale - 1 && power_of_five(scale).and_then(|p| p.checked_mul(odd)) == Some(u128::from(m))
    }
}

/// For x = 2^e (e < 0) at a tie of -e decimals: the digits half a last place
/// below x read back as x when that half place, 5 × 10^e, is at most the half
/// gap to the next double below, 2^(e - 54): when 2^54 <= 5^(-e - 1).
fn below_reads_back(e: i32) -> bool {
    match u32::try_from(-e - 1).ok().map(|p| 5u128.checked_pow(p)) {
        Some(Some(power)) => power >= 1 << 54,
        Some(None) => true,
        None => false,
    }
}

fn push_zeros(out: &mut String, count: i32) {
    for _ in 0..count {
        out.push('0');
    }
}

/// Writes a JSON string exactly as ECMAScript's JSON.stringify does (RFC 8785 §3.2.2.2).
pub fn write_string(out: &mut String, s: &str) {
    // Most strings need no escape: copied whole.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0a => "\\n",
            0x0c => "\\f",
            0x0d => "\\r",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Lowercase hex of bytes through a lookup table (measured twice as fast as `format!`).
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
    out
}
