//! gRPC through a node, with grpcio at both ends (h2c to the replicas):
//! the four kinds of call with their status codes and trailers intact,
//! the node's own UNAVAILABLE and DEADLINE_EXCEEDED, UNAVAILABLE from one
//! replica retried on another, and the gRPC health check ejecting a
//! replica that is not SERVING.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use picket_tests::grpc::{self, GrpcServer};
use picket_tests::node::{TestNode, route};
use picket_tests::require;
use serde_json::{Value, json};

const OK: i64 = 0;
const DEADLINE_EXCEEDED: i64 = 4;
const NOT_FOUND: i64 = 5;
const INTERNAL: i64 = 13;
const UNIMPLEMENTED: i64 = 12;
const UNAVAILABLE: i64 = 14;

fn python() -> Option<PathBuf> {
    let python = grpc::python();
    require("grpcio (tests/run.sh installs it)", python.is_some()).then_some(python?)
}

async fn calls(python: &Path, target: SocketAddr, specs: Value) -> Vec<Value> {
    let python = python.to_path_buf();
    tokio::task::spawn_blocking(move || grpc::calls(&python, target, &specs))
        .await
        .expect("the client ran")
}

/// `global` lines, then a route over h2c to `replica` whose first-answer
/// bound is its shortest, 1 s.
fn bounded_route(replica: SocketAddr, global: &str) -> String {
    format!(
        "{global}{}",
        route(
            "grpc",
            "/",
            &[replica],
            "protocol = \"h2c\"\nfirst_answer_timeout = \"1s\"",
        )
    )
}

fn code(result: &Value) -> i64 {
    result["code"].as_i64().unwrap_or(-1)
}

fn answers(result: &Value) -> Vec<&str> {
    result["answers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn all_four_kinds_of_call_pass_with_their_status_and_trailers() {
    let Some(python) = python() else { return };
    let server = GrpcServer::start(&python, "a", &[]);
    let node = TestNode::start(&route("grpc", "/", &[server.addr], "protocol = \"h2c\""));
    let results = calls(
        &python,
        node.proxy,
        json!([
            {"kind": "Unary", "request": "hello"},
            {"kind": "Server", "request": "5"},
            {"kind": "Client", "requests": ["x", "y", "z"]},
            {"kind": "Bidi", "requests": ["1", "2", "3", "4"]},
            {"kind": "Unary", "request": "status:5"},
            {"kind": "Unary", "request": "status:13"},
        ]),
    )
    .await;
    let expected: [(i64, Vec<&str>); 4] = [
        (OK, vec!["a:hello"]),
        (OK, vec!["a:0", "a:1", "a:2", "a:3", "a:4"]),
        (OK, vec!["a:x+y+z"]),
        (OK, vec!["a:1", "a:2", "a:3", "a:4"]),
    ];
    for (result, (status, want)) in results.iter().zip(expected) {
        assert_eq!(code(result), status, "{result}");
        assert_eq!(answers(result), want, "{result}");
        assert_eq!(result["trailing"]["x-served-by"], "a", "{result}");
        // The server's digest of what it sent, in a binary trailer,
        // matches what the client got.
        assert_eq!(result["intact"], true, "{result}");
    }
    // A service's own errors are answers: their code, message and
    // trailers pass as they are.
    for (result, status) in results[4..].iter().zip([NOT_FOUND, INTERNAL]) {
        assert_eq!(code(result), status, "{result}");
        assert_eq!(result["details"], "asked to fail", "{result}");
        assert_eq!(result["trailing"]["x-fail"], status.to_string(), "{result}");
    }
    node.stop().await;
}

#[tokio::test]
async fn the_node_says_unavailable_when_no_replica_answers() {
    let Some(python) = python() else { return };
    let closed = picket_tests::ports::refusing();
    let node = TestNode::start(&route("grpc", "/", &[closed.addr], "protocol = \"h2c\""));
    let results = calls(
        &python,
        node.proxy,
        json!([
            {"kind": "Unary", "request": "1"},
            {"kind": "Bidi", "requests": ["1"]},
            {"kind": "Server", "request": "1"},
        ]),
    )
    .await;
    for result in &results {
        assert_eq!(code(result), UNAVAILABLE, "{result}");
        assert!(
            result["details"]
                .as_str()
                .is_some_and(|d| d.contains("connect")),
            "the node's own reason: {result}"
        );
    }
    node.stop().await;

    // No route for the call: UNIMPLEMENTED, not an HTML 404.
    let node = TestNode::start(&route(
        "other",
        "/other",
        &[closed.addr],
        "protocol = \"h2c\"",
    ));
    let results = calls(
        &python,
        node.proxy,
        json!([{"kind": "Unary", "request": "1"}]),
    )
    .await;
    assert_eq!(code(&results[0]), UNIMPLEMENTED, "{}", results[0]);
    node.stop().await;
}

#[tokio::test]
async fn the_node_says_deadline_exceeded_at_the_first_answer_bound() {
    let Some(python) = python() else { return };
    let server = GrpcServer::start(&python, "slow", &[]);
    let node = TestNode::start(&bounded_route(server.addr, ""));
    let results = calls(
        &python,
        node.proxy,
        json!([
            {"kind": "Unary", "request": "sleep:3000"},
            // Within the bound: answered.
            {"kind": "Unary", "request": "sleep:100"},
        ]),
    )
    .await;
    let slow = &results[0];
    assert_eq!(code(slow), DEADLINE_EXCEEDED, "{slow}");
    assert!(
        slow["details"]
            .as_str()
            .is_some_and(|d| d.contains("no response head within 1s")),
        "the node's own reason: {slow}"
    );
    let seconds = slow["seconds"].as_f64().unwrap_or(f64::MAX);
    assert!(seconds < 2.5, "answered after {seconds} s");
    assert_eq!(code(&results[1]), OK, "{}", results[1]);
    node.stop().await;
}

#[tokio::test]
async fn unavailable_from_one_replica_is_retried_on_another() {
    let Some(python) = python() else { return };
    let down = GrpcServer::start(&python, "down", &["--unavailable"]);
    let up = GrpcServer::start(&python, "up", &[]);
    let node = TestNode::start(&route(
        "grpc",
        "/",
        &[down.addr, up.addr],
        "protocol = \"h2c\"\ntries = 2\nconsecutive_gateway_errors = 100",
    ));
    let specs: Vec<Value> = (0..6)
        .map(|i| json!({"kind": "Unary", "request": i.to_string()}))
        .chain([
            json!({"kind": "Client", "requests": ["a", "b"]}),
            json!({"kind": "Server", "request": "2"}),
        ])
        .collect();
    let results = calls(&python, node.proxy, Value::Array(specs)).await;
    for result in &results {
        assert_eq!(code(result), OK, "{result}");
        assert_eq!(result["trailing"]["x-served-by"], "up", "{result}");
    }
    let metrics = picket_tests::client::get(node.admin, "admin", "/metrics")
        .await
        .unwrap()
        .text();
    let retried = metrics
        .lines()
        .find(|l| l.starts_with("picket_retries_total{route=\"grpc\",reason=\"answer\"}"))
        .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        retried >= 3.0,
        "calls refused by `down` moved on: {retried}\n{metrics}"
    );
    node.stop().await;
}

#[tokio::test]
async fn the_grpc_health_check_ejects_a_replica_that_is_not_serving() {
    let Some(python) = python() else { return };
    let a = GrpcServer::start(&python, "a", &[]);
    let b = GrpcServer::start(&python, "b", &["--not-serving"]);
    let config = format!(
        "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"1s\"\n{}",
        route(
            "grpc",
            "/",
            &[a.addr, b.addr],
            "protocol = \"h2c\"\ncheck = \"grpc\"\ngrpc_service = \"picket.test.Echo\"",
        )
    );
    let node = TestNode::start(&config);
    let served_by = |results: &[Value]| -> Vec<String> {
        results
            .iter()
            .map(|r| {
                r["trailing"]["x-served-by"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    };
    let unary = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| json!({"kind": "Unary", "request": i.to_string()}))
                .collect(),
        )
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let results = calls(&python, node.proxy, unary(6)).await;
    assert_eq!(served_by(&results), vec!["a"; 6], "{results:?}");

    // Turned around: `a` says NOT_SERVING, `b` SERVING.
    let flip = |target, state: &str| {
        (
            target,
            json!([{"kind": "Unary", "request": format!("health:{state}")}]),
        )
    };
    for (target, specs) in [flip(a.addr, "NOT_SERVING"), flip(b.addr, "SERVING")] {
        let result = calls(&python, target, specs).await;
        assert_eq!(code(&result[0]), OK, "{result:?}");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let results = calls(&python, node.proxy, unary(6)).await;
        if served_by(&results) == vec!["b"; 6] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still served by a NOT_SERVING replica: {results:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    node.stop().await;
}

#[tokio::test]
async fn a_stream_that_has_started_is_never_cut_by_a_bound() {
    let Some(python) = python() else { return };
    let server = GrpcServer::start(&python, "s", &[]);
    // Both bounds at their shortest; the streams pause for longer.
    let node = TestNode::start(&bounded_route(
        server.addr,
        "[global]\nbody_timeout = \"1s\"\n",
    ));
    let results = calls(
        &python,
        node.proxy,
        json!([
            // Answers 1.5 s apart: past the first-answer bound.
            {"kind": "Server", "request": "3:1500"},
            // The client's messages 1.5 s apart: past the body bound.
            {"kind": "Bidi", "requests": ["1", "2", "3"], "pause_ms": 1500},
        ]),
    )
    .await;
    assert_eq!(code(&results[0]), OK, "{}", results[0]);
    assert_eq!(answers(&results[0]), ["s:0", "s:1", "s:2"]);
    assert_eq!(code(&results[1]), OK, "{}", results[1]);
    assert_eq!(answers(&results[1]), ["s:1", "s:2", "s:3"]);
    for result in &results {
        assert_eq!(result["intact"], true, "{result}");
        let seconds = result["seconds"].as_f64().unwrap_or(0.0);
        assert!(seconds > 2.9, "the pauses happened: {result}");
    }
    node.stop().await;
}

#[tokio::test]
async fn max_body_holds_for_every_kind_of_call_and_never_stalls_a_stream() {
    let Some(python) = python() else { return };
    let server = GrpcServer::start(&python, "s", &[]);
    let node = TestNode::start(&route(
        "grpc",
        "/",
        &[server.addr],
        "protocol = \"h2c\"\nmax_body = 200\n",
    ));
    let long = "x".repeat(60);
    let results = calls(
        &python,
        node.proxy,
        json!([
            // Within the limit: a bidirectional stream is not held until
            // its requests end (it would never end).
            {"kind": "Bidi", "requests": ["1", "2", "3"], "timeout": 10},
            // Past it in one message: refused as the node's own answer.
            {"kind": "Unary", "request": "y".repeat(300)},
            // Past it over a stream that has started: the rest is not
            // forwarded and the call fails.
            {"kind": "Bidi", "requests": [long, long, long, long, long], "timeout": 10},
        ]),
    )
    .await;
    assert_eq!(code(&results[0]), OK, "{}", results[0]);
    assert_eq!(answers(&results[0]), ["s:1", "s:2", "s:3"]);
    assert_eq!(code(&results[1]), 8, "RESOURCE_EXHAUSTED: {}", results[1]);
    assert_ne!(code(&results[2]), OK, "{}", results[2]);
    assert!(
        answers(&results[2]).len() < 5,
        "the stream ended before its last message: {}",
        results[2]
    );
    node.stop().await;
}
