//! Slack conversation ids, message timestamps and permalinks, parsed at the
//! boundary: past [`Target::from_args`] no tool re-checks them.
//!
//! A permalink is taken only in the form Slack gives it:
//! `https://<the workspace's own host>/archives/<C…|G…>/p<16 digits>`, an
//! optional trailing slash, and for a reply the query Slack adds
//! (`thread_ts=<ts>`, and `cid=<the same channel>`). Anything else is
//! refused with the reason, so a look-alike link never reaches another
//! workspace or another conversation.

use serde_json::Value;

use rmcp::model::JsonObject;

/// A conversation id a tool may name: `C…` (a channel) or `G…` (a private
/// channel or group DM), upper case letters and digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelId(String);

impl ChannelId {
    pub fn parse(s: &str) -> Result<ChannelId, String> {
        let upper = s.to_ascii_uppercase();
        let well_formed = |id: &str| {
            id.len() >= 3
                && (id.starts_with('C') || id.starts_with('G'))
                && id
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        };
        if well_formed(s) {
            return Ok(ChannelId(s.to_owned()));
        }
        if well_formed(&upper) {
            return Err(format!(
                "the channel id {s:?} is in lower case; Slack's ids are upper case ({upper})"
            ));
        }
        Err(format!(
            "{s:?} is not a Slack channel id (C… or G…, upper case letters and digits)"
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ChannelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A message timestamp, `1700000000.000100`: 10 digits, a dot, 6 digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ts(String);

impl Ts {
    pub fn parse(s: &str) -> Result<Ts, String> {
        let ok = s.len() == 17
            && s.as_bytes()[10] == b'.'
            && s.bytes()
                .enumerate()
                .all(|(i, b)| i == 10 || b.is_ascii_digit());
        if ok {
            Ok(Ts(s.to_owned()))
        } else {
            Err(format!(
                "{s:?} is not a Slack message timestamp (10 digits, a dot, 6 digits, for example 1700000000.000100)"
            ))
        }
    }

    /// From a permalink's `p` part: 16 digits, the dot left out.
    fn from_p(digits: &str) -> Option<Ts> {
        (digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| Ts(format!("{}.{}", &digits[..10], &digits[10..])))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Ts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A thread a tool reads or posts into, named by one of its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub channel: ChannelId,
    /// The message named (the parent or a reply).
    pub ts: Ts,
    /// The thread's parent, when the link said so (a reply's link).
    pub thread_ts: Option<Ts>,
}

impl Target {
    /// `url`, or `channel` with `ts` (the spec's two ways), from a tool's
    /// arguments. Problems are pushed to `found`.
    pub fn from_args(args: &JsonObject, host: &str, found: &mut Vec<String>) -> Option<Target> {
        let text = |key: &str, found: &mut Vec<String>| match args.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.trim().to_owned()),
            Some(v) => {
                found.push(format!("{key} must be a string, got {v}"));
                None
            }
        };
        let url = text("url", found);
        let channel = text("channel", found);
        let ts = text("ts", found);
        match (url, channel, ts) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                found.push("give url, or channel with ts, not both".into());
                None
            }
            (Some(url), None, None) => match parse_permalink(&url, host) {
                Ok(target) => Some(target),
                Err(why) => {
                    found.push(why);
                    None
                }
            },
            (None, Some(channel), Some(ts)) => {
                let channel = ChannelId::parse(&channel).map_err(|e| found.push(e)).ok();
                let ts = Ts::parse(&ts)
                    .map_err(|e| found.push(format!("ts: {e}")))
                    .ok();
                Some(Target {
                    channel: channel?,
                    ts: ts?,
                    thread_ts: None,
                })
            }
            (None, Some(_), None) => {
                found.push("channel needs ts: the timestamp of a message in the thread".into());
                None
            }
            (None, None, Some(_)) => {
                found.push("ts needs channel: the id of the conversation (C… or G…)".into());
                None
            }
            (None, None, None) => {
                found.push(
                    "the thread is required: url (its Slack link), or channel with ts".into(),
                );
                None
            }
        }
    }
}

/// A Slack permalink of the workspace at `host` (e.g. `acme.slack.com`).
pub fn parse_permalink(link: &str, host: &str) -> Result<Target, String> {
    parse_link(link, host, None)
}

/// [`parse_permalink`], also taking a link into `own`, the session's own
/// conversation, whatever its kind (a session in a DM, `D…`, links its own
/// messages too).
pub fn parse_permalink_for(link: &str, host: &str, own: &str) -> Result<Target, String> {
    parse_link(link, host, Some(own))
}

fn parse_link(link: &str, host: &str, own: Option<&str>) -> Result<Target, String> {
    let what = |why: &str| format!("the link {link:?} {why}");
    let url = url::Url::parse(link).map_err(|e| what(&format!("is not a URL ({e})")))?;
    if url.scheme() != "https" {
        return Err(what(&format!(
            "uses {}:, not https: (Slack's links are https://{host}/archives/...)",
            url.scheme()
        )));
    }
    let given_host = url.host_str().unwrap_or_default();
    if !given_host.eq_ignore_ascii_case(host)
        || url.port().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(what(&format!(
            "is not on this workspace's host {host}: only its own Slack links are read"
        )));
    }
    if url.fragment().is_some() {
        return Err(what("has a #fragment, which Slack's links never have"));
    }
    let path = url.path();
    let path = path.strip_suffix('/').unwrap_or(path);
    let mut parts = path.split('/').skip(1);
    let (Some("archives"), Some(channel)) = (parts.next(), parts.next()) else {
        return Err(what(&format!(
            "is not a message link (https://{host}/archives/<channel>/p<16 digits>)"
        )));
    };
    let channel = match own {
        Some(own) if channel == own => ChannelId(own.to_owned()),
        _ => ChannelId::parse(channel).map_err(|e| what(&format!("names a bad channel: {e}")))?,
    };
    let message = match (parts.next(), parts.next()) {
        (Some(p), None) if p.starts_with('p') => Ts::from_p(&p[1..])
            .ok_or_else(|| what("has a malformed message part: p followed by exactly 16 digits"))?,
        (None, _) | (Some(""), None) => {
            return Err(what(
                "has no message part (p followed by 16 digits): link a message, not a channel",
            ));
        }
        _ => {
            return Err(what(
                "is not a message link (https://HOST/archives/<channel>/p<16 digits>)",
            ));
        }
    };
    let mut thread_ts = None;
    for (key, value) in url.query_pairs() {
        match key.as_ref() {
            "thread_ts" if thread_ts.is_none() => {
                thread_ts = Some(
                    Ts::parse(&value).map_err(|e| what(&format!("has a bad thread_ts: {e}")))?,
                );
            }
            "cid" if value == channel.as_str() => {}
            "cid" => {
                return Err(what(&format!(
                    "has cid={value}, another conversation than {channel}"
                )));
            }
            other => {
                return Err(what(&format!(
                    "has a query parameter {other:?}; Slack's links have only thread_ts and cid"
                )));
            }
        }
    }
    Ok(Target {
        channel,
        ts: message,
        thread_ts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "acme.slack.com";

    fn ok(link: &str) -> Target {
        parse_permalink(link, HOST).unwrap()
    }

    fn refused(link: &str, needle: &str) {
        let err = parse_permalink(link, HOST).unwrap_err();
        assert!(err.contains(needle), "{needle:?} missing from {err}");
    }

    #[test]
    fn slack_links_parse() {
        let t = ok("https://acme.slack.com/archives/C0123ABC/p1700000000000100");
        assert_eq!(t.channel.as_str(), "C0123ABC");
        assert_eq!(t.ts.as_str(), "1700000000.000100");
        assert_eq!(t.thread_ts, None);
        let t = ok("https://ACME.slack.com/archives/G0PRIV/p1700000000000200/");
        assert_eq!(t.ts.as_str(), "1700000000.000200");
        let t = ok(
            "https://acme.slack.com/archives/C0123/p1700000000000300?thread_ts=1700000000.000100&cid=C0123",
        );
        assert_eq!(t.thread_ts.unwrap().as_str(), "1700000000.000100");
    }

    #[test]
    fn everything_else_is_refused_with_the_reason() {
        refused(
            "https://evil.example/archives/C0123/p1700000000000100",
            "not on this workspace's host",
        );
        refused(
            "https://acme.slack.com.evil.example/archives/C0123/p1700000000000100",
            "not on this workspace's host",
        );
        refused(
            "https://acme.slack.com:444/archives/C0123/p1700000000000100",
            "not on this workspace's host",
        );
        refused(
            "http://acme.slack.com/archives/C0123/p1700000000000100",
            "uses http:",
        );
        refused(
            "https://acme.slack.com/archives/c0123/p1700000000000100",
            "lower case",
        );
        refused("https://acme.slack.com/archives/C0123", "no message part");
        refused("https://acme.slack.com/archives/C0123/", "no message part");
        refused(
            "https://acme.slack.com/archives/C0123/p170000000000010",
            "exactly 16 digits",
        );
        refused(
            "https://acme.slack.com/archives/D0123/p1700000000000100",
            "not a Slack channel id",
        );
        refused(
            "https://acme.slack.com/archives/C0123/p1700000000000100?x=1",
            "query parameter \"x\"",
        );
        refused(
            "https://acme.slack.com/archives/C0123/p1700000000000100?cid=C999",
            "another conversation",
        );
        refused(
            "https://acme.slack.com/archives/C0123/p1700000000000100?thread_ts=17",
            "bad thread_ts",
        );
        refused("https://acme.slack.com/team/U0123", "not a message link");
        refused("not a url", "is not a URL");
    }

    #[test]
    fn ids_and_timestamps() {
        assert!(ChannelId::parse("C0").is_err());
        assert!(ChannelId::parse("G0ABC").is_ok());
        assert!(ChannelId::parse("C0-1").is_err());
        assert!(Ts::parse("1700000000.000100").is_ok());
        assert!(Ts::parse("1700000000000100").is_err());
        assert!(Ts::parse("170000000a.000100").is_err());
    }

    #[test]
    fn arguments_take_one_way_or_the_other() {
        let args = |v: Value| v.as_object().unwrap().clone();
        let mut found = vec![];
        let t = Target::from_args(
            &args(serde_json::json!({"channel": "C01", "ts": "1700000000.000100"})),
            HOST,
            &mut found,
        );
        assert!(t.is_some() && found.is_empty(), "{found:?}");
        let mut found = vec![];
        Target::from_args(
            &args(
                serde_json::json!({"url": "https://acme.slack.com/archives/C01/p1700000000000100", "channel": "C01"}),
            ),
            HOST,
            &mut found,
        );
        assert_eq!(found, ["give url, or channel with ts, not both"]);
        let mut found = vec![];
        Target::from_args(
            &args(serde_json::json!({"channel": "c01", "ts": "x"})),
            HOST,
            &mut found,
        );
        assert_eq!(found.len(), 2, "{found:?}");
        let mut found = vec![];
        Target::from_args(&args(serde_json::json!({})), HOST, &mut found);
        assert!(found[0].starts_with("the thread is required"));
    }
}
