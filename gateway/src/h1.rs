//! HTTP/1.1 on the wire, as pure functions over bytes, in both directions:
//! request heads from clients ([`request`]) and to upstreams, response heads
//! from upstreams ([`response`]) and to clients, and body framing.
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
//! - Hop-by-hop headers (RFC 9110 §7.6.1), and those a `Connection` header
//!   names, never cross the proxy.

pub mod request;
pub mod response;

use bytes::{Buf, Bytes, BytesMut};

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

/// Whether `value` (a `Connection` header) names `name`.
pub fn names(connection: Option<&[u8]>, name: &[u8]) -> bool {
    connection.is_some_and(|c| tokens(c).any(|t| t.eq_ignore_ascii_case(name)))
}

/// Writes one header line.
pub fn write_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes the size line of a chunk of `len` bytes.
pub fn chunk_size_line(len: usize) -> Vec<u8> {
    format!("{len:x}\r\n").into_bytes()
}

/// The end of a chunked body, without trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

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

/// Where a chunked body decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunked {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data.
    Data(u64),
    /// After a chunk's data, expecting its CRLF.
    DataEnd,
    /// After the last chunk, reading (and dropping) trailers.
    Trailers(usize),
    Done,
}

/// What one decoding step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    Data(Bytes),
    /// `buf` holds no complete next piece: read more.
    NeedMore,
    Done,
}

fn line_end(buf: &BytesMut) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

impl Chunked {
    /// Decodes the next piece of a chunked body from `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ParseError> {
        loop {
            match *self {
                Chunked::Done => return Ok(Decoded::Done),
                Chunked::Size => {
                    let Some(end) = line_end(buf) else {
                        if buf.len() > MAX_CHUNK_LINE {
                            return Err(ParseError::Chunk("chunk-size line too long"));
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    let size_text = buf[..end]
                        .split(|&b| b == b';')
                        .next()
                        .unwrap_or(&[])
                        .trim_ascii();
                    if size_text.is_empty() || size_text.len() > 16 {
                        return Err(ParseError::Chunk("bad chunk size"));
                    }
                    let size = std::str::from_utf8(size_text)
                        .ok()
                        .and_then(|s| u64::from_str_radix(s, 16).ok())
                        .ok_or(ParseError::Chunk("bad chunk size"))?;
                    buf.advance(end + 2);
                    *self = if size == 0 {
                        Chunked::Trailers(0)
                    } else {
                        Chunked::Data(size)
                    };
                }
                Chunked::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(buf.len());
                    let data = buf.split_to(take).freeze();
                    let left = remaining - take as u64;
                    *self = if left == 0 {
                        Chunked::DataEnd
                    } else {
                        Chunked::Data(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                Chunked::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ParseError::Chunk("missing CRLF after chunk data"));
                    }
                    buf.advance(2);
                    *self = Chunked::Size;
                }
                Chunked::Trailers(seen) => {
                    let Some(end) = line_end(buf) else {
                        if seen + buf.len() > MAX_TRAILERS {
                            return Err(ParseError::Chunk("trailers too large"));
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    buf.advance(end + 2);
                    *self = if end == 0 {
                        Chunked::Done
                    } else {
                        Chunked::Trailers(seen + end + 2)
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], step: usize) -> Result<Vec<u8>, ParseError> {
        let mut state = Chunked::Size;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            match state.decode(&mut buf)? {
                Decoded::Data(data) => out.extend_from_slice(&data),
                Decoded::Done => return Ok(out),
                Decoded::NeedMore if fed < input.len() => {
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
                Decoded::NeedMore => return Err(ParseError::Chunk("truncated")),
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let body = b"5;name=v\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n";
        for step in 1..body.len() {
            assert_eq!(
                decode_all(body, step).unwrap(),
                b"hello, world",
                "step {step}"
            );
        }
    }

    #[test]
    fn malformed_chunks_are_errors() {
        for bad in [
            &b"zz\r\nhello\r\n"[..],
            b"5\r\nhelloXX",
            b"\r\n",
            b"11111111111111111\r\n",
        ] {
            assert!(
                decode_all(bad, 3).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"1;".as_slice(), &[b'x'; MAX_CHUNK_LINE + 10]].concat();
        assert!(decode_all(&long, 100).is_err());
    }

    #[test]
    fn hop_by_hop_names_and_connection_tokens() {
        assert!(
            is_hop_by_hop(b"Connection") && is_hop_by_hop(b"TE") && is_hop_by_hop(b"keep-alive")
        );
        assert!(!is_hop_by_hop(b"content-length") && !is_hop_by_hop(b"x-te"));
        assert!(names(Some(b"keep-alive, X-Secret"), b"x-secret"));
        assert!(!names(Some(b"close"), b"x-secret") && !names(None, b"x"));
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
