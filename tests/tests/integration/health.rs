//! `/healthz` answers from memory: at once while every replica of every
//! route hangs and the proxy holds hundreds of requests waiting on them.
//! The test asserts that no answer waits (each well under the replicas'
//! 60 s hang, on however loaded a machine); it prints the percentiles, the
//! figure docs/benchmarks.md keeps.

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
    let max = samples[samples.len() - 1];
    eprintln!(
        "/healthz over 500 requests: p50 {:?}, p99 {p99:?}, max {max:?}",
        percentile(&mut samples, 50.0),
    );
    assert!(
        max < picket_tests::AT_ONCE,
        "a /healthz answer took {max:?}: it waited on something"
    );
    for task in &hanging {
        task.abort();
    }
    node.stop().await;
}
