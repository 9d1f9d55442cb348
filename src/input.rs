//! How the core sees a value it did not create, before any rule is applied:
//! what kind of value it was and, for a string, the string (borrowed from the
//! packed input or a JSON value, never copied).

use serde_json::{Map, Value};

/// One property as the host found it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Input<'a> {
    Absent,
    Null,
    Text(&'a str),
    /// A string too long for the slot it was read for, left uncopied.
    TooLong,
    /// A string with a lone surrogate: it has no UTF-8 form, and replacing the
    /// surrogate would let two different ids become one.
    IllFormedText,
    Number(f64),
    /// Any other kind of value; the name says which ("boolean", "object", ...).
    Other(&'static str),
    /// Reading the property threw (a getter, a proxy); the text says why.
    Unreadable(&'a str),
}

impl Input<'_> {
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Absent => "missing",
            Input::Null => "null",
            Input::Text(_) | Input::TooLong | Input::IllFormedText => "string",
            Input::Number(_) => "number",
            Input::Other(kind) => kind,
            Input::Unreadable(_) => "unreadable",
        }
    }
}

/// Something with named properties that the core reads by name (an outbox
/// policy's options); a decision reads its packed input by slot instead.
pub trait Source {
    fn field(&self, name: &str) -> Input<'_>;
}

impl Source for Map<String, Value> {
    fn field(&self, name: &str) -> Input<'_> {
        match self.get(name) {
            None => Input::Absent,
            Some(value) => from_json(value),
        }
    }
}

/// A JSON value as the core sees it: objects and arrays only by their kind.
pub fn from_json(value: &Value) -> Input<'_> {
    match value {
        Value::Null => Input::Null,
        Value::String(text) => Input::Text(text),
        Value::Number(n) => Input::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::Bool(_) => Input::Other("boolean"),
        Value::Array(_) => Input::Other("array"),
        Value::Object(_) => Input::Other("object"),
    }
}
