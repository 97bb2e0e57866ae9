//! Whatever a client sends as a request head: `parse_request` never
//! panics, and a head it accepts keeps the promises the proxy routes and
//! forwards by.
//!
//! ## Checked
//! - The head is the start of the input, at most `MAX_HEAD` bytes, ends
//!   with its blank line, and everything after it stays in the buffer.
//! - At most `MAX_HEADERS` fields, each inside the head, with a token name.
//! - The path is `*` (for `OPTIONS` only) or starts with `/`, has no `#`,
//!   and normalising it again changes nothing: what is routed is what is
//!   forwarded.
//! - A host, from an absolute-form target or the `Host` header, is a valid
//!   host (CONNECT's authority aside: the proxy refuses CONNECT).
//! - Chunked only in HTTP/1.1 and never beside a `Content-Length`; the
//!   body decoder of a length expects exactly that length.
//! - Nothing is buffered without bound: an unfinished head is at most
//!   `MAX_HEAD` bytes.
//! - The verdict does not depend on how the bytes arrive: a prefix first,
//!   then the rest, gives the same head, the same rest, or a refusal where
//!   the whole input at once is refused.
//!
//! ## Input
//! The bytes as a client sent them. An input that starts with `0xFF`
//! (never a request) is the rest of the input with a header of about
//! `MAX_HEAD` bytes inserted after its first line, its size set by the
//! second byte, so that the size limit is met although the fuzzer's inputs
//! are a few KiB.

#![no_main]

use bytes::{Bytes, BytesMut};
use http::{Method, Version};
use libfuzzer_sys::fuzz_target;
use picket_h1::request::{BodyKind, RequestParts, is_host, parse_request};
use picket_h1::{FieldAt, MAX_HEAD, MAX_HEADERS, is_token, target};

fuzz_target!(|data: &[u8]| {
    let input = match data.split_first() {
        Some((0xff, rest)) => padded(rest),
        _ => data.to_vec(),
    };
    let at_once = parse(&input, input.len());
    if let Seen::Head { head, .. } = &at_once {
        check(&input, head);
    }
    let mut splits = vec![input.len() / 3, input.len() * 2 / 3];
    if let Seen::Head { head, .. } = &at_once {
        splits.push(head.head.len() - 1);
    }
    for split in splits {
        let piecewise = parse(&input, split);
        assert_eq!(
            piecewise, at_once,
            "the head depends on how the bytes arrive (split at {split})"
        );
    }
});

/// The input with a long header after its first line.
fn padded(data: &[u8]) -> Vec<u8> {
    let Some((&size, rest)) = data.split_first() else {
        return Vec::new();
    };
    let len = MAX_HEAD - 256 + usize::from(size) * 2;
    let line_end = rest
        .iter()
        .position(|&b| b == b'\n')
        .map_or(rest.len(), |i| i + 1);
    let mut out = Vec::with_capacity(rest.len() + len + 16);
    out.extend_from_slice(&rest[..line_end]);
    out.extend_from_slice(b"x-pad: ");
    out.resize(out.len() + len, b'p');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&rest[line_end..]);
    out
}

/// What one parse of a head amounts to, to compare parses.
#[derive(Debug)]
enum Seen {
    Head {
        head: Box<Head>,
        rest: Bytes,
    },
    /// More bytes are needed.
    Partial,
    /// Refused, whatever the reason: a head cut short may be refused as
    /// too large where the whole is refused as malformed.
    Refused,
}

/// A parsed head, comparable.
#[derive(Debug, PartialEq)]
struct Head {
    head: Bytes,
    method: Method,
    version: Version,
    path: Bytes,
    host: Option<Bytes>,
    fields: Vec<FieldAt>,
    body: BodyKind,
    keep_alive: bool,
    expect_continue: bool,
    upgrade: Option<Bytes>,
}

impl PartialEq for Seen {
    fn eq(&self, other: &Seen) -> bool {
        match (self, other) {
            (Seen::Head { head: a, rest: r }, Seen::Head { head: b, rest: s }) => a == b && r == s,
            (Seen::Partial, Seen::Partial) | (Seen::Refused, Seen::Refused) => true,
            _ => false,
        }
    }
}

impl From<RequestParts> for Head {
    fn from(parts: RequestParts) -> Head {
        Head {
            head: parts.head,
            method: parts.method,
            version: parts.version,
            path: parts.path,
            host: parts.host,
            fields: parts.fields,
            body: parts.body,
            keep_alive: parts.keep_alive,
            expect_continue: parts.expect_continue,
            upgrade: parts.upgrade,
        }
    }
}

/// Parses `input` as a connection would that got `split` bytes first and
/// the rest later.
fn parse(input: &[u8], split: usize) -> Seen {
    let (first, later) = input.split_at(split.min(input.len()));
    let mut buf = BytesMut::from(first);
    let mut fields = Vec::new();
    let mut result = parse_request(&mut buf, &mut fields);
    if matches!(result, Ok(None)) && !later.is_empty() {
        buf.extend_from_slice(later);
        result = parse_request(&mut buf, &mut fields);
    } else {
        buf.extend_from_slice(later);
    }
    match result {
        Ok(Some(parts)) => Seen::Head {
            head: Box::new(parts.into()),
            rest: buf.freeze(),
        },
        Ok(None) => {
            assert!(
                buf.len() <= MAX_HEAD,
                "{} bytes buffered for an unfinished head",
                buf.len()
            );
            Seen::Partial
        }
        Err(_) => Seen::Refused,
    }
}

/// The promises of an accepted head.
fn check(input: &[u8], head: &Head) {
    let bytes = &head.head[..];
    assert!(bytes.len() <= MAX_HEAD, "a head of {} bytes", bytes.len());
    assert_eq!(
        bytes,
        &input[..bytes.len()],
        "the head is not the input's start"
    );
    assert!(
        bytes.ends_with(b"\n\n") || bytes.ends_with(b"\n\r\n"),
        "the head does not end with a blank line"
    );
    assert!(head.fields.len() <= MAX_HEADERS);
    for field in &head.fields {
        let name = field.name(bytes);
        assert!(
            !name.is_empty() && name.iter().all(|&b| is_token(b)),
            "{name:?}"
        );
        let value = field.value(bytes);
        if !value.is_empty() {
            // A value that is not a range of the head reads as empty.
            let start = value.as_ptr() as usize - bytes.as_ptr() as usize;
            assert!(start + value.len() <= bytes.len());
        }
    }

    let path = &head.path[..];
    if path == b"*" {
        assert_eq!(head.method, Method::OPTIONS, "`*` for {}", head.method);
    } else {
        assert!(path.starts_with(b"/"), "path {path:?}");
        assert!(!path.contains(&b'#'), "a fragment in {path:?}");
        match target::normalize(path) {
            Ok(again) => assert_eq!(&again[..], path, "normalising is not idempotent"),
            Err(e) => panic!("the normalised path {path:?} is refused: {e}"),
        }
    }
    if head.method != Method::CONNECT
        && let Some(host) = &head.host
    {
        assert!(is_host(host), "host {host:?}");
    }

    let lengths = head
        .fields
        .iter()
        .filter(|f| f.name(bytes).eq_ignore_ascii_case(b"content-length"))
        .count();
    match head.body {
        BodyKind::Chunked => {
            assert_eq!(head.version, Version::HTTP_11, "chunked in HTTP/1.0");
            assert_eq!(lengths, 0, "chunked beside a Content-Length");
        }
        BodyKind::Length(n) => {
            assert!(lengths > 0, "a length of {n} without a Content-Length");
            assert_eq!(BodyKind::Length(n).decoder().remaining(), Some(n));
        }
        BodyKind::None => assert_eq!(lengths, 0, "a Content-Length without a length"),
    }
    if head.expect_continue {
        assert_eq!(head.version, Version::HTTP_11);
    }
}
