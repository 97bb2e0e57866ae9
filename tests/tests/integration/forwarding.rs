//! The forwarding headers a replica gets: from a client that is not a
//! trusted proxy, every one it sent is dropped and the node writes what it
//! saw; from a client in `[global] trusted_proxies`, the node appends its
//! hop to the chains and keeps the rest. The same over HTTP/1.1 and h2c
//! from the client, to an HTTP/1.1 or an h2c replica, and on a WebSocket
//! upgrade.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use picket_tests::client::{request, send};
use picket_tests::node::{TestNode, route};
use picket_tests::recorder::Recorder;
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Every header of the family, as a client forging them all sends them.
const SPOOFED: &[(&str, &str)] = &[
    ("x-forwarded-for", "6.6.6.6"),
    ("x-forwarded-proto", "https"),
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-port", "443"),
    ("x-forwarded-prefix", "/admin"),
    ("x-real-ip", "6.6.6.6"),
    ("forwarded", "for=6.6.6.6;proto=https"),
    ("x-original-url", "/admin"),
    ("x-rewrite-url", "/admin"),
    ("x-client-ip", "6.6.6.6"),
    ("true-client-ip", "6.6.6.6"),
    ("x-forwarded-server", "evil.example"),
    ("x-forwarded-scheme", "https"),
    ("x-forwarded-ssl", "on"),
    ("x-forwarded-uri", "/admin"),
    ("x-original-host", "evil.example"),
];

/// The family as the node writes it for a client at 127.0.0.1 asking for
/// `h` on the listener at `port`, when it trusts nobody.
fn replaced(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("x-forwarded-for", "127.0.0.1".into()),
        ("x-forwarded-proto", "http".into()),
        ("x-forwarded-host", "h".into()),
        ("x-forwarded-port", port.to_string()),
        ("x-real-ip", "127.0.0.1".into()),
        ("forwarded", "for=127.0.0.1;proto=http;host=h".into()),
    ]
}

/// The family when the client is a trusted proxy that sent [`SPOOFED`]:
/// its chains with the node's hop after them, its other values kept.
fn appended() -> Vec<(&'static str, String)> {
    vec![
        ("x-forwarded-for", "6.6.6.6, 127.0.0.1".into()),
        ("x-forwarded-proto", "https".into()),
        ("x-forwarded-host", "evil.example".into()),
        ("x-forwarded-port", "443".into()),
        ("x-forwarded-prefix", "/admin".into()),
        ("x-real-ip", "6.6.6.6".into()),
        (
            "forwarded",
            "for=6.6.6.6;proto=https, for=127.0.0.1;proto=http;host=h".into(),
        ),
        ("x-original-url", "/admin".into()),
        ("x-rewrite-url", "/admin".into()),
        ("x-client-ip", "6.6.6.6".into()),
        ("true-client-ip", "6.6.6.6".into()),
        ("x-forwarded-server", "evil.example".into()),
        ("x-forwarded-scheme", "https".into()),
        ("x-forwarded-ssl", "on".into()),
        ("x-forwarded-uri", "/admin".into()),
        ("x-original-host", "evil.example".into()),
    ]
}

/// The family a replica got, from the `x-seen-*` headers of an echoing
/// replica's answer: each present one with its values joined by ` | `.
fn family(echoed: &HeaderMap) -> Vec<(&'static str, String)> {
    SPOOFED
        .iter()
        .filter_map(|(name, _)| {
            let values: Vec<&str> = echoed
                .get_all(format!("x-seen-{name}"))
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            (!values.is_empty()).then(|| (*name, values.join(" | ")))
        })
        .collect()
}

/// A spoofing GET over HTTP/1.1; the echoing replica's answer headers.
async fn over_http1(proxy: SocketAddr) -> HeaderMap {
    let mut req = request(Method::GET, "h", "/", Bytes::new());
    for (name, value) in SPOOFED {
        req.headers_mut()
            .append(*name, http::HeaderValue::from_static(value));
    }
    let answer = send(proxy, req).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.headers
}

/// A spoofing GET over HTTP/2 with prior knowledge (h2c).
async fn over_h2c(proxy: SocketAddr) -> HeaderMap {
    let tcp = TcpStream::connect(proxy).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut req = Request::new(Full::new(Bytes::new()));
    *req.uri_mut() = "http://h/".parse().unwrap();
    for (name, value) in SPOOFED {
        req.headers_mut()
            .append(*name, http::HeaderValue::from_static(value));
    }
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let (parts, body) = response.into_parts();
    body.collect().await.unwrap();
    parts.headers
}

/// An h2c replica that echoes each request header back as `x-seen-<name>`,
/// as [`Behaviour::Echo`] does over HTTP/1.1.
async fn h2c_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let mut response =
                            http::Response::new(Full::new(Bytes::from_static(b"ok")));
                        for (name, value) in req.headers() {
                            let seen = format!("x-seen-{name}");
                            if let Ok(seen) = http::HeaderName::from_bytes(seen.as_bytes()) {
                                response.headers_mut().append(seen, value.clone());
                            }
                        }
                        Ok::<_, Infallible>(response)
                    });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_clients_forwarding_headers_are_replaced_over_http1_and_h2c() {
    let echo = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("r", "/", &[echo.addr], ""));
    let port = node.proxy.port();
    assert_eq!(
        family(&over_http1(node.proxy).await),
        replaced(port),
        "HTTP/1.1"
    );
    assert_eq!(family(&over_h2c(node.proxy).await), replaced(port), "h2c");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_gets_its_chains_appended_to_over_http1_and_h2c() {
    let echo = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "[global]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n{}",
        route("r", "/", &[echo.addr], "")
    ));
    assert_eq!(
        family(&over_http1(node.proxy).await),
        appended(),
        "HTTP/1.1"
    );
    assert_eq!(family(&over_h2c(node.proxy).await), appended(), "h2c");
    // A proxy that says nothing of a hop gets the node's own.
    let bare = send(node.proxy, request(Method::GET, "h", "/", Bytes::new()))
        .await
        .unwrap();
    assert_eq!(family(&bare.headers), replaced(node.proxy.port()));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_replica_is_told_the_same() {
    let replica = h2c_echo().await;
    let untrusted = TestNode::start(&route("r", "/", &[replica], "protocol = \"h2c\""));
    let port = untrusted.proxy.port();
    assert_eq!(family(&over_http1(untrusted.proxy).await), replaced(port));
    assert_eq!(family(&over_h2c(untrusted.proxy).await), replaced(port));
    untrusted.stop().await;
    let trusted = TestNode::start(&format!(
        "[global]\ntrusted_proxies = [\"127.0.0.0/8\", \"::1\"]\n\n{}",
        route("r", "/", &[replica], "protocol = \"h2c\"")
    ));
    assert_eq!(family(&over_http1(trusted.proxy).await), appended());
    trusted.stop().await;
}

#[tokio::test]
async fn a_websocket_upgrade_is_told_the_same() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&route("ws", "/", &[recorder.addr], ""));
    let mut tcp = TcpStream::connect(node.proxy).await.unwrap();
    let spoofed: String = SPOOFED
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    tcp.write_all(
        format!(
            "GET /chat HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{spoofed}\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    assert!(
        recorder.wait_requests(1, Duration::from_secs(5)).await,
        "the upgrade reached the replica"
    );
    let (received, _) = recorder.take();
    let head = String::from_utf8_lossy(&received).into_owned();
    let lines: Vec<(&str, String)> = head
        .lines()
        .filter_map(|line| line.split_once(": "))
        .filter_map(|(name, value)| {
            let (name, _) = SPOOFED.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
            Some((*name, value.to_string()))
        })
        .collect();
    assert_eq!(lines, replaced(node.proxy.port()), "{head}");
    assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
    let mut answer = [0u8; 12];
    let _ = tcp.read(&mut answer).await;
    node.stop().await;
}

/// The family lines of a raw request head as the replica got them.
fn family_lines(head: &str) -> Vec<String> {
    head.lines()
        .filter(|line| {
            line.split_once(": ")
                .is_some_and(|(name, _)| SPOOFED.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)))
        })
        .map(str::to_string)
        .collect()
}

/// A trusted proxy's chain that could swallow what the node appends (an
/// unclosed quote) is replaced by the node's own hop, byte for byte at the
/// replica, over HTTP/1.1 and h2c; a well-formed one is appended to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_malformed_chain_is_replaced_not_extended() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&format!(
        "[global]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n{}",
        route("r", "/", &[recorder.addr], "")
    ));
    let port = node.proxy.port();
    let ours = |xff: &str, forwarded: &str| {
        vec![
            format!("x-forwarded-for: {xff}"),
            "x-forwarded-proto: http".to_string(),
            "x-forwarded-host: h".to_string(),
            format!("x-forwarded-port: {port}"),
            "x-real-ip: 127.0.0.1".to_string(),
            format!("forwarded: {forwarded}"),
        ]
    };
    let hop = "for=127.0.0.1;proto=http;host=h";
    for (xff, forwarded, expected) in [
        ("\"1.2.3.4", "for=\"1.2.3.4", ours("127.0.0.1", hop)),
        (
            "1.2.3.4",
            "for=1.2.3.4 by=x",
            ours("1.2.3.4, 127.0.0.1", hop),
        ),
        (
            "1.2.3.4",
            "for=\"[2001:db8::1]:80\";proto=https",
            ours(
                "1.2.3.4, 127.0.0.1",
                &format!("for=\"[2001:db8::1]:80\";proto=https, {hop}"),
            ),
        ),
    ] {
        // Over HTTP/1.1, raw.
        let mut tcp = TcpStream::connect(node.proxy).await.unwrap();
        tcp.write_all(
            format!(
                "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: {xff}\r\nForwarded: {forwarded}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        assert!(recorder.wait_requests(1, Duration::from_secs(5)).await);
        let (received, _) = recorder.take();
        let head = String::from_utf8_lossy(&received).into_owned();
        assert_eq!(
            family_lines(&head),
            expected,
            "HTTP/1.1, {forwarded:?}: {head}"
        );
        drop(tcp);
        // Over h2c.
        let tcp = TcpStream::connect(node.proxy).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(connection);
        let request = Request::get("http://h/")
            .header("x-forwarded-for", xff)
            .header("forwarded", forwarded)
            .body(Full::new(Bytes::new()))
            .unwrap();
        tokio::spawn(async move {
            let _ = sender.send_request(request).await;
        });
        assert!(recorder.wait_requests(1, Duration::from_secs(5)).await);
        let (received, _) = recorder.take();
        let head = String::from_utf8_lossy(&received).into_owned();
        assert_eq!(family_lines(&head), expected, "h2c, {forwarded:?}: {head}");
    }
    node.stop().await;
}
