//! What a model reads about post_card: the tool's [`DESCRIPTION`] (the
//! vocabulary, its limits and an example) and its arguments'
//! [`input_schema`], deliberately loose so that the checks report every
//! problem at once.

use serde_json::{Map, Value, json};

macro_rules! example_spec {
    () => {
        r#"{"spec": {"root": "card", "elements": {
  "card": {"type": "Card", "props": {"title": "Nightly build"}, "children": ["facts", "t", "c", "log"]},
  "facts": {"type": "Fields", "children": ["f1", "f2"]},
  "f1": {"type": "Field", "props": {"label": "Status", "value": "passed"}},
  "f2": {"type": "Field", "props": {"label": "Duration", "value": "12 min"}},
  "t": {"type": "Table", "props": {"columns": ["Suite", "Tests", "Failed"], "rows": [["unit", 412, 0], ["integration", 57, 0]]}},
  "c": {"type": "Chart", "props": {"kind": "bar", "title": "Duration (min)", "series": [{"name": "This week", "points": [{"label": "Mon", "value": 12}, {"label": "Tue", "value": 11}]}]}},
  "log": {"type": "Button", "props": {"text": "Open the log", "url": "https://ci.example.com/runs/123"}}
}}}"#
    };
}

/// The post_card tool's description, as a model reads it.
pub const DESCRIPTION: &str = concat!(
    "Posts a card into this session's Slack thread: key facts, a table, charts and link buttons, \
rendered as Slack blocks. An invalid spec is refused with the list of all its problems (each \
naming the element id and the field); fix them all and call again. Limit: 50 cards per runner.\n\
\n\
spec = {\"root\": \"<id>\", \"elements\": {\"<id>\": {\"type\": \"<Type>\", \"props\": {...}, \
\"children\": [\"<id>\", ...]}}}. The root is a Card. Every other element appears exactly once, \
in the children of the Card (a Field: of a Fields); no element may contain itself, and every \
element must be reachable from the root.\n\
\n\
Element types (props with ? are optional):\n\
- Card {title?}: the root; title (plain text, up to 150 characters) is shown as a header. \
Children: any types below except Field, shown in order.\n\
- Heading {text}: a header line, plain text up to 150 characters.\n\
- Text {text}: Slack mrkdwn (*bold*, _italic_, `code`, <https://example.com|link>), up to 3000 \
characters.\n\
- Fields: key facts shown in two columns; children: Field elements only.\n\
- Field {label, value}: label is plain text, value is mrkdwn (a string or a number); at most 10 \
Fields in the whole card; label and value together up to 2000 characters.\n\
- Table {columns, rows}: columns is an array of 1 to 20 strings (the header row); rows is an \
array of rows, each an array of strings or numbers with one cell per column. One table per card; \
at most 100 rows.\n\
- Chart {kind, title, series}: kind is bar, line, area or pie; title up to 50 characters; series \
is an array of 1 to 12 {name, points}, points an array of 1 to 20 {label, value} with a numeric \
value; series names and point labels up to 20 characters. For bar, line and area, series names \
are unique and every series has one point for each label of the first series (the x axis). A \
pie takes exactly one series, its values above 0. At most 2 charts per card; each is shown as a \
native Slack chart with a text summary below it.\n\
- Button {text, url}: a link button; url is http:// or https://, text up to 75 characters. \
Buttons are links only: no action_id, value or any other prop. Consecutive buttons share a row.\n\
- Divider: a horizontal rule; no props.\n\
- Image {url, alt}: url http:// or https://; alt (required) up to 2000 characters.\n\
\n\
state: cards are static (no inputs, no interactive state), so state must be absent or {}.\n\
At most 50 Slack blocks once rendered: the title, each Heading, Text, Fields, Table, Divider and \
Image is one block, a Chart two (chart and summary), a run of consecutive Buttons one.\n\
A card containing the value of one of the session's secrets is refused.\n\
\n\
Example:\n",
    example_spec!()
);

/// The JSON Schema of the tool's arguments, `{spec: {...}}`. Deliberately
/// loose (no enums, no `additionalProperties: false`, nothing required
/// inside `spec`) so that [`validate_and_render`](super::validate_and_render) reports the problems, all
/// of them at once.
pub fn input_schema() -> Map<String, Value> {
    let element = json!({
        "type": "object",
        "description": "An element: {type, props, children}.",
        "properties": {
            "type": {
                "type": "string",
                "description": "One of Card (the root only), Heading, Text, Fields, Field (in a Fields only), Table, Chart, Button, Divider, Image."
            },
            "props": {
                "type": "object",
                "description": "The type's props: Card {title?}; Heading {text}; Text {text} (mrkdwn); Fields {}; Field {label, value}; Table {columns, rows}; Chart {kind, title, series}; Button {text, url}; Divider {}; Image {url, alt}. No other props (buttons are links only).",
                "properties": {
                    "title": {"description": "Card: header, up to 150 characters. Chart: up to 50 characters."},
                    "text": {"description": "Heading: plain text up to 150 characters. Text: mrkdwn up to 3000 characters. Button: up to 75 characters."},
                    "label": {"description": "Field: plain text label."},
                    "value": {"description": "Field: mrkdwn value, a string or a number."},
                    "columns": {"description": "Table: 1 to 20 column names (strings), the header row."},
                    "rows": {"description": "Table: at most 100 rows, each an array of strings or numbers, one per column."},
                    "kind": {"description": "Chart: bar, line, area or pie."},
                    "series": {"description": "Chart: 1 to 12 {name, points: [{label, value}]}, 1 to 20 points each; names and labels up to 20 characters; values are numbers. Bar, line and area: unique names, every series with the first series' labels. Pie: exactly one series, values above 0."},
                    "url": {"description": "Button, Image: an http:// or https:// URL."},
                    "alt": {"description": "Image: alt text, up to 2000 characters."}
                }
            },
            "children": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Ids of child elements, in order. Only Card and Fields take children; every element appears exactly once."
            }
        }
    });
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "description": "The card: {root, elements, state?}. See the tool description for the vocabulary and the limits.",
                "properties": {
                    "root": {"type": "string", "description": "Id of the root element, a Card."},
                    "elements": {
                        "type": "object",
                        "description": "Element id to element.",
                        "additionalProperties": element
                    },
                    "state": {
                        "type": "object",
                        "description": "Absent or {}: cards are static, with no interactive state."
                    }
                }
            }
        },
        "required": ["spec"]
    });
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::test_cards::*;
    use crate::card::vocabulary::{KINDS, Kind};

    #[test]
    fn the_description_example_is_valid() {
        let args: Value = serde_json::from_str(example_spec!()).expect("example JSON");
        let card = render_ok(&args["spec"]);
        assert_eq!(
            block_types(&card.blocks),
            [
                "header",
                "section",
                "table",
                "data_visualization",
                "section",
                "actions"
            ]
        );
        for name in KINDS.map(Kind::name) {
            assert!(DESCRIPTION.contains(name), "{name}");
        }
    }

    #[test]
    fn the_input_schema_is_a_loose_object_schema() {
        let schema = input_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["spec"]));
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["type"], "object");
        assert!(spec.get("required").is_none());
        assert!(spec.get("additionalProperties").is_none());
        assert_eq!(
            spec["properties"]["elements"]["additionalProperties"]["properties"]["children"]["items"]
                ["type"],
            "string"
        );
    }
}
