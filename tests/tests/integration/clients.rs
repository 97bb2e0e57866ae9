//! Real clients, not only the project's own, work through the proxy:
//! curl over HTTP/1.1 and HTTP/2 (prior knowledge), and wrk, the load
//! generator of the benchmarks. (The WebSocket client is tungstenite's, in
//! `websocket.rs`.)

use std::process::Command;

use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::{has_program, require};

fn run(program: &str, args: &[String]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_http1_and_http2() {
    if !require("curl", has_program("curl")) {
        return;
    }
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    let url = format!("http://{}/hello?x=1", node.proxy);
    let format = "%{http_code} %{http_version}\n".to_string();
    for (flag, version) in [("--http1.1", "1.1"), ("--http2-prior-knowledge", "2")] {
        let args = vec![
            "-sS".into(),
            flag.into(),
            "-H".into(),
            "Host: curl.example.com".into(),
            "-w".into(),
            format.clone(),
            url.clone(),
        ];
        let out = tokio::task::spawn_blocking(move || run("curl", &args))
            .await
            .unwrap();
        assert!(out.starts_with("echo: GET /hello?x=1"), "{out}");
        assert!(out.trim_end().ends_with(&format!("200 {version}")), "{out}");
    }
    // A POST body, streamed.
    let args = vec![
        "-sS".into(),
        "--http2-prior-knowledge".into(),
        "--data-binary".into(),
        "0123456789".into(),
        url.clone(),
    ];
    let out = tokio::task::spawn_blocking(move || run("curl", &args))
        .await
        .unwrap();
    assert!(out.contains("POST /hello?x=1 (10 bytes)"), "{out}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrk_load_gets_only_successes() {
    if !require("wrk", has_program("wrk")) {
        return;
    }
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let node = TestNode::start(&route("echo", "/", &[upstream.addr], ""));
    let args: Vec<String> = ["-t1", "-c16", "-d2s", &format!("http://{}/", node.proxy)]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = tokio::task::spawn_blocking(move || run("wrk", &args))
        .await
        .unwrap();
    let requests: u64 = out
        .lines()
        .find_map(|l| {
            l.trim()
                .split_once(" requests in ")
                .map(|(n, _)| n.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    assert!(requests > 100, "{out}");
    assert!(!out.contains("Non-2xx"), "{out}");
    assert!(!out.contains("Socket errors"), "{out}");
    // wrk counts answers it read before its deadline; up to one request per
    // connection was still in flight then.
    let hits = upstream.hits() as u64;
    assert!(
        (requests..=requests + 16).contains(&hits),
        "{hits} hits for {requests} requests"
    );
    node.stop().await;
}
