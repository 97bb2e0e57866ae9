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
