//! post_card's card vocabulary: validation of the untrusted `spec` argument
//! (collecting every problem, never stopping at the first) and rendering to
//! Slack Block Kit JSON.
//!
//! # Input
//!
//! `{"root": "<id>", "elements": {"<id>": {"type", "props", "children"}},
//! "state": {}}`; the vocabulary and its limits are in [`DESCRIPTION`] (what
//! a model reads) and [`input_schema`].
//!
//! Decisions:
//!
//! - Every element appears exactly once: as the root, or as a child of one
//!   parent, listed once. An element listed by two parents (or twice by one)
//!   is a problem, and so is an element not reachable from the root. A cycle
//!   (an element reachable from itself) is reported with its path.
//! - `state` is accepted only when absent, `null` or `{}`: cards are static
//!   (link buttons, no inputs), so there is no interactive state to hold.
//! - A Table holds at most 100 rows (the spec). Slack's table block counts
//!   its header row among its 100 rows, so a table with 100 rows has its
//!   `columns` as a bold line in a section above it instead.
//! - Positions in problem messages count from 1 ("row 3", "series 2").
//! - At most [`MAX_PROBLEMS_PER_FIELD`] problems are listed per element and
//!   field; one more line says how many were left out.
//! - A secret's value anywhere in the spec (strings, numbers, keys) is a
//!   problem that does not repeat the value; every problem's text has the
//!   session's secret values replaced by `[redacted]`, so an id or a prop
//!   echoed in another problem cannot leak one either.
//!
//! # Output blocks
//!
//! Shapes match slack-morphism 2.31's Block Kit models (`SlackBlock` in
//! `models/blocks/kit.rs`; the tests deserialize every rendered block into
//! them) and Slack's reference pages for the table and data visualization
//! blocks:
//!
//! - `Card.title`, `Heading`: `{"type":"header","text":{"type":"plain_text","text":..}}`
//! - `Text`: `{"type":"section","text":{"type":"mrkdwn","text":..}}`
//! - `Fields`: `{"type":"section","fields":[{"type":"mrkdwn","text":"*label*\nvalue"}, ..]}`
//! - `Table` (`SlackTableBlock`): `{"type":"table","rows":[[{"type":"raw_text","text":..}, ..], ..]}`,
//!   the first row being the `columns` header.
//! - `Chart` (`SlackDataVisualizationBlock` / `SlackChart`):
//!   bar, line and area:
//!   `{"type":"data_visualization","title":..,"chart":{"type":"bar","series":[{"name":..,"data":[{"label":..,"value":<number>}]}],"axis_config":{"categories":[..]}}}`
//!   (categories: the first series' labels, in order; every series' data in
//!   that order); pie:
//!   `{"type":"data_visualization","title":..,"chart":{"type":"pie","segments":[{"label":..,"value":<number>}]}}`.
//!   Each chart is followed by a section with its text summary
//!   (`*title* — series: label value, ..; ..`). [`RenderedCard::text_blocks`]
//!   is the same card with the chart blocks left out (summaries only), to
//!   post again when Slack answers `invalid_blocks` for a chart.
//! - consecutive `Button`s: `{"type":"actions","elements":[{"type":"button","text":{"type":"plain_text","text":..},"url":..}]}`
//!   (25 buttons per actions block).
//! - `Divider`: `{"type":"divider"}`; `Image`: `{"type":"image","image_url":..,"alt_text":..}`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Number, Value, json};

mod chart;
mod limits;
mod problem;
mod render;
mod schema;
mod secrets;
mod structure;
#[cfg(test)]
mod test_cards;
mod vocabulary;

use chart::{Chart, ChartKind, Series};
use limits::chars;
pub use limits::{
    MAX_ALT, MAX_BLOCKS, MAX_BUTTON_TEXT, MAX_BUTTONS_PER_ROW, MAX_CHART_TITLE, MAX_CHARTS,
    MAX_FALLBACK, MAX_FIELD_TEXT, MAX_FIELDS, MAX_HEADER, MAX_LABEL, MAX_POINTS,
    MAX_PROBLEMS_PER_FIELD, MAX_SERIES, MAX_TABLE_COLUMNS, MAX_TABLE_ROWS, MAX_TABLES, MAX_TEXT,
    MAX_URL,
};
pub use problem::Problem;
use problem::{SPEC, finish, type_name};
pub use render::RenderedCard;
pub(crate) use render::escape_mrkdwn;
use render::{field_text, render};
pub use schema::{DESCRIPTION, input_schema};
use secrets::scan_secrets;
use structure::{check_counts, check_structure, document_order};
use vocabulary::{Element, Kind, Node, type_list};

/// Validates `spec` (the tool's raw `spec` argument) and renders it, or
/// returns every problem found. A spec sent as a JSON string holding an
/// object is read as that object. `secrets` are the session's secret
/// values; a spec containing a non-empty one is refused without echoing it.
pub fn validate_and_render(spec: &Value, secrets: &[String]) -> Result<RenderedCard, Vec<Problem>> {
    let reparsed;
    let spec = match spec {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => {
                reparsed = value;
                &reparsed
            }
            _ => spec,
        },
        _ => spec,
    };
    let mut problems = Vec::new();
    let rendered = check(spec, &mut problems);
    scan_secrets(spec, secrets, &mut problems);
    match rendered {
        Some(card) if problems.is_empty() => Ok(card),
        _ => {
            if problems.is_empty() {
                problems.push(Problem::new(SPEC, SPEC, "the card could not be rendered"));
            }
            Err(finish(problems, secrets))
        }
    }
}

// ---------------------------------------------------------------------------
// Validation

/// Checks the whole spec into `problems`; renders the card when its root is
/// a Card (also when there are problems, to count the blocks).
fn check(spec: &Value, problems: &mut Vec<Problem>) -> Option<RenderedCard> {
    let mut push = |element: &str, field: &str, message: String| {
        problems.push(Problem::new(element, field, message));
    };
    let Some(obj) = spec.as_object() else {
        push(
            SPEC,
            SPEC,
            format!(
                "the spec must be an object {{root, elements, state}}, got {}",
                type_name(spec)
            ),
        );
        return None;
    };
    for key in obj.keys() {
        if !matches!(key.as_str(), "root" | "elements" | "state") {
            push(
                SPEC,
                key,
                "unknown key; the spec takes root, elements and state".to_owned(),
            );
        }
    }
    let root = match obj.get("root") {
        None | Some(Value::Null) => {
            push(
                SPEC,
                "root",
                "missing; the id of the root element, a Card".to_owned(),
            );
            None
        }
        Some(Value::String(id)) => Some(id.as_str()),
        Some(other) => {
            push(
                SPEC,
                "root",
                format!(
                    "expected an element id (a string), got {}",
                    type_name(other)
                ),
            );
            None
        }
    };
    match obj.get("state") {
        None | Some(Value::Null) => {}
        Some(Value::Object(state)) if state.is_empty() => {}
        Some(Value::Object(state)) => push(
            SPEC,
            "state",
            format!(
                "{} keys, at most 0: cards are static (link buttons, no inputs), so there is no \
                 interactive state; leave state out or send {{}}",
                state.len()
            ),
        ),
        Some(other) => push(
            SPEC,
            "state",
            format!(
                "expected an object, got {}; cards are static (no interactive state), so leave \
                 state out or send {{}}",
                type_name(other)
            ),
        ),
    }
    let empty = Map::new();
    let raw_elements = match obj.get("elements") {
        None | Some(Value::Null) => {
            push(
                SPEC,
                "elements",
                "missing; an object of element id to {type, props, children}".to_owned(),
            );
            &empty
        }
        Some(Value::Object(map)) => {
            if map.is_empty() {
                push(
                    SPEC,
                    "elements",
                    "no elements; the card needs at least its root Card".to_owned(),
                );
            }
            map
        }
        Some(other) => {
            push(
                SPEC,
                "elements",
                format!(
                    "expected an object of element id to {{type, props, children}}, got {}",
                    type_name(other)
                ),
            );
            &empty
        }
    };
    let mut elements: BTreeMap<&str, Element> = raw_elements
        .iter()
        .map(|(id, value)| (id.as_str(), parse_element(id, value)))
        .collect();
    if let Some(root) = root
        && !elements.contains_key(root)
        && !raw_elements.is_empty()
    {
        push(SPEC, "root", format!("{root:?} is not in elements"));
    }
    let root_id: Option<&str> = root.and_then(|r| elements.get_key_value(r).map(|(k, _)| *k));

    let (order, reachable) = document_order(root_id, &elements);
    for id in &order {
        if let Some(element) = elements.get_mut(id) {
            problems.append(&mut element.problems);
        }
    }
    check_structure(root, root_id, &order, &reachable, &elements, problems);
    let counted: Vec<&str> = order
        .iter()
        .copied()
        .filter(|id| root_id.is_none() || reachable.contains(id))
        .collect();
    check_counts(&counted, &elements, problems);

    let root_id = root_id?;
    let root_element = elements.get(root_id)?;
    let Some(Node::Card { title }) = &root_element.node else {
        return None;
    };
    let card = render(title.as_deref(), &root_element.children, &elements);
    if card.block_count > MAX_BLOCKS {
        problems.push(Problem::new(
            root_id,
            "children",
            format!(
                "the card renders to {} Slack blocks, at most {MAX_BLOCKS}",
                card.block_count
            ),
        ));
    } else if card.block_count == 0 {
        problems.push(Problem::new(
            root_id,
            "children",
            "the card renders to no Slack blocks; give it a title or children",
        ));
    }
    Some(card)
}

fn parse_element(id: &str, value: &Value) -> Element {
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
struct Props<'a> {
    id: &'a str,
    kind: Kind,
    /// `None` when `props` is not an object (already reported).
    map: Option<&'a Map<String, Value>>,
    problems: &'a mut Vec<Problem>,
}

impl<'a> Props<'a> {
    fn push(&mut self, field: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(self.id, field, message));
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
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

    fn missing(&mut self, name: &str, what: &str) {
        if self.map.is_some() {
            let message = format!("missing; {} requires {name} ({what})", self.kind.a());
            self.push(name, message);
        }
    }

    /// A string prop: non-blank, at most `max` characters.
    fn string(&mut self, name: &str, required: bool, max: usize, what: &str) -> Option<String> {
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
            None => self.missing("columns", "an array of 1 to 20 column names"),
            Some(Value::Array(items)) => {
                column_count = Some(items.len());
                if items.is_empty() {
                    self.push(
                        "columns",
                        format!("no columns; a table has 1 to {MAX_TABLE_COLUMNS}"),
                    );
                } else if items.len() > MAX_TABLE_COLUMNS {
                    self.push(
                        "columns",
                        format!("{} columns, at most {MAX_TABLE_COLUMNS}", items.len()),
                    );
                }
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

    fn chart(&mut self) -> Chart {
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
                if items.is_empty() {
                    self.push(
                        "series",
                        format!("no series; a chart has 1 to {MAX_SERIES}"),
                    );
                } else if items.len() > MAX_SERIES {
                    self.push(
                        "series",
                        format!("{} series, at most {MAX_SERIES}", items.len()),
                    );
                }
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
                if points.is_empty() {
                    self.push(
                        "series",
                        format!("series {n}: no points; a series has 1 to {MAX_POINTS}"),
                    );
                } else if points.len() > MAX_POINTS {
                    self.push(
                        "series",
                        format!("series {n}: {} points, at most {MAX_POINTS}", points.len()),
                    );
                }
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
    use super::test_cards::*;
    use super::*;

    #[test]
    fn an_invalid_card_reports_every_problem() {
        let spec = json!({
            "root": "card",
            "state": {"count": 1},
            "extra": true,
            "elements": {
                "card": {"type": "Card", "props": {"title": "x".repeat(151)}, "children": [
                    "h", "u", "missing", "fs", "b", "img", "lonely", "t1", "t2", "d"
                ]},
                "h": {"type": "Heading", "props": {"text": 5, "size": "big"}},
                "u": {"type": "Sparkline", "props": {}},
                "fs": {"type": "Fields", "children": ["f1", "h2"]},
                "f1": {"type": "Field", "props": {"label": "L"}},
                "h2": {"type": "Heading", "props": {"text": "in fields"}},
                "b": {"type": "Button", "props": {"text": "Go", "url": "ftp://x", "action_id": "go"}},
                "img": {"type": "Image", "props": {"url": "https://x.example/a.png"}},
                "lonely": {"type": "Field", "props": {"label": "a", "value": "b"}},
                "t1": {"type": "Table", "props": {"columns": ["a", "b"], "rows": [["1"], [true, 2]]}},
                "t2": {"type": "Table", "props": {"columns": ["a"], "rows": []}},
                "d": {"type": "Divider", "children": ["h"]},
                "orphan": {"type": "Divider"}
            }
        });
        let got = problems(&spec);
        let expected = [
            r#"element "spec" field "extra": unknown key; the spec takes root, elements and state"#,
            r#"element "spec" field "state": 1 keys, at most 0: cards are static (link buttons, no inputs), so there is no interactive state; leave state out or send {}"#,
            r#"element "card" field "title": 151 characters, at most 150"#,
            r#"element "h" field "size": unknown prop; a Heading takes text"#,
            r#"element "h" field "text": expected a string, got a number"#,
            r#"element "u" field "type": unknown type "Sparkline"; one of Card, Fields, Field, Heading, Text, Table, Chart, Button, Divider, Image"#,
            r#"element "f1" field "value": missing; a Field requires value (a mrkdwn string or a number)"#,
            r#"element "b" field "action_id": buttons are links only; a Button takes text and url, not action_id"#,
            r#"element "b" field "url": "ftp://x" is not an http:// or https:// URL"#,
            r#"element "img" field "alt": missing; an Image requires alt (a string (alt text))"#,
            r#"element "t1" field "rows": row 1: 1 cells, but 2 columns"#,
            r#"element "t1" field "rows": row 2 cell 1: expected a string or a number, got a boolean"#,
            r#"element "d" field "children": a Divider takes no children, got 1"#,
            r#"element "card" field "children": "missing" is not in elements"#,
            r#"element "d" field "children": "h" is already a child of "card"; each element appears once in the card"#,
            r#"element "orphan" field "id": not reachable from the root "card"; list it in the children of the Card (a Field: of a Fields) or remove it"#,
            r#"element "lonely" field "type": a Field must be a child of a Fields element, not of a Card ("card")"#,
            r#"element "fs" field "children": "h2" is a Heading; Fields takes only Field children"#,
            r#"element "t2" field "type": 2 tables in the card, at most 1"#,
        ];
        for e in expected {
            assert_has(&got, e);
        }
        assert_eq!(got.len(), expected.len(), "{}", got.join("\n"));
    }

    #[test]
    fn spec_level_problems() {
        assert_eq!(
            problems(&json!([1])),
            [
                r#"element "spec" field "spec": the spec must be an object {root, elements, state}, got an array"#
            ]
        );
        assert_eq!(
            problems(&json!({})),
            [
                r#"element "spec" field "root": missing; the id of the root element, a Card"#,
                r#"element "spec" field "elements": missing; an object of element id to {type, props, children}"#
            ]
        );
        let got = problems(&json!({"root": "nope", "elements": {"a": {"type": "Divider"}}}));
        assert_has(
            &got,
            r#"element "spec" field "root": "nope" is not in elements"#,
        );
        let got = problems(&json!({"root": "a", "elements": {"a": {"type": "Divider"}}}));
        assert_eq!(
            got,
            [r#"element "a" field "type": the root must be a Card, got Divider"#]
        );
        let got = problems(&json!({"root": "c", "elements": {"c": {"type": "Card"}}}));
        assert_eq!(
            got,
            [
                r#"element "c" field "children": the card renders to no Slack blocks; give it a title or children"#
            ]
        );
        let got = problems(
            &json!({"root": "c", "state": [], "elements": {"c": {"type": "Card", "props": {"title": "x"}}}}),
        );
        assert_eq!(
            got,
            [
                r#"element "spec" field "state": expected an object, got an array; cards are static (no interactive state), so leave state out or send {}"#
            ]
        );
    }

    #[test]
    fn a_spec_sent_as_a_json_string_is_read() {
        let text = full_card().to_string();
        let card = render_ok(&Value::String(text));
        assert_eq!(card.block_count, 12);
    }

    #[test]
    fn state_absent_null_or_empty_is_accepted() {
        for state in [None, Some(Value::Null), Some(json!({}))] {
            let mut spec = card(&["d"], json!({"d": {"type": "Divider"}}));
            if let Some(state) = state {
                spec["state"] = state;
            }
            render_ok(&spec);
        }
    }

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
