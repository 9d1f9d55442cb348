//! How the core reads values it did not create. A binding (wasm, native tests,
//! a JSON line) implements [`Source`]; the core asks only for the fields it
//! needs, so a getter on an unrelated property is never touched.

use serde_json::{Map, Value};

/// One property as the binding found it, before any rule is applied.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Absent,
    Null,
    Text(String),
    /// A string too long for any field, left uncopied; the length is in UTF-16 units.
    TooLong { utf16_units: u64 },
    /// A string with a lone surrogate: it has no UTF-8 form, and replacing the
    /// surrogate would let two different ids become one.
    IllFormedText,
    Number(f64),
    /// Any other kind of value; the name says which ("boolean", "object", ...).
    Other(&'static str),
    /// Reading the property threw (a getter, a proxy); the text says why.
    Unreadable(String),
}

impl Input {
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Absent => "missing",
            Input::Null => "null",
            Input::Text(_) | Input::TooLong { .. } | Input::IllFormedText => "string",
            Input::Number(_) => "number",
            Input::Other(kind) => kind,
            Input::Unreadable(_) => "unreadable",
        }
    }
}

/// Something with named properties: an event, a stored receipt or a workflow.
pub trait Source {
    fn field(&self, name: &str) -> Input;

    /// A structured member (an object or an array) as its JSON text, for the
    /// few record fields that are not scalars (a receipt's `result`); any other
    /// value as [`Source::field`] reads it. A binding that cannot serialize
    /// says so with `Input::Other`, which a reader refuses like any bad value.
    fn json_text(&self, name: &str) -> Input {
        self.field(name)
    }
}

impl Source for Map<String, Value> {
    fn field(&self, name: &str) -> Input {
        match self.get(name) {
            None => Input::Absent,
            Some(value) => from_json(value),
        }
    }

    fn json_text(&self, name: &str) -> Input {
        match self.get(name) {
            Some(value @ (Value::Object(_) | Value::Array(_))) => Input::Text(value.to_string()),
            None => Input::Absent,
            Some(value) => from_json(value),
        }
    }
}

pub fn from_json(value: &Value) -> Input {
    match value {
        Value::Null => Input::Null,
        Value::String(text) => Input::Text(text.clone()),
        Value::Number(n) => Input::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::Bool(_) => Input::Other("boolean"),
        Value::Array(_) => Input::Other("array"),
        Value::Object(_) => Input::Other("object"),
    }
}
