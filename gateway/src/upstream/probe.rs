//! The background probe that re-admits an ejected replica.
//!
//! One probe task per ejected replica. It probes at a fixed rate, one
//! ejection period apart, starting one period after the ejection: a plain
//! TCP connect bounded by the smaller of the connect bound and the period.
//! The first success re-admits the replica, so a replica that answers
//! again is back within one period. The task ends with the re-admission,
//! or when the upstream is dropped (its route was removed or changed by a
//! reload).

use std::sync::Weak;
use std::sync::atomic::Ordering;

use tokio::time::{Instant, MissedTickBehavior, interval_at, timeout};

use super::connect::{ConnectFailure, tcp_connect};
use super::health::{EjectReason, Observation};
use super::{Replica, Upstream};

pub(super) fn spawn(upstream: Weak<Upstream>, replica: Weak<Replica>) {
    let Some(period) = upstream.upgrade().map(|u| u.eject_for) else {
        return;
    };
    tokio::spawn(async move {
        let mut ticks = interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // The route or the replica is gone: nothing to re-admit.
            let (Some(up), Some(replica)) = (upstream.upgrade(), replica.upgrade()) else {
                return;
            };
            let bound = up.pool.bounds.connect.min(period);
            let observation = match timeout(bound, tcp_connect(&replica.key.target)).await {
                Ok(Ok(_stream)) => Observation::ProbeOk,
                Ok(Err(ConnectFailure::Refused)) => Observation::ProbeFailed(EjectReason::Refused),
                // The node's own shortage: try again next period.
                Ok(Err(ConnectFailure::Local(_))) => continue,
                Ok(Err(_)) => Observation::ProbeFailed(EjectReason::Unreachable),
                Err(_) => Observation::ProbeFailed(EjectReason::TimedOut),
            };
            tracing::debug!(route = &*up.route, replica = %replica.label, ?observation, "probe");
            if observation == Observation::ProbeOk {
                // Cleared first, so that an ejection right after the
                // re-admission starts a probe of its own.
                replica.probing.store(false, Ordering::Release);
                up.observe(&replica, observation);
                return;
            }
            up.observe(&replica, observation);
        }
    });
}
