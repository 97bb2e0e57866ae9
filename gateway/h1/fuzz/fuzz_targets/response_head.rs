//! Whatever an upstream sends as a response head, to any method:
//! `parse_response` never panics, and a head it accepts frames its body
//! the way RFC 9112 §6.3 says and never lets hop-by-hop or framing lines
//! through.
//!
//! ## Checked
//! - The head ends where the input's consumed part ends (informational
//!   heads before it skipped), is at most `MAX_HEAD` bytes, and everything
//!   after it stays in the buffer.
//! - No informational status but 101; at most `MAX_HEADERS` fields, none
//!   of them hop-by-hop or `Content-Length`.
//! - `HEAD`, 101, 204 and 304 have no body; a declared length only for
//!   `HEAD`; a body until close never keeps the connection; an upgrade only
//!   with 101; the header map carries one `Content-Length` at most, the one
//!   the framing says.
//! - Nothing is buffered without bound: an unfinished head is at most
//!   `MAX_HEAD` bytes.
//! - The verdict does not depend on how the bytes arrive (a prefix first,
//!   then the rest).
//!
//! ## Input
//! The first byte chooses the request method (its low three bits) and
//! whether a header of about `MAX_HEAD` bytes is inserted after the first
//! line of the rest (bit 3; the high four bits set its size), so that the
//! size limit is met although the fuzzer's inputs are a few KiB. The rest
//! is the bytes as the upstream sent them.

#![no_main]

use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode};
use libfuzzer_sys::fuzz_target;
use picket_h1::response::{BodyFraming, ResponseHead, parse_response};
use picket_h1::{FieldAt, MAX_HEAD, MAX_HEADERS, is_hop_by_hop};

const METHODS: [Method; 8] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::OPTIONS,
    Method::CONNECT,
    Method::PATCH,
];

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let method = &METHODS[usize::from(control & 7)];
    let input = if control & 8 != 0 {
        padded(rest, MAX_HEAD - 128 + usize::from(control >> 4) * 16)
    } else {
        rest.to_vec()
    };
    let at_once = parse(&input, input.len(), method);
    if let Seen::Head { head, rest } = &at_once {
        check(&input, head, rest, method);
    }
    let mut splits = vec![input.len() / 3, input.len() * 2 / 3];
    if let Seen::Head { rest, .. } = &at_once {
        splits.push(input.len() - rest.len() - 1);
    }
    for split in splits {
        let piecewise = parse(&input, split, method);
        assert_eq!(
            piecewise, at_once,
            "the head depends on how the bytes arrive (split at {split})"
        );
    }
});

/// `data` with a header of `len` bytes after its first line.
fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let line_end = data
        .iter()
        .position(|&b| b == b'\n')
        .map_or(data.len(), |i| i + 1);
    let mut out = Vec::with_capacity(data.len() + len + 16);
    out.extend_from_slice(&data[..line_end]);
    out.extend_from_slice(b"x-pad: ");
    out.resize(out.len() + len, b'p');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&data[line_end..]);
    out
}

/// What one parse of a head amounts to, to compare parses.
#[derive(Debug)]
enum Seen {
    Head {
        head: Head,
        rest: Bytes,
    },
    /// More bytes are needed.
    Partial,
    /// Refused, whatever the reason: a head cut short may be refused as
    /// too large where the whole is refused as malformed.
    Refused,
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

/// A parsed head, comparable.
#[derive(Debug, PartialEq)]
struct Head {
    status: StatusCode,
    head: Bytes,
    fields: Vec<FieldAt>,
    framing: BodyFraming,
    declared_length: Option<u64>,
    content_length: Option<u64>,
    keep_alive: bool,
    upgrade: Option<Bytes>,
    /// `Content-Length` values in the header map.
    map_lengths: Vec<Bytes>,
}

impl From<ResponseHead> for Head {
    fn from(head: ResponseHead) -> Head {
        let map_lengths = head
            .header_map()
            .get_all(http::header::CONTENT_LENGTH)
            .iter()
            .map(|v| Bytes::copy_from_slice(v.as_bytes()))
            .collect();
        Head {
            status: head.status,
            content_length: head.content_length(),
            head: head.head,
            fields: head.fields,
            framing: head.framing,
            declared_length: head.declared_length,
            keep_alive: head.keep_alive,
            upgrade: head.upgrade,
            map_lengths,
        }
    }
}

/// Parses `input` as a connection would that got `split` bytes first and
/// the rest later.
fn parse(input: &[u8], split: usize, method: &Method) -> Seen {
    let (first, later) = input.split_at(split.min(input.len()));
    let mut buf = BytesMut::from(first);
    let mut result = parse_response(&mut buf, method);
    if matches!(result, Ok(None)) && !later.is_empty() {
        buf.extend_from_slice(later);
        result = parse_response(&mut buf, method);
    } else {
        buf.extend_from_slice(later);
    }
    match result {
        Ok(Some(head)) => Seen::Head {
            head: head.into(),
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
fn check(input: &[u8], head: &Head, rest: &[u8], method: &Method) {
    let bytes = &head.head[..];
    let consumed = input.len() - rest.len();
    assert_eq!(
        bytes,
        &input[consumed - bytes.len()..consumed],
        "the head is not what was consumed last"
    );
    assert!(
        bytes.len() <= MAX_HEAD,
        "a response head of {} bytes is accepted (MAX_HEAD is {MAX_HEAD})",
        bytes.len()
    );
    let status = head.status;
    assert!(!status.is_informational() || status == StatusCode::SWITCHING_PROTOCOLS);
    assert!(head.fields.len() <= MAX_HEADERS);
    for field in &head.fields {
        let name = field.name(bytes);
        assert!(
            !is_hop_by_hop(name) && !name.eq_ignore_ascii_case(b"content-length"),
            "{:?} crosses",
            String::from_utf8_lossy(name)
        );
    }

    let no_body = *method == Method::HEAD
        || status == StatusCode::SWITCHING_PROTOCOLS
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if no_body {
        assert_eq!(head.framing, BodyFraming::Empty);
    }
    if head.declared_length.is_some() {
        assert_eq!(*method, Method::HEAD);
        assert!(status != StatusCode::NO_CONTENT && status != StatusCode::NOT_MODIFIED);
    }
    if head.framing == BodyFraming::UntilClose {
        assert!(!head.keep_alive, "a body until close on a kept connection");
    }
    if head.upgrade.is_some() {
        assert_eq!(status, StatusCode::SWITCHING_PROTOCOLS);
    }
    match head.framing {
        BodyFraming::Length(n) => assert_eq!(head.content_length, Some(n)),
        BodyFraming::Empty => assert_eq!(head.content_length, head.declared_length),
        BodyFraming::Chunked | BodyFraming::UntilClose => assert_eq!(head.content_length, None),
    }
    let want: Vec<Bytes> = head
        .content_length
        .map(|n| Bytes::from(n.to_string()))
        .into_iter()
        .collect();
    assert_eq!(head.map_lengths, want, "the header map's Content-Length");
}
