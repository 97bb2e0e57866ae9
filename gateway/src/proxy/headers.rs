//! Header rules of the proxy: what the upstream learns about the client,
//! and what never crosses.
//!
//! The request head that goes upstream is written in one pass over the
//! client's headers: hop-by-hop headers (and those any of the client's
//! `Connection` headers names) are skipped, `Host` comes first, and the
//! forwarding headers and the body's framing are written at the end,
//! from what the proxy parsed and saw. `Connection` can never remove the
//! framing or `Host` ([`h1::is_protected`]), nor the forwarding headers,
//! which are decided before it is looked at: the client's own
//! `Content-Length` and `Transfer-Encoding` lines never cross, so a body
//! can never be read upstream as a second request.
//!
//! ## Forwarding headers
//! The node owns the whole family that says who the client is and how it
//! came ([`FORWARDING`], listed with the header rules): `X-Forwarded-For`,
//! `-Proto`, `-Host`, `-Port`, `-Prefix`, `X-Real-IP`, `Forwarded` (RFC
//! 7239), `X-Original-URL` and `X-Rewrite-URL`, as Traefik and Envoy do.
//! From a client that is not in `[global] trusted_proxies`, every one of
//! them is dropped and the node writes what it saw: `X-Forwarded-For` and
//! `X-Real-IP` the peer's address, `X-Forwarded-Proto` the scheme,
//! `X-Forwarded-Host` the host asked for, `X-Forwarded-Port` the port of
//! the listener, and `Forwarded` the address, scheme and host as one
//! element. Anyone can send these headers, and a replica that reads the
//! client's address from them (for a log, a rate limit, an allow-list)
//! would believe whoever sent them.
//!
//! The family holds, besides, the names applications and identity
//! proxies read as the client's address, scheme, host, path or method
//! (`X-Client-IP`, `True-Client-IP`, `X-Forwarded-Scheme`,
//! `X-Forwarded-Server`, `X-Forwarded-Uri`, ... [`PASSED`]): the node
//! never writes them, and drops them from any client but a trusted proxy.
//!
//! A trusted client is a proxy in front of the node: the node appends its
//! hop to that proxy's `X-Forwarded-For` and `Forwarded`, and keeps the
//! others as it sent them, writing its own only where it sent none. A
//! chain is appended to only when it is well-formed: `Forwarded` by RFC
//! 7239's grammar (a value a token or a closed quoted string),
//! `X-Forwarded-For` a list with no quotes. Anything else could take the
//! node's hop into the proxy's last element (`for="1.2.3.4` would swallow
//! it), so the node writes its own hop alone.
//!
//! A route's `request_headers` may set or remove the family members the
//! configuration does not reserve (`Forwarded`, `X-Real-IP`,
//! `X-Forwarded-Port`, `-Prefix`, `X-Original-URL`, `X-Rewrite-URL`): the
//! rule then decides that header alone, as the operator wrote it.
//!
//! Header names holding `_` are dropped unless `underscores_in_headers` is
//! set, as nginx does: CGI, WSGI and PHP read `X_Forwarded_For` and
//! `X-Forwarded-For` as one name.
//!
//! An HTTP/2 client may send `cookie` as one field per cookie (RFC 9113
//! §8.2.3, RFC 9114 §4.2.1); an HTTP/1.1 replica gets them joined by `; `
//! into one `Cookie` line, where the first one was, since HTTP/1.1 allows
//! only one (RFC 6265 §5.4). An HTTP/2 replica gets them as they came.
//!
//! The client's headers are never modified, so a retry writes the same
//! head again.
//!
//! Through a forward proxy (`HTTP_PROXY`, for an `http://` upstream), the
//! request line names the upstream in absolute form and the proxy's own
//! credentials, if its URL had any, go in `Proxy-Authorization`; the
//! client's `Proxy-Authorization` is hop-by-hop and never crosses.

use std::net::IpAddr;

use http::header::HeaderValue;

use super::incoming::{ClientRequest, Fields};
use super::rules::{PASSED, WRITTEN, is_forwarding};
use super::scheme::Scheme;
use crate::h1::{self, request};
use crate::upstream::Target;

/// The client of a connection, as the forwarding headers name it; made
/// once per connection.
#[derive(Debug, Clone)]
pub struct Client {
    ip: IpAddr,
    value: HeaderValue,
    scheme: Scheme,
    /// The port of the listener the connection came in on
    /// (`X-Forwarded-Port`); `None` when the listener could not tell.
    port: Option<u16>,
}

impl Client {
    pub fn new(ip: IpAddr, port: Option<u16>, scheme: Scheme) -> Client {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_canonical(),
            v4 => v4,
        };
        let value =
            HeaderValue::from_str(&ip.to_string()).unwrap_or(HeaderValue::from_static("unknown"));
        Client {
            ip,
            value,
            scheme,
            port,
        }
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Whether the connection came over TLS.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
}

/// What the upstream is told besides the client's own headers.
#[derive(Debug)]
pub struct Forwarding<'a> {
    pub client: &'a Client,
    /// The host the client asked for; none from an HTTP/1.0 client that
    /// named none.
    pub host: Option<&'a [u8]>,
    /// The `Host` an external upstream expects; `None` keeps the client's.
    pub upstream_host: Option<&'a [u8]>,
    /// The protocol of an upgrade the client asked for.
    pub upgrade: Option<&'a [u8]>,
    /// Client headers whose names hold `_` are forwarded.
    pub underscores: bool,
    /// `http://host:port` when the request goes to a forward proxy, which
    /// then gets it in absolute form.
    pub proxy_origin: Option<&'a [u8]>,
    /// The forward proxy's `Proxy-Authorization`.
    pub proxy_authorization: Option<&'a [u8]>,
    /// The route's `request_headers`.
    pub rules: &'a crate::config::HeaderRules,
    /// The client is in `[global] trusted_proxies`: a proxy whose
    /// forwarding headers are appended to or kept, not replaced.
    pub trusted: bool,
}

/// Headers the proxy writes itself besides the forwarding family,
/// whatever the client sent.
fn ours(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"host") || name.eq_ignore_ascii_case(b"x-request-id")
}

/// Writes the request head that goes upstream to `replica`.
pub fn write_upstream_head(
    out: &mut Vec<u8>,
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    replica: &Target,
) {
    match forwarding.proxy_origin {
        Some(origin) => request::write_absolute_request_line(out, req.method, origin, req.path),
        None => request::write_request_line(out, req.method, req.path),
    }
    match forwarding.upstream_host.or(forwarding.host) {
        Some(host) => h1::write_header(out, b"host", host),
        // Never an empty `Host`: the replica's own authority.
        None => h1::write_header(out, b"host", replica.authority().as_bytes()),
    }
    if let Some(credentials) = forwarding.proxy_authorization {
        h1::write_header(out, b"proxy-authorization", credentials);
    }
    forwarded_fields(req, forwarding, Cookies::Joined, |name, value| {
        h1::write_header(out, name, value)
    });
    if let Some(protocol) = forwarding.upgrade {
        h1::write_header(out, b"connection", b"upgrade");
        h1::write_header(out, b"upgrade", protocol);
    }
    request::end_head(out, req.body);
}

/// The request that goes upstream to `replica` over HTTP/2: the same
/// headers as over HTTP/1.1 but for those HTTP/2 forbids, `Host` as the
/// `:authority`, and `te: trailers` when the client sent it (gRPC needs
/// it). `scheme` is `http` for h2c, `https` over TLS.
pub fn upstream_h2_request(
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    replica: &Target,
    scheme: &str,
) -> Result<http::Request<()>, http::Error> {
    let authority = match forwarding.upstream_host.or(forwarding.host) {
        Some(host) => String::from_utf8_lossy(host).into_owned(),
        None => replica.authority(),
    };
    let path = if req.path.is_empty() {
        &b"/"[..]
    } else {
        req.path
    };
    let uri = http::Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path)
        .build()?;
    let mut request = http::Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .version(http::Version::HTTP_2)
        .body(())?;
    let headers = request.headers_mut();
    let mut trailers = false;
    for te in req.fields.all("te") {
        trailers |= h1::tokens(te).any(|t| t.eq_ignore_ascii_case(b"trailers"));
    }
    if trailers {
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    if let crate::h1::request::BodyKind::Length(n) = req.body {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    let mut failed = None;
    forwarded_fields(req, forwarding, Cookies::AsSent, |name, value| {
        match (
            http::header::HeaderName::from_bytes(name),
            HeaderValue::from_bytes(value),
        ) {
            (Ok(name), Ok(value)) => {
                headers.append(name, value);
            }
            (Err(e), _) => failed = Some(http::Error::from(e)),
            (_, Err(e)) => failed = Some(http::Error::from(e)),
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(request),
    }
}

/// How the client's `cookie` fields go upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cookies {
    /// One field, the values joined by `; ` (an HTTP/1.1 replica).
    Joined,
    /// One field per field the client sent (an HTTP/2 replica).
    AsSent,
}

/// Calls `emit` with each header the upstream gets besides `Host`, the
/// framing and an upgrade: the client's end-to-end headers (less those
/// the route's rules remove or set, and the forwarding family; `cookie`
/// as `cookies` says), the rules' own, `X-Request-Id`, then the
/// forwarding family ([`forwarding_family`]).
fn forwarded_fields(
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    cookies: Cookies,
    mut emit: impl FnMut(&[u8], &[u8]),
) {
    let connection = req.fields.all("connection");
    let ruled = forwarding.rules.changes_head();
    // Only HTTP/2 and HTTP/3 split cookies: an HTTP/1 client's lines cross
    // as they came.
    let split = cookies == Cookies::Joined && matches!(req.fields, Fields::Map(_));
    let mut cookie_sent = false;
    req.fields.each(|name, value| {
        // Written below, whoever the client is; never named away by
        // `Connection`.
        if is_forwarding(name) {
            return;
        }
        // The framing is written below, from what was parsed.
        let framing = name.eq_ignore_ascii_case(b"content-length");
        // The proxy answers `Expect: 100-continue` itself.
        let expect = name.eq_ignore_ascii_case(b"expect");
        let named = h1::names(connection.iter().copied(), name) && !h1::is_protected(name);
        let underscore = !forwarding.underscores && name.contains(&b'_');
        if ours(name) || framing || expect || h1::is_hop_by_hop(name) || named || underscore {
            return;
        }
        if ruled && super::rules::overridden(forwarding.rules, name) {
            return;
        }
        if split && name.eq_ignore_ascii_case(b"cookie") {
            // All of them at the first; the later ones are in it.
            if !cookie_sent {
                cookie_sent = true;
                emit(name, &req.fields.all("cookie").join(&b"; "[..]));
            }
            return;
        }
        emit(name, value);
    });
    for (name, value) in &forwarding.rules.set {
        emit(name.as_str().as_bytes(), value.as_bytes());
    }
    emit(b"x-request-id", req.id.as_bytes());
    forwarding_family(req, forwarding, &mut emit);
}

/// How the node writes one header of the forwarding family.
enum Hop<'a> {
    /// A list each proxy appends its hop to: a trusted proxy's, when
    /// every value it sent is a well-formed list (`valid`), then this.
    /// A malformed one is replaced by this alone, for what the node
    /// appended could be read as part of the proxy's last element (an
    /// unclosed quote in `Forwarded` would swallow it).
    Append(&'a [u8], fn(&[u8]) -> bool),
    /// One value: a trusted proxy's as it sent it, else this.
    Keep(&'a [u8]),
    /// Not written: a route's rule decides it.
    Ruled,
    /// Nothing this hop can say (an HTTP/1.0 client named no host).
    Unknown,
}

/// Calls `emit` with each header of the forwarding family: first those
/// the node writes ([`WRITTEN`]), a trusted proxy's values appended to or
/// kept and what the node saw for the rest; then those only a trusted
/// proxy's cross ([`PASSED`]). A header the route's rules set or remove
/// is left to them.
fn forwarding_family(
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    emit: &mut impl FnMut(&[u8], &[u8]),
) {
    let client = forwarding.client;
    let address = client.value.as_bytes();
    let mut digits = [0; 5];
    let port = client.port.map(|port| decimal(port, &mut digits));
    let element = forwarded_element(client, forwarding.host);
    let ruled = forwarding.rules.changes_head();
    let overridden =
        |name: &str| ruled && super::rules::overridden(forwarding.rules, name.as_bytes());
    let sent = |name: &str| {
        let mut sent = match forwarding.trusted {
            true => req.fields.all(name),
            false => Vec::new(),
        };
        sent.retain(|value| !value.trim_ascii().is_empty());
        sent
    };
    for name in WRITTEN {
        let hop = match (name, overridden(name)) {
            (_, true) => Hop::Ruled,
            ("x-forwarded-for", _) => Hop::Append(address, is_address_list),
            ("forwarded", _) => Hop::Append(&element, is_forwarded_list),
            ("x-forwarded-proto", _) => Hop::Keep(client.scheme.proto()),
            ("x-forwarded-host", _) => forwarding.host.map_or(Hop::Unknown, Hop::Keep),
            ("x-forwarded-port", _) => port.map_or(Hop::Unknown, Hop::Keep),
            ("x-real-ip", _) => Hop::Keep(address),
            _ => Hop::Unknown,
        };
        let sent = match hop {
            Hop::Ruled => continue,
            _ => sent(name),
        };
        let name = name.as_bytes();
        match hop {
            Hop::Append(ours, valid) if sent.is_empty() || !sent.iter().all(|v| valid(v)) => {
                emit(name, ours)
            }
            Hop::Append(ours, _) => {
                let mut list = sent.join(&b", "[..]);
                list.extend_from_slice(b", ");
                list.extend_from_slice(ours);
                emit(name, &list);
            }
            Hop::Keep(ours) if sent.is_empty() => emit(name, ours),
            _ => sent.iter().for_each(|value| emit(name, value)),
        }
    }
    if !forwarding.trusted {
        return;
    }
    for name in PASSED {
        if !overridden(name) {
            sent(name)
                .iter()
                .for_each(|value| emit(name.as_bytes(), value));
        }
    }
}

/// Whether `value` is a list `X-Forwarded-For` may hold: addresses (with
/// a port, in brackets), `unknown` or obfuscated names, between commas;
/// nothing that quotes or escapes.
fn is_address_list(value: &[u8]) -> bool {
    value
        .iter()
        .all(|b| h1::is_token(*b) || matches!(*b, b',' | b' ' | b'\t' | b':' | b'[' | b']'))
}

/// Whether `value` is a well-formed `Forwarded` list (RFC 7239 §4):
/// elements between commas, each pairs `token=value` between semicolons,
/// a value a token or a closed quoted string. Spaces are taken around
/// the separators, as proxies write them.
fn is_forwarded_list(value: &[u8]) -> bool {
    let mut rest = value;
    loop {
        rest = rest.trim_ascii_start();
        // A pair, or an empty element or pair.
        if rest.first().is_some_and(|b| *b != b',' && *b != b';') {
            let name = rest.iter().take_while(|b| h1::is_token(**b)).count();
            if name == 0 || rest.get(name) != Some(&b'=') {
                return false;
            }
            rest = &rest[name + 1..];
            rest = match rest.first() {
                Some(b'"') => match closed_quote(&rest[1..]) {
                    Some(after) => after,
                    None => return false,
                },
                _ => {
                    let token = rest.iter().take_while(|b| h1::is_token(**b)).count();
                    if token == 0 {
                        return false;
                    }
                    &rest[token..]
                }
            };
            rest = rest.trim_ascii_start();
        }
        match rest.split_first() {
            None => return true,
            Some((b',' | b';', after)) => rest = after,
            Some(_) => return false,
        }
    }
}

/// What follows a quoted string whose opening quote came before `rest`
/// (RFC 9110 §5.6.4); `None` when it is never closed or holds a byte no
/// quoted string may.
fn closed_quote(rest: &[u8]) -> Option<&[u8]> {
    let text = |b: u8| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80;
    let mut at = 0;
    while let Some(&b) = rest.get(at) {
        match b {
            b'"' => return Some(&rest[at + 1..]),
            b'\\' => match rest.get(at + 1) {
                Some(&escaped) if text(escaped) => at += 2,
                _ => return None,
            },
            b if text(b) => at += 1,
            _ => return None,
        }
    }
    None
}

/// The node's element of `Forwarded` (RFC 7239 §4): `for=` the client,
/// `proto=` the scheme it came by, `host=` the host it asked for. An IPv6
/// address is bracketed and quoted (§6), a host quoted when it is not a
/// token (it holds a `:` before a port); a host that no quoted string can
/// carry (a control character) is left out.
fn forwarded_element(client: &Client, host: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(48 + host.map_or(0, <[u8]>::len));
    out.extend_from_slice(b"for=");
    match client.ip {
        IpAddr::V4(_) => out.extend_from_slice(client.value.as_bytes()),
        IpAddr::V6(_) => {
            out.extend_from_slice(b"\"[");
            out.extend_from_slice(client.value.as_bytes());
            out.extend_from_slice(b"]\"");
        }
    }
    out.extend_from_slice(b";proto=");
    out.extend_from_slice(client.scheme.proto());
    let quotable = |b: &u8| *b == b'\t' || (*b >= 0x20 && *b != 0x7f);
    if let Some(host) = host.filter(|h| !h.is_empty() && h.iter().all(quotable)) {
        out.extend_from_slice(b";host=");
        if host.iter().all(|b| h1::is_token(*b)) {
            out.extend_from_slice(host);
        } else {
            out.push(b'"');
            for b in host {
                if matches!(*b, b'"' | b'\\') {
                    out.push(b'\\');
                }
                out.push(*b);
            }
            out.push(b'"');
        }
    }
    out
}

/// `n` in decimal, written into `buf`.
fn decimal(mut n: u16, buf: &mut [u8; 5]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::request::parse_request;
    use crate::proxy::incoming::Fields;
    use crate::proxy::rules::RequestId;
    use bytes::BytesMut;

    fn head(text: &str, forwarding: &Forwarding<'_>) -> String {
        let mut buf = BytesMut::from(text);
        let parts = parse_request(&mut buf, &mut Vec::new()).unwrap().unwrap();
        let req = ClientRequest {
            method: &parts.method,
            path: &parts.path,
            host: parts.host.as_deref(),
            fields: Fields::Raw(&parts),
            upgrade: parts.upgrade.as_deref(),
            body: parts.body,
            grpc: false,
            id: &RequestId::from_client(b"req-1").unwrap(),
        };
        let mut out = Vec::new();
        let replica = Target::Addr("10.1.2.3:8080".parse().unwrap());
        write_upstream_head(&mut out, &req, forwarding, &replica);
        String::from_utf8(out).unwrap()
    }

    fn client() -> Client {
        Client::new(
            "10.0.0.9".parse().unwrap(),
            Some(8080),
            Scheme::Http { https_port: None },
        )
    }

    /// The forwarding headers the node writes for [`client`] asking for
    /// `host`, when nobody is trusted.
    fn ours(host: &str) -> String {
        format!(
            "x-forwarded-for: 10.0.0.9\r\nx-forwarded-proto: http\r\nx-forwarded-host: {host}\r\n\
             x-forwarded-port: 8080\r\nx-real-ip: 10.0.0.9\r\nforwarded: for=10.0.0.9;proto=http;host={host}\r\n"
        )
    }

    /// Every header of the forwarding family, as a client forging them
    /// all would send them.
    const SPOOFED: &str = "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.example\r\n\
        X-Forwarded-Port: 443\r\nX-Forwarded-Prefix: /admin\r\nX-Real-IP: 6.6.6.6\r\n\
        Forwarded: for=6.6.6.6;proto=https\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\n\
        X-Client-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nX-Forwarded-Server: evil.example\r\n\
        X-Forwarded-Scheme: https\r\n";

    fn forwarding<'a>(client: &'a Client, host: &'a [u8]) -> Forwarding<'a> {
        Forwarding {
            client,
            host: Some(host),
            upstream_host: None,
            upgrade: None,
            underscores: false,
            proxy_origin: None,
            proxy_authorization: None,
            rules: &NO_RULES,
            trusted: false,
        }
    }

    static NO_RULES: crate::config::HeaderRules = crate::config::HeaderRules {
        set: Vec::new(),
        remove: Vec::new(),
        trailers: Vec::new(),
    };

    #[test]
    fn hop_by_hop_and_connection_listed_headers_go() {
        let client = client();
        let text = head(
            "GET /x?y=1 HTTP/1.1\r\nHost: shop.example.com\r\nConnection: keep-alive, x-secret\r\n\
             Keep-Alive: timeout=5\r\nX-Secret: 1\r\nTE: trailers\r\nProxy-Authorization: Basic x\r\n\
             Connection: x-other\r\nX-Other: 2\r\nExpect: 100-continue\r\nAccept: */*\r\n\r\n",
            &forwarding(&client, b"shop.example.com"),
        );
        assert_eq!(
            text,
            format!(
                "GET /x?y=1 HTTP/1.1\r\nhost: shop.example.com\r\nAccept: */*\r\n\
                 x-request-id: req-1\r\n{}\r\n",
                ours("shop.example.com")
            )
        );
    }

    #[test]
    fn connection_never_removes_the_framing_host_or_forwarded_headers() {
        let client = client();
        let fw = forwarding(&client, b"h");
        for connection in [
            "Content-Length",
            "keep-alive, content-length",
            "Transfer-Encoding",
            "Host",
            "X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto",
            "X-Real-IP, Forwarded, X-Forwarded-Port",
        ] {
            let text = head(
                &format!(
                    "POST /public/x HTTP/1.1\r\nHost: h\r\nConnection: {connection}\r\nContent-Length: 5\r\n\r\n"
                ),
                &fw,
            );
            assert_eq!(
                text,
                format!(
                    "POST /public/x HTTP/1.1\r\nhost: h\r\nx-request-id: req-1\r\n{}content-length: 5\r\n\r\n",
                    ours("h")
                ),
                "Connection: {connection}"
            );
        }
        let chunked = head(
            "POST / HTTP/1.1\r\nHost: h\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n",
            &fw,
        );
        assert!(
            chunked.ends_with("transfer-encoding: chunked\r\n\r\n")
                && !chunked.contains("Transfer-Encoding"),
            "{chunked}"
        );
    }

    #[test]
    fn an_untrusted_clients_forwarding_headers_are_dropped_and_replaced() {
        let client = Client::new(
            "::ffff:10.0.0.1".parse().unwrap(),
            Some(8080),
            Scheme::Http { https_port: None },
        );
        let forwarding = Forwarding {
            client: &client,
            host: Some(b"api.example.com"),
            upstream_host: Some(b"billing.example.net"),
            upgrade: None,
            underscores: false,
            proxy_origin: None,
            proxy_authorization: None,
            rules: &NO_RULES,
            trusted: false,
        };
        let request = format!(
            "POST /x HTTP/1.1\r\nHost: api.example.com\r\n{SPOOFED}X-Forwarded-For: 198.51.100.1\r\n\
             Connection: X-Original-URL\r\nContent-Length: 3\r\n\r\n"
        );
        let text = head(&request, &forwarding);
        assert_eq!(
            text,
            "POST /x HTTP/1.1\r\nhost: billing.example.net\r\nx-request-id: req-1\r\n\
             x-forwarded-for: 10.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: api.example.com\r\n\
             x-forwarded-port: 8080\r\nx-real-ip: 10.0.0.1\r\n\
             forwarded: for=10.0.0.1;proto=http;host=api.example.com\r\ncontent-length: 3\r\n\r\n"
        );
        for forged in ["6.6.6.6", "198.51.100.1", "evil", "443", "/admin", "https"] {
            assert!(!text.contains(forged), "{forged} crossed: {text}");
        }
    }

    #[test]
    fn a_trusted_proxys_chains_are_appended_to_and_its_values_kept() {
        let client = client();
        let forwarding = Forwarding {
            trusted: true,
            ..forwarding(&client, b"shop.example.com")
        };
        let request = format!(
            "GET / HTTP/1.1\r\nHost: shop.example.com\r\n{SPOOFED}X-Forwarded-For: 198.51.100.1\r\n\
             Forwarded: for=198.51.100.1\r\n\r\n"
        );
        let text = head(&request, &forwarding);
        let family = text
            .split_once("x-request-id: req-1\r\n")
            .map(|(_, family)| family)
            .unwrap();
        assert_eq!(
            family,
            "x-forwarded-for: 6.6.6.6, 198.51.100.1, 10.0.0.9\r\n\
             x-forwarded-proto: https\r\nx-forwarded-host: evil.example\r\nx-forwarded-port: 443\r\n\
             x-real-ip: 6.6.6.6\r\n\
             forwarded: for=6.6.6.6;proto=https, for=198.51.100.1, for=10.0.0.9;proto=http;host=shop.example.com\r\n\
             x-forwarded-prefix: /admin\r\nx-original-url: /admin\r\nx-rewrite-url: /admin\r\n\
             x-client-ip: 6.6.6.6\r\ntrue-client-ip: 6.6.6.6\r\nx-forwarded-scheme: https\r\n\
             x-forwarded-server: evil.example\r\n\r\n"
        );
        // What the proxy did not send, the node writes; an empty value is
        // none.
        let bare = head(
            "GET / HTTP/1.1\r\nHost: shop.example.com\r\nX-Forwarded-For: 198.51.100.1\r\nX-Real-IP: \r\n\r\n",
            &forwarding,
        );
        assert!(
            bare.ends_with(&format!(
                "x-request-id: req-1\r\n{}\r\n",
                ours("shop.example.com").replace("for: 10.0.0.9", "for: 198.51.100.1, 10.0.0.9")
            )),
            "{bare}"
        );
    }

    #[test]
    fn forwarded_brackets_and_quotes_an_ipv6_client_and_quotes_a_host_with_a_port() {
        let client = Client::new("2001:db8::1".parse().unwrap(), Some(8443), Scheme::Https);
        let element =
            |host: Option<&[u8]>| String::from_utf8(forwarded_element(&client, host)).unwrap();
        assert_eq!(
            element(Some(b"shop.example.com")),
            "for=\"[2001:db8::1]\";proto=https;host=shop.example.com"
        );
        assert_eq!(
            element(Some(b"shop.example.com:8443")),
            "for=\"[2001:db8::1]\";proto=https;host=\"shop.example.com:8443\""
        );
        assert_eq!(
            element(Some(b"[::1]:8443")),
            "for=\"[2001:db8::1]\";proto=https;host=\"[::1]:8443\""
        );
        assert_eq!(
            element(Some(b"a\"b\\c")),
            "for=\"[2001:db8::1]\";proto=https;host=\"a\\\"b\\\\c\""
        );
        assert_eq!(element(None), "for=\"[2001:db8::1]\";proto=https");
        assert_eq!(
            element(Some(b"a\x01b")),
            "for=\"[2001:db8::1]\";proto=https"
        );
        let text = head(
            "GET / HTTP/1.1\r\nHost: h:8443\r\n\r\n",
            &forwarding(&client, b"h:8443"),
        );
        assert!(
            text.contains(
                "x-forwarded-for: 2001:db8::1\r\nx-forwarded-proto: https\r\nx-forwarded-host: h:8443\r\n\
                 x-forwarded-port: 8443\r\nx-real-ip: 2001:db8::1\r\n\
                 forwarded: for=\"[2001:db8::1]\";proto=https;host=\"h:8443\"\r\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_rule_decides_the_family_members_it_names() {
        let client = client();
        let rules = crate::config::HeaderRules {
            set: vec![(
                http::header::HeaderName::from_static("x-forwarded-prefix"),
                HeaderValue::from_static("/api"),
            )],
            remove: vec![http::header::HeaderName::from_static("x-real-ip")],
            trailers: Vec::new(),
        };
        for trusted in [false, true] {
            let text = head(
                &format!("GET / HTTP/1.1\r\nHost: h\r\n{SPOOFED}\r\n"),
                &Forwarding {
                    rules: &rules,
                    trusted,
                    ..forwarding(&client, b"h")
                },
            );
            assert_eq!(text.matches("x-forwarded-prefix").count(), 1, "{text}");
            assert!(text.contains("x-forwarded-prefix: /api\r\n"), "{text}");
            assert!(!text.to_ascii_lowercase().contains("x-real-ip"), "{text}");
        }
    }

    #[test]
    fn an_http2_replica_is_told_the_same() {
        let client = client();
        let mut map = http::HeaderMap::new();
        for line in SPOOFED.split("\r\n").filter(|l| !l.is_empty()) {
            let (name, value) = line.split_once(": ").unwrap();
            map.append(
                http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let id = RequestId::from_client(b"req-1").unwrap();
        let req = ClientRequest {
            method: &http::Method::GET,
            path: b"/",
            host: Some(b"h"),
            fields: Fields::Map(&map),
            upgrade: None,
            body: crate::h1::request::BodyKind::None,
            grpc: false,
            id: &id,
        };
        let replica = Target::Addr("10.1.2.3:8080".parse().unwrap());
        let seen = |trusted: bool| {
            let fw = Forwarding {
                trusted,
                ..forwarding(&client, b"h")
            };
            let request = upstream_h2_request(&req, &fw, &replica, "http").unwrap();
            super::super::rules::FORWARDING
                .iter()
                .map(|name| {
                    let values: Vec<_> = request
                        .headers()
                        .get_all(*name)
                        .iter()
                        .map(|v| v.to_str().unwrap().to_string())
                        .collect();
                    (*name, values.join(" | "))
                })
                .filter(|(_, values)| !values.is_empty())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            seen(false),
            [
                ("x-forwarded-for", "10.0.0.9".to_string()),
                ("x-forwarded-proto", "http".into()),
                ("x-forwarded-host", "h".into()),
                ("x-forwarded-port", "8080".into()),
                ("x-real-ip", "10.0.0.9".into()),
                ("forwarded", "for=10.0.0.9;proto=http;host=h".into()),
            ]
        );
        assert_eq!(
            seen(true),
            [
                ("x-forwarded-for", "6.6.6.6, 10.0.0.9".to_string()),
                ("x-forwarded-proto", "https".into()),
                ("x-forwarded-host", "evil.example".into()),
                ("x-forwarded-port", "443".into()),
                ("x-real-ip", "6.6.6.6".into()),
                (
                    "forwarded",
                    "for=6.6.6.6;proto=https, for=10.0.0.9;proto=http;host=h".into()
                ),
                ("x-forwarded-prefix", "/admin".into()),
                ("x-original-url", "/admin".into()),
                ("x-rewrite-url", "/admin".into()),
                ("x-client-ip", "6.6.6.6".into()),
                ("true-client-ip", "6.6.6.6".into()),
                ("x-forwarded-scheme", "https".into()),
                ("x-forwarded-server", "evil.example".into()),
            ]
        );
    }

    #[test]
    fn ports_are_written_in_decimal() {
        for port in [0, 7, 80, 443, 8080, 65535] {
            let mut buf = [0; 5];
            assert_eq!(decimal(port, &mut buf), port.to_string().as_bytes());
        }
    }

    #[test]
    fn over_tls_the_upstream_is_told_https_whatever_the_client_says() {
        let client = Client::new("10.0.0.9".parse().unwrap(), Some(443), Scheme::Https);
        let text = head(
            "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: http\r\n\r\n",
            &forwarding(&client, b"h"),
        );
        assert!(text.contains("x-forwarded-proto: https\r\n"), "{text}");
        assert!(!text.contains("proto: http\r\n"), "{text}");
    }

    #[test]
    fn underscored_names_are_dropped_unless_kept() {
        let client = client();
        let request = "GET / HTTP/1.1\r\nHost: h\r\nX_Forwarded_For: 1.2.3.4\r\nX_Custom: 1\r\nX-Ok: 2\r\n\r\n";
        let dropped = head(request, &forwarding(&client, b"h"));
        assert!(
            !dropped.contains('_') && dropped.contains("X-Ok: 2"),
            "{dropped}"
        );
        let kept = head(
            request,
            &Forwarding {
                underscores: true,
                ..forwarding(&client, b"h")
            },
        );
        assert!(
            kept.contains("X_Custom: 1\r\n") && kept.contains("X_Forwarded_For"),
            "{kept}"
        );
        assert!(kept.contains("x-forwarded-for: 10.0.0.9\r\n"), "{kept}");
    }

    #[test]
    fn a_request_without_host_names_the_replica() {
        let client = client();
        let text = head(
            "GET / HTTP/1.0\r\n\r\n",
            &Forwarding {
                host: None,
                ..forwarding(&client, b"")
            },
        );
        assert!(text.contains("host: 10.1.2.3:8080\r\n"), "{text}");
        assert!(!text.contains("x-forwarded-host"), "{text}");
    }

    #[test]
    fn through_a_forward_proxy_the_target_is_absolute() {
        let client = client();
        let forwarding = Forwarding {
            upstream_host: Some(b"billing.example.net:8080"),
            proxy_origin: Some(b"http://billing.example.net:8080"),
            proxy_authorization: Some(b"Basic dTpw"),
            ..forwarding(&client, b"shop.example.com")
        };
        let text = head(
            "GET /x?y=1 HTTP/1.1\r\nHost: shop.example.com\r\nProxy-Authorization: Basic c3B5\r\n\r\n",
            &forwarding,
        );
        assert!(
            text.starts_with(
                "GET http://billing.example.net:8080/x?y=1 HTTP/1.1\r\n\
                 host: billing.example.net:8080\r\nproxy-authorization: Basic dTpw\r\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("c3B5"),
            "the client's credentials cross: {text}"
        );
        let options = head("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", &forwarding);
        assert!(
            options.starts_with("OPTIONS http://billing.example.net:8080 HTTP/1.1\r\n"),
            "{options}"
        );
    }

    #[test]
    fn http2_cookie_fields_are_one_line_for_http1_and_kept_for_http2() {
        let client = client();
        let fw = forwarding(&client, b"h");
        let mut map = http::HeaderMap::new();
        map.append("cookie", HeaderValue::from_static("a=1"));
        map.append("accept", HeaderValue::from_static("*/*"));
        map.append("cookie", HeaderValue::from_static("b=2"));
        let id = RequestId::from_client(b"req-1").unwrap();
        let req = ClientRequest {
            method: &http::Method::GET,
            path: b"/",
            host: Some(b"h"),
            fields: Fields::Map(&map),
            upgrade: None,
            body: crate::h1::request::BodyKind::None,
            grpc: false,
            id: &id,
        };
        let replica = Target::Addr("10.1.2.3:8080".parse().unwrap());
        let mut out = Vec::new();
        write_upstream_head(&mut out, &req, &fw, &replica);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("GET / HTTP/1.1\r\nhost: h\r\ncookie: a=1; b=2\r\naccept: */*\r\n"),
            "{text}"
        );
        assert_eq!(text.matches("cookie").count(), 1, "{text}");
        let h2 = upstream_h2_request(&req, &fw, &replica, "http").unwrap();
        let cookies: Vec<_> = h2.headers().get_all("cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        // An HTTP/1 client's lines cross as they came.
        let raw = head(
            "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n",
            &fw,
        );
        assert!(raw.contains("Cookie: a=1\r\nCookie: b=2\r\n"), "{raw}");
    }

    #[test]
    fn upgrades_are_kept() {
        let client = client();
        let forwarding = Forwarding {
            upgrade: Some(b"websocket"),
            ..forwarding(&client, b"h")
        };
        let text = head(
            "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
            &forwarding,
        );
        assert!(text.contains("Sec-WebSocket-Key: k\r\n"), "{text}");
        assert!(
            text.ends_with("connection: upgrade\r\nupgrade: websocket\r\n\r\n"),
            "{text}"
        );
    }

    #[test]
    fn rules_set_and_remove_and_the_request_id_is_ours() {
        let client = client();
        let rules = crate::config::HeaderRules {
            set: vec![(
                http::header::HeaderName::from_static("x-env"),
                HeaderValue::from_static("prod"),
            )],
            remove: vec![http::header::HeaderName::from_static("cookie")],
            trailers: Vec::new(),
        };
        let forwarding = Forwarding {
            rules: &rules,
            ..forwarding(&client, b"h")
        };
        let text = head(
            "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\nX-Env: dev\r\nX-Request-Id: spoofed\r\n\
             traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\ntracestate: a=b\r\n\r\n",
            &forwarding,
        );
        assert!(!text.contains("a=1") && !text.contains("dev"), "{text}");
        assert!(text.contains("x-env: prod\r\n"), "{text}");
        assert!(
            text.contains("x-request-id: req-1\r\n") && !text.contains("spoofed"),
            "{text}"
        );
        assert!(
            text.contains(
                "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
            ) && text.contains("tracestate: a=b\r\n"),
            "trace context crosses untouched: {text}"
        );
    }

    #[test]
    fn a_malformed_chain_from_a_trusted_proxy_is_replaced_by_the_nodes_hop() {
        let client = client();
        let trusted = Forwarding {
            trusted: true,
            ..forwarding(&client, b"h")
        };
        let ours = "for=10.0.0.9;proto=http;host=h";
        for (sent, expected) in [
            // An unclosed quote would swallow the node's element.
            ("for=\"1.2.3.4", ours.to_string()),
            ("for=\"[2001:db8::1]", ours.to_string()),
            ("for=1.2.3.4, for=\"5.6.7.8", ours.to_string()),
            ("for=1.2.3.4 proto=https", ours.to_string()),
            ("for=a\"b\"", ours.to_string()),
            ("=1.2.3.4", ours.to_string()),
            ("for=", ours.to_string()),
            ("for=\"a\\", ours.to_string()),
            ("for", ours.to_string()),
            // Well-formed ones, with the spaces proxies write.
            ("for=1.2.3.4", format!("for=1.2.3.4, {ours}")),
            (
                "for=\"[2001:db8::1]:443\";proto=https",
                format!("for=\"[2001:db8::1]:443\";proto=https, {ours}"),
            ),
            (
                "for=1.2.3.4; proto=https , for=_hidden;by=\"a\\\"b\"",
                format!("for=1.2.3.4; proto=https , for=_hidden;by=\"a\\\"b\", {ours}"),
            ),
            ("for=1.2.3.4;;, ,", format!("for=1.2.3.4;;, ,, {ours}")),
        ] {
            let text = head(
                &format!("GET / HTTP/1.1\r\nHost: h\r\nForwarded: {sent}\r\n\r\n"),
                &trusted,
            );
            assert!(
                text.contains(&format!("\r\nforwarded: {expected}\r\n")),
                "{sent:?}: {text}"
            );
            assert_eq!(text.matches("forwarded:").count(), 1, "{text}");
        }
        // A control character the head parser would have refused already.
        assert!(!is_forwarded_list(b"for=\"a\x01\""));
        assert!(is_forwarded_list(b"for=\"a\x80\""));
        // Two field lines: each must be well-formed on its own.
        let text = head(
            "GET / HTTP/1.1\r\nHost: h\r\nForwarded: for=\"1.2.3.4\r\nForwarded: 5.6.7.8\"\r\n\r\n",
            &trusted,
        );
        assert!(
            text.contains(&format!("\r\nforwarded: {ours}\r\n")),
            "{text}"
        );
        for (sent, expected) in [
            (
                "1.2.3.4, [2001:db8::1]:443, unknown, _hidden",
                "1.2.3.4, [2001:db8::1]:443, unknown, _hidden, 10.0.0.9",
            ),
            ("\"1.2.3.4", "10.0.0.9"),
            ("1.2.3.4;x", "10.0.0.9"),
        ] {
            let text = head(
                &format!("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: {sent}\r\n\r\n"),
                &trusted,
            );
            assert!(
                text.contains(&format!("\r\nx-forwarded-for: {expected}\r\n")),
                "{sent:?}: {text}"
            );
        }
    }

    #[test]
    fn the_aliases_of_the_clients_address_and_scheme_cross_only_from_a_trusted_proxy() {
        let client = client();
        let aliases: String = PASSED
            .iter()
            .map(|name| format!("{name}: 6.6.6.6\r\n"))
            .collect();
        let request = format!("GET / HTTP/1.1\r\nHost: h\r\n{aliases}\r\n");
        let untrusted = head(&request, &forwarding(&client, b"h"));
        assert_eq!(
            untrusted,
            format!(
                "GET / HTTP/1.1\r\nhost: h\r\nx-request-id: req-1\r\n{}\r\n",
                ours("h")
            )
        );
        let trusted = head(
            &request,
            &Forwarding {
                trusted: true,
                ..forwarding(&client, b"h")
            },
        );
        assert!(
            trusted.ends_with(&format!("{}{aliases}\r\n", ours("h"))),
            "{trusted}"
        );
    }
}
