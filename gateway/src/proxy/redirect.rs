//! Redirects that name the replica: a replica knows itself by the address
//! the node connected to, or by the `Host` the node sent it, and writes
//! absolute redirects with them (nginx does by default). Sent on as they
//! are, they take the browser away from the gateway, to an address it
//! cannot reach. Like nginx's `proxy_redirect default`, the node turns
//! them back to the origin the client used.
//!
//! ## What is rewritten
//! A `Location` or `Content-Location` that is an absolute URL whose scheme
//! is the one the node spoke to the replica (`http`, or `https` over the
//! route's TLS) and whose authority names the replica: its address as
//! connected (`10.0.0.7:8080`), or the `Host` it was sent (the client's,
//! or an external upstream's host). Host names match without case, and a
//! port left out stands for the scheme's default. Its scheme and
//! authority become the client's: the scheme it came by and the `Host` it
//! asked for (`https://shop.example.com`), or, from an HTTP/1.0 client
//! that named no host, nothing (a path, as nginx's default leaves it). The
//! path, query and fragment are kept; the route's prefix is then moved
//! back by [`super::rewrite`].
//!
//! ## What is left alone
//! Another scheme (a plain replica sending its client to `https://`), any
//! other host, a scheme-relative (`//host/x`) or relative reference, and
//! every other header.

use crate::h1::response::ResponseHead;
use crate::upstream::Target;

/// The replica of an answer as the node reached it.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaOrigin<'a> {
    /// The node spoke TLS to it.
    pub tls: bool,
    /// The address it connected to.
    pub target: &'a Target,
    /// The `Host` it sent; `None` when it sent the address.
    pub host: Option<&'a [u8]>,
}

/// The origin the client used.
#[derive(Debug, Clone, Copy)]
pub struct ClientOrigin<'a> {
    /// `http` or `https`.
    pub scheme: &'a [u8],
    /// The host it asked for, port included when it named one.
    pub host: Option<&'a [u8]>,
}

fn is_location(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"location") || name.eq_ignore_ascii_case(b"content-location")
}

/// `head` with each `Location` and `Content-Location` that names the
/// replica moved to the client's origin; `head` itself when none does.
pub fn head(
    head: ResponseHead,
    replica: &ReplicaOrigin<'_>,
    client: &ClientOrigin<'_>,
) -> ResponseHead {
    if !head.fields().any(|(name, _)| is_location(name)) {
        return head;
    }
    let address = replica.target.authority();
    let names: &[&[u8]] = match replica.host {
        Some(host) => &[address.as_bytes(), host],
        None => &[address.as_bytes()],
    };
    let scheme: &[u8] = if replica.tls { b"https" } else { b"http" };
    let moved: Vec<(usize, Vec<u8>)> = head
        .fields()
        .enumerate()
        .filter(|(_, (name, _))| is_location(name))
        .filter_map(|(at, (_, value))| location(value, scheme, names, client).map(|l| (at, l)))
        .collect();
    if moved.is_empty() {
        return head;
    }
    let fields = head.fields().enumerate().map(|(at, (name, value))| {
        let value = moved
            .iter()
            .find(|(i, _)| *i == at)
            .map_or(value, |(_, location)| location.as_slice());
        (name, value)
    });
    let mut rebuilt =
        ResponseHead::from_fields(head.status, fields, head.framing, head.declared_length);
    rebuilt.keep_alive = head.keep_alive;
    rebuilt.upgrade = head.upgrade.clone();
    rebuilt
}

/// `value` on the client's origin when it is a `scheme` URL naming one of
/// `names`; `None` when it is left as it is.
fn location(
    value: &[u8],
    scheme: &[u8],
    names: &[&[u8]],
    client: &ClientOrigin<'_>,
) -> Option<Vec<u8>> {
    let after_scheme = scheme.len() + 3;
    let named_scheme = value.len() >= after_scheme
        && value[..scheme.len()].eq_ignore_ascii_case(scheme)
        && &value[scheme.len()..after_scheme] == b"://";
    if !named_scheme {
        return None;
    }
    let authority_end = value[after_scheme..]
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .map_or(value.len(), |i| after_scheme + i);
    let authority = &value[after_scheme..authority_end];
    let default_port = if scheme == b"https" { 443 } else { 80 };
    if !names
        .iter()
        .any(|name| same_authority(authority, name, default_port))
    {
        return None;
    }
    let rest = &value[authority_end..];
    let mut out = Vec::with_capacity(value.len() + 16);
    match client.host {
        Some(host) => {
            out.extend_from_slice(client.scheme);
            out.extend_from_slice(b"://");
            out.extend_from_slice(host);
        }
        None if !rest.starts_with(b"/") => out.push(b'/'),
        None => {}
    }
    out.extend_from_slice(rest);
    (out != value).then_some(out)
}

/// Whether two authorities name the same host and port, a missing port
/// being `default_port`.
fn same_authority(a: &[u8], b: &[u8], default_port: u16) -> bool {
    match (host_port(a, default_port), host_port(b, default_port)) {
        (Some((host_a, port_a)), Some((host_b, port_b))) => {
            port_a == port_b && host_a.eq_ignore_ascii_case(host_b)
        }
        _ => false,
    }
}

/// An authority's host (an IPv6 address in its brackets) and port; `None`
/// when it is empty or its port is not one.
fn host_port(authority: &[u8], default_port: u16) -> Option<(&[u8], u16)> {
    let (host, port) = match authority.iter().rposition(|b| *b == b':') {
        Some(colon) if !authority[colon..].contains(&b']') => {
            (&authority[..colon], &authority[colon + 1..])
        }
        _ => (authority, &b""[..]),
    };
    let port = match port {
        b"" => default_port,
        digits => std::str::from_utf8(digits).ok()?.parse().ok()?,
    };
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use http::Method;

    const HTTPS_CLIENT: ClientOrigin<'static> = ClientOrigin {
        scheme: b"https",
        host: Some(b"shop.example.com"),
    };

    fn moved(
        value: &str,
        scheme: &str,
        names: &[&str],
        client: &ClientOrigin<'_>,
    ) -> Option<String> {
        let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        location(value.as_bytes(), scheme.as_bytes(), &names, client)
            .map(|l| String::from_utf8(l).unwrap())
    }

    #[test]
    fn urls_naming_the_replica_move_to_the_client_origin() {
        let names = ["10.0.0.7:8080", "shop.example.com"];
        let cases: &[(&str, Option<&str>)] = &[
            (
                "http://10.0.0.7:8080/a/?x=1#f",
                Some("https://shop.example.com/a/?x=1#f"),
            ),
            ("HTTP://10.0.0.7:8080", Some("https://shop.example.com")),
            ("http://10.0.0.7:8080?x", Some("https://shop.example.com?x")),
            // The Host it was sent, a port left out being 80.
            (
                "http://Shop.Example.com/a",
                Some("https://shop.example.com/a"),
            ),
            (
                "http://shop.example.com:80/a",
                Some("https://shop.example.com/a"),
            ),
            // Left alone: another port, host or scheme; no host at all.
            ("http://10.0.0.7:8081/a", None),
            ("http://10.0.0.7/a", None),
            ("http://elsewhere.example/a", None),
            ("https://10.0.0.7:8080/a", None),
            ("https://shop.example.com/a", None),
            ("//10.0.0.7:8080/a", None),
            ("/a", None),
            ("a/b", None),
            ("http://user@10.0.0.7:8080/a", None),
            ("http://10.0.0.7:8080x/a", None),
            ("http:/10.0.0.7:8080/a", None),
            ("", None),
        ];
        for (value, expected) in cases {
            assert_eq!(
                moved(value, "http", &names, &HTTPS_CLIENT).as_deref(),
                *expected,
                "{value}"
            );
        }
    }

    #[test]
    fn an_https_replica_is_named_by_https_urls() {
        let names = ["billing.example.net"];
        assert_eq!(
            moved(
                "https://billing.example.net:443/p",
                "https",
                &names,
                &HTTPS_CLIENT
            )
            .as_deref(),
            Some("https://shop.example.com/p")
        );
        assert_eq!(
            moved(
                "http://billing.example.net/p",
                "https",
                &names,
                &HTTPS_CLIENT
            ),
            None
        );
    }

    #[test]
    fn ipv6_replicas_and_a_client_without_host() {
        let names = ["[fd00::7]:8080"];
        let plain = ClientOrigin {
            scheme: b"http",
            host: Some(b"[::1]:8000"),
        };
        assert_eq!(
            moved("http://[FD00::7]:8080/a", "http", &names, &plain).as_deref(),
            Some("http://[::1]:8000/a")
        );
        assert_eq!(moved("http://[fd00::7]/a", "http", &names, &plain), None);
        let hostless = ClientOrigin {
            scheme: b"http",
            host: None,
        };
        assert_eq!(
            moved("http://[fd00::7]:8080/a?x", "http", &names, &hostless).as_deref(),
            Some("/a?x")
        );
        assert_eq!(
            moved("http://[fd00::7]:8080?x", "http", &names, &hostless).as_deref(),
            Some("/?x")
        );
    }

    #[test]
    fn the_head_keeps_every_other_field_and_its_framing() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9000/a/\r\nX-A: 1\r\n\
             Content-Location: http://other.example/b\r\nContent-Length: 3\r\n\r\nabc",
        );
        let parsed = crate::h1::response::parse_response(&mut buf, &Method::GET)
            .unwrap()
            .unwrap();
        let target = Target::Addr("127.0.0.1:9000".parse().unwrap());
        let replica = ReplicaOrigin {
            tls: false,
            target: &target,
            host: Some(b"shop.example.com"),
        };
        let rebuilt = head(parsed, &replica, &HTTPS_CLIENT);
        let fields: Vec<(String, String)> = rebuilt
            .fields()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        let expected = [
            ("Location", "https://shop.example.com/a/"),
            ("X-A", "1"),
            ("Content-Location", "http://other.example/b"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(fields, expected);
        assert_eq!(rebuilt.status, 302);
        assert_eq!(rebuilt.content_length(), Some(3));
        assert!(rebuilt.keep_alive);
        assert_eq!(&buf[..], b"abc", "the body is still where it was");
    }
}
