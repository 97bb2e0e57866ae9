//! `picket-tui`'s command line: trust is spelled out, and refused when it
//! does not fit the address.

// Processes and wall time only: no runtime whose clock could be paused.
#![allow(clippy::disallowed_types, clippy::expect_used)]

use std::process::{Command, Output};

const TUI: &str = env!("CARGO_BIN_EXE_picket-tui");

fn run(args: &[&str]) -> Output {
    Command::new(TUI)
        .args(args)
        .output()
        .expect("picket-tui runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_way_to_trust_the_node_is_required() {
    let output = run(&["127.0.0.1:9901"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--pin"), "{}", stderr(&output));
}

#[test]
fn insecure_is_refused_off_loopback() {
    let output = run(&["--insecure", "192.0.2.10:9901"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("--insecure is for a loopback demo only"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_pin_must_be_a_sha256_fingerprint() {
    let output = run(&["--pin", "abc", "127.0.0.1:9901"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is not a SHA-256 fingerprint"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn json_needs_once_and_a_ca_file_must_exist() {
    let output = run(&["--insecure", "--json", "127.0.0.1:9901"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let output = run(&["--ca", "/nonexistent/ca.pem", "127.0.0.1:9901"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("/nonexistent/ca.pem"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn once_against_nothing_fails_in_bounded_time() {
    // Nothing listens on this port: the connection attempt gives up.
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    drop(socket);
    let started = std::time::Instant::now();
    let output = run(&["--insecure", "--once", "--json", &addr]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("connecting"),
        "{}",
        stderr(&output)
    );
    // Pointed at a TCP port, say, it says what the feed is and where.
    assert!(
        stderr(&output).contains("the feed is QUIC over UDP"),
        "{}",
        stderr(&output)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
