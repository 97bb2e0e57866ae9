//! `/healthz` answers from memory: under 5 ms at p99 while every replica
//! of every route hangs and the proxy holds hundreds of requests waiting
//! on them.

use std::time::Duration;

use picket_tests::client::{self, percentile};
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_stays_fast_while_every_upstream_hangs() {
    let a = Upstream::start("a", Behaviour::Hang).await;
    let b = Upstream::start("b", Behaviour::Hang).await;
    let config = format!(
        "{}{}",
        route("a", "/", &[a.addr], "first_answer_timeout = \"60s\""),
        route("b", "/b", &[b.addr], "first_answer_timeout = \"60s\"")
    );
    let node = TestNode::start(&config);
    let mut hanging = Vec::new();
    for i in 0..400 {
        let proxy = node.proxy;
        let path = if i % 2 == 0 { "/" } else { "/b" };
        hanging.push(tokio::spawn(
            async move { client::get(proxy, "x", path).await },
        ));
    }
    // Let the hanging requests reach their upstreams.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.hits() + b.hits() < 400 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        a.hits() + b.hits(),
        400,
        "every request is waiting on an upstream"
    );

    let mut samples = Vec::new();
    for _ in 0..500 {
        let answer = client::get(node.admin, "admin", "/healthz").await.unwrap();
        assert_eq!(answer.status, 200);
        samples.push(answer.elapsed);
    }
    let ready = client::get(node.admin, "admin", "/readyz").await.unwrap();
    assert_eq!(ready.status, 200);
    let p99 = percentile(&mut samples, 99.0);
    eprintln!(
        "/healthz over 500 requests: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&mut samples, 50.0),
        p99,
        samples[samples.len() - 1]
    );
    assert!(p99 < Duration::from_millis(5), "p99 {p99:?}");
    for task in &hanging {
        task.abort();
    }
    node.stop().await;
}
