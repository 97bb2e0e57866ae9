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
