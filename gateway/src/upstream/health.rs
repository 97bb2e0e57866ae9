//! A replica's place in this node's rotation, decided from what this node
//! saw of it: its own connects and its own probes.
//!
//! ## States
//! - `InRotation`: requests may go to it.
//! - `Stalled`: a connect to it has been pending longer than the race delay;
//!   requests avoid it until that connect ends. A stall is not an ejection:
//!   the connect that stalled decides (success puts it back, failure ejects).
//! - `Probation`: back from an ejection for what it answered (silence,
//!   gateway errors, broken answers), on trial: a connect proved only that
//!   it accepts connections, so it gets at most one request at a time
//!   until one is answered well (then `InRotation`); a failure ejects it
//!   again at once, for twice as long ([`ejection_period`]).
//! - `Ejected`: a connect failed (refused, timed out, unreachable, the TLS
//!   handshake failed, the forward proxy refused the tunnel), a
//!   request on it got no response head within the first-answer bound (a
//!   paused or hung replica still accepts connections; only its silence
//!   tells), or its own answers were 502, 503 or 504 several times in a
//!   row ([`gateway_errors`]; never 500: a replica answering 500 is up and
//!   has a bug). Only a background probe puts it back: no user request is
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

use super::handshake::TlsFailure;

/// Why a replica was ejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EjectReason {
    Refused,
    TimedOut,
    Unreachable,
    /// Connected, but the TLS handshake failed: the replica cannot be used
    /// as real traffic uses it.
    Tls(TlsFailure),
    /// The forward proxy (`HTTPS_PROXY`) answered `status` to `CONNECT`.
    ProxyRefused {
        status: u16,
    },
    /// Connected, but no response head within the first-answer bound.
    Silent,
    /// Its own answers were `status` (502, 503 or 504) `count` times in a
    /// row.
    Answers {
        status: u16,
        count: u32,
    },
    /// Its answers broke off `count` times in a row: closed or reset
    /// before their end (`garbled`: the last one sent bytes that do not
    /// parse).
    Broken {
        count: u32,
        garbled: bool,
    },
    /// Its gRPC health check did not say SERVING.
    NotServing(GrpcHealth),
    /// Connected, but it does not speak HTTP/2 as its route asks (no `h2`
    /// by ALPN, or no answer to the preface).
    NoHttp2,
    /// Its HTTP health check did not pass.
    HttpCheck(HttpCheckFailure),
}

/// What an HTTP health check got instead of a passing status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpCheckFailure {
    /// An answer with a status that does not pass.
    Status(u16),
    /// Connected, but no answer head within the check's timeout.
    NoAnswer,
    /// Closed before an answer head.
    Closed,
    /// An answer that is no HTTP answer.
    Malformed,
}

impl fmt::Display for HttpCheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpCheckFailure::Status(status) => write!(f, "answered {status}"),
            HttpCheckFailure::NoAnswer => f.write_str("no answer within the check timeout"),
            HttpCheckFailure::Closed => f.write_str("closed before an answer"),
            HttpCheckFailure::Malformed => f.write_str("an answer that did not parse"),
        }
    }
}

/// What a gRPC health check got instead of SERVING.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcHealth {
    /// NOT_SERVING.
    NotServing,
    /// UNKNOWN, or an answer with no status.
    Unknown,
    /// SERVICE_UNKNOWN: the replica does not know the service asked for.
    ServiceUnknown,
    /// The call failed with this gRPC status (12 UNIMPLEMENTED: no health
    /// service at all).
    Failed(u16),
    /// An answer that is no health answer.
    Malformed,
}

impl fmt::Display for GrpcHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrpcHealth::NotServing => f.write_str("NOT_SERVING"),
            GrpcHealth::Unknown => f.write_str("UNKNOWN"),
            GrpcHealth::ServiceUnknown => f.write_str("SERVICE_UNKNOWN"),
            GrpcHealth::Failed(status) => write!(f, "the call failed with grpc-status {status}"),
            GrpcHealth::Malformed => f.write_str("an answer that is no health answer"),
        }
    }
}

impl EjectReason {
    /// Every [`EjectReason::slug`].
    pub const SLUGS: [&'static str; 11] = [
        "refused",
        "timed_out",
        "unreachable",
        "tls",
        "proxy_refused",
        "silent",
        "gateway_errors",
        "broken_answers",
        "not_serving",
        "no_http2",
        "http_check",
    ];

    /// Ejected for what it answered (or did not), not for a failed
    /// connect: a replica that accepts connections all along, so a connect
    /// says nothing of it.
    pub fn judges_answers(&self) -> bool {
        matches!(
            self,
            EjectReason::Silent | EjectReason::Answers { .. } | EjectReason::Broken { .. }
        )
    }

    /// The reason as a metric label.
    pub fn slug(&self) -> &'static str {
        match self {
            EjectReason::Refused => "refused",
            EjectReason::TimedOut => "timed_out",
            EjectReason::Unreachable => "unreachable",
            EjectReason::Tls(_) => "tls",
            EjectReason::ProxyRefused { .. } => "proxy_refused",
            EjectReason::Silent => "silent",
            EjectReason::Answers { .. } => "gateway_errors",
            EjectReason::Broken { .. } => "broken_answers",
            EjectReason::NotServing(_) => "not_serving",
            EjectReason::NoHttp2 => "no_http2",
            EjectReason::HttpCheck(_) => "http_check",
        }
    }
}

/// Consecutive gateway errors (502, 503, 504) after an answer of `status`,
/// `count` before it: any other answer, a 500 included, starts again.
pub fn gateway_errors(count: u32, status: u16) -> u32 {
    if matches!(status, 502..=504) {
        count.saturating_add(1)
    } else {
        0
    }
}

impl fmt::Display for EjectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EjectReason::Refused => "connect refused",
            EjectReason::TimedOut => "connect timed out",
            EjectReason::Unreachable => "connect failed",
            EjectReason::Tls(failure) => return write!(f, "TLS handshake: {failure}"),
            EjectReason::ProxyRefused { status } => {
                return write!(f, "the forward proxy answered {status} to CONNECT");
            }
            EjectReason::Silent => "no answer within the first-answer bound",
            EjectReason::Answers { status, count: 1 } => {
                return write!(f, "it answered {status} on trial");
            }
            EjectReason::Answers { status, count } => {
                return write!(f, "{count} consecutive {status}");
            }
            EjectReason::Broken { count, garbled } => {
                let how = match garbled {
                    true => "that did not parse",
                    false => "cut short",
                };
                if *count == 1 {
                    let how = match garbled {
                        true => "did not parse",
                        false => "was cut short",
                    };
                    return write!(f, "its answer on trial {how}");
                }
                return write!(f, "{count} consecutive answers {how}");
            }
            EjectReason::NotServing(health) => {
                return write!(f, "gRPC health check: {health}");
            }
            EjectReason::NoHttp2 => "connected, but it does not speak HTTP/2",
            EjectReason::HttpCheck(failure) => return write!(f, "HTTP check: {failure}"),
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
    /// Real traffic failed on it, as `reason` says: no response head
    /// within the first-answer bound (`Silent`), gateway errors or broken
    /// answers in a row, or a trial request answered badly.
    TrafficFailed(EjectReason),
    /// Its runtime reports it ready again after saying it was not.
    RuntimeReady,
    ProbeOk,
    /// A periodic connect check (of a static replica or an external host)
    /// passed: proof enough for a replica ejected for a failed connect,
    /// none for one ejected for what it answered, which accepts
    /// connections all along.
    CheckOk,
    ProbeFailed(EjectReason),
    /// An HTTP or gRPC health check (periodic, or the probe's) passed: the
    /// replica answered, so it is back whatever it was ejected for, and
    /// off probation.
    Answered,
    /// A request on it (a trial, on probation) was answered well.
    Served,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    InRotation,
    Stalled {
        since: Instant,
    },
    Ejected {
        since: Instant,
        reason: EjectReason,
    },
    /// Back on trial after an ejection for `after`.
    Probation {
        since: Instant,
        after: EjectReason,
    },
}

/// The longest an ejection for what a replica answered lasts, at the
/// least: Envoy's outlier detection caps it the same way.
pub const MAX_EJECTION: std::time::Duration = std::time::Duration::from_secs(300);

/// How long the `nth` ejection in a row (1 for the first) of a replica
/// ejected for what it answered lasts: the ejection period, doubled at
/// each new ejection of the same replica, up to [`MAX_EJECTION`] (or the
/// period itself, when that is longer).
pub fn ejection_period(period: std::time::Duration, nth: u32) -> std::time::Duration {
    let cap = period.max(MAX_EJECTION);
    let factor = 1u32
        .checked_shl(nth.saturating_sub(1).min(31))
        .unwrap_or(u32::MAX);
    period.saturating_mul(factor).min(cap)
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
    /// Back on trial: one request at a time until one is answered well.
    OnProbation,
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
            (
                InRotation | Stalled { .. } | Probation { .. },
                ConnectFailed(reason) | TrafficFailed(reason),
            ) => (
                Ejected { since: now, reason },
                Some(Change::Ejected(reason)),
            ),
            // A connect proves nothing of a replica ejected for what it
            // answered: it goes on trial.
            (Ejected { reason, .. }, ProbeOk) if reason.judges_answers() => (
                Probation {
                    since: now,
                    after: reason,
                },
                Some(Change::OnProbation),
            ),
            (Ejected { .. }, ProbeOk) => (InRotation, Some(Change::Readmitted)),
            (Probation { .. }, Served | Answered) => (InRotation, Some(Change::Readmitted)),
            (Ejected { .. }, Answered) => (InRotation, Some(Change::Readmitted)),
            (Ejected { reason, .. }, CheckOk) if !reason.judges_answers() => {
                (InRotation, Some(Change::Readmitted))
            }
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
    fn each_ejection_in_a_row_lasts_twice_as_long_up_to_the_cap() {
        let period = Duration::from_secs(10);
        let periods: Vec<u64> = (1..=8)
            .map(|n| ejection_period(period, n).as_secs())
            .collect();
        assert_eq!(periods, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(ejection_period(period, 0), period);
        assert_eq!(ejection_period(period, u32::MAX), MAX_EJECTION);
        // A period longer than the cap is its own cap.
        let long = Duration::from_secs(600);
        assert_eq!(ejection_period(long, 3), long);
        // A replica silent on every trial, beside a healthy one, costs one
        // request per ejection: the first, then one per trial. In ten
        // minutes with the defaults, that is six.
        let mut at = Duration::ZERO;
        let mut costs = 1;
        for nth in 1.. {
            at += ejection_period(period, nth);
            if at > Duration::from_secs(600) {
                break;
            }
            costs += 1;
        }
        assert_eq!(costs, 6);
        assert!(costs <= 8);
    }

    #[test]
    fn every_transition() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let stalled = Health::Stalled { since: t0 };
        let ejected = Health::Ejected {
            since: t0,
            reason: EjectReason::Refused,
        };
        let tls = EjectReason::Tls(TlsFailure::UnknownIssuer);
        let refused_tunnel = EjectReason::ProxyRefused { status: 403 };
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
            (ejected, TrafficFailed(EjectReason::Silent), ejected, None),
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
                TrafficFailed(EjectReason::Silent),
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Silent,
                },
                Some(Change::Ejected(EjectReason::Silent)),
            ),
            (
                stalled,
                TrafficFailed(EjectReason::Silent),
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
            // Back from an ejection for what it answered: on trial, until
            // a request is answered well; a failed trial ejects at once.
            (
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Silent,
                },
                ProbeOk,
                Health::Probation {
                    since: t1,
                    after: EjectReason::Silent,
                },
                Some(Change::OnProbation),
            ),
            (
                Health::Probation {
                    since: t0,
                    after: EjectReason::Silent,
                },
                Served,
                Health::InRotation,
                Some(Change::Readmitted),
            ),
            (
                Health::Probation {
                    since: t0,
                    after: EjectReason::Silent,
                },
                TrafficFailed(EjectReason::Silent),
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Silent,
                },
                Some(Change::Ejected(EjectReason::Silent)),
            ),
            (
                Health::Probation {
                    since: t0,
                    after: EjectReason::Silent,
                },
                TrafficFailed(EjectReason::Answers {
                    status: 503,
                    count: 1,
                }),
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Answers {
                        status: 503,
                        count: 1,
                    },
                },
                Some(Change::Ejected(EjectReason::Answers {
                    status: 503,
                    count: 1,
                })),
            ),
            (
                Health::Probation {
                    since: t0,
                    after: EjectReason::Silent,
                },
                CheckOk,
                Health::Probation {
                    since: t0,
                    after: EjectReason::Silent,
                },
                None,
            ),
            (Health::InRotation, Served, Health::InRotation, None),
            (ejected, Served, ejected, None),
            // A connect check re-admits what a connect ejected, never what
            // traffic ejected: that replica accepted connections all along.
            (
                ejected,
                CheckOk,
                Health::InRotation,
                Some(Change::Readmitted),
            ),
            (
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Silent,
                },
                CheckOk,
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Silent,
                },
                None,
            ),
            (
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Answers {
                        status: 503,
                        count: 5,
                    },
                },
                CheckOk,
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Answers {
                        status: 503,
                        count: 5,
                    },
                },
                None,
            ),
            (Health::InRotation, CheckOk, Health::InRotation, None),
            (
                Health::InRotation,
                TrafficFailed(EjectReason::Broken {
                    count: 5,
                    garbled: false,
                }),
                Health::Ejected {
                    since: t1,
                    reason: EjectReason::Broken {
                        count: 5,
                        garbled: false,
                    },
                },
                Some(Change::Ejected(EjectReason::Broken {
                    count: 5,
                    garbled: false,
                })),
            ),
            (
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Broken {
                        count: 5,
                        garbled: true,
                    },
                },
                CheckOk,
                Health::Ejected {
                    since: t0,
                    reason: EjectReason::Broken {
                        count: 5,
                        garbled: true,
                    },
                },
                None,
            ),
            // A TLS upstream that connects but fails the handshake is out,
            // with the handshake's reason, and stays out while its probes
            // fail the same way.
            (
                Health::InRotation,
                ConnectFailed(tls),
                Health::Ejected {
                    since: t1,
                    reason: tls,
                },
                Some(Change::Ejected(tls)),
            ),
            (
                stalled,
                ConnectFailed(refused_tunnel),
                Health::Ejected {
                    since: t1,
                    reason: refused_tunnel,
                },
                Some(Change::Ejected(refused_tunnel)),
            ),
            (
                ejected,
                ProbeFailed(tls),
                Health::Ejected {
                    since: t0,
                    reason: tls,
                },
                None,
            ),
            (ejected, ConnectFailed(tls), ejected, None),
            (
                Health::Ejected {
                    since: t0,
                    reason: tls,
                },
                RuntimeReady,
                Health::Ejected {
                    since: t0,
                    reason: tls,
                },
                None,
            ),
            (
                Health::Ejected {
                    since: t0,
                    reason: tls,
                },
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
    fn gateway_errors_in_a_row() {
        let answers = [503, 503, 502, 504, 500, 503, 200, 503, 503];
        let counts: Vec<u32> = answers
            .iter()
            .scan(0, |count, status| {
                *count = gateway_errors(*count, *status);
                Some(*count)
            })
            .collect();
        assert_eq!(counts, [1, 2, 3, 4, 0, 1, 0, 1, 2]);
    }

    #[test]
    fn gateway_errors_eject_with_their_reason() {
        let t0 = Instant::now();
        let observation = Observation::TrafficFailed(EjectReason::Answers {
            status: 503,
            count: 5,
        });
        let reason = EjectReason::Answers {
            status: 503,
            count: 5,
        };
        assert_eq!(
            Health::InRotation.observe(observation, t0),
            (
                Health::Ejected { since: t0, reason },
                Some(Change::Ejected(reason))
            )
        );
        assert_eq!(reason.to_string(), "5 consecutive 503");
        assert_eq!(reason.slug(), "gateway_errors");
        let ejected = Health::Ejected {
            since: t0,
            reason: EjectReason::Refused,
        };
        assert_eq!(ejected.observe(observation, t0), (ejected, None));
        // A probe's connect puts it on trial, not back in rotation.
        let on_trial = Health::Probation {
            since: t0,
            after: reason,
        };
        assert_eq!(
            Health::Ejected { since: t0, reason }.observe(Observation::ProbeOk, t0),
            (on_trial, Some(Change::OnProbation))
        );
        assert_eq!(
            on_trial.observe(Observation::Served, t0),
            (Health::InRotation, Some(Change::Readmitted))
        );
        let failed_trial = EjectReason::Answers {
            status: 503,
            count: 1,
        };
        assert_eq!(failed_trial.to_string(), "it answered 503 on trial");
        let cut = EjectReason::Broken {
            count: 1,
            garbled: false,
        };
        assert_eq!(cut.to_string(), "its answer on trial was cut short");
    }

    #[test]
    fn reasons_as_told() {
        let cases = [
            (EjectReason::Refused, "refused", "connect refused"),
            (EjectReason::TimedOut, "timed_out", "connect timed out"),
            (EjectReason::Unreachable, "unreachable", "connect failed"),
            (
                EjectReason::Tls(TlsFailure::UnknownIssuer),
                "tls",
                "TLS handshake: invalid peer certificate: UnknownIssuer",
            ),
            (
                EjectReason::ProxyRefused { status: 407 },
                "proxy_refused",
                "the forward proxy answered 407 to CONNECT",
            ),
            (
                EjectReason::Silent,
                "silent",
                "no answer within the first-answer bound",
            ),
        ];
        for (reason, slug, text) in cases {
            assert_eq!((reason.slug(), reason.to_string().as_str()), (slug, text));
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

    /// A health check the replica answered (HTTP, gRPC) brings it back
    /// whatever it was ejected for, and ends its probation: no client has
    /// to be its trial.
    #[test]
    fn an_answered_check_readmits_from_anything() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let reasons = [
            EjectReason::Refused,
            EjectReason::Silent,
            EjectReason::Answers {
                status: 503,
                count: 5,
            },
            EjectReason::Broken {
                count: 5,
                garbled: false,
            },
            EjectReason::HttpCheck(HttpCheckFailure::Status(500)),
            EjectReason::NotServing(GrpcHealth::NotServing),
        ];
        for reason in reasons {
            let ejected = Health::Ejected { since: t0, reason };
            assert_eq!(
                ejected.observe(Observation::Answered, t1),
                (Health::InRotation, Some(Change::Readmitted)),
                "{reason}"
            );
            let trial = Health::Probation {
                since: t0,
                after: reason,
            };
            assert_eq!(
                trial.observe(Observation::Answered, t1),
                (Health::InRotation, Some(Change::Readmitted)),
                "{reason}"
            );
        }
        // A connect check proves nothing of what a replica answers.
        let answers = Health::Ejected {
            since: t0,
            reason: EjectReason::Answers {
                status: 503,
                count: 5,
            },
        };
        assert_eq!(answers.observe(Observation::CheckOk, t1), (answers, None));
        assert_eq!(
            Health::InRotation.observe(Observation::Answered, t1),
            (Health::InRotation, None)
        );
        assert_eq!(
            EjectReason::HttpCheck(HttpCheckFailure::Status(503)).to_string(),
            "HTTP check: answered 503"
        );
        assert_eq!(
            EjectReason::HttpCheck(HttpCheckFailure::NoAnswer).to_string(),
            "HTTP check: no answer within the check timeout"
        );
    }
}
