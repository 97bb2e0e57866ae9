//! Every wait on an upstream is bounded: refused connects answer at once,
//! dropped packets at the connect bound, silent upstreams at the
//! first-answer bound; bodies that started are never cut.

use std::time::Duration;

use picket_tests::client;
use picket_tests::netns::Host;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Control, Upstream, refused_addr};
use picket_tests::{AT_ONCE, require};

/// Whether an answer that waited out `bound` came when it should: not
/// before the bound (a timer never fires early), and within a second of
/// it (end to end on a shared machine; the bounds' precision is the pure
/// machines' to show, on a paused clock).
fn at_the_bound(elapsed: Duration, bound: Duration) -> bool {
    (bound..bound + AT_ONCE).contains(&elapsed)
}

#[tokio::test]
async fn refused_connect_is_502_at_once() {
    let refused = refused_addr().await;
    let node = TestNode::start(&route("r", "/", &[refused], ""));
    for _ in 0..3 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 502, "{}", answer.text());
        assert!(answer.elapsed < AT_ONCE, "took {:?}", answer.elapsed);
    }
    node.stop().await;
}

#[tokio::test]
async fn dropped_packets_are_502_at_the_connect_bound() {
    if !require("root, ip and iptables for a test host", Host::available()) {
        return;
    }
    let mut host = Host::create().unwrap();
    let replica = host
        .upstream(&picket_tests::binaries::test_upstream(), 8080, "dropping")
        .await
        .unwrap();
    host.drop_packets(8080).unwrap();
    let node = TestNode::start(&route("d", "/", &[replica], "connect_timeout = \"1s\""));
    let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
    assert_eq!(answer.status, 502, "{}", answer.text());
    assert!(answer.text().contains("timed out"), "{}", answer.text());
    assert!(
        at_the_bound(answer.elapsed, Duration::from_secs(1)),
        "took {:?}",
        answer.elapsed
    );
    node.stop().await;
}

/// Route `s` over one replica that never answers, with a first-answer
/// bound of 1 s.
async fn silent_alone() -> (Upstream, TestNode) {
    let silent = Upstream::start("silent", Behaviour::Hang).await;
    let node = TestNode::start(&route(
        "s",
        "/",
        &[silent.addr],
        "first_answer_timeout = \"1s\"",
    ));
    (silent, node)
}

#[tokio::test]
async fn silent_upstream_is_504_at_the_first_answer_bound() {
    let (silent, node) = silent_alone().await;
    let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
    assert_eq!(answer.status, 504, "{}", answer.text());
    assert!(
        at_the_bound(answer.elapsed, Duration::from_secs(1)),
        "took {:?}",
        answer.elapsed
    );
    assert_eq!(
        silent.hits(),
        1,
        "the request reached the upstream once, and was not retried"
    );
    node.stop().await;
}

/// The bound's precision, on a paused clock: the node, the replica and
/// the client share the test's runtime, whose clock jumps to the next
/// timer whenever every task waits, so the 504 comes at the bound itself
/// however busy the machine is.
#[tokio::test(start_paused = true)]
async fn on_a_paused_clock_the_first_answer_bound_is_exact() {
    let (_silent, node) = silent_alone().await;
    for _ in 0..3 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 504, "{}", answer.text());
        assert!(
            (Duration::from_secs(1)..Duration::from_millis(1010)).contains(&answer.elapsed),
            "took {:?} on the paused clock",
            answer.elapsed
        );
    }
    node.stop().await;
}

#[tokio::test]
async fn a_trickling_body_outlives_the_first_answer_bound() {
    // Head at once, then 8 chunks 400 ms apart: 2.8 s of body, 2.8× the bound.
    let trickle = Behaviour::Trickle {
        chunks: 8,
        chunk: 1000,
        every: Duration::from_millis(400),
    };
    let upstream = Upstream::start("trickle", trickle).await;
    let node = TestNode::start(&route(
        "t",
        "/",
        &[upstream.addr],
        "first_answer_timeout = \"1s\"",
    ));
    let answer = client::get(node.proxy, "example.com", "/download")
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.len(), 8000, "the whole body arrived");
    assert!(
        answer.elapsed >= Duration::from_millis(2800),
        "took {:?}",
        answer.elapsed
    );
    node.stop().await;
}

/// Route `s` over a replica that never answers and one that echoes, with a
/// first-answer bound of 1 s.
async fn silent_beside_echo() -> (Upstream, Upstream, TestNode) {
    let silent = Upstream::start("silent", Behaviour::Hang).await;
    let echo = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route(
        "s",
        "/",
        &[silent.addr, echo.addr],
        "first_answer_timeout = \"1s\"",
    ));
    (silent, echo, node)
}

#[tokio::test]
async fn a_silent_replica_costs_one_idempotent_request_one_bound_then_is_ejected() {
    let (silent, _echo, node) = silent_beside_echo().await;
    let mut slow = 0;
    for _ in 0..10 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(answer.text().starts_with("echo:"), "{}", answer.text());
        if answer.elapsed >= Duration::from_millis(900) {
            slow += 1;
        }
    }
    // The first GET to reach it waited one bound and moved on; after that
    // the silent replica was out of this node's rotation.
    assert_eq!(silent.hits(), 1, "one request reached the silent replica");
    assert_eq!(slow, 1, "one request paid the bound");
    // The verdict is judged again on its own task, at once.
    node.verdict_until(
        "s",
        "1 of 2, ejected as silent",
        Duration::from_secs(1),
        |v| {
            (v.ready, v.total) == (1, 2)
                && v.reason
                    .contains("ejected by this node: no answer within the first-answer bound")
        },
    )
    .await;
    node.stop().await;
}

#[tokio::test]
async fn a_post_to_a_silent_replica_is_504_and_sent_nowhere_else() {
    let (silent, echo, node) = silent_beside_echo().await;
    // POST with a body: it may be in progress, so it is not sent twice.
    let mut timed_out = 0;
    for _ in 0..4 {
        let req = client::request(
            http::Method::POST,
            "example.com",
            "/",
            bytes::Bytes::from_static(b"order"),
        );
        let answer = client::send(node.proxy, req).await.unwrap();
        match answer.status.as_u16() {
            504 => timed_out += 1,
            200 => assert!(answer.text().starts_with("echo:")),
            other => panic!("POST answered {other}"),
        }
    }
    assert_eq!(
        silent.hits(),
        1,
        "round robin sent one POST there, then none"
    );
    assert_eq!(
        timed_out, 1,
        "the POST that reached the silent replica got 504, and went nowhere else"
    );
    assert_eq!(echo.hits(), 3);
    node.stop().await;
}

#[tokio::test]
async fn the_last_replica_in_rotation_is_not_ejected_for_silence() {
    let (silent, node) = silent_alone().await;
    for _ in 0..2 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 504, "{}", answer.text());
    }
    assert_eq!(silent.hits(), 2, "each request tried it: no 502 at once");
    assert_eq!(node.verdict("s").unwrap().ready, 1);
    node.stop().await;
}

#[tokio::test]
async fn a_silent_replica_that_answers_again_is_back_one_period_later() {
    let control = Control::new(200);
    let paused = Upstream::start("paused", Behaviour::Controlled(control.clone())).await;
    let echo = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route(
        "s",
        "/",
        &[paused.addr, echo.addr],
        "first_answer_timeout = \"1s\"\neject_for = \"1s\"",
    ));
    control.set_delay(Duration::from_secs(3600));
    while paused.hits() == 0 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 200);
    }
    node.verdict_until("s", "the paused replica out", Duration::from_secs(3), |v| {
        v.ready == 1
    })
    .await;
    control.set_delay(Duration::ZERO);
    // The probe connects one period after the ejection and puts it on
    // trial; the first request it answers puts it back in rotation.
    let on_trial = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, routes) = node.admin_json("/v1/routes").await;
        if routes.to_string().contains("\"probation\"") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < on_trial,
            "on trial one period after the ejection: {routes}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = paused.hits();
    for _ in 0..4 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 200);
        if paused.hits() > before {
            break;
        }
    }
    assert!(paused.hits() > before, "its trial request");
    node.verdict_until("s", "the replica back", Duration::from_secs(3), |v| {
        v.ready == 2
    })
    .await;
    let mut from_paused = 0;
    for _ in 0..4 {
        let answer = client::get(node.proxy, "example.com", "/").await.unwrap();
        assert_eq!(answer.status, 200);
        from_paused += usize::from(answer.text().starts_with("paused:"));
    }
    assert_eq!(from_paused, 2, "round robin over both again");
    node.stop().await;
}
