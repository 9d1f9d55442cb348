//! Entry points over JSON text, for native callers and tools: the text is
//! parsed and laid out as a host lays out objects, then decided by the one
//! decider.

use serde_json::{Map, Value};

use crate::decide::decide;
use crate::error::{Error, Result};
use crate::event::validate;
use crate::fingerprint::fingerprint;
use crate::ruleset::RuleSet;

pub mod keyed;
pub mod outbox;
pub mod payload;
pub mod text;

/// JSON text that must hold an object; `what` names it in the error.
pub(crate) fn parse_object(text: &str, what: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => {
            Err(Error::InvalidArgument { reason: format!("{what} must be a JSON object, not {}", kind(&other)) })
        }
        Err(e) => Err(Error::InvalidArgument { reason: format!("{what} is not valid JSON: {e}") }),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An event given as JSON text: `fp1:…`.
pub fn fingerprint_json(rule_set: &RuleSet, event: &str) -> Result<String> {
    let event = match serde_json::from_str::<Value>(event) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(Error::InvalidEvent {
                field: "event".into(),
                reason: format!("must be an object, not {}", kind(&other)),
                event_id: None,
            })
        }
        Err(e) => return Err(Error::InvalidArgument { reason: format!("event is not valid JSON: {e}") }),
    };
    Ok(fingerprint(rule_set, &validate(rule_set, &event)?))
}

/// `{"event": …, "receipt": … | null, "workflow": … | null}` in, the decision out, both as JSON text.
pub fn decide_json(rule_set: &RuleSet, input: &str) -> Result<String> {
    let input = parse_object(input, "decide input")?;
    let member = |name: &str| -> Result<Option<&Map<String, Value>>> {
        match input.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => {
                Err(Error::InvalidArgument { reason: format!("{name} must be an object or null, not {}", kind(other)) })
            }
        }
    };
    let event = match input.get("event") {
        Some(Value::Object(map)) => map,
        other => {
            return Err(Error::InvalidEvent {
                field: "event".into(),
                reason: format!("must be an object, not {}", other.map_or("missing", kind)),
                event_id: None,
            })
        }
    };
    let receipt = member("receipt")?;
    let workflow = member("workflow")?;
    let decision = decide(rule_set, event, receipt, workflow)?;
    serde_json::to_string(&decision).map_err(|e| Error::InvalidArgument { reason: e.to_string() })
}
