//! What the circuit breaker costs a request on the proxy path: admission
//! and recording of a success through a closed circuit, measured over
//! millions of requests. Run by hand:
//!
//!   cargo bench -p picket-tests --features bench --bench breaker
//!
//! Prints nanoseconds per request, best of five runs, beside an empty loop.

use std::hint::black_box;
use std::time::Duration;

use picket::breaker::{Admission, Machine, Outcome, Settings};
use picket::metrics::Metrics;
use picket::proxy::Breaker;

const REQUESTS: u32 = 10_000_000;

#[allow(clippy::disallowed_types)] // wall-clock timing of a benchmark
fn best_of_five(mut run: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            run();
            start.elapsed().as_nanos() as f64 / f64::from(REQUESTS)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let settings = Settings {
        failures: 5,
        cooldown: Duration::from_secs(15),
    };
    let metrics = Metrics::new();
    let changes = std::sync::Arc::new(picket::changes::Changes::default());
    let circuit = Breaker::new("bench", "n1", settings, metrics.breaker("bench"), changes);

    let empty = best_of_five(|| {
        for i in 0..REQUESTS {
            black_box(i);
        }
    });
    let closed = best_of_five(|| {
        for _ in 0..REQUESTS {
            black_box(circuit.bench_request());
        }
    });
    // The pure machine alone, locked by nobody: what the atomics save.
    let mut machine = Machine::new(settings);
    let now = tokio::time::Instant::now();
    let pure = best_of_five(|| {
        for _ in 0..REQUESTS {
            let (admission, _) = machine.admit(now);
            black_box(machine.record(black_box(admission), Outcome::Success, now));
        }
    });
    assert!(matches!(machine.admit(now).0, Admission::Pass));
    let threads = 2;
    let contended = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    best_of_five(|| {
                        for _ in 0..REQUESTS {
                            black_box(circuit.bench_request());
                        }
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(f64::NAN))
            .fold(0.0, f64::max)
    });
    println!("breaker cost per request, closed circuit, {REQUESTS} requests, best of 5:");
    println!("  empty loop                         {empty:6.2} ns");
    println!("  admit + record success (proxy path) {closed:6.2} ns");
    println!("  same, {threads} threads on one route        {contended:6.2} ns");
    println!("  pure state machine, gate + record   {pure:6.2} ns");
}
