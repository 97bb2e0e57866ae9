//! The proxy's rules: routing, headers, bad input, retries, ejection.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use picket_tests::client::{self, request, send};
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream, refused_addr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends raw bytes and returns what the gateway answered.
async fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // The status line and headers are all a test looks at.
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn routes_by_host_and_path_and_never_proxies_unknown_hosts() {
    let api = Upstream::start("api", Behaviour::Echo).await;
    let web = Upstream::start("web", Behaviour::Echo).await;
    let config = format!(
        "{}host = \"api.example.com\"\n{}",
        route("api", "/", &[api.addr], ""),
        route("web", "/static", &[web.addr], "")
    );
    let node = TestNode::start(&config);
    let a = client::get(node.proxy, "api.example.com", "/users")
        .await
        .unwrap();
    assert!(a.text().starts_with("api: GET /users"), "{}", a.text());
    let w = client::get(node.proxy, "anything.org", "/static/app.js")
        .await
        .unwrap();
    assert!(
        w.text().starts_with("web: GET /static/app.js"),
        "{}",
        w.text()
    );
    let unknown = client::get(node.proxy, "evil.example.org", "/users")
        .await
        .unwrap();
    assert_eq!(unknown.status, 404);
    // Absolute form naming another host: still only the configured upstream.
    let absolute = raw(node.proxy, b"GET http://evil.example.org/ HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n").await;
    assert!(absolute.starts_with("HTTP/1.1 404"), "{absolute}");
    assert_eq!((api.hits(), web.hits()), (1, 1));
    node.stop().await;
}

#[tokio::test]
async fn hop_by_hop_headers_go_and_forwarded_headers_come() {
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    let mut req = request(Method::GET, "shop.example.com", "/", Bytes::new());
    let headers = req.headers_mut();
    headers.insert("connection", "keep-alive, x-hop".parse().unwrap());
    headers.insert("x-hop", "secret".parse().unwrap());
    headers.insert("keep-alive", "timeout=5".parse().unwrap());
    headers.insert("proxy-authorization", "Basic Zm9vOmJhcg==".parse().unwrap());
    headers.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
    headers.insert("x-end-to-end", "kept".parse().unwrap());
    let answer = send(node.proxy, req).await.unwrap();
    let seen = |name: &str| {
        answer
            .headers
            .get(format!("x-seen-{name}"))
            .map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(seen("x-end-to-end").as_deref(), Some("kept"));
    for gone in ["connection", "x-hop", "keep-alive", "proxy-authorization"] {
        assert_eq!(seen(gone), None, "{gone} was forwarded");
    }
    // Nobody is trusted: the client's chain is replaced, not appended to
    // (forwarding.rs has the whole family, and trusted proxies).
    assert_eq!(seen("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    assert_eq!(seen("x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(
        seen("x-forwarded-host").as_deref(),
        Some("shop.example.com")
    );
    assert_eq!(seen("host").as_deref(), Some("shop.example.com"));
    node.stop().await;
}

#[tokio::test]
async fn bad_input_gets_4xx_and_the_node_keeps_serving() {
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    let cases: &[(&[u8], &str)] = &[
        (b"GARBAGE\r\n\r\n", "HTTP/1.1 400"),
        (b"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400"),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
            "HTTP/1.1 400",
        ),
        (
            b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n",
            "HTTP/1.1 405",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: bad host\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 4",
        ),
    ];
    for (bytes, expected) in cases {
        let answer = raw(node.proxy, bytes).await;
        assert!(
            answer.starts_with(expected),
            "{:?} → {answer:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "y".repeat(100 * 1024)
    );
    let answer = raw(node.proxy, huge.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    assert_eq!(upstream.hits(), 0, "nothing malformed was forwarded");
    let ok = client::get(node.proxy, "a", "/").await.unwrap();
    assert_eq!(ok.status, 200);
    node.stop().await;
}

#[tokio::test]
async fn answered_503_is_retried_only_for_idempotent_bodiless_requests() {
    let failing = Upstream::start("failing", Behaviour::Status(503)).await;
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let node = TestNode::start(&route(
        "api",
        "/",
        &[failing.addr, healthy.addr],
        // The failing replica stays in rotation: this test is about
        // retries, not about ejection for gateway errors (answers.rs).
        "tries = 2\nconsecutive_gateway_errors = 100",
    ));
    for _ in 0..4 {
        let answer = client::get(node.proxy, "a", "/").await.unwrap();
        assert_eq!(answer.status, 200, "GET is retried on the other replica");
    }
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let post = request(
            Method::POST,
            "a",
            "/orders",
            Bytes::from_static(b"{\"n\":1}"),
        );
        statuses.push(send(node.proxy, post).await.unwrap().status.as_u16());
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 200, 503, 503],
        "a POST with a body is never sent twice"
    );
    assert_eq!(
        healthy.hits(),
        4 + 2,
        "every success came from the healthy replica"
    );
    assert!(
        failing.hits() <= 4 + 2,
        "a GET tries the failing replica at most once"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_refused_connect_moves_any_method_to_the_next_replica() {
    // The healthy replica first: the port `refused` frees is then never
    // its own.
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let refused = refused_addr().await;
    let node = TestNode::start(&route("api", "/", &[refused, healthy.addr], ""));
    for _ in 0..4 {
        let post = request(
            Method::POST,
            "a",
            "/orders",
            Bytes::from_static(b"{\"n\":1}"),
        );
        let answer = send(node.proxy, post).await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(
            answer.text().contains("(7 bytes)"),
            "the body arrived: {}",
            answer.text()
        );
    }
    let metrics = node.node().metrics().encode();
    let ejections =
        format!("picket_replica_ejections_total{{route=\"api\",replica=\"{refused}\"}} 1");
    assert!(
        metrics.contains(&ejections),
        "one ejection, not one per request:\n{metrics}"
    );
    node.stop().await;
}

#[tokio::test]
async fn tries_bound_the_attempts() {
    // A replica answering 503 beside a healthy one, with one try: the 503
    // goes to the client, never to the other replica. (Not a refused
    // connect: the connect check at start would eject that replica before
    // any request reached it.)
    let failing = Upstream::start("failing", Behaviour::Status(503)).await;
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let node = TestNode::start(&route(
        "api",
        "/",
        &[failing.addr, healthy.addr],
        "tries = 1\nconsecutive_gateway_errors = 100",
    ));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            client::get(node.proxy, "a", "/")
                .await
                .unwrap()
                .status
                .as_u16(),
        );
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 200, 503, 503],
        "with one try, the failing replica's answers reach the client"
    );
    assert_eq!((failing.hits(), healthy.hits()), (2, 2));
    node.stop().await;
}

#[tokio::test]
async fn an_ejected_replica_is_readmitted_by_the_probe_not_by_requests() {
    // The healthy replica first: the port the other frees is then never
    // its own.
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let comeback = listener.local_addr().unwrap();
    drop(listener);
    let node = TestNode::start(&route(
        "api",
        "/",
        &[comeback, healthy.addr],
        "eject_for = \"1s\"",
    ));
    for _ in 0..3 {
        assert_eq!(client::get(node.proxy, "a", "/").await.unwrap().status, 200);
    }
    let back = Upstream::on(
        tokio::net::TcpListener::bind(comeback).await.unwrap(),
        "back",
        Behaviour::Echo,
    );
    // Before the probe: no request is gambled on the ejected replica.
    for _ in 0..4 {
        assert!(
            client::get(node.proxy, "a", "/")
                .await
                .unwrap()
                .text()
                .starts_with("healthy")
        );
    }
    assert_eq!(back.hits(), 0);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let mut names = Vec::new();
    for _ in 0..4 {
        names.push(client::get(node.proxy, "a", "/").await.unwrap().text()[..4].to_string());
    }
    assert!(
        names.iter().any(|n| n == "back"),
        "re-admitted within one probe period: {names:?}"
    );
    let metrics = node.node().metrics().encode();
    assert!(
        metrics.contains(&format!(
            "picket_replica_readmissions_total{{route=\"api\",replica=\"{comeback}\"}} 1"
        )),
        "{metrics}"
    );
    node.stop().await;
}

#[tokio::test]
async fn connections_to_upstreams_are_pooled() {
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    for _ in 0..20 {
        assert_eq!(client::get(node.proxy, "a", "/").await.unwrap().status, 200);
    }
    let route = node
        .node()
        .proxy()
        .table()
        .find(Some("a"), "/")
        .cloned()
        .unwrap();
    let key = &route.upstream.replicas()[0].key.clone();
    assert_eq!(
        route.upstream.pool.idle(key),
        1,
        "twenty sequential requests share one connection"
    );
    node.stop().await;
}

#[tokio::test]
async fn http2_clients_are_served_over_http1_upstreams() {
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    let stream = TcpStream::connect(node.proxy).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let req = http::Request::builder()
        .uri("http://h2.example.com/x?y=1")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-seen-host"], "h2.example.com");
    node.stop().await;
}

/// HTTP/2 may split `cookie` into one field per cookie (RFC 9113 §8.2.3);
/// an HTTP/1.1 replica gets them as one `Cookie` line, joined by `; `.
#[tokio::test]
async fn http2_cookie_fields_reach_an_http1_replica_as_one_line() {
    let recorder = picket_tests::recorder::Recorder::start().await;
    let node = TestNode::start(&route("r", "/", &[recorder.addr], ""));
    let stream = TcpStream::connect(node.proxy).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let req = http::Request::builder()
        .uri("http://h2.example.com/cookies")
        .header("cookie", "a=1")
        .header("x-between", "1")
        .header("cookie", "b=2")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let (bytes, requests) = recorder.take();
    assert_eq!(requests, 1);
    let head = String::from_utf8(bytes).unwrap();
    let cookies: Vec<&str> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("cookie:"))
        .collect();
    assert_eq!(cookies, ["cookie: a=1; b=2"], "{head}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_port_is_not_a_port_is_refused_not_routed_elsewhere() {
    let b = Upstream::start("b", Behaviour::Echo).await;
    let any = Upstream::start("any", Behaviour::Echo).await;
    // b.test has its route; every other host falls to the catch-all.
    let node = TestNode::start(&format!(
        "{}{}",
        route("b", "/", &[b.addr], "host = \"b.test\"\n"),
        route("any", "/", &[any.addr], "")
    ));
    for host in ["b.test:abc", "b.test:80:80", "B.test:x", "b.test:65536"] {
        let mut tcp = TcpStream::connect(node.proxy).await.unwrap();
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tcp.read_to_end(&mut out).await.unwrap();
        assert!(
            out.starts_with(b"HTTP/1.1 400 "),
            "{host}: {}",
            String::from_utf8_lossy(&out)
        );
    }
    assert_eq!(any.hits(), 0, "nothing reached the catch-all");
    // A real port still routes by its host.
    let answer = client::get(node.proxy, "B.test:8080", "/").await.unwrap();
    assert_eq!(answer.status, 200);
    assert!(answer.text().starts_with("b: "), "{}", answer.text());
    node.stop().await;
}
