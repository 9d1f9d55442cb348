//! JSON text written directly, for the descriptions the binding hands a host
//! once per rule set (its layout, its write templates, the error codes):
//! a call per member, where building a `serde_json::Value` first took
//! several kilobytes of wasm per description.

use crate::jcs::write_string;

pub struct Writer {
    out: String,
    /// Per open object or array: whether the next member needs no comma.
    first: Vec<bool>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer { out: String::with_capacity(256), first: vec![true] }
    }
}

impl Writer {
    fn separate(&mut self) {
        if let Some(first) = self.first.last_mut() {
            if !*first {
                self.out.push(',');
            }
            *first = false;
        }
    }

    /// A member's key; its value comes next.
    pub fn key(&mut self, key: &str) -> &mut Self {
        self.separate();
        write_string(&mut self.out, key);
        self.out.push(':');
        // The value that follows is part of this member.
        if let Some(first) = self.first.last_mut() {
            *first = true;
        }
        self
    }

    fn value(&mut self) {
        self.separate();
    }

    pub fn open_object(&mut self) -> &mut Self {
        self.value();
        self.out.push('{');
        self.first.push(true);
        self
    }

    pub fn open_array(&mut self) -> &mut Self {
        self.value();
        self.out.push('[');
        self.first.push(true);
        self
    }

    pub fn close_object(&mut self) -> &mut Self {
        self.first.pop();
        self.out.push('}');
        self.after_value();
        self
    }

    pub fn close_array(&mut self) -> &mut Self {
        self.first.pop();
        self.out.push(']');
        self.after_value();
        self
    }

    fn after_value(&mut self) {
        if let Some(first) = self.first.last_mut() {
            *first = false;
        }
    }

    pub fn string(&mut self, text: &str) -> &mut Self {
        self.value();
        write_string(&mut self.out, text);
        self.after_value();
        self
    }

    pub fn int(&mut self, n: i64) -> &mut Self {
        self.value();
        self.out.push_str(&n.to_string());
        self.after_value();
        self
    }

    pub fn boolean(&mut self, b: bool) -> &mut Self {
        self.value();
        self.out.push_str(if b { "true" } else { "false" });
        self.after_value();
        self
    }

    pub fn strings<'a>(&mut self, items: impl IntoIterator<Item = &'a str>) -> &mut Self {
        self.open_array();
        for item in items {
            self.string(item);
        }
        self.close_array()
    }

    pub fn ints(&mut self, items: impl IntoIterator<Item = i64>) -> &mut Self {
        self.open_array();
        for item in items {
            self.int(item);
        }
        self.close_array()
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::Writer;

    #[test]
    fn writes_nested_objects_and_arrays_as_json() {
        let mut w = Writer::default();
        w.open_object();
        w.key("a").int(-1).key("b").strings(["x", "y\"z"]).key("c").open_object().close_object();
        w.key("d").open_array().open_object().key("e").boolean(true).close_object().ints([1, 2]).close_array();
        w.close_object();
        let text = w.finish();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, json!({ "a": -1, "b": ["x", "y\"z"], "c": {}, "d": [{ "e": true }, [1, 2]] }), "{text}");
    }
}
