//! Rendering a card to Slack Block Kit JSON ([`RenderedCard`]): the blocks
//! with charts as native `data_visualization` blocks, the same blocks with
//! the charts' text summaries only, and the notification text. The shapes
//! are listed in the module documentation of `card`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Number, Value, json};

use super::limits::{
    MAX_BUTTONS_PER_ROW, MAX_FALLBACK, MAX_FIELDS, MAX_TABLE_ROWS, MAX_TEXT, chars,
};
use super::vocabulary::{Chart, ChartKind, Element, Node};

/// A valid card, rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedCard {
    /// The Block Kit blocks (a JSON array), charts as native
    /// `data_visualization` blocks each followed by its text summary.
    pub blocks: Value,
    /// The same blocks with every chart in its text form only, for when
    /// Slack answers `invalid_blocks` to [`RenderedCard::blocks`].
    pub text_blocks: Value,
    /// Plain text for notifications (chat.postMessage's `text`), at most
    /// [`MAX_FALLBACK`] characters.
    pub fallback_text: String,
    /// How many blocks `blocks` holds.
    pub block_count: usize,
}

impl RenderedCard {
    /// Whether the card has a chart, that is whether `text_blocks` differs
    /// from `blocks`.
    pub fn has_charts(&self) -> bool {
        self.blocks != self.text_blocks
    }
}

/// Escapes text for a mrkdwn context (Slack's three control characters).
/// Text as Slack mrkdwn shows it literally (`&`, `<`, `>` escaped).
pub(crate) fn escape_mrkdwn(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn truncate(text: &str, max: usize) -> String {
    if chars(text) <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub(super) fn field_text(label: &str, value: &str) -> String {
    format!("*{}*\n{value}", escape_mrkdwn(label.trim()))
}

fn header_block(text: &str) -> Value {
    json!({"type": "header", "text": {"type": "plain_text", "text": text}})
}

fn mrkdwn_section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

fn table_block(columns: &[String], rows: &[Vec<String>]) -> Value {
    let row = |cells: &[String]| -> Value {
        cells
            .iter()
            .map(|cell| json!({"type": "raw_text", "text": cell}))
            .collect()
    };
    let mut all: Vec<Value> = Vec::with_capacity(rows.len() + 1);
    if !columns.is_empty() {
        all.push(row(columns));
    }
    all.extend(rows.iter().map(|cells| row(cells)));
    json!({"type": "table", "rows": all})
}

fn chart_block(chart: &Chart) -> Value {
    let body = match chart.kind {
        ChartKind::Pie => {
            let segments: Vec<Value> = chart
                .series
                .iter()
                .flat_map(|s| &s.points)
                .map(|(label, value)| json!({"label": label, "value": value}))
                .collect();
            json!({"type": "pie", "segments": segments})
        }
        kind => {
            let categories: Vec<&str> = chart
                .series
                .first()
                .map(|s| s.points.iter().map(|(l, _)| l.as_str()).collect())
                .unwrap_or_default();
            let series: Vec<Value> = chart
                .series
                .iter()
                .map(|s| {
                    // In the order of the categories when the series has
                    // every one of them (it does once valid).
                    let by_label: HashMap<&str, &Number> =
                        s.points.iter().map(|(l, v)| (l.as_str(), v)).collect();
                    let data: Vec<Value> = if categories.iter().all(|c| by_label.contains_key(c)) {
                        categories
                            .iter()
                            .map(|c| json!({"label": c, "value": by_label[c]}))
                            .collect()
                    } else {
                        s.points
                            .iter()
                            .map(|(l, v)| json!({"label": l, "value": v}))
                            .collect()
                    };
                    json!({"name": s.name, "data": data})
                })
                .collect();
            json!({
                "type": kind.name(),
                "series": series,
                "axis_config": {"categories": categories}
            })
        }
    };
    json!({"type": "data_visualization", "title": chart.title, "chart": body})
}

/// `title — series: label value, ...; series: ...`, mrkdwn or plain.
fn chart_summary(chart: &Chart, mrkdwn: bool) -> String {
    let esc = |text: &str| {
        if mrkdwn {
            escape_mrkdwn(text)
        } else {
            text.to_owned()
        }
    };
    let series: Vec<String> = chart
        .series
        .iter()
        .map(|s| {
            let points: Vec<String> = s
                .points
                .iter()
                .map(|(label, value)| format!("{} {value}", esc(label)))
                .collect();
            format!("{}: {}", esc(&s.name), points.join(", "))
        })
        .collect();
    let title = if mrkdwn {
        format!("*{}*", esc(chart.title.trim()))
    } else {
        chart.title.clone()
    };
    truncate(&format!("{title} — {}", series.join("; ")), MAX_TEXT)
}

#[derive(Default)]
struct Renderer {
    blocks: Vec<Value>,
    text_blocks: Vec<Value>,
    buttons: Vec<Value>,
    lines: Vec<String>,
}

impl Renderer {
    fn both(&mut self, block: Value) {
        self.flush_buttons();
        self.blocks.push(block.clone());
        self.text_blocks.push(block);
    }

    fn flush_buttons(&mut self) {
        let buttons = std::mem::take(&mut self.buttons);
        for row in buttons.chunks(MAX_BUTTONS_PER_ROW) {
            let block = json!({"type": "actions", "elements": row});
            self.blocks.push(block.clone());
            self.text_blocks.push(block);
        }
    }
}

pub(super) fn render(
    title: Option<&str>,
    children: &[String],
    elements: &BTreeMap<&str, Element>,
) -> RenderedCard {
    let mut r = Renderer::default();
    if let Some(title) = title {
        r.both(header_block(title));
        r.lines.push(title.to_owned());
    }
    for child in children {
        let Some(node) = elements.get(child.as_str()).and_then(|e| e.node.as_ref()) else {
            continue;
        };
        match node {
            Node::Heading { text } => {
                r.both(header_block(text));
                r.lines.push(text.clone());
            }
            Node::Text { text } => {
                r.both(mrkdwn_section(text));
                r.lines.push(text.clone());
            }
            Node::Fields => {
                let fields: Vec<(&str, &str)> = elements
                    .get(child.as_str())
                    .map(|e| e.children.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|id| match elements.get(id.as_str())?.node.as_ref()? {
                        Node::Field { label, value } => Some((label.as_str(), value.as_str())),
                        _ => None,
                    })
                    .collect();
                for chunk in fields.chunks(MAX_FIELDS) {
                    let texts: Vec<Value> = chunk
                        .iter()
                        .map(|(label, value)| {
                            json!({"type": "mrkdwn", "text": field_text(label, value)})
                        })
                        .collect();
                    r.both(json!({"type": "section", "fields": texts}));
                }
                r.lines.extend(
                    fields
                        .iter()
                        .map(|(label, value)| format!("{}: {value}", label.trim())),
                );
            }
            Node::Table { columns, rows } => {
                if rows.len() + 1 > MAX_TABLE_ROWS {
                    // Slack's table block counts the header among its 100
                    // rows: a full table's header goes in a line above it.
                    let header: Vec<String> = columns
                        .iter()
                        .map(|c| format!("*{}*", escape_mrkdwn(c)))
                        .collect();
                    r.both(mrkdwn_section(&header.join(" | ")));
                    r.both(table_block(&[], rows));
                } else {
                    r.both(table_block(columns, rows));
                }
                r.lines.push(format!(
                    "Table ({} rows): {}",
                    rows.len(),
                    columns.join(" | ")
                ));
            }
            Node::Chart(chart) => {
                r.flush_buttons();
                r.blocks.push(chart_block(chart));
                r.both(mrkdwn_section(&chart_summary(chart, true)));
                r.lines.push(chart_summary(chart, false));
            }
            Node::Button { text, url } => {
                r.buttons.push(json!({
                    "type": "button",
                    "text": {"type": "plain_text", "text": text},
                    "url": url
                }));
                r.lines.push(format!("{text}: {url}"));
            }
            Node::Divider => r.both(json!({"type": "divider"})),
            Node::Image { url, alt } => {
                r.both(json!({"type": "image", "image_url": url, "alt_text": alt}));
                r.lines.push(format!("Image: {alt}"));
            }
            Node::Card { .. } | Node::Field { .. } => {}
        }
    }
    r.flush_buttons();
    let mut fallback_text = truncate(&r.lines.join("\n"), MAX_FALLBACK);
    if fallback_text.trim().is_empty() {
        fallback_text = "Card".to_owned();
    }
    RenderedCard {
        block_count: r.blocks.len(),
        blocks: Value::Array(r.blocks),
        text_blocks: Value::Array(r.text_blocks),
        fallback_text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Number, Value, json};
    use slack_morphism::prelude::*;

    use super::*;
    use crate::card::test_cards::*;
    use crate::card::vocabulary::Series;

    #[test]
    fn valid_card_renders_every_element_type_in_order() {
        let card = render_ok(&full_card());
        assert_eq!(
            block_types(&card.blocks),
            [
                "header",
                "header",
                "section",
                "section",
                "table",
                "data_visualization",
                "section",
                "data_visualization",
                "section",
                "actions",
                "divider",
                "image"
            ]
        );
        assert_eq!(card.block_count, 12);
        let blocks = card.blocks.as_array().expect("array");
        assert_eq!(
            blocks[0],
            json!({"type": "header", "text": {"type": "plain_text", "text": "Deploy <prod>"}})
        );
        assert_eq!(
            blocks[2],
            json!({"type": "section", "text": {"type": "mrkdwn",
                "text": "*All* green, see <https://x.example|logs>"}})
        );
        assert_eq!(
            blocks[3],
            json!({"type": "section", "fields": [
                {"type": "mrkdwn", "text": "*Status*\npassed"},
                {"type": "mrkdwn", "text": "*A&amp;B*\n42"}
            ]})
        );
        assert_eq!(
            blocks[4],
            json!({"type": "table", "rows": [
                [{"type": "raw_text", "text": "Suite"}, {"type": "raw_text", "text": "Tests"}],
                [{"type": "raw_text", "text": "unit"}, {"type": "raw_text", "text": "412"}],
                [{"type": "raw_text", "text": "e2e"}, {"type": "raw_text", "text": "57"}]
            ]})
        );
        assert_eq!(
            blocks[5],
            json!({"type": "data_visualization", "title": "Duration", "chart": {
                "type": "bar",
                "series": [
                    {"name": "this", "data": [{"label": "Mon", "value": 12}, {"label": "Tue", "value": 11.5}]},
                    {"name": "last", "data": [{"label": "Mon", "value": 10}, {"label": "Tue", "value": 9}]}
                ],
                "axis_config": {"categories": ["Mon", "Tue"]}
            }})
        );
        assert_eq!(
            blocks[6],
            json!({"type": "section", "text": {"type": "mrkdwn",
                "text": "*Duration* — this: Mon 12, Tue 11.5; last: Tue 9, Mon 10"}})
        );
        assert_eq!(
            blocks[7],
            json!({"type": "data_visualization", "title": "Share", "chart": {
                "type": "pie",
                "segments": [{"label": "unit", "value": 412}, {"label": "e2e", "value": 57}]
            }})
        );
        assert_eq!(
            blocks[9],
            json!({"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Log"}, "url": "https://ci.example.com/1"},
                {"type": "button", "text": {"type": "plain_text", "text": "Diff"}, "url": "http://ci.example.com/2"}
            ]})
        );
        assert_eq!(blocks[10], json!({"type": "divider"}));
        assert_eq!(
            blocks[11],
            json!({"type": "image", "image_url": "https://ci.example.com/a.png", "alt_text": "graph"})
        );

        // The text form: the same without the chart blocks.
        assert!(card.has_charts());
        assert_eq!(
            block_types(&card.text_blocks),
            [
                "header", "header", "section", "section", "table", "section", "section", "actions",
                "divider", "image"
            ]
        );
        assert_eq!(card.text_blocks[5], blocks[6]);
        assert_eq!(card.text_blocks[6], blocks[8]);

        assert_eq!(
            card.fallback_text,
            "Deploy <prod>\nSummary\n*All* green, see <https://x.example|logs>\nStatus: passed\n\
             A&B: 42\nTable (2 rows): Suite | Tests\nDuration — this: Mon 12, Tue 11.5; last: \
             Tue 9, Mon 10\nShare — tests: unit 412, e2e 57\nLog: https://ci.example.com/1\n\
             Diff: http://ci.example.com/2\nImage: graph"
        );
    }

    #[test]
    fn rendered_blocks_deserialize_into_slack_morphism_types() {
        let card = render_ok(&full_card());
        for blocks in [&card.blocks, &card.text_blocks] {
            for block in blocks.as_array().expect("array") {
                let parsed: SlackBlock =
                    serde_json::from_value(block.clone()).expect("a SlackBlock");
                let matches = matches!(
                    (block["type"].as_str().expect("type"), &parsed),
                    ("header", SlackBlock::Header(_))
                        | ("section", SlackBlock::Section(_))
                        | ("table", SlackBlock::Table(_))
                        | ("data_visualization", SlackBlock::DataVisualization(_))
                        | ("actions", SlackBlock::Actions(_))
                        | ("divider", SlackBlock::Divider(_))
                        | ("image", SlackBlock::Image(_))
                );
                assert!(matches, "{block} parsed as {parsed:?}");
            }
        }
        let bar: SlackDataVisualizationBlock =
            serde_json::from_value(card.blocks[5].clone()).expect("chart");
        match bar.chart {
            SlackChart::Bar(chart) => {
                assert_eq!(chart.axis_config.categories, ["Mon", "Tue"]);
                assert_eq!(chart.series.len(), 2);
                assert_eq!(chart.series[1].data[1].label, "Tue");
            }
            other => panic!("expected a bar chart, got {other:?}"),
        }
        let pie: SlackDataVisualizationBlock =
            serde_json::from_value(card.blocks[7].clone()).expect("chart");
        assert!(matches!(pie.chart, SlackChart::Pie(ref p) if p.segments.len() == 2));
        let table: SlackTableBlock = serde_json::from_value(card.blocks[4].clone()).expect("table");
        assert_eq!(table.rows.len(), 3);
        assert!(matches!(&table.rows[0][0], SlackTableCell::RawText(c) if c.text == "Suite"));
    }

    #[test]
    fn a_card_without_charts_has_the_same_text_blocks() {
        let card = render_ok(&card(&["x"], json!({"x": {"type": "Divider"}})));
        assert!(!card.has_charts());
        assert_eq!(card.blocks, card.text_blocks);
        assert_eq!(card.fallback_text, "T");
    }

    #[test]
    fn buttons_share_actions_blocks_of_25() {
        let ids: Vec<String> = (0..27).map(|i| format!("b{i:02}")).collect();
        let mut elements = Map::new();
        for id in &ids {
            elements.insert(
                id.clone(),
                json!({"type": "Button", "props": {"text": id, "url": "https://e.example/"}}),
            );
        }
        elements.insert("d".into(), json!({"type": "Divider"}));
        let mut refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        refs.insert(1, "d");
        let card = render_ok(&card(&refs, Value::Object(elements)));
        assert_eq!(
            block_types(&card.blocks),
            ["header", "actions", "divider", "actions", "actions"]
        );
        assert_eq!(
            card.blocks[3]["elements"].as_array().map(Vec::len),
            Some(25)
        );
        assert_eq!(card.blocks[4]["elements"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn the_chart_summary_is_truncated_and_the_fallback_too() {
        let long: Vec<Value> = (0..40)
            .map(|i| json!({"type": "Text", "props": {"text": format!("{i} {}", "w".repeat(200))}}))
            .collect();
        let mut elements = Map::new();
        let ids: Vec<String> = (0..long.len()).map(|i| format!("x{i:02}")).collect();
        for (id, el) in ids.iter().zip(long) {
            elements.insert(id.clone(), el);
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let card = render_ok(&card(&refs, Value::Object(elements)));
        assert_eq!(card.fallback_text.chars().count(), MAX_FALLBACK);
        assert!(card.fallback_text.ends_with('…'));

        let chart = Chart {
            kind: ChartKind::Line,
            title: "t".into(),
            series: (0..12)
                .map(|s| Series {
                    name: format!("{s:020}"),
                    points: (0..20)
                        .map(|p| (format!("{p:020}"), Number::from(123_456_789)))
                        .collect(),
                })
                .collect(),
        };
        assert_eq!(chart_summary(&chart, true).chars().count(), MAX_TEXT);
    }
}
