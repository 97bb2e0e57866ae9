//! A restart must not become an outage: a route whose every replica is
//! ejected still sends requests to them (panic routing), so a lone replica
//! back from a one-second restart serves the very next request, and the
//! probe, backing off from 250 ms, puts it back in rotation (and the verdict
//! back to green) well within 1.5 s of it listening again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::node::{TestNode, route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A replica that can be stopped (its port closed, its connections cut)
/// and started again on the same address.
struct Restartable {
    addr: SocketAddr,
    tasks: JoinSet<()>,
}

impl Restartable {
    async fn start(addr: SocketAddr) -> Restartable {
        let listener = TcpListener::bind(addr).await.expect("bind the replica");
        let addr = listener.local_addr().expect("address");
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                connections.spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(n) if n > 0 => seen.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Restartable { addr, tasks }
    }

    /// Closes the port and every connection.
    fn stop(mut self) -> SocketAddr {
        self.tasks.abort_all();
        self.addr
    }
}

/// Sends a GET every 50 ms until stopped; returns (sent at, status or 0).
fn load(proxy: SocketAddr, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<(Instant, u16)>> {
    tokio::spawn(async move {
        let mut results = Vec::new();
        let mut ticks = tokio::time::interval(Duration::from_millis(50));
        while !stop.load(Ordering::Relaxed) {
            ticks.tick().await;
            let sent = Instant::now();
            let status = match client::get(proxy, "h", "/").await {
                Ok(answer) => answer.status.as_u16(),
                Err(_) => 0,
            };
            results.push((sent, status));
        }
        results
    })
}

#[tokio::test]
async fn a_lone_replica_back_from_a_one_second_restart_serves_at_once() {
    let replica = Restartable::start(SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let node = TestNode::start(&route("r", "/", &[replica.addr], "eject_for = \"10s\""));
    let stop = Arc::new(AtomicBool::new(false));
    let load = load(node.proxy, Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let addr = replica.stop();
    node.verdict_until(
        "r",
        "the stopped replica is ejected",
        Duration::from_secs(3),
        |v| v.heart == Heart::Red,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let _replica = Restartable::start(addr).await;
    let listening = Instant::now();
    node.verdict_until(
        "r",
        "the replica back in rotation: green again",
        Duration::from_secs(3),
        |v| v.heart == Heart::Green,
    )
    .await;
    let back_in_rotation = listening.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let results = load.await.expect("the load");

    let first_ok = results
        .iter()
        .find(|(sent, status)| *sent >= listening && *status == 200)
        .map(|(sent, _)| sent.duration_since(listening))
        .expect("a 200 after the restart");
    let failed_after: Vec<_> = results
        .iter()
        .filter(|(sent, status)| *sent >= listening && *status != 200)
        .collect();
    println!(
        "listening again → first 200: {first_ok:?}; → back in rotation: {back_in_rotation:?}; failures after it listened: {}",
        failed_after.len()
    );
    assert!(
        first_ok < picket_tests::AT_ONCE,
        "first 200 {first_ok:?} after it listened"
    );
    assert!(
        failed_after.len() <= 1,
        "{} requests failed after the replica listened again",
        failed_after.len()
    );
    node.stop().await;
}

#[tokio::test]
async fn every_replica_ejected_still_takes_requests() {
    let a = Restartable::start(SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let b = Restartable::start(SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let node = TestNode::start(&route("r", "/", &[a.addr, b.addr], "eject_for = \"1h\""));
    let (a, b) = (a.stop(), b.stop());
    // Both refuse: both ejected, the route red.
    for _ in 0..4 {
        let answer = client::get(node.proxy, "h", "/").await.expect("an answer");
        assert_eq!(answer.status, 502);
    }
    node.verdict_until("r", "both ejected", Duration::from_secs(3), |v| {
        v.heart == Heart::Red && v.ready == 0
    })
    .await;
    // Both back; probes are an hour away, yet requests go through at once.
    let (_a, _b) = (Restartable::start(a).await, Restartable::start(b).await);
    for _ in 0..4 {
        let answer = client::get(node.proxy, "h", "/").await.expect("an answer");
        assert_eq!(answer.status, 200);
    }
    // The verdict still says what this node judged: red until a probe.
    let verdict = node.verdict("r").expect("a verdict");
    assert_eq!(verdict.heart, Heart::Red, "{verdict:?}");
    node.stop().await;
}
