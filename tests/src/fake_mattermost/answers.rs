//! What the fake answers: JSON bodies, and errors as Mattermost's
//! `AppError` (`{id, message, detailed_error, request_id, status_code}`,
//! `definitions.yaml` `AppError` and `introduction.yaml` "errors"), each
//! with the id the server gives for that failure.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};

pub(crate) type Answer = Response<Full<Bytes>>;

/// An endpoint's result: a status and body, or an error.
pub(crate) type Outcome = Result<(StatusCode, Value), AppError>;

/// A Mattermost `AppError`.
#[derive(Debug, Clone)]
pub(crate) struct AppError {
    pub status: StatusCode,
    pub id: String,
    pub message: String,
    pub detailed_error: String,
}

impl AppError {
    pub fn new(status: StatusCode, id: &str, message: &str) -> AppError {
        AppError {
            status,
            id: id.to_string(),
            message: message.to_string(),
            detailed_error: String::new(),
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> AppError {
        self.detailed_error = detail.into();
        self
    }

    /// No token, or not the bot's (`api.context.session_expired.app_error`).
    pub fn unauthorized() -> AppError {
        AppError::new(
            StatusCode::UNAUTHORIZED,
            "api.context.session_expired.app_error",
            "Invalid or expired session, please login again.",
        )
    }

    /// A permission the caller lacks.
    pub fn permissions(permission: &str) -> AppError {
        AppError::new(
            StatusCode::FORBIDDEN,
            "api.context.permissions.app_error",
            "You do not have the appropriate permissions.",
        )
        .detail(format!("userId=…, permission={permission}"))
    }

    /// A route the API does not have.
    pub fn no_route() -> AppError {
        AppError::new(
            StatusCode::NOT_FOUND,
            "api.context.404.app_error",
            "Sorry, we could not find the page.",
        )
    }

    pub fn invalid_param(name: &str) -> AppError {
        AppError::new(
            StatusCode::BAD_REQUEST,
            "api.context.invalid_param.app_error",
            &format!("Invalid {name} parameter."),
        )
    }

    pub fn invalid_body(name: &str) -> AppError {
        AppError::new(
            StatusCode::BAD_REQUEST,
            "api.context.invalid_body_param.app_error",
            &format!("Invalid or missing {name} in request body."),
        )
    }

    pub fn bad_request(id: &str, message: &str) -> AppError {
        AppError::new(StatusCode::BAD_REQUEST, id, message)
    }

    pub fn not_found(id: &str, message: &str) -> AppError {
        AppError::new(StatusCode::NOT_FOUND, id, message)
    }

    pub fn to_json(&self, request_id: &str) -> Value {
        json!({
            "id": self.id,
            "message": self.message,
            "detailed_error": self.detailed_error,
            "request_id": request_id,
            "status_code": self.status.as_u16(),
        })
    }

    pub fn answer(&self, request_id: &str) -> Answer {
        json_answer(self.status, &self.to_json(request_id))
    }
}

pub(crate) fn json_answer(status: StatusCode, body: &Value) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    let json = HeaderValue::from_static("application/json");
    answer.headers_mut().insert(header::CONTENT_TYPE, json);
    answer
}

/// What Mattermost's rate limiter (throttled) answers past the limit: 429,
/// `limit exceeded` as text, `Retry-After` and the `X-Ratelimit-*`
/// headers (`introduction.yaml`, "rate limiting").
pub(crate) fn rate_limited(retry_after_secs: u64) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from_static(b"limit exceeded\n")));
    *answer.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = answer.headers_mut();
    let text = HeaderValue::from_static("text/plain; charset=utf-8");
    headers.insert(header::CONTENT_TYPE, text);
    headers.insert(header::RETRY_AFTER, retry_after_secs.into());
    headers.insert("X-Ratelimit-Limit", 10.into());
    headers.insert("X-Ratelimit-Remaining", 0.into());
    headers.insert("X-Ratelimit-Reset", retry_after_secs.into());
    answer
}
