//! A route's circuit breaker at the edge: the pure machine of
//! [`crate::breaker`] behind a mutex, with atomics that let a request
//! through a closed circuit without taking it.
//!
//! Only the proxy can admit a request and record its outcome (the methods
//! are private to this module tree); everything else, the status API
//! included, reads a [`BreakerSnapshot`].

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::{Admission, BreakerState, Machine, Outcome, Settings, State, Transition};
use crate::changes::Changes;
use crate::metrics::BreakerMetrics;

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

fn code(phase: BreakerState) -> u8 {
    match phase {
        // Never a machine's: a route without a breaker has none.
        BreakerState::Closed | BreakerState::Disabled => CLOSED,
        BreakerState::Open => OPEN,
        BreakerState::HalfOpen => HALF_OPEN,
    }
}

/// A change of state and when it happened on the wall clock.
#[derive(Debug, Clone, Copy)]
struct Stamped {
    transition: Transition,
    unix_ms: u64,
}

#[derive(Debug)]
struct Inner {
    machine: Machine,
    last: Option<Stamped>,
}

/// The breaker of one route on this node.
#[derive(Debug)]
pub struct Breaker {
    route: String,
    node: String,
    inner: Mutex<Inner>,
    /// Mirrors of the machine for the data path: its phase, and its count
    /// of consecutive failures while closed.
    phase: AtomicU8,
    failures: AtomicU32,
    metrics: BreakerMetrics,
    /// Woken on every transition: the route's verdict may change.
    changes: Arc<Changes>,
}

/// Admission of one request; its outcome is recorded through it. Dropped
/// without an outcome, the request counts as abandoned.
#[derive(Debug)]
pub(in crate::proxy) struct Ticket<'a> {
    breaker: &'a Breaker,
    admission: Admission,
    recorded: bool,
}

/// What the status API shows of a breaker.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSnapshot {
    pub phase: BreakerState,
    pub consecutive_failures: u32,
    pub settings: Settings,
    /// Until an open circuit lets its trial through.
    pub time_left: Duration,
    pub last_transition: Option<TransitionSnapshot>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TransitionSnapshot {
    pub from: BreakerState,
    pub to: BreakerState,
    pub reason: String,
    pub unix_ms: u64,
}

impl Breaker {
    pub fn new(
        route: &str,
        node: &str,
        settings: Settings,
        metrics: BreakerMetrics,
        changes: Arc<Changes>,
    ) -> Breaker {
        // Closed, and only closed: the gauges of a route rebuilt by a
        // reload may still say what its old circuit was.
        for (i, state) in metrics.state.iter().enumerate() {
            state.set(i64::from(i == usize::from(CLOSED)));
        }
        Breaker {
            route: route.to_string(),
            node: node.to_string(),
            inner: Mutex::new(Inner {
                machine: Machine::new(settings),
                last: None,
            }),
            phase: AtomicU8::new(CLOSED),
            failures: AtomicU32::new(0),
            metrics,
            changes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How this breaker trips and recovers.
    pub fn settings(&self) -> Settings {
        self.lock().machine.settings()
    }

    /// Lets a request through, or refuses it with the time left.
    pub(in crate::proxy) fn admit(&self) -> Result<Ticket<'_>, Duration> {
        if self.phase.load(Ordering::Acquire) == CLOSED {
            return Ok(Ticket {
                breaker: self,
                admission: Admission::Pass,
                recorded: false,
            });
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let (admission, transition) = inner.machine.admit(now);
        self.apply(&mut inner, transition);
        drop(inner);
        match admission {
            Admission::Refuse { retry_after } => {
                self.metrics.refused.inc();
                Err(retry_after)
            }
            admission => Ok(Ticket {
                breaker: self,
                admission,
                recorded: false,
            }),
        }
    }

    /// A health check of the route was answered: an open circuit past its
    /// cool-down closes without waiting for a client.
    pub fn check_answered(&self) {
        if self.phase.load(Ordering::Acquire) == CLOSED {
            return;
        }
        let mut inner = self.lock();
        let transition = inner.machine.check_answered(Instant::now());
        self.apply(&mut inner, transition);
    }

    fn record(&self, admission: Admission, outcome: Outcome) {
        // A success through a closed circuit with no failures counted
        // changes nothing: the common case takes no lock.
        if admission == Admission::Pass
            && outcome == Outcome::Success
            && self.phase.load(Ordering::Acquire) == CLOSED
            && self.failures.load(Ordering::Acquire) == 0
        {
            return;
        }
        let mut inner = self.lock();
        let transition = inner.machine.record(admission, outcome, Instant::now());
        self.apply(&mut inner, transition);
    }

    /// Carries out what the machine decided: mirrors, metrics, one log line.
    fn apply(&self, inner: &mut Inner, transition: Option<Transition>) {
        let failures = match inner.machine.state() {
            State::Closed { failures } => failures,
            _ => 0,
        };
        self.failures.store(failures, Ordering::Release);
        let Some(transition) = transition else { return };
        self.phase.store(code(transition.to), Ordering::Release);
        self.changes.signal();
        let unix_ms = crate::clock::now_unix_ms();
        inner.last = Some(Stamped {
            transition,
            unix_ms,
        });
        let to = usize::from(code(transition.to));
        self.metrics.transitions[to].inc();
        for (i, gauge) in self.metrics.state.iter().enumerate() {
            gauge.set(i64::from(i == to));
        }
        let settings = inner.machine.settings();
        let (route, node, reason) = (self.route.as_str(), self.node.as_str(), transition.reason);
        match transition.to {
            BreakerState::Open => tracing::warn!(
                route,
                node,
                %reason,
                from = %transition.from,
                cooldown = %humantime::format_duration(settings.cooldown),
                "circuit opened"
            ),
            BreakerState::HalfOpen => tracing::info!(route, node, %reason, "circuit half-open"),
            BreakerState::Closed | BreakerState::Disabled => {
                tracing::info!(route, node, %reason, "circuit closed")
            }
        }
    }

    /// The circuit as the status API shows it.
    pub fn view(&self) -> BreakerSnapshot {
        let now = Instant::now();
        let inner = self.lock();
        let state = inner.machine.state();
        BreakerSnapshot {
            phase: state.phase(),
            consecutive_failures: match state {
                State::Closed { failures } => failures,
                _ => 0,
            },
            settings: inner.machine.settings(),
            time_left: match state {
                State::Open { until } => until.saturating_duration_since(now),
                _ => Duration::ZERO,
            },
            last_transition: inner.last.map(|s| TransitionSnapshot {
                from: s.transition.from,
                to: s.transition.to,
                reason: s.transition.reason.to_string(),
                unix_ms: s.unix_ms,
            }),
        }
    }
}

#[cfg(feature = "bench")]
impl Breaker {
    /// One request through a closed circuit, admitted and recorded as a
    /// success: the path every proxied request takes. Compiled only for
    /// benchmarks (`--features bench`).
    pub fn bench_request(&self) -> bool {
        match self.admit() {
            Ok(ticket) => {
                ticket.record(Outcome::Success);
                true
            }
            Err(_) => false,
        }
    }
}

impl Ticket<'_> {
    pub(in crate::proxy) fn record(mut self, outcome: Outcome) {
        self.recorded = true;
        self.breaker.record(self.admission, outcome);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.breaker.record(self.admission, Outcome::Abandoned);
        }
    }
}
