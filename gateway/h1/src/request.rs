//! Request heads: parsed from clients, written to upstreams.
//!
//! ## What a client's head must be
//! - HTTP/1.0 or HTTP/1.1; at most one `Host`, and a valid one.
//! - A body is framed by `Content-Length` or by `Transfer-Encoding:
//!   chunked`, never both (the classic request-smuggling ambiguity is
//!   refused, not resolved); no other transfer coding is accepted.
//! - The request target is origin-form (`/path?q`), absolute-form
//!   (`http://host/path`, whose host then wins over `Host`), `*` for
//!   `OPTIONS`, or authority-form for `CONNECT` (which the proxy refuses).
//!   Its path is normalised here ([`crate::target`]): what is routed is
//!   what is forwarded.
//! - Every `Connection` header counts, not only the first.

use bytes::{Bytes, BytesMut};
use http::{Method, Version};

use super::{FieldAt, MAX_HEADERS, ParseError, content_length, head_len, names, target, tokens};

/// How a request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    /// Chunked from the client, or of unknown length (HTTP/2).
    Chunked,
}

impl BodyKind {
    /// The encoder of this body towards the upstream.
    pub fn encoder(self) -> crate::body::BodyEncoder {
        match self {
            BodyKind::None => crate::body::BodyEncoder::Length(0),
            BodyKind::Length(n) => crate::body::BodyEncoder::Length(n),
            BodyKind::Chunked => crate::body::BodyEncoder::Chunked,
        }
    }

    /// The decoder of this body from an HTTP/1 client.
    pub fn decoder(self) -> crate::body::BodyDecoder {
        match self {
            BodyKind::None => crate::body::BodyDecoder::empty(),
            BodyKind::Length(n) => crate::body::BodyDecoder::length(n),
            BodyKind::Chunked => crate::body::BodyDecoder::chunked(),
        }
    }
}

/// A client's request head; header lines stay ranges of `head`.
#[derive(Debug)]
pub struct RequestParts {
    pub head: Bytes,
    pub method: Method,
    pub version: Version,
    /// Origin form: path and query (`*` for `OPTIONS *`).
    pub path: Bytes,
    /// From an absolute-form target, else the `Host` header.
    pub host: Option<Bytes>,
    pub fields: Vec<FieldAt>,
    pub body: BodyKind,
    /// The client allows another request on this connection afterwards.
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// The protocol of an upgrade the client asks for.
    pub upgrade: Option<Bytes>,
}

impl RequestParts {
    /// Each header as (name, value).
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|f| (f.name(&self.head), f.value(&self.head)))
    }

    /// The first value of a header, `name` in lower case.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Gives back the field list's allocation for the next request.
    pub fn into_fields(self) -> Vec<FieldAt> {
        let mut fields = self.fields;
        fields.clear();
        fields
    }
}

/// Whether `bytes` is a valid `Host` value (RFC 9110 §7.2: `uri-host
/// [":" port]`): a name or an IPv4 address (the characters of a
/// reg-name), or a bracketed IPv6 literal, then at most one port of
/// digits, at most 65535. A host with a port that is not a port
/// (`b.test:abc`, `b.test:80:80`) is refused rather than routed as some
/// other host: it would miss its route and fall to a catch-all.
pub fn is_host(bytes: &[u8]) -> bool {
    let (name, port) = match bytes.strip_prefix(b"[") {
        Some(rest) => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return false;
            };
            let literal = &rest[..end];
            let valid = !literal.is_empty()
                && literal
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() || b":.".contains(b));
            if !valid {
                return false;
            }
            match &rest[end + 1..] {
                [] => (&b"[]"[..], None),
                [b':', port @ ..] => (&b"[]"[..], Some(port)),
                _ => return false,
            }
        }
        None => match bytes.iter().position(|&b| b == b':') {
            Some(at) => (&bytes[..at], Some(&bytes[at + 1..])),
            None => (bytes, None),
        },
    };
    let name_ok = !name.is_empty()
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=[]".contains(b));
    // An empty port is allowed (`host:`), as the grammar's `*DIGIT` is.
    let port_ok = port.is_none_or(|port| {
        port.len() <= 5
            && port.iter().all(u8::is_ascii_digit)
            && port.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 65_535
    });
    name_ok && port_ok
}

/// Parses a request head from the start of `buf`. Returns `Ok(None)` when
/// more bytes are needed; on success the head is taken out of `buf` and
/// what follows (a body, or the next request) stays. The allocation of
/// `fields` moves into the result, so that a connection reuses one list.
/// Whether `buf`, the first bytes of a request, can still begin a request
/// line: a TLS ClientHello, an HTTP/2 frame or any binary cannot, and is
/// refused as soon as it arrives rather than after the head bound (nothing
/// there will ever end a head). Reads the request line alone, whole or in
/// part; the head is parsed in full by [`parse_request`] once it is whole.
pub fn can_begin(buf: &[u8]) -> bool {
    let line = match memchr_newline(buf) {
        Some(at) => &buf[..=at],
        None => buf,
    };
    let mut no_headers = [];
    matches!(
        httparse::Request::new(&mut no_headers).parse(line),
        Ok(httparse::Status::Partial)
    )
}

fn memchr_newline(buf: &[u8]) -> Option<usize> {
    // Empty lines before a request line are allowed (RFC 9112 section 2.2):
    // the line that counts is the first that is not empty.
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    buf[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|at| start + at)
}

pub fn parse_request(
    buf: &mut BytesMut,
    fields: &mut Vec<FieldAt>,
) -> Result<Option<RequestParts>, ParseError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let Some(len) = head_len(request.parse(buf), buf.len())? else {
        return Ok(None);
    };
    let method = Method::from_bytes(request.method.unwrap_or("").as_bytes())
        .map_err(|_| ParseError::Head("invalid method".into()))?;
    let version = if request.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let target = request.path.unwrap_or("");
    let head_view: &[u8] = buf;
    fields.clear();
    let mut length = None;
    let mut chunked = false;
    let mut host_field = None;
    let mut connection: Vec<&[u8]> = Vec::new();
    let mut upgrade_field = None;
    let mut expect_continue = false;
    for h in request.headers.iter() {
        let field = FieldAt::of(head_view, h.name.as_bytes(), h.value);
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            length = Some(content_length(length, h.value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only `chunked`, alone and once: anything else is ambiguous.
            if chunked || !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(ParseError::TransferEncoding);
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"host") {
            if host_field.is_some() || !is_host(h.value) {
                return Err(ParseError::Head("invalid or repeated Host".into()));
            }
            host_field = Some(field);
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection.push(h.value);
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade_field = Some(field);
        } else if name.eq_ignore_ascii_case(b"expect") {
            expect_continue = h.value.eq_ignore_ascii_case(b"100-continue");
        }
        fields.push(field);
    }
    if chunked && (length.is_some() || version == Version::HTTP_10) {
        return Err(ParseError::TransferEncoding);
    }
    // `close` wins over `keep-alive`, whatever their order.
    let keep_alive = if names(connection.iter().copied(), b"close") {
        false
    } else if version == Version::HTTP_10 {
        names(connection.iter().copied(), b"keep-alive")
    } else {
        !names(connection.iter().copied(), b"close")
    };
    // `Upgrade: h2c` asks for HTTP/2 over this connection: the proxy does
    // not switch, and the request is answered over HTTP/1.1.
    let upgrades = upgrade_field.is_some()
        && names(connection.iter().copied(), b"upgrade")
        && upgrade_field
            .is_some_and(|f| !tokens(f.value(head_view)).any(|t| t.eq_ignore_ascii_case(b"h2c")));
    let target_start = target.as_ptr() as usize - head_view.as_ptr() as usize;
    let target_range = target_start..target_start + target.len();
    let head = buf.split_to(len).freeze();
    let target = head.slice(target_range);
    let (path, absolute_host) = split_target(&target, &method)?;
    let host = match absolute_host {
        Some(host) => Some(host),
        None => host_field.map(|f| f.value_bytes(&head)),
    };
    let body = match (chunked, length) {
        (true, _) => BodyKind::Chunked,
        (false, Some(0)) | (false, None) => BodyKind::None,
        (false, Some(n)) => BodyKind::Length(n),
    };
    // A zero Content-Length is still sent on, so that the upstream sees
    // what the client said.
    let body = match (body, length) {
        (BodyKind::None, Some(0)) => BodyKind::Length(0),
        (body, _) => body,
    };
    Ok(Some(RequestParts {
        upgrade: if upgrades {
            upgrade_field.map(|f| f.value_bytes(&head))
        } else {
            None
        },
        head,
        method,
        version,
        path,
        host,
        fields: std::mem::take(fields),
        body,
        keep_alive,
        expect_continue: expect_continue && version == Version::HTTP_11,
    }))
}

/// Splits a request target into its origin-form path and, for the
/// absolute form, its host.
fn split_target(target: &Bytes, method: &Method) -> Result<(Bytes, Option<Bytes>), ParseError> {
    let bad = || ParseError::Head("invalid request target".into());
    if target.starts_with(b"/") {
        return Ok((normalized(target)?, None));
    }
    if target.as_ref() == b"*" && *method == Method::OPTIONS {
        return Ok((target.clone(), None));
    }
    if *method == Method::CONNECT {
        if !is_host(target) {
            return Err(bad());
        }
        return Ok((Bytes::from_static(b"/"), Some(target.clone())));
    }
    let scheme_end = [&b"http://"[..], b"https://"]
        .iter()
        .find(|s| target.len() > s.len() && target[..s.len()].eq_ignore_ascii_case(s))
        .map(|s| s.len())
        .ok_or_else(bad)?;
    let rest = &target[scheme_end..];
    let authority_len = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let authority = target.slice(scheme_end..scheme_end + authority_len);
    if !is_host(&authority) || authority.contains(&b'@') {
        return Err(bad());
    }
    let path = match rest.get(authority_len) {
        Some(b'/') => target.slice(scheme_end + authority_len..),
        Some(_) => Bytes::from([&b"/"[..], &rest[authority_len..]].concat()),
        None => Bytes::from_static(b"/"),
    };
    Ok((normalized(&path)?, Some(authority)))
}

/// The target with its path normalised, shared when it was normal.
fn normalized(target: &Bytes) -> Result<Bytes, ParseError> {
    Ok(match target::normalize(target)? {
        std::borrow::Cow::Borrowed(_) => target.clone(),
        std::borrow::Cow::Owned(path) => Bytes::from(path),
    })
}

/// Writes a request line.
pub fn write_request_line(out: &mut Vec<u8>, method: &Method, path_and_query: &[u8]) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query);
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Writes a request line in absolute form, for a forward proxy:
/// `GET http://host:port/path HTTP/1.1`. `origin` is `http://host:port`;
/// an `OPTIONS *` is asked of the origin alone (RFC 9112 §3.2.4).
pub fn write_absolute_request_line(
    out: &mut Vec<u8>,
    method: &Method,
    origin: &[u8],
    path_and_query: &[u8],
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(origin);
    if path_and_query != b"*" {
        out.extend_from_slice(path_and_query);
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// Ends a request head with the framing of its body, written from what
/// was parsed: the sender's own `Content-Length` and `Transfer-Encoding`
/// lines never cross.
pub fn end_head(out: &mut Vec<u8>, body: BodyKind) {
    match body {
        BodyKind::None => {}
        BodyKind::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        BodyKind::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_HEAD;

    fn parse(text: &str) -> Result<Option<RequestParts>, ParseError> {
        let mut buf = BytesMut::from(text);
        parse_request(&mut buf, &mut Vec::new())
    }

    #[test]
    fn what_cannot_begin_a_request_is_known_from_its_first_bytes() {
        let request = b"GET /a?b=1 HTTP/1.1\r\nHost: a\r\nX-Long: 1\r\n\r\n";
        // Every prefix of a request can begin one, however it is cut.
        for end in 0..request.len() {
            assert!(can_begin(&request[..end]), "{end}");
        }
        assert!(can_begin(b"\r\n\r\nGET / HT"), "empty lines first");
        assert!(can_begin(b"M-SEARCH * HTTP/1.1\r\n"));
        // A TLS ClientHello, a bare binary, a line that is no request line.
        for bad in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
            b"\x16",
            b"\x00\x00\x12\x04",
            b"GET / HTTP/1.1 extra\r\n",
            b"GET /\x01 HTTP/1.1",
            b"GE(T / HTTP/1.1",
            b"SSH-2.0-OpenSSH_9.2\r\n",
        ] {
            assert!(!can_begin(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn heads_and_what_follows() {
        let mut buf = BytesMut::from(
            "POST /a?b=1 HTTP/1.1\r\nHost: API.example.com\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhelloGET",
        );
        let parts = parse_request(&mut buf, &mut Vec::new()).unwrap().unwrap();
        assert_eq!(parts.method, Method::POST);
        assert_eq!(parts.version, Version::HTTP_11);
        assert_eq!(&parts.path[..], b"/a?b=1");
        assert_eq!(parts.host.as_deref(), Some(&b"API.example.com"[..]));
        assert_eq!(parts.body, BodyKind::Length(5));
        assert_eq!(parts.get(b"x-a"), Some(&b"1"[..]));
        assert!(parts.keep_alive);
        assert_eq!(&buf[..], b"helloGET");
    }

    #[test]
    fn framing_and_keep_alive() {
        let cases: &[(&str, BodyKind, bool)] = &[
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", BodyKind::None, true),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                BodyKind::None,
                false,
            ),
            ("GET / HTTP/1.0\r\n\r\n", BodyKind::None, false),
            (
                "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                BodyKind::None,
                true,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                BodyKind::Chunked,
                true,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                BodyKind::Length(0),
                true,
            ),
        ];
        for (text, body, keep_alive) in cases {
            let parts = parse(text).unwrap().unwrap();
            assert_eq!(parts.body, *body, "{text:?}");
            assert_eq!(parts.keep_alive, *keep_alive, "{text:?}");
        }
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        let refused = [
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: bad host\r\n\r\n",
            "GET nowhere HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET http://user@evil/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "GARBAGE\r\n\r\n",
        ];
        for text in refused {
            assert!(parse(text).is_err(), "{text:?}");
        }
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect();
        assert_eq!(
            parse(&format!("GET / HTTP/1.1\r\n{many}\r\n")).unwrap_err(),
            ParseError::TooManyHeaders
        );
        let huge = format!("GET / HTTP/1.1\r\nX: {}", "y".repeat(MAX_HEAD + 1));
        assert_eq!(parse(&huge).unwrap_err(), ParseError::HeadTooLarge);
    }

    #[test]
    fn request_targets() {
        let parts = parse("GET http://Other.example:8080/p?q HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(parts.host.as_deref(), Some(&b"Other.example:8080"[..]));
        assert_eq!(&parts.path[..], b"/p?q");
        let parts = parse("GET http://h.example?q=1 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&parts.path[..], b"/?q=1");
        let parts = parse("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&parts.path[..], b"*");
        let parts = parse("CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(parts.method, Method::CONNECT);
    }

    #[test]
    fn upgrades_and_expectations() {
        let ws = parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(ws.upgrade.as_deref(), Some(&b"websocket"[..]));
        let h2c = parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h2c.upgrade, None);
        let unasked = parse("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(unasked.upgrade, None);
        let expect =
            parse("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(expect.expect_continue);
    }

    #[test]
    fn every_connection_header_counts() {
        let parts = parse(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(!parts.keep_alive);
        let ws = parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(ws.upgrade.as_deref(), Some(&b"websocket"[..]));
        let all: Vec<&[u8]> = ws
            .fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .map(|(_, v)| v)
            .collect();
        assert_eq!(all, [&b"keep-alive"[..], b"Upgrade"]);
    }

    #[test]
    fn targets_are_normalised_and_fragments_refused() {
        let parts = parse("GET /public/../api/x?q=/../1 HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&parts.path[..], b"/api/x?q=/../1");
        let parts = parse("GET http://h/%61pi/./x HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(&parts.path[..], b"/api/x");
        assert!(parse("GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n").is_err());
        assert!(parse("GET /public/..;/admin HTTP/1.1\r\nHost: a\r\n\r\n").is_err());
    }

    #[test]
    fn framing_is_written_from_what_was_parsed() {
        let mut out = Vec::new();
        end_head(&mut out, BodyKind::Length(87));
        assert_eq!(out, b"content-length: 87\r\n\r\n");
        out.clear();
        end_head(&mut out, BodyKind::Chunked);
        assert_eq!(out, b"transfer-encoding: chunked\r\n\r\n");
        out.clear();
        end_head(&mut out, BodyKind::None);
        assert_eq!(out, b"\r\n");
    }

    #[test]
    fn close_wins_and_connect_names_a_host() {
        for text in [
            "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            "GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close, keep-alive\r\n\r\n",
        ] {
            assert!(!parse(text).unwrap().unwrap().keep_alive, "{text:?}");
        }
        assert!(parse("CONNECT a\"<>{}| HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn partial_heads_wait() {
        assert!(parse("GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
        assert!(parse("GE").unwrap().is_none());
    }

    #[test]
    fn hosts() {
        for good in [
            "api.example.com",
            "api.example.com:8080",
            "10.0.0.1:80",
            "[::1]:8080",
            "[::1]",
            "B.test",
            "b.test:",
            "b.test:65535",
        ] {
            assert!(is_host(good.as_bytes()), "{good}");
        }
        for bad in [
            "",
            "bad host",
            "a/b",
            "a\tb",
            // A port that is not a port.
            "b.test:abc",
            "b.test:80:80",
            "B.test:x",
            "b.test:65536",
            "b.test:123456",
            ":80",
            "[::1]x",
            "[::1]:8x",
            "[zz]:80",
            "[::1",
        ] {
            assert!(!is_host(bad.as_bytes()), "{bad}");
        }
    }
}
