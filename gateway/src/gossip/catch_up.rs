//! Pulling harder while behind.
//!
//! chitchat gossips with three peers a round, and one exchange carries at
//! most one datagram of values each way (64 KiB, compressed). A node that
//! starts cold in a cluster of 100 nodes × 1,000 routes has 99,000 values
//! to receive, a few thousand per exchange: ten rounds at three exchanges
//! started a round (and those peers started). A node that received many
//! values in the last half interval is behind: it starts [`EXTRA`] more
//! exchanges with random live peers, each of which brings it a delta (and
//! gives one to the peer), every half interval until the flow falls back. A
//! cluster that holds still adds nothing; a burst of changes (a restarted
//! node's verdicts, a cluster-wide incident) spreads in fewer rounds, at
//! the cost of more datagrams while it lasts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::{Chitchat, Membership};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// Exchanges started each half interval while behind, beyond chitchat's
/// own three each interval.
pub const EXTRA: usize = 3;

/// Values received in half an interval from which a node counts as
/// behind: far more than a steady cluster changes in a second, far fewer
/// than one full exchange carries.
pub const BEHIND_AT: u64 = 256;

/// Whether a node is behind, from the values it held of other nodes
/// (the sum of their versions) half an interval ago and now.
pub fn behind(before: u64, now: u64) -> bool {
    now.saturating_sub(before) >= BEHIND_AT
}

/// Up to `count` distinct peers, at random.
pub fn pick(rng: &mut fastrand::Rng, peers: &[SocketAddr], count: usize) -> Vec<SocketAddr> {
    let mut peers = peers.to_vec();
    rng.shuffle(&mut peers);
    peers.truncate(count);
    peers
}

/// Each half interval: starts [`EXTRA`] exchanges when the last half
/// interval found this node behind, until `shutdown` or the node leaves.
/// Half intervals, not whole ones: the answers to one batch carry the
/// digests the next batch is chosen by, and a round's pulls are spread
/// over it.
pub(super) async fn run(
    membership: Arc<Membership>,
    chitchat: Chitchat,
    interval: Duration,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
    let mut ticks = tokio::time::interval(interval / 2);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rng = fastrand::Rng::new();
    let mut held = 0;
    let mut was_behind = false;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shutdown.wait() => return,
        }
        let (now, peers) = {
            let chitchat = chitchat.lock().await;
            let me = chitchat.self_chitchat_id();
            let now: u64 = chitchat
                .node_states()
                .iter()
                .filter(|(id, _)| *id != me)
                .map(|(_, state)| state.max_version())
                .sum();
            let mut peers: Vec<SocketAddr> = chitchat
                .live_nodes()
                .filter(|id| *id != me)
                .map(|id| id.gossip_advertise_addr)
                .collect();
            if peers.is_empty() {
                // As chitchat does before the failure detector has heard
                // anyone: every node known.
                peers = chitchat
                    .node_states()
                    .keys()
                    .filter(|id| *id != me)
                    .map(|id| id.gossip_advertise_addr)
                    .collect();
            }
            (now, peers)
        };
        let is_behind = behind(held, now);
        held = now;
        if is_behind != was_behind {
            tracing::debug!(behind = is_behind, "gossip catch-up");
            was_behind = is_behind;
        }
        if !is_behind {
            continue;
        }
        let handle = membership.handle.lock().await;
        let Some(handle) = handle.as_ref() else {
            return;
        };
        for addr in pick(&mut rng, &peers, EXTRA) {
            if handle.gossip(addr).is_ok() {
                metrics.catch_up_exchange();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_while_values_flood_in() {
        assert!(behind(0, 5_000), "a cold start's first deltas");
        assert!(behind(10_000, 10_000 + BEHIND_AT));
        assert!(
            !behind(10_000, 10_000 + BEHIND_AT - 1),
            "a busy steady cluster"
        );
        assert!(!behind(10_000, 10_000), "nothing new");
        assert!(!behind(10_000, 4_000), "a node forgotten: fewer values");
    }

    #[test]
    fn picks_distinct_peers_at_most_count() {
        let mut rng = fastrand::Rng::with_seed(7);
        let peers: Vec<SocketAddr> = (1..=10u16)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        for _ in 0..100 {
            let mut picked = pick(&mut rng, &peers, EXTRA);
            assert_eq!(picked.len(), EXTRA);
            assert!(picked.iter().all(|p| peers.contains(p)));
            picked.sort();
            picked.dedup();
            assert_eq!(picked.len(), EXTRA, "distinct");
        }
        assert_eq!(pick(&mut rng, &peers[..2], EXTRA).len(), 2);
        assert!(pick(&mut rng, &[], EXTRA).is_empty());
    }
}
