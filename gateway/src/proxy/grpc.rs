//! gRPC as the proxy sees it: calls are requests whose `content-type` is
//! `application/grpc` (or `application/grpc+proto` and the like).
//!
//! - When the node itself cannot deliver a call, it answers as gRPC
//!   clients understand, as Envoy does: HTTP 200, trailers only, with
//!   `grpc-status` and `grpc-message` ([`status_of`]): 14 UNAVAILABLE for
//!   no replica, a failed connect or an open circuit, 4 DEADLINE_EXCEEDED
//!   for the first-answer bound.
//! - A replica's trailers-only `grpc-status` 14 counts as a 503 for
//!   retries, ejection and the breaker ([`effective_status`]); other codes
//!   are answers, like a 500.
//! - The client's `grpc-timeout` caps the first-answer bound of the call
//!   ([`timeout`]).

use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::error::ProxyError;
use super::incoming::Fields;
use crate::body::GatewayBody;
use crate::h1::response::ResponseHead;

/// gRPC status codes the node writes itself.
pub mod code {
    pub const UNIMPLEMENTED: u32 = 12;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
    pub const DEADLINE_EXCEEDED: u32 = 4;
    pub const CANCELLED: u32 = 1;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
}

/// Whether a `content-type` names gRPC.
pub fn is_grpc_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// Whether a request is a gRPC call.
pub fn is_call(fields: &Fields<'_>) -> bool {
    fields.get(b"content-type").is_some_and(is_grpc_type)
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`,
/// `m`, `u`, `n`).
pub fn parse_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The first-answer bound of a call: the route's, capped by the client's
/// `grpc-timeout`.
pub fn timeout(fields: &Fields<'_>, route_bound: Duration) -> Duration {
    fields
        .get(b"grpc-timeout")
        .and_then(parse_timeout)
        .map_or(route_bound, |t| t.min(route_bound))
}

/// A replica's answer as retries, ejection and the breaker count it: its
/// status, except that to a gRPC `call` a trailers-only `grpc-status` 14
/// (UNAVAILABLE) is a 503.
pub fn effective_status(head: &ResponseHead, call: bool) -> StatusCode {
    if call
        && head.status == StatusCode::OK
        && head.fields().any(|(name, value)| {
            name.eq_ignore_ascii_case(b"grpc-status") && value.trim_ascii() == b"14"
        })
    {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    head.status
}

/// The gRPC status the node answers a call with when it could not deliver
/// it.
pub fn status_of(error: &ProxyError) -> u32 {
    match error {
        ProxyError::FirstAnswerTimeout(_) => code::DEADLINE_EXCEEDED,
        ProxyError::Unavailable { .. }
        | ProxyError::Unreachable(_)
        | ProxyError::Upstream(_)
        | ProxyError::UpstreamStalled(_)
        | ProxyError::HttpsOnly(_) => code::UNAVAILABLE,
        ProxyError::NoRoute | ProxyError::Connect | ProxyError::Challenge(_) => code::UNIMPLEMENTED,
        ProxyError::ClientBody(e) if e.is_timeout() => code::DEADLINE_EXCEEDED,
        ProxyError::ClientBody(e) if e.is_too_large() => code::RESOURCE_EXHAUSTED,
        ProxyError::RateLimited { .. } | ProxyError::TooLarge(_) => code::RESOURCE_EXHAUSTED,
        ProxyError::ClientBody(_) => code::CANCELLED,
        ProxyError::BadRequest(_) => code::INTERNAL,
    }
}

/// The trailers-only answer to a call the node could not deliver:
/// HTTP 200, `grpc-status` and `grpc-message` in the head, no body.
pub fn answer(error: &ProxyError) -> Response<GatewayBody> {
    let mut response = Response::new(GatewayBody::empty());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    insert_status(headers, status_of(error), &error.to_string());
    response
}

/// `grpc-status` and `grpc-message` (percent-encoded as gRPC asks).
fn insert_status(headers: &mut HeaderMap, status: u32, message: &str) {
    headers.insert("grpc-status", HeaderValue::from(status));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert("grpc-message", value);
    }
}

/// Percent-encodes what gRPC's `grpc-message` may not carry as is.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::ConnectFailure;

    #[test]
    fn calls_are_told_by_their_content_type() {
        for yes in [
            &b"application/grpc"[..],
            b"application/grpc+proto",
            b"Application/GRPC+json",
            b"application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc_type(yes), "{yes:?}");
        }
        for no in [
            &b"application/grpc-web"[..],
            b"application/json",
            b"",
            b"application/grp",
        ] {
            assert!(!is_grpc_type(no), "{no:?}");
        }
    }

    #[test]
    fn grpc_timeouts_parse_and_cap() {
        assert_eq!(parse_timeout(b"1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"S", b"123456789S", b"10x", b"-1S", b"1.5S"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
        let map = {
            let mut map = HeaderMap::new();
            map.insert("grpc-timeout", HeaderValue::from_static("100m"));
            map
        };
        let fields = Fields::Map(&map);
        assert_eq!(
            timeout(&fields, Duration::from_secs(5)),
            Duration::from_millis(100)
        );
        assert_eq!(
            timeout(&fields, Duration::from_millis(50)),
            Duration::from_millis(50)
        );
    }

    #[test]
    fn node_failures_map_to_grpc_codes() {
        let cases = [
            (
                ProxyError::Unreachable(ConnectFailure::Refused),
                code::UNAVAILABLE,
            ),
            (
                ProxyError::Unreachable(ConnectFailure::NoReplica),
                code::UNAVAILABLE,
            ),
            (
                ProxyError::Unavailable {
                    retry_after: Duration::from_secs(1),
                },
                code::UNAVAILABLE,
            ),
            (
                ProxyError::FirstAnswerTimeout(Duration::from_secs(1)),
                code::DEADLINE_EXCEEDED,
            ),
            (ProxyError::NoRoute, code::UNIMPLEMENTED),
        ];
        for (error, status) in cases {
            let response = answer(&error);
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(
                response.headers()["grpc-status"],
                HeaderValue::from(status),
                "{error}"
            );
            assert!(http_body::Body::is_end_stream(response.body()));
        }
    }

    #[test]
    fn unavailable_from_a_replica_counts_as_503() {
        let head = |status: StatusCode, fields: &[(&[u8], &[u8])]| {
            ResponseHead::from_fields(
                status,
                fields.iter().copied(),
                crate::h1::response::BodyFraming::Empty,
                None,
            )
        };
        let unavailable = head(StatusCode::OK, &[(b"grpc-status", b"14")]);
        assert_eq!(
            effective_status(&unavailable, true),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let not_found = head(StatusCode::OK, &[(b"grpc-status", b"5")]);
        assert_eq!(effective_status(&not_found, true), StatusCode::OK);
        let plain = head(StatusCode::BAD_GATEWAY, &[]);
        assert_eq!(effective_status(&plain, true), StatusCode::BAD_GATEWAY);
        // Not a gRPC call: the status as it is.
        assert_eq!(effective_status(&unavailable, false), StatusCode::OK);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("a b%c\n"), "a b%25c%0A");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
