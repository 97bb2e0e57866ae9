//! The smuggling suite: framing variants sent by a hostile client, each
//! checked against what the upstream received, byte for byte: exactly the
//! one request the node parsed, framed by the node, or nothing at all.
//!
//! Also the response side: an upstream's `Connection` header never strips
//! the framing the client gets, a 204 or 304 carries no body length, and a
//! pooled connection that receives bytes nobody asked for is never handed
//! to the next request.

use std::time::Duration;

use picket_tests::node::{TestNode, route};
use picket_tests::recorder::Recorder;
use picket_tests::upstream::RawUpstream;
use picket_tests::wire::Wire;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the upstream must have received.
enum Expect {
    /// Exactly these bytes: one complete request.
    One(Vec<u8>),
    /// Nothing at all; the client got this status.
    Nothing(u16),
    /// These bytes and no complete request (the client's body broke after
    /// its first piece had left).
    Partial(Vec<u8>),
}

const SMUGGLED: &str =
    "GET /internal/admin HTTP/1.1\r\nHost: internal\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n";

/// The head the node writes upstream: request line, `host`, the client's
/// headers that cross, the forwarding headers (`X-Forwarded-Port` naming
/// the node's listener, at `port`), the framing.
fn forwarded(port: u16, line: &str, kept: &str, framing: &str) -> String {
    format!(
        "{line} HTTP/1.1\r\nhost: h\r\n{kept}x-forwarded-for: 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: h\r\n\
         x-forwarded-port: {port}\r\nx-real-ip: 127.0.0.1\r\nforwarded: for=127.0.0.1;proto=http;host=h\r\n{framing}\r\n"
    )
}

fn cl(n: usize) -> String {
    format!("content-length: {n}\r\n")
}

const TE: &str = "transfer-encoding: chunked\r\n";

/// The variants, sent to a node listening on `port`.
fn variants(port: u16) -> Vec<(&'static str, String, Expect)> {
    let forwarded = |line: &str, kept: &str, framing: &str| forwarded(port, line, kept, framing);
    let len = SMUGGLED.len();
    let post = "POST /public/x HTTP/1.1\r\nHost: h\r\n";
    let get = "GET /public/x HTTP/1.1\r\nHost: h\r\n";
    let one = |head: String, body: &str| Expect::One(format!("{head}{body}").into_bytes());
    let refused = Expect::Nothing(400);
    vec![
        (
            "Connection names Content-Length",
            format!("{post}Connection: Content-Length\r\nContent-Length: {len}\r\n\r\n{SMUGGLED}"),
            one(forwarded("POST /public/x", "", &cl(len)), SMUGGLED),
        ),
        (
            "GET with Connection: keep-alive, content-length",
            format!(
                "{get}Connection: keep-alive, content-length\r\nContent-Length: {len}\r\n\r\n{SMUGGLED}"
            ),
            one(forwarded("GET /public/x", "", &cl(len)), SMUGGLED),
        ),
        (
            "Content-Length named by a second Connection header",
            format!(
                "{post}Connection: keep-alive\r\nConnection: content-length\r\nContent-Length: {len}\r\n\r\n{SMUGGLED}"
            ),
            one(forwarded("POST /public/x", "", &cl(len)), SMUGGLED),
        ),
        (
            "Connection names Transfer-Encoding",
            format!(
                "{post}Connection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            ),
            one(
                forwarded("POST /public/x", "", TE),
                "5\r\nhello\r\n0\r\n\r\n",
            ),
        ),
        (
            "Connection names Host",
            format!("{get}Connection: host\r\n\r\n"),
            one(forwarded("GET /public/x", "", ""), ""),
        ),
        (
            "Connection names X-Forwarded-For",
            format!("{get}Connection: x-forwarded-for\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n"),
            one(forwarded("GET /public/x", "", ""), ""),
        ),
        (
            "Content-Length and Transfer-Encoding",
            format!("{post}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding and Content-Length",
            format!("{post}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding twice",
            format!(
                "{post}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
            ),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding: chunked, chunked",
            format!("{post}Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding: gzip, chunked",
            format!("{post}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding: identity",
            format!("{post}Transfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello"),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding: xchunked",
            format!("{post}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
            Expect::Nothing(501),
        ),
        (
            "Transfer-Encoding folded onto the next line",
            format!("{post}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"),
            refused,
        ),
        (
            "Transfer-Encoding with a space before its colon",
            format!("{post}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
            Expect::Nothing(400),
        ),
        (
            "Content-Length: +5",
            format!("{post}Content-Length: +5\r\n\r\nhello"),
            Expect::Nothing(400),
        ),
        (
            "Content-Length 5 then 6",
            format!("{post}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
            Expect::Nothing(400),
        ),
        (
            "Content-Length: 5, 5",
            format!("{post}Content-Length: 5, 5\r\n\r\nhello"),
            Expect::Nothing(400),
        ),
        (
            "Content-Length 5 twice",
            format!("{post}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
            one(forwarded("POST /public/x", "", &cl(5)), "hello"),
        ),
        (
            "Content-Length: -1",
            format!("{post}Content-Length: -1\r\n\r\n"),
            Expect::Nothing(400),
        ),
        (
            "Content-Length: 0x5",
            format!("{post}Content-Length: 0x5\r\n\r\nhello"),
            Expect::Nothing(400),
        ),
        (
            "chunked HTTP/1.0",
            "POST /public/x HTTP/1.0\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                .into(),
            Expect::Nothing(501),
        ),
        (
            "chunk size +5",
            format!("{post}Transfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n"),
            Expect::Nothing(400),
        ),
        (
            "chunk size overflowing 64 bits",
            format!(
                "{post}Transfer-Encoding: chunked\r\n\r\nffffffffffffffff0\r\nhello\r\n0\r\n\r\n"
            ),
            Expect::Nothing(400),
        ),
        (
            "chunk lines ending in a bare LF",
            format!("{post}Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n"),
            Expect::Nothing(408),
        ),
        (
            "chunk longer than its size",
            format!("{post}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloEXTRA\r\n0\r\n\r\n"),
            Expect::Partial(
                format!("{}5\r\nhello\r\n", forwarded("POST /public/x", "", TE)).into_bytes(),
            ),
        ),
        (
            "control character in a chunk extension",
            format!("{post}Transfer-Encoding: chunked\r\n\r\n5;a\x01b\r\nhello\r\n0\r\n\r\n"),
            Expect::Nothing(400),
        ),
        (
            "trailers carrying a Content-Length",
            format!(
                "{post}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nContent-Length: 50\r\nX-T: y\r\n\r\n"
            ),
            // The admitted trailer crosses; the framing one never does.
            one(
                forwarded("POST /public/x", "", TE),
                "5\r\nhello\r\n0\r\nx-t: y\r\n\r\n",
            ),
        ),
        (
            "absolute-form target naming another host",
            "GET http://internal/public/x HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(404),
        ),
        (
            "fragment in the target",
            "GET /public/x#frag HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(400),
        ),
        (
            "dot segments out of the route",
            "GET /public/../internal/admin HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(404),
        ),
        (
            "encoded dot segments out of the route",
            "GET /public/%2e%2e/internal/admin HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(404),
        ),
        (
            "dot segment with parameters",
            "GET /public/..;/internal/admin HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(400),
        ),
        (
            "backslash traversal",
            "GET /public/..\\internal HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(400),
        ),
        (
            "dot segments inside the route are forwarded resolved",
            "GET /public/./a/../x HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            one(forwarded("GET /public/x", "", ""), ""),
        ),
        (
            "a query is not part of the path",
            "GET /public?next=/../internal HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            one(forwarded("GET /public?next=/../internal", "", ""), ""),
        ),
        (
            "two Host headers",
            "GET /public/x HTTP/1.1\r\nHost: h\r\nHost: internal\r\n\r\n".into(),
            Expect::Nothing(400),
        ),
        (
            "a Host with a path",
            "GET /public/x HTTP/1.1\r\nHost: h/internal\r\n\r\n".into(),
            Expect::Nothing(400),
        ),
        (
            "a header line without a colon",
            format!("{get}X-Broken\r\n\r\n"),
            Expect::Nothing(400),
        ),
        (
            "a NUL in a header value",
            format!("{get}X-A: a\x00b\r\n\r\n"),
            Expect::Nothing(400),
        ),
        (
            "a space in the target",
            "GET /public/x y HTTP/1.1\r\nHost: h\r\n\r\n".into(),
            Expect::Nothing(400),
        ),
        (
            "underscored X_Forwarded_For",
            format!("{get}X_Forwarded_For: 6.6.6.6\r\n\r\n"),
            one(forwarded("GET /public/x", "", ""), ""),
        ),
        (
            "h2c upgrade is not passed on",
            format!(
                "{get}Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
            ),
            one(forwarded("GET /public/x", "", ""), ""),
        ),
        (
            "heads with bare LF line ends are written with CRLF",
            "GET /public/x HTTP/1.1\nHost: h\nX-A: 1\n\n".into(),
            one(forwarded("GET /public/x", "X-A: 1\r\n", ""), ""),
        ),
        (
            "Expect: 100-continue is answered by the node",
            format!("{post}Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello"),
            one(forwarded("POST /public/x", "", &cl(5)), "hello"),
        ),
    ]
}

async fn node_on(recorder: &Recorder) -> TestNode {
    let config = format!(
        "[global]\nbody_timeout = \"1s\"\n{}",
        route(
            "public",
            "/public",
            &[recorder.addr],
            // A trailer of its own the route admits, next to the framing
            // one no rule can.
            "host = \"h\"\nrequest_headers = { trailers = [\"x-t\"] }"
        )
    );
    TestNode::start(&config)
}

/// The variants refused before routing: their heads or targets.
const REFUSED_HEADS: u64 = 23;

/// Lets any bytes still in flight arrive before the recording is read:
/// what must not arrive gets this long to show up.
const SETTLE: Duration = Duration::from_millis(150);

/// What the upstream got, less the `x-request-id` line the node writes
/// after `Host` (the node's own ID: 32 hex digits, new on each request),
/// so that the rest can be compared byte for byte.
fn without_request_ids(received: &[u8]) -> Vec<u8> {
    const LINE: &[u8] = b"\r\nx-request-id: ";
    let mut out = Vec::with_capacity(received.len());
    let mut rest = received;
    while let Some(at) = rest.windows(LINE.len()).position(|w| w == LINE) {
        let id = &rest[at + LINE.len()..];
        let ours = id.len() >= 32 + 2
            && id[..32]
                .iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            && &id[32..34] == b"\r\n";
        let end = if ours { at + LINE.len() + 32 } else { at + 2 };
        out.extend_from_slice(&rest[..at]);
        if !ours {
            out.extend_from_slice(&rest[at..end]);
        }
        rest = &rest[end..];
    }
    out.extend_from_slice(rest);
    out
}

#[tokio::test]
async fn framing_variants_reach_the_upstream_as_one_request_or_nothing() {
    let recorder = Recorder::start().await;
    let node = node_on(&recorder).await;
    let variants = variants(node.proxy.port());
    assert!(variants.len() >= 30);
    let mut failures = Vec::new();
    for (name, sent, expect) in variants {
        recorder.take();
        let mut wire = Wire::connect(node.proxy).await;
        wire.send(sent.as_bytes()).await;
        let response = wire.response(false).await;
        if let Expect::One(_) = expect {
            recorder.wait_requests(1, Duration::from_secs(5)).await;
        }
        tokio::time::sleep(SETTLE).await;
        drop(wire);
        let (received, requests) = recorder.take();
        let received = without_request_ids(&received);
        let status = response.as_ref().map(|r| r.status);
        let shown = String::from_utf8_lossy(&received).into_owned();
        match expect {
            Expect::One(bytes) => {
                if received != bytes || requests != 1 || status != Some(200) {
                    failures.push(format!(
                        "{name}: status {status:?}, {requests} requests, upstream got {shown:?}, wanted {:?}",
                        String::from_utf8_lossy(&bytes)
                    ));
                }
            }
            Expect::Nothing(want) => {
                if !received.is_empty() || status != Some(want) {
                    failures.push(format!(
                        "{name}: status {status:?} (wanted {want}), upstream got {shown:?}"
                    ));
                }
            }
            Expect::Partial(bytes) => {
                if received != bytes || requests != 0 {
                    failures.push(format!(
                        "{name}: {requests} requests, upstream got {shown:?}, wanted {:?}",
                        String::from_utf8_lossy(&bytes)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Each head refused before routing is counted.
    let metrics = picket_tests::client::get(node.admin, "admin", "/metrics")
        .await
        .expect("metrics")
        .text();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("picket_client_requests_refused_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(refused, Some(REFUSED_HEADS), "{metrics}");
    node.stop().await;
}

#[tokio::test]
async fn a_pipelined_request_is_routed_on_its_own() {
    let recorder = Recorder::start().await;
    let node = node_on(&recorder).await;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"POST /public/x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /internal/admin HTTP/1.1\r\nHost: h\r\n\r\n")
        .await;
    assert_eq!(wire.response(false).await.map(|r| r.status), Some(200));
    assert_eq!(wire.response(false).await.map(|r| r.status), Some(404));
    tokio::time::sleep(SETTLE).await;
    let (received, requests) = recorder.take();
    let received = without_request_ids(&received);
    assert_eq!(requests, 1);
    assert_eq!(
        String::from_utf8_lossy(&received),
        format!(
            "{}hello",
            forwarded(node.proxy.port(), "POST /public/x", "", &cl(5))
        )
    );
    node.stop().await;
}

#[tokio::test]
async fn an_upstream_connection_header_never_strips_the_framing() {
    for (answer, method, framing) in [
        (
            &b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 5\r\n\r\nhello"[..],
            "GET",
            Some(("content-length", "5")),
        ),
        (
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "GET",
            Some(("transfer-encoding", "chunked")),
        ),
        (
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            "GET",
            None,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET",
            None,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            "HEAD",
            Some(("content-length", "5")),
        ),
    ] {
        let upstream = RawUpstream::start(answer).await;
        let node = TestNode::start(&route("r", "/", &[upstream.addr], ""));
        let mut wire = Wire::connect(node.proxy).await;
        wire.send(format!("{method} / HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
            .await;
        let response = wire
            .response(method == "HEAD")
            .await
            .expect("a framed response");
        let shown = String::from_utf8_lossy(answer);
        match framing {
            Some((name, value)) => {
                assert_eq!(
                    response.headers.get(name).map(String::as_str),
                    Some(value),
                    "{shown}: {response:?}"
                );
                if method == "GET" {
                    assert_eq!(response.body, b"hello", "{shown}");
                }
            }
            None => {
                assert!(
                    !response.headers.contains_key("content-length")
                        && !response.headers.contains_key("transfer-encoding"),
                    "{shown}: {response:?}"
                );
            }
        }
        node.stop().await;
    }
}

/// An upstream that answers each request, then 50 ms later writes a second
/// response nobody asked for on the same connection.
async fn late_talker() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(n) if n > 0 => {}
                        _ => return,
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let late = b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\n\r\nLATE-SMUGGLED";
                    if stream.write_all(late).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_pooled_connection_with_unasked_bytes_is_discarded() {
    let (addr, task) = late_talker().await;
    let node = TestNode::start(&route("r", "/", &[addr], ""));
    for _ in 0..5 {
        let mut wire = Wire::connect(node.proxy).await;
        wire.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").await;
        let response = wire.response(false).await.expect("an answer");
        assert_eq!(response.body, b"first");
        // The late response has arrived on the idle pooled connection.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    task.abort();
    node.stop().await;
}
