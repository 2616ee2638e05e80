//! The trait's Slack-flavoured text in Mattermost's terms: Slack mrkdwn
//! as Mattermost Markdown ([`mrkdwn_to_markdown`]) and plain text shown
//! literally ([`plain_to_markdown`]). [`super::blocks`] renders Block
//! Kit blocks with them.
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
//! Markdown an agent may write out of habit stays what it is:
//! `**bold**`, `~~strike~~` and `[label](https://…)` (its target as
//! `<url|label>`'s is).
//!
//! Every other `@word` becomes `@`+U+2060 WORD JOINER+`word`, as
//! [`crate::threads::neutralise_mentions`] does on Slack: Mattermost
//! notifies `@username`, `@channel`, `@all` and `@here` typed as plain
//! text, and the trait's contract is that only `<@ID>` notifies. Markdown
//! that mrkdwn does not have is escaped (`\`, `[`, `]`, a lone `*`, a `#`
//! starting a line), so text reads as it would on Slack. A bare
//! `http(s)://` URL is kept as it is, but in it and in a link's target an
//! `@` that would start a word is written `%40`: the server finds
//! mentions in words split at `/`, `?`, `=`...

use std::collections::HashMap;

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

/// `&lt;`, `&gt;` and `&amp;` as the characters.
fn decode_entities(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Whether an `@` after `c` is inside a word Mattermost would not take
/// for a mention (an e-mail address's). Mattermost splits words at every
/// character but letters, digits and `: . - _ @`, then trims `:.-_` off
/// their front: so only an ASCII letter or digit before the `@` keeps it
/// inside a word, whatever comes after it.
fn keeps_at_inside(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// Text shown literally in Markdown: Markdown's characters escaped (not
/// `|`, which only a table cell escapes), every `@word` inert.
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
            // At the end too: what follows may be glued on after it.
            '@' if !prev.is_some_and(keeps_at_inside)
                && chars.peek().is_none_or(|n| !n.is_whitespace()) =>
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
pub(super) fn link_target(url: &str) -> String {
    let chars: Vec<char> = url.chars().collect();
    let mut out = String::with_capacity(url.len());
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        match c {
            ' ' => out.push_str("%20"),
            // Neither may escape or open what follows the link.
            '\\' => out.push_str("%5C"),
            '`' => out.push_str("%60"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            // Only an `@` between two ASCII letters or digits (a user's
            // `ann@example.com`) stays: any other starts a word.
            '@' if !(prev.is_some_and(keeps_at_inside) && next.is_some_and(keeps_at_inside)) => {
                out.push_str("%40");
            }
            _ => out.push(c),
        }
    }
    out
}

/// `[label](http(s)://url)` at the start of `text`, on one line: the
/// label, the URL and the length taken.
fn markdown_link(text: &str) -> Option<(&str, &str, usize)> {
    let close = text.find(']')?;
    let label = &text[1..close];
    if label.is_empty() || label.contains(['\n', '[']) {
        return None;
    }
    let rest = text[close + 1..].strip_prefix('(')?;
    let end = rest.find(')')?;
    let url = &rest[..end];
    let lower = url.to_ascii_lowercase();
    let web = lower.starts_with("http://") || lower.starts_with("https://");
    if !web || url.contains(char::is_whitespace) {
        return None;
    }
    Some((label, url, close + 2 + end + 1))
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
            None => link_target(&url),
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
        // Markdown's own link, as an agent may write it: kept a link.
        if c == '['
            && let Some((label, url, len)) = markdown_link(rest)
        {
            literals.hold(
                &mut text,
                format!(
                    "[{}]({})",
                    plain_to_markdown(&decode_entities(label)),
                    link_target(&decode_entities(url))
                ),
            );
            rest = &rest[len..];
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
    /// Markdown's own `**` or `~~`, kept as written.
    Keep,
}

/// The text between the literals: emphasis doubled, Markdown's own
/// syntax escaped, every `@word` inert.
fn rewrite(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut role = vec![Role::Plain; n];
    // Markdown's `**bold**` and `~~strike~~` (an agent's habit) stay what
    // they are: each pair of markers kept as written.
    for i in 0..n.saturating_sub(1) {
        let c = chars[i];
        if !matches!(c, '*' | '~') || chars[i + 1] != c || role[i] != Role::Plain {
            continue;
        }
        let inside_starts = i + 2 < n && !chars[i + 2].is_whitespace() && chars[i + 2] != c;
        if !inside_starts {
            continue;
        }
        let close = (i + 3..n.saturating_sub(1))
            .take_while(|&j| chars[j] != '\n')
            .find(|&j| chars[j] == c && chars[j + 1] == c && !chars[j - 1].is_whitespace());
        if let Some(j) = close {
            for k in [i, i + 1, j, j + 1] {
                role[k] = Role::Keep;
            }
        }
    }
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
                && role[j] == Role::Plain
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
            (_, Role::Keep) => out.push(c),
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
                if !prev.is_some_and(keeps_at_inside)
                    && chars.get(i + 1).is_none_or(|n| !n.is_whitespace()) =>
            {
                out.push('@');
                out.push(JOINER);
            }
            _ => out.push(c),
        }
    }
    out
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
        // Mattermost trims `_ . - :` off a word's front and splits at any
        // other character but ASCII letters and digits: whatever comes
        // before an `@` but those makes it a mention, so it is made inert.
        for text in [
            "_@channel_",
            "x _@all",
            "ⓐ@channel",
            "\u{05B0}@here",
            "a.@all",
            "-@here",
        ] {
            let out = md(text);
            assert!(out.contains(&format!("@{J}")), "{text:?} -> {out:?}");
        }
        assert_eq!(plain_to_markdown("_@all"), format!("\\_@{J}all"));
        // An @ at the end of a piece is made inert too: what follows is
        // glued on after it.
        for text in ["<#C1|_@>all", "<!foo|x.@>here", "<@U9|_@>channel"] {
            let out = md(text);
            assert!(
                !out.contains("@all") && !out.contains("@here"),
                "{text:?} -> {out:?}"
            );
            assert!(!out.contains("_@channel"), "{text:?} -> {out:?}");
        }
        // A link's target can neither escape nor open what follows it.
        assert_eq!(md("<mailto:\\>`@all`"), "mailto:%5C`@all`");
        assert_eq!(md("<https://x.example/a`b>"), "https://x.example/a%60b");
        // A single * closes on a plain marker, never on a kept **.
        assert_eq!(md("*a **b** c*"), "**a **b** c**");
        // A link without a label gets its target's `@` encoded, and no
        // space can end it early.
        assert_eq!(
            md("<https://x.example/a b @here>"),
            "https://x.example/a%20b%20%40here"
        );
        assert_eq!(md("<https://x.example/@all>"), "https://x.example/%40all");
        assert_eq!(md("<mailto:@channel>"), "mailto:%40channel");
        assert_eq!(md("https://x.example/a.@all"), "https://x.example/a.%40all");
        assert_eq!(md("https://x.example/_@here"), "https://x.example/_%40here");
        assert_eq!(
            md("<mailto:ann@example.com|mail ann>"),
            "[mail ann](mailto:ann@example.com)"
        );
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
        // Markdown an agent writes stays what it is: a link (its target
        // as links are), bold and strike; a bracket that is no link is
        // text.
        assert_eq!(
            md("[x](https://evil.example) \\o/"),
            "[x](https://evil.example) \\\\o/"
        );
        assert_eq!(
            md("[a b](https://x.example/@all) [c](javascript:alert(1))"),
            "[a b](https://x.example/%40all) \\[c\\](javascript:alert(1))"
        );
        assert_eq!(md("**Note:** ~~old~~ new"), "**Note:** ~~old~~ new");
        assert_eq!(md("~~old~~\nnext"), "~~old~~\nnext");
        assert_eq!(md("\u{E000}0\u{E001}"), "\u{FFFD}0\u{FFFD}");
    }

    #[test]
    fn plain_text_is_literal() {
        assert_eq!(
            plain_to_markdown("*a* _b_ [c] #d @all x@y.z"),
            format!("\\*a\\* \\_b\\_ \\[c\\] \\#d @{J}all x@y.z")
        );
    }
}
