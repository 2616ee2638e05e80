//! Slack's v2 upload: files.getUploadURLExternal, the bytes POSTed to the
//! upload URL, files.completeUploadExternal.

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::answers::{Answer, Outcome, Refusal, rate_limited, text};
use super::http_forms::{Args, content_type, json_arg, multipart, param, str_arg};
use super::records::SharedFile;
use super::state::{Fault, PendingUpload, Shared};
use super::workspace::BOT_USER_ID;

/// files.getUploadURLExternal's limit on `alt_txt`.
const MAX_ALT_TXT_CHARS: usize = 1000;

pub(crate) fn get_upload_url(shared: &Shared, args: &Args) -> Outcome {
    let filename = str_arg(args, "filename").ok_or_else(|| Refusal::missing("filename"))?;
    let length = str_arg(args, "length").ok_or_else(|| Refusal::missing("length"))?;
    let length: usize = length.parse().map_err(|_| {
        Refusal::with(
            "invalid_arguments",
            "must be an integer [json-pointer:/length]".into(),
        )
    })?;
    if length == 0 {
        return Err(Refusal::code("missing_argument"));
    }
    let alt_txt = str_arg(args, "alt_txt");
    if alt_txt
        .as_ref()
        .is_some_and(|alt| alt.chars().count() > MAX_ALT_TXT_CHARS)
    {
        return Err(Refusal::code("alt_txt_too_large"));
    }
    let mut state = shared.state();
    let file_id = format!("F{:010}", state.workspace.next_serial());
    let pending = PendingUpload {
        filename,
        length,
        alt_txt,
        bytes: None,
    };
    state.pending.insert(file_id.clone(), pending);
    let upload_url = format!("{}/upload/{file_id}", shared.base_url);
    Ok(json!({ "upload_url": upload_url, "file_id": file_id }))
}

/// Each file shared into a channel becomes a [`SharedFile`] and a message
/// of the bot's in the conversation's history (text: the initial comment).
pub(crate) fn complete_upload(shared: &Shared, args: &Args) -> Outcome {
    let invalid = |message: &str| Refusal::with("invalid_arguments", message.to_string());
    let files = match json_arg(args, "files") {
        None => return Err(invalid("missing required field: files")),
        Some(Ok(Value::Array(files))) if !files.is_empty() => files,
        Some(_) => return Err(invalid("must be a non-empty array [json-pointer:/files]")),
    };
    let mut wanted = Vec::new();
    for file in &files {
        let id = file.get("id").and_then(Value::as_str);
        let id = id.ok_or_else(|| invalid("missing required field: id [json-pointer:/files]"))?;
        let title = file
            .get("title")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        wanted.push((id.to_string(), title.map(str::to_string)));
    }
    let mut channels: Vec<String> = str_arg(args, "channels")
        .map(|list| list.split(',').map(|c| c.trim().to_string()).collect())
        .unwrap_or_default();
    channels.extend(str_arg(args, "channel_id"));
    let thread_ts = str_arg(args, "thread_ts");
    let initial_comment = str_arg(args, "initial_comment");

    let mut state = shared.state();
    for channel in &channels {
        state
            .workspace
            .postable(Some(channel))
            .map_err(Refusal::code)?;
    }
    let uploaded = |id: &String| state.pending.get(id).is_some_and(|p| p.bytes.is_some());
    if !wanted.iter().all(|(id, _)| uploaded(id)) {
        return Err(Refusal::code("file_not_found"));
    }
    let targets: Vec<Option<String>> = if channels.is_empty() {
        vec![None]
    } else {
        channels.into_iter().map(Some).collect()
    };
    let comment = initial_comment.clone().unwrap_or_default();
    let share_ts: Vec<Option<String>> = targets
        .iter()
        .map(|target| {
            let channel = target.as_deref()?;
            let ts =
                state
                    .workspace
                    .post(channel, BOT_USER_ID, &comment, None, thread_ts.as_deref());
            Some(ts)
        })
        .collect();
    let mut answered = Vec::new();
    for (file_id, title) in wanted {
        let Some(pending) = state.pending.remove(&file_id) else {
            return Err(Refusal::code("file_not_found"));
        };
        let title = title.unwrap_or_else(|| pending.filename.clone());
        let bytes = pending.bytes.unwrap_or_default();
        answered.push(json!({
            "id": file_id,
            "name": pending.filename,
            "title": title,
            "mimetype": "application/octet-stream",
            "size": bytes.len(),
            "permalink": format!("{}/files/{file_id}", shared.base_url),
        }));
        for (channel, ts) in targets.iter().zip(&share_ts) {
            state.files.push(SharedFile {
                file_id: file_id.clone(),
                channel: channel.clone(),
                ts: ts.clone(),
                thread_ts: thread_ts.clone(),
                filename: pending.filename.clone(),
                title: title.clone(),
                initial_comment: initial_comment.clone(),
                alt_txt: pending.alt_txt.clone(),
                bytes: bytes.clone(),
            });
        }
    }
    Ok(json!({ "files": answered }))
}

/// The upload URL: stores the bytes of a pending file.
pub(crate) async fn upload(shared: &Shared, file_id: &str, req: Request<Incoming>) -> Answer {
    match shared.fault("upload") {
        Some(Fault::RateLimited(secs)) => return rate_limited(secs),
        Some(Fault::Error(error)) => return text(StatusCode::INTERNAL_SERVER_ERROR, &error),
        None => {}
    }
    if req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST the file");
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return text(StatusCode::BAD_REQUEST, "truncated body");
    };
    let bytes = match content_type(&parts.headers) {
        Some((essence, params)) if essence == "multipart/form-data" => {
            let file = param(&params, "boundary")
                .map(|boundary| multipart(&body, &boundary))
                .and_then(|parts| parts.into_iter().find(|part| part.name == "file"));
            match file {
                Some(part) => part.bytes,
                None => return text(StatusCode::BAD_REQUEST, "no file part"),
            }
        }
        _ => body.to_vec(),
    };
    let mut state = shared.state();
    let Some(pending) = state.pending.get_mut(file_id) else {
        return text(StatusCode::NOT_FOUND, "unknown upload");
    };
    if bytes.len() != pending.length {
        let message = format!("expected {} bytes, got {}", pending.length, bytes.len());
        return text(StatusCode::BAD_REQUEST, &message);
    }
    let answer = format!("OK - {}", bytes.len());
    pending.bytes = Some(bytes);
    text(StatusCode::OK, &answer)
}
