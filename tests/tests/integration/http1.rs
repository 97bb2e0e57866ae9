//! HTTP/1.x on the wire between clients and the proxy: keep-alive,
//! pipelining, body framing both ways, `Expect: 100-continue`, and the
//! request shapes that are refused.

use std::time::Duration;

use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, RawUpstream, Upstream};
use picket_tests::wire::Wire;

async fn echo_node() -> (Upstream, TestNode) {
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    (upstream, node)
}

#[tokio::test]
async fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    let (upstream, node) = echo_node().await;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        .await;
    let one = wire.response(false).await.unwrap();
    let two = wire.response(false).await.unwrap();
    assert!(one.body.starts_with(b"echo: GET /one"), "{one:?}");
    assert!(two.body.starts_with(b"echo: GET /two"), "{two:?}");
    wire.send(b"GET /three HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await;
    let three = wire.response(false).await.unwrap();
    assert_eq!(
        three.headers.get("connection").map(String::as_str),
        Some("close")
    );
    assert!(
        wire.closed().await,
        "the proxy closes after Connection: close"
    );
    assert_eq!(upstream.hits(), 3);
    node.stop().await;
}

#[tokio::test]
async fn http10_clients_get_their_own_framing() {
    let trickle = Behaviour::Trickle {
        chunks: 3,
        chunk: 10,
        every: Duration::from_millis(20),
    };
    let upstream = Upstream::start("trickle", trickle).await;
    let node = TestNode::start(&route("t", "/", &[upstream.addr], ""));
    // HTTP/1.1: the chunked body stays chunked.
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let chunked = wire.response(false).await.unwrap();
    assert_eq!(
        chunked.headers.get("transfer-encoding").map(String::as_str),
        Some("chunked")
    );
    assert_eq!(chunked.body.len(), 30);
    // HTTP/1.0 (no Host needed): the body runs until the connection closes.
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"GET / HTTP/1.0\r\n\r\n").await;
    let closing = wire.response(false).await.unwrap();
    assert!(
        !closing.headers.contains_key("transfer-encoding"),
        "{closing:?}"
    );
    assert_eq!(
        closing.headers.get("connection").map(String::as_str),
        Some("close")
    );
    assert_eq!(closing.body.len(), 30);
    node.stop().await;
}

#[tokio::test]
async fn request_bodies_cross_chunked_or_with_a_length() {
    let (_upstream, node) = echo_node().await;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        .await;
    let chunked = wire.response(false).await.unwrap();
    assert!(
        chunked.body.ends_with(b"(11 bytes)"),
        "{:?}",
        String::from_utf8_lossy(&chunked.body)
    );
    wire.send(b"PUT /l HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nabcd")
        .await;
    let length = wire.response(false).await.unwrap();
    assert!(
        length.body.ends_with(b"(4 bytes)"),
        "{:?}",
        String::from_utf8_lossy(&length.body)
    );
    node.stop().await;
}

#[tokio::test]
async fn expect_continue_is_answered_before_the_body() {
    let (_upstream, node) = echo_node().await;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
        .await;
    let interim = wire.read_until(b"\r\n\r\n").await.unwrap();
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    wire.send(b"xyz").await;
    let answer = wire.response(false).await.unwrap();
    assert_eq!(answer.status, 200);
    assert!(answer.body.ends_with(b"(3 bytes)"));
    node.stop().await;
}

#[tokio::test]
async fn ambiguous_framing_is_refused_and_never_forwarded() {
    let (upstream, node) = echo_node().await;
    let cases: &[(&[u8], u16)] = &[
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ];
    for (bytes, status) in cases {
        let mut wire = Wire::connect(node.proxy).await;
        wire.send(bytes).await;
        let answer = wire.response(false).await.unwrap();
        assert_eq!(
            answer.status,
            *status,
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
        assert!(
            wire.closed().await,
            "the connection is closed after a refused head"
        );
    }
    assert_eq!(upstream.hits(), 0);
    node.stop().await;
}

#[tokio::test]
async fn close_delimited_and_bodiless_upstream_answers() {
    let raw =
        RawUpstream::start(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
            .await;
    let node = TestNode::start(&route("raw", "/", &[raw.addr], ""));
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let answer = wire.response(false).await.unwrap();
    assert_eq!(answer.body, b"until the end");
    assert_eq!(
        answer.headers.get("transfer-encoding").map(String::as_str),
        Some("chunked")
    );
    // The client's connection outlives the upstream's.
    wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(wire.response(false).await.unwrap().body, b"until the end");
    assert_eq!(raw.hits(), 2);
    node.stop().await;

    let (_upstream, node) = echo_node().await;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let head = wire.response(true).await.unwrap();
    assert_eq!(head.status, 200);
    assert!(head.headers.contains_key("content-length"), "{head:?}");
    wire.send(b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let after = wire.response(false).await.unwrap();
    assert!(
        after.body.starts_with(b"echo: GET /after"),
        "no stray body bytes after HEAD"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_slow_head_does_not_block_other_clients() {
    let (_upstream, node) = echo_node().await;
    // A client that sends half a head and stops.
    let mut slow = Wire::connect(node.proxy).await;
    slow.send(b"GET / HTTP/1.1\r\nHo").await;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(wire.response(false).await.unwrap().status, 200);
    node.stop().await;
}
