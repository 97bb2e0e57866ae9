//! The circuit breaker of one route on one node, as a pure state machine:
//! it takes `now` and the outcome of each proxied request, and answers
//! whether the next request may go upstream.
//!
//! ## Trip conditions
//! `failures` consecutive failures open the circuit. A failure is a
//! transport error or a 502/503/504 (the gateway's or the upstream's),
//! counted once per client request, after its retries. Any other answer —
//! a 500 included: a service answering 500 is up and has a bug — is a
//! success and resets the count.
//!
//! ## Open
//! Every request is refused at once, with the time left, until `cooldown`
//! has passed since the circuit opened.
//!
//! ## Recovery
//! The first request after the cool-down is the trial ([`Admission::Trial`]);
//! while it is under way every other request is refused. Its success closes
//! the circuit; its failure opens it again for a full cool-down. A trial
//! abandoned without an outcome (its client went away) opens the circuit
//! with no cool-down left, so the next request is the next trial.
//!
//! A route with an HTTP or gRPC check needs no client for it: a check its
//! replica answered after the cool-down closes the circuit
//! ([`Machine::check_answered`]), as a trial request would.
//!
//! ## Invariants
//! - Only outcomes of requests this node proxied, and its own checks the
//!   replicas answered, move the machine: there is no other input.
//! - Outcomes of requests admitted before the circuit opened are ignored
//!   once it is open or half-open; only the trial decides.
//! - Each change of state is returned once, for one log line.

use std::fmt;
use std::time::Duration;

pub use picket_proto::BreakerState;
use tokio::time::Instant;

/// How a breaker trips and recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Consecutive failures that open the circuit.
    pub failures: u32,
    /// How long an open circuit refuses before it lets a trial through.
    pub cooldown: Duration,
}

/// Where a circuit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

impl State {
    /// Its name: the one every report of a circuit uses (never
    /// `Disabled`: a disabled breaker has no machine).
    pub fn phase(&self) -> BreakerState {
        match self {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen => BreakerState::HalfOpen,
        }
    }
}

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go upstream.
    Pass,
    /// Go upstream as the one trial of a half-open circuit.
    Trial,
    /// Answer 503 at once; `retry_after` is the cool-down left.
    Refuse { retry_after: Duration },
}

/// What became of a request that went upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    /// No outcome: the request ended for reasons of its client.
    Abandoned,
}

/// Why a circuit changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `n` consecutive failures.
    Failures(u32),
    CooldownOver,
    /// A health check was answered after the cool-down.
    CheckAnswered,
    TrialSucceeded,
    TrialFailed,
    TrialAbandoned,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Failures(n) => write!(f, "{n} consecutive failures"),
            Reason::CooldownOver => f.write_str("cool-down over: one trial request"),
            Reason::CheckAnswered => f.write_str("cool-down over and a health check answered"),
            Reason::TrialSucceeded => f.write_str("trial request succeeded"),
            Reason::TrialFailed => f.write_str("trial request failed"),
            Reason::TrialAbandoned => f.write_str("trial request abandoned by its client"),
        }
    }
}

/// One change of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: BreakerState,
    pub to: BreakerState,
    pub reason: Reason,
    pub at: Instant,
}

/// A route's circuit breaker.
#[derive(Debug, Clone)]
pub struct Machine {
    settings: Settings,
    state: State,
}

impl Machine {
    pub fn new(settings: Settings) -> Machine {
        Machine {
            settings,
            state: State::Closed { failures: 0 },
        }
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    pub fn state(&self) -> State {
        self.state
    }

    fn go(&mut self, to: State, reason: Reason, now: Instant) -> Transition {
        let transition = Transition {
            from: self.state.phase(),
            to: to.phase(),
            reason,
            at: now,
        };
        self.state = to;
        transition
    }

    /// Whether a request may go upstream at `now`. Moving an open circuit
    /// whose cool-down is over to half-open is a change of state.
    pub fn admit(&mut self, now: Instant) -> (Admission, Option<Transition>) {
        match self.state {
            State::Closed { .. } => (Admission::Pass, None),
            State::Open { until } if now < until => (
                Admission::Refuse {
                    retry_after: until - now,
                },
                None,
            ),
            State::Open { .. } => {
                let transition = self.go(State::HalfOpen, Reason::CooldownOver, now);
                (Admission::Trial, Some(transition))
            }
            // The trial is under way; it decides within its bounds.
            State::HalfOpen => (
                Admission::Refuse {
                    retry_after: Duration::ZERO,
                },
                None,
            ),
        }
    }

    /// A health check of the route was answered well at `now`: an open
    /// circuit past its cool-down closes, as after a trial that succeeded.
    /// Within the cool-down it stays open (the cool-down is a promise to
    /// the replicas), and a trial under way decides by itself.
    pub fn check_answered(&mut self, now: Instant) -> Option<Transition> {
        match self.state {
            State::Open { until } if now >= until => {
                Some(self.go(State::Closed { failures: 0 }, Reason::CheckAnswered, now))
            }
            _ => None,
        }
    }

    /// Records the outcome of a request let through as `admission`.
    pub fn record(
        &mut self,
        admission: Admission,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Transition> {
        let cooldown = self.settings.cooldown;
        match (self.state, admission, outcome) {
            (State::Closed { .. }, Admission::Pass, Outcome::Success) => {
                self.state = State::Closed { failures: 0 };
                None
            }
            (State::Closed { failures }, Admission::Pass, Outcome::Failure) => {
                let failures = failures.saturating_add(1);
                if failures >= self.settings.failures {
                    Some(self.go(
                        State::Open {
                            until: now + cooldown,
                        },
                        Reason::Failures(failures),
                        now,
                    ))
                } else {
                    self.state = State::Closed { failures };
                    None
                }
            }
            (State::HalfOpen, Admission::Trial, Outcome::Success) => {
                Some(self.go(State::Closed { failures: 0 }, Reason::TrialSucceeded, now))
            }
            (State::HalfOpen, Admission::Trial, Outcome::Failure) => Some(self.go(
                State::Open {
                    until: now + cooldown,
                },
                Reason::TrialFailed,
                now,
            )),
            (State::HalfOpen, Admission::Trial, Outcome::Abandoned) => {
                Some(self.go(State::Open { until: now }, Reason::TrialAbandoned, now))
            }
            // Abandoned requests of a closed circuit, and requests admitted
            // before the circuit opened: no say.
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOLDOWN: Duration = Duration::from_secs(15);

    fn breaker() -> Machine {
        Machine::new(Settings {
            failures: 5,
            cooldown: COOLDOWN,
        })
    }

    fn fail(b: &mut Machine, n: u32, now: Instant) -> Vec<Transition> {
        (0..n)
            .filter_map(|_| b.record(Admission::Pass, Outcome::Failure, now))
            .collect()
    }

    #[test]
    fn four_failures_then_a_success_reset_the_count() {
        let now = Instant::now();
        let mut b = breaker();
        assert!(fail(&mut b, 4, now).is_empty());
        assert_eq!(b.state(), State::Closed { failures: 4 });
        assert_eq!(b.record(Admission::Pass, Outcome::Success, now), None);
        assert_eq!(b.state(), State::Closed { failures: 0 });
        assert!(fail(&mut b, 4, now).is_empty(), "the count started again");
    }

    #[test]
    fn the_fifth_consecutive_failure_opens() {
        let now = Instant::now();
        let mut b = breaker();
        let trips = fail(&mut b, 5, now);
        assert_eq!(
            trips,
            [Transition {
                from: BreakerState::Closed,
                to: BreakerState::Open,
                reason: Reason::Failures(5),
                at: now
            }]
        );
        assert_eq!(
            b.state(),
            State::Open {
                until: now + COOLDOWN
            }
        );
    }

    #[test]
    fn open_refuses_with_the_time_left() {
        let t0 = Instant::now();
        let mut b = breaker();
        fail(&mut b, 5, t0);
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            b.admit(later),
            (
                Admission::Refuse {
                    retry_after: Duration::from_secs(10)
                },
                None
            )
        );
        // Late outcomes of requests admitted before the trip change nothing.
        assert_eq!(b.record(Admission::Pass, Outcome::Success, later), None);
        assert_eq!(b.record(Admission::Pass, Outcome::Failure, later), None);
        assert_eq!(
            b.state(),
            State::Open {
                until: t0 + COOLDOWN
            }
        );
    }

    #[test]
    fn after_the_cooldown_exactly_one_trial() {
        let t0 = Instant::now();
        let mut b = breaker();
        fail(&mut b, 5, t0);
        let t1 = t0 + COOLDOWN;
        let (admission, transition) = b.admit(t1);
        assert_eq!(admission, Admission::Trial);
        assert_eq!(
            transition.map(|t| (t.from, t.to, t.reason)),
            Some((
                BreakerState::Open,
                BreakerState::HalfOpen,
                Reason::CooldownOver
            ))
        );
        for _ in 0..49 {
            assert!(
                matches!(b.admit(t1).0, Admission::Refuse { .. }),
                "one trial at a time"
            );
        }
    }

    #[test]
    fn a_successful_trial_closes() {
        let t0 = Instant::now();
        let mut b = breaker();
        fail(&mut b, 5, t0);
        let t1 = t0 + COOLDOWN;
        b.admit(t1);
        let closed = b.record(Admission::Trial, Outcome::Success, t1).unwrap();
        assert_eq!(
            (closed.from, closed.to, closed.reason),
            (
                BreakerState::HalfOpen,
                BreakerState::Closed,
                Reason::TrialSucceeded
            )
        );
        assert_eq!(b.admit(t1), (Admission::Pass, None));
    }

    #[test]
    fn a_failed_trial_reopens_for_a_full_cooldown() {
        let t0 = Instant::now();
        let mut b = breaker();
        fail(&mut b, 5, t0);
        let t1 = t0 + COOLDOWN + Duration::from_secs(3);
        b.admit(t1);
        let reopened = b.record(Admission::Trial, Outcome::Failure, t1).unwrap();
        assert_eq!(
            (reopened.from, reopened.to, reopened.reason),
            (
                BreakerState::HalfOpen,
                BreakerState::Open,
                Reason::TrialFailed
            )
        );
        assert_eq!(
            b.admit(t1 + COOLDOWN - Duration::from_millis(1)).0,
            Admission::Refuse {
                retry_after: Duration::from_millis(1)
            }
        );
        assert_eq!(b.admit(t1 + COOLDOWN).0, Admission::Trial);
    }

    #[test]
    fn an_abandoned_trial_lets_the_next_request_try() {
        let t0 = Instant::now();
        let mut b = breaker();
        fail(&mut b, 5, t0);
        let t1 = t0 + COOLDOWN;
        b.admit(t1);
        let t = b.record(Admission::Trial, Outcome::Abandoned, t1).unwrap();
        assert_eq!(
            (t.to, t.reason),
            (BreakerState::Open, Reason::TrialAbandoned)
        );
        assert_eq!(b.admit(t1).0, Admission::Trial);
    }

    #[test]
    fn outcomes_that_do_not_count() {
        let now = Instant::now();
        let mut b = breaker();
        fail(&mut b, 3, now);
        assert_eq!(b.record(Admission::Pass, Outcome::Abandoned, now), None);
        assert_eq!(
            b.state(),
            State::Closed { failures: 3 },
            "an abandoned request neither fails nor succeeds"
        );
        // A stray trial outcome while closed is ignored.
        assert_eq!(b.record(Admission::Trial, Outcome::Failure, now), None);
        assert_eq!(b.state(), State::Closed { failures: 3 });
    }

    #[test]
    fn a_thousand_successes_never_open() {
        let now = Instant::now();
        let mut b = breaker();
        for _ in 0..1000 {
            assert_eq!(b.record(Admission::Pass, Outcome::Success, now), None);
        }
        assert_eq!(b.state(), State::Closed { failures: 0 });
    }

    #[test]
    fn an_answered_check_closes_only_past_the_cooldown() {
        let t0 = Instant::now();
        let mut b = breaker();
        assert_eq!(b.check_answered(t0), None, "closed stays closed");
        fail(&mut b, 5, t0);
        assert_eq!(
            b.check_answered(t0 + COOLDOWN / 2),
            None,
            "within the cool-down"
        );
        assert_eq!(b.state().phase(), BreakerState::Open);
        let closed = b.check_answered(t0 + COOLDOWN).unwrap();
        assert_eq!(
            (closed.from, closed.to, closed.reason),
            (
                BreakerState::Open,
                BreakerState::Closed,
                Reason::CheckAnswered
            )
        );
        assert_eq!(b.state(), State::Closed { failures: 0 });
        // A trial under way decides by itself.
        fail(&mut b, 5, t0 + COOLDOWN);
        let (admission, _) = b.admit(t0 + COOLDOWN * 2);
        assert_eq!(admission, Admission::Trial);
        assert_eq!(b.check_answered(t0 + COOLDOWN * 2), None);
        assert_eq!(b.state(), State::HalfOpen);
    }
}
