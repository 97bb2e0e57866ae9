//! The harness of Picket's integration tests: nodes started in-process on
//! port 0, test upstreams with the behaviours the tests need, hosts in
//! network namespaces that drop packets, and a small HTTP client that
//! measures how long each answer took.
//!
//! Tests that need something the machine may lack (root for namespaces, an
//! external client such as curl or wrk) call [`require`]: with `CI=true` a
//! missing requirement fails the test; elsewhere it is skipped, loudly.

pub mod binaries;
pub mod bodies;
pub mod client;
pub mod cluster;
pub mod docker;
pub mod fake_docker;
pub mod fake_kube;
pub mod faults;
pub mod forward_proxy;
pub mod grpc;
pub mod logs;
pub mod netns;
pub mod node;
pub mod pebble;
pub mod ports;
pub mod process;
pub mod real_clients;
pub mod recorder;
pub mod sources;
pub mod tls;
pub use picket_test_upstream as upstream;
pub mod wire;

/// The bound of an answer that must not wait on anything (a hanging
/// replica, a runtime out of reach): far over an answer from memory on a
/// loaded machine, far under every wait the tests set up. Functional tests
/// assert behaviour against it and print their latency figures; the
/// figures are kept in docs/benchmarks.md, not asserted.
pub const AT_ONCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the test runs in CI, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Checks a requirement of a test. Returns `false` (after saying so on
/// stderr) when the test should be skipped; panics in CI.
pub fn require(what: &str, available: bool) -> bool {
    if available {
        return true;
    }
    assert!(
        !in_ci(),
        "CI=true and this test needs {what}, which is missing"
    );
    eprintln!("SKIPPED: this test needs {what}, which is missing here (it would fail in CI)");
    false
}

/// Whether a program is on PATH.
pub fn has_program(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

/// The cluster size a scale benchmark was asked for: its first two numeric
/// arguments, nodes then routes, each defaulting to the given value.
pub fn bench_size(nodes: usize, routes: usize) -> (usize, usize) {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    (
        args.first().copied().unwrap_or(nodes),
        args.get(1).copied().unwrap_or(routes),
    )
}
