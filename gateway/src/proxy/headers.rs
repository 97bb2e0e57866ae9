//! Header rules of the proxy: what is hop-by-hop, what the upstream learns
//! about the client, and what an upgrade keeps.

use std::net::IpAddr;

use http::header::{
    CONNECTION, HOST, HeaderMap, HeaderName, HeaderValue, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION,
    TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that belong to one connection and are never forwarded
/// (RFC 9110 §7.6.1), besides those the `Connection` header names.
fn hop_by_hop() -> [&'static HeaderName; 9] {
    [
        &CONNECTION,
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &PROXY_AUTHENTICATE,
        &PROXY_AUTHORIZATION,
        &TE,
        &TRAILER,
        &TRANSFER_ENCODING,
        &UPGRADE,
    ]
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    hop_by_hop().contains(&name)
}

/// Removes hop-by-hop headers, including every header `Connection` names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names instead of a hash
    // lookup per hop-by-hop header.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if let Some(listed) = connection_tokens(headers) {
        for name in listed {
            headers.remove(name);
        }
    }
    for name in hop_by_hop() {
        headers.remove(name);
    }
}

fn connection_tokens(headers: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut values = headers.get_all(CONNECTION).iter().peekable();
    values.peek()?;
    Some(
        values
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
            .collect(),
    )
}

/// The protocol a client asks to upgrade to, when its request is an upgrade.
pub fn upgrade_of(headers: &HeaderMap) -> Option<HeaderValue> {
    let upgrade = headers.get(UPGRADE)?;
    let asks = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| upgrade.clone())
}

/// Marks a message as an upgrade to `protocol` again after stripping.
pub fn set_upgrade(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, protocol);
}

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

/// Prepares the headers of a request going upstream: strips hop-by-hop
/// headers, tells the upstream who the client is, and sets `Host` to the
/// upstream's name when it has one (the client's `Host` stays otherwise).
pub fn to_upstream(
    headers: &mut HeaderMap,
    client: &Client,
    host: &HeaderValue,
    upstream_host: Option<&HeaderValue>,
) {
    strip_hop_by_hop(headers);
    let forwarded_for = match headers.get(&X_FORWARDED_FOR) {
        None => Some(client.value.clone()),
        Some(_) => {
            let mut chain: String = headers
                .get_all(&X_FORWARDED_FOR)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(", ");
            chain.push_str(", ");
            chain.push_str(client.value.to_str().unwrap_or("unknown"));
            HeaderValue::from_str(&chain).ok()
        }
    };
    if let Some(value) = forwarded_for {
        headers.insert(&X_FORWARDED_FOR, value);
    }
    headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    headers.insert(&X_FORWARDED_HOST, host.clone());
    match upstream_host {
        Some(upstream) => {
            headers.insert(HOST, upstream.clone());
        }
        None if !headers.contains_key(HOST) => {
            headers.insert(HOST, host.clone());
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_go() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic x"),
            ("accept", "*/*"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["accept"], "*/*");
    }

    #[test]
    fn forwarded_headers_are_set_and_chained() {
        let mut h = map(&[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-proto", "https"),
        ]);
        let host = HeaderValue::from_static("api.example.com");
        to_upstream(
            &mut h,
            &Client::new("10.0.0.9".parse().unwrap()),
            &host,
            None,
        );
        assert_eq!(h["x-forwarded-for"], "203.0.113.7, 10.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example.com");
        assert_eq!(h["host"], "api.example.com");

        let mut h = HeaderMap::new();
        let external = HeaderValue::from_static("billing.example.net");
        to_upstream(
            &mut h,
            &Client::new("::ffff:10.0.0.1".parse().unwrap()),
            &host,
            Some(&external),
        );
        assert_eq!(h["x-forwarded-for"], "10.0.0.1");
        assert_eq!(h["host"], "billing.example.net");
        assert_eq!(h["x-forwarded-host"], "api.example.com");
    }

    #[test]
    fn upgrades_are_recognised() {
        let ws = map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert_eq!(upgrade_of(&ws).unwrap(), "websocket");
        assert!(upgrade_of(&map(&[("upgrade", "websocket")])).is_none());
        assert!(upgrade_of(&map(&[("connection", "upgrade")])).is_none());
    }
}
