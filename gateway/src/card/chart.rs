//! Reading a Chart's props: its kind, title and series, each series' name
//! and points, and the rules between them (unique labels and names, the
//! same labels in every series, one series of positive values for a pie).

use std::collections::{HashMap, HashSet};

use serde_json::{Number, Value};

use super::limits::{MAX_CHART_TITLE, MAX_LABEL, MAX_POINTS, MAX_SERIES, chars};
use super::problem::type_name;
use super::props::Props;
use super::vocabulary::{Chart, ChartKind, Series};

impl Props<'_> {
    pub(super) fn chart(&mut self) -> Chart {
        let kind = match self.get("kind") {
            None => {
                self.missing("kind", "bar, line, area or pie");
                None
            }
            Some(Value::String(name)) => {
                let kind = match name.as_str() {
                    "bar" => Some(ChartKind::Bar),
                    "line" => Some(ChartKind::Line),
                    "area" => Some(ChartKind::Area),
                    "pie" => Some(ChartKind::Pie),
                    _ => None,
                };
                if kind.is_none() {
                    self.push(
                        "kind",
                        format!("unknown chart kind {name:?}; one of bar, line, area, pie"),
                    );
                }
                kind
            }
            Some(other) => {
                let message = format!(
                    "expected a string (bar, line, area or pie), got {}",
                    type_name(other)
                );
                self.push("kind", message);
                None
            }
        };
        let title = self
            .string("title", true, MAX_CHART_TITLE, "a string")
            .unwrap_or_default();
        let mut series = Vec::new();
        match self.get("series") {
            None => self.missing("series", "an array of {name, points}"),
            Some(Value::Array(items)) => {
                let count = (items.len(), MAX_SERIES);
                self.one_to_max("series", "", count, "series", "a chart");
                for (i, item) in items.iter().enumerate() {
                    series.push(self.series(i + 1, item));
                }
            }
            Some(other) => {
                let message = format!(
                    "expected an array of {{name, points}}, got {}",
                    type_name(other)
                );
                self.push("series", message);
            }
        }
        if let Some(kind) = kind {
            self.chart_consistency(kind, &series);
        }
        Chart {
            kind: kind.unwrap_or(ChartKind::Bar),
            title,
            series,
        }
    }

    /// Series `n` (counting from 1); invalid parts are reported and left
    /// out (a missing name is empty).
    fn series(&mut self, n: usize, item: &Value) -> Series {
        let mut series = Series {
            name: String::new(),
            points: Vec::new(),
        };
        let Value::Object(obj) = item else {
            let message = format!(
                "series {n}: expected an object {{name, points}}, got {}",
                type_name(item)
            );
            self.push("series", message);
            return series;
        };
        for key in obj.keys() {
            if !matches!(key.as_str(), "name" | "points") {
                self.push(
                    "series",
                    format!("series {n}: unknown key {key:?}; a series takes name and points"),
                );
            }
        }
        match obj.get("name") {
            None | Some(Value::Null) => self.push("series", format!("series {n}: missing name")),
            Some(Value::String(name)) => {
                self.label(&format!("series {n}: name"), name);
                series.name = name.clone();
            }
            Some(other) => {
                let message = format!(
                    "series {n}: name: expected a string, got {}",
                    type_name(other)
                );
                self.push("series", message);
            }
        }
        match obj.get("points") {
            None | Some(Value::Null) => self.push(
                "series",
                format!("series {n}: missing points (an array of {{label, value}})"),
            ),
            Some(Value::Array(points)) => {
                let (prefix, count) = (format!("series {n}: "), (points.len(), MAX_POINTS));
                self.one_to_max("series", &prefix, count, "points", "a series");
                for (j, point) in points.iter().enumerate() {
                    if let Some(point) = self.point(n, j + 1, point) {
                        series.points.push(point);
                    }
                }
            }
            Some(other) => {
                let message = format!(
                    "series {n}: points: expected an array of {{label, value}}, got {}",
                    type_name(other)
                );
                self.push("series", message);
            }
        }
        series
    }

    fn point(&mut self, n: usize, m: usize, item: &Value) -> Option<(String, Number)> {
        let at = format!("series {n} point {m}");
        let Value::Object(obj) = item else {
            let message = format!(
                "{at}: expected an object {{label, value}}, got {}",
                type_name(item)
            );
            self.push("series", message);
            return None;
        };
        for key in obj.keys() {
            if !matches!(key.as_str(), "label" | "value") {
                self.push(
                    "series",
                    format!("{at}: unknown key {key:?}; a point takes label and value"),
                );
            }
        }
        let label = match obj.get("label") {
            None | Some(Value::Null) => {
                self.push("series", format!("{at}: missing label"));
                None
            }
            Some(Value::String(label)) => {
                self.label(&format!("{at}: label"), label);
                Some(label.clone())
            }
            Some(other) => {
                let message = format!("{at}: label: expected a string, got {}", type_name(other));
                self.push("series", message);
                None
            }
        };
        let value = match obj.get("value") {
            None | Some(Value::Null) => {
                self.push("series", format!("{at}: missing value (a number)"));
                None
            }
            Some(Value::Number(number)) => Some(number.clone()),
            Some(Value::String(text)) => {
                let number = number_from_str(text);
                if number.is_none() {
                    self.push(
                        "series",
                        format!("{at}: value: expected a number, got the string {text:?}"),
                    );
                }
                number
            }
            Some(other) => {
                let message = format!("{at}: value: expected a number, got {}", type_name(other));
                self.push("series", message);
                None
            }
        };
        Some((label?, value?))
    }

    /// A series name or point label: non-blank, at most [`MAX_LABEL`].
    fn label(&mut self, at: &str, label: &str) {
        let n = chars(label);
        if label.trim().is_empty() {
            self.push("series", format!("{at} is empty"));
        } else if n > MAX_LABEL {
            self.push(
                "series",
                format!("{at} {label:?} has {n} characters, at most {MAX_LABEL}"),
            );
        }
    }

    fn chart_consistency(&mut self, kind: ChartKind, series: &[Series]) {
        for (i, s) in series.iter().enumerate() {
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for (j, (label, _)) in s.points.iter().enumerate() {
                if let Some(first) = seen.get(label.as_str()) {
                    self.push(
                        "series",
                        format!(
                            "series {} point {}: label {label:?} repeats point {first}'s; labels \
                             in a series are unique",
                            i + 1,
                            j + 1
                        ),
                    );
                } else {
                    seen.insert(label, j + 1);
                }
            }
        }
        if kind == ChartKind::Pie {
            if series.len() > 1 {
                self.push(
                    "series",
                    format!("a pie chart takes exactly 1 series, got {}", series.len()),
                );
            }
            if let Some(first) = series.first() {
                for (j, (label, value)) in first.points.iter().enumerate() {
                    if value.as_f64().is_none_or(|v| v <= 0.0) {
                        self.push(
                            "series",
                            format!(
                                "series 1 point {} ({label:?}): value {value}; a pie slice is \
                                 greater than 0",
                                j + 1
                            ),
                        );
                    }
                }
            }
            return;
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, s) in series.iter().enumerate() {
            if s.name.is_empty() {
                continue;
            }
            if let Some(first) = names.get(s.name.as_str()) {
                self.push(
                    "series",
                    format!(
                        "series {}: name {:?} repeats series {first}'s; series names are unique",
                        i + 1,
                        s.name
                    ),
                );
            } else {
                names.insert(&s.name, i + 1);
            }
        }
        let Some(first) = series.first() else {
            return;
        };
        let axis: HashSet<&str> = first.points.iter().map(|(l, _)| l.as_str()).collect();
        for (i, s) in series.iter().enumerate().skip(1) {
            let labels: HashSet<&str> = s.points.iter().map(|(l, _)| l.as_str()).collect();
            for (label, _) in &first.points {
                if !labels.contains(label.as_str()) {
                    self.push(
                        "series",
                        format!(
                            "series {} has no point for {label:?}; every series has one point \
                             for each label of series 1",
                            i + 1
                        ),
                    );
                }
            }
            for (j, (label, _)) in s.points.iter().enumerate() {
                if !axis.contains(label.as_str()) {
                    self.push(
                        "series",
                        format!(
                            "series {} point {}: label {label:?} is not a label of series 1; \
                             every series has the same labels",
                            i + 1,
                            j + 1
                        ),
                    );
                }
            }
        }
    }
}

/// A number sent as a string ("12", "-3.5").
fn number_from_str(text: &str) -> Option<Number> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i64>() {
        return Some(Number::from(n));
    }
    text.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .and_then(Number::from_f64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::card::test_cards::*;

    #[test]
    fn chart_shape_problems() {
        let spec = card(
            &["p", "b"],
            json!({
                "p": {"type": "Chart", "props": {"kind": "pie", "title": "P", "series": [
                    {"name": "a", "points": [{"label": "x", "value": 0}, {"label": "x", "value": 2}]},
                    {"name": "b", "points": [{"label": "y", "value": 1}]}
                ]}},
                "b": {"type": "Chart", "props": {"kind": "bar", "title": "B", "series": [
                    {"name": "a", "points": [{"label": "x", "value": 1}, {"label": "y", "value": "n/a"}]},
                    {"name": "a", "points": [{"label": "x", "value": 1}, {"label": "z", "value": 2}], "color": "red"}
                ]}},
            }),
        );
        let got = problems(&spec);
        let expected = [
            r#"element "p" field "series": series 1 point 2: label "x" repeats point 1's; labels in a series are unique"#,
            r#"element "p" field "series": a pie chart takes exactly 1 series, got 2"#,
            r#"element "p" field "series": series 1 point 1 ("x"): value 0; a pie slice is greater than 0"#,
            r#"element "b" field "series": series 1 point 2: value: expected a number, got the string "n/a""#,
            r#"element "b" field "series": series 2: unknown key "color"; a series takes name and points"#,
            r#"element "b" field "series": series 2: name "a" repeats series 1's; series names are unique"#,
            r#"element "b" field "series": series 2 point 2: label "z" is not a label of series 1; every series has the same labels"#,
        ];
        for e in expected {
            assert_has(&got, e);
        }
        assert_eq!(got.len(), expected.len(), "{}", got.join("\n"));

        let got = problems(&card(
            &["k"],
            json!({"k": {"type": "Chart", "props": {"kind": "scatter", "title": "K", "series": [
                {"name": "a", "points": [{"label": "x", "value": 1}]},
                {"name": "b", "points": [{"label": "y", "value": 1}]}
            ]}}}),
        ));
        assert_eq!(
            got,
            [
                r#"element "k" field "kind": unknown chart kind "scatter"; one of bar, line, area, pie"#
            ]
        );
        let got = problems(&card(
            &["k"],
            json!({"k": {"type": "Chart", "props": {"kind": "bar", "title": "K", "series": [
                {"name": "a", "points": [{"label": "x", "value": 1}]},
                {"name": "b", "points": [{"label": "y", "value": 1}]}
            ]}}}),
        ));
        assert_eq!(
            got,
            [
                r#"element "k" field "series": series 2 has no point for "x"; every series has one point for each label of series 1"#,
                r#"element "k" field "series": series 2 point 1: label "y" is not a label of series 1; every series has the same labels"#
            ]
        );
    }
}
