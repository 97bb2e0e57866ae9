//! HTTP/2 connections to replicas (`protocol = "h2c"`): a connection is
//! open only once the replica has spoken HTTP/2 (within the connect
//! bound), and a connection carries no more streams than the replica
//! allows: the node opens another when it is full.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use picket_proto::Heart;
use picket_tests::client;
use picket_tests::node::{TestNode, eventually, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// No check round during the test but the first.
const QUIET_CHECKS: &str = "[global]\ncheck_every = \"10m\"\n";

/// An h2c replica allowing `streams` streams per connection, answering
/// each request after `delay`; counts the connections it accepted.
async fn h2c_replica(streams: u32, delay: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let (addr, accepted, _) = h2c_replica_counting(streams, delay).await;
    (addr, accepted)
}

/// [`h2c_replica`], and the most requests it held at once.
async fn h2c_replica_counting(
    streams: u32,
    delay: Duration,
) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (count, most) = (Arc::clone(&accepted), Arc::clone(&peak));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (in_flight, most) = (Arc::clone(&in_flight), Arc::clone(&most));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    let (in_flight, most) = (Arc::clone(&in_flight), Arc::clone(&most));
                    async move {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(delay).await;
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                            b"ok",
                        ))))
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .max_concurrent_streams(streams)
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (addr, accepted, peak)
}

/// `n` requests through the node at once, each answered 200.
async fn all_at_once(proxy: SocketAddr, n: usize) {
    let requests: Vec<_> = (0..n)
        .map(|i| tokio::spawn(async move { client::get(proxy, "h", &format!("/{i}")).await }))
        .collect();
    for request in requests {
        let answer = request.await.unwrap().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_connection_makes_the_node_open_another() {
    let (replica, accepted, peak) = h2c_replica_counting(2, Duration::from_secs(1)).await;
    let node = TestNode::start(&format!(
        "{QUIET_CHECKS}{}",
        route("r", "/", &[replica], "protocol = \"h2c\"")
    ));
    // One warm connection first.
    let answer = client::get(node.proxy, "h", "/warm").await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    let before = accepted.load(Ordering::SeqCst);

    // Six at once, at most two streams a connection: three connections
    // carry them side by side, so they end together rather than in three
    // rounds: the replica holds all six at once.
    all_at_once(node.proxy, 6).await;
    let opened = accepted.load(Ordering::SeqCst) - before;
    assert!(
        opened >= 2,
        "the warm connection was full: {opened} more opened"
    );
    assert_eq!(
        peak.load(Ordering::SeqCst),
        6,
        "the requests waited for room in turn"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_shares_one_new_connection() {
    let (replica, accepted) = h2c_replica(100, Duration::from_millis(300)).await;
    let node = TestNode::start(&format!(
        "{QUIET_CHECKS}{}",
        route("r", "/", &[replica], "protocol = \"h2c\"")
    ));
    // The first check round, at start, has come and gone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = accepted.load(Ordering::SeqCst);
    all_at_once(node.proxy, 20).await;
    let opened = accepted.load(Ordering::SeqCst) - before;
    assert!(
        (1..=2).contains(&opened),
        "20 requests at once to a replica with no connection opened {opened}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_speak_http2_is_a_failed_connect() {
    // An HTTP/1.1 server behind an h2c route.
    let http1 = Upstream::start("old", Behaviour::Status(200)).await;
    // A server that accepts and never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            held.push(tcp);
        }
    });
    let node = TestNode::start(&format!(
        "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"1s\"\n{}{}",
        route("old", "/old", &[http1.addr], "protocol = \"h2c\""),
        route(
            "silent",
            "/silent",
            &[silent_addr],
            "protocol = \"h2c\"\nconnect_timeout = \"1s\"\nfirst_answer_timeout = \"60s\""
        ),
    ));
    let answer = client::get(node.proxy, "h", "/old/x").await.unwrap();
    assert_eq!(answer.status, 502, "{}", answer.text());

    // The connect bound covers the HTTP/2 handshake: the silent replica
    // fails at it, not at the first-answer bound.
    let started = Instant::now();
    let answer = client::get(node.proxy, "h", "/silent/x").await.unwrap();
    assert_eq!(answer.status, 502, "{}", answer.text());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    eventually("both red by their checks", Duration::from_secs(10), || {
        let red = |route: &str, why: &str| {
            node.verdict(route)
                .is_some_and(|v| v.heart == Heart::Red && v.reason.contains(why))
        };
        red("old", "HTTP/2") && red("silent", "timed out")
    })
    .await;
    node.stop().await;
}
