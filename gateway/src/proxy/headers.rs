//! Header rules of the proxy: what is hop-by-hop, what the upstream learns
//! about the client, and what an upgrade keeps.
//!
//! The request head that goes upstream is written in one pass over the
//! client's headers: hop-by-hop headers (and those the client's
//! `Connection` names) are skipped, `Host` comes first, and the
//! `X-Forwarded-*` headers are written at the end. The client's header map
//! is never modified, so a retry writes the same head again.

use std::net::IpAddr;

use http::header::{CONNECTION, CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue, UPGRADE};
use http::Method;

use crate::upstream::h1::{self, RequestFraming};

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

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
        let value = HeaderValue::from_str(&ip.to_string())
            .unwrap_or(HeaderValue::from_static("unknown"));
        Client { ip, value }
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }
}

fn tokens(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    value.as_bytes().split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// The protocol a client asks to upgrade to, when its request is an upgrade.
pub fn upgrade_of(headers: &HeaderMap) -> Option<HeaderValue> {
    let upgrade = headers.get(UPGRADE)?;
    let asks = headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(tokens)
        .any(|token| token.eq_ignore_ascii_case(b"upgrade"));
    asks.then(|| upgrade.clone())
}

/// Marks a message as an upgrade to `protocol`.
pub fn set_upgrade(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, protocol);
}

/// What the upstream is told besides the client's own headers.
#[derive(Debug)]
pub struct Forwarding<'a> {
    pub client: &'a Client,
    /// The host the client asked for.
    pub host: &'a [u8],
    /// The `Host` an external upstream expects; `None` keeps the client's.
    pub upstream_host: Option<&'a HeaderValue>,
    /// The protocol of an upgrade the client asked for.
    pub upgrade: Option<&'a HeaderValue>,
}

/// Writes the request head that goes upstream.
pub fn write_upstream_head(
    out: &mut Vec<u8>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    forwarding: &Forwarding<'_>,
    framing: RequestFraming,
) {
    h1::write_request_line(out, method, path);
    let host = forwarding.upstream_host.map_or(forwarding.host, HeaderValue::as_bytes);
    h1::write_header(out, b"host", host);
    let connection = headers.get(CONNECTION);
    let named_by_connection = |name: &HeaderName| {
        connection.is_some_and(|c| tokens(c).any(|t| t.eq_ignore_ascii_case(name.as_str().as_bytes())))
    };
    let mut forwarded_for: Option<&HeaderValue> = None;
    let mut more_forwarded_for = false;
    for (name, value) in headers {
        if *name == X_FORWARDED_FOR {
            more_forwarded_for |= forwarded_for.is_some();
            forwarded_for.get_or_insert(value);
            continue;
        }
        let ours = *name == HOST || *name == X_FORWARDED_PROTO || *name == X_FORWARDED_HOST;
        let framing_header = *name == CONTENT_LENGTH && framing != RequestFraming::Length;
        if ours || framing_header || h1::is_hop_by_hop(name) || named_by_connection(name) {
            continue;
        }
        h1::write_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match forwarded_for {
        None => h1::write_header(out, b"x-forwarded-for", forwarding.client.value.as_bytes()),
        Some(first) => {
            out.extend_from_slice(b"x-forwarded-for: ");
            out.extend_from_slice(first.as_bytes());
            if more_forwarded_for {
                for value in headers.get_all(&X_FORWARDED_FOR).iter().skip(1) {
                    out.extend_from_slice(b", ");
                    out.extend_from_slice(value.as_bytes());
                }
            }
            out.extend_from_slice(b", ");
            out.extend_from_slice(forwarding.client.value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    h1::write_header(out, b"x-forwarded-proto", b"http");
    h1::write_header(out, b"x-forwarded-host", forwarding.host);
    if let Some(protocol) = forwarding.upgrade {
        h1::write_header(out, b"connection", b"upgrade");
        h1::write_header(out, b"upgrade", protocol.as_bytes());
    }
    h1::end_head(out, framing);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn head(headers: &HeaderMap, forwarding: &Forwarding<'_>, framing: RequestFraming) -> String {
        let mut out = Vec::new();
        write_upstream_head(&mut out, &Method::GET, "/x?y=1", headers, forwarding, framing);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_go() {
        let headers = map(&[
            ("host", "shop.example.com"),
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic x"),
            ("accept", "*/*"),
        ]);
        let client = Client::new("10.0.0.9".parse().unwrap());
        let forwarding = Forwarding { client: &client, host: b"shop.example.com", upstream_host: None, upgrade: None };
        assert_eq!(
            head(&headers, &forwarding, RequestFraming::None),
            "GET /x?y=1 HTTP/1.1\r\nhost: shop.example.com\r\naccept: */*\r\n\
             x-forwarded-for: 10.0.0.9\r\nx-forwarded-proto: http\r\nx-forwarded-host: shop.example.com\r\n\r\n"
        );
    }

    #[test]
    fn forwarded_headers_chain_and_replace() {
        let headers = map(&[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "198.51.100.1"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "spoofed"),
            ("content-length", "3"),
        ]);
        let client = Client::new("::ffff:10.0.0.1".parse().unwrap());
        let external = HeaderValue::from_static("billing.example.net");
        let forwarding =
            Forwarding { client: &client, host: b"api.example.com", upstream_host: Some(&external), upgrade: None };
        let text = head(&headers, &forwarding, RequestFraming::Length);
        assert!(text.starts_with("GET /x?y=1 HTTP/1.1\r\nhost: billing.example.net\r\n"), "{text}");
        assert!(text.contains("content-length: 3\r\n"), "{text}");
        assert!(text.contains("x-forwarded-for: 203.0.113.7, 198.51.100.1, 10.0.0.1\r\n"), "{text}");
        assert!(text.contains("x-forwarded-proto: http\r\n") && !text.contains("https"), "{text}");
        assert!(text.contains("x-forwarded-host: api.example.com\r\n") && !text.contains("spoofed"), "{text}");
        let chunked = head(&headers, &forwarding, RequestFraming::Chunked);
        assert!(!chunked.contains("content-length") && chunked.ends_with("transfer-encoding: chunked\r\n\r\n"), "{chunked}");
    }

    #[test]
    fn upgrades_are_recognised_and_kept() {
        let ws = map(&[("connection", "keep-alive, Upgrade"), ("upgrade", "websocket")]);
        let protocol = upgrade_of(&ws).unwrap();
        assert_eq!(protocol, "websocket");
        assert!(upgrade_of(&map(&[("upgrade", "websocket")])).is_none());
        assert!(upgrade_of(&map(&[("connection", "upgrade")])).is_none());
        let client = Client::new("10.0.0.9".parse().unwrap());
        let forwarding = Forwarding { client: &client, host: b"h", upstream_host: None, upgrade: Some(&protocol) };
        let text = head(&ws, &forwarding, RequestFraming::None);
        assert!(text.ends_with("connection: upgrade\r\nupgrade: websocket\r\n\r\n"), "{text}");
    }
}
