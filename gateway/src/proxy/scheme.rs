//! Whether a request came over TLS: what `X-Forwarded-Proto` tells the
//! upstream, and where an `https_only` route sends a plain-HTTP client.
//!
//! ## The redirect
//! `308 Permanent Redirect` (the method and body are kept, unlike 301) to
//! the same host, path and query over HTTPS, on the node's TLS port; the
//! port is left out when it is 443. The client's port, if its `Host` had
//! one, is the plain listener's and is dropped.

use http::header::HeaderValue;

/// How a client connection reached the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP; `https_port` is the node's TLS listener's port, where
    /// `https_only` routes send their clients (443 when there is none).
    Http { https_port: Option<u16> },
    /// Over TLS.
    Https,
}

impl Scheme {
    /// `X-Forwarded-Proto`.
    pub fn proto(self) -> &'static [u8] {
        match self {
            Scheme::Http { .. } => b"http",
            Scheme::Https => b"https",
        }
    }
}

/// The HTTPS URL of a request for `host` (as the client named it, maybe
/// with a port) and `target` (origin form), on `port`; `None` when they
/// do not make a header value.
pub fn https_location(host: &[u8], target: &[u8], port: u16) -> Option<HeaderValue> {
    let name = match host.iter().position(|b| *b == b']') {
        // `[::1]:8080`: the address, with its brackets.
        Some(end) if host.first() == Some(&b'[') => &host[..=end],
        _ => match host.iter().rposition(|b| *b == b':') {
            Some(colon) if host[colon + 1..].iter().all(u8::is_ascii_digit) => &host[..colon],
            _ => host,
        },
    };
    if name.is_empty() {
        return None;
    }
    let mut url = Vec::with_capacity(8 + name.len() + 6 + target.len());
    url.extend_from_slice(b"https://");
    url.extend_from_slice(name);
    if port != 443 {
        url.extend_from_slice(format!(":{port}").as_bytes());
    }
    // `OPTIONS *` names no resource: the site's root.
    match target {
        b"*" | b"" => url.push(b'/'),
        target => url.extend_from_slice(target),
    }
    HeaderValue::from_bytes(&url).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_url_over_https() {
        let cases: &[(&str, &str, u16, Option<&str>)] = &[
            (
                "shop.example.com",
                "/cart?id=7",
                443,
                Some("https://shop.example.com/cart?id=7"),
            ),
            (
                "shop.example.com:8080",
                "/",
                8443,
                Some("https://shop.example.com:8443/"),
            ),
            (
                "Shop.Example.com:80",
                "/a/b",
                443,
                Some("https://Shop.Example.com/a/b"),
            ),
            ("[::1]:8080", "/x", 8443, Some("https://[::1]:8443/x")),
            ("[::1]", "/x", 443, Some("https://[::1]/x")),
            ("10.0.0.7:80", "*", 443, Some("https://10.0.0.7/")),
            (":80", "/", 443, None),
            ("h", "/\u{7f}", 443, None),
        ];
        for (host, target, port, expected) in cases {
            let location = https_location(host.as_bytes(), target.as_bytes(), *port);
            assert_eq!(
                location.as_ref().map(|l| l.to_str().unwrap()),
                *expected,
                "{host} {target} {port}"
            );
        }
    }
}
