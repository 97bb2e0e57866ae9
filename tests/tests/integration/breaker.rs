//! The circuit breaker of a route on one node, end to end: what trips it,
//! what it refuses, how it recovers, and that only proxied requests move
//! it.

use std::time::Duration;

use http::Method;
use picket_tests::client::{self, request, send};
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Control, Upstream, refused_addr};
use serde_json::Value;
use tokio::time::{Instant, sleep, sleep_until};

const BREAKER: &str = "breaker = { enabled = true, failures = 5, cooldown = \"1s\" }";
/// A cool-down long enough to watch end to end with a second to spare.
const BREAKER_3S: &str = "breaker = { enabled = true, failures = 5, cooldown = \"3s\" }";

async fn routes(node: &TestNode) -> Value {
    let answer = client::get(node.admin, "admin", "/v1/routes")
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    serde_json::from_slice(&answer.body).unwrap()
}

async fn breaker(node: &TestNode, route: &str) -> Value {
    let all = routes(node).await;
    let found = all["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == route)
        .cloned();
    found.unwrap()["breaker"].clone()
}

async fn status(node: &TestNode) -> u16 {
    client::get(node.proxy, "a", "/")
        .await
        .unwrap()
        .status
        .as_u16()
}

#[tokio::test]
async fn five_consecutive_failures_open_and_a_success_resets_the_count() {
    let control = Control::new(502);
    let upstream = Upstream::start("api", Behaviour::Controlled(control.clone())).await;
    let node = TestNode::start(&route("api", "/", &[upstream.addr], BREAKER));

    for _ in 0..4 {
        assert_eq!(status(&node).await, 502);
    }
    assert_eq!(breaker(&node, "api").await["consecutive_failures"], 4);
    control.set_status(200);
    assert_eq!(status(&node).await, 200);
    let b = breaker(&node, "api").await;
    assert_eq!(
        (b["state"].as_str(), b["consecutive_failures"].as_u64()),
        (Some("closed"), Some(0))
    );

    control.set_status(502);
    for _ in 0..5 {
        assert_eq!(status(&node).await, 502);
    }
    let b = breaker(&node, "api").await;
    assert_eq!(b["state"], "open");
    assert_eq!(b["last_transition"]["reason"], "5 consecutive failures");
    assert_eq!(b["last_transition"]["from"], "closed");

    let before = upstream.hits();
    let answer = client::get(node.proxy, "a", "/").await.unwrap();
    assert_eq!(answer.status, 503);
    assert!(
        answer.elapsed < picket_tests::AT_ONCE,
        "refused in {:?}",
        answer.elapsed
    );
    assert_eq!(answer.headers["retry-after"], "1");
    assert_eq!(upstream.hits(), before, "nothing was sent upstream");
    let json = send(node.proxy, {
        let mut req = request(Method::GET, "a", "/", Default::default());
        req.headers_mut()
            .insert("accept", "application/json".parse().unwrap());
        req
    })
    .await
    .unwrap();
    assert_eq!(json.status, 503);
    assert_eq!(json.headers["content-type"], "application/json");
    let metrics = node.node().metrics().encode();
    assert!(
        metrics.contains("picket_breaker_state{route=\"api\",state=\"open\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("picket_breaker_transitions_total{route=\"api\",state=\"open\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("picket_breaker_refused_requests_total{route=\"api\"} 2"),
        "{metrics}"
    );
    node.stop().await;
}

#[tokio::test]
async fn a_thousand_500s_never_open_the_circuit() {
    let upstream = Upstream::start("buggy", Behaviour::Status(500)).await;
    let node = TestNode::start(&route("api", "/", &[upstream.addr], BREAKER));
    // One keep-alive connection, a thousand requests.
    let mut wire = picket_tests::wire::Wire::connect(node.proxy).await;
    for _ in 0..1000 {
        wire.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert_eq!(wire.response(false).await.unwrap().status, 500);
    }
    assert_eq!(breaker(&node, "api").await["state"], "closed");
    assert_eq!(upstream.hits(), 1000);
    node.stop().await;
}

/// Trips the circuit, waits out the cool-down, and sends 50 requests at
/// once while the upstream takes 300 ms to answer `trial_status`.
async fn trial(
    control: &Control,
    upstream: &Upstream,
    node: &TestNode,
    trial_status: u16,
    cooldown: Duration,
) -> Vec<u16> {
    control.set_status(502);
    for _ in 0..5 {
        assert_eq!(status(node).await, 502);
    }
    assert_eq!(breaker(node, "api").await["state"], "open");
    sleep(cooldown + Duration::from_millis(100)).await;
    let before = upstream.hits();
    control.set_status(trial_status);
    control.set_delay(Duration::from_millis(300));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let proxy = node.proxy;
            tokio::spawn(async move { client::get(proxy, "a", "/").await.unwrap().status.as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    assert_eq!(
        upstream.hits() - before,
        1,
        "exactly one trial reached the upstream"
    );
    control.set_delay(Duration::ZERO);
    statuses.sort();
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_cooldown_one_trial_decides_success() {
    let control = Control::new(502);
    let upstream = Upstream::start("api", Behaviour::Controlled(control.clone())).await;
    let node = TestNode::start(&route("api", "/", &[upstream.addr], BREAKER));
    let statuses = trial(&control, &upstream, &node, 200, Duration::from_secs(1)).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        49,
        "{statuses:?}"
    );
    let b = breaker(&node, "api").await;
    assert_eq!(b["state"], "closed");
    assert_eq!(b["last_transition"]["reason"], "trial request succeeded");
    for _ in 0..5 {
        assert_eq!(status(&node).await, 200, "requests flow again");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_cooldown_a_failed_trial_reopens_for_a_full_cooldown() {
    let control = Control::new(502);
    let upstream = Upstream::start("api", Behaviour::Controlled(control.clone())).await;
    let node = TestNode::start(&route("api", "/", &[upstream.addr], BREAKER_3S));
    let statuses = trial(&control, &upstream, &node, 502, Duration::from_secs(3)).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 502).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        49,
        "{statuses:?}"
    );
    let reopened = Instant::now();
    let b = breaker(&node, "api").await;
    assert_eq!(b["state"], "open");
    assert_eq!(b["last_transition"]["reason"], "trial request failed");
    // A full cool-down from the failed trial (3 s; end to end, a second
    // to spare: the cool-down's precision is the breaker's unit tests', on
    // an injected clock).
    assert!(b["time_left_ms"].as_u64().unwrap() > 2000, "{b}");
    let hits = upstream.hits();
    while reopened.elapsed() < Duration::from_secs(2) {
        assert_eq!(status(&node).await, 503);
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(upstream.hits(), hits);
    sleep_until(reopened + Duration::from_millis(3100)).await;
    control.set_status(200);
    assert_eq!(status(&node).await, 200, "the next trial");
    assert_eq!(breaker(&node, "api").await["state"], "closed");
    node.stop().await;
}

#[tokio::test]
async fn retries_that_give_the_client_its_answer_never_trip() {
    // The healthy replica first: the port `refused` frees is then never
    // its own.
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let refused = refused_addr().await;
    let breaker_on =
        "eject_for = \"1s\"\nbreaker = { enabled = true, failures = 2, cooldown = \"5s\" }";
    let node = TestNode::start(&route("api", "/", &[refused, healthy.addr], breaker_on));
    for _ in 0..100 {
        assert_eq!(status(&node).await, 200);
    }
    let b = breaker(&node, "api").await;
    assert_eq!(
        (b["state"].as_str(), b["consecutive_failures"].as_u64()),
        (Some("closed"), Some(0))
    );
    node.stop().await;
}

#[tokio::test]
async fn the_status_api_cannot_change_a_circuit() {
    let control = Control::new(502);
    let upstream = Upstream::start("api", Behaviour::Controlled(control.clone())).await;
    let node = TestNode::start(&route("api", "/", &[upstream.addr], BREAKER));
    for _ in 0..5 {
        assert_eq!(status(&node).await, 502);
    }
    let before = breaker(&node, "api").await;
    assert_eq!(before["state"], "open");
    // Every method on every path of the admin listener, bodies included.
    for method in [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
    ] {
        for path in [
            "/v1/routes",
            "/v1/routes/api",
            "/v1/routes/api/breaker",
            "/healthz",
            "/readyz",
            "/metrics",
            "/reset",
        ] {
            let body = bytes::Bytes::from_static(b"{\"state\":\"closed\"}");
            let answer = send(node.admin, request(method.clone(), "admin", path, body))
                .await
                .unwrap();
            if method != Method::GET {
                assert_eq!(answer.status, 405, "{method} {path}");
            }
        }
    }
    let after = breaker(&node, "api").await;
    assert_eq!(after["state"], "open");
    assert_eq!(after["last_transition"], before["last_transition"]);
    assert_eq!(status(&node).await, 503);
    node.stop().await;
}

#[tokio::test]
async fn a_disabled_breaker_shows_as_disabled() {
    let upstream = Upstream::start("api", Behaviour::Status(502)).await;
    let node = TestNode::start(&route("api", "/", &[upstream.addr], ""));
    for _ in 0..10 {
        assert_eq!(status(&node).await, 502);
    }
    let b = breaker(&node, "api").await;
    assert_eq!(
        (b["enabled"].as_bool(), b["state"].as_str()),
        (Some(false), Some("disabled"))
    );
    node.stop().await;
}
