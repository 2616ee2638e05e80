//! Requests as Slack takes them: the token as `Authorization: Bearer` or a
//! `token` argument; arguments in the query string and in a
//! form-urlencoded, multipart or JSON body. JSON-typed arguments (`blocks`,
//! `view`, `files`) may come as JSON or as JSON text.

use http::{HeaderMap, Method, header};
use serde_json::{Map, Value};

/// A request's arguments, by name.
pub(crate) type Args = Map<String, Value>;

/// The arguments from the query string and the body, or the error code a
/// body that cannot be read gets.
pub(crate) fn arguments(
    method: &Method,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Args, &'static str> {
    let mut args = Args::new();
    for (name, value) in form_pairs(query.unwrap_or_default()) {
        args.insert(name, Value::String(value));
    }
    if method != Method::POST || body.is_empty() {
        return Ok(args);
    }
    let Some((essence, params)) = content_type(headers) else {
        return Err("missing_post_type");
    };
    let charset = param(&params, "charset").map(|c| c.to_ascii_lowercase());
    if charset.is_some_and(|c| c != "utf-8" && c != "iso-8859-1") {
        return Err("invalid_charset");
    }
    match essence.as_str() {
        "application/json" => match serde_json::from_slice(body) {
            Ok(Value::Object(fields)) => args.extend(fields),
            _ => return Err("invalid_form_data"),
        },
        "application/x-www-form-urlencoded" => {
            let body = std::str::from_utf8(body).map_err(|_| "invalid_form_data")?;
            for (name, value) in form_pairs(body) {
                args.insert(name, Value::String(value));
            }
        }
        "multipart/form-data" => {
            let boundary = param(&params, "boundary").ok_or("invalid_form_data")?;
            for part in multipart(body, &boundary) {
                let value = String::from_utf8_lossy(&part.bytes).into_owned();
                args.insert(part.name, Value::String(value));
            }
        }
        _ => return Err("invalid_post_type"),
    }
    Ok(args)
}

/// A string argument; empty counts as absent, as in Slack.
pub(crate) fn str_arg(args: &Args, name: &str) -> Option<String> {
    match args.get(name)? {
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A boolean argument: `true` / `1` (JSON or text) is true.
pub(crate) fn bool_arg(args: &Args, name: &str) -> bool {
    match args.get(name) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true" || s == "1",
        Some(Value::Number(n)) => n.as_u64() == Some(1),
        _ => false,
    }
}

/// A JSON-typed argument, given as JSON or as JSON text.
pub(crate) fn json_arg(args: &Args, name: &str) -> Option<Result<Value, serde_json::Error>> {
    match args.get(name)? {
        Value::String(s) => Some(serde_json::from_str(s)),
        other => Some(Ok(other.clone())),
    }
}

/// A list argument: a JSON array of strings, or comma-separated text.
pub(crate) fn list_arg(args: &Args, name: &str) -> Option<Vec<String>> {
    let items: Vec<String> = match args.get(name)? {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => s.trim().to_string(),
                other => other.to_string(),
            })
            .collect(),
        Value::String(s) => s.split(',').map(|item| item.trim().to_string()).collect(),
        _ => return None,
    };
    let items: Vec<String> = items.into_iter().filter(|i| !i.is_empty()).collect();
    (!items.is_empty()).then_some(items)
}

pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// The media type (lowercase) and its parameters.
pub(crate) fn content_type(headers: &HeaderMap) -> Option<(String, Vec<(String, String)>)> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mut pieces = value.split(';');
    let essence = pieces.next()?.trim().to_ascii_lowercase();
    let params = pieces
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().to_ascii_lowercase(),
                v.trim().trim_matches('"').to_string(),
            )
        })
        .collect();
    Some((essence, params))
}

pub(crate) fn param(params: &[(String, String)], name: &str) -> Option<String> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// `a=1&b=x%20y` as pairs, decoded.
pub(crate) fn form_pairs(encoded: &str) -> Vec<(String, String)> {
    encoded
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (other, _) => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) use crate::multipart::multipart;

/// Lowercase hex of `text`: the fake's opaque pagination cursors.
pub(crate) fn hex_encode(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The text [`hex_encode`] made, or `None` for anything else.
pub(crate) fn hex_decode(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode() {
        let pairs = form_pairs("a=1&b=x%20y+z&c=%7B%22k%22%3A1%7D&d");
        let want = [("a", "1"), ("b", "x y z"), ("c", "{\"k\":1}"), ("d", "")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(pairs, want);
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn multipart_parts() {
        let body = b"--XX\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nhi\r\n\
            --XX\r\nContent-Disposition: form-data; filename=\"a.bin\"; name=\"file\"\r\n\
            Content-Type: application/octet-stream\r\n\r\n\x00\r\n\x01\r\n--XX--\r\n";
        let parts = multipart(body, "XX");
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), parts[0].bytes.as_slice()),
            ("title", &b"hi"[..])
        );
        assert_eq!(
            (parts[1].name.as_str(), parts[1].bytes.as_slice()),
            ("file", &b"\x00\r\n\x01"[..])
        );
    }

    #[test]
    fn lists_come_as_json_or_text() {
        let mut args = Args::new();
        args.insert("a".into(), serde_json::json!(["U1", "U2"]));
        args.insert("b".into(), Value::String("U1, U2,".into()));
        args.insert("c".into(), Value::String(String::new()));
        let want = Some(vec!["U1".to_string(), "U2".to_string()]);
        assert_eq!(list_arg(&args, "a"), want);
        assert_eq!(list_arg(&args, "b"), want);
        assert_eq!(list_arg(&args, "c"), None);
    }

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let cursor = hex_encode("user_id:U1");
        assert_eq!(hex_decode(&cursor).as_deref(), Some("user_id:U1"));
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("ff"), None);
    }
}
