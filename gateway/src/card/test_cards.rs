//! Cards for the unit tests of every file of the module, and the
//! assertions they share.

use serde_json::{Map, Value, json};

use super::{RenderedCard, validate_and_render};

pub(super) fn render_ok(spec: &Value) -> RenderedCard {
    match validate_and_render(spec, &[]) {
        Ok(card) => card,
        Err(problems) => panic!(
            "unexpected problems:\n{}",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

pub(super) fn problems(spec: &Value) -> Vec<String> {
    problems_with(spec, &[])
}

pub(super) fn problems_with(spec: &Value, secrets: &[String]) -> Vec<String> {
    match validate_and_render(spec, secrets) {
        Ok(card) => panic!("expected problems, got {}", card.blocks),
        Err(problems) => problems.iter().map(ToString::to_string).collect(),
    }
}

#[track_caller]
pub(super) fn assert_has(problems: &[String], expected: &str) {
    assert!(
        problems.iter().any(|p| p == expected),
        "missing problem\n  {expected}\nin\n  {}",
        problems.join("\n  ")
    );
}

/// A card whose root "card" has `children`, plus `elements`.
pub(super) fn card(children: &[&str], elements: Value) -> Value {
    let mut map = match elements {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    map.insert(
        "card".to_owned(),
        json!({"type": "Card", "props": {"title": "T"}, "children": children}),
    );
    json!({"root": "card", "elements": map})
}

pub(super) fn block_types(blocks: &Value) -> Vec<String> {
    blocks
        .as_array()
        .expect("array")
        .iter()
        .map(|b| b["type"].as_str().expect("type").to_owned())
        .collect()
}

pub(super) fn series_chart(kind: &str, title: &str, series: usize, points: usize) -> Value {
    let series: Vec<Value> = (0..series)
        .map(|s| {
            let points: Vec<Value> = (0..points)
                .map(|p| json!({"label": format!("p{p}"), "value": p + s}))
                .collect();
            json!({"name": format!("s{s}"), "points": points})
        })
        .collect();
    json!({"type": "Chart", "props": {"kind": kind, "title": title, "series": series}})
}

pub(super) fn table(columns: usize, rows: usize) -> Value {
    let cols: Vec<String> = (0..columns).map(|c| format!("c{c}")).collect();
    let rows: Vec<Vec<Value>> = (0..rows)
        .map(|r| (0..columns).map(|c| json!(r * 100 + c)).collect())
        .collect();
    json!({"type": "Table", "props": {"columns": cols, "rows": rows}})
}

pub(super) fn full_card() -> Value {
    json!({
        "root": "card",
        "state": {},
        "elements": {
            "card": {"type": "Card", "props": {"title": "Deploy <prod>"}, "children": [
                "h", "txt", "facts", "t", "bars", "pie", "b1", "b2", "d", "img"
            ]},
            "h": {"type": "Heading", "props": {"text": "Summary"}},
            "txt": {"type": "Text", "props": {"text": "*All* green, see <https://x.example|logs>"}},
            "facts": {"type": "Fields", "children": ["f1", "f2"]},
            "f1": {"type": "Field", "props": {"label": "Status", "value": "passed"}},
            "f2": {"type": "Field", "props": {"label": "A&B", "value": 42}},
            "t": {"type": "Table", "props": {
                "columns": ["Suite", "Tests"],
                "rows": [["unit", 412], ["e2e", "57"]]
            }},
            "bars": {"type": "Chart", "props": {"kind": "bar", "title": "Duration", "series": [
                {"name": "this", "points": [{"label": "Mon", "value": 12}, {"label": "Tue", "value": 11.5}]},
                {"name": "last", "points": [{"label": "Tue", "value": "9"}, {"label": "Mon", "value": 10}]}
            ]}},
            "pie": {"type": "Chart", "props": {"kind": "pie", "title": "Share", "series": [
                {"name": "tests", "points": [{"label": "unit", "value": 412}, {"label": "e2e", "value": 57}]}
            ]}},
            "b1": {"type": "Button", "props": {"text": "Log", "url": "https://ci.example.com/1"}},
            "b2": {"type": "Button", "props": {"text": "Diff", "url": "http://ci.example.com/2"}},
            "d": {"type": "Divider"},
            "img": {"type": "Image", "props": {"url": "https://ci.example.com/a.png", "alt": "graph"}}
        }
    })
}
