//! HTTP/1.1 on the wire, sans IO, in both directions: request heads from
//! clients ([`request`]) and to upstreams, response heads from upstreams
//! ([`response`]) and to clients, request targets ([`target`]), and one
//! body codec ([`body`]) that both sides of the proxy share.
//!
//! The proxy speaks HTTP/1.1 itself on both sides of an HTTP/1 request: a
//! head is parsed once, its header lines are kept as ranges of the bytes
//! that arrived, and the head that leaves is written from those ranges,
//! skipping what must not cross. No header map is built on this path.
//!
//! ## Invariants
//! - A head larger than [`MAX_HEAD`] or with more than [`MAX_HEADERS`]
//!   headers, a malformed head, conflicting lengths, or a malformed chunk
//!   are errors, never panics.
//! - Hop-by-hop headers (RFC 9110 §7.6.1), and those any `Connection`
//!   header names, never cross the proxy; but `Connection` can never remove
//!   the framing (`Content-Length`, `Transfer-Encoding`), `Host`, or the
//!   `X-Forwarded-*` the proxy writes ([`is_protected`]).
//! - The framing that leaves is written from what was parsed, never copied
//!   from the sender's header lines.

pub mod body;
pub mod request;
pub mod response;
pub mod target;

use bytes::Bytes;

/// The largest head accepted, either way.
pub const MAX_HEAD: usize = 64 * 1024;
/// The most headers accepted in a head.
pub const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (with extensions) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;
/// The most trailer bytes accepted (trailers are read and dropped).
pub const MAX_TRAILERS: usize = 16 * 1024;

/// Where one header line sits in the bytes of its head.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldAt {
    name: (u32, u32),
    value: (u32, u32),
}

impl FieldAt {
    /// Records a header whose name and value are slices of `head`.
    fn of(head: &[u8], name: &[u8], value: &[u8]) -> FieldAt {
        let base = head.as_ptr() as usize;
        let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
        FieldAt {
            name: at(name),
            value: at(value),
        }
    }

    pub fn name<'a>(&self, head: &'a [u8]) -> &'a [u8] {
        slice(head, self.name)
    }

    pub fn value<'a>(&self, head: &'a [u8]) -> &'a [u8] {
        slice(head, self.value)
    }

    /// The value as shared bytes of the head, without a copy.
    pub fn value_bytes(&self, head: &Bytes) -> Bytes {
        let (start, len) = (self.value.0 as usize, self.value.1 as usize);
        head.slice(start..start + len)
    }
}

fn slice(head: &[u8], (start, len): (u32, u32)) -> &[u8] {
    head.get(start as usize..(start + len) as usize)
        .unwrap_or(&[])
}

/// The comma-separated tokens of a header value, trimmed.
pub fn tokens(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// Headers that belong to one connection and are never forwarded (RFC 9110
/// §7.6.1), besides those the `Connection` header names. `name` is in any
/// case.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP_BY_HOP: [&[u8]; 9] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    ];
    HOP_BY_HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Whether any of the values of the `Connection` headers names `name`.
pub fn names<'a>(connection: impl IntoIterator<Item = &'a [u8]>, name: &[u8]) -> bool {
    connection
        .into_iter()
        .any(|c| tokens(c).any(|t| t.eq_ignore_ascii_case(name)))
}

/// Headers that a `Connection` header can never remove: the framing, which
/// the proxy writes from what it parsed, `Host`, and the `X-Forwarded-*`
/// the proxy writes. Dropping them on a peer's word is how a body becomes
/// a second request (`Connection: Content-Length`).
pub fn is_protected(name: &[u8]) -> bool {
    const PROTECTED: [&[u8]; 6] = [
        b"content-length",
        b"transfer-encoding",
        b"host",
        b"x-forwarded-for",
        b"x-forwarded-host",
        b"x-forwarded-proto",
    ];
    PROTECTED.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Whether `b` may stand in a header name (RFC 9110 §5.6.2 `tchar`).
pub fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The length of a head httparse found complete in `buffered` bytes, `None`
/// while it is partial; the head limits hold however the head arrived,
/// whole in one read or in pieces (the same rule for requests and
/// responses).
fn head_len(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    buffered: usize,
) -> Result<Option<usize>, ParseError> {
    match parsed {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD => Err(ParseError::HeadTooLarge),
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        Ok(httparse::Status::Partial) if buffered > MAX_HEAD => Err(ParseError::HeadTooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(ParseError::TooManyHeaders),
        Err(e) => Err(ParseError::Head(e.to_string())),
    }
}

/// Whether `buf` holds the end of a head (an empty line, CRLF or bare LF),
/// searching only past `scanned`, the bytes searched before: a head that
/// trickles in a byte at a time is scanned once, and parsed once it is
/// whole, not again on every read.
///
/// Each line end is found by `memchr` (a word or a vector at a time): a
/// byte-at-a-time loop spent 12 % of a kept-alive request's instructions
/// here.
pub fn has_head_end(buf: &[u8], scanned: usize) -> bool {
    let from = scanned.saturating_sub(2).min(buf.len());
    memchr::memchr_iter(b'\n', &buf[from..]).any(|i| {
        let at = from + i;
        match buf.get(at + 1) {
            Some(b'\n') => true,
            Some(b'\r') => buf.get(at + 2) == Some(&b'\n'),
            _ => false,
        }
    })
}

/// Writes one header line.
pub fn write_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Why bytes could not be understood as HTTP/1.1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed head: {0}")]
    Head(String),
    #[error("head over {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("more than {MAX_HEADERS} headers")]
    TooManyHeaders,
    #[error("invalid Content-Length")]
    ContentLength,
    #[error("unsupported Transfer-Encoding")]
    TransferEncoding,
    #[error("malformed chunked body: {0}")]
    Chunk(&'static str),
    #[error("invalid request target: {0}")]
    Target(&'static str),
    #[error("the connection closed before the body ended")]
    Truncated,
    #[error("the body does not match its declared length")]
    BodyLength,
}

impl From<ParseError> for std::io::Error {
    fn from(e: ParseError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// Parses a `Content-Length` value; several must agree.
fn content_length(previous: Option<u64>, value: &[u8]) -> Result<u64, ParseError> {
    let value = std::str::from_utf8(value)
        .ok()
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or(ParseError::ContentLength)?;
    match previous {
        Some(p) if p != value => Err(ParseError::ContentLength),
        _ => Ok(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_names_and_connection_tokens() {
        assert!(
            is_hop_by_hop(b"Connection") && is_hop_by_hop(b"TE") && is_hop_by_hop(b"keep-alive")
        );
        assert!(!is_hop_by_hop(b"content-length") && !is_hop_by_hop(b"x-te"));
        assert!(names([&b"keep-alive, X-Secret"[..]], b"x-secret"));
        assert!(names([&b"close"[..], b"x-secret"], b"X-Secret"));
        assert!(!names([&b"close"[..]], b"x-secret") && !names([], b"x"));
        assert!(is_protected(b"Content-Length") && is_protected(b"X-Forwarded-For"));
        assert!(!is_protected(b"x-secret"));
    }

    #[test]
    fn head_ends_are_found_however_the_bytes_arrive() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for split in 0..head.len() {
            // Searched up to `split` first, then all of it.
            assert!(!has_head_end(&head[..split], 0) || split >= head.len() - 1);
            assert!(has_head_end(head, split), "split {split}");
        }
        assert!(has_head_end(b"GET / HTTP/1.1\nHost: a\n\n", 20));
        assert!(!has_head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0));
    }

    proptest::proptest! {
        /// The line-at-a-time search finds exactly what a byte-at-a-time
        /// one finds, from any point already searched, in bytes made of
        /// line ends and little else.
        #[test]
        fn head_ends_are_what_a_byte_at_a_time_search_finds(
            buf in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b'\r', b'\n', b':']),
                0..64,
            ),
            scanned in 0usize..70,
        ) {
            let from = scanned.saturating_sub(2).min(buf.len());
            let bytewise = (from..buf.len()).any(|at| {
                buf[at] == b'\n'
                    && (buf.get(at + 1) == Some(&b'\n')
                        || (buf.get(at + 1) == Some(&b'\r') && buf.get(at + 2) == Some(&b'\n')))
            });
            proptest::prop_assert_eq!(has_head_end(&buf, scanned), bytewise);
        }
    }

    #[test]
    fn content_lengths() {
        assert_eq!(content_length(None, b"42"), Ok(42));
        assert_eq!(content_length(Some(42), b"42"), Ok(42));
        for bad in [
            &b"-1"[..],
            b"",
            b"4 2",
            b"+4",
            b"0x10",
            b"99999999999999999999999",
        ] {
            assert_eq!(
                content_length(None, bad),
                Err(ParseError::ContentLength),
                "{bad:?}"
            );
        }
        assert_eq!(
            content_length(Some(1), b"2"),
            Err(ParseError::ContentLength)
        );
    }
}
