//! Markdown headings and their anchors as GitHub makes them: the ATX and
//! setext headings outside fenced code ([`anchors`]), each one's text as
//! rendered, and its slug ([`slug`]), with `-1`, `-2`, ... for repeats.
//! spawn_thread's brief check ([`crate::brief`]) accepts an `#anchor` only
//! when it is one of these.

use std::collections::HashMap;

/// The anchors of `markdown`'s headings, in order, as GitHub makes them
/// (duplicates get `-1`, `-2`, ...).
pub fn anchors(markdown: &str) -> Vec<String> {
    let mut used: HashMap<String, usize> = HashMap::new();
    headings(markdown)
        .iter()
        .map(|text| {
            let base = slug(text);
            let mut anchor = base.clone();
            while used.contains_key(&anchor) {
                let count = used.entry(base.clone()).or_insert(0);
                *count += 1;
                anchor = format!("{base}-{count}");
            }
            used.insert(anchor.clone(), 0);
            anchor
        })
        .collect()
}

/// GitHub's slug of a heading's text: lowercase; letters, digits, spaces,
/// hyphens and underscores kept, spaces become hyphens.
fn slug(heading: &str) -> String {
    plain_text(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The raw text of each ATX (`## Title`) and setext (`Title` over `===` or
/// `---`) heading, outside fenced code blocks.
fn headings(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    let mut paragraph: Option<&str> = None;
    for line in markdown.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let text = line.trim_start_matches(' ');
        if let Some((mark, len)) = fence {
            let run = text.len() - text.trim_start_matches(mark).len();
            if indent < 4 && run >= len && text[run..].trim().is_empty() {
                fence = None;
            }
            continue;
        }
        if indent >= 4 || line.starts_with('\t') {
            // Indented code, or a paragraph's continuation.
            if paragraph.is_some() {
                paragraph = Some(line.trim());
            }
            continue;
        }
        if let Some(mark) = text.chars().next().filter(|c| matches!(c, '`' | '~')) {
            let run = text.len() - text.trim_start_matches(mark).len();
            if run >= 3 {
                fence = Some((mark, run));
                paragraph = None;
                continue;
            }
        }
        if let Some(title) = atx_heading(text) {
            found.push(title.to_owned());
            paragraph = None;
            continue;
        }
        let trimmed = text.trim_end();
        if let Some(title) = paragraph
            && !trimmed.is_empty()
            && (trimmed.chars().all(|c| c == '=') || trimmed.chars().all(|c| c == '-'))
        {
            found.push(title.to_owned());
            paragraph = None;
            continue;
        }
        paragraph = (!trimmed.is_empty() && !starts_block(trimmed)).then_some(trimmed);
    }
    found
}

/// `## Title ##` -> `Title`.
fn atx_heading(line: &str) -> Option<&str> {
    let level = line.len() - line.trim_start_matches('#').len();
    let rest = &line[level..];
    if !(1..=6).contains(&level) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let rest = rest.trim();
    let closed = rest.trim_end_matches('#');
    if closed.is_empty() {
        return Some("");
    }
    if closed.len() < rest.len() && closed.ends_with([' ', '\t']) {
        return Some(closed.trim_end());
    }
    Some(rest)
}

/// Lines that start a list item, quote, table or HTML block, which a
/// setext underline does not turn into a heading.
fn starts_block(line: &str) -> bool {
    let ordered = line.split_once(['.', ')']).is_some_and(|(n, rest)| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && rest.starts_with(' ')
    });
    ordered
        || line.starts_with(['>', '|', '<'])
        || ["- ", "* ", "+ "]
            .iter()
            .any(|marker| line.starts_with(marker))
}

/// A heading's text as rendered: links and images become their text, code
/// spans stay literal, HTML tags, emphasis underscores and backslash
/// escapes go, and the common entities are decoded.
fn plain_text(inline: &str) -> String {
    let chars: Vec<char> = inline.chars().collect();
    let mut out = String::with_capacity(inline.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if chars.get(i + 1).is_some_and(char::is_ascii_punctuation) => {
                out.push(chars[i + 1]);
                i += 2;
            }
            '`' => {
                let run = chars[i..].iter().take_while(|&&c| c == '`').count();
                let body = i + run;
                let close = (body..chars.len()).find(|&j| {
                    chars[j..].iter().take_while(|&&c| c == '`').count() == run
                        && (j == 0 || chars[j - 1] != '`')
                });
                match close {
                    Some(j) => {
                        out.extend(&chars[body..j]);
                        i = j + run;
                    }
                    None => {
                        out.extend(&chars[i..body]);
                        i = body;
                    }
                }
            }
            '!' if chars.get(i + 1) == Some(&'[') => i += 1,
            ']' if chars.get(i + 1) == Some(&'(') => {
                // `[text](url)`: keep the text (already out), skip the url.
                i = (i + 2..chars.len())
                    .find(|&j| chars[j] == ')')
                    .map_or(chars.len(), |j| j + 1);
            }
            '<' => {
                let close = (i + 1..chars.len()).find(|&j| chars[j] == '>');
                let tag = close.map(|j| chars[i + 1..j].iter().collect::<String>());
                match (close, tag) {
                    (Some(j), Some(tag))
                        if tag.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
                            && !tag.contains([':', '@']) =>
                    {
                        i = j + 1;
                    }
                    (Some(j), Some(tag)) => {
                        out.push_str(&tag);
                        i = j + 1;
                    }
                    _ => {
                        out.push(c);
                        i += 1;
                    }
                }
            }
            '_' => {
                let before = i.checked_sub(1).map(|j| chars[j]);
                let run = chars[i..].iter().take_while(|&&c| c == '_').count();
                let after = chars.get(i + run).copied();
                let inside_word = before.is_some_and(char::is_alphanumeric)
                    && after.is_some_and(char::is_alphanumeric);
                if inside_word {
                    out.extend(&chars[i..i + run]);
                }
                i += run;
            }
            '&' => {
                let rest: String = chars[i..chars.len().min(i + 8)].iter().collect();
                let entity = [
                    ("&amp;", '&'),
                    ("&lt;", '<'),
                    ("&gt;", '>'),
                    ("&quot;", '"'),
                    ("&#39;", '\''),
                    ("&nbsp;", ' '),
                ]
                .into_iter()
                .find(|(name, _)| rest.starts_with(name));
                match entity {
                    Some((name, decoded)) => {
                        out.push(decoded);
                        i += name.len();
                    }
                    None => {
                        out.push(c);
                        i += 1;
                    }
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_github() {
        let slugs = anchors(
            "# Hello, World!\n## `snake_case` and __bold__\n### [Link](https://x.y/z) text\n#### A &amp; B\n# Hello, World!\n# hello-world\n#not a heading\n  ## Closed ##\nÜber Café\n---\n\n---\n- item\n---\n",
        );
        assert_eq!(
            slugs,
            [
                "hello-world",
                "snake_case-and-bold",
                "link-text",
                "a--b",
                "hello-world-1",
                "hello-world-2",
                "closed",
                "über-café",
            ]
        );
        assert_eq!(slug("Step 2: run `cargo test`"), "step-2-run-cargo-test");
        assert_eq!(slug("What's new?"), "whats-new");
    }
}
