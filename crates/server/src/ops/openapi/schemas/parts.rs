//! The small JSON Schema pieces both schema files build with.

use serde_json::{json, Value};

/// A value of type `t` or `null`.
pub(super) fn nullable(t: &str) -> Value {
    json!({"type": [t, "null"]})
}

pub(super) fn obj(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

/// An integer of at least 0.
pub(super) fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}
