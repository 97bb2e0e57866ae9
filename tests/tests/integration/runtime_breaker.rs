//! The breaker in front of each runtime API endpoint, seen from outside:
//! `picket run` processes against a fake engine that drops every
//! connection, counting the connections it gets. While the breaker is open
//! the node makes none; one log line says it opened; each environment knob
//! moves it.

use std::time::Duration;

use picket_tests::binaries;
use picket_tests::fake_docker::{FakeDocker, Mode};
use picket_tests::node::eventually;
use picket_tests::process::NodeProcess;
use picket_tests::upstream::{Behaviour, Upstream};

/// A node following `engine`, route `api` on port `port`.
fn body(engine: &FakeDocker, port: u16, breaker: &str) -> String {
    format!(
        "[runtime]\nkind = \"docker\"\nendpoint = \"{}\"\n{breaker}\n\
         [[route]]\nname = \"api\"\nservice = \"t/api\"\nport = {port}\n",
        engine.url()
    )
}

/// An engine in `mode`, and a `picket run` process following it with
/// `breaker` in its file and `env` set, once it answers `/healthz`.
async fn node_against(
    mode: Mode,
    breaker: &str,
    env: &[(&str, &str)],
) -> (tempfile::TempDir, FakeDocker, NodeProcess) {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeDocker::start().await;
    engine.set_mode(mode);
    let node = NodeProcess::start_alone(
        &binaries::picket(),
        dir.path(),
        "n1",
        &body(&engine, 9, breaker),
        env,
    );
    node.ready(Duration::from_secs(20)).await;
    (dir, engine, node)
}

fn opened_lines(node: &NodeProcess) -> Vec<String> {
    node.log_text()
        .lines()
        .filter(|l| l.contains("runtime API breaker open"))
        .map(str::to_string)
        .collect()
}

/// Waits until the node has logged that the breaker opened; returns the
/// connections the engine had got by then.
async fn opened(node: &NodeProcess, engine: &FakeDocker, within: Duration) -> usize {
    eventually("the breaker opens", within, || {
        !opened_lines(node).is_empty()
    })
    .await;
    engine.connections()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_after_two_failures_makes_no_connection_while_open_and_closes_on_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeDocker::start().await;
    engine.set_mode(Mode::Drops);
    let replica = Upstream::start("api-1", Behaviour::Echo).await;
    engine.run("api-1", "api", true, "api:1");
    let node = NodeProcess::start_alone(
        &binaries::picket(),
        dir.path(),
        "n1",
        &body(
            &engine,
            replica.addr.port(),
            "breaker = { cooldown = \"3s\" }",
        ),
        &[],
    );
    node.ready(Duration::from_secs(20)).await;
    let at_open = opened(&node, &engine, Duration::from_secs(5)).await;
    assert_eq!(at_open, 2, "the default threshold: two failures");
    let line = &opened_lines(&node)[0];
    assert!(
        line.contains(&engine.url()) && line.contains("failure="),
        "the line names the endpoint and the failure: {line}"
    );

    // Open: no DNS, no connect, no probe for the cool-down.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(engine.connections(), 2, "no connection while open");
    // The cool-down over, one trial; it fails, and the breaker opens
    // again, without a second line.
    eventually(
        "one trial after the cool-down",
        Duration::from_secs(3),
        || engine.connections() == 3,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(engine.connections(), 3, "one trial, then open again");
    assert_eq!(
        opened_lines(&node).len(),
        1,
        "one line per trip, not per retry"
    );
    let trips = format!(
        "picket_runtime_breaker_trips_total{{endpoint=\"{}\"}}",
        engine.url()
    );
    assert_eq!(
        node.metric(&trips).await,
        Some(2.0),
        "both openings counted"
    );

    // The engine answers: the next trial closes the breaker, and the
    // route gets its replica.
    engine.set_mode(Mode::Answers);
    eventually("the breaker closes", Duration::from_secs(5), || {
        node.log_text()
            .contains("runtime API answers again: breaker closed")
    })
    .await;
    let state = node
        .metric(&format!(
            "picket_runtime_breaker_state{{endpoint=\"{}\",state=\"closed\"}}",
            engine.url()
        ))
        .await;
    assert_eq!(state, Some(1.0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let answer = picket_tests::client::get(node.proxy, "a", "/").await;
        if answer.as_ref().is_ok_and(|a| a.status == 200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the route never reached its replica: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failures_knob() {
    let (_dir, engine, node) = node_against(
        Mode::Drops,
        "breaker = { failures = 2, cooldown = \"30s\" }",
        &[("PICKET_RUNTIME_BREAKER_FAILURES", "4")],
    )
    .await;
    // Back-off 250 ms, 500 ms, 1 s between the four.
    let at_open = opened(&node, &engine, Duration::from_secs(6)).await;
    assert_eq!(at_open, 4, "the environment wins over the file");
    assert!(
        opened_lines(&node)[0].contains("4 consecutive failures"),
        "{}",
        opened_lines(&node)[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cooldown_knob() {
    let (_dir, engine, node) = node_against(
        Mode::Drops,
        "breaker = { cooldown = \"5m\" }",
        &[("PICKET_RUNTIME_BREAKER_COOLDOWN", "1s")],
    )
    .await;
    let at_open = opened(&node, &engine, Duration::from_secs(5)).await;
    assert_eq!(at_open, 2);
    eventually(
        "a trial a second later, not five minutes",
        Duration::from_millis(2500),
        || engine.connections() > at_open,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disabled_knob() {
    let (_dir, engine, node) = node_against(
        Mode::Drops,
        "breaker = { enabled = true }",
        &[("PICKET_RUNTIME_BREAKER_DISABLED", "true")],
    )
    .await;
    // Back-off alone: 250 ms, 500 ms, 1 s, 2 s.
    eventually("calls past the failures", Duration::from_secs(6), || {
        engine.connections() >= 5
    })
    .await;
    assert!(opened_lines(&node).is_empty(), "{}", node.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_refuses_is_named_once_with_the_missing_right() {
    let (_dir, engine, node) =
        node_against(Mode::Forbids, "breaker = { cooldown = \"1s\" }", &[]).await;
    // Tried again every cool-down; said once.
    eventually("three tries", Duration::from_secs(6), || {
        engine.requests("/containers/json") >= 3
    })
    .await;
    let log = node.log_text();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refuses (403)"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("/containers/json") && said[0].contains(&engine.url()),
        "which right, and where: {}",
        said[0]
    );
    assert!(opened_lines(&node).is_empty(), "a 403 is an answer: {log}");
}
