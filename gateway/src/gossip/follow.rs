//! Reading gossip into the view this node shows: every other node's
//! state as chitchat holds it, assembled with this node's own verdicts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chitchat::{ChitchatId, DeletionStatus};
use picket_proto::{CertificateState, ClusterView, Liveness, Member, TableGeneration, Verdict};
use tokio::sync::watch;

use super::view::{Assembler, Gossiped};
use super::{Chitchat, Me, Membership};
use crate::clock::now_unix_ms;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

/// This node as a member of its own view.
pub(super) fn self_member(
    me: &Me,
    generation: u64,
    gossip: Option<SocketAddr>,
    own: (
        &Arc<Vec<Verdict>>,
        Option<TableGeneration>,
        &[CertificateState],
    ),
) -> Member {
    let (verdicts, table, certificates) = own;
    Member {
        name: me.info.name.clone(),
        gossip: gossip.map(|a| a.to_string()).unwrap_or_default(),
        generation,
        liveness: Liveness::Alive,
        heard_unix_ms: now_unix_ms(),
        info: Some(me.info.clone()),
        table,
        certificates: certificates.to_vec(),
        verdicts: Arc::clone(verdicts),
    }
}
/// What this node says of itself, as it changes: its verdicts, its
/// route table's generation and its ACME certificates' states.
pub(super) struct Own {
    pub verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    pub table: watch::Receiver<Option<TableGeneration>>,
    pub certificates: watch::Receiver<Arc<Vec<CertificateState>>>,
}

/// Reads gossip state into the view: on membership or state changes, on
/// this node's own verdict changes, and every half interval for ages.
pub(super) async fn run(
    membership: Arc<Membership>,
    chitchat: Chitchat,
    me: Me,
    own: Own,
    interval: Duration,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
    let Own {
        mut verdicts,
        mut table,
        mut certificates,
    } = own;
    let mut live_watch = chitchat.lock().await.live_nodes_watcher();
    let mut assembler = Assembler::default();
    let mut ticks = tokio::time::interval(interval / 2);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let cluster = membership.cluster.clone().unwrap_or_default();
    let generation = me.info.started_unix_ms;
    let mut counts = (usize::MAX, 0, 0);
    loop {
        tokio::select! {
            _ = live_watch.changed() => {}
            _ = verdicts.changed() => {}
            Ok(()) = table.changed() => {}
            Ok(()) = certificates.changed() => {}
            _ = ticks.tick() => {}
            () = shutdown.wait() => return,
        }
        let versions = assembler.versions();
        let gossiped = {
            let chitchat = chitchat.lock().await;
            let self_id = chitchat.self_chitchat_id().clone();
            let live: Vec<&ChitchatId> = chitchat.live_nodes().collect();
            let dead: Vec<&ChitchatId> = chitchat.dead_nodes().collect();
            chitchat
                .node_states()
                .iter()
                .filter(|(id, _)| **id != self_id)
                .map(|(id, state)| {
                    let key = (id.node_id.to_string(), id.generation_id);
                    let unchanged = versions.get(&key) == Some(&state.max_version());
                    Gossiped {
                        name: key.0,
                        generation: id.generation_id,
                        gossip: id.gossip_advertise_addr.to_string(),
                        heartbeat: u64::from(state.heartbeat()),
                        live: live.contains(&id),
                        dead: dead.contains(&id),
                        max_version: state.max_version(),
                        values: (!unchanged).then(|| {
                            state
                                .key_values_including_deleted()
                                .filter(|(_, v)| !matches!(v.status, DeletionStatus::Deleted(_)))
                                .map(|(k, v)| (k.to_string(), v.version, v.value.clone()))
                                .collect()
                        }),
                    }
                })
                .collect::<Vec<_>>()
        };
        let own = verdicts.borrow_and_update().clone();
        let own_table = table.borrow_and_update().clone();
        let own_certificates = certificates.borrow_and_update().clone();
        let me_now = self_member(
            &me,
            generation,
            membership.advertise,
            (&own, own_table, &own_certificates),
        );
        let (view, refused) =
            assembler.assemble(&me_now, &cluster, gossiped, now_unix_ms(), interval);
        for _ in 0..refused {
            metrics.value_refused();
        }
        let count = |l: Liveness| view.members.iter().filter(|m| m.liveness == l).count();
        let now_counts = (
            count(Liveness::Alive),
            count(Liveness::Suspect),
            count(Liveness::Dead),
        );
        if now_counts != counts {
            if counts.0 != usize::MAX {
                tracing::info!(
                    node = %me.info.name,
                    alive = now_counts.0,
                    suspect = now_counts.1,
                    dead = now_counts.2,
                    "cluster membership changed"
                );
            }
            metrics.members(now_counts.0, now_counts.1, now_counts.2);
            counts = now_counts;
        }
        membership.publish(view);
    }
}

/// A node without a cluster: its view is itself.
pub(super) async fn alone(membership: Arc<Membership>, me: Me, own: Own, mut shutdown: Shutdown) {
    let Own {
        mut verdicts,
        mut table,
        mut certificates,
    } = own;
    let generation = me.info.started_unix_ms;
    loop {
        let own = verdicts.borrow_and_update().clone();
        let own_table = table.borrow_and_update().clone();
        let own_certificates = certificates.borrow_and_update().clone();
        membership.publish(ClusterView {
            node: me.info.name.clone(),
            cluster: String::new(),
            taken_unix_ms: now_unix_ms(),
            members: vec![self_member(
                &me,
                generation,
                None,
                (&own, own_table, &own_certificates),
            )],
        });
        tokio::select! {
            changed = verdicts.changed() => if changed.is_err() { return },
            Ok(()) = table.changed() => {}
            Ok(()) = certificates.changed() => {}
            () = shutdown.wait() => return,
        }
    }
}
