//! Upstreams and their replicas: which replica a request goes to, and how
//! this node keeps replicas that fail to connect out of its rotation.
//!
//! ## Balancing
//! Round robin over the replicas in rotation, skipping those a request has
//! already tried. A stalled replica (a connect to it is overdue) is chosen
//! only when no replica is in rotation; an ejected one never is.
//!
//! ## Ejection and re-admission
//! A failed connect ejects the replica ([`health`]); a background probe
//! ([`probe`]) re-admits it with a plain TCP connect, one ejection period
//! after the ejection and every period after that until it answers.
//!
//! ## Data path reads, policy writes
//! A request reads one atomic per replica. The health state machine sits
//! behind a mutex that only connect outcomes and probes take, never across
//! an `.await`.

mod conn;
mod connect;
pub mod health;
mod pool;
mod probe;

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

pub use conn::{ConnError, Connection, Io, Release, UpstreamBody};
pub use connect::{Attempt, ConnectFailure, TlsTarget};
pub use pool::{Pool, Pools};

use crate::config::{RouteConfig, UpstreamConfig};
use crate::metrics::Metrics;
use health::{Change, Health, Observation};

/// How long a connect may be pending before the next replica is raced
/// against it and the replica counts as stalled. Connects on a LAN take well
/// under a millisecond; this only fires when a replica is in trouble.
pub const RACE_DELAY: Duration = Duration::from_millis(150);

/// Where a replica is reached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Addr(std::net::SocketAddr),
    /// A name resolved at every connect.
    Named {
        host: Arc<str>,
        port: u16,
    },
}

/// Identifies connections to one replica in a pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReplicaKey {
    pub target: Target,
    pub tls: bool,
}

const IN_ROTATION: u8 = 0;
const STALLED: u8 = 1;
const EJECTED: u8 = 2;

/// One address of an upstream, with this node's view of it.
#[derive(Debug)]
pub struct Replica {
    pub key: ReplicaKey,
    /// As shown in logs and metrics: `10.0.0.7:8080` or `billing.example.net:443`.
    pub label: String,
    /// Mirror of `health` for the data path.
    state: AtomicU8,
    health: Mutex<Health>,
    probing: std::sync::atomic::AtomicBool,
    ejections: Counter,
    readmissions: Counter,
}

impl Replica {
    pub fn in_rotation(&self) -> bool {
        self.state.load(Ordering::Relaxed) == IN_ROTATION
    }

    pub fn health(&self) -> Health {
        *self.health.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The replicas a request has tried, at most [`MAX_TRIES`].
#[derive(Debug, Default)]
pub struct Tried {
    replicas: [usize; MAX_TRIES],
    len: usize,
}

/// The highest `tries` a route can be configured with.
pub const MAX_TRIES: usize = 10;

impl Tried {
    pub fn contains(&self, replica: usize) -> bool {
        self.replicas[..self.len].contains(&replica)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, replica: usize) {
        if self.len < MAX_TRIES {
            self.replicas[self.len] = replica;
            self.len += 1;
        }
    }
}

/// A route's upstream on this node.
#[derive(Debug)]
pub struct Upstream {
    pub route: Arc<str>,
    pub replicas: Vec<Arc<Replica>>,
    pub pool: Arc<Pool>,
    pub tls: Option<TlsTarget>,
    /// Attempts per request, never more than there are replicas.
    pub tries: usize,
    pub eject_for: Duration,
    next: AtomicUsize,
    in_rotation: Gauge,
    this: Weak<Upstream>,
}

impl Upstream {
    pub fn new(
        route: &RouteConfig,
        pool: Arc<Pool>,
        tls: Option<TlsTarget>,
        metrics: &Metrics,
    ) -> Arc<Upstream> {
        let keys: Vec<(ReplicaKey, String)> = match &route.upstream {
            UpstreamConfig::Replicas(list) => list
                .iter()
                .map(|addr| {
                    let key = ReplicaKey {
                        target: Target::Addr(*addr),
                        tls: false,
                    };
                    (key, addr.to_string())
                })
                .collect(),
            UpstreamConfig::External(ext) => {
                let target = Target::Named {
                    host: ext.host.as_str().into(),
                    port: ext.port,
                };
                vec![(
                    ReplicaKey {
                        target,
                        tls: ext.tls,
                    },
                    format!("{}:{}", ext.host, ext.port),
                )]
            }
        };
        let replicas: Vec<Arc<Replica>> = keys
            .into_iter()
            .map(|(key, label)| {
                let (ejections, readmissions) = metrics.replica(&route.name, &label);
                Arc::new(Replica {
                    key,
                    label,
                    state: AtomicU8::new(IN_ROTATION),
                    health: Mutex::new(Health::InRotation),
                    probing: false.into(),
                    ejections,
                    readmissions,
                })
            })
            .collect();
        let in_rotation = metrics.replicas_in_rotation(&route.name);
        in_rotation.set(i64::try_from(replicas.len()).unwrap_or(i64::MAX));
        Arc::new_cyclic(|this| Upstream {
            route: route.name.as_str().into(),
            tries: (route.tries.value as usize).clamp(1, replicas.len().clamp(1, MAX_TRIES)),
            replicas,
            pool,
            tls,
            eject_for: route.eject_for.value,
            next: AtomicUsize::new(0),
            in_rotation,
            this: this.clone(),
        })
    }

    /// The next replica for a request, recorded in `tried`; `None` when the
    /// request used up its tries or no untried replica is available.
    pub fn next_untried(&self, tried: &mut Tried) -> Option<usize> {
        if tried.len() >= self.tries {
            return None;
        }
        let n = self.replicas.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let states = |wanted: u8| {
            (0..n).map(move |i| (start + i) % n).find(|&i| {
                !tried.contains(i) && self.replicas[i].state.load(Ordering::Relaxed) == wanted
            })
        };
        let chosen = states(IN_ROTATION).or_else(|| states(STALLED))?;
        tried.push(chosen);
        Some(chosen)
    }

    /// Feeds one observation of a replica to its health state machine and
    /// carries out the change: one log line, metrics, a probe on ejection.
    pub fn observe(&self, replica: usize, observation: Observation) {
        let Some(r) = self.replicas.get(replica) else {
            return;
        };
        let change = {
            let mut health = r.health.lock().unwrap_or_else(|e| e.into_inner());
            let (next, change) = health.observe(observation, Instant::now());
            *health = next;
            let state = match next {
                Health::InRotation => IN_ROTATION,
                Health::Stalled { .. } => STALLED,
                Health::Ejected { .. } => EJECTED,
            };
            r.state.store(state, Ordering::Relaxed);
            change
        };
        let Some(change) = change else { return };
        let route = &*self.route;
        let replica_label = r.label.as_str();
        match change {
            Change::Stalled => {
                tracing::debug!(
                    route,
                    replica = replica_label,
                    "connect overdue; replica avoided until it ends"
                );
            }
            Change::Unstalled => {
                tracing::debug!(route, replica = replica_label, "overdue connect succeeded");
            }
            Change::Ejected(reason) => {
                r.ejections.inc();
                tracing::warn!(
                    route,
                    replica = replica_label,
                    %reason,
                    eject_for = %humantime::format_duration(self.eject_for),
                    "replica ejected"
                );
                if !r.probing.swap(true, Ordering::AcqRel) {
                    probe::spawn(self.this.clone(), replica);
                }
            }
            Change::Readmitted => {
                r.readmissions.inc();
                tracing::info!(
                    route,
                    replica = replica_label,
                    "replica re-admitted after a successful probe"
                );
            }
        }
        let ready = self.replicas.iter().filter(|r| r.in_rotation()).count();
        self.in_rotation
            .set(i64::try_from(ready).unwrap_or(i64::MAX));
    }
}
