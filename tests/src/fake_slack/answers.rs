//! What the fake answers: Slack's JSON envelopes (`ok: true` with the
//! method's fields, or `ok: false` with an error code and, for validation
//! errors, Slack's `errors` and `response_metadata.messages`), 429s, and
//! plain text for the upload URL.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};

pub(crate) type Answer = Response<Full<Bytes>>;

/// Slack's `ok: false` answer, with the details its validation adds.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub code: &'static str,
    pub messages: Vec<String>,
}

impl Refusal {
    pub fn code(code: &'static str) -> Refusal {
        Refusal {
            code,
            messages: Vec::new(),
        }
    }

    pub fn with(code: &'static str, message: String) -> Refusal {
        Refusal {
            code,
            messages: vec![message],
        }
    }

    /// `invalid_arguments` for a missing required field, worded as Slack
    /// words it.
    pub fn missing(field: &str) -> Refusal {
        Refusal::with(
            "invalid_arguments",
            format!("missing required field: {field}"),
        )
    }

    pub fn answer(self) -> Answer {
        if self.messages.is_empty() {
            return slack_error(self.code);
        }
        let logged: Vec<String> = self
            .messages
            .iter()
            .map(|m| format!("[ERROR] {m}"))
            .collect();
        json_answer(
            StatusCode::OK,
            json!({
                "ok": false,
                "error": self.code,
                "errors": self.messages,
                "response_metadata": { "messages": logged },
            }),
        )
    }
}

/// A method's result: its answer's fields (`ok: true` is added), or why not.
pub(crate) type Outcome = Result<Value, Refusal>;

pub(crate) fn outcome_answer(outcome: Outcome) -> Answer {
    match outcome {
        Ok(Value::Object(mut fields)) => {
            fields.insert("ok".into(), Value::Bool(true));
            json_answer(StatusCode::OK, Value::Object(fields))
        }
        Ok(other) => json_answer(StatusCode::OK, other),
        Err(refusal) => refusal.answer(),
    }
}

pub(crate) fn json_answer(status: StatusCode, body: Value) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    let json = header::HeaderValue::from_static("application/json; charset=utf-8");
    answer.headers_mut().insert(header::CONTENT_TYPE, json);
    answer
}

pub(crate) fn slack_error(code: &str) -> Answer {
    json_answer(StatusCode::OK, json!({ "ok": false, "error": code }))
}

pub(crate) fn rate_limited(retry_after_secs: u64) -> Answer {
    let body = json!({ "ok": false, "error": "ratelimited" });
    let mut answer = json_answer(StatusCode::TOO_MANY_REQUESTS, body);
    answer
        .headers_mut()
        .insert(header::RETRY_AFTER, retry_after_secs.into());
    answer
}

pub(crate) fn text(status: StatusCode, body: &str) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    let plain = header::HeaderValue::from_static("text/plain; charset=utf-8");
    answer.headers_mut().insert(header::CONTENT_TYPE, plain);
    answer
}
