//! Conversation ids, message ids and links, parsed at the boundary: past
//! [`ThreadArg::from_args`] and [`crate::chat::ChatBackend::resolve_link`]
//! no tool re-checks them. Which syntax applies is the platform's
//! ([`Platform`]); this module holds Slack's link parser, and
//! [`crate::mattermost::link`] Mattermost's.
//!
//! A Slack permalink is taken only in the form Slack gives it:
//! `https://<the workspace's own host>/archives/<C…|G…>/p<16 digits>`, an
//! optional trailing slash, and for a reply the query Slack adds
//! (`thread_ts=<ts>`, and `cid=<the same channel>`). Anything else is
//! refused with the reason, so a look-alike link never reaches another
//! workspace or another conversation.

use serde_json::Value;

use rmcp::model::JsonObject;

use crate::chat::Platform;

/// A conversation id a tool may name: on Slack `C…` (a channel) or `G…` (a
/// private channel or group DM), upper case letters and digits; on
/// Mattermost a channel's 26-character id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelId(String);

impl ChannelId {
    pub fn parse(platform: Platform, s: &str) -> Result<ChannelId, String> {
        platform.check_channel_id(s)?;
        Ok(ChannelId(s.to_owned()))
    }

    /// An id known good: the session's own, or one a platform answered.
    pub fn trusted(s: &str) -> ChannelId {
        ChannelId(s.to_owned())
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

/// A message id: Slack's timestamp `1700000000.000100` (10 digits, a dot,
/// 6 digits), or a Mattermost post id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ts(String);

impl Ts {
    pub fn parse(platform: Platform, s: &str) -> Result<Ts, String> {
        platform.check_message_id(s)?;
        Ok(Ts(s.to_owned()))
    }

    /// An id known good: one a platform answered.
    pub fn trusted(s: &str) -> Ts {
        Ts(s.to_owned())
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

/// How a tool's arguments named a thread: a link still to resolve, or ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadArg {
    Link(String),
    Ids(Target),
}

impl ThreadArg {
    /// `url`, or `channel` with `ts` (the spec's two ways), from a tool's
    /// arguments. Problems are pushed to `found`.
    pub fn from_args(
        args: &JsonObject,
        platform: Platform,
        found: &mut Vec<String>,
    ) -> Option<ThreadArg> {
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
            (Some(url), None, None) => Some(ThreadArg::Link(url)),
            (None, Some(channel), Some(ts)) => {
                let channel = ChannelId::parse(platform, &channel)
                    .map_err(|e| found.push(e))
                    .ok();
                let ts = Ts::parse(platform, &ts)
                    .map_err(|e| found.push(format!("ts: {e}")))
                    .ok();
                Some(ThreadArg::Ids(Target {
                    channel: channel?,
                    ts: ts?,
                    thread_ts: None,
                }))
            }
            (None, Some(_), None) => {
                found.push(format!("channel needs ts: {}", platform.message_form()));
                None
            }
            (None, None, Some(_)) => {
                found.push(format!(
                    "ts needs channel: the id of the conversation ({})",
                    platform.channel_form()
                ));
                None
            }
            (None, None, None) => {
                found.push(format!(
                    "the thread is required: url (its {} link), or channel with ts",
                    platform.name()
                ));
                None
            }
        }
    }
}

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
        _ => ChannelId::parse(Platform::Slack, channel)
            .map_err(|e| what(&format!("names a bad channel: {e}")))?,
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
                    Ts::parse(Platform::Slack, &value)
                        .map_err(|e| what(&format!("has a bad thread_ts: {e}")))?,
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
        let slack = Platform::Slack;
        assert!(ChannelId::parse(slack, "C0").is_err());
        assert!(ChannelId::parse(slack, "G0ABC").is_ok());
        assert!(ChannelId::parse(slack, "C0-1").is_err());
        assert!(Ts::parse(slack, "1700000000.000100").is_ok());
        assert!(Ts::parse(slack, "1700000000000100").is_err());
        assert!(Ts::parse(slack, "170000000a.000100").is_err());
        let mm = Platform::Mattermost;
        let id = "ybndrfg8ejkmcpqxot1uwisza3";
        assert!(ChannelId::parse(mm, id).is_ok());
        assert!(Ts::parse(mm, id).is_ok());
        assert!(ChannelId::parse(mm, &id[..25]).is_err());
        assert!(ChannelId::parse(mm, &format!("{id}4")).is_err());
        let upper = ChannelId::parse(mm, &id.to_ascii_uppercase()).unwrap_err();
        assert!(upper.contains("lower case"), "{upper}");
        assert!(Ts::parse(mm, "1700000000.000100").is_err());
        assert!(ChannelId::parse(slack, id).is_err());
    }

    #[test]
    fn arguments_take_one_way_or_the_other() {
        let args = |v: Value| v.as_object().unwrap().clone();
        let mut found = vec![];
        let t = ThreadArg::from_args(
            &args(serde_json::json!({"channel": "C01", "ts": "1700000000.000100"})),
            Platform::Slack,
            &mut found,
        );
        assert!(t.is_some() && found.is_empty(), "{found:?}");
        let mut found = vec![];
        ThreadArg::from_args(
            &args(
                serde_json::json!({"url": "https://acme.slack.com/archives/C01/p1700000000000100", "channel": "C01"}),
            ),
            Platform::Slack,
            &mut found,
        );
        assert_eq!(found, ["give url, or channel with ts, not both"]);
        let mut found = vec![];
        ThreadArg::from_args(
            &args(serde_json::json!({"channel": "c01", "ts": "x"})),
            Platform::Slack,
            &mut found,
        );
        assert_eq!(found.len(), 2, "{found:?}");
        let mut found = vec![];
        ThreadArg::from_args(&args(serde_json::json!({})), Platform::Slack, &mut found);
        assert!(found[0].starts_with("the thread is required"));
    }
}
