//! The trait's Slack-flavoured text in Mattermost's terms: Slack mrkdwn
//! as Mattermost Markdown ([`mrkdwn_to_markdown`]), plain text shown
//! literally ([`plain_to_markdown`]), and Block Kit blocks as a Markdown
//! message with message attachments for the buttons ([`render_blocks`]).
//!
//! mrkdwn (Slack's "Formatting text for app surfaces"):
//!
//! | mrkdwn | Markdown |
//! |---|---|
//! | `<@ID>`, `<@ID\|label>` | `@username` (the only mentions that notify) |
//! | `<!channel>`, `<!here>`, `<!everyone>`, `<!subteam^…\|@x>` | `@`+U+2060+word: shown, notifying nobody |
//! | `<!date^…\|fallback>` | the fallback |
//! | `<url\|label>` / `<url>` | `[label](url)` / the URL |
//! | `<#C…\|name>` | `#name` |
//! | `*bold*`, `~strike~`, `_italic_` | `**bold**`, `~~strike~~`, `_italic_` |
//! | `` `code` ``, ```` ```block``` ```` | the same, fences on their own lines |
//! | `&lt;` `&gt;` `&amp;` | the characters |
//!
//! Every other `@word` becomes `@`+U+2060 WORD JOINER+`word`, as
//! [`crate::threads::neutralise_mentions`] does on Slack: Mattermost
//! notifies `@username`, `@channel`, `@all` and `@here` typed as plain
//! text, and the trait's contract is that only `<@ID>` notifies. Markdown
//! that mrkdwn does not have is escaped (`\`, `[`, `]`, a lone `*`, a `#`
//! starting a line), so text reads as it would on Slack.
//!
//! Blocks (Mattermost's Markdown has no layout; message attachments,
//! Slack's older format, carry the buttons):
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

use std::collections::HashMap;

use serde_json::{Value, json};

use super::sign::CallbackKey;
use crate::chat::ChatError;

/// User ids to user names, for `<@ID>` mentions.
pub type Names = HashMap<String, String>;

/// Put after `@` so the word shows but notifies nobody.
pub const JOINER: char = '\u{2060}';

/// The placeholders' brackets (Unicode private use): a literal piece of
/// output stands in the text as `OPEN index CLOSE` while the rest is
/// rewritten. Input holding either is given U+FFFD instead.
const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

/// The ids `text` mentions as `<@ID>` or `<@ID|label>`, each once.
pub fn mentioned_users(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("<@") {
        let after = &rest[at + 2..];
        let Some(end) = after.find('>') else { break };
        let id = after[..end].split('|').next().unwrap_or_default();
        if !id.is_empty() && !ids.iter().any(|i| i == id) {
            ids.push(id.to_owned());
        }
        rest = &after[end + 1..];
    }
    ids
}

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

/// `&lt;`, `&gt;` and `&amp;` as the characters.
fn decode_entities(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Text shown literally in Markdown: Markdown's characters escaped (not
/// `|`: see [`cell`]), every `@word` inert.
pub fn plain_to_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' | '`' | '*' | '_' | '~' | '[' | ']' | '<' | '>' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '@' if !prev.is_some_and(is_word)
                && chars.peek().is_some_and(|n| n.is_alphanumeric()) =>
            {
                out.push('@');
                out.push(JOINER);
            }
            _ => out.push(c),
        }
        prev = Some(c);
    }
    out
}

/// A URL as it goes into a message: what would end a `(url)` escaped,
/// and an `@` that would start a word as `%40` (Mattermost's server
/// finds mentions in words split at `/`, `?`, `=`..., so
/// `https://x.example/@ann` would notify ann; an e-mail address's `@`
/// stays).
fn link_target(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut prev: Option<char> = None;
    for c in url.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '@' if !prev.is_some_and(|p| p.is_alphanumeric() || ":.-_@".contains(p)) => {
                out.push_str("%40");
            }
            _ => out.push(c),
        }
        prev = Some(c);
    }
    out
}

/// The length of the bare URL `text` starts with (`http://` or
/// `https://` to the next space or `<`, less the punctuation that ends a
/// sentence), if it starts with one.
fn bare_url(text: &str) -> Option<usize> {
    let head = text.get(..8)?.to_ascii_lowercase();
    if !head.starts_with("http://") && !head.starts_with("https://") {
        return None;
    }
    let end = text
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(text.len());
    let url = text[..end].trim_end_matches(|c: char| ".,;:!?)*_~'\"".contains(c));
    Some(url.len())
}

/// Pieces of output that the rewriting of the text leaves alone.
#[derive(Default)]
struct Literals(Vec<String>);

impl Literals {
    fn hold(&mut self, text: &mut String, literal: String) {
        text.push(OPEN);
        text.push_str(&self.0.len().to_string());
        text.push(CLOSE);
        self.0.push(literal);
    }

    fn restore(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(OPEN) {
            out.push_str(&rest[..at]);
            let after = &rest[at + OPEN.len_utf8()..];
            let Some(end) = after.find(CLOSE) else {
                rest = after;
                continue;
            };
            if let Some(piece) = after[..end]
                .parse::<usize>()
                .ok()
                .and_then(|i| self.0.get(i))
            {
                out.push_str(piece);
            }
            rest = &after[end + CLOSE.len_utf8()..];
        }
        out.push_str(rest);
        out
    }
}

/// What a `<...>` of mrkdwn shows: a literal, or text.
fn angle(inner: &str, names: &Names) -> Result<String, String> {
    let (target, label) = match inner.split_once('|') {
        Some((t, l)) => (t, Some(l)),
        None => (inner, None),
    };
    if let Some(id) = target.strip_prefix('@') {
        return Ok(match names.get(id) {
            Some(name) => format!("@{name}"),
            None => plain_to_markdown(&format!("@{}", label.unwrap_or(id))),
        });
    }
    if let Some(command) = target.strip_prefix('!') {
        let word = match command {
            "channel" | "here" | "everyone" | "group" => format!("@{command}"),
            c if c.starts_with("subteam^") => format!(
                "@{}",
                label.map(|l| l.trim_start_matches('@')).unwrap_or("group")
            ),
            c => label.unwrap_or(c).to_owned(),
        };
        let mut shown = plain_to_markdown(&decode_entities(&word));
        if let Some(rest) = shown.strip_prefix('@') {
            // A channel-wide word stays inert even when followed by no
            // letter (`@channel` is a mention whatever follows it).
            shown = format!("@{JOINER}{}", rest.trim_start_matches(JOINER));
        }
        return Ok(shown);
    }
    if let Some(channel) = target.strip_prefix('#') {
        return Ok(plain_to_markdown(&format!(
            "#{}",
            decode_entities(label.unwrap_or(channel))
        )));
    }
    let lower = target.to_ascii_lowercase();
    if ["http://", "https://", "mailto:", "ftp://"]
        .iter()
        .any(|s| lower.starts_with(s))
    {
        let url = decode_entities(target);
        return Ok(match label.filter(|l| !l.is_empty()) {
            Some(label) => format!(
                "[{}]({})",
                plain_to_markdown(&decode_entities(label)),
                link_target(&url)
            ),
            None => url,
        });
    }
    Err(format!("<{inner}>"))
}

/// Slack mrkdwn as Mattermost Markdown (see the module documentation);
/// `names` gives the user names of `<@ID>` mentions (an id it lacks is
/// shown inert).
pub fn mrkdwn_to_markdown(mrkdwn: &str, names: &Names) -> String {
    let input = mrkdwn.replace([OPEN, CLOSE], "\u{FFFD}");
    let mut literals = Literals::default();
    let mut text = String::with_capacity(input.len());
    let mut rest = input.as_str();
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("```")
            && let Some(end) = after.find("```")
        {
            let code = decode_entities(&after[..end]);
            let code = code.strip_prefix('\n').unwrap_or(&code);
            let code = code.strip_suffix('\n').unwrap_or(code);
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            literals.hold(&mut text, format!("```\n{code}\n```"));
            rest = &after[end + 3..];
            if !rest.is_empty() && !rest.starts_with('\n') {
                text.push('\n');
            }
            continue;
        }
        if c == '`'
            && let Some(end) = rest[1..].find(['`', '\n'])
            && rest.as_bytes()[1 + end] == b'`'
            && end > 0
        {
            let code = decode_entities(&rest[1..1 + end]);
            literals.hold(&mut text, format!("`{code}`"));
            rest = &rest[end + 2..];
            continue;
        }
        if c == '<'
            && let Some(end) = rest[1..].find(['>', '\n', '<'])
            && rest.as_bytes()[1 + end] == b'>'
        {
            match angle(&rest[1..1 + end], names) {
                Ok(literal) => literals.hold(&mut text, literal),
                Err(shown) => literals.hold(&mut text, plain_to_markdown(&shown)),
            }
            rest = &rest[end + 2..];
            continue;
        }
        if !text.chars().last().is_some_and(char::is_alphanumeric)
            && let Some(len) = bare_url(rest)
        {
            literals.hold(&mut text, link_target(&decode_entities(&rest[..len])));
            rest = &rest[len..];
            continue;
        }
        if let Some((entity, ch)) = [("&lt;", '<'), ("&gt;", '>'), ("&amp;", '&')]
            .into_iter()
            .find(|(e, _)| rest.starts_with(e))
        {
            text.push(ch);
            rest = &rest[entity.len()..];
            continue;
        }
        text.push(c);
        rest = &rest[c.len_utf8()..];
    }
    literals.restore(&rewrite(&text))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Plain,
    Open,
    Close,
}

/// The text between the literals: emphasis doubled, Markdown's own
/// syntax escaped, every `@word` inert.
fn rewrite(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut role = vec![Role::Plain; n];
    for i in 0..n {
        let c = chars[i];
        if !matches!(c, '*' | '~') || role[i] != Role::Plain {
            continue;
        }
        let opens = (i == 0 || !chars[i - 1].is_alphanumeric())
            && i + 1 < n
            && !chars[i + 1].is_whitespace()
            && chars[i + 1] != c;
        if !opens {
            continue;
        }
        let close = (i + 2..n).take_while(|&j| chars[j] != '\n').find(|&j| {
            chars[j] == c
                && !chars[j - 1].is_whitespace()
                && (j + 1 == n || !chars[j + 1].is_alphanumeric())
        });
        if let Some(j) = close {
            role[i] = Role::Open;
            role[j] = Role::Close;
        }
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_placeholder = false;
    for i in 0..n {
        let c = chars[i];
        let prev = (i > 0).then(|| chars[i - 1]);
        match c {
            OPEN => in_placeholder = true,
            CLOSE => in_placeholder = false,
            _ => {}
        }
        if in_placeholder || c == CLOSE {
            out.push(c);
            continue;
        }
        match (c, role[i]) {
            ('*' | '~', Role::Open | Role::Close) => {
                out.push(c);
                out.push(c);
            }
            ('*' | '\\' | '[' | ']' | '`', _) => {
                out.push('\\');
                out.push(c);
            }
            ('#', _) if prev.is_none_or(|p| p == '\n') => out.push_str("\\#"),
            ('@', _)
                if !prev.is_some_and(is_word)
                    && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric()) =>
            {
                out.push('@');
                out.push(JOINER);
            }
            _ => out.push(c),
        }
    }
    out
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

    fn md(text: &str) -> String {
        let names: Names = [("U1".to_owned(), "ann".to_owned())].into();
        mrkdwn_to_markdown(text, &names)
    }

    const J: char = JOINER;

    #[test]
    fn mentions_notify_only_when_written_as_ids() {
        assert_eq!(md("hi <@U1>"), "hi @ann");
        assert_eq!(md("hi <@U1|annie>!"), "hi @ann!");
        assert_eq!(md("<@U9>"), format!("@{J}U9"));
        assert_eq!(md("<@U9|bob>"), format!("@{J}bob"));
        for word in ["channel", "all", "here", "someone", "ann"] {
            assert_eq!(md(&format!("@{word} look")), format!("@{J}{word} look"));
            assert_eq!(md(&format!("(@{word})")), format!("(@{J}{word})"));
        }
        assert_eq!(
            md("<!channel> and <!here|here>"),
            format!("@{J}channel and @{J}here")
        );
        assert_eq!(md("<!everyone>"), format!("@{J}everyone"));
        assert_eq!(md("<!subteam^S1|@devs>"), format!("@{J}devs"));
        assert_eq!(md("<!date^1700000000^{date}|Nov 14>"), "Nov 14");
        // An e-mail address is not a mention; a lone @ stays.
        assert_eq!(
            md("mail bob@example.com @ noon"),
            "mail bob@example.com @ noon"
        );
        assert_eq!(mentioned_users("<@U1> <@U2|x> <@U1>"), ["U1", "U2"]);
    }

    #[test]
    fn links_and_entities() {
        assert_eq!(
            md("see <https://x.example/a?b=1&amp;c=2|the *log*>"),
            "see [the \\*log\\*](https://x.example/a?b=1&c=2)"
        );
        assert_eq!(md("<https://x.example/p_q>"), "https://x.example/p_q");
        assert_eq!(
            md("bare https://x.example/a_*b*/@ann?q=@all&amp;r=1. then @ann"),
            format!("bare https://x.example/a_*b*/%40ann?q=%40all&r=1. then @{J}ann")
        );
        assert_eq!(
            md("<https://x.example/@ann|profile>"),
            "[profile](https://x.example/%40ann)"
        );
        assert_eq!(md("(https://x.example/a)"), "(https://x.example/a)");
        assert_eq!(
            md("<https://x.example/(a) b|x>"),
            "[x](https://x.example/%28a%29%20b)"
        );
        assert_eq!(
            md("<mailto:a@b.example|mail @all>"),
            format!("[mail @{J}all](mailto:a@b.example)")
        );
        assert_eq!(md("<#C123|general>"), "\\#general");
        assert_eq!(md("1 &lt; 2 &amp;&amp; 3 &gt; 2"), "1 < 2 && 3 > 2");
        assert_eq!(md("&gt; quoted"), "> quoted");
        assert_eq!(md("<not a link>"), "\\<not a link\\>");
        assert_eq!(md("a < b"), "a < b");
    }

    #[test]
    fn emphasis_and_code() {
        assert_eq!(md("*bold* _it_ ~gone~"), "**bold** _it_ ~~gone~~");
        assert_eq!(
            md("*see <https://x.example|here>*"),
            "**see [here](https://x.example)**"
        );
        assert_eq!(md("2*3*4 and a * b"), "2\\*3\\*4 and a \\* b");
        assert_eq!(md("*not\nbold*"), "\\*not\nbold\\*");
        assert_eq!(md("`a *b* <@U1> &lt;`"), "`a *b* <@U1> <`");
        assert_eq!(
            md("run:```ls -l\n*x*```done"),
            "run:\n```\nls -l\n*x*\n```\ndone"
        );
        assert_eq!(md("```\ncode\n```"), "```\ncode\n```");
        assert_eq!(md("# not a heading\n#tag"), "\\# not a heading\n\\#tag");
        assert_eq!(
            md("[x](https://evil.example) \\o/"),
            "\\[x\\](https://evil.example) \\\\o/"
        );
        assert_eq!(md("\u{E000}0\u{E001}"), "\u{FFFD}0\u{FFFD}");
    }

    #[test]
    fn plain_text_is_literal() {
        assert_eq!(
            plain_to_markdown("*a* _b_ [c] #d @all x@y.z"),
            format!("\\*a\\* \\_b\\_ \\[c\\] \\#d @{J}all x@y.z")
        );
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
