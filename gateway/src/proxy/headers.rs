//! Header rules of the proxy: what the upstream learns about the client,
//! and what never crosses.
//!
//! The request head that goes upstream is written in one pass over the
//! client's headers: hop-by-hop headers (and those any of the client's
//! `Connection` headers names) are skipped, `Host` comes first, and the
//! `X-Forwarded-*` headers and the body's framing are written at the end,
//! from what the proxy parsed. `Connection` can never remove the framing,
//! `Host` or the `X-Forwarded-*` ([`h1::is_protected`]): the client's own
//! `Content-Length` and `Transfer-Encoding` lines never cross, so a body
//! can never be read upstream as a second request.
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
use super::scheme::Scheme;
use crate::h1::{self, request};
use crate::upstream::Target;

/// The client of a connection, as `X-Forwarded-For` and
/// `X-Forwarded-Proto` name it; made once per connection.
#[derive(Debug, Clone)]
pub struct Client {
    ip: IpAddr,
    value: HeaderValue,
    scheme: Scheme,
}

impl Client {
    pub fn new(ip: IpAddr, scheme: Scheme) -> Client {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_canonical(),
            v4 => v4,
        };
        let value =
            HeaderValue::from_str(&ip.to_string()).unwrap_or(HeaderValue::from_static("unknown"));
        Client { ip, value, scheme }
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
}

/// Headers the proxy writes itself, whatever the client sent.
fn ours(name: &[u8]) -> bool {
    [
        &b"host"[..],
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-for",
        b"x-request-id",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
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
/// the route's rules remove or set; `cookie` as `cookies` says), the
/// rules' own, `X-Request-Id`, then `X-Forwarded-For`, `-Proto` and
/// `-Host`.
fn forwarded_fields(
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    cookies: Cookies,
    mut emit: impl FnMut(&[u8], &[u8]),
) {
    let connection = req.fields.all("connection");
    let ruled = !forwarding.rules.is_empty();
    let mut forwarded_for = Vec::new();
    // Only HTTP/2 and HTTP/3 split cookies: an HTTP/1 client's lines cross
    // as they came.
    let split = cookies == Cookies::Joined && matches!(req.fields, Fields::Map(_));
    let mut cookie_sent = false;
    req.fields.each(|name, value| {
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            if !forwarded_for.is_empty() {
                forwarded_for.extend_from_slice(b", ");
            }
            forwarded_for.extend_from_slice(value);
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
    if !forwarded_for.is_empty() {
        forwarded_for.extend_from_slice(b", ");
    }
    forwarded_for.extend_from_slice(forwarding.client.value.as_bytes());
    emit(b"x-forwarded-for", &forwarded_for);
    emit(b"x-forwarded-proto", forwarding.client.scheme.proto());
    if let Some(host) = forwarding.host {
        emit(b"x-forwarded-host", host);
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
            Scheme::Http { https_port: None },
        )
    }

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
        }
    }

    static NO_RULES: crate::config::HeaderRules = crate::config::HeaderRules {
        set: Vec::new(),
        remove: Vec::new(),
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
            "GET /x?y=1 HTTP/1.1\r\nhost: shop.example.com\r\nAccept: */*\r\n\
             x-request-id: req-1\r\nx-forwarded-for: 10.0.0.9\r\nx-forwarded-proto: http\r\nx-forwarded-host: shop.example.com\r\n\r\n"
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
        ] {
            let text = head(
                &format!(
                    "POST /public/x HTTP/1.1\r\nHost: h\r\nConnection: {connection}\r\nContent-Length: 5\r\n\r\n"
                ),
                &fw,
            );
            assert_eq!(
                text,
                "POST /public/x HTTP/1.1\r\nhost: h\r\nx-request-id: req-1\r\nx-forwarded-for: 10.0.0.9\r\n\
                 x-forwarded-proto: http\r\nx-forwarded-host: h\r\ncontent-length: 5\r\n\r\n",
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
    fn forwarded_headers_chain_and_replace() {
        let client = Client::new(
            "::ffff:10.0.0.1".parse().unwrap(),
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
        };
        let request = "POST /x HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: 203.0.113.7\r\n\
                       X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: spoofed\r\n\
                       Content-Length: 3\r\n\r\n";
        let text = head(request, &forwarding);
        assert!(
            text.starts_with("POST /x HTTP/1.1\r\nhost: billing.example.net\r\n"),
            "{text}"
        );
        assert!(text.ends_with("content-length: 3\r\n\r\n"), "{text}");
        assert!(!text.contains("Content-Length"), "{text}");
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
    }

    #[test]
    fn over_tls_the_upstream_is_told_https_whatever_the_client_says() {
        let client = Client::new("10.0.0.9".parse().unwrap(), Scheme::Https);
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
}
