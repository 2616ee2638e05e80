//! multipart/form-data bodies as the fakes read them (Slack's uploads and
//! form posts, Mattermost's `POST /files`).

/// One part of a multipart body.
pub struct Part {
    pub name: String,
    pub filename: Option<String>,
    pub bytes: Vec<u8>,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A `name="value"` parameter of a Content-Disposition line.
fn disposition_param(head: &str, name: &str) -> Option<String> {
    let line = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?;
    line.split(';').find_map(|p| {
        let (key, value) = p.trim().split_once('=')?;
        (key.eq_ignore_ascii_case(name)).then(|| value.trim().trim_matches('"').to_string())
    })
}

/// The parts of a multipart/form-data body.
pub fn multipart(body: &[u8], boundary: &str) -> Vec<Part> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let Some(first) = find(body, delimiter.as_bytes()) else {
        return parts;
    };
    let mut rest = &body[first + delimiter.len()..];
    while !rest.starts_with(b"--") {
        let Some(end) = find(rest, delimiter.as_bytes()) else {
            break;
        };
        let part = rest[..end].strip_prefix(b"\r\n").unwrap_or(&rest[..end]);
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        if let Some(split) = find(part, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&part[..split]);
            if let Some(name) = disposition_param(&head, "name") {
                let filename = disposition_param(&head, "filename");
                let bytes = part[split + 4..].to_vec();
                parts.push(Part {
                    name,
                    filename,
                    bytes,
                });
            }
        }
        rest = &rest[end + delimiter.len()..];
    }
    parts
}
