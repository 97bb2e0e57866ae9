//! The background probe that re-admits an ejected replica.
//!
//! One probe task per ejected replica: a connect made as requests make it
//! ([`Upstream::try_connect`]: through the route's forward proxy, and for a
//! TLS upstream the whole handshake, verified as requests verify it),
//! bounded by the smaller of the connect bound and the ejection period.
//! The first success re-admits the replica: a TLS upstream whose
//! certificate fails verification accepts TCP connections, and is never
//! re-admitted by them. The task ends with the re-admission, or when the
//! upstream is dropped (its route was removed or changed by a reload).
//!
//! ## When it probes
//! - A replica ejected for a failed connect (refused, timed out,
//!   unreachable) is probed after 250 ms, then at doubling intervals up to
//!   the ejection period ([`backoff`]): a replica that restarts in one
//!   second is back in rotation about half a second after it listens
//!   again, one that stays down costs one connect per period.
//! - A replica ejected as silent (connected, but no answer within the
//!   first-answer bound), for its gateway errors or for answers that broke
//!   off still accepts
//!   connections, so a connect proves nothing soon: it is probed one
//!   ejection period after the ejection, then every period (a silent one
//!   may be re-admitted sooner by its runtime).

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::sleep;

use super::failure::ConnectFailure;
use super::health::{EjectReason, Health, Observation};
use super::{Replica, Upstream};

/// The first probe after a failed connect.
pub const FIRST_PROBE: Duration = Duration::from_millis(250);

/// The wait before probe number `attempt` (0 for the first) of a replica
/// ejected for `reason`, with ejection period `period`, in its `nth`
/// ejection in a row for what it answered.
pub fn backoff(reason: EjectReason, attempt: u32, period: Duration, nth: u32) -> Duration {
    if reason.judges_answers() {
        return super::health::ejection_period(period, nth);
    }
    let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
    FIRST_PROBE.saturating_mul(factor).min(period)
}

pub(super) fn spawn(upstream: Weak<Upstream>, replica: Weak<Replica>) {
    let Some(period) = upstream.upgrade().map(|u| u.eject_for) else {
        return;
    };
    tokio::spawn(async move {
        let mut attempt = 0u32;
        loop {
            // Why it is out decides when to look again; it is read afresh
            // each time, as a later failure may have changed it.
            let (reason, nth) = match replica
                .upgrade()
                .map(|r| (r.health(), r.ejections_in_a_row()))
            {
                Some((Health::Ejected { reason, .. }, nth)) => (reason, nth),
                _ => (EjectReason::Unreachable, 0),
            };
            sleep(backoff(reason, attempt, period, nth)).await;
            attempt = attempt.saturating_add(1);
            // The route or the replica is gone: nothing to re-admit.
            let (Some(up), Some(replica)) = (upstream.upgrade(), replica.upgrade()) else {
                return;
            };
            let bound = up.pool.bounds.connect.min(period);
            let result = up.try_connect(&replica, bound).await;
            tracing::debug!(route = &*up.route, replica = %replica.label, ?result, "probe");
            match result {
                Ok(()) => {
                    // Cleared first, so that an ejection right after the
                    // re-admission starts a probe of its own.
                    replica.probing.store(false, Ordering::Release);
                    // An HTTP or gRPC check is an answer, not only a
                    // connection accepted: no probation after it.
                    match up.check.answers() {
                        true => up.check_answered(&replica),
                        false => up.observe(&replica, Observation::ProbeOk),
                    }
                    return;
                }
                // The node's own shortage: try again at the next step.
                Err(ConnectFailure::Local(_)) => {}
                Err(failure) => up.connect_failed(&replica, &failure, true),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_back_off_from_250_ms_to_the_period() {
        let period = Duration::from_secs(10);
        let waits: Vec<u64> = (0..8)
            .map(|n| backoff(EjectReason::Refused, n, period, 0).as_millis() as u64)
            .collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(backoff(EjectReason::TimedOut, 100, period, 3), period);
        // A silent replica accepts connections: a probe proves nothing soon.
        assert_eq!(backoff(EjectReason::Silent, 0, period, 1), period);
        // Each ejection in a row for what it answered lasts twice as long.
        assert_eq!(backoff(EjectReason::Silent, 0, period, 2), period * 2);
        assert_eq!(backoff(EjectReason::Silent, 4, period, 3), period * 4);
        let answers = EjectReason::Answers {
            status: 503,
            count: 5,
        };
        assert_eq!(backoff(answers, 0, period, 1), period);
        // A period shorter than the first step caps it.
        assert_eq!(
            backoff(EjectReason::Unreachable, 0, Duration::from_millis(100), 0),
            Duration::from_millis(100)
        );
    }
}
