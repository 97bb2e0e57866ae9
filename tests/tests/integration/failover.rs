//! Failover when a replica drops packets: two replicas, one dropping,
//! connect bound 2 s, a request launched every 250 ms for 30 s without
//! waiting for earlier ones. No request may fail and at most one may take
//! over 0.5 s; the replica is back in rotation within one probe interval
//! after it answers again.

use std::time::Duration;

use picket_tests::client::{self, Answer};
use picket_tests::netns::Host;
use picket_tests::node::{TestNode, route};
use picket_tests::require;
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::time::{Instant, sleep};

const EJECT_FOR: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_dropping_packets_costs_no_request() {
    if !require("root, ip and iptables for a test host", Host::available()) {
        return;
    }
    let mut host = Host::create().unwrap();
    let dropping = host
        .upstream(&picket_tests::binaries::test_upstream(), 8080, "dropping")
        .await
        .unwrap();
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    host.drop_packets(8080).unwrap();
    let node = TestNode::start(&route(
        "api",
        "/",
        &[dropping, healthy.addr],
        "connect_timeout = \"2s\"\neject_for = \"10s\"",
    ));

    // 120 requests, one every 250 ms, none waiting for another.
    let start = Instant::now();
    let mut launched = Vec::new();
    for i in 0..120u32 {
        sleep(Duration::from_millis(250)).await;
        let proxy = node.proxy;
        launched.push(tokio::spawn(async move {
            (i, client::get(proxy, "api.example.com", "/").await)
        }));
    }
    let mut answers: Vec<(u32, Answer)> = Vec::new();
    for task in launched {
        let (i, answer) = task.await.unwrap();
        answers.push((
            i,
            answer.unwrap_or_else(|e| panic!("request {i} failed: {e}")),
        ));
    }
    let failed: Vec<_> = answers.iter().filter(|(_, a)| a.status != 200).collect();
    let slow: Vec<_> = answers
        .iter()
        .filter(|(_, a)| a.elapsed > Duration::from_millis(500))
        .collect();
    let worst = answers
        .iter()
        .map(|(_, a)| a.elapsed)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{} requests over {:?}: {} failed, {} over 0.5 s, slowest {:?}",
        answers.len(),
        start.elapsed(),
        failed.len(),
        slow.len(),
        worst
    );
    assert!(
        failed.is_empty(),
        "failed: {:?}",
        failed
            .iter()
            .map(|(i, a)| (i, a.status))
            .collect::<Vec<_>>()
    );
    assert!(
        slow.len() <= 1,
        "over 0.5 s: {:?}",
        slow.iter().map(|(i, a)| (i, a.elapsed)).collect::<Vec<_>>()
    );

    // The replica answers again: back in rotation within one probe interval.
    host.heal(8080).unwrap();
    let healed = Instant::now();
    let back = loop {
        let answer = client::get(node.proxy, "api.example.com", "/")
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
        if answer.text().starts_with("dropping:") {
            break healed.elapsed();
        }
        assert!(
            healed.elapsed() < EJECT_FOR + Duration::from_secs(1),
            "the healed replica is still out of rotation after {:?}",
            healed.elapsed()
        );
        sleep(Duration::from_millis(100)).await;
    };
    eprintln!("healed replica back in rotation after {back:?}");
    node.stop().await;
}
