//! A [`Problem`] with a card spec, and the final list of them ([`finish`]):
//! duplicates dropped, at most [`MAX_PROBLEMS_PER_FIELD`] per element and
//! field, the session's secrets redacted.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::limits::MAX_PROBLEMS_PER_FIELD;
use super::secrets::redact;

/// The `element` of problems about the spec as a whole.
pub(super) const SPEC: &str = "spec";

/// One thing wrong with a card spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Problem {
    /// The element id, or `"spec"` for the spec as a whole.
    pub element: String,
    /// The prop, or `"type"`, `"children"`, `"id"`, or a key of the spec.
    pub field: String,
    /// What is wrong, with the limit and the value.
    pub message: String,
}

impl Problem {
    pub(super) fn new(element: &str, field: &str, message: impl Into<String>) -> Self {
        Problem {
            element: element.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "element {:?} field {:?}: {}",
            self.element, self.field, self.message
        )
    }
}

/// How a problem names the JSON type it got: "a string", "an array".
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Drops exact duplicates, caps the problems per element and field, and
/// redacts the secrets' values from every text.
pub(super) fn finish(problems: Vec<Problem>, secrets: &[String]) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::with_capacity(problems.len());
    let mut per_field: HashMap<(String, String), usize> = HashMap::new();
    let mut seen: HashSet<Problem> = HashSet::new();
    let mut omitted: Vec<((String, String), usize)> = Vec::new();
    for problem in problems {
        if !seen.insert(problem.clone()) {
            continue;
        }
        let key = (problem.element.clone(), problem.field.clone());
        let count = per_field.entry(key.clone()).or_insert(0);
        *count += 1;
        if *count <= MAX_PROBLEMS_PER_FIELD {
            out.push(problem);
        } else if let Some(entry) = omitted.iter_mut().find(|(k, _)| *k == key) {
            entry.1 += 1;
        } else {
            omitted.push((key, 1));
        }
    }
    for ((element, field), n) in omitted {
        out.push(Problem::new(
            &element,
            &field,
            format!("{n} more problems in this field, not listed"),
        ));
    }
    redact(&mut out, secrets);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::card::test_cards::*;

    #[test]
    fn problem_display_and_serialization() {
        let p = Problem::new("t1", "rows", "101 rows, at most 100");
        assert_eq!(
            p.to_string(),
            r#"element "t1" field "rows": 101 rows, at most 100"#
        );
        assert_eq!(
            serde_json::to_value(&p).expect("json"),
            json!({"element": "t1", "field": "rows", "message": "101 rows, at most 100"})
        );
    }

    #[test]
    fn problems_per_field_are_capped() {
        let rows: Vec<Value> = (0..30).map(|_| json!([null])).collect();
        let got = problems(&card(
            &["t"],
            json!({"t": {"type": "Table", "props": {"columns": ["a"], "rows": rows}}}),
        ));
        assert_eq!(got.len(), MAX_PROBLEMS_PER_FIELD + 1);
        assert_eq!(
            got[MAX_PROBLEMS_PER_FIELD],
            r#"element "t" field "rows": 10 more problems in this field, not listed"#
        );
    }
}
