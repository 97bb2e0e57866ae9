//! A log sink for tests that count what a node logged (a tracing
//! subscriber's writer).

pub use picket::testing::Captured;

/// A runtime whose every thread logs to `captured` (at `filter`), and to
/// nothing else: a test that counts what its node logged sees its own
/// node's lines only, though other tests run nodes in the same process.
/// Hold the guard while the runtime runs: it gives the calling thread,
/// which runs `block_on`, the same subscriber.
pub fn runtime(
    captured: &Captured,
    filter: &str,
) -> (tokio::runtime::Runtime, tracing::dispatcher::DefaultGuard) {
    let writer = captured.clone();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .fmt_fields(picket::logging::EscapedFields)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let on_thread = dispatch.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            // For the thread's life, which ends with the runtime's.
            std::mem::forget(tracing::dispatcher::set_default(&on_thread));
        })
        .build()
        .expect("a runtime");
    (runtime, tracing::dispatcher::set_default(&dispatch))
}

/// A node configuration with an access log at `log` in `format` (`json`
/// or `combined`), then `routes`.
pub fn with_access_log(log: &std::path::Path, format: &str, routes: &str) -> String {
    format!(
        "[node]\naccess_log = \"{}\"\naccess_log_format = \"{format}\"\n\n{routes}",
        log.display()
    )
}

/// The JSON access log's lines at `log`, once there are at least `n`
/// (within 10 s).
pub async fn access_lines(log: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let read = || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect::<Vec<serde_json::Value>>()
    };
    crate::node::eventually(
        "the access log lines",
        std::time::Duration::from_secs(10),
        || read().len() >= n,
    )
    .await;
    read()
}
