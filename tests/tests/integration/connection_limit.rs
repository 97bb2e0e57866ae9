//! Past its client connection limit a node stops accepting, and stays
//! healthy: `/healthz` answers at once, no replica is blamed, the limit is
//! logged once, not once per connection. It asserts that no `/healthz`
//! waits, not a latency, so other tests' load does not fail it.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use picket_tests::client::{self, percentile};
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::net::TcpStream;
use tokio::time::Instant;

#[tokio::test]
async fn past_the_connection_limit_the_node_stays_healthy() {
    let upstream = Upstream::start("ok", Behaviour::Status(200)).await;
    let config = format!(
        "[node]\nmax_connections = 20\n[global]\ncheck_every = \"1s\"\n{}",
        route("r", "/", &[upstream.addr], "")
    );
    let node = TestNode::start(&config);
    // 200 idle clients: 20 served, the rest wait in the backlog.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(node.proxy).await.expect("connect"));
    }
    // On one kept-alive connection, as a prober does.
    let stream = TcpStream::connect(node.admin).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut samples = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        let req = http::Request::get("/healthz")
            .header("host", "admin")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let response = sender.send_request(req).await.expect("healthz");
        assert_eq!(response.status(), 200);
        let _ = response.into_body().collect().await;
        samples.push(started.elapsed());
    }
    let p99 = percentile(&mut samples, 99.0);
    let max = samples.iter().max().copied().unwrap_or_default();
    eprintln!("/healthz at the connection limit: p99 {p99:?}, max {max:?}");
    assert!(
        max < picket_tests::AT_ONCE,
        "a /healthz answer at the connection limit took {max:?}"
    );
    let verdict = node.verdict("r").expect("a verdict");
    assert_eq!((verdict.ready, verdict.total), (1, 1), "{verdict:?}");
    let metrics = client::get(node.admin, "admin", "/metrics")
        .await
        .expect("metrics")
        .text();
    assert!(
        metrics.contains("picket_connection_limit_reached_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("picket_client_connections 20\n"),
        "{metrics}"
    );
    // The waiting clients are served as soon as the idle ones go.
    drop(idle);
    let answer = client::get(node.proxy, "h", "/").await.expect("proxied");
    assert_eq!(answer.status, 200);
    node.stop().await;
}

/// The admin listener has places of its own: a flood of idle connections
/// to it (a hostile client, or a script that leaks them) closes the
/// oldest of them at the limit, never takes every descriptor, and
/// `/healthz` on a fresh connection is answered all through. Before, 21,000
/// such connections took every descriptor of the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_admin_connections_keeps_its_own_places() {
    let upstream = Upstream::start("ok", Behaviour::Status(200)).await;
    let config = format!(
        "[node]\nadmin_max_connections = 16\n{}",
        route("r", "/", &[upstream.addr], "")
    );
    let node = TestNode::start(&config);
    let admin = node.admin;
    // Idle connections, opened all along while /healthz is asked.
    let flood = tokio::spawn(async move {
        let mut idle = Vec::new();
        // 2,000 a second for 2 s: the hostile round's 21,000 at its pace.
        let mut every = tokio::time::interval(std::time::Duration::from_millis(1));
        for _ in 0..4_000 {
            every.tick().await;
            if let Ok(tcp) = TcpStream::connect(admin).await {
                idle.push(tcp);
            }
            if idle.len() % 2 == 0 {
                tokio::task::yield_now().await;
            }
        }
        idle
    });
    let mut samples = Vec::new();
    while !flood.is_finished() || samples.len() < 200 {
        let answer = client::get(node.admin, "admin", "/healthz")
            .await
            .expect("/healthz answers during the flood");
        assert_eq!(answer.status, 200);
        samples.push(answer.elapsed);
    }
    let idle = flood.await.expect("flood");
    let p99 = percentile(&mut samples, 99.0);
    let max = samples.iter().max().copied().unwrap_or_default();
    eprintln!(
        "/healthz on fresh connections during a flood of {} idle admin connections: {} answers, p99 {p99:?}, max {max:?}",
        idle.len(),
        samples.len()
    );
    assert!(
        max < picket_tests::AT_ONCE,
        "a /healthz answer during the flood took {max:?}"
    );
    let metrics = client::get(node.admin, "admin", "/metrics")
        .await
        .expect("metrics")
        .text();
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    // At most twice the limit while new ones are within their grace.
    assert!(value("picket_admin_connections") <= 32.0, "{metrics}");
    assert!(
        value("picket_admin_connections_evicted_total") >= 3_900.0,
        "{metrics}"
    );
    drop(idle);
    node.stop().await;
}

/// An admin connection that sends nothing is closed at the admin head
/// bound (10 s), well before the proxy's 30 s.
#[tokio::test]
async fn an_idle_admin_connection_is_closed_at_its_head_bound() {
    use tokio::io::AsyncReadExt;
    let node = TestNode::start("");
    let mut tcp = TcpStream::connect(node.admin).await.expect("connect");
    let started = Instant::now();
    let mut sink = [0u8; 256];
    let closed = tokio::time::timeout(std::time::Duration::from_secs(15), async {
        while tcp.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    assert!(closed.is_ok(), "an idle admin connection outlived 15 s");
    let after = started.elapsed();
    eprintln!("an idle admin connection closed after {after:?}");
    assert!(after >= std::time::Duration::from_secs(9), "{after:?}");
    node.stop().await;
}
