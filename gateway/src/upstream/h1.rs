//! HTTP/1.1 towards upstreams, as pure functions over bytes: request heads
//! out, response heads in, and the framing of response bodies.
//!
//! The proxy speaks HTTP/1.1 to every upstream whatever the client spoke.
//! It writes the request head itself and reads the response on the same
//! task that serves the client: no connection task, no channel between
//! the two sides of a request.
//!
//! ## Framing (RFC 9112 §6)
//! - Request: the client's `Content-Length` is kept; a body of unknown
//!   length is sent chunked; no body, no framing header.
//! - Response: no body for `HEAD`, 1xx, 204 and 304; else `chunked` when
//!   it is the last transfer coding; else `Content-Length`; else the body
//!   runs until the upstream closes.
//!
//! ## Invariants
//! - A response head larger than [`MAX_RESPONSE_HEAD`], a malformed head,
//!   conflicting lengths, or a malformed chunk are errors, never panics.
//! - Hop-by-hop headers of the response (and those its `Connection` names)
//!   never reach the client, except `Connection`/`Upgrade` of a 101.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// The largest response head accepted.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// The most response headers accepted.
pub const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (with extensions) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;
/// The most trailer bytes accepted (trailers are read and dropped).
pub const MAX_TRAILERS: usize = 16 * 1024;

/// Why an upstream's bytes could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed response head: {0}")]
    Head(String),
    #[error("response head over {MAX_RESPONSE_HEAD} bytes")]
    HeadTooLarge,
    #[error("invalid Content-Length")]
    ContentLength,
    #[error("malformed chunked body: {0}")]
    Chunk(&'static str),
}

/// How a request body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    /// No body.
    None,
    /// The `Content-Length` header the request carries.
    Length,
    Chunked,
}

/// Writes a request line.
pub fn write_request_line(out: &mut Vec<u8>, method: &Method, path_and_query: &str) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Writes one header line.
pub fn write_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Ends a request head, declaring a chunked body when there is one.
pub fn end_head(out: &mut Vec<u8>, framing: RequestFraming) {
    if framing == RequestFraming::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes; the connection cannot be reused.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    /// End-to-end headers only.
    pub headers: HeaderMap,
    pub framing: BodyFraming,
    /// The upstream allows another request on the connection.
    pub keep_alive: bool,
    /// The protocol of a `101 Switching Protocols`.
    pub upgrade: Option<HeaderValue>,
}

/// Headers that belong to one connection and are never forwarded (RFC 9110
/// §7.6.1), besides those the `Connection` header names.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

fn tokens(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// Parses a response head from the start of `buf`. Returns `Ok(None)` when
/// more bytes are needed; on success the head's bytes are taken out of
/// `buf` and what follows (the start of the body) stays.
///
/// Informational responses other than 101 (100 Continue, 103 Early Hints)
/// are consumed and skipped.
pub fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<ResponseHead>, ParseError> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut slots);
        let len = match response.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
                return Err(ParseError::HeadTooLarge);
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(ParseError::Head(e.to_string())),
        };
        let code = response.code.unwrap_or(0);
        let status =
            StatusCode::from_u16(code).map_err(|_| ParseError::Head(format!("status {code}")))?;
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            buf.advance(len);
            continue;
        }
        let http10 = response.version == Some(0);
        // Where each header sits inside the head, so that names and values
        // can share the head's bytes once it is frozen, with no copy and no
        // allocation per header.
        let base = buf.as_ptr() as usize;
        let mut fields = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
        let count = response.headers.len();
        let mut keep_alive = !http10;
        let mut listed: Vec<HeaderName> = Vec::new();
        let mut chunked = false;
        let mut transfer_encoding = false;
        let mut length: Option<u64> = None;
        let mut upgrade = None;
        for (slot, h) in fields.iter_mut().zip(response.headers.iter()) {
            let offset = |s: &[u8]| (s.as_ptr() as usize - base) as u32;
            *slot = (
                offset(h.name.as_bytes()),
                h.name.len() as u32,
                offset(h.value),
                h.value.len() as u32,
            );
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"connection") {
                for token in tokens(h.value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive = true;
                    } else if let Ok(other) = HeaderName::from_bytes(token) {
                        listed.push(other);
                    }
                }
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                transfer_encoding = true;
                chunked = tokens(h.value)
                    .next_back()
                    .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let value = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or(ParseError::ContentLength)?;
                if length.is_some_and(|l| l != value) {
                    return Err(ParseError::ContentLength);
                }
                length = Some(value);
            } else if name.eq_ignore_ascii_case(b"upgrade") {
                upgrade = HeaderValue::from_bytes(h.value).ok();
            }
        }
        let head = buf.split_to(len).freeze();
        let mut headers = HeaderMap::with_capacity(count);
        for &(name_at, name_len, value_at, value_len) in &fields[..count] {
            let name_range = name_at as usize..(name_at + name_len) as usize;
            let name = HeaderName::from_bytes(&head[name_range])
                .map_err(|_| ParseError::Head("invalid header name".into()))?;
            if is_hop_by_hop(&name) || listed.contains(&name) {
                continue;
            }
            // A response with a transfer coding has no meaningful length.
            if transfer_encoding && name == header::CONTENT_LENGTH {
                continue;
            }
            let range = value_at as usize..(value_at + value_len) as usize;
            let value = HeaderValue::from_maybe_shared(head.slice(range))
                .map_err(|_| ParseError::Head(format!("value of {name}")))?;
            headers.append(name, value);
        }
        let no_body = *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || status == StatusCode::SWITCHING_PROTOCOLS;
        let framing = match () {
            _ if no_body => BodyFraming::Empty,
            _ if chunked => BodyFraming::Chunked,
            _ if transfer_encoding => BodyFraming::UntilClose,
            _ => match length {
                Some(0) => BodyFraming::Empty,
                Some(n) => BodyFraming::Length(n),
                None => BodyFraming::UntilClose,
            },
        };
        // RFC 9112 §6.3: both a transfer coding and a length is a smell;
        // use the coding, then close.
        let keep_alive = keep_alive
            && framing != BodyFraming::UntilClose
            && !(transfer_encoding && length.is_some());
        let upgrade = if status == StatusCode::SWITCHING_PROTOCOLS {
            upgrade
        } else {
            None
        };
        return Ok(Some(ResponseHead {
            status,
            headers,
            framing,
            keep_alive,
            upgrade,
        }));
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

fn line(buf: &BytesMut) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

impl Chunked {
    /// Decodes the next piece of a chunked body from `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ParseError> {
        loop {
            match *self {
                Chunked::Done => return Ok(Decoded::Done),
                Chunked::Size => {
                    let Some(end) = line(buf) else {
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
                    let Some(end) = line(buf) else {
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

    fn parse(text: &str, method: Method) -> Result<Option<ResponseHead>, ParseError> {
        let mut buf = BytesMut::from(text);
        parse_response(&mut buf, &method)
    }

    #[test]
    fn request_heads_carry_framing() {
        let mut out = Vec::new();
        write_request_line(&mut out, &Method::POST, "/a?b=1");
        write_header(&mut out, b"host", b"api.example.com");
        end_head(&mut out, RequestFraming::Chunked);
        assert_eq!(out, b"POST /a?b=1 HTTP/1.1\r\nhost: api.example.com\r\ntransfer-encoding: chunked\r\n\r\n");
        out.clear();
        write_request_line(&mut out, &Method::GET, "/");
        end_head(&mut out, RequestFraming::None);
        assert_eq!(out, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn response_heads_and_their_framing() {
        let cases: &[(&str, Method, u16, BodyFraming, bool)] = &[
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                Method::GET,
                200,
                BodyFraming::Length(5),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::UntilClose,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::UntilClose,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                Method::HEAD,
                200,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 204 No Content\r\n\r\n",
                Method::GET,
                204,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                Method::GET,
                304,
                BodyFraming::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::Empty,
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
                Method::GET,
                200,
                BodyFraming::Length(1),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nx",
                Method::GET,
                200,
                BodyFraming::Length(1),
                true,
            ),
            (
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
                Method::POST,
                201,
                BodyFraming::Length(2),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::Chunked,
                false,
            ),
        ];
        for (text, method, status, framing, keep_alive) in cases {
            let head = parse(text, method.clone()).unwrap().unwrap();
            assert_eq!(head.status.as_u16(), *status, "{text:?}");
            assert_eq!(head.framing, *framing, "{text:?}");
            assert_eq!(head.keep_alive, *keep_alive, "{text:?}");
        }
    }

    #[test]
    fn the_body_stays_in_the_buffer() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello");
        let head = parse_response(&mut buf, &Method::GET).unwrap().unwrap();
        assert_eq!(&buf[..], b"hello");
        assert_eq!(head.headers["x-a"], "1");
        assert_eq!(head.headers["content-length"], "5");
    }

    #[test]
    fn hop_by_hop_response_headers_are_dropped() {
        let text = "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\nKeep-Alive: timeout=5\r\nX-Private: 1\r\nTransfer-Encoding: chunked\r\nServer: up\r\n\r\n";
        let head = parse(text, Method::GET).unwrap().unwrap();
        let names: Vec<&str> = head.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["server"]);
    }

    #[test]
    fn a_switch_keeps_its_protocol() {
        let text = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\r\n";
        let head = parse(text, Method::GET).unwrap().unwrap();
        assert_eq!(head.status, StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(head.upgrade.unwrap(), "websocket");
        assert_eq!(head.framing, BodyFraming::Empty);
        assert!(head.headers.contains_key("sec-websocket-accept"));
    }

    #[test]
    fn partial_and_bad_heads() {
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Le", Method::GET)
                .unwrap()
                .is_none()
        );
        assert!(parse("HTTP/1.1 200 OK\r\n", Method::GET).unwrap().is_none());
        assert!(matches!(
            parse("GARBAGE\r\n\r\n", Method::GET),
            Err(ParseError::Head(_))
        ));
        assert_eq!(
            parse(
                "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Method::GET
            )
            .unwrap_err(),
            ParseError::ContentLength
        );
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", Method::GET).unwrap_err(),
            ParseError::ContentLength
        );
        let huge = format!(
            "HTTP/1.1 200 OK\r\nX: {}",
            "y".repeat(MAX_RESPONSE_HEAD + 1)
        );
        assert_eq!(
            parse(&huge, Method::GET).unwrap_err(),
            ParseError::HeadTooLarge
        );
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect();
        assert!(parse(&format!("HTTP/1.1 200 OK\r\n{many}\r\n"), Method::GET).is_err());
    }

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
}
