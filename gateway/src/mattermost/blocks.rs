//! Block Kit blocks as a Mattermost message: Markdown for the text, and
//! message attachments (`props.attachments`) for the buttons, through
//! [`super::markup`]'s text translations ([`render_blocks`]).
//!
//! Mattermost's Markdown has no layout; message attachments, Slack's
//! older format, carry the buttons:
//!
//! | Block Kit | Mattermost |
//! |---|---|
//! | `header` | `#### text` |
//! | `section` text | its Markdown |
//! | `section` fields | a two-column table (empty header row) |
//! | `section` accessory | an image or a link under the text |
//! | `divider` | `---` |
//! | `context` | its elements on one line, joined by ` · ` (Markdown has no small type) |
//! | `image` | its title in bold, then `![alt](url)` |
//! | `table` (raw_text cells) | a table, the first row its header, `\|` escaped |
//! | `data_visualization` | its title in bold and a table of the points (one column per series) |
//! | `actions`, link buttons | `[text](url)` links on one line (an attachment's button cannot open a URL) |
//! | `actions`, a button with `action_id` | a message attachment's button posting to `{callback_url}/actions` with [`CallbackKey::button_context`] |
//!
//! Any other block, element or cell type is refused with
//! [`ChatError::InvalidBlocks`] naming it (post_card then posts its text
//! form). Blocks are separated by blank lines, so `---` never turns the
//! text above it into a heading.

use serde_json::{Value, json};

use super::markup::{Names, link_target, mentioned_users, mrkdwn_to_markdown, plain_to_markdown};
use super::sign::CallbackKey;
use crate::chat::ChatError;

/// The ids the mrkdwn texts of `blocks` mention.
pub fn block_mentions(blocks: &Value) -> Vec<String> {
    fn walk(v: &Value, ids: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if o.get("type").and_then(Value::as_str) == Some("mrkdwn")
                    && let Some(text) = o.get("text").and_then(Value::as_str)
                {
                    for id in mentioned_users(text) {
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                o.values().for_each(|v| walk(v, ids));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, ids)),
            _ => {}
        }
    }
    let mut ids = Vec::new();
    walk(blocks, &mut ids);
    ids
}

/// What posting blocks on Mattermost sends: the message's Markdown and
/// its attachments (`props.attachments`), for the buttons.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub message: String,
    pub attachments: Vec<Value>,
}

/// Where a button's click goes: `{callback_url}/actions`, its context
/// signed with `key`; no URL, no buttons.
pub struct Interactivity<'a> {
    pub callback_url: Option<&'a str>,
    pub key: &'a CallbackKey,
}

/// Why a post with buttons is refused without `[mattermost] callback_url`.
pub const NO_CALLBACK_URL: &str = "interactive buttons need [mattermost] callback_url in \
     gateway.toml: Mattermost posts a button's click to it";

fn invalid(why: String) -> ChatError {
    ChatError::InvalidBlocks(why)
}

/// A text object (`plain_text` or `mrkdwn`) as Markdown.
fn text_object(v: &Value, names: &Names, at: &str) -> Result<String, ChatError> {
    let text = v.get("text").and_then(Value::as_str);
    match (v.get("type").and_then(Value::as_str), text) {
        (Some("mrkdwn"), Some(text)) => Ok(mrkdwn_to_markdown(text, names)),
        (Some("plain_text"), Some(text)) => Ok(plain_to_markdown(text)),
        (Some(other), Some(_)) => Err(invalid(format!("{at}: a text object of type {other:?}"))),
        _ => Err(invalid(format!("{at}: a text object needs type and text"))),
    }
}

/// A plain_text object's text as it is (a button's label).
fn plain(v: &Value) -> Option<&str> {
    v.get("text").and_then(Value::as_str)
}

/// Markdown for one table cell: one line, `|` escaped.
fn cell(markdown: &str) -> String {
    markdown.replace(['\r', '\n'], " ").replace('|', "\\|")
}

/// A Markdown table: the header row, then the rows, padded to one width.
fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let width = rows
        .iter()
        .map(Vec::len)
        .chain([header.len()])
        .max()
        .unwrap_or(0)
        .max(1);
    let line = |cells: &[String]| {
        let mut padded: Vec<&str> = cells.iter().map(String::as_str).collect();
        padded.resize(width, " ");
        format!("| {} |", padded.join(" | "))
    };
    let mut lines = vec![line(header), format!("|{}", "---|".repeat(width))];
    lines.extend(rows.iter().map(|r| line(r)));
    lines.join("\n")
}

fn image_markdown(url: &str, alt: &str) -> String {
    format!("![{}]({})", plain_to_markdown(alt), link_target(url))
}

/// A button's id on a post: letters and digits only (Mattermost routes
/// clicks by `/actions/{action_id:[A-Za-z0-9]+}`), unique by `n`.
fn action_id(action_id: &str, n: usize) -> String {
    let mut id: String = action_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(20)
        .collect();
    if id.is_empty() {
        id.push_str("action");
    }
    format!("{id}{n}")
}

/// Block Kit `blocks` as a Markdown message and attachments (see the
/// module documentation); `fallback`, the message's mrkdwn text, is each
/// attachment's `fallback`.
pub fn render_blocks(
    blocks: &Value,
    fallback: &str,
    names: &Names,
    interactivity: &Interactivity<'_>,
) -> Result<Rendered, ChatError> {
    let list = blocks
        .as_array()
        .ok_or_else(|| invalid("blocks must be a JSON array".into()))?;
    let fallback = mrkdwn_to_markdown(fallback, names);
    let mut parts: Vec<String> = Vec::new();
    let mut attachments: Vec<Value> = Vec::new();
    let mut buttons = 0;
    for (i, block) in list.iter().enumerate() {
        let at = format!("blocks[{i}]");
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("{at} has no type")))?;
        match kind {
            "header" => {
                let text = text_object(&block["text"], names, &at)?;
                parts.push(format!("#### {}", text.replace(['\r', '\n'], " ")));
            }
            "section" => parts.extend(section(block, names, &at)?),
            "divider" => parts.push("---".into()),
            "context" => parts.push(context(block, names, &at)?),
            "image" => {
                let url = block
                    .get("image_url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(format!("{at}: an image block needs image_url")))?;
                let alt = block.get("alt_text").and_then(Value::as_str).unwrap_or("");
                let mut shown = String::new();
                if let Some(title) = block.get("title").and_then(plain) {
                    shown.push_str(&format!("**{}**\n", plain_to_markdown(title)));
                }
                shown.push_str(&image_markdown(url, alt));
                parts.push(shown);
            }
            "table" => parts.push(table_block(block, &at)?),
            "data_visualization" => parts.push(chart(block, &at)?),
            "actions" => {
                let mut links = Vec::new();
                let mut actions = Vec::new();
                let elements = block
                    .get("elements")
                    .and_then(Value::as_array)
                    .ok_or_else(|| invalid(format!("{at}: an actions block needs elements")))?;
                for (j, element) in elements.iter().enumerate() {
                    let at = format!("{at}.elements[{j}]");
                    let kind = element.get("type").and_then(Value::as_str).unwrap_or("");
                    if kind != "button" {
                        return Err(invalid(format!(
                            "{at}: Mattermost has no counterpart of a {kind:?} element"
                        )));
                    }
                    let label = element.get("text").and_then(plain).unwrap_or("");
                    if let Some(url) = element.get("url").and_then(Value::as_str) {
                        links.push(format!(
                            "[{}]({})",
                            plain_to_markdown(label),
                            link_target(url)
                        ));
                        continue;
                    }
                    let id = element
                        .get("action_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            invalid(format!("{at}: a button needs a url or an action_id"))
                        })?;
                    let callback_url = interactivity
                        .callback_url
                        .ok_or_else(|| ChatError::Api(NO_CALLBACK_URL.into()))?;
                    let value = element.get("value").and_then(Value::as_str).unwrap_or("");
                    let mut action = json!({
                        "id": action_id(id, buttons),
                        "name": label,
                        "type": "button",
                        "integration": {
                            "url": format!("{callback_url}/actions"),
                            "context": interactivity.key.button_context(id, value),
                        },
                    });
                    if let Some(style @ ("primary" | "danger")) =
                        element.get("style").and_then(Value::as_str)
                    {
                        action["style"] = json!(style);
                    }
                    buttons += 1;
                    actions.push(action);
                }
                if !links.is_empty() {
                    parts.push(links.join(" · "));
                }
                if !actions.is_empty() {
                    attachments.push(json!({"fallback": fallback, "actions": actions}));
                }
            }
            other => {
                return Err(invalid(format!(
                    "{at}: Mattermost has no counterpart of a {other:?} block"
                )));
            }
        }
    }
    let mut message = parts.join("\n\n");
    if message.is_empty() && attachments.is_empty() {
        message = fallback;
    }
    Ok(Rendered {
        message,
        attachments,
    })
}

fn section(block: &Value, names: &Names, at: &str) -> Result<Vec<String>, ChatError> {
    let mut parts = Vec::new();
    if let Some(text) = block.get("text") {
        parts.push(text_object(text, names, at)?);
    }
    if let Some(fields) = block.get("fields").and_then(Value::as_array) {
        let cells = fields
            .iter()
            .map(|f| text_object(f, names, at).map(|md| cell(&md)))
            .collect::<Result<Vec<_>, _>>()?;
        let rows: Vec<Vec<String>> = cells.chunks(2).map(<[String]>::to_vec).collect();
        parts.push(table(&[" ".into(), " ".into()], &rows));
    }
    if let Some(accessory) = block.get("accessory") {
        let kind = accessory.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind, accessory.get("image_url"), accessory.get("url")) {
            ("image", Some(Value::String(url)), _) => {
                let alt = accessory
                    .get("alt_text")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                parts.push(image_markdown(url, alt));
            }
            ("button", _, Some(Value::String(url))) => {
                let label = accessory.get("text").and_then(plain).unwrap_or(url);
                parts.push(format!(
                    "[{}]({})",
                    plain_to_markdown(label),
                    link_target(url)
                ));
            }
            _ => {
                return Err(invalid(format!(
                    "{at}.accessory: Mattermost has no counterpart of a {kind:?} accessory"
                )));
            }
        }
    }
    Ok(parts)
}

fn context(block: &Value, names: &Names, at: &str) -> Result<String, ChatError> {
    let elements = block
        .get("elements")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("{at}: a context block needs elements")))?;
    let shown = elements
        .iter()
        .map(|e| match e.get("type").and_then(Value::as_str) {
            Some("image") => Ok(image_markdown(
                e.get("image_url").and_then(Value::as_str).unwrap_or(""),
                e.get("alt_text").and_then(Value::as_str).unwrap_or(""),
            )),
            _ => text_object(e, names, at),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(shown.join(" · "))
}

fn table_block(block: &Value, at: &str) -> Result<String, ChatError> {
    let rows = block
        .get("rows")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("{at}: a table block needs rows")))?;
    let mut cells: Vec<Vec<String>> = Vec::with_capacity(rows.len());
    for (r, row) in rows.iter().enumerate() {
        let row = row
            .as_array()
            .ok_or_else(|| invalid(format!("{at}.rows[{r}] is not an array")))?;
        let mut line = Vec::with_capacity(row.len());
        for (c, v) in row.iter().enumerate() {
            match (v.get("type").and_then(Value::as_str), v.get("text")) {
                (Some("raw_text"), Some(Value::String(text))) => {
                    line.push(cell(&plain_to_markdown(text)));
                }
                (kind, _) => {
                    return Err(invalid(format!(
                        "{at}.rows[{r}][{c}]: Mattermost's translation has no table cell of \
                         type {:?}",
                        kind.unwrap_or("")
                    )));
                }
            }
        }
        cells.push(line);
    }
    let Some((header, rest)) = cells.split_first() else {
        return Ok(String::new());
    };
    Ok(table(header, rest))
}

fn chart(block: &Value, at: &str) -> Result<String, ChatError> {
    let chart = block
        .get("chart")
        .ok_or_else(|| invalid(format!("{at}: a data_visualization block needs a chart")))?;
    let title = block.get("title").and_then(Value::as_str).unwrap_or("");
    let number = |v: Option<&Value>| v.map(Value::to_string).unwrap_or_default();
    let label = |v: &Value| {
        cell(&plain_to_markdown(
            v.get("label").and_then(Value::as_str).unwrap_or(""),
        ))
    };
    let shown = if let Some(segments) = chart.get("segments").and_then(Value::as_array) {
        let rows: Vec<Vec<String>> = segments
            .iter()
            .map(|s| vec![label(s), number(s.get("value"))])
            .collect();
        table(&[" ".into(), "Value".into()], &rows)
    } else if let Some(series) = chart.get("series").and_then(Value::as_array) {
        let points = |s: &Value| -> Vec<Value> {
            s.get("data")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let mut categories: Vec<String> = chart
            .pointer("/axis_config/categories")
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if categories.is_empty() {
            categories = series
                .first()
                .map(|s| {
                    points(s)
                        .iter()
                        .filter_map(|p| p.get("label").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
        }
        let mut header = vec![" ".to_owned()];
        header.extend(series.iter().map(|s| {
            cell(&plain_to_markdown(
                s.get("name").and_then(Value::as_str).unwrap_or(""),
            ))
        }));
        let rows: Vec<Vec<String>> = categories
            .iter()
            .map(|category| {
                let mut row = vec![cell(&plain_to_markdown(category))];
                row.extend(series.iter().map(|s| {
                    let point = points(s)
                        .into_iter()
                        .find(|p| p.get("label").and_then(Value::as_str) == Some(category));
                    number(point.as_ref().and_then(|p| p.get("value")))
                }));
                row
            })
            .collect();
        table(&header, &rows)
    } else {
        let kind = chart.get("type").and_then(Value::as_str).unwrap_or("");
        return Err(invalid(format!(
            "{at}: a {kind:?} chart has neither segments nor series"
        )));
    };
    Ok(format!("**{}**\n\n{shown}", plain_to_markdown(title)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_line() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }

    fn render(blocks: Value, callback_url: Option<&str>) -> Result<Rendered, ChatError> {
        let key = CallbackKey::from_token("t");
        let names: Names = [("U1".to_owned(), "ann".to_owned())].into();
        render_blocks(
            &blocks,
            "fallback <@U1>",
            &names,
            &Interactivity {
                callback_url,
                key: &key,
            },
        )
    }

    #[test]
    fn each_block_renders() {
        let r = render(
            json!([
                {"type": "header", "text": {"type": "plain_text", "text": "Deploy <prod> *1*"}},
                {"type": "section", "text": {"type": "mrkdwn", "text": "*All* green <@U1>"}},
                {"type": "section", "fields": [
                    {"type": "mrkdwn", "text": "*Status*\npassed"},
                    {"type": "mrkdwn", "text": "*A&amp;B*\n4|2"},
                    {"type": "plain_text", "text": "odd"}
                ]},
                {"type": "divider"},
                {"type": "context", "elements": [
                    {"type": "mrkdwn", "text": "by <@U1>"},
                    {"type": "image", "image_url": "https://i.example/a.png", "alt_text": "icon"}
                ]},
                {"type": "image", "image_url": "https://i.example/g.png", "alt_text": "graph",
                 "title": {"type": "plain_text", "text": "Graph"}},
            ]),
            None,
        )
        .unwrap();
        assert!(r.attachments.is_empty());
        assert_eq!(
            r.message,
            "#### Deploy \\<prod\\> \\*1\\*\n\n\
             **All** green @ann\n\n\
             |   |   |\n|---|---|\n| **Status** passed | **A&B** 4\\|2 |\n| odd |   |\n\n\
             ---\n\n\
             by @ann · ![icon](https://i.example/a.png)\n\n\
             **Graph**\n![graph](https://i.example/g.png)"
        );
    }

    #[test]
    fn tables_and_charts_become_markdown_tables() {
        let r = render(
            json!([
                {"type": "table", "rows": [
                    [{"type": "raw_text", "text": "Suite"}, {"type": "raw_text", "text": "Tests"}],
                    [{"type": "raw_text", "text": "a|b"}, {"type": "raw_text", "text": "412"}],
                    [{"type": "raw_text", "text": "e2e"}]
                ]},
                {"type": "data_visualization", "title": "Duration", "chart": {
                    "type": "bar",
                    "series": [
                        {"name": "this", "data": [{"label": "Mon", "value": 12}, {"label": "Tue", "value": 11.5}]},
                        {"name": "last", "data": [{"label": "Tue", "value": 9}, {"label": "Mon", "value": 10}]}
                    ],
                    "axis_config": {"categories": ["Mon", "Tue"]}
                }},
                {"type": "data_visualization", "title": "Share", "chart": {
                    "type": "pie", "segments": [{"label": "unit", "value": 412}]
                }},
            ]),
            None,
        )
        .unwrap();
        assert_eq!(
            r.message,
            "| Suite | Tests |\n|---|---|\n| a\\|b | 412 |\n| e2e |   |\n\n\
             **Duration**\n\n|   | this | last |\n|---|---|---|\n| Mon | 12 | 10 |\n| Tue | 11.5 | 9 |\n\n\
             **Share**\n\n|   | Value |\n|---|---|\n| unit | 412 |"
        );
    }

    #[test]
    fn link_buttons_are_links_and_action_buttons_attachments() {
        let blocks = json!([
            {"type": "section", "text": {"type": "mrkdwn", "text": "Set it"}},
            {"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Log"}, "url": "https://ci.example/1"},
                {"type": "button", "text": {"type": "plain_text", "text": "Diff"}, "url": "https://ci.example/2"},
                {"type": "button", "action_id": "calvin_set_secret", "value": "abc",
                 "text": {"type": "plain_text", "text": "Set KEY"}, "style": "primary"}
            ]},
        ]);
        let r = render(blocks.clone(), Some("https://hooks.example/mm")).unwrap();
        assert_eq!(
            r.message,
            "Set it\n\n[Log](https://ci.example/1) · [Diff](https://ci.example/2)"
        );
        let key = CallbackKey::from_token("t");
        assert_eq!(
            r.attachments,
            [json!({
                "fallback": "fallback @ann",
                "actions": [{
                    "id": "calvinsetsecret0",
                    "name": "Set KEY",
                    "type": "button",
                    "style": "primary",
                    "integration": {
                        "url": "https://hooks.example/mm/actions",
                        "context": key.button_context("calvin_set_secret", "abc"),
                    },
                }],
            })]
        );
        let err = render(blocks, None).unwrap_err();
        assert_eq!(err, ChatError::Api(NO_CALLBACK_URL.into()));
    }

    #[test]
    fn unknown_blocks_and_elements_are_named() {
        for (blocks, needle) in [
            (
                json!([{"type": "rich_text", "elements": []}]),
                "\"rich_text\" block",
            ),
            (json!([{"type": "input"}]), "\"input\" block"),
            (
                json!([{"type": "actions", "elements": [{"type": "static_select"}]}]),
                "\"static_select\" element",
            ),
            (
                json!([{"type": "table", "rows": [[{"type": "rich_text"}]]}]),
                "cell of type \"rich_text\"",
            ),
            (json!({"type": "divider"}), "JSON array"),
            (json!([{"text": "x"}]), "has no type"),
        ] {
            match render(blocks, None) {
                Err(ChatError::InvalidBlocks(why)) => assert!(why.contains(needle), "{why}"),
                other => panic!("{needle}: {other:?}"),
            }
        }
    }

    #[test]
    fn no_blocks_show_the_fallback() {
        let r = render(json!([]), None).unwrap();
        assert_eq!(r.message, "fallback @ann");
        assert_eq!(
            block_mentions(
                &json!([{"type": "section", "text": {"type": "mrkdwn", "text": "<@U7> <@U8>"}}])
            ),
            ["U7", "U8"]
        );
    }
}
