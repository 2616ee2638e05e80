//! The proxy's own steps, without a connection: what the head limits
//! refuse, each at its limit and one past it, and the `Alt-Svc` it adds.

use http::Request;

use super::*;

fn limits() -> RequestLimits {
    RequestLimits {
        max_uri_bytes: 32,
        max_headers: 4,
        max_body_bytes: Some(1000),
        min_body_rate: None,
    }
}

/// A body of `length` bytes, as its framing declared it (nothing in it).
struct Declared(Option<u64>);

impl hyper::body::Body for Declared {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(None)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.0.map_or_else(
            hyper::body::SizeHint::default,
            hyper::body::SizeHint::with_exact,
        )
    }
}

/// A request whose body declares `length` (as a visitor's framing says
/// it: its Content-Length, and the body's own size).
fn request(target: &str, headers: usize, length: Option<u64>) -> Request<Declared> {
    let mut builder = Request::post(target);
    for i in 0..headers {
        builder = builder.header(format!("x-h{i}"), "v");
    }
    if let Some(length) = length {
        builder = builder.header(header::CONTENT_LENGTH, length);
    }
    builder.body(Declared(length)).expect("request")
}

#[test]
fn the_target_is_taken_up_to_its_limit() {
    let at_limit = format!("/{}", "a".repeat(31));
    assert_eq!(limits().check(&request(&at_limit, 0, None)), Ok(()));
    let past = format!("{at_limit}b");
    assert_eq!(
        limits().check(&request(&past, 0, None)),
        Err(EdgeError::UriTooLong(32))
    );
    // The query counts: it is part of the target.
    let with_query = format!("/{}?q", "a".repeat(30));
    assert_eq!(
        limits().check(&request(&with_query, 0, None)),
        Err(EdgeError::UriTooLong(32))
    );
}

#[test]
fn header_fields_are_taken_up_to_their_limit() {
    assert_eq!(limits().check(&request("/", 4, None)), Ok(()));
    assert_eq!(
        limits().check(&request("/", 5, None)),
        Err(EdgeError::TooManyHeaders(4))
    );
}

#[test]
fn a_declared_body_is_taken_up_to_the_cap_and_refused_past_it_before_any_byte() {
    // Content-Length is a field too: three others and it make four.
    assert_eq!(limits().check(&request("/", 3, Some(1000))), Ok(()));
    assert_eq!(
        limits().check(&request("/", 3, Some(1001))),
        Err(EdgeError::BodyTooLarge(1000))
    );
    let uncapped = RequestLimits {
        max_body_bytes: None,
        ..limits()
    };
    assert_eq!(uncapped.check(&request("/", 3, Some(u64::MAX))), Ok(()));
}

#[test]
fn alt_svc_advertises_http3_on_the_port_for_a_day() {
    assert_eq!(alt_svc(8443), "h3=\":8443\"; ma=86400");
}
