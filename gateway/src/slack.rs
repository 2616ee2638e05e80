//! The Slack implementation of [`ChatBackend`]: slack-morphism's Web API
//! client pointed at a configurable API base URL (`https://slack.com/api/`
//! in production, a fake Slack on `http://127.0.0.1:PORT/api/` in tests).
//!
//! - Uploads use Slack's v2 flow: files.getUploadURLExternal, a POST of the
//!   bytes to the returned URL, files.completeUploadExternal into the thread.
//! - chat.postMessage goes through the client's generic POST with the
//!   caller's blocks as they are, so block types and fields slack-morphism
//!   does not model (or models partially) reach Slack unchanged.
//! - A rate-limit answer (HTTP 429) is retried after its Retry-After, up to
//!   [`MAX_RATE_LIMIT_RETRIES`] times; a Retry-After longer than
//!   [`MAX_RETRY_WAIT`] fails at once with the time to wait.

use std::future::Future;
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;

use crate::chat::{ChatBackend, ChatError, Posted, ThreadRef, Upload, Uploaded};

/// How many times one call is retried after rate-limit answers.
pub const MAX_RATE_LIMIT_RETRIES: u32 = 3;
/// The longest single wait for a Retry-After.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// The wait when a rate-limit answer has no Retry-After.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(1);
/// The content type of uploaded bytes; Slack sniffs the real type itself.
const UPLOAD_CONTENT_TYPE: &str = "application/octet-stream";

/// Why a [`SlackBackend`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SlackSetupError {
    #[error("not an http(s) URL: {0:?}")]
    InvalidUrl(String),
    /// The bot token must not travel in clear text beyond this machine.
    #[error("plain http is allowed only to a loopback host, not {0:?}")]
    InsecureUrl(String),
    #[error("cannot load the system's root certificates: {0}")]
    RootCertificates(#[source] std::io::Error),
}

/// Posts into Slack threads as the bot whose token it holds.
pub struct SlackBackend {
    /// The client for the URL's scheme: https with the system's roots, or
    /// plain http to a loopback fake.
    api: Box<dyn ChatBackend>,
}

impl SlackBackend {
    /// A backend calling the Web API at `api_url` (e.g.
    /// `https://slack.com/api/` or `http://127.0.0.1:PORT/api/`) with the
    /// bot token `bot_token` (`xoxb-...`).
    pub fn new(api_url: &str, bot_token: String) -> Result<SlackBackend, SlackSetupError> {
        let invalid = || SlackSetupError::InvalidUrl(api_url.to_string());
        let uri: http::Uri = api_url.parse().map_err(|_| invalid())?;
        let host = uri.host().ok_or_else(invalid)?;
        // slack-morphism joins the base and the method with a '/'.
        let base = api_url.trim_end_matches('/');
        let token = SlackApiToken::new(SlackApiTokenValue::new(bot_token));
        let api: Box<dyn ChatBackend> = match uri.scheme_str() {
            Some("https") => {
                let connector = SlackClientHyperConnector::new()
                    .map_err(SlackSetupError::RootCertificates)?
                    .with_slack_api_url(base);
                Box::new(Api::new(connector, token))
            }
            Some("http") if is_loopback(host) => {
                let connector = SlackClientHyperConnector::with_connector(HttpConnector::new())
                    .with_slack_api_url(base);
                Box::new(Api::new(connector, token))
            }
            Some("http") => return Err(SlackSetupError::InsecureUrl(api_url.to_string())),
            _ => return Err(invalid()),
        };
        Ok(SlackBackend { api })
    }
}

#[async_trait::async_trait]
impl ChatBackend for SlackBackend {
    async fn upload_file(&self, thread: &ThreadRef, upload: Upload) -> Result<Uploaded, ChatError> {
        self.api.upload_file(thread, upload).await
    }

    async fn post_blocks(
        &self,
        thread: &ThreadRef,
        text: &str,
        blocks: &Value,
    ) -> Result<Posted, ChatError> {
        self.api.post_blocks(thread, text, blocks).await
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The calls themselves, over either connector type.
struct Api<C: SlackClientHttpConnector + Send> {
    client: SlackClient<C>,
    token: SlackApiToken,
}

impl<C: SlackClientHttpConnector + Send + Sync> Api<C> {
    fn new(connector: C, token: SlackApiToken) -> Self {
        Api {
            client: SlackClient::new(connector),
            token,
        }
    }
}

#[async_trait::async_trait]
impl<C> ChatBackend for Api<C>
where
    C: SlackClientHttpConnector + Send + Sync + 'static,
{
    async fn upload_file(&self, thread: &ThreadRef, upload: Upload) -> Result<Uploaded, ChatError> {
        let session = self.client.open_session(&self.token);
        let title = upload.title.unwrap_or_else(|| upload.filename.clone());

        let ticket_request =
            SlackApiFilesGetUploadUrlExternalRequest::new(upload.filename, upload.bytes.len())
                .opt_alt_txt(upload.alt_text);
        let ticket = retrying(|| session.get_upload_url_external(&ticket_request)).await?;

        let bytes_request = SlackApiFilesUploadViaUrlRequest::new(
            ticket.upload_url,
            upload.bytes,
            UPLOAD_CONTENT_TYPE.to_string(),
        );
        retrying(|| session.files_upload_via_url(&bytes_request)).await?;

        let complete_request = SlackApiFilesCompleteUploadExternalRequest::new(vec![
            SlackApiFilesComplete::new(ticket.file_id.clone()).with_title(title),
        ])
        .with_channel_id(SlackChannelId::new(thread.channel.clone()))
        .with_thread_ts(SlackTs::new(thread.thread_ts.clone()))
        .opt_initial_comment(upload.comment);
        let completed =
            retrying(|| session.files_complete_upload_external(&complete_request)).await?;

        let permalink = completed
            .files
            .iter()
            .find(|file| file.id == ticket.file_id)
            .and_then(|file| file.permalink.as_ref())
            .map(|url| url.to_string());
        Ok(Uploaded {
            file_id: ticket.file_id.0,
            permalink,
        })
    }

    async fn post_blocks(
        &self,
        thread: &ThreadRef,
        text: &str,
        blocks: &Value,
    ) -> Result<Posted, ChatError> {
        // Only a check (it refuses a non-array; unknown block types parse as
        // `SlackBlock::Unknown`): the blocks are sent as given, since a typed
        // round trip drops fields slack-morphism does not model.
        serde_json::from_value::<Vec<SlackBlock>>(blocks.clone())
            .map_err(|err| ChatError::InvalidBlocks(err.to_string()))?;
        let request = json!({
            "channel": thread.channel,
            "thread_ts": thread.thread_ts,
            "text": text,
            "blocks": blocks,
        });
        let session = self.client.open_session(&self.token);
        let posted: SlackApiChatPostMessageResponse = retrying(|| {
            session
                .http_session_api
                .http_post("chat.postMessage", &request, None)
        })
        .await?;
        Ok(Posted {
            channel: posted.channel.0,
            ts: posted.ts.0,
        })
    }
}

/// Runs `call`, and again after each rate-limit answer's Retry-After (at
/// most [`MAX_RATE_LIMIT_RETRIES`] times).
async fn retrying<T, F, Fut>(mut call: F) -> Result<T, ChatError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SlackClientError>>,
{
    let mut retries = 0;
    loop {
        match call().await {
            Ok(answer) => return Ok(answer),
            Err(SlackClientError::RateLimitError(limited)) => {
                let retry_after = limited.retry_after.unwrap_or(DEFAULT_RETRY_WAIT);
                // Longer than a tool call should block: say when to retry
                // instead of retrying early into another 429.
                if retries == MAX_RATE_LIMIT_RETRIES || retry_after > MAX_RETRY_WAIT {
                    return Err(ChatError::RateLimited {
                        retry_after_secs: retry_after.as_secs(),
                    });
                }
                retries += 1;
                tracing::warn!(
                    ?retry_after,
                    retries,
                    "Slack is rate limiting; waiting to retry"
                );
                tokio::time::sleep(retry_after).await;
            }
            Err(err) => return Err(chat_error(err)),
        }
    }
}

/// Slack's answer as a [`ChatError`].
fn chat_error(err: SlackClientError) -> ChatError {
    match err {
        SlackClientError::ApiError(api)
            if api.code == "invalid_blocks" || api.code == "invalid_blocks_format" =>
        {
            // Slack lists what is wrong in `errors` (e.g. "unsupported type:
            // table [json-pointer:/blocks/0/type]").
            let details = api.errors.map(|errors| errors.join("; "));
            ChatError::InvalidBlocks(details.unwrap_or(api.code))
        }
        SlackClientError::ApiError(api) => ChatError::Api(api.code),
        SlackClientError::RateLimitError(limited) => ChatError::RateLimited {
            retry_after_secs: limited.retry_after.unwrap_or(DEFAULT_RETRY_WAIT).as_secs(),
        },
        other => ChatError::Transport(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let token = || "xoxb-test".to_string();
        assert!(SlackBackend::new("http://127.0.0.1:9/api/", token()).is_ok());
        assert!(SlackBackend::new("http://[::1]:9/api", token()).is_ok());
        assert!(SlackBackend::new("http://localhost:9/api/", token()).is_ok());
        assert!(matches!(
            SlackBackend::new("http://slack.com/api/", token()),
            Err(SlackSetupError::InsecureUrl(_))
        ));
        assert!(matches!(
            SlackBackend::new("ftp://127.0.0.1/api/", token()),
            Err(SlackSetupError::InvalidUrl(_))
        ));
        assert!(matches!(
            SlackBackend::new("not a url", token()),
            Err(SlackSetupError::InvalidUrl(_))
        ));
    }

    #[test]
    fn rate_limit_after_retries_keeps_retry_after() {
        let err = SlackClientError::RateLimitError(
            slack_morphism::errors::SlackRateLimitError::new()
                .with_retry_after(Duration::from_secs(7)),
        );
        assert_eq!(
            chat_error(err),
            ChatError::RateLimited {
                retry_after_secs: 7
            }
        );
    }
}
