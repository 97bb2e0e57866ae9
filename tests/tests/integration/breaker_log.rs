//! One log line per trip, never one per refused request: 10,000 requests
//! refused while the circuit is open leave the trip's line and nothing
//! else. The node runs on a runtime that logs to this test alone.

use picket_tests::logs::Captured;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::wire::Wire;

#[test]
fn ten_thousand_refusals_log_one_trip() {
    let captured = Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {
        let upstream = Upstream::start("failing", Behaviour::Status(503)).await;
        let breaker = "breaker = { enabled = true, failures = 5, cooldown = \"5m\" }";
        let node = TestNode::start(&route("api", "/", &[upstream.addr], breaker));
        let mut wire = Wire::connect(node.proxy).await;
        for _ in 0..5 {
            wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
            assert_eq!(wire.response(false).await.unwrap().status, 503);
        }
        let logged_before = captured.text().lines().count();
        for _ in 0..10_000 {
            wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
            let answer = wire.response(false).await.unwrap();
            assert_eq!(answer.status, 503);
            assert!(answer.headers.contains_key("retry-after"));
        }
        assert_eq!(
            upstream.hits(),
            5,
            "nothing reached the upstream while open"
        );
        let log = captured.text();
        let trips: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("circuit opened"))
            .collect();
        assert_eq!(trips.len(), 1, "{log}");
        assert!(
            trips[0].contains("route=\"api\"") || trips[0].contains("route=api"),
            "{}",
            trips[0]
        );
        assert!(trips[0].contains("5 consecutive failures"), "{}", trips[0]);
        assert!(trips[0].contains("node="), "{}", trips[0]);
        let logged_after = log.lines().count();
        assert_eq!(
            logged_after, logged_before,
            "the refusals logged nothing:\n{log}"
        );
        node.stop().await;
    });
}
