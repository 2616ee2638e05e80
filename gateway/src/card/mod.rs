//! post_card's card vocabulary: validation of the untrusted `spec` argument
//! (collecting every problem, never stopping at the first) and rendering to
//! Slack Block Kit JSON.
//!
//! # Files, in reading order
//!
//! - `mod.rs`: [`validate_and_render`], and `check`, which reads the spec's
//!   own keys (root, elements, state) and runs the steps below in order.
//! - `schema.rs`: what a model reads, [`DESCRIPTION`] and [`input_schema`].
//! - `limits.rs`: the limits (`MAX_*`) and how texts are measured.
//! - `vocabulary.rs`: the element types and their props, and what an
//!   element is once read (`Element`, `Node`, `Chart`).
//! - `props.rs`: reading one element, its type, children and props.
//! - `chart.rs`: reading a Chart's props, its series and points.
//! - `structure.rs`: document order, parents, cycles, reachability, nesting
//!   and the card-wide counts.
//! - `render.rs`: rendering to Block Kit, [`RenderedCard`].
//! - `secrets.rs`: the secret scan and the redaction of problems.
//! - `problem.rs`: [`Problem`] and the final list (duplicates, caps).
//! - `test_cards.rs` (tests only): the cards and assertions the tests share.
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

use std::collections::BTreeMap;

use serde_json::{Map, Value};

mod chart;
mod limits;
mod problem;
mod props;
mod render;
mod schema;
mod secrets;
mod structure;
#[cfg(test)]
mod test_cards;
mod vocabulary;

pub use limits::{
    MAX_ALT, MAX_BLOCKS, MAX_BUTTON_TEXT, MAX_BUTTONS_PER_ROW, MAX_CHART_TITLE, MAX_CHARTS,
    MAX_FALLBACK, MAX_FIELD_TEXT, MAX_FIELDS, MAX_HEADER, MAX_LABEL, MAX_POINTS,
    MAX_PROBLEMS_PER_FIELD, MAX_SERIES, MAX_TABLE_COLUMNS, MAX_TABLE_ROWS, MAX_TABLES, MAX_TEXT,
    MAX_URL,
};
pub use problem::Problem;
use problem::{SPEC, finish, type_name};
use props::parse_element;
pub use render::RenderedCard;
pub(crate) use render::escape_mrkdwn;
use render::render;
pub use schema::{DESCRIPTION, input_schema};
use secrets::scan_secrets;
use structure::{check_counts, check_structure, document_order};
use vocabulary::{Element, Node};

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

#[cfg(test)]
mod tests {
    use serde_json::json;

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
}
