//! The cluster: each node gossips its own verdicts (chitchat), holds every
//! other node's, and shows them — for operators and scripts only.
//!
//! ## Read-only by construction
//! This module gets this node's verdicts as a watch of snapshots and gives
//! out a [`ClusterView`] of plain values. Nothing here holds the proxy,
//! a route, a replica or a circuit, and nothing there holds this: what
//! another node says can never change what this node does.
//!
//! ## Keys a node writes (only its own)
//! - `node`: its [`NodeInfo`];
//! - `route/NAME`: its verdict on route `NAME`, written when it changes,
//!   deleted when the route goes;
//! - `acme/…`: its ACME certificates' states, the certificates it passes
//!   on and the challenges it answers ([`picket_proto::acme`]), written by
//!   [`crate::acme`] through [`Membership::set_own`].
//!
//! Values are [`picket_proto::gossip`] text, bounded in size. The
//! generation id is the start time in milliseconds, so a restarted node's
//! old keys never come back as its new ones.
//!
//! ## Sealed gossip
//! With a cluster key every datagram is sealed ([`seal`], [`transport`]),
//! and bound to its sender's and its recipient's advertised addresses;
//! without one, only `insecure = true` lets a node gossip, and it says so.

mod advertise;
mod catch_up;
mod follow;
mod intern;
pub mod keys;
mod publish;
pub mod seal;
mod transport;
pub mod view;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use chitchat::{
    ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, ProtocolVersion,
    spawn_chitchat,
};
use picket_proto::gossip::{NODE_KEY, ROUTE_PREFIX, TABLE_KEY};
use picket_proto::{CertificateState, ClusterView, NodeInfo, TableGeneration, Verdict};
use tokio::sync::watch;

use crate::clock::now_unix_ms;
use crate::config::ClusterSettings;
use crate::metrics::Metrics;
use crate::shutdown::{Shutdown, Tasks};
pub use chitchat::transport::{ChannelTransport, Transport};
pub use keys::KEY_ENV;
pub use seal::{Key, Keys};
pub use transport::SealedTransport;
pub use wire::Wire;

/// How long a dead node stays in the view before it is forgotten.
pub const DEAD_NODE_GRACE: Duration = Duration::from_secs(3600);
/// How long a deleted key's tombstone is kept.
pub const TOMBSTONE_GRACE: Duration = Duration::from_secs(3600);

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{file}: {message}")]
    KeyFile { file: String, message: String },
    #[error("{KEY_ENV}: {0}")]
    KeyEnv(String),
    #[error(
        "[cluster] needs a key: set `key_file`, or {KEY_ENV}; or, knowingly, `insecure = true`"
    )]
    NoKey,
    #[error("gossip on {addr}: {message}")]
    Gossip { addr: SocketAddr, message: String },
}

/// One key of one node, as gossip holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub node: String,
    /// The failure detector counts the node live (this node is).
    pub live: bool,
    pub key: String,
    pub value: String,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A value may be part of a certificate's key: its length only.
        f.debug_struct("Entry")
            .field("node", &self.node)
            .field("live", &self.live)
            .field("key", &self.key)
            .field("value_len", &self.value.len())
            .finish()
    }
}

/// What this node says of itself, besides its verdicts.
#[derive(Debug, Clone)]
pub struct Me {
    pub info: NodeInfo,
}

/// The cluster as this node knows it, kept current in the background.
pub struct Membership {
    view: ArcSwap<ClusterView>,
    changes: watch::Sender<Arc<ClusterView>>,
    keys: Option<Arc<ArcSwap<Keys>>>,
    /// This node's gossip address as peers reach it.
    pub advertise: Option<SocketAddr>,
    pub cluster: Option<String>,
    pub info: NodeInfo,
    handle: tokio::sync::Mutex<Option<ChitchatHandle>>,
    /// This node's gossip state, to write keys of its own beside the
    /// verdicts (ACME); `None` alone.
    chitchat: Option<Chitchat>,
    /// Alone, the keys this node would gossip: what it reads back.
    local: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("cluster", &self.cluster)
            .field("advertise", &self.advertise)
            .finish_non_exhaustive()
    }
}

impl Membership {
    /// The view as last assembled.
    pub fn view(&self) -> Arc<ClusterView> {
        self.view.load_full()
    }

    /// Wakes on every new view.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterView>> {
        self.changes.subscribe()
    }

    fn publish(&self, view: ClusterView) {
        let view = Arc::new(view);
        self.view.store(Arc::clone(&view));
        self.changes.send_replace(view);
    }

    /// Whether gossip is sealed: keys can be replaced.
    pub fn sealed(&self) -> bool {
        self.keys.is_some()
    }

    /// Replaces the keys (a reload with a changed key file); returns
    /// whether they changed. The reload logs it.
    pub fn set_keys(&self, keys: Keys) -> bool {
        let Some(current) = &self.keys else {
            return false;
        };
        if current.load().labels() == keys.labels() {
            return false;
        }
        current.store(Arc::new(keys));
        true
    }

    /// Sets a key of this node's own gossip state.
    pub async fn set_own(&self, key: &str, value: &str) {
        match &self.chitchat {
            Some(chitchat) => chitchat.lock().await.self_node_state().set(key, value),
            None => {
                self.local_keys().insert(key.to_string(), value.to_string());
            }
        }
    }

    /// Deletes a key of this node's own gossip state.
    pub async fn delete_own(&self, key: &str) {
        match &self.chitchat {
            Some(chitchat) => {
                let mut chitchat = chitchat.lock().await;
                let own = chitchat.self_node_state();
                if own.contains_key(key) {
                    own.delete(key);
                }
            }
            None => {
                self.local_keys().remove(key);
            }
        }
    }

    fn local_keys(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, String>> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every node's ACME keys (this node's among them), whoever holds
    /// them, with whether the node counts as live.
    pub async fn acme_entries(&self) -> Vec<Entry> {
        const PREFIX: &str = "acme/";
        let Some(chitchat) = &self.chitchat else {
            return self
                .local_keys()
                .range::<str, _>((
                    std::ops::Bound::Included(PREFIX),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(key, _)| key.starts_with(PREFIX))
                .map(|(key, value)| Entry {
                    node: self.info.name.clone(),
                    live: true,
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect();
        };
        let chitchat = chitchat.lock().await;
        let live: std::collections::HashSet<&ChitchatId> = chitchat.live_nodes().collect();
        let mut entries = Vec::new();
        for (id, state) in chitchat.node_states() {
            let is_live = live.contains(id);
            for (key, value) in state.iter_prefix(PREFIX) {
                entries.push(Entry {
                    node: id.node_id.to_string(),
                    live: is_live,
                    key: key.to_string(),
                    value: value.value.clone(),
                });
            }
        }
        entries
    }

    /// Leaves the cluster: stops gossiping.
    pub async fn leave(&self) {
        if let Some(handle) = self.handle.lock().await.take() {
            let _ = handle.shutdown().await;
        }
    }
}

/// What a node starts its part of the cluster with.
#[derive(Debug)]
pub struct Joining<'a> {
    /// `None`: the node is alone, its view holds itself only.
    pub settings: Option<&'a ClusterSettings>,
    /// The cluster key(s), which reloads replace; `None` gossips
    /// unsealed, which only `insecure = true` allows.
    pub keys: Option<Arc<ArcSwap<Keys>>>,
    pub wire: Wire,
    pub me: Me,
    /// This node's own verdicts, as they change.
    pub verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    /// The generation of this node's route table, as it changes.
    pub table: watch::Receiver<Option<TableGeneration>>,
    /// This node's state of each ACME certificate, as it changes.
    pub certificates: watch::Receiver<Arc<Vec<CertificateState>>>,
    pub metrics: Arc<Metrics>,
}

type Chitchat = Arc<tokio::sync::Mutex<chitchat::Chitchat>>;

/// Starts this node's part of the cluster; its tasks (publish, follow,
/// leave at shutdown) go into `tasks`.
pub async fn start(
    joining: Joining<'_>,
    shutdown: Shutdown,
    tasks: &mut Tasks,
) -> Result<Arc<Membership>, ClusterError> {
    match joining.settings {
        None => Ok(alone(joining, shutdown, tasks)),
        Some(settings) => join(settings, joining, shutdown, tasks).await,
    }
}

/// The view before anything was heard: this node alone.
fn first_view(
    me: &Me,
    cluster: &str,
    verdicts: &Arc<Vec<Verdict>>,
    table: Option<TableGeneration>,
) -> ClusterView {
    let certificates: &[CertificateState] = &[];
    ClusterView {
        node: me.info.name.clone(),
        cluster: cluster.to_string(),
        taken_unix_ms: now_unix_ms(),
        members: vec![follow::self_member(
            me,
            me.info.started_unix_ms,
            None,
            (verdicts, table, certificates),
        )],
    }
}

fn alone(joining: Joining<'_>, shutdown: Shutdown, tasks: &mut Tasks) -> Arc<Membership> {
    let Joining {
        me,
        verdicts,
        table,
        certificates,
        ..
    } = joining;
    let first = first_view(&me, "", &verdicts.borrow(), table.borrow().clone());
    let membership = Arc::new(Membership {
        view: ArcSwap::from_pointee(first.clone()),
        changes: watch::channel(Arc::new(first)).0,
        keys: None,
        advertise: None,
        cluster: None,
        info: me.info.clone(),
        handle: tokio::sync::Mutex::new(None),
        chitchat: None,
        local: std::sync::Mutex::default(),
    });
    tasks.spawn(
        "view",
        follow::alone(
            Arc::clone(&membership),
            me,
            follow::Own {
                verdicts,
                table,
                certificates,
            },
            shutdown,
        ),
    );
    membership
}

async fn join(
    settings: &ClusterSettings,
    joining: Joining<'_>,
    shutdown: Shutdown,
    tasks: &mut Tasks,
) -> Result<Arc<Membership>, ClusterError> {
    let Joining {
        keys,
        wire,
        mut me,
        verdicts,
        table,
        certificates,
        metrics,
        ..
    } = joining;
    let first = first_view(
        &me,
        &settings.id,
        &verdicts.borrow(),
        table.borrow().clone(),
    );
    let keys = match (keys, settings.insecure) {
        (Some(keys), _) => Some(keys),
        (None, true) => None,
        (None, false) => return Err(ClusterError::NoKey),
    };
    let bound = wire.bound(settings.gossip);
    let advertise = match &wire {
        Wire::Udp(_) => advertise::discover(settings, bound).await,
        Wire::Given(_) => settings.advertise.unwrap_or(settings.gossip),
    };
    let transport = wire.transport(keys.as_ref(), metrics.gossip(), advertise);
    me.info.admin = advertise::reachable(&me.info.admin, advertise);
    me.info.feed = me
        .info
        .feed
        .map(|feed| advertise::reachable(&feed, advertise));
    match &keys {
        Some(keys) => tracing::info!(
            node = %me.info.name, cluster = %settings.id, gossip = %bound, %advertise, keys = ?keys.load().labels(),
            "gossip sealed with the cluster key"
        ),
        None => tracing::warn!(
            node = %me.info.name, cluster = %settings.id, gossip = %bound, %advertise,
            "gossip is INSECURE: anyone who can send UDP to the gossip port can join the cluster and write verdicts into its view"
        ),
    }
    let written = publish::values(&verdicts.borrow());
    let mut initial = vec![(
        NODE_KEY.to_string(),
        publish::encoded(&me.info).unwrap_or_default(),
    )];
    initial.extend(
        table
            .borrow()
            .as_ref()
            .and_then(publish::encoded)
            .map(|value| (TABLE_KEY.to_string(), value)),
    );
    initial.extend(
        written
            .iter()
            .map(|(route, value)| (format!("{ROUTE_PREFIX}{route}"), value.clone())),
    );
    let config = chitchat_config(settings, &me, advertise, bound);
    let handle = spawn_chitchat(config, initial, transport.as_ref())
        .await
        .map_err(|e| ClusterError::Gossip {
            addr: bound,
            message: format!("{e:#}"),
        })?;
    let chitchat = handle.chitchat();
    let membership = Arc::new(Membership {
        view: ArcSwap::from_pointee(first.clone()),
        changes: watch::channel(Arc::new(first)).0,
        keys,
        advertise: Some(advertise),
        cluster: Some(settings.id.clone()),
        info: me.info.clone(),
        handle: tokio::sync::Mutex::new(Some(handle)),
        chitchat: Some(Arc::clone(&chitchat)),
        local: std::sync::Mutex::default(),
    });
    tasks.spawn(
        "gossip publish",
        publish::run(
            Arc::clone(&chitchat),
            verdicts.clone(),
            table.clone(),
            written,
            shutdown.clone(),
        ),
    );
    tasks.spawn(
        "gossip catch-up",
        catch_up::run(
            Arc::clone(&membership),
            Arc::clone(&chitchat),
            settings.gossip_interval,
            Arc::clone(&metrics),
            shutdown.clone(),
        ),
    );
    tasks.spawn(
        "gossip follow",
        follow::run(
            Arc::clone(&membership),
            chitchat,
            me,
            follow::Own {
                verdicts,
                table,
                certificates,
            },
            settings.gossip_interval,
            metrics,
            shutdown.clone(),
        ),
    );
    {
        let membership = Arc::clone(&membership);
        let mut shutdown = shutdown;
        tasks.spawn("gossip leave", async move {
            shutdown.wait().await;
            membership.leave().await;
        });
    }
    Ok(membership)
}

/// chitchat's settings for this node: its id (name, generation, the
/// address peers reach it at), the failure detector scaled to the gossip
/// interval, and the graces of dead nodes and deleted keys.
fn chitchat_config(
    settings: &ClusterSettings,
    me: &Me,
    advertise: SocketAddr,
    bound: SocketAddr,
) -> ChitchatConfig {
    ChitchatConfig {
        chitchat_id: ChitchatId::new(me.info.name.clone(), me.info.started_unix_ms, advertise),
        cluster_id: settings.id.clone(),
        gossip_interval: settings.gossip_interval,
        listen_addr: bound,
        seed_nodes: settings.seeds.clone(),
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: 8.0,
            sampling_window_size: 1000,
            max_interval: settings.gossip_interval * 10,
            initial_interval: settings.gossip_interval * 2,
            dead_node_grace_period: DEAD_NODE_GRACE,
        },
        marked_for_deletion_grace_period: TOMBSTONE_GRACE,
        catchup_callback: None,
        // chitchat sends every live node's whole state (a copy of every
        // key and value) on its live-nodes watch each time a node's
        // version moves, and keeps the last one sent: at 100 nodes x
        // 1,000 routes a second copy of all gossip, made again at every
        // change. This node reads that watch only as a wake-up and reads
        // liveness from the failure detector, so the predicate, consulted
        // before each copy, keeps the map empty. Nothing else reads it.
        extra_liveness_predicate: Some(Box::new(|_| false)),
        protocol_version: ProtocolVersion::V1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, port: u16) -> (ClusterSettings, Me, SocketAddr) {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let settings = ClusterSettings {
            id: "test".into(),
            gossip: addr,
            advertise: None,
            seeds: vec!["127.0.0.1:47001".into()],
            key_file: None,
            insecure: true,
            gossip_interval: Duration::from_millis(50),
        };
        let me = Me {
            info: NodeInfo {
                name: name.into(),
                version: "test".into(),
                admin: "127.0.0.1:9900".into(),
                feed: None,
                feed_fingerprint: None,
                runtime: "none".into(),
                started_unix_ms: 1,
            },
        };
        (settings, me, addr)
    }

    /// Guards a node's memory at scale: chitchat's live-nodes watch must
    /// not hold a copy of every node's keys and values, while it still
    /// wakes the view and the failure detector still counts both live.
    #[tokio::test]
    async fn chitchat_keeps_no_copy_of_the_live_nodes_states() {
        let transport = ChannelTransport::default();
        let mut handles = Vec::new();
        for (name, port) in [("a", 47001), ("b", 47002)] {
            let (settings, me, addr) = node(name, port);
            let config = chitchat_config(&settings, &me, addr, addr);
            let values = vec![(format!("{ROUTE_PREFIX}api"), format!("from {name}"))];
            handles.push(
                spawn_chitchat(config, values, &transport)
                    .await
                    .expect("chitchat starts"),
            );
        }
        let chitchat = handles[0].chitchat();
        let mut woken = chitchat.lock().await.live_nodes_watcher();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (live, values) = {
                let c = chitchat.lock().await;
                let values: usize = c.node_states().values().map(|s| s.num_key_values()).sum();
                (c.live_nodes().count(), values)
            };
            if live == 2 && values >= 2 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a never saw b: {live} live"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            woken.has_changed().unwrap_or(false),
            "the watch still wakes"
        );
        assert!(woken.borrow_and_update().is_empty());
        for handle in handles {
            let _ = handle.shutdown().await;
        }
    }
}
