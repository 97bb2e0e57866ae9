//! Trailers cross the node both ways, byte-checked at both ends: over
//! chunked HTTP/1.1 and over HTTP/2, to HTTP/1.1 and to h2c replicas.
//! Only those admitted cross: the fields whose definitions allow a trailer
//! (`grpc-status`) and the names a route admits (`x-sum`, `x-req`); what
//! means something only in a head (`Strict-Transport-Security`,
//! `WWW-Authenticate`, `Content-Security-Policy`, `Set-Cookie`, the
//! framing) never does.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use picket_tests::node::{TestNode, route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The response body every replica sends, and its trailers.
const BODY: &[u8] = b"hello";
const RESPONSE_TRAILERS: &[(&str, &str)] = &[("x-sum", "abc"), ("grpc-status", "0")];
/// Trailers a replica sends after them that only a head may carry: none
/// reaches the client.
const HEAD_ONLY: &[(&str, &str)] = &[
    ("strict-transport-security", "max-age=0"),
    ("www-authenticate", "Basic realm=\"planted\""),
    ("content-security-policy", "default-src *"),
    ("set-cookie", "session=planted"),
    ("x-client-ip", "6.6.6.6"),
];
/// The route's rules that admit the test's own trailers.
const ADMITTING: &str =
    "request_headers = { trailers = [\"x-req\"] }\nresponse_headers = { trailers = [\"x-sum\"] }\n";
/// What a chunked answer to an HTTP/1.1 client ends with.
const CHUNKED_END: &[u8] = b"5\r\nhello\r\n0\r\nx-sum: abc\r\ngrpc-status: 0\r\n\r\n";

/// What an HTTP/1.1 replica saw of each request: its raw bytes.
type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// An HTTP/1.1 replica that reads one chunked request per connection to
/// its last CRLF and answers chunked with trailers, one of them a
/// `Content-Length` that must not reach the client.
async fn h1_replica() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut buf = [0u8; 4096];
                // The request ends with its trailers' blank line.
                while !(bytes.ends_with(b"\r\n\r\n") && bytes.windows(5).any(|w| w == b"\r\n0\r\n"))
                {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => bytes.extend_from_slice(&buf[..n]),
                    }
                }
                record.lock().unwrap().push(bytes);
                let answer =
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n\
                    5\r\nhello\r\n0\r\nx-sum: abc\r\nContent-Length: 99\r\ngrpc-status: 0\r\n\
                    Strict-Transport-Security: max-age=0\r\nWWW-Authenticate: Basic realm=\"planted\"\r\n\
                    Content-Security-Policy: default-src *\r\nSet-Cookie: session=planted\r\n\
                    X-Client-IP: 6.6.6.6\r\n\r\n";
                let _ = tcp.write_all(answer).await;
            });
        }
    });
    (addr, seen)
}

/// What an h2c replica saw: the trailers of each request.
type SeenTrailers = Arc<Mutex<Vec<Option<HeaderMap>>>>;

/// An h2c replica that reads each request with its trailers and answers
/// with [`BODY`] and [`RESPONSE_TRAILERS`].
async fn h2c_replica() -> (SocketAddr, SeenTrailers) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: SeenTrailers = Arc::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let record = Arc::clone(&record);
                    async move {
                        let collected = req.into_body().collect().await.unwrap();
                        record.lock().unwrap().push(collected.trailers().cloned());
                        let mut sent = trailers(RESPONSE_TRAILERS);
                        sent.extend(trailers(HEAD_ONLY));
                        Ok::<_, Infallible>(http::Response::new(with_trailers(
                            Bytes::from_static(BODY),
                            sent,
                        )))
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn trailers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, http::HeaderValue::from_static(value));
    }
    map
}

type Body =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn with_trailers(data: Bytes, trailers: HeaderMap) -> Body {
    StreamBody::new(futures_util::stream::iter(vec![
        Ok(Frame::data(data)),
        Ok(Frame::trailers(trailers)),
    ]))
}

/// A chunked request with trailers from an HTTP/1.1 client; the raw
/// answer, read to the end of its chunked body.
async fn h1_call(node: SocketAddr) -> Vec<u8> {
    let mut tcp = TcpStream::connect(node).await.unwrap();
    tcp.write_all(
        b"POST /t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n\r\n\
          4\r\nping\r\n0\r\nx-req: 1\r\nContent-Length: 4\r\nConnection: close\r\n\
          Authorization: Basic cGxhbnRlZA==\r\nX-Client-IP: 6.6.6.6\r\nContent-Type: text/plain\r\n\r\n",
    )
    .await
    .unwrap();
    chunked_answer(&mut tcp).await
}

/// An answer read to the end of its chunked body.
async fn chunked_answer(tcp: &mut TcpStream) -> Vec<u8> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.ends_with(b"\r\n\r\n") || !answer.windows(5).any(|w| w == b"\r\n0\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("the answer came")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    answer
}

/// A request with trailers from an HTTP/2 client (h2c); the answer's body
/// and trailers.
async fn h2_call(node: SocketAddr) -> (Bytes, Option<HeaderMap>) {
    let tcp = TcpStream::connect(node).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::post(format!("http://{node}/t"))
        .header("te", "trailers")
        .body(with_trailers(
            Bytes::from_static(b"ping"),
            trailers(&[
                ("x-req", "1"),
                ("content-length", "4"),
                ("authorization", "Basic cGxhbnRlZA=="),
                ("x-client-ip", "6.6.6.6"),
                ("content-type", "text/plain"),
            ]),
        ))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

fn assert_response_trailers(trailers: Option<HeaderMap>) {
    let trailers = trailers.expect("the answer's trailers");
    assert_eq!(trailers.len(), 2, "{trailers:?}");
    for (name, value) in RESPONSE_TRAILERS {
        assert_eq!(trailers[*name], *value, "{trailers:?}");
    }
}

#[tokio::test]
async fn trailers_cross_http1_replicas_both_ways() {
    let (replica, seen) = h1_replica().await;
    let node = TestNode::start(&route("t", "/", &[replica], ADMITTING));

    let answer = h1_call(node.proxy).await;
    assert!(
        answer.ends_with(CHUNKED_END),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let request = seen.lock().unwrap().pop().unwrap();
    assert!(
        request.ends_with(b"4\r\nping\r\n0\r\nx-req: 1\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&request)
    );

    let (body, trailers) = h2_call(node.proxy).await;
    assert_eq!(&body[..], BODY);
    assert_response_trailers(trailers);
    let request = seen.lock().unwrap().pop().unwrap();
    assert!(
        request.ends_with(b"4\r\nping\r\n0\r\nx-req: 1\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&request)
    );
    node.stop().await;
}

#[tokio::test]
async fn trailers_cross_h2c_replicas_both_ways() {
    let (replica, seen) = h2c_replica().await;
    let node = TestNode::start(&route(
        "t",
        "/",
        &[replica],
        &format!("protocol = \"h2c\"\n{ADMITTING}"),
    ));

    let answer = h1_call(node.proxy).await;
    assert!(
        answer.ends_with(CHUNKED_END),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let (body, trailers) = h2_call(node.proxy).await;
    assert_eq!(&body[..], BODY);
    assert_response_trailers(trailers);

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for request in seen {
        let request = request.expect("the request's trailers");
        assert_eq!(request.len(), 1, "only x-req crosses: {request:?}");
        assert_eq!(request["x-req"], "1");
    }
    node.stop().await;
}

#[tokio::test]
async fn a_request_without_trailers_still_gets_the_answers() {
    let (replica, seen) = h2c_replica().await;
    let node = TestNode::start(&route(
        "t",
        "/",
        &[replica],
        &format!("protocol = \"h2c\"\n{ADMITTING}"),
    ));
    let tcp = TcpStream::connect(node.proxy).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::post(format!("http://{}/t", node.proxy))
        .body(Full::new(Bytes::from_static(b"ping")))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    let collected = response.into_body().collect().await.unwrap();
    assert_response_trailers(collected.trailers().cloned());
    assert_eq!(seen.lock().unwrap().clone(), vec![None]);
    node.stop().await;
}

/// Trailers are held to the head's rules, both ways: a field the node
/// owns, or one a rule of the route removes or sets, never crosses in a
/// trailer; the forwarding family not even from a trusted proxy.
#[tokio::test]
async fn trailers_carry_nothing_a_head_may_not() {
    let (replica, seen) = h1_replica().await;
    for global in ["", "[global]\ntrusted_proxies = [\"127.0.0.1\"]\n"] {
        let node = TestNode::start(&format!(
            "{global}{}",
            route(
                "t",
                "/",
                &[replica],
                "request_headers = { remove = [\"cookie\"], set = { x-tenant = \"a\" }, \
                 trailers = [\"x-req\", \"cookie\", \"x-tenant\", \"via\"] }\n\
                 response_headers = { remove = [\"x-sum\"], trailers = [\"x-sum\"] }\n",
            )
        ));
        let mut tcp = TcpStream::connect(node.proxy).await.unwrap();
        tcp.write_all(
            b"POST /t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n\r\n\
              4\r\nping\r\n0\r\nx-req: 1\r\nX-Forwarded-For: 6.6.6.6\r\nX-Request-Id: forged\r\n\
              Forwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX-Forwarded-Port: 1\r\n\
              X-Forwarded-Prefix: /admin\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\n\
              Cookie: session=stolen\r\nX-Tenant: b\r\nVia: 1.1 forged\r\n\r\n",
        )
        .await
        .unwrap();
        let answer = chunked_answer(&mut tcp).await;
        // The replica's x-sum is removed by the route's response rule.
        assert!(
            answer.ends_with(b"5\r\nhello\r\n0\r\ngrpc-status: 0\r\n\r\n"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        let request = seen.lock().unwrap().pop().unwrap();
        assert!(
            request.ends_with(b"4\r\nping\r\n0\r\nx-req: 1\r\n\r\n"),
            "{global}: {}",
            String::from_utf8_lossy(&request)
        );
        node.stop().await;
    }
}

/// With no rule of the route, only what may come after a body crosses:
/// the replica's `x-sum` and the client's `x-req` stop at the node, both
/// ways, both protocols, to both kinds of replica.
#[tokio::test]
async fn without_a_rule_only_what_may_follow_a_body_crosses() {
    let (h1, seen_h1) = h1_replica().await;
    let (h2c, seen_h2c) = h2c_replica().await;
    let node = TestNode::start(&format!(
        "{}\n{}",
        route("a", "/", &[h1], ""),
        route("b", "/", &[h2c], "host = \"b\"\nprotocol = \"h2c\""),
    ));
    let answer = h1_call(node.proxy).await;
    assert!(
        answer.ends_with(b"5\r\nhello\r\n0\r\ngrpc-status: 0\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let request = seen_h1.lock().unwrap().pop().unwrap();
    assert!(
        request.ends_with(b"4\r\nping\r\n0\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&request)
    );
    let (body, answered) = h2_call(node.proxy).await;
    assert_eq!(&body[..], BODY);
    let h2_trailers = answered.expect("the answer's trailers");
    assert_eq!(
        h2_trailers.keys().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["grpc-status"]
    );
    // To the h2c replica, by its host.
    let tcp = TcpStream::connect(node.proxy).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::post("http://b/t")
        .header("te", "trailers")
        .body(with_trailers(
            Bytes::from_static(b"ping"),
            trailers(&[
                ("x-req", "1"),
                ("grpc-status", "0"),
                ("www-authenticate", "x"),
            ]),
        ))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    let collected = response.into_body().collect().await.unwrap();
    let answer_trailers = collected
        .trailers()
        .cloned()
        .expect("the answer's trailers");
    assert_eq!(
        answer_trailers
            .keys()
            .map(|n| n.as_str())
            .collect::<Vec<_>>(),
        ["grpc-status"]
    );
    let seen = seen_h2c
        .lock()
        .unwrap()
        .pop()
        .unwrap()
        .expect("the request's trailers");
    assert_eq!(
        seen.keys().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["grpc-status"]
    );
    node.stop().await;
}
