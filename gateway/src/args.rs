//! Tool arguments, checked from the raw JSON so that a bad call is told
//! every problem at once (a typed parameter would turn the first one into a
//! JSON-RPC error and lose the rest).

use std::ops::RangeInclusive;

use rmcp::model::JsonObject;
use serde_json::Value;

/// `what` and every problem, one per line.
pub fn problems(what: &str, found: &[String]) -> String {
    let mut text = format!("{what}: {} problem(s)", found.len());
    for p in found {
        text.push_str("\n- ");
        text.push_str(p);
    }
    text
}

/// A problem for each argument not in `known`.
pub fn unknown_args(args: &JsonObject, known: &[&str]) -> Vec<String> {
    args.keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| {
            format!(
                "unknown argument {k:?} (this tool takes {})",
                known.join(", ")
            )
        })
        .collect()
}

/// An integer, also when sent as a string ("8080") or as a whole float
/// (8080.0).
pub fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A count after its cap ([`Args::capped_count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// What the tool uses.
    pub n: usize,
    /// What was asked, when it was more than the cap.
    pub asked: Option<u64>,
}

impl Count {
    /// Whether the cap was applied.
    pub fn capped(&self) -> bool {
        self.asked.is_some()
    }

    /// A sentence's note on the cap: ` (max_messages 80 is capped at 50)`,
    /// or nothing.
    pub fn note(&self, key: &str) -> String {
        match self.asked {
            Some(asked) => format!(" ({key} {asked} is capped at {})", self.n),
            None => String::new(),
        }
    }
}

/// Reads a tool's arguments, collecting every problem.
pub struct Args<'a> {
    args: &'a JsonObject,
    pub found: Vec<String>,
}

impl<'a> Args<'a> {
    /// Starts with a problem for each argument not in `known`.
    pub fn new(args: &'a JsonObject, known: &[&str]) -> Self {
        Self {
            args,
            found: unknown_args(args, known),
        }
    }

    pub fn raw(&self) -> &'a JsonObject {
        self.args
    }

    /// A string of `chars` characters (counted as Unicode scalar values);
    /// `one_line` refuses line breaks and trims surrounding whitespace
    /// before counting. A blank string is empty. A missing required one is
    /// a problem saying what it is.
    pub fn text(
        &mut self,
        key: &str,
        required: Option<&str>,
        chars: RangeInclusive<usize>,
        one_line: bool,
    ) -> Option<String> {
        match self.args.get(key) {
            None | Some(Value::Null) => {
                if let Some(what) = required {
                    self.found.push(format!("{key} is required: {what}"));
                }
                None
            }
            Some(Value::String(given)) => {
                // A one-line value is taken without its surrounding
                // whitespace; a blank one counts as empty.
                let s = if one_line {
                    given.trim()
                } else {
                    given.as_str()
                };
                let n = if s.trim().is_empty() {
                    0
                } else {
                    s.chars().count()
                };
                if n < *chars.start() {
                    self.found.push(match chars.start() {
                        1 => format!("{key} is empty"),
                        min => format!("{key} is {n} characters; at least {min}"),
                    });
                    None
                } else if n > *chars.end() {
                    self.found
                        .push(format!("{key} is {n} characters; at most {}", chars.end()));
                    None
                } else if one_line && s.contains(['\n', '\r']) {
                    self.found.push(format!("{key} must be one line"));
                    None
                } else {
                    Some(s.to_owned())
                }
            }
            Some(v) => {
                self.found.push(format!("{key} must be a string, got {v}"));
                None
            }
        }
    }

    /// A boolean (absent: `None`).
    pub fn boolean(&mut self, key: &str) -> Option<bool> {
        match self.args.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(v) => {
                self.found
                    .push(format!("{key} must be true or false, got {v}"));
                None
            }
        }
    }

    /// A count of at least 1 (absent: `default`) that the tool caps rather
    /// than refuses: above `cap` it is `cap`. The count and whether it was
    /// capped; a problem for anything but a positive integer.
    pub fn capped_count(&mut self, key: &str, default: usize, cap: usize) -> Option<Count> {
        match self.args.get(key) {
            None | Some(Value::Null) => Some(Count {
                n: default.min(cap),
                asked: None,
            }),
            Some(v) => match integer(v) {
                Some(n) if n >= 1 => {
                    let asked = u64::try_from(n).unwrap_or(u64::MAX);
                    let n = usize::try_from(asked).map_or(cap, |n| n.min(cap));
                    Some(Count {
                        n,
                        asked: Some(asked).filter(|&asked| asked > cap as u64),
                    })
                }
                _ => {
                    self.found.push(format!(
                        "{key} must be a positive integer (above {cap} it is capped at {cap}), \
                         got {v}"
                    ));
                    None
                }
            },
        }
    }

    /// The problems as one refusal, or `Ok` when there are none.
    pub fn finish(self, what: &str) -> Result<(), String> {
        if self.found.is_empty() {
            Ok(())
        } else {
            Err(problems(what, &self.found))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn limits_are_counted_in_characters() {
        let args = obj(
            json!({"a": "é".repeat(150), "b": "é".repeat(151), "c": " ab ", "d": "x\ny", "f": "   "}),
        );
        let mut a = Args::new(&args, &["a", "b", "c", "d", "f"]);
        assert!(a.text("a", None, 3..=150, true).is_some());
        assert!(a.text("f", None, 1..=150, false).is_none());
        assert!(a.text("b", None, 3..=150, true).is_none());
        assert!(a.text("c", None, 3..=150, true).is_none());
        assert!(a.text("d", None, 1..=150, true).is_none());
        assert!(a.text("e", Some("what it is"), 1..=5, true).is_none());
        assert_eq!(
            a.found,
            [
                "f is empty",
                "b is 151 characters; at most 150",
                "c is 2 characters; at least 3",
                "d must be one line",
                "e is required: what it is",
            ]
        );
    }

    #[test]
    fn capped_counts_are_capped_at_the_cap_and_one_past_it() {
        let args = obj(json!({
            "at": 50, "past": 51, "far": 1_000_000_000_000_i64, "text": "80",
            "zero": 0, "negative": -3, "half": 2.5, "word": "many",
        }));
        let known = [
            "absent", "at", "past", "far", "text", "zero", "negative", "half", "word",
        ];
        let mut a = Args::new(&args, &known);
        let count = |n, asked| Some(Count { n, asked });
        assert_eq!(a.capped_count("absent", 20, 50), count(20, None));
        assert_eq!(a.capped_count("at", 20, 50), count(50, None));
        assert_eq!(a.capped_count("past", 20, 50), count(50, Some(51)));
        assert_eq!(
            a.capped_count("far", 20, 50),
            count(50, Some(1_000_000_000_000))
        );
        assert_eq!(a.capped_count("text", 20, 50), count(50, Some(80)));
        assert!(a.found.is_empty(), "{:?}", a.found);
        for bad in ["zero", "negative", "half", "word"] {
            assert_eq!(a.capped_count(bad, 20, 50), None, "{bad}");
        }
        assert_eq!(
            a.found[0],
            "zero must be a positive integer (above 50 it is capped at 50), got 0"
        );
        assert_eq!(a.found.len(), 4);
        let capped = Count {
            n: 50,
            asked: Some(51),
        };
        assert!(capped.capped());
        assert_eq!(
            capped.note("max_messages"),
            " (max_messages 51 is capped at 50)"
        );
        assert_eq!(Count { n: 5, asked: None }.note("max_messages"), "");
    }

    #[test]
    fn unknown_and_mistyped_arguments_are_listed() {
        let args = obj(json!({"x": 1, "flag": "yes"}));
        let mut a = Args::new(&args, &["flag"]);
        assert_eq!(a.boolean("flag"), None);
        let err = a.finish("nothing happened").unwrap_err();
        assert!(err.starts_with("nothing happened: 2 problem(s)"), "{err}");
        assert!(err.contains("unknown argument \"x\""), "{err}");
        assert!(err.contains("flag must be true or false"), "{err}");
    }
}
