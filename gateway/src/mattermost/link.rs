//! Mattermost's post links, parsed as strictly as [`crate::permalink`]
//! parses Slack's: `{site}/{team}/pl/{post id}`, the form Mattermost's
//! "Copy Link" gives (the web app's route `/:team/pl/:postid`), on the
//! configured site URL (same scheme, host, port and path prefix), with an
//! optional trailing slash and nothing else: no query, no #fragment, no
//! user name or password, no percent-escapes, dot segments or backslashes
//! that a URL parser would quietly normalise. The team is a Mattermost
//! team name and the post a 26-character id; anything else is refused
//! with the reason, so a look-alike link never reaches another site.
//!
//! Team names follow `server/public/model/team.go` (`IsValidTeamName`:
//! 2 to 64 characters, `^[a-z0-9]+([a-z\-0-9]+|(__)?)[a-z0-9]+$`); user
//! names `server/public/model/user.go` (`IsValidUsername`: 1 to 64 of
//! `a-z 0-9 . - _`, not `all`, `channel`, `matterbot` or `system`).

use crate::chat::Platform;

/// A post link of this site, parsed: the team named in its path and the
/// post's id (neither checked against the server yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostLink {
    pub team: String,
    pub post: String,
}

/// The shortest and longest team name (`TeamNameMinLength`,
/// `TeamNameMaxLength` in model/team.go).
const TEAM_NAME_LEN: std::ops::RangeInclusive<usize> = 2..=64;
/// The longest user name (`UserNameMaxLength` in model/user.go).
const USERNAME_MAX: usize = 64;
/// Names the server keeps for itself (`restrictedUsernames`).
const RESTRICTED_USERNAMES: [&str; 4] = ["all", "channel", "matterbot", "system"];

/// A Mattermost team name (the `name` in its URLs, not its display name).
pub fn is_team_name(s: &str) -> bool {
    let alnum = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !TEAM_NAME_LEN.contains(&s.len()) {
        return false;
    }
    if let Some((left, right)) = s.split_once("__") {
        return alnum(left) && alnum(right);
    }
    let bytes = s.as_bytes();
    let ends_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    ends_ok(bytes[0])
        && ends_ok(bytes[bytes.len() - 1])
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A Mattermost user name as the server takes it; the reason otherwise.
pub fn check_username(name: &str) -> Result<(), String> {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b);
    if name.is_empty() || name.len() > USERNAME_MAX {
        return Err(format!(
            "{name:?} is not a Mattermost user name (1 to {USERNAME_MAX} characters)"
        ));
    }
    if !name.bytes().all(allowed) {
        let lower = name.to_lowercase();
        if lower.bytes().all(allowed) {
            return Err(format!(
                "{name:?} has upper case letters; Mattermost's user names are lower case ({lower})"
            ));
        }
        return Err(format!(
            "{name:?} is not a Mattermost user name (lower case letters, digits, '.', '-' and '_')"
        ));
    }
    if RESTRICTED_USERNAMES.contains(&name) {
        return Err(format!(
            "@{name} is a word Mattermost keeps for itself, not a person's user name"
        ));
    }
    Ok(())
}

/// The link of post `post` on team `team` of the site `site`.
pub fn permalink(site: &str, team: &str, post: &str) -> String {
    format!("{site}/{team}/pl/{post}")
}

/// How a post link of the site reads, for messages.
pub fn link_form(site: &str) -> String {
    format!("{site}/<team>/pl/<post id, 26 lower case letters and digits>")
}

/// `link` as a post link of the site `site` (as [`super::site_url`]
/// gave it: no trailing slash), or why it is not one.
pub fn parse_post_link(link: &str, site: &str) -> Result<PostLink, String> {
    let what = |why: &str| format!("the link {link:?} {why}");
    let form = link_form(site);
    let site_url = url::Url::parse(site).map_err(|e| format!("the site URL {site:?}: {e}"))?;
    let url = url::Url::parse(link).map_err(|e| what(&format!("is not a URL ({e})")))?;
    if url.scheme() != site_url.scheme() {
        return Err(what(&format!(
            "uses {}:, not {}: (this site's links are {form})",
            url.scheme(),
            site_url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(what(
            "holds a user name or password, which post links never have",
        ));
    }
    if url.host_str() != site_url.host_str() || url.port() != site_url.port() {
        let host = site_url.host_str().unwrap_or_default();
        let port = site_url.port().map(|p| format!(":{p}")).unwrap_or_default();
        return Err(what(&format!(
            "is not on this Mattermost site ({host}{port}): only its own links are read"
        )));
    }
    if url.fragment().is_some() {
        return Err(what("has a #fragment, which post links never have"));
    }
    if url.query().is_some() {
        return Err(what("has a query (?...), which post links never have"));
    }
    let prefix = site_url.path().trim_end_matches('/');
    let rest = url
        .path()
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| what(&format!("is not under this site's path (links are {form})")))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let parts: Vec<&str> = rest.split('/').collect();
    let [team, pl, post] = parts.as_slice() else {
        return Err(what(&format!("is not a post link ({form})")));
    };
    if *pl != "pl" {
        return Err(what(&format!("is not a post link ({form})")));
    }
    if !is_team_name(team) {
        return Err(what(&format!(
            "names {team:?}, not a Mattermost team name (2 to 64 lower case letters, digits \
             and '-')"
        )));
    }
    Platform::Mattermost
        .check_message_id(post)
        .map_err(|e| what(&format!("has a malformed post id: {e}")))?;
    // The parser forgives what Mattermost never writes (a spelled-out
    // default port, dot segments, backslashes, tabs and newlines): the
    // link must read as the site's own form, give or take the case of
    // the scheme and host.
    let canonical = permalink(site, team, post);
    let given = link.strip_suffix('/').unwrap_or(link);
    if !given.eq_ignore_ascii_case(&canonical) {
        return Err(what(&format!(
            "is not written as Mattermost writes its links ({canonical})"
        )));
    }
    Ok(PostLink {
        team: (*team).to_owned(),
        post: (*post).to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: &str = "https://chat.example.com";
    const POST: &str = "ybndrfg8ejkmcpqxot1uwisza3";

    fn ok(link: &str) -> PostLink {
        parse_post_link(link, SITE).unwrap()
    }

    fn refused_on(site: &str, link: &str, needle: &str) {
        let err = parse_post_link(link, site).unwrap_err();
        assert!(err.contains(needle), "{needle:?} missing from {err}");
    }

    fn refused(link: &str, needle: &str) {
        refused_on(SITE, link, needle);
    }

    #[test]
    fn post_links_parse() {
        let l = ok(&format!("{SITE}/acme/pl/{POST}"));
        assert_eq!(l.team, "acme");
        assert_eq!(l.post, POST);
        assert_eq!(ok(&format!("{SITE}/acme/pl/{POST}/")).post, POST);
        assert_eq!(
            ok(&format!("HTTPS://Chat.Example.com/a-b/pl/{POST}")).team,
            "a-b"
        );
        assert_eq!(ok(&format!("{SITE}/a__b/pl/{POST}")).team, "a__b");
        let site = "http://127.0.0.1:8065/mm";
        let l = parse_post_link(&format!("{site}/acme/pl/{POST}"), site).unwrap();
        assert_eq!(l.team, "acme");
        assert_eq!(
            permalink(site, "acme", POST),
            format!("http://127.0.0.1:8065/mm/acme/pl/{POST}")
        );
    }

    #[test]
    fn everything_else_is_refused_with_the_reason() {
        refused("not a url", "is not a URL");
        refused(
            &format!("http://chat.example.com/acme/pl/{POST}"),
            "uses http:",
        );
        refused(
            &format!("https://evil.example/acme/pl/{POST}"),
            "not on this Mattermost site",
        );
        refused(
            &format!("https://chat.example.com.evil.example/acme/pl/{POST}"),
            "not on this Mattermost site",
        );
        refused(
            &format!("https://chat.example.com:8443/acme/pl/{POST}"),
            "not on this Mattermost site",
        );
        refused(
            &format!("https://u:p@chat.example.com/acme/pl/{POST}"),
            "user name or password",
        );
        refused(&format!("{SITE}/acme/pl/{POST}#x"), "#fragment");
        refused(&format!("{SITE}/acme/pl/{POST}?a=1"), "query");
        refused(&format!("{SITE}/acme/pl/{POST}?"), "query");
        refused(
            &format!("{SITE}/acme/channels/town-square"),
            "not a post link",
        );
        refused(&format!("{SITE}/acme/pl"), "not a post link");
        refused(&format!("{SITE}/acme/pl/{POST}/x"), "not a post link");
        refused(
            &format!("{SITE}/Acme/pl/{POST}"),
            "not a Mattermost team name",
        );
        refused(
            &format!("{SITE}/-acme/pl/{POST}"),
            "not a Mattermost team name",
        );
        refused(&format!("{SITE}/a/pl/{POST}"), "not a Mattermost team name");
        refused(
            &format!("{SITE}/_redirect/pl/{POST}"),
            "not a Mattermost team name",
        );
        refused(
            &format!("{SITE}/acme/pl/{}", &POST[..25]),
            "malformed post id",
        );
        refused(
            &format!("{SITE}/acme/pl/{}", POST.to_ascii_uppercase()),
            "malformed post id",
        );
        refused(&format!("{SITE}/acme/pl/{POST}//"), "not a post link");
        // What the URL parser would quietly normalise.
        refused(
            &format!("https://chat.example.com:443/acme/pl/{POST}"),
            "as Mattermost writes its links",
        );
        refused(
            &format!("{SITE}/x/../acme/pl/{POST}"),
            "as Mattermost writes its links",
        );
        refused(
            &format!("{SITE}\\acme\\pl\\{POST}"),
            "as Mattermost writes its links",
        );
        refused(
            &format!("{SITE}/ac\tme/pl/{POST}"),
            "as Mattermost writes its links",
        );
        refused(&format!("{SITE}/%61cme/pl/{POST}"), "team name");
        // A site with a path: links live under it.
        let site = "https://chat.example.com/mm";
        refused_on(
            site,
            &format!("https://chat.example.com/acme/pl/{POST}"),
            "not under this site's path",
        );
        refused_on(
            site,
            &format!("https://chat.example.com/mmx/acme/pl/{POST}"),
            "not under this site's path",
        );
    }

    #[test]
    fn team_and_user_names() {
        for good in ["ab", "a1", "team-1", "a__b", &"a".repeat(64)] {
            assert!(is_team_name(good), "{good}");
        }
        for bad in [
            "a",
            "-ab",
            "ab-",
            "a_b",
            "a__b__c",
            "A1",
            "a b",
            &"a".repeat(65),
        ] {
            assert!(!is_team_name(bad), "{bad}");
        }
        for good in ["a", "ann", "ann.lee", "ann-lee_2", "1ann", &"a".repeat(64)] {
            assert!(check_username(good).is_ok(), "{good}");
        }
        assert!(
            check_username("Ann")
                .unwrap_err()
                .contains("lower case (ann)")
        );
        assert!(
            check_username("ann lee")
                .unwrap_err()
                .contains("not a Mattermost user name")
        );
        assert!(check_username("").is_err());
        assert!(check_username(&"a".repeat(65)).is_err());
        assert!(
            check_username("channel")
                .unwrap_err()
                .contains("keeps for itself")
        );
        assert!(check_username("all").is_err());
    }
}
