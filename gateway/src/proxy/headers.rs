//! Header rules of the proxy: what the upstream learns about the client,
//! and what never crosses.
//!
//! The request head that goes upstream is written in one pass over the
//! client's headers: hop-by-hop headers (and those the client's
//! `Connection` names) are skipped, `Host` comes first, and the
//! `X-Forwarded-*` headers are written at the end. The client's headers
//! are never modified, so a retry writes the same head again.

use std::net::IpAddr;

use http::header::HeaderValue;

use super::request::ClientRequest;
use crate::h1::{self, request, request::RequestFraming};

/// The client of a connection, as `X-Forwarded-For` names it; made once per
/// connection.
#[derive(Debug, Clone)]
pub struct Client {
    ip: IpAddr,
    value: HeaderValue,
}

impl Client {
    pub fn new(ip: IpAddr) -> Client {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_canonical(),
            v4 => v4,
        };
        let value =
            HeaderValue::from_str(&ip.to_string()).unwrap_or(HeaderValue::from_static("unknown"));
        Client { ip, value }
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }
}

/// What the upstream is told besides the client's own headers.
#[derive(Debug)]
pub struct Forwarding<'a> {
    pub client: &'a Client,
    /// The host the client asked for.
    pub host: &'a [u8],
    /// The `Host` an external upstream expects; `None` keeps the client's.
    pub upstream_host: Option<&'a [u8]>,
    /// The protocol of an upgrade the client asked for.
    pub upgrade: Option<&'a [u8]>,
}

/// Headers the proxy writes itself, whatever the client sent.
fn ours(name: &[u8]) -> bool {
    [
        &b"host"[..],
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-for",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

/// Writes the request head that goes upstream.
pub fn write_upstream_head(
    out: &mut Vec<u8>,
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    framing: RequestFraming,
) {
    request::write_request_line(out, req.method, req.path);
    h1::write_header(
        out,
        b"host",
        forwarding.upstream_host.unwrap_or(forwarding.host),
    );
    let connection = req.fields.get(b"connection");
    let mut forwarded_for = Vec::new();
    req.fields.each(|name, value| {
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            if !forwarded_for.is_empty() {
                forwarded_for.extend_from_slice(b", ");
            }
            forwarded_for.extend_from_slice(value);
            return;
        }
        let framing_header =
            framing != RequestFraming::Length && name.eq_ignore_ascii_case(b"content-length");
        // The proxy answers `Expect: 100-continue` itself.
        let expect = name.eq_ignore_ascii_case(b"expect");
        if ours(name)
            || framing_header
            || expect
            || h1::is_hop_by_hop(name)
            || h1::names(connection, name)
        {
            return;
        }
        h1::write_header(out, name, value);
    });
    if !forwarded_for.is_empty() {
        forwarded_for.extend_from_slice(b", ");
    }
    forwarded_for.extend_from_slice(forwarding.client.value.as_bytes());
    h1::write_header(out, b"x-forwarded-for", &forwarded_for);
    h1::write_header(out, b"x-forwarded-proto", b"http");
    h1::write_header(out, b"x-forwarded-host", forwarding.host);
    if let Some(protocol) = forwarding.upgrade {
        h1::write_header(out, b"connection", b"upgrade");
        h1::write_header(out, b"upgrade", protocol);
    }
    request::end_head(out, framing);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::request::{BodyKind, parse_request};
    use crate::proxy::request::Fields;
    use bytes::BytesMut;

    fn head(text: &str, forwarding: &Forwarding<'_>, framing: RequestFraming) -> String {
        let mut buf = BytesMut::from(text);
        let parts = parse_request(&mut buf, &mut Vec::new()).unwrap().unwrap();
        let req = ClientRequest {
            method: &parts.method,
            path: &parts.path,
            host: parts.host.as_deref(),
            fields: Fields::Raw(&parts),
            upgrade: parts.upgrade.as_deref(),
            body: BodyKind::None,
        };
        let mut out = Vec::new();
        write_upstream_head(&mut out, &req, forwarding, framing);
        String::from_utf8(out).unwrap()
    }

    fn client() -> Client {
        Client::new("10.0.0.9".parse().unwrap())
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_go() {
        let client = client();
        let forwarding = Forwarding {
            client: &client,
            host: b"shop.example.com",
            upstream_host: None,
            upgrade: None,
        };
        let text = head(
            "GET /x?y=1 HTTP/1.1\r\nHost: shop.example.com\r\nConnection: keep-alive, x-secret\r\n\
             Keep-Alive: timeout=5\r\nX-Secret: 1\r\nTE: trailers\r\nProxy-Authorization: Basic x\r\n\
             Expect: 100-continue\r\nAccept: */*\r\n\r\n",
            &forwarding,
            RequestFraming::None,
        );
        assert_eq!(
            text,
            "GET /x?y=1 HTTP/1.1\r\nhost: shop.example.com\r\nAccept: */*\r\n\
             x-forwarded-for: 10.0.0.9\r\nx-forwarded-proto: http\r\nx-forwarded-host: shop.example.com\r\n\r\n"
        );
    }

    #[test]
    fn forwarded_headers_chain_and_replace() {
        let client = Client::new("::ffff:10.0.0.1".parse().unwrap());
        let forwarding = Forwarding {
            client: &client,
            host: b"api.example.com",
            upstream_host: Some(b"billing.example.net"),
            upgrade: None,
        };
        let request = "POST /x HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 203.0.113.7\r\n\
                       X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: spoofed\r\n\
                       Content-Length: 3\r\n\r\n";
        let text = head(request, &forwarding, RequestFraming::Length);
        assert!(
            text.starts_with("POST /x HTTP/1.1\r\nhost: billing.example.net\r\n"),
            "{text}"
        );
        assert!(text.contains("Content-Length: 3\r\n"), "{text}");
        assert!(
            text.contains("x-forwarded-for: 203.0.113.7, 198.51.100.1, 10.0.0.1\r\n"),
            "{text}"
        );
        assert!(
            text.contains("x-forwarded-proto: http\r\n") && !text.contains("https"),
            "{text}"
        );
        assert!(
            text.contains("x-forwarded-host: api.example.com\r\n") && !text.contains("spoofed"),
            "{text}"
        );
        let chunked = head(request, &forwarding, RequestFraming::Chunked);
        assert!(
            !chunked.contains("Content-Length")
                && chunked.ends_with("transfer-encoding: chunked\r\n\r\n"),
            "{chunked}"
        );
    }

    #[test]
    fn upgrades_are_kept() {
        let client = client();
        let forwarding = Forwarding {
            client: &client,
            host: b"h",
            upstream_host: None,
            upgrade: Some(b"websocket"),
        };
        let text = head(
            "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
            &forwarding,
            RequestFraming::None,
        );
        assert!(text.contains("Sec-WebSocket-Key: k\r\n"), "{text}");
        assert!(
            text.ends_with("connection: upgrade\r\nupgrade: websocket\r\n\r\n"),
            "{text}"
        );
    }
}
