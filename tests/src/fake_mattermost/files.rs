//! `POST /files` (`files.yaml`): a multipart/form-data body with
//! `channel_id` and one or more `files` parts (and optional `client_ids`),
//! or the raw bytes of one file with `channel_id` and `filename` in the
//! query. The caller must be able to post in the channel (`upload_file`,
//! a member's permission); a file over `FileSettings.MaxFileSize` is 413
//! (`api.file.upload_file.too_large_detailed.app_error`). Answers 201
//! `{file_infos, client_ids}`; the bytes are kept.

use std::collections::HashMap;

use http::{HeaderMap, StatusCode, header};
use serde_json::json;

use super::answers::{AppError, Outcome};
use super::ids;
use super::model::StoredFile;
use super::state::State;
use crate::multipart::multipart;

fn boundary(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let (essence, params) = value.split_once(';')?;
    if !essence.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (key, value) = p.trim().split_once('=')?;
        key.eq_ignore_ascii_case("boundary")
            .then(|| value.trim_matches('"').to_string())
    })
}

fn too_large(max: u64) -> AppError {
    let id = "api.file.upload_file.too_large_detailed.app_error";
    let message =
        format!("Unable to upload file. File is too large. Max file size is {max} bytes.");
    AppError::new(StatusCode::PAYLOAD_TOO_LARGE, id, &message)
}

pub(crate) fn upload(
    state: &mut State,
    caller: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Outcome {
    let max = state.max_file_size;
    let (channel_id, client_ids, files) = match boundary(headers) {
        Some(boundary) => {
            let parts = multipart(body, &boundary);
            let text = |name: &str| {
                parts
                    .iter()
                    .filter(|p| p.name == name && p.filename.is_none())
                    .map(|p| String::from_utf8_lossy(&p.bytes).into_owned())
                    .collect::<Vec<_>>()
            };
            let channel_id = text("channel_id")
                .pop()
                .or_else(|| query.get("channel_id").cloned());
            let files: Vec<(String, Vec<u8>)> = parts
                .iter()
                .filter(|p| p.name == "files")
                .map(|p| (p.filename.clone().unwrap_or_default(), p.bytes.clone()))
                .collect();
            (channel_id, text("client_ids"), files)
        }
        None => {
            let filename = query
                .get("filename")
                .cloned()
                .ok_or_else(|| AppError::invalid_param("filename"))?;
            (
                query.get("channel_id").cloned(),
                Vec::new(),
                vec![(filename, body.to_vec())],
            )
        }
    };
    let channel_id = channel_id
        .filter(|c| ids::is_valid_id(c))
        .ok_or_else(|| AppError::invalid_param("channel_id"))?;
    if !state
        .channel(&channel_id)
        .is_some_and(|c| c.is_member(caller))
    {
        return Err(AppError::permissions("upload_file"));
    }
    if files.is_empty() {
        let id = "api.file.upload_file.incorrect_number_of_files.app_error";
        return Err(AppError::bad_request(
            id,
            "Unable to upload files. Incorrect number of files specified.",
        ));
    }
    if files.iter().any(|(_, bytes)| bytes.len() as u64 > max) {
        return Err(too_large(max));
    }
    let mut infos = Vec::new();
    for (name, bytes) in files {
        let create_at = state.now();
        let file = StoredFile {
            id: ids::new_id(),
            user_id: caller.to_string(),
            channel_id: channel_id.clone(),
            post_id: None,
            name,
            bytes,
            create_at,
        };
        infos.push(file.to_json());
        state.files.push(file);
    }
    let answer = json!({ "file_infos": infos, "client_ids": client_ids });
    Ok((StatusCode::CREATED, answer))
}

/// The most bytes a request may carry before the fake stops reading:
/// the file limit and room for the form around it.
pub(crate) fn body_cap(max_file_size: u64) -> usize {
    usize::try_from(max_file_size.saturating_mul(4).saturating_add(1 << 20)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_parts_keep_their_filenames() {
        let body = b"--XX\r\nContent-Disposition: form-data; name=\"channel_id\"\r\n\r\nabc\r\n\
            --XX\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.txt\"\r\n\
            Content-Type: text/plain\r\n\r\n\x00\r\n\x01\r\n--XX--\r\n";
        let parts = multipart(body, "XX");
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), parts[0].filename.as_deref()),
            ("channel_id", None)
        );
        assert_eq!(parts[1].filename.as_deref(), Some("a.txt"));
        assert_eq!(parts[1].bytes, b"\x00\r\n\x01");
    }
}
