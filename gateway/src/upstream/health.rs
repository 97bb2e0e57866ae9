//! A replica's place in this node's rotation, decided from what this node
//! saw of it: its own connects and its own probes.
//!
//! ## States
//! - `InRotation`: requests may go to it.
//! - `Stalled`: a connect to it has been pending longer than the race delay;
//!   requests avoid it until that connect ends. A stall is not an ejection:
//!   the connect that stalled decides (success puts it back, failure ejects).
//! - `Ejected`: a connect failed (refused, timed out, unreachable), or a
//!   request on it got no response head within the first-answer bound (a
//!   paused or hung replica still accepts connections; only its silence
//!   tells). Only a background probe puts it back: no user request is
//!   gambled on it. One exception: a replica ejected as silent is back as
//!   soon as its runtime reports it ready again after saying it was not
//!   (unpaused, restarted in place): the runtime saw it recover.
//!
//! ## Invariants
//! - Every change of state is returned exactly once, so the caller logs one
//!   line per change and never one per request.
//! - A connect that succeeds while the replica is ejected (one started
//!   before the ejection) does not re-admit it; the probe does.

use std::fmt;

use tokio::time::Instant;

/// Why a replica was ejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EjectReason {
    Refused,
    TimedOut,
    Unreachable,
    /// Connected, but no response head within the first-answer bound.
    Silent,
}

impl fmt::Display for EjectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EjectReason::Refused => "connect refused",
            EjectReason::TimedOut => "connect timed out",
            EjectReason::Unreachable => "connect failed",
            EjectReason::Silent => "no answer within the first-answer bound",
        })
    }
}

/// What this node observed of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    ConnectOk,
    /// A connect has been pending longer than the race delay.
    ConnectOverdue,
    ConnectFailed(EjectReason),
    /// A request on it got no response head within the first-answer bound.
    AnswerOverdue,
    /// Its runtime reports it ready again after saying it was not.
    RuntimeReady,
    ProbeOk,
    ProbeFailed(EjectReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    InRotation,
    Stalled { since: Instant },
    Ejected { since: Instant, reason: EjectReason },
}

/// A change worth one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Stalled,
    Unstalled,
    Ejected(EjectReason),
    Readmitted,
    /// Ejected as silent, back because its runtime reports it ready again.
    Resumed,
}

impl Health {
    pub fn in_rotation(&self) -> bool {
        matches!(self, Health::InRotation)
    }

    /// The next state after `observation` at `now`, and the change if any.
    pub fn observe(self, observation: Observation, now: Instant) -> (Health, Option<Change>) {
        use Health::*;
        use Observation::*;
        match (self, observation) {
            (InRotation, ConnectOverdue) => (Stalled { since: now }, Some(Change::Stalled)),
            (Stalled { .. }, ConnectOk) => (InRotation, Some(Change::Unstalled)),
            (InRotation | Stalled { .. }, ConnectFailed(reason)) => (
                Ejected { since: now, reason },
                Some(Change::Ejected(reason)),
            ),
            (InRotation | Stalled { .. }, AnswerOverdue) => (
                Ejected {
                    since: now,
                    reason: EjectReason::Silent,
                },
                Some(Change::Ejected(EjectReason::Silent)),
            ),
            (Ejected { .. }, ProbeOk) => (InRotation, Some(Change::Readmitted)),
            (
                Ejected {
                    reason: EjectReason::Silent,
                    ..
                },
                RuntimeReady,
            ) => (InRotation, Some(Change::Resumed)),
            (Ejected { since, .. }, ProbeFailed(reason)) => (Ejected { since, reason }, None),
            (state, _) => (state, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_transition() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let stalled = Health::Stalled { since: t0 };
        let ejected = Health::Ejected {
            since: t0,
            reason: EjectReason::Refused,
        };
        use Observation::*;
        let cases = [
            (Health::InRotation, ConnectOk, Health::InRotation, None),
            (
                Health::InRotation,
                ConnectOverdue,
                Health::Stalled { since: t1 },
                Some(Change::Stalled),
            ),
            (
                Health::InRotation,
                ConnectFailed(EjectReason::Refused),
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Refused,
                },
                Some(Change::Ejected(EjectReason::Refused)),
            ),
            (Health::InRotation, ProbeOk, Health::InRotation, None),
            (
                stalled,
                ConnectOk,
                Health::InRotation,
                Some(Change::Unstalled),
            ),
            (stalled, ConnectOverdue, stalled, None),
            (
                stalled,
                ConnectFailed(EjectReason::TimedOut),
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::TimedOut,
                },
                Some(Change::Ejected(EjectReason::TimedOut)),
            ),
            (ejected, ConnectOk, ejected, None),
            (ejected, ConnectOverdue, ejected, None),
            (ejected, ConnectFailed(EjectReason::TimedOut), ejected, None),
            (ejected, AnswerOverdue, ejected, None),
            // Only silence is undone by the runtime: a failed connect
            // waits for the probe.
            (ejected, RuntimeReady, ejected, None),
            (
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Silent,
                },
                RuntimeReady,
                Health::InRotation,
                Some(Change::Resumed),
            ),
            (Health::InRotation, RuntimeReady, Health::InRotation, None),
            (
                Health::InRotation,
                AnswerOverdue,
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Silent,
                },
                Some(Change::Ejected(EjectReason::Silent)),
            ),
            (
                stalled,
                AnswerOverdue,
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Silent,
                },
                Some(Change::Ejected(EjectReason::Silent)),
            ),
            (
                ejected,
                ProbeFailed(EjectReason::TimedOut),
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::TimedOut,
                },
                None,
            ),
            (
                ejected,
                ProbeOk,
                Health::InRotation,
                Some(Change::Readmitted),
            ),
        ];
        for (from, observation, to, change) in cases {
            assert_eq!(
                from.observe(observation, t1),
                (to, change),
                "{from:?} + {observation:?}"
            );
        }
    }

    #[test]
    fn only_in_rotation_takes_requests() {
        let now = Instant::now();
        assert!(Health::InRotation.in_rotation());
        assert!(!Health::Stalled { since: now }.in_rotation());
        assert!(
            !Health::Ejected {
                since: now,
                reason: EjectReason::Refused
            }
            .in_rotation()
        );
    }
}
