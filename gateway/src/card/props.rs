//! Reading one element ([`parse_element`]): its keys, type and children,
//! and its props ([`Props`]) read leniently, each problem collected, into a
//! [`Node`]. A Chart's props are read in `chart.rs`.

use serde_json::{Map, Value};

use super::limits::{
    MAX_ALT, MAX_BUTTON_TEXT, MAX_FIELD_TEXT, MAX_HEADER, MAX_TABLE_COLUMNS, MAX_TABLE_ROWS,
    MAX_TEXT, MAX_URL, chars,
};
use super::problem::{Problem, type_name};
use super::render::field_text;
use super::vocabulary::{Element, Kind, Node, type_list};

pub(super) fn parse_element(id: &str, value: &Value) -> Element {
    let mut problems = Vec::new();
    let Some(obj) = value.as_object() else {
        problems.push(Problem::new(
            id,
            "type",
            format!(
                "an element must be an object {{type, props, children}}, got {}",
                type_name(value)
            ),
        ));
        return Element {
            kind: None,
            node: None,
            children: Vec::new(),
            problems,
        };
    };
    for key in obj.keys() {
        if !matches!(key.as_str(), "type" | "props" | "children") {
            problems.push(Problem::new(
                id,
                key,
                "unknown key; an element takes type, props and children",
            ));
        }
    }
    let kind = match obj.get("type") {
        None | Some(Value::Null) => {
            problems.push(Problem::new(
                id,
                "type",
                format!("missing; one of {}", type_list()),
            ));
            None
        }
        Some(Value::String(name)) => {
            let kind = Kind::parse(name);
            if kind.is_none() {
                problems.push(Problem::new(
                    id,
                    "type",
                    format!("unknown type {name:?}; one of {}", type_list()),
                ));
            }
            kind
        }
        Some(other) => {
            problems.push(Problem::new(
                id,
                "type",
                format!(
                    "expected a string (one of {}), got {}",
                    type_list(),
                    type_name(other)
                ),
            ));
            None
        }
    };

    let mut children = Vec::new();
    match obj.get("children") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(child) => children.push(child.clone()),
                    other => problems.push(Problem::new(
                        id,
                        "children",
                        format!(
                            "item {}: expected an element id (a string), got {}",
                            i + 1,
                            type_name(other)
                        ),
                    )),
                }
            }
        }
        Some(other) => problems.push(Problem::new(
            id,
            "children",
            format!("expected an array of element ids, got {}", type_name(other)),
        )),
    }
    if let Some(kind) = kind
        && !kind.takes_children()
        && !children.is_empty()
    {
        problems.push(Problem::new(
            id,
            "children",
            format!("{} takes no children, got {}", kind.a(), children.len()),
        ));
    }

    let empty = Map::new();
    let props = match obj.get("props") {
        None | Some(Value::Null) => Some(&empty),
        Some(Value::Object(map)) => Some(map),
        Some(other) => {
            problems.push(Problem::new(
                id,
                "props",
                format!("expected an object, got {}", type_name(other)),
            ));
            None
        }
    };
    let node = kind.map(|kind| {
        let mut reader = Props {
            id,
            kind,
            map: props,
            problems: &mut problems,
        };
        reader.unknown_props();
        reader.node()
    });
    Element {
        kind,
        node,
        children,
        problems,
    }
}

/// Reads one element's props, collecting problems.
pub(super) struct Props<'a> {
    id: &'a str,
    kind: Kind,
    /// `None` when `props` is not an object (already reported).
    map: Option<&'a Map<String, Value>>,
    problems: &'a mut Vec<Problem>,
}

impl<'a> Props<'a> {
    pub(super) fn push(&mut self, field: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(self.id, field, message));
    }

    /// Reports an array of `len` items that is empty or over `max`, after
    /// `prefix`: "no columns; a table has 1 to 20", "21 columns, at most 20".
    pub(super) fn one_to_max(
        &mut self,
        field: &str,
        prefix: &str,
        (len, max): (usize, usize),
        noun: &str,
        whole: &str,
    ) {
        if len == 0 {
            self.push(field, format!("{prefix}no {noun}; {whole} has 1 to {max}"));
        } else if len > max {
            self.push(field, format!("{prefix}{len} {noun}, at most {max}"));
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<&'a Value> {
        self.map
            .and_then(|map| map.get(name))
            .filter(|value| !value.is_null())
    }

    fn unknown_props(&mut self) {
        let Some(map) = self.map else {
            return;
        };
        let allowed = self.kind.props();
        let unknown: Vec<String> = map
            .keys()
            .filter(|key| !allowed.contains(&key.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            let message = if self.kind == Kind::Button {
                format!("buttons are links only; a Button takes text and url, not {key}")
            } else {
                format!(
                    "unknown prop; {} takes {}",
                    self.kind.a(),
                    self.kind.props_list()
                )
            };
            self.push(&key, message);
        }
    }

    pub(super) fn missing(&mut self, name: &str, what: &str) {
        if self.map.is_some() {
            let message = format!("missing; {} requires {name} ({what})", self.kind.a());
            self.push(name, message);
        }
    }

    /// A string prop: non-blank, at most `max` characters.
    pub(super) fn string(
        &mut self,
        name: &str,
        required: bool,
        max: usize,
        what: &str,
    ) -> Option<String> {
        match self.get(name) {
            None => {
                if required {
                    self.missing(name, what);
                }
                None
            }
            Some(Value::String(text)) => {
                let n = chars(text);
                if text.trim().is_empty() {
                    self.push(name, format!("empty; expected {what}"));
                } else if n > max {
                    self.push(name, format!("{n} characters, at most {max}"));
                }
                Some(text.clone())
            }
            Some(other) => {
                let message = format!("expected {what}, got {}", type_name(other));
                self.push(name, message);
                None
            }
        }
    }

    /// An http(s) URL prop.
    fn url(&mut self, name: &str) -> Option<String> {
        let url = self.string(name, true, MAX_URL, "an http:// or https:// URL")?;
        if !url.trim().is_empty()
            && let Some(reason) = url_problem(&url)
        {
            self.push(name, format!("{url:?} {reason}"));
        }
        Some(url)
    }

    fn node(&mut self) -> Node {
        match self.kind {
            Kind::Card => Node::Card {
                title: self.string("title", false, MAX_HEADER, "a string"),
            },
            Kind::Fields => Node::Fields,
            Kind::Divider => Node::Divider,
            Kind::Heading => Node::Heading {
                text: self
                    .string("text", true, MAX_HEADER, "a string")
                    .unwrap_or_default(),
            },
            Kind::Text => Node::Text {
                text: self
                    .string("text", true, MAX_TEXT, "a mrkdwn string")
                    .unwrap_or_default(),
            },
            Kind::Field => self.field(),
            Kind::Table => self.table(),
            Kind::Chart => Node::Chart(self.chart()),
            Kind::Button => Node::Button {
                text: self
                    .string("text", true, MAX_BUTTON_TEXT, "a string")
                    .unwrap_or_default(),
                url: self.url("url").unwrap_or_default(),
            },
            Kind::Image => Node::Image {
                url: self.url("url").unwrap_or_default(),
                alt: self
                    .string("alt", true, MAX_ALT, "a string (alt text)")
                    .unwrap_or_default(),
            },
        }
    }

    fn field(&mut self) -> Node {
        let label = self
            .string("label", true, MAX_FIELD_TEXT, "a string")
            .unwrap_or_default();
        let value = match self.get("value") {
            None => {
                self.missing("value", "a mrkdwn string or a number");
                String::new()
            }
            Some(Value::String(text)) => text.clone(),
            Some(Value::Number(number)) => number.to_string(),
            Some(other) => {
                let message = format!(
                    "expected a mrkdwn string or a number, got {}",
                    type_name(other)
                );
                self.push("value", message);
                String::new()
            }
        };
        let n = chars(&field_text(&label, &value));
        if !label.is_empty() && n > MAX_FIELD_TEXT {
            self.push(
                "value",
                format!(
                    "label and value render to {n} characters (*label*, a line break, value), \
                     at most {MAX_FIELD_TEXT}"
                ),
            );
        }
        Node::Field { label, value }
    }

    fn table(&mut self) -> Node {
        let mut columns = Vec::new();
        let mut column_count = None;
        match self.get("columns") {
            None => self.missing(
                "columns",
                &format!("an array of 1 to {MAX_TABLE_COLUMNS} column names"),
            ),
            Some(Value::Array(items)) => {
                column_count = Some(items.len());
                let count = (items.len(), MAX_TABLE_COLUMNS);
                self.one_to_max("columns", "", count, "columns", "a table");
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(name) => columns.push(name.clone()),
                        other => {
                            let message = format!(
                                "column {}: expected a string, got {}",
                                i + 1,
                                type_name(other)
                            );
                            self.push("columns", message);
                            columns.push(String::new());
                        }
                    }
                }
            }
            Some(other) => {
                let message = format!(
                    "expected an array of column names, got {}",
                    type_name(other)
                );
                self.push("columns", message);
            }
        }
        let mut rows = Vec::new();
        match self.get("rows") {
            None => self.missing("rows", "an array of rows, each an array of cells"),
            Some(Value::Array(items)) => {
                if items.len() > MAX_TABLE_ROWS {
                    self.push(
                        "rows",
                        format!("{} rows, at most {MAX_TABLE_ROWS}", items.len()),
                    );
                }
                for (i, item) in items.iter().enumerate() {
                    let Value::Array(cells) = item else {
                        let message = format!(
                            "row {}: expected an array of cells, got {}",
                            i + 1,
                            type_name(item)
                        );
                        self.push("rows", message);
                        continue;
                    };
                    if let Some(count) = column_count
                        && cells.len() != count
                    {
                        self.push(
                            "rows",
                            format!("row {}: {} cells, but {count} columns", i + 1, cells.len()),
                        );
                    }
                    let mut row = Vec::with_capacity(cells.len());
                    for (j, cell) in cells.iter().enumerate() {
                        match cell {
                            Value::String(text) => row.push(text.clone()),
                            Value::Number(number) => row.push(number.to_string()),
                            other => {
                                let message = format!(
                                    "row {} cell {}: expected a string or a number, got {}",
                                    i + 1,
                                    j + 1,
                                    type_name(other)
                                );
                                self.push("rows", message);
                                row.push(String::new());
                            }
                        }
                    }
                    rows.push(row);
                }
            }
            Some(other) => {
                let message = format!(
                    "expected an array of rows (arrays of cells), got {}",
                    type_name(other)
                );
                self.push("rows", message);
            }
        }
        Node::Table { columns, rows }
    }
}

/// Why `url` is not an http(s) URL Slack accepts, or `None`.
fn url_problem(url: &str) -> Option<&'static str> {
    let rest = strip_prefix_ignore_case(url, "https://")
        .or_else(|| strip_prefix_ignore_case(url, "http://"));
    let Some(rest) = rest else {
        return Some("is not an http:// or https:// URL");
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("contains spaces or control characters");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if host_port.starts_with('[') {
        host_port
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Some("has no host");
    }
    None
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.as_bytes().get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix.as_bytes()) {
        // The prefix is ASCII, so its length is a character boundary.
        text.get(prefix.len()..)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::card::test_cards::*;

    #[test]
    fn button_and_image_urls() {
        let button =
            |url: &str| json!({"b": {"type": "Button", "props": {"text": "x", "url": url}}});
        for ok in [
            "https://a.example",
            "HTTP://a.example:8080/x?y#z",
            "https://u@[::1]/",
        ] {
            render_ok(&card(&["b"], button(ok)));
        }
        for (bad, why) in [
            ("javascript:alert(1)", "is not an http:// or https:// URL"),
            ("https://", "has no host"),
            (
                "https://a.example/x y",
                "contains spaces or control characters",
            ),
            ("slack://open", "is not an http:// or https:// URL"),
        ] {
            assert_eq!(
                problems(&card(&["b"], button(bad))),
                [format!(r#"element "b" field "url": {bad:?} {why}"#)]
            );
        }
        let got = problems(&card(
            &["b", "i"],
            json!({
                "b": {"type": "Button", "props": {"text": "x", "value": "v", "style": "primary"}},
                "i": {"type": "Image", "props": {"url": "file:///etc/passwd", "alt": "a"}}
            }),
        ));
        assert_eq!(
            got,
            [
                r#"element "b" field "style": buttons are links only; a Button takes text and url, not style"#,
                r#"element "b" field "value": buttons are links only; a Button takes text and url, not value"#,
                r#"element "b" field "url": missing; a Button requires url (an http:// or https:// URL)"#,
                r#"element "i" field "url": "file:///etc/passwd" is not an http:// or https:// URL"#,
            ]
        );
    }
}
