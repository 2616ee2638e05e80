//! Mattermost as the gateway's chat platform: the REST API v4 behind
//! [`crate::chat::ChatBackend`], its WebSocket events into the
//! [`crate::events::EventHub`], and the integration callbacks of its
//! buttons and dialogs ([`sign`]).

pub mod api;
pub mod backend;
pub mod blocks;
pub mod callbacks;
pub mod dialog;
pub mod events;
pub mod link;
pub mod markup;
pub mod model;
pub mod sign;

/// `[mattermost] url`: the site URL, `https://host[:port][/path]`, or plain
/// `http://` to a loopback host (the token must not cross a network in
/// clear text); without a trailing slash, a query or a fragment.
pub fn site_url(url: &str) -> Result<String, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| format!("{url:?} has no host"))?;
    match parsed.scheme() {
        "https" => {}
        "http" if crate::slack::is_loopback(host) => {}
        "http" => {
            return Err(format!(
                "{url:?}: plain http is allowed only to a loopback host; the bot's token would \
                 cross the network in clear text (use https)"
            ));
        }
        other => return Err(format!("{url:?} is not http(s) but {other}:")),
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "{url:?} has a query or a #fragment; give the site URL alone"
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "{url:?} holds a user name or password; the token goes in [mattermost] token"
        ));
    }
    // As parsed: a default port dropped, the host in lower case, as
    // Mattermost's own links are.
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

/// `[mattermost] callback_url`: an https URL Mattermost can POST to, or
/// plain http to a loopback host (a dialog's submission carries the
/// secret typed into it). A path is kept: the listener takes any path
/// ending in `/actions` or `/dialogs`.
pub fn callback_url(url: &str) -> Result<String, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    let Some(host) = parsed.host_str() else {
        return Err(format!("{url:?} is not an http(s) URL"));
    };
    match parsed.scheme() {
        "https" => {}
        "http" if crate::slack::is_loopback(host) => {}
        "http" => {
            return Err(format!(
                "{url:?}: plain http is allowed only to a loopback host; a dialog's submission \
                 carries the secret typed into it (use https, e.g. a calvin preview of \
                 callback_listen's port)"
            ));
        }
        _ => return Err(format!("{url:?} is not an http(s) URL")),
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!("{url:?} has a query or a #fragment"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("{url:?} holds a user name or password"));
    }
    // As parsed: what Mattermost is given is what was checked.
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_urls() {
        assert_eq!(
            site_url("https://chat.example.com/").unwrap(),
            "https://chat.example.com"
        );
        assert_eq!(
            site_url("https://chat.example.com:8443/mm").unwrap(),
            "https://chat.example.com:8443/mm"
        );
        assert!(site_url("http://127.0.0.1:8065").is_ok());
        assert_eq!(
            site_url("https://Chat.Example.com:443/").unwrap(),
            "https://chat.example.com"
        );
        assert!(
            site_url("http://chat.example.com")
                .unwrap_err()
                .contains("loopback")
        );
        assert!(site_url("ftp://chat.example.com").is_err());
        assert!(site_url("https://chat.example.com/?a=1").is_err());
        assert!(site_url("https://u:p@chat.example.com").is_err());
        assert!(site_url("chat.example.com").is_err());
        assert!(callback_url("https://hooks.example.com/mm").is_ok());
        assert!(callback_url("http://127.0.0.1:8766").is_ok());
        assert!(
            callback_url("http://hooks.example.com")
                .unwrap_err()
                .contains("loopback")
        );
        assert!(callback_url("hooks.example.com").is_err());
        assert!(callback_url("https://u:p@hooks.example.com").is_err());
        assert_eq!(
            callback_url("https://Hooks.Example.com:443/mm/").unwrap(),
            "https://hooks.example.com/mm"
        );
    }
}
