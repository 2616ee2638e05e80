//! Links to a file on its repository's web host (GitHub, GitLab,
//! Bitbucket) made from a git remote URL in any of its forms (`https://`,
//! scp-like `git@host:o/r`, `ssh://`), credentials left out: [`web_url`].

/// The file on its repository's web host, at `commit`: github.com,
/// gitlab.com and hosts named `gitlab.*`, and bitbucket.org, from an
/// `https://host/o/r(.git)`, `git@host:o/r(.git)` or
/// `ssh://git@host[:port]/o/r(.git)` remote. Credentials never appear in
/// the link. `None` for `file://` URLs, local paths and other hosts.
pub fn web_url(
    remote: &str,
    commit: &str,
    path_in_repo: &str,
    anchor: Option<&str>,
) -> Option<String> {
    let Remote { web, path: repo } = parse_remote(remote);
    let (scheme, host) = web?;
    let hostname = host.split(':').next().unwrap_or(&host);
    let mut segments: Vec<&str> = repo.split('/').filter(|s| !s.is_empty()).collect();
    let last = segments.pop()?;
    let last = last.strip_suffix(".git").unwrap_or(last);
    if last.is_empty() {
        return None;
    }
    segments.push(last);
    let repo_path = segments
        .iter()
        .map(|s| encode(s))
        .collect::<Vec<_>>()
        .join("/");
    let file = path_in_repo
        .split('/')
        .map(encode)
        .collect::<Vec<_>>()
        .join("/");
    let mut url = if hostname == "github.com" && segments.len() == 2 {
        format!("https://github.com/{repo_path}/blob/{commit}/{file}")
    } else if (hostname == "gitlab.com" || hostname.starts_with("gitlab.")) && segments.len() >= 2 {
        format!("{scheme}://{host}/{repo_path}/-/blob/{commit}/{file}")
    } else if hostname == "bitbucket.org" && segments.len() == 2 {
        format!("https://bitbucket.org/{repo_path}/src/{commit}/{file}")
    } else {
        return None;
    };
    if let Some(anchor) = anchor {
        url.push('#');
        url.push_str(&encode(anchor));
    }
    Some(url)
}

/// A remote URL taken apart: its web scheme and host (lowercase; with
/// its port for http(s)) when it names a network host, and the
/// repository's path.
struct Remote<'a> {
    web: Option<(&'static str, String)>,
    path: &'a str,
}

/// `https://`, `http://`, `ssh://` and `git+ssh://` URLs, scp-like
/// `[user@]host:path`, other `scheme://` URLs (`file://`: no web host) and
/// local paths (no web host).
fn parse_remote(remote: &str) -> Remote<'_> {
    let remote = remote.trim();
    let lower = remote.to_ascii_lowercase();
    let web = [
        ("https://", "https", true),
        ("http://", "http", true),
        ("ssh://", "https", false),
        ("git+ssh://", "https", false),
    ]
    .into_iter()
    .find(|(prefix, _, _)| lower.starts_with(prefix));
    if let Some((prefix, scheme, keep_port)) = web {
        let rest = &remote[prefix.len()..];
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host_port = authority.rsplit('@').next().unwrap_or(authority);
        let host = if keep_port {
            host_port
        } else {
            host_port.split(':').next().unwrap_or(host_port)
        };
        let path = path.split(['?', '#']).next().unwrap_or(path);
        let web = (!host.is_empty()).then(|| (scheme, host.to_ascii_lowercase()));
        return Remote { web, path };
    }
    if let Some((_, rest)) = remote.split_once("://") {
        let path = rest.split_once('/').map_or("", |(_, path)| path);
        return Remote { web: None, path };
    }
    // scp-like `[user@]host:path`; a local path has a '/' before any ':'.
    match remote.split_once(':') {
        Some((authority, path)) if !authority.is_empty() && !authority.contains('/') => {
            let host = authority.rsplit('@').next().unwrap_or(authority);
            Remote {
                web: Some(("https", host.to_ascii_lowercase())),
                path,
            }
        }
        _ => Remote {
            web: None,
            path: remote,
        },
    }
}

/// The repository's path in a remote URL of any form (see
/// [`parse_remote`]).
pub fn remote_path(remote: &str) -> &str {
    parse_remote(remote).path
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_urls_for_each_host_form() {
        let c = "0123abc";
        let url = |remote: &str| web_url(remote, c, "docs/brief.md", Some("plan"));
        for remote in [
            "https://github.com/acme/api",
            "https://github.com/acme/api.git",
            "https://x-access-token:ghs_secret@github.com/acme/api.git",
            "git@github.com:acme/api.git",
            "ssh://git@github.com/acme/api.git",
            "ssh://git@github.com:22/acme/api",
            "HTTPS://GitHub.com/acme/api/",
        ] {
            assert_eq!(
                url(remote).as_deref(),
                Some("https://github.com/acme/api/blob/0123abc/docs/brief.md#plan"),
                "{remote}"
            );
        }
        assert_eq!(
            url("https://oauth2:glpat-secret@gitlab.com/group/sub/api.git").as_deref(),
            Some("https://gitlab.com/group/sub/api/-/blob/0123abc/docs/brief.md#plan")
        );
        assert_eq!(
            url("git@gitlab.example.com:team/api.git").as_deref(),
            Some("https://gitlab.example.com/team/api/-/blob/0123abc/docs/brief.md#plan")
        );
        assert_eq!(
            url("ssh://git@gitlab.example.com:2222/team/api.git").as_deref(),
            Some("https://gitlab.example.com/team/api/-/blob/0123abc/docs/brief.md#plan")
        );
        assert_eq!(
            web_url("https://gitlab.example.com:8443/team/api", c, "a.md", None).as_deref(),
            Some("https://gitlab.example.com:8443/team/api/-/blob/0123abc/a.md")
        );
        assert_eq!(
            url("https://user:app-password@bitbucket.org/acme/api.git").as_deref(),
            Some("https://bitbucket.org/acme/api/src/0123abc/docs/brief.md#plan")
        );
        assert_eq!(
            web_url(
                "git@github.com:acme/api.git",
                c,
                "docs/my brief (v2)#.md",
                Some("über")
            )
            .as_deref(),
            Some(
                "https://github.com/acme/api/blob/0123abc/docs/my%20brief%20%28v2%29%23.md#%C3%BCber"
            )
        );
        for remote in [
            "file:///srv/git/acme/api.git",
            "/srv/git/acme/api.git",
            "../api.git",
            "https://example.com/acme/api.git",
            "git@example.com:acme/api.git",
            "https://github.com/acme",
            "https://github.com/acme/api/extra",
            "https://github.com/",
        ] {
            assert_eq!(url(remote), None, "{remote}");
        }
        for remote in [
            "https://x-access-token:ghs_secret@github.com/acme/api.git",
            "https://oauth2:glpat-secret@gitlab.com/group/api.git",
        ] {
            let link = url(remote).expect("link");
            assert!(!link.contains("secret") && !link.contains('@'), "{link}");
        }
    }
}
