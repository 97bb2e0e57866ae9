//! Response heads: parsed from upstreams, written to clients.
//!
//! ## Framing of an upstream's body (RFC 9112 §6.3)
//! No body for `HEAD`, 1xx, 204 and 304; else `chunked` when it is the last
//! transfer coding; else `Content-Length`; else the body runs until the
//! upstream closes. Informational responses other than 101 are skipped.
//!
//! The upstream's `Content-Length` and `Transfer-Encoding` lines are never
//! copied to the client: the framing the client gets is written from the
//! parsed [`BodyFraming`], so no `Connection` header of the upstream's can
//! leave a response without its framing. Every `Connection` header
//! counts. A 204 or 304 never carries a body-length header.

use bytes::{Bytes, BytesMut};

use crate::body::BodyEncoder;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

use super::{
    FieldAt, MAX_HEADERS, ParseError, content_length, head_len, is_hop_by_hop, is_protected, names,
    tokens,
};

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes; the connection cannot be reused.
    UntilClose,
}

/// An upstream's response head; its end-to-end header lines stay ranges of
/// `head`.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub head: Bytes,
    /// End-to-end headers only: hop-by-hop ones are dropped at parse time.
    pub fields: Vec<FieldAt>,
    pub framing: BodyFraming,
    /// The `Content-Length` of an answer to `HEAD`, which has no body.
    pub declared_length: Option<u64>,
    /// The upstream allows another request on the connection.
    pub keep_alive: bool,
    /// The protocol of a `101 Switching Protocols`.
    pub upgrade: Option<Bytes>,
}

impl ResponseHead {
    /// The head of a response that came another way (HTTP/2): `fields`
    /// laid out as header lines, hop-by-hop and framing headers left out,
    /// the framing given.
    pub fn from_fields<'a>(
        status: StatusCode,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        framing: BodyFraming,
        declared_length: Option<u64>,
    ) -> ResponseHead {
        let mut head = Vec::new();
        let mut at = Vec::new();
        for (name, value) in fields {
            if is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"content-length") {
                continue;
            }
            let name_start = head.len();
            head.extend_from_slice(name);
            head.extend_from_slice(b": ");
            let value_start = head.len();
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
            let span = |start: usize, len: usize| {
                (
                    u32::try_from(start).unwrap_or(u32::MAX),
                    u32::try_from(len).unwrap_or(0),
                )
            };
            at.push(FieldAt {
                name: span(name_start, name.len()),
                value: span(value_start, value.len()),
            });
        }
        ResponseHead {
            status,
            head: Bytes::from(head),
            fields: at,
            framing,
            declared_length,
            keep_alive: true,
            upgrade: None,
        }
    }

    /// Each end-to-end header as (name, value).
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|f| (f.name(&self.head), f.value(&self.head)))
    }

    /// The `Content-Length` the client is told: the body's length, or for
    /// `HEAD` the one the upstream declared; none for 1xx, 204 and 304.
    pub fn content_length(&self) -> Option<u64> {
        match self.framing {
            BodyFraming::Length(n) => Some(n),
            BodyFraming::Empty => self.declared_length,
            BodyFraming::Chunked | BodyFraming::UntilClose => None,
        }
    }

    /// The headers as a map, for a response going out through hyper. Values
    /// share the head's bytes; `content-length` is written from the parsed
    /// framing.
    pub fn header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.fields.len() + 1);
        if let Some(n) = self.content_length() {
            map.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        for field in &self.fields {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(field.name(&self.head)),
                HeaderValue::from_maybe_shared(field.value_bytes(&self.head)),
            ) else {
                continue;
            };
            map.append(name, value);
        }
        map
    }
}

/// Parses a response head from the start of `buf`. Returns `Ok(None)` when
/// more bytes are needed; on success the head is taken out of `buf` and
/// what follows (the start of the body) stays.
pub fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<ResponseHead>, ParseError> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut slots);
        let Some(len) = head_len(response.parse(buf), buf.len())? else {
            return Ok(None);
        };
        let code = response.code.unwrap_or(0);
        let status =
            StatusCode::from_u16(code).map_err(|_| ParseError::Head(format!("status {code}")))?;
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            let _ = buf.split_to(len);
            continue;
        }
        let http10 = response.version == Some(0);
        let view: &[u8] = buf;
        let connection: Vec<&[u8]> = response
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("connection"))
            .map(|h| h.value)
            .collect();
        let mut fields = Vec::with_capacity(response.headers.len());
        let mut chunked = false;
        let mut transfer_encoding = false;
        let mut length: Option<u64> = None;
        let mut upgrade = None;
        for h in response.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                transfer_encoding = true;
                chunked = tokens(h.value)
                    .next_back()
                    .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"content-length") {
                length = Some(content_length(length, h.value)?);
            } else if name.eq_ignore_ascii_case(b"upgrade") {
                upgrade = Some(FieldAt::of(view, name, h.value));
            }
            let framing = name.eq_ignore_ascii_case(b"content-length");
            let named = names(connection.iter().copied(), name) && !is_protected(name);
            if framing || is_hop_by_hop(name) || named {
                continue;
            }
            fields.push(FieldAt::of(view, name, h.value));
        }
        // `close` wins over `keep-alive`, whatever their order.
        let keep_alive = if names(connection.iter().copied(), b"close") {
            false
        } else if http10 {
            names(connection.iter().copied(), b"keep-alive")
        } else {
            !names(connection.iter().copied(), b"close")
        };
        let head = buf.split_to(len).freeze();
        let no_body = *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || status == StatusCode::SWITCHING_PROTOCOLS;
        let framing = if no_body {
            BodyFraming::Empty
        } else if chunked {
            BodyFraming::Chunked
        } else if transfer_encoding {
            BodyFraming::UntilClose
        } else {
            match length {
                Some(n) => BodyFraming::Length(n),
                None => BodyFraming::UntilClose,
            }
        };
        // What a HEAD answer says the body would be, for the client.
        let declared_length = (*method == Method::HEAD
            && !transfer_encoding
            && status != StatusCode::NO_CONTENT
            && status != StatusCode::NOT_MODIFIED)
            .then_some(length)
            .flatten();
        // RFC 9112 §6.3: both a transfer coding and a length is a smell;
        // use the coding, then close.
        let keep_alive = keep_alive
            && framing != BodyFraming::UntilClose
            && !(transfer_encoding && length.is_some());
        let upgrade = (status == StatusCode::SWITCHING_PROTOCOLS)
            .then(|| upgrade.map(|f| f.value_bytes(&head)))
            .flatten();
        return Ok(Some(ResponseHead {
            status,
            head,
            fields,
            framing,
            declared_length,
            keep_alive,
            upgrade,
        }));
    }
}

/// How a response body is framed towards the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFraming {
    /// No body and no body-length header (1xx, 204, 304).
    None,
    /// `Content-Length: n`: the body's length, or for `HEAD` the declared
    /// one (no body follows).
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0 clients, bodies of unknown
    /// length).
    UntilClose,
}

impl ClientFraming {
    /// The framing of an upstream's answer towards a client speaking
    /// `version`.
    pub fn for_client(head: &ResponseHead, version: Version) -> ClientFraming {
        match head.framing {
            BodyFraming::Empty => head
                .declared_length
                .map_or(ClientFraming::None, ClientFraming::Length),
            BodyFraming::Length(n) => ClientFraming::Length(n),
            BodyFraming::Chunked | BodyFraming::UntilClose if version == Version::HTTP_11 => {
                ClientFraming::Chunked
            }
            BodyFraming::Chunked | BodyFraming::UntilClose => ClientFraming::UntilClose,
        }
    }

    /// The encoder of the body that follows.
    pub fn encoder(self) -> BodyEncoder {
        match self {
            ClientFraming::None => BodyEncoder::Length(0),
            ClientFraming::Length(n) => BodyEncoder::Length(n),
            ClientFraming::Chunked => BodyEncoder::Chunked,
            ClientFraming::UntilClose => BodyEncoder::UntilClose,
        }
    }
}

/// Writes a response status line.
pub fn write_status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Ends a response head: framing and connection headers, blank line.
pub fn end_response_head(
    out: &mut Vec<u8>,
    framing: ClientFraming,
    keep_alive: bool,
    version: Version,
) {
    match framing {
        ClientFraming::None | ClientFraming::UntilClose => {}
        ClientFraming::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        ClientFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_HEAD;

    fn parse(text: &str, method: Method) -> Result<Option<ResponseHead>, ParseError> {
        let mut buf = BytesMut::from(text);
        parse_response(&mut buf, &method)
    }

    fn names_of(head: &ResponseHead) -> Vec<String> {
        head.fields()
            .map(|(n, _)| String::from_utf8_lossy(n).to_lowercase())
            .collect()
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
                BodyFraming::Length(0),
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::Length(3),
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 3\r\n\r\n",
                Method::GET,
                200,
                BodyFraming::Length(3),
                true,
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
        let map = head.header_map();
        assert_eq!(map["x-a"], "1");
        assert_eq!(map["content-length"], "5");
        assert_eq!(map.get_all("content-length").iter().count(), 1);
    }

    #[test]
    fn hop_by_hop_response_headers_are_dropped() {
        let text = "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\nKeep-Alive: timeout=5\r\nX-Private: 1\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\nServer: up\r\n\r\n";
        let head = parse(text, Method::GET).unwrap().unwrap();
        assert_eq!(names_of(&head), ["server"]);
    }

    #[test]
    fn a_switch_keeps_its_protocol() {
        let text = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n\r\n";
        let head = parse(text, Method::GET).unwrap().unwrap();
        assert_eq!(head.status, StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(head.upgrade.as_deref(), Some(&b"websocket"[..]));
        assert_eq!(head.framing, BodyFraming::Empty);
        assert_eq!(names_of(&head), ["sec-websocket-accept"]);
    }

    #[test]
    fn partial_and_bad_heads() {
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Le", Method::GET)
                .unwrap()
                .is_none()
        );
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
        let huge = format!("HTTP/1.1 200 OK\r\nX: {}", "y".repeat(MAX_HEAD + 1));
        assert_eq!(
            parse(&huge, Method::GET).unwrap_err(),
            ParseError::HeadTooLarge
        );
        // The same head arriving whole, in one read (found by fuzzing).
        let whole = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "y".repeat(MAX_HEAD));
        assert_eq!(
            parse(&whole, Method::GET).unwrap_err(),
            ParseError::HeadTooLarge
        );
        let close = parse(
            "HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert!(!close.keep_alive, "close wins");
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect();
        assert_eq!(
            parse(&format!("HTTP/1.1 200 OK\r\n{many}\r\n"), Method::GET).unwrap_err(),
            ParseError::TooManyHeaders
        );
    }

    #[test]
    fn client_framing_and_head_end() {
        let framing = |text: &str, method: Method, version: Version| {
            ClientFraming::for_client(&parse(text, method).unwrap().unwrap(), version)
        };
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let until_close = "HTTP/1.1 200 OK\r\n\r\n";
        let length = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n";
        let cases = [
            (
                chunked,
                Method::GET,
                Version::HTTP_11,
                ClientFraming::Chunked,
            ),
            (
                until_close,
                Method::GET,
                Version::HTTP_11,
                ClientFraming::Chunked,
            ),
            (
                chunked,
                Method::GET,
                Version::HTTP_10,
                ClientFraming::UntilClose,
            ),
            (
                length,
                Method::GET,
                Version::HTTP_10,
                ClientFraming::Length(3),
            ),
            (
                length,
                Method::HEAD,
                Version::HTTP_11,
                ClientFraming::Length(3),
            ),
            (chunked, Method::HEAD, Version::HTTP_11, ClientFraming::None),
            (
                "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                Method::HEAD,
                Version::HTTP_11,
                ClientFraming::None,
            ),
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n",
                Method::GET,
                Version::HTTP_11,
                ClientFraming::None,
            ),
        ];
        for (text, method, version, want) in cases {
            assert_eq!(
                framing(text, method.clone(), version),
                want,
                "{text:?} {method}"
            );
        }
        let mut out = Vec::new();
        end_response_head(&mut out, ClientFraming::Length(12), true, Version::HTTP_11);
        assert_eq!(out, b"content-length: 12\r\n\r\n");
        let mut out = Vec::new();
        write_status_line(&mut out, StatusCode::BAD_GATEWAY);
        end_response_head(&mut out, ClientFraming::Chunked, false, Version::HTTP_11);
        assert_eq!(
            out,
            b"HTTP/1.1 502 Bad Gateway\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        );
    }
}
