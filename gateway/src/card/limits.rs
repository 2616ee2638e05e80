//! The card's limits, each a named constant: Slack's own (blocks in a
//! message, characters of a text object, rows of a table) and the
//! vocabulary's (charts, series, points). Texts are measured in characters
//! ([`chars`]), not bytes. The tests send each limit and one more.

/// Slack blocks in one message.
pub const MAX_BLOCKS: usize = 50;
/// Tables per card (Slack allows one table per message).
pub const MAX_TABLES: usize = 1;
/// Rows of Slack's table block, the header row included.
pub const MAX_TABLE_ROWS: usize = 100;
/// Columns of a table.
pub const MAX_TABLE_COLUMNS: usize = 20;
/// Charts per card.
pub const MAX_CHARTS: usize = 2;
/// Characters of a chart title.
pub const MAX_CHART_TITLE: usize = 50;
/// Series per chart.
pub const MAX_SERIES: usize = 12;
/// Points per series.
pub const MAX_POINTS: usize = 20;
/// Characters of a series name or a point label.
pub const MAX_LABEL: usize = 20;
/// Fields in the whole card (Slack: 10 per section).
pub const MAX_FIELDS: usize = 10;
/// Characters of a header block (card title, Heading).
pub const MAX_HEADER: usize = 150;
/// Characters of a section's text (Text, chart summaries).
pub const MAX_TEXT: usize = 3000;
/// Characters of one section field (`*label*\nvalue`).
pub const MAX_FIELD_TEXT: usize = 2000;
/// Characters of a button's text.
pub const MAX_BUTTON_TEXT: usize = 75;
/// Buttons in one actions block.
pub const MAX_BUTTONS_PER_ROW: usize = 25;
/// Characters of a button or image URL.
pub const MAX_URL: usize = 3000;
/// Characters of an image's alt text.
pub const MAX_ALT: usize = 2000;
/// Characters of the notification fallback text.
pub const MAX_FALLBACK: usize = 3000;
/// Problems listed per element and field; the rest are counted.
pub const MAX_PROBLEMS_PER_FIELD: usize = 20;

/// The length of `text` as the limits count it: characters, not bytes.
pub(super) fn chars(text: &str) -> usize {
    text.chars().count()
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use crate::card::RenderedCard;
    use crate::card::test_cards::*;

    #[test]
    fn table_rows_at_the_limit_and_one_past() {
        let full = render_ok(&card(&["t"], json!({"t": table(2, 100)})));
        // Slack's 100 table rows include the header: it moves above.
        let rows_of = |card: &RenderedCard| {
            let blocks = card.blocks.as_array().unwrap();
            let t = blocks.iter().find(|b| b["type"] == "table").unwrap();
            t["rows"].as_array().unwrap().len()
        };
        assert_eq!(rows_of(&full), 100);
        assert_eq!(full.blocks[1]["text"]["text"], "*c0* | *c1*");
        let small = render_ok(&card(&["t"], json!({"t": table(2, 99)})));
        assert_eq!(rows_of(&small), 100);
        assert_eq!(
            problems(&card(&["t"], json!({"t": table(2, 101)}))),
            [r#"element "t" field "rows": 101 rows, at most 100"#]
        );
    }

    #[test]
    fn table_columns_at_the_limit_and_one_past() {
        render_ok(&card(&["t"], json!({"t": table(20, 3)})));
        assert_eq!(
            problems(&card(&["t"], json!({"t": table(21, 3)}))),
            [r#"element "t" field "columns": 21 columns, at most 20"#]
        );
    }

    #[test]
    fn charts_at_the_limit_and_one_past() {
        let elements = |n: usize| {
            let mut map = Map::new();
            for (id, kind) in [("a", "bar"), ("b", "line"), ("c", "area")]
                .into_iter()
                .take(n)
            {
                map.insert(id.to_owned(), series_chart(kind, id, 1, 3));
            }
            Value::Object(map)
        };
        render_ok(&card(&["a", "b"], elements(2)));
        assert_eq!(
            problems(&card(&["a", "b", "c"], elements(3))),
            [r#"element "c" field "type": 3 charts in the card, at most 2"#]
        );
    }

    #[test]
    fn chart_title_at_the_limit_and_one_past() {
        render_ok(&card(
            &["c"],
            json!({"c": series_chart("bar", &"t".repeat(50), 1, 2)}),
        ));
        assert_eq!(
            problems(&card(
                &["c"],
                json!({"c": series_chart("bar", &"t".repeat(51), 1, 2)})
            )),
            [r#"element "c" field "title": 51 characters, at most 50"#]
        );
    }

    #[test]
    fn series_at_the_limit_and_one_past() {
        let card12 = render_ok(&card(
            &["c"],
            json!({"c": series_chart("line", "L", 12, 2)}),
        ));
        assert_eq!(
            card12.blocks[1]["chart"]["series"].as_array().map(Vec::len),
            Some(12)
        );
        assert_eq!(
            problems(&card(
                &["c"],
                json!({"c": series_chart("line", "L", 13, 2)})
            )),
            [r#"element "c" field "series": 13 series, at most 12"#]
        );
    }

    #[test]
    fn empty_series_points_and_columns_are_named() {
        let chart = |series: Value| json!({"c": {"type": "Chart", "props": {"kind": "bar", "title": "T", "series": series}}});
        assert_eq!(
            problems(&card(&["c"], chart(json!([])))),
            [r#"element "c" field "series": no series; a chart has 1 to 12"#]
        );
        assert_eq!(
            problems(&card(&["c"], chart(json!([{"name": "s", "points": []}])))),
            [r#"element "c" field "series": series 1: no points; a series has 1 to 20"#]
        );
        let table = json!({"t": {"type": "Table", "props": {"columns": [], "rows": []}}});
        assert_eq!(
            problems(&card(&["t"], table)),
            [r#"element "t" field "columns": no columns; a table has 1 to 20"#]
        );
    }

    #[test]
    fn points_at_the_limit_and_one_past() {
        render_ok(&card(
            &["c"],
            json!({"c": series_chart("area", "A", 2, 20)}),
        ));
        let got = problems(&card(
            &["c"],
            json!({"c": series_chart("area", "A", 1, 21)}),
        ));
        assert_eq!(
            got,
            [r#"element "c" field "series": series 1: 21 points, at most 20"#]
        );
    }

    #[test]
    fn labels_at_the_limit_and_one_past() {
        let chart = |name: &str, label: &str| {
            json!({"c": {"type": "Chart", "props": {"kind": "bar", "title": "T", "series": [
                {"name": name, "points": [{"label": label, "value": 1}]}
            ]}}})
        };
        let twenty = "n".repeat(20);
        let twenty_one = "n".repeat(21);
        render_ok(&card(&["c"], chart(&twenty, &twenty)));
        assert_eq!(
            problems(&card(&["c"], chart(&twenty_one, &twenty_one))),
            [
                format!(
                    r#"element "c" field "series": series 1: name "{twenty_one}" has 21 characters, at most 20"#
                ),
                format!(
                    r#"element "c" field "series": series 1 point 1: label "{twenty_one}" has 21 characters, at most 20"#
                ),
            ]
        );
        // Characters, not bytes.
        render_ok(&card(&["c"], chart(&"é".repeat(20), "ü")));
    }

    #[test]
    fn fields_at_the_limit_and_one_past() {
        let with_fields = |n: usize| {
            let mut elements = Map::new();
            let ids: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
            // Two Fields elements: the limit is for the whole card.
            let (first, second) = ids.split_at(n / 2);
            elements.insert("fs1".into(), json!({"type": "Fields", "children": first}));
            elements.insert("fs2".into(), json!({"type": "Fields", "children": second}));
            for id in &ids {
                elements.insert(
                    id.clone(),
                    json!({"type": "Field", "props": {"label": id, "value": "v"}}),
                );
            }
            card(&["fs1", "fs2"], Value::Object(elements))
        };
        let ten = render_ok(&with_fields(10));
        assert_eq!(ten.blocks[1]["fields"].as_array().map(Vec::len), Some(5));
        assert_eq!(
            problems(&with_fields(11)),
            [r#"element "fs2" field "children": 11 fields in the card, at most 10"#]
        );
    }

    #[test]
    fn blocks_at_the_limit_and_one_past() {
        let with_dividers = |n: usize| {
            let ids: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
            let mut elements = Map::new();
            for id in &ids {
                elements.insert(id.clone(), json!({"type": "Divider"}));
            }
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            card(&refs, Value::Object(elements))
        };
        // The title is one block.
        assert_eq!(render_ok(&with_dividers(49)).block_count, 50);
        assert_eq!(
            problems(&with_dividers(50)),
            [r#"element "card" field "children": the card renders to 51 Slack blocks, at most 50"#]
        );
    }

    #[test]
    fn long_texts_are_limited() {
        let ok = card(
            &["h", "x"],
            json!({
                "h": {"type": "Heading", "props": {"text": "h".repeat(150)}},
                "x": {"type": "Text", "props": {"text": "x".repeat(3000)}}
            }),
        );
        render_ok(&ok);
        let got = problems(&card(
            &["h", "x", "fs", "b"],
            json!({
                "h": {"type": "Heading", "props": {"text": "h".repeat(151)}},
                "x": {"type": "Text", "props": {"text": "  "}},
                "fs": {"type": "Fields", "children": ["f"]},
                "f": {"type": "Field", "props": {"label": "L", "value": "v".repeat(1997)}},
                "b": {"type": "Button", "props": {"text": "b".repeat(76), "url": "https://e.example"}}
            }),
        ));
        assert_eq!(
            got,
            [
                r#"element "h" field "text": 151 characters, at most 150"#,
                r#"element "x" field "text": empty; expected a mrkdwn string"#,
                r#"element "f" field "value": label and value render to 2001 characters (*label*, a line break, value), at most 2000"#,
                r#"element "b" field "text": 76 characters, at most 75"#,
            ]
        );
    }
}
