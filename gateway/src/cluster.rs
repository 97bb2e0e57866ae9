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
//!   deleted when the route goes.
//!
//! Values are [`picket_proto::gossip`] text, bounded in size. The
//! generation id is the start time in milliseconds, so a restarted node's
//! old keys never come back as its new ones.
//!
//! ## Sealed gossip
//! With a cluster key every datagram is sealed ([`seal`], [`transport`]),
//! and bound to its sender's and its recipient's advertised addresses;
//! without one, only `insecure = true` lets a node gossip, and it says so.

pub mod seal;
mod transport;
pub mod view;

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::Engine as _;
use chitchat::transport::UdpTransport;
use chitchat::{
    ChitchatConfig, ChitchatHandle, ChitchatId, DeletionStatus, FailureDetectorConfig,
    ProtocolVersion, spawn_chitchat,
};
use picket_proto::gossip::{self, NODE_KEY, ROUTE_PREFIX};
use picket_proto::{ClusterView, Liveness, Member, NodeInfo, Verdict};
use tokio::sync::watch;

use crate::config::ClusterSettings;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::verdict::board::now_unix_ms;
pub use chitchat::transport::{ChannelTransport, Transport};
pub use seal::{Key, Keys};
pub use transport::SealedTransport;
use view::{Assembler, Gossiped};

/// The environment variable that may hold the cluster key(s).
pub const KEY_ENV: &str = "PICKET_CLUSTER_KEY";

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

/// Parses keys: base64 of 32 bytes each, one per line (`#` comments and
/// blank lines skipped) or separated by commas. `origin` names the source
/// in errors, with the line.
pub fn parse_keys(text: &str) -> Result<Keys, String> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        for item in line.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(item)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(item))
                .map_err(|_| format!("line {}: not base64", n + 1))?;
            let secret: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                format!("line {}: a key is 32 bytes, this is {}", n + 1, b.len())
            })?;
            keys.push(Key::new(&secret));
        }
    }
    Keys::new(keys).ok_or_else(|| "no key".to_string())
}

/// A fresh random key, base64, for `picket gen-key`.
pub fn generate_key() -> Option<String> {
    use ring::rand::SecureRandom;
    let mut secret = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut secret).ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(secret))
}

/// The cluster's keys: the key file (relative to the configuration's
/// directory), else [`KEY_ENV`]; `None` when neither is set.
pub fn load_keys(
    settings: &ClusterSettings,
    config_dir: Option<&Path>,
) -> Result<Option<Keys>, ClusterError> {
    if let Some(file) = &settings.key_file {
        let path: PathBuf = match config_dir {
            Some(dir) if file.is_relative() => dir.join(file),
            _ => file.clone(),
        };
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| ClusterError::KeyFile {
            file: shown.clone(),
            message: e.to_string(),
        })?;
        return parse_keys(&text)
            .map(Some)
            .map_err(|message| ClusterError::KeyFile {
                file: shown,
                message,
            });
    }
    match std::env::var(KEY_ENV) {
        Ok(text) if !text.trim().is_empty() => {
            parse_keys(&text).map(Some).map_err(ClusterError::KeyEnv)
        }
        _ => Ok(None),
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

    /// Leaves the cluster: stops gossiping.
    pub async fn leave(&self) {
        if let Some(handle) = self.handle.lock().await.take() {
            let _ = handle.shutdown().await;
        }
    }
}

/// How gossip reaches the network: sealed UDP normally, anything chitchat
/// can use in tests.
#[derive(Clone)]
pub enum Wire {
    /// The node's own gossip socket, already bound.
    Udp(Arc<std::sync::Mutex<Option<StdUdpSocket>>>),
    /// A transport given by a test (chitchat's in-memory one).
    Given(Arc<dyn Transport>),
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wire::Udp(_) => "Wire::Udp",
            Wire::Given(_) => "Wire::Given",
        })
    }
}

/// The address peers reach this node at: configured, the bound address,
/// or the local address of the route towards the first seed that resolves.
async fn advertise(settings: &ClusterSettings, bound: SocketAddr) -> SocketAddr {
    if let Some(addr) = settings.advertise {
        return addr;
    }
    if !bound.ip().is_unspecified() {
        return bound;
    }
    for seed in &settings.seeds {
        let Ok(mut addrs) = tokio::net::lookup_host(seed.as_str()).await else {
            continue;
        };
        let Some(seed) = addrs.next() else { continue };
        let local = if seed.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        if let Ok(probe) = StdUdpSocket::bind(local)
            && probe.connect(seed).is_ok()
            && let Ok(addr) = probe.local_addr()
        {
            return SocketAddr::new(addr.ip(), bound.port());
        }
    }
    tracing::warn!(%bound, "no advertise address and no seed to derive one from; peers cannot reach this node's gossip");
    SocketAddr::new([127, 0, 0, 1].into(), bound.port())
}

/// A listener's address as peers and operators reach it: one bound to
/// every interface is reached at the gossip advertise address's IP.
fn reachable(bound: &str, advertise: SocketAddr) -> String {
    match bound.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() && !advertise.ip().is_unspecified() => {
            SocketAddr::new(advertise.ip(), addr.port()).to_string()
        }
        _ => bound.to_string(),
    }
}

/// Hands chitchat a socket bound before the node started.
struct Prebound {
    socket: Arc<std::sync::Mutex<Option<StdUdpSocket>>>,
    sealed: Option<SealedTransport>,
}

#[async_trait::async_trait]
impl Transport for Prebound {
    async fn open(
        &self,
        listen: SocketAddr,
    ) -> anyhow::Result<Box<dyn chitchat::transport::Socket>> {
        let socket = self
            .socket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| anyhow::anyhow!("the gossip socket on {listen} was already opened"))?;
        socket.set_nonblocking(true)?;
        match &self.sealed {
            Some(sealed) => {
                sealed
                    .open_on(tokio::net::UdpSocket::from_std(socket)?)
                    .await
            }
            None => {
                // chitchat's own socket binds by address: hand the port back.
                let addr = socket.local_addr()?;
                drop(socket);
                UdpTransport.open(addr).await
            }
        }
    }
}

/// Starts this node's part of the cluster. Without `settings` the node is
/// alone: the view holds itself only.
pub async fn start(
    settings: Option<&ClusterSettings>,
    keys: Option<Keys>,
    wire: Wire,
    mut me: Me,
    verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) -> Result<Arc<Membership>, ClusterError> {
    let generation = me.info.started_unix_ms;
    let interval = settings.map_or(Duration::from_secs(1), |s| s.gossip_interval);
    let first = {
        let own = verdicts.borrow().clone();
        ClusterView {
            node: me.info.name.clone(),
            cluster: settings.map(|s| s.id.clone()).unwrap_or_default(),
            taken_unix_ms: now_unix_ms(),
            members: vec![self_member(&me, generation, None, &own)],
        }
    };
    let Some(settings) = settings else {
        let membership = Arc::new(Membership {
            view: ArcSwap::from_pointee(first.clone()),
            changes: watch::channel(Arc::new(first)).0,
            keys: None,
            advertise: None,
            cluster: None,
            info: me.info.clone(),
            handle: tokio::sync::Mutex::new(None),
        });
        tokio::spawn(follow_alone(
            Arc::clone(&membership),
            me,
            verdicts,
            shutdown,
        ));
        return Ok(membership);
    };
    let keys = match (keys, settings.insecure) {
        (Some(keys), _) => Some(Arc::new(ArcSwap::from_pointee(keys))),
        (None, true) => None,
        (None, false) => return Err(ClusterError::NoKey),
    };
    let bound = match &wire {
        Wire::Udp(socket) => socket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .unwrap_or(settings.gossip),
        Wire::Given(_) => settings.gossip,
    };
    let advertise = match &wire {
        Wire::Udp(_) => advertise(settings, bound).await,
        Wire::Given(_) => settings.advertise.unwrap_or(settings.gossip),
    };
    let transport: Box<dyn Transport> = match &wire {
        Wire::Udp(socket) => Box::new(Prebound {
            socket: Arc::clone(socket),
            sealed: keys.as_ref().map(|keys| SealedTransport {
                keys: Arc::clone(keys),
                metrics: metrics.gossip().clone(),
                advertise,
            }),
        }),
        Wire::Given(transport) => Box::new(Shared(Arc::clone(transport))),
    };
    me.info.admin = reachable(&me.info.admin, advertise);
    me.info.feed = me.info.feed.map(|feed| reachable(&feed, advertise));
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
    let config = ChitchatConfig {
        chitchat_id: ChitchatId::new(me.info.name.clone(), generation, advertise),
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
        extra_liveness_predicate: None,
        protocol_version: ProtocolVersion::V1,
    };
    let mut initial = vec![(NODE_KEY.to_string(), encoded(&me.info).unwrap_or_default())];
    let mut written = BTreeMap::new();
    for verdict in verdicts.borrow().iter() {
        if let Some(value) = encoded(&gossip::fit(verdict.clone())) {
            initial.push((format!("{ROUTE_PREFIX}{}", verdict.route), value.clone()));
            written.insert(verdict.route.clone(), value);
        }
    }
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
    });
    tokio::spawn(publish(
        Arc::clone(&chitchat),
        verdicts.clone(),
        written,
        shutdown.clone(),
    ));
    tokio::spawn(follow(
        Arc::clone(&membership),
        chitchat,
        me,
        verdicts,
        interval,
        metrics,
        shutdown.clone(),
    ));
    {
        let membership = Arc::clone(&membership);
        let mut shutdown = shutdown;
        tokio::spawn(async move {
            shutdown.wait().await;
            membership.leave().await;
        });
    }
    Ok(membership)
}

/// A transport shared with the test that made it.
struct Shared(Arc<dyn Transport>);

#[async_trait::async_trait]
impl Transport for Shared {
    async fn open(
        &self,
        listen: SocketAddr,
    ) -> anyhow::Result<Box<dyn chitchat::transport::Socket>> {
        self.0.open(listen).await
    }
}

fn encoded<T: serde::Serialize>(value: &T) -> Option<String> {
    match gossip::encode_value(value) {
        Ok(text) => Some(text),
        Err(error) => {
            tracing::warn!(%error, "a gossip value does not fit; not published");
            None
        }
    }
}

fn self_member(
    me: &Me,
    generation: u64,
    gossip: Option<SocketAddr>,
    verdicts: &[Verdict],
) -> Member {
    Member {
        name: me.info.name.clone(),
        gossip: gossip.map(|a| a.to_string()).unwrap_or_default(),
        generation,
        liveness: Liveness::Alive,
        heard_unix_ms: now_unix_ms(),
        info: Some(me.info.clone()),
        verdicts: verdicts.to_vec(),
    }
}

type Chitchat = Arc<tokio::sync::Mutex<chitchat::Chitchat>>;

/// Writes this node's verdicts when they change: changed routes set,
/// removed routes deleted, nothing else touched.
async fn publish(
    chitchat: Chitchat,
    mut verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    mut written: BTreeMap<String, String>,
    mut shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            changed = verdicts.changed() => if changed.is_err() { return },
            () = shutdown.wait() => return,
        }
        let now: BTreeMap<String, String> = verdicts
            .borrow_and_update()
            .iter()
            .filter_map(|v| Some((v.route.clone(), encoded(&gossip::fit(v.clone()))?)))
            .collect();
        let set: Vec<(String, String)> = now
            .iter()
            .filter(|(route, value)| written.get(*route) != Some(*value))
            .map(|(r, v)| (r.clone(), v.clone()))
            .collect();
        let gone: Vec<String> = written
            .keys()
            .filter(|route| !now.contains_key(*route))
            .cloned()
            .collect();
        if set.is_empty() && gone.is_empty() {
            continue;
        }
        {
            let mut chitchat = chitchat.lock().await;
            let own = chitchat.self_node_state();
            for (route, value) in &set {
                own.set(format!("{ROUTE_PREFIX}{route}"), value);
            }
            for route in &gone {
                own.delete(&format!("{ROUTE_PREFIX}{route}"));
            }
        }
        written = now;
    }
}

/// Reads gossip state into the view: on membership or state changes, on
/// this node's own verdict changes, and every half interval for ages.
async fn follow(
    membership: Arc<Membership>,
    chitchat: Chitchat,
    me: Me,
    mut verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    interval: Duration,
    metrics: Arc<Metrics>,
    mut shutdown: Shutdown,
) {
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
        let me_now = self_member(&me, generation, membership.advertise, &own);
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
async fn follow_alone(
    membership: Arc<Membership>,
    me: Me,
    mut verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    mut shutdown: Shutdown,
) {
    let generation = me.info.started_unix_ms;
    loop {
        let own = verdicts.borrow_and_update().clone();
        membership.publish(ClusterView {
            node: me.info.name.clone(),
            cluster: String::new(),
            taken_unix_ms: now_unix_ms(),
            members: vec![self_member(&me, generation, None, &own)],
        });
        tokio::select! {
            changed = verdicts.changed() => if changed.is_err() { return },
            () = shutdown.wait() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_from_lines_and_commas_and_say_where_they_are_wrong() {
        let a = generate_key().unwrap();
        let b = generate_key().unwrap();
        let keys = parse_keys(&format!("# rotation\n{a}\n\n{b}\n")).unwrap();
        assert_eq!(keys.labels().len(), 2);
        assert_eq!(
            parse_keys(&format!("{a}, {b}")).unwrap().labels(),
            keys.labels()
        );
        assert_eq!(
            parse_keys(&format!("{a}\nnot-base64!")).unwrap_err(),
            "line 2: not base64"
        );
        assert_eq!(
            parse_keys("c2hvcnQ=").unwrap_err(),
            "line 1: a key is 32 bytes, this is 5"
        );
        assert_eq!(parse_keys("# nothing\n").unwrap_err(), "no key");
    }
}
