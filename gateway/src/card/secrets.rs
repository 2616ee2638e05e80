//! The secret scan: a card holding the value of one of the session's
//! secrets (in a string, a number or a key, anywhere in the spec) is
//! refused with a problem that does not repeat the value, and [`redact`]
//! takes the values out of every problem's text, so that an id or a prop
//! echoed in another problem cannot leak one either.

use serde_json::Value;

use super::problem::{Problem, SPEC};

const SECRET_MESSAGE: &str = "contains the value of one of the session's secrets";
const REDACTED: &str = "[redacted]";

/// The secrets worth looking for: an empty value is in every text.
fn non_empty(secrets: &[String]) -> Vec<&str> {
    secrets
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Adds one problem per element and field (or key of the spec) that holds
/// the value of a non-empty secret; the problem does not repeat it.
pub(super) fn scan_secrets(spec: &Value, secrets: &[String], problems: &mut Vec<Problem>) {
    let secrets = non_empty(secrets);
    if secrets.is_empty() {
        return;
    }
    let hit = |text: &str| secrets.iter().any(|secret| text.contains(secret));
    let mut found: Vec<(String, String)> = Vec::new();
    let mut add = |element: &str, field: &str| {
        let key = (element.to_owned(), field.to_owned());
        if !found.contains(&key) {
            found.push(key);
        }
    };
    match spec {
        Value::Object(obj) => {
            for (key, value) in obj {
                let (Some(elements), "elements") = (value.as_object(), key.as_str()) else {
                    if hit(key) || value_has_secret(value, &hit) {
                        add(SPEC, key);
                    }
                    continue;
                };
                for (id, element) in elements {
                    if hit(id) {
                        add(id, "id");
                    }
                    let Value::Object(parts) = element else {
                        if value_has_secret(element, &hit) {
                            add(id, "type");
                        }
                        continue;
                    };
                    for (part, value) in parts {
                        match (part.as_str(), value) {
                            ("props", Value::Object(props)) => {
                                for (prop, value) in props {
                                    if hit(prop) || value_has_secret(value, &hit) {
                                        add(id, prop);
                                    }
                                }
                            }
                            _ => {
                                if hit(part) || value_has_secret(value, &hit) {
                                    add(id, part);
                                }
                            }
                        }
                    }
                }
            }
        }
        other => {
            if value_has_secret(other, &hit) {
                add(SPEC, SPEC);
            }
        }
    }
    problems.extend(
        found
            .into_iter()
            .map(|(element, field)| Problem::new(&element, &field, SECRET_MESSAGE)),
    );
}

fn value_has_secret(value: &Value, hit: &dyn Fn(&str) -> bool) -> bool {
    match value {
        Value::Null | Value::Bool(_) => false,
        Value::Number(number) => hit(&number.to_string()),
        Value::String(text) => hit(text),
        Value::Array(items) => items.iter().any(|item| value_has_secret(item, hit)),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| hit(key) || value_has_secret(item, hit)),
    }
}

/// Replaces the secrets' values (the non-empty ones) with `[redacted]` in
/// every problem's element, field and message.
pub(super) fn redact(problems: &mut [Problem], secrets: &[String]) {
    let secrets = non_empty(secrets);
    if !secrets.is_empty() {
        for problem in problems {
            for text in [
                &mut problem.element,
                &mut problem.field,
                &mut problem.message,
            ] {
                for secret in &secrets {
                    if text.contains(secret) {
                        *text = text.replace(secret, REDACTED);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::card::test_cards::*;
    use crate::card::validate_and_render;

    #[test]
    fn secrets_are_refused_without_being_echoed() {
        let secret = "sk-live-0123456789".to_owned();
        let spec = json!({
            "root": "card",
            "elements": {
                "card": {"type": "Card", "props": {"title": "ok"}, "children": ["t", "tab", "sk-live-0123456789-id"]},
                "t": {"type": "Text", "props": {"text": "the key is sk-live-0123456789!"}},
                "tab": {"type": "Table", "props": {"columns": ["k"], "rows": [["x sk-live-0123456789"]]}},
                "sk-live-0123456789-id": {"type": "Divider", "props": {"sk-live-0123456789": 1}}
            }
        });
        let got = problems_with(&spec, std::slice::from_ref(&secret));
        for p in &got {
            assert!(!p.contains(&secret), "{p}");
        }
        assert_has(
            &got,
            r#"element "t" field "text": contains the value of one of the session's secrets"#,
        );
        assert_has(
            &got,
            r#"element "tab" field "rows": contains the value of one of the session's secrets"#,
        );
        assert_has(
            &got,
            r#"element "[redacted]-id" field "id": contains the value of one of the session's secrets"#,
        );
        assert_has(
            &got,
            r#"element "[redacted]-id" field "[redacted]": unknown prop; a Divider takes no props"#,
        );

        // A numeric secret in a number; empty secrets are ignored.
        let spec = card(
            &["t"],
            json!({"t": {"type": "Table", "props": {"columns": ["n"], "rows": [[40_961_234]]}}}),
        );
        assert_eq!(
            problems_with(&spec, &["961".to_owned()]),
            [r#"element "t" field "rows": contains the value of one of the session's secrets"#]
        );
        render_ok(&spec);
        assert!(validate_and_render(&spec, &[String::new()]).is_ok());
    }
}
