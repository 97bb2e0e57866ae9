//! The admin listener under floods: a keep-alive scraper keeps scraping
//! while silent connections pour in, an answer streamed for seconds is
//! never cut to make room, and connections that send a byte and nothing
//! more never hold more than twice the listener's places.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use picket_tests::client;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Connects to `addr` `per_second` times a second until `stop`, each
/// connection sending `first` (nothing, or a byte) and then nothing,
/// kept open; returns how many it opened.
fn flood(
    addr: std::net::SocketAddr,
    per_second: u32,
    first: &'static [u8],
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut held = Vec::new();
        let mut every = tokio::time::interval(Duration::from_secs(1) / per_second);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        while !stop.load(Ordering::Relaxed) {
            every.tick().await;
            if let Ok(mut tcp) = TcpStream::connect(addr).await {
                let _ = tcp.write_all(first).await;
                held.push(tcp);
            }
            // Closed by the node: let them go.
            if held.len() > 4_000 {
                held.drain(..2_000);
            }
        }
        held.len()
    })
}

/// The value of an unlabelled sample of a node's `/metrics`.
async fn sample(node: &TestNode, name: &str) -> f64 {
    let text = client::get(node.admin, "admin", "/metrics")
        .await
        .map(|a| a.text())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A scraper on one kept-alive connection, as Prometheus scrapes, 100
/// times while 300 silent connections a second arrive: at least 99 of its
/// scrapes answer whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_scraper_scrapes_through_a_flood_of_silent_connections() {
    let upstream = Upstream::start("ok", Behaviour::Status(200)).await;
    let node = TestNode::start(&format!(
        "[node]\nadmin_max_connections = 16\n{}",
        route("r", "/", &[upstream.addr], "")
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = flood(node.admin, 300, b"", Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut scraped = 0;
    let mut failures = Vec::new();
    let mut sender = None;
    for _ in 0..100 {
        if sender.is_none() {
            let connected = async {
                let stream = TcpStream::connect(node.admin).await.ok()?;
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .ok()?;
                tokio::spawn(connection);
                Some(sender)
            };
            sender = connected.await;
        }
        let Some(scraper) = sender.as_mut() else {
            failures.push("connect".to_string());
            continue;
        };
        let request = http::Request::get("/metrics")
            .header("host", "admin")
            .body(Empty::<Bytes>::new())
            .expect("a request");
        match scraper.send_request(request).await {
            Ok(answer) => match answer.into_body().collect().await.map(|b| b.to_bytes()) {
                Ok(body) if body.ends_with(b"# EOF\n") => scraped += 1,
                Ok(_) => failures.push("a cut exposition".into()),
                Err(e) => failures.push(e.to_string()),
            },
            Err(e) => {
                failures.push(e.to_string());
                sender = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let opened = flooding.await.expect("the flood");
    let evicted = sample(&node, "picket_admin_connections_evicted_total").await;
    println!(
        "a keep-alive scraper through {opened} silent connections: {scraped} of 100 scrapes whole, {evicted} evicted"
    );
    assert!(scraped >= 99, "{scraped} of 100: {failures:?}");
    assert!(evicted > 100.0, "the flood made room for itself: {evicted}");
    node.stop().await;
}

/// A `/v1/cluster` read slowly (a 4 KiB receive buffer, 2 KiB every
/// 40 ms) while silent and one-byte connections fill every place: it is
/// never closed to make room, and arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_never_cut_to_make_room() {
    let upstream = Upstream::start("ok", Behaviour::Status(200)).await;
    let routes: String = (0..400)
        .map(|i| {
            route(
                &format!("route-{i:03}"),
                &format!("/r{i}"),
                &[upstream.addr],
                "",
            )
        })
        .collect();
    let node = TestNode::start(&format!("[node]\nadmin_max_connections = 4\n{routes}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.set_recv_buffer_size(4096).expect("a small buffer");
    let mut slow = socket.connect(node.admin).await.expect("connect");
    slow.write_all(b"GET /v1/cluster HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let stop = Arc::new(AtomicBool::new(false));
    let silent = flood(node.admin, 200, b"", Arc::clone(&stop));
    let one_byte = flood(node.admin, 200, b"G", Arc::clone(&stop));
    let mut answer = Vec::new();
    let mut piece = vec![0u8; 2048];
    let started = Instant::now();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), slow.read(&mut piece)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&piece[..n]),
            Ok(Err(e)) => panic!("the answer broke off after {} bytes: {e}", answer.len()),
            Err(_) => panic!("the answer stalled after {} bytes", answer.len()),
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (silent, one_byte) = (silent.await.expect("flood"), one_byte.await.expect("flood"));
    let text = String::from_utf8_lossy(&answer);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .expect("a head and a body");
    // Chunked: the last chunk ends it, and the JSON inside reads whole.
    assert!(body.ends_with("0\r\n\r\n"), "cut: {} bytes", answer.len());
    let mut json = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        json.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    let view: serde_json::Value = serde_json::from_str(&json).expect("whole JSON");
    assert!(view["members"].is_array());
    let evicted = sample(&node, "picket_admin_connections_evicted_total").await;
    println!(
        "/v1/cluster ({} bytes) read over {:?} beside {silent} silent and {one_byte} one-byte connections ({evicted} evicted): whole",
        answer.len(),
        started.elapsed()
    );
    assert!(started.elapsed() > Duration::from_secs(1), "read slowly");
    assert!(evicted > 50.0, "places were made: {evicted}");
    node.stop().await;
}

/// 2,000 connections a second that each send one byte and nothing more:
/// the admin listener never holds more than twice its limit, and
/// `/healthz` on a fresh connection still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_byte_connections_never_hold_more_than_twice_the_limit() {
    let node = TestNode::start("[node]\nadmin_max_connections = 16\n");
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = flood(node.admin, 2_000, b"G", Arc::clone(&stop));
    let most = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut answered = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let held = node.node().metrics().connections.admin_open.get();
        most.fetch_max(usize::try_from(held).unwrap_or(0), Ordering::Relaxed);
        if client::get(node.admin, "admin", "/healthz")
            .await
            .is_ok_and(|a| a.status == 200)
        {
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let opened = flooding.await.expect("the flood");
    let most = most.load(Ordering::Relaxed);
    println!(
        "{opened} one-byte admin connections in 3 s: at most {most} held at once (limit 16); {answered} /healthz answered"
    );
    assert!(opened > 2_000, "the flood ran: {opened}");
    assert!(most <= 32, "held {most}, more than twice the limit");
    assert!(answered > 50, "{answered} /healthz answered");
    node.stop().await;
}
