//! Real traffic wins: a replica whose own answers are 502, 503 or 504 five
//! times in a row leaves this node's rotation while another replica is in
//! it, with the reason in the verdict and the metrics; a replica answering
//! 500 is up and has a bug, and stays.

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use std::time::Duration;

#[tokio::test]
async fn a_replica_answering_503_is_ejected_after_five_in_a_row() {
    let failing = Upstream::start("failing", Behaviour::Status(503)).await;
    let healthy = Upstream::start("healthy", Behaviour::Status(200)).await;
    let node = TestNode::start(&route("r", "/", &[failing.addr, healthy.addr], ""));
    // GETs: a 503 is retried on the other replica, so every client gets 200.
    for _ in 0..30 {
        let answer = client::get(node.proxy, "h", "/").await.expect("an answer");
        assert_eq!(answer.status, 200);
    }
    assert_eq!(
        failing.hits(),
        5,
        "requests the failing replica got before its ejection"
    );
    let verdict = node.verdict("r").expect("a verdict");
    assert_eq!(verdict.heart, Heart::Orange, "{verdict:?}");
    assert_eq!(
        &*verdict.reason,
        "1 of 2 ready (1 ejected by this node: 5 consecutive 503)"
    );
    let metrics = client::get(node.admin, "admin", "/metrics")
        .await
        .expect("metrics")
        .text();
    assert!(
        metrics.contains(
            "picket_replica_ejections_by_reason_total{route=\"r\",reason=\"gateway_errors\"} 1\n"
        ),
        "{metrics}"
    );
    // The status API names the replica's state and why.
    let (status, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(status, 200);
    let replicas = routes.to_string();
    assert!(
        replicas.contains("\"state\":\"ejected\"") && replicas.contains("5 consecutive 503"),
        "{routes:#}"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_replica_answering_500_stays() {
    let buggy = Upstream::start("buggy", Behaviour::Status(500)).await;
    let healthy = Upstream::start("healthy", Behaviour::Status(200)).await;
    let node = TestNode::start(&route("r", "/", &[buggy.addr, healthy.addr], ""));
    for _ in 0..20 {
        client::get(node.proxy, "h", "/").await.expect("an answer");
    }
    assert_eq!(buggy.hits(), 10, "round robin: half of the requests");
    let verdict = node.verdict("r").expect("a verdict");
    assert_eq!(
        (verdict.heart, verdict.ready),
        (Heart::Green, 2),
        "{verdict:?}"
    );
    node.stop().await;
}

#[tokio::test]
async fn the_last_replica_in_rotation_is_never_ejected_for_its_answers() {
    let failing = Upstream::start("failing", Behaviour::Status(502)).await;
    let node = TestNode::start(&route("r", "/", &[failing.addr], ""));
    for _ in 0..10 {
        let answer = client::get(node.proxy, "h", "/").await.expect("an answer");
        assert_eq!(answer.status, 502);
    }
    // Kept: every request still reached it.
    assert_eq!(failing.hits(), 10);
    // But in rotation is not serving: the verdict says what traffic saw.
    node.verdict_until("r", "red, failing traffic", Duration::from_secs(2), |v| {
        (v.heart, v.ready) == (Heart::Red, 0)
            && *v.reason
                == *"none ready (1 failing traffic: 5 consecutive 502; kept in rotation: no other replica)"
    })
    .await;
    node.stop().await;
}
