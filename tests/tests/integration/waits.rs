//! Every wait the node does on a client or a replica is bounded by
//! inactivity, never by duration: a request body that stops arriving, a
//! replica that stops reading one, an idle HTTP/2 connection, more HTTP/2
//! streams than a connection may carry, a client that stops taking its
//! answer (HTTP/1, or an HTTP/2 stream's zero window). And what keeps
//! moving is never cut: a 100 MiB upload, a slow reader, a WebSocket that
//! outlives every bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper_util::rt::{TokioExecutor, TokioIo};
use picket_tests::node::{TestNode, route};
use picket_tests::recorder::Recorder;
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::wire::{H2_PREFACE, Wire, h2_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Short bounds, so that a test sees them pass.
fn short_bounds(replicas: &[std::net::SocketAddr]) -> String {
    format!(
        "[node]\nidle_timeout = \"1s\"\nheader_timeout = \"1s\"\n[global]\nbody_timeout = \"1s\"\nfirst_answer_timeout = \"1s\"\n{}",
        route("r", "/", replicas, "")
    )
}

#[tokio::test]
async fn a_stalled_request_body_gets_408_and_frees_the_replica() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[recorder.addr]));
    let mut clients = Vec::new();
    for _ in 0..20 {
        let mut wire = Wire::connect(node.proxy).await;
        wire.send(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
            .await;
        clients.push(wire);
    }
    let started = Instant::now();
    for wire in &mut clients {
        let response = wire.response(false).await.expect("an answer");
        assert_eq!(response.status, 408);
    }
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(4), "408s after {waited:?}");
    // The replica's connections that carried the broken bodies are closed.
    assert!(
        recorder
            .wait(Duration::from_secs(3), |r| r.connections().0 == 0)
            .await,
        "connections to the replica still open: {:?}",
        recorder.connections()
    );
    assert_eq!(recorder.requests(), 0);
    node.stop().await;
}

#[tokio::test]
async fn a_trickling_body_is_never_cut() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[recorder.addr]));
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    // Ten pieces 400 ms apart: four times the body bound in all.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        wire.send(b"5\r\nhello\r\n").await;
    }
    wire.send(b"0\r\n\r\n").await;
    let response = wire.response(false).await.expect("an answer");
    assert_eq!(response.status, 200);
    assert_eq!(recorder.requests(), 1);
    node.stop().await;
}

/// An upstream that accepts connections and never reads from them.
async fn deaf() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_replica_that_stops_reading_a_body_is_treated_as_silent() {
    let (deaf, task) = deaf().await;
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[deaf, recorder.addr]));
    // Round robin: one of the first two requests goes to the deaf replica.
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let stream = TcpStream::connect(node.proxy).await.expect("connect");
        let (mut reader, mut writer) = stream.into_split();
        let size = 64 << 20;
        let sending = tokio::spawn(async move {
            let head = format!("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: {size}\r\n\r\n");
            writer.write_all(head.as_bytes()).await?;
            let piece = vec![b'x'; 1 << 16];
            for _ in 0..size / piece.len() {
                writer.write_all(&piece).await?;
            }
            std::io::Result::Ok(())
        });
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(20), reader.read_to_end(&mut answer)).await;
        sending.abort();
        let text = String::from_utf8_lossy(&answer).into_owned();
        statuses.push(text.split_whitespace().nth(1).unwrap_or("none").to_string());
    }
    statuses.sort();
    assert_eq!(statuses, ["200", "504"]);
    node.verdict_until(
        "r",
        "the replica that stopped reading is out of rotation",
        Duration::from_secs(2),
        |v| v.ready == 1 && v.total == 2,
    )
    .await;
    task.abort();
    node.stop().await;
}

#[tokio::test]
async fn a_100_mib_upload_crosses_whole() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[recorder.addr]));
    let size: usize = 100 << 20;
    let mut wire = Wire::connect(node.proxy).await;
    wire.send(format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {size}\r\n\r\n").as_bytes())
        .await;
    let piece = vec![b'y'; 1 << 20];
    for _ in 0..size / piece.len() {
        wire.send(&piece).await;
    }
    let response = wire.response(false).await.expect("an answer");
    assert_eq!(response.status, 200);
    let (received, requests) = recorder.take();
    assert_eq!(requests, 1);
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert_eq!(received.len() - head_end, size);
    node.stop().await;
}

#[tokio::test]
async fn a_websocket_outlives_every_bound() {
    // Seconds of traffic; PICKET_LONG_WEBSOCKET_S=600 runs the ten-minute
    // case by hand.
    let seconds: u64 = std::env::var("PICKET_LONG_WEBSOCKET_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let upstream = Upstream::start("ws", Behaviour::WebSocket).await;
    let node = TestNode::start(&short_bounds(&[upstream.addr]));
    let url = format!("ws://{}/chat", node.proxy);
    let (mut ws, response) = tokio_tungstenite::connect_async(&url)
        .await
        .expect("upgrade");
    assert_eq!(response.status(), 101);
    let start = Instant::now();
    let mut i = 0u64;
    // A message every 700 ms: every bound (1 s) passes many times over in
    // all, while the connection is never idle for one.
    while start.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(700)).await;
        ws.send(tokio_tungstenite::tungstenite::Message::text(format!(
            "ping {i}"
        )))
        .await
        .expect("send");
        let reply = tokio::time::timeout(Duration::from_secs(2), ws.next())
            .await
            .expect("a reply in time")
            .expect("a frame")
            .expect("a message");
        assert_eq!(
            reply.into_text().expect("text").as_str(),
            format!("ping {i}")
        );
        i += 1;
    }
    assert!(i >= 5);
    ws.close(None).await.expect("close");
    node.stop().await;
}

/// A request body streamed piece by piece.
type Streamed = StreamBody<Pieces>;

type Pieces =
    futures_util::stream::BoxStream<'static, Result<hyper::body::Frame<Bytes>, std::io::Error>>;

async fn h2_connect(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Streamed>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    (sender, tokio::spawn(connection))
}

fn h2_request(body: Pieces) -> http::Request<Streamed> {
    let mut req = http::Request::new(StreamBody::new(body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = http::Uri::from_static("http://h/");
    req
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[recorder.addr]));
    let (mut sender, connection) = h2_connect(node.proxy).await;
    let body =
        futures_util::stream::iter([Ok(hyper::body::Frame::data(Bytes::from_static(b"hi")))])
            .boxed();
    let response = sender
        .send_request(h2_request(body))
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    let _ = response.into_body().collect().await;
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(
        ended.is_ok(),
        "the idle connection was still open after 5 s"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before the idle timeout"
    );
    node.stop().await;
}

/// A raw HTTP/2 client that sends the preface and an empty SETTINGS,
/// then reads what comes and answers nothing: not the node's SETTINGS,
/// not its PING.
#[tokio::test]
async fn an_idle_http2_client_that_ignores_the_closing_ping_does_not_keep_its_place() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[recorder.addr]));
    let mut deaf = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(node.proxy).await.expect("connect");
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .expect("the preface");
        deaf.push(tcp);
    }
    let (p99, worst) = healthz_while(&node, 200).await;
    eprintln!("/healthz while 3 deaf HTTP/2 clients idle: p99 {p99:?}, worst {worst:?}");
    // That no answer waits, not a latency: other tests share the machine
    // (the p99 is measured by tests/bench/hostile.sh, on a release build).
    assert!(
        worst < picket_tests::AT_ONCE,
        "a /healthz answer took {worst:?}"
    );
    let started = Instant::now();
    for mut tcp in deaf {
        // Read (and drop) the node's frames until it closes: its GOAWAY at
        // the idle bound, then the close, however deaf the client.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            let mut sink = [0u8; 1024];
            while tcp.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        })
        .await;
        assert!(
            closed.is_ok(),
            "a client ignoring the PING held its connection for {:?}",
            started.elapsed()
        );
    }
    eprintln!(
        "deaf idle HTTP/2 clients closed after {:?} (idle bound 1 s)",
        started.elapsed()
    );
    node.stop().await;
}

#[tokio::test]
async fn http2_streams_are_limited_and_their_bodies_bounded() {
    let recorder = Recorder::start().await;
    let node = TestNode::start(&short_bounds(&[recorder.addr]));
    let (sender, _connection) = h2_connect(node.proxy).await;
    let mut streams = Vec::new();
    // 150 requests whose bodies send one piece and then nothing.
    for _ in 0..150 {
        let mut sender = sender.clone();
        let body = futures_util::stream::iter([Ok(hyper::body::Frame::data(Bytes::from_static(
            b"start",
        )))])
        .chain(futures_util::stream::pending())
        .boxed();
        streams.push(tokio::spawn(async move {
            match sender.send_request(h2_request(body)).await {
                Ok(response) => response.status().as_u16(),
                Err(_) => 0,
            }
        }));
    }
    // While they hang, never more than 100 reach the replica at once.
    let mut most = 0;
    let watch_until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < watch_until {
        most = most.max(recorder.connections().0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        most <= 100,
        "{most} upstream connections at once from one client connection"
    );
    assert!(most > 0, "no stream reached the replica");
    // Each stalled body is given up after the body bound: 408.
    let mut statuses = Vec::new();
    for stream in streams {
        statuses.push(
            tokio::time::timeout(Duration::from_secs(10), stream)
                .await
                .expect("every stream ends")
                .expect("join"),
        );
    }
    let timed_out = statuses.iter().filter(|s| **s == 408).count();
    assert_eq!(timed_out, 150, "{statuses:?}");
    node.stop().await;
}

/// A replica that answers every request with a body that never ends (a
/// 1 GiB length, written as fast as it is taken), and counts the
/// connections it has open: one freed by the node is one whose write
/// failed.
async fn firehose() -> (std::net::SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (opened, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counted, still) = (Arc::clone(&opened), Arc::clone(&open));
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            still.fetch_add(1, Ordering::SeqCst);
            let still = Arc::clone(&still);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let piece = vec![b'x'; 64 * 1024];
                if tcp
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n")
                    .await
                    .is_ok()
                {
                    while tcp.write_all(&piece).await.is_ok() {}
                }
                still.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, opened, open)
}

/// A node whose send bound is 1 s, in front of `replica`, with a JSON
/// access log at `log`.
fn send_bound(replica: std::net::SocketAddr, log: &std::path::Path) -> String {
    format!(
        "[node]\naccess_log = \"{}\"\naccess_log_format = \"json\"\n\
         send_timeout = \"1s\"\nidle_timeout = \"1s\"\n\n{}",
        log.display(),
        route("r", "/", &[replica], "")
    )
}

/// Waits until the replica has had `n` connections and none is open any
/// more; panics after `within`.
async fn freed(opened: &AtomicUsize, open: &AtomicUsize, n: usize, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if opened.load(Ordering::SeqCst) >= n && open.load(Ordering::SeqCst) == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "the replica still has {} of {} connections after {:?}",
            open.load(Ordering::SeqCst),
            opened.load(Ordering::SeqCst),
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `/healthz` asked `n` times on fresh connections: its p99 and worst.
async fn healthz_while(node: &TestNode, n: usize) -> (Duration, Duration) {
    let mut samples = Vec::new();
    for _ in 0..n {
        let answer = picket_tests::client::get(node.admin, "admin", "/healthz")
            .await
            .expect("/healthz answers");
        assert_eq!(answer.status, 200);
        samples.push(answer.elapsed);
    }
    let worst = samples.iter().max().copied().unwrap_or_default();
    (picket_tests::client::percentile(&mut samples, 99.0), worst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_stops_reading_frees_the_replica_at_the_send_bound() {
    let (replica, opened, open) = firehose().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let node = TestNode::start(&send_bound(replica, &log));
    let mut clients = Vec::new();
    for _ in 0..20 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .set_recv_buffer_size(4096)
            .expect("a small receive buffer");
        let mut tcp = socket.connect(node.proxy).await.expect("connect");
        tcp.write_all(b"GET /big HTTP/1.1\r\nhost: h\r\n\r\n")
            .await
            .expect("request");
        // It never reads.
        clients.push(tcp);
    }
    let (p99, worst) = healthz_while(&node, 200).await;
    eprintln!("/healthz while 20 clients stop reading: p99 {p99:?}, worst {worst:?}");
    // That no answer waits, not a latency: other tests share the machine
    // (the p99 is measured by tests/bench/hostile.sh, on a release build).
    assert!(
        worst < picket_tests::AT_ONCE,
        "a /healthz answer took {worst:?}"
    );
    let took = freed(&opened, &open, 20, Duration::from_secs(8)).await;
    eprintln!(
        "20 replica connections freed {took:?} after the clients stopped reading (bound 1 s)"
    );
    let lines = picket_tests::logs::access_lines(&log, 20).await;
    for line in &lines {
        assert_eq!(line["ending"], "bound_send", "{line}");
        assert_eq!(line["phase"], "body", "{line}");
    }
    drop(clients);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_with_a_zero_window_free_their_replicas_at_the_send_bound() {
    let (replica, opened, open) = firehose().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let node = TestNode::start(&send_bound(replica, &log));
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(node.proxy).await.expect("connect");
        let mut out = H2_PREFACE.to_vec();
        // SETTINGS: INITIAL_WINDOW_SIZE 0: no stream may carry a byte.
        out.extend(h2_frame(0x4, 0, 0, &[0x00, 0x04, 0, 0, 0, 0]));
        for stream in 0..20u32 {
            // GET http://h/ : :method GET, :scheme http, :path /, then
            // :authority "h", from HPACK's static table.
            let block = [0x82, 0x86, 0x84, 0x41, 0x01, b'h'];
            out.extend(h2_frame(0x1, 0x5, stream * 2 + 1, &block));
        }
        tcp.write_all(&out).await.expect("the streams");
        clients.push(tcp);
    }
    let (p99, worst) = healthz_while(&node, 200).await;
    eprintln!("/healthz while 60 HTTP/2 streams hold a shut window: p99 {p99:?}, worst {worst:?}");
    // That no answer waits, not a latency: other tests share the machine
    // (the p99 is measured by tests/bench/hostile.sh, on a release build).
    assert!(
        worst < picket_tests::AT_ONCE,
        "a /healthz answer took {worst:?}"
    );
    let took = freed(&opened, &open, 60, Duration::from_secs(8)).await;
    eprintln!(
        "60 replica connections of zero-window HTTP/2 streams freed {took:?} after they opened (bound 1 s)"
    );
    // The streams given up no longer count as open: the idle bound closes
    // each connection, and the access log says why each answer ended.
    for mut tcp in clients {
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        })
        .await;
        assert!(
            closed.is_ok(),
            "a connection of given-up streams stayed open"
        );
    }
    let lines = picket_tests::logs::access_lines(&log, 60).await;
    for line in &lines {
        assert_eq!(line["ending"], "bound_send", "{line}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_that_keeps_reading_is_never_cut() {
    let size = 16 * 1024 * 1024;
    let replica = Upstream::start(
        "slow",
        Behaviour::Trickle {
            chunks: 64,
            chunk: size / 64,
            every: Duration::from_millis(1),
        },
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let node = TestNode::start(&send_bound(replica.addr, &log));
    // A receive window above loopback's segment size: a smaller one
    // leaves the sender waiting on the kernel's persist timer, not on the
    // reader.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(128 * 1024)
        .expect("a receive buffer");
    let mut tcp = socket.connect(node.proxy).await.expect("connect");
    tcp.write_all(b"GET / HTTP/1.0\r\nhost: h\r\n\r\n")
        .await
        .expect("request");
    // 16 MiB (to HTTP/1.0: unframed), far more than the sockets buffer,
    // taken 64 KiB at a time
    // with a pause of 10 ms: it moves all along, for longer than the bound
    // in all.
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    eprintln!(
        "a slow reader took {} body bytes in {:?} (send bound 1 s)",
        got.len() - head_end,
        started.elapsed()
    );
    assert_eq!(got.len() - head_end, size, "the whole body");
    let lines = picket_tests::logs::access_lines(&log, 1).await;
    assert_eq!(lines[0]["ending"], "complete", "{}", lines[0]);
    node.stop().await;
}
