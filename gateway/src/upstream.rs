//! Upstreams and their replicas: which replica a request goes to, and how
//! this node keeps replicas out of its rotation.
//!
//! ## The replica set
//! A static route's replicas come from the configuration; a service's come
//! from the runtime and change as it reports ([`Upstream::set_endpoints`]):
//! a new ready replica joins at once, a replica reported stopped or not
//! ready leaves the rotation before any request fails on it. The set is
//! swapped whole; a request reads one snapshot of it.
//!
//! ## Rotation
//! A replica takes requests when the runtime (or the connect check) says
//! it is ready *and* this node has not ejected it. Round robin over those,
//! skipping replicas a request has already tried. A stalled replica (a
//! connect to it is overdue) is chosen only when no replica is in
//! rotation; an ejected one never is.
//!
//! ## Ejection and re-admission
//! A failed connect ejects the replica ([`health`]), and so does a request
//! on it that got no response head within the first-answer bound, while
//! another replica is in rotation ([`Upstream::silent`]); a silent one is
//! back when its runtime reports it ready again after not ready; a background probe
//! ([`probe`]) re-admits it with a connect made as requests make it (through
//! the route's forward proxy, TLS handshake included), one ejection period
//! after the ejection and every period after that until it answers.
//!
//! ## Data path reads, policy writes
//! A request reads one snapshot of the set and two atomics per replica.
//! The health state machine sits behind a mutex that only connect outcomes
//! and probes take, never across an `.await`. Every change that can move a
//! verdict wakes the node's verdict task through `changes`.

mod conn;
mod connect;
mod failure;
pub mod forward_proxy;
pub mod handshake;
pub mod health;
mod http1;
pub mod http2;
mod http_check;
mod io;
mod pool;
mod probe;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

pub use conn::{Conn, UpstreamBody};
pub use connect::{Attempt, TlsTarget, tcp_connect};
pub use failure::ConnectFailure;
pub use forward_proxy::{ForwardProxy, ProxyEnv};
pub use http1::{ConnError, Connection};
pub use io::Io;
pub use pool::{Pool, Pools};

use crate::changes::Changes;
use crate::config::{RouteConfig, UpstreamConfig};
use crate::metrics::Metrics;
use health::{Change, EjectReason, Health, Observation};

/// Where a connection goes when the body it carries has ended. While it
/// lives, the replica counts a connection serving a body
/// ([`Pool::holds`]).
pub struct Release {
    upstream: Arc<Upstream>,
    replica: Arc<Replica>,
}

impl Release {
    pub fn new(upstream: Arc<Upstream>, replica: Arc<Replica>) -> Release {
        replica.lent.fetch_add(1, Ordering::Relaxed);
        Release { upstream, replica }
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        self.replica.lent.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a connect may be pending before the next replica is raced
/// against it and the replica counts as stalled. Connects on a LAN take well
/// under a millisecond; this only fires when a replica is in trouble.
pub const RACE_DELAY: Duration = Duration::from_millis(150);

/// Where a replica is reached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Addr(SocketAddr),
    /// A name resolved at every connect.
    Named {
        host: Arc<str>,
        port: u16,
    },
}

impl Target {
    /// `host:port`, as a `Host` header or `CONNECT` names it (an IPv6
    /// address in brackets).
    pub fn authority(&self) -> String {
        match self {
            Target::Addr(addr) => addr.to_string(),
            Target::Named { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Target::Named { host, port } => format!("{host}:{port}"),
        }
    }
}

/// Identifies connections to one replica in a pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReplicaKey {
    pub target: Target,
    /// 0: plain TCP; else the TLS settings' profile
    /// ([`crate::tls::profile`]): connections made with one client
    /// identity or one set of roots never serve another.
    pub tls: u64,
    /// Its connections go through a forward proxy: never pooled with
    /// direct ones to the same target.
    pub proxied: bool,
    /// The protocol its connections speak.
    pub protocol: crate::config::Protocol,
}

const IN_ROTATION: u8 = 0;
const STALLED: u8 = 1;
const EJECTED: u8 = 2;
const PROBATION: u8 = 3;

/// One address of an upstream: what the runtime says of it, and this
/// node's own view of it.
#[derive(Debug)]
pub struct Replica {
    pub key: ReplicaKey,
    /// As shown in logs and metrics: `10.0.0.7:8080`,
    /// `billing.example.net:443`, or a runtime's name for it (a pod, a
    /// container) with its address.
    pub label: String,
    /// What the runtime calls it; the address for a static replica.
    pub id: String,
    /// Its readiness comes from this node's connect check, not a runtime.
    pub checked: bool,
    /// Ready, as the runtime or the connect check last said.
    ready: AtomicBool,
    /// The labels of the images it runs, when the runtime tells
    /// ([`Endpoint::images`]).
    images: Mutex<Arc<[String]>>,
    /// Mirror of `health` for the data path.
    state: AtomicU8,
    health: Mutex<Health>,
    probing: AtomicBool,
    /// Its answers that were 502, 503 or 504, in a row.
    gateway_errors: AtomicU32,
    /// Its answers that broke off before their end, in a row.
    broken_answers: AtomicU32,
    /// Failing traffic in a row while no other replica is in rotation,
    /// and so kept: why. `failing_now` mirrors it for the data path.
    failing: Mutex<Option<EjectReason>>,
    failing_now: AtomicBool,
    /// On probation, a trial request is under way.
    trial: AtomicBool,
    /// Requests sent to it that have no answer head yet ([`Awaiting`]).
    awaiting: AtomicU32,
    /// Answer bodies being read from it now, each on a connection of its own
    /// (HTTP/1) or a stream ([`Release`]).
    lent: AtomicU32,
    /// New connections to it fail while pooled connections still reach
    /// it (its name no longer resolves, its certificate is refused): why,
    /// as the last check saw it.
    new_refused: Mutex<Option<Arc<str>>>,
    /// When the certificate it presented to the last check expires (Unix
    /// seconds; 0: not known), and the day (Unix days) its expiry was last
    /// warned of.
    cert_not_after: std::sync::atomic::AtomicI64,
    cert_warned_day: std::sync::atomic::AtomicI64,
    /// Its ejections for what it answered since it last served well: each
    /// lasts twice as long as the one before ([`health::ejection_period`]).
    ejections_in_a_row: AtomicU32,
    ejections: Counter,
    readmissions: Counter,
    /// Its idle connections, from its pool on first use.
    idle: std::sync::OnceLock<Arc<pool::IdleStack>>,
}

impl Replica {
    fn new(
        key: ReplicaKey,
        id: String,
        checked: bool,
        ready: bool,
        images: &[String],
        route: &str,
        metrics: &Metrics,
    ) -> Arc<Replica> {
        let label = match &key.target {
            Target::Addr(addr) if addr.to_string() == id => id.clone(),
            Target::Addr(addr) => format!("{id} {addr}"),
            Target::Named { host, port } if format!("{host}:{port}") == id => id.clone(),
            Target::Named { host, port } => format!("{id} {host}:{port}"),
        };
        let (ejections, readmissions) = metrics.replica(route, &label);
        Arc::new(Replica {
            key,
            label,
            id,
            checked,
            ready: AtomicBool::new(ready),
            images: Mutex::new(images.into()),
            state: AtomicU8::new(IN_ROTATION),
            health: Mutex::new(Health::InRotation),
            probing: false.into(),
            gateway_errors: AtomicU32::new(0),
            broken_answers: AtomicU32::new(0),
            failing: Mutex::new(None),
            failing_now: AtomicBool::new(false),
            trial: AtomicBool::new(false),
            awaiting: AtomicU32::new(0),
            lent: AtomicU32::new(0),
            new_refused: Mutex::new(None),
            cert_not_after: std::sync::atomic::AtomicI64::new(0),
            cert_warned_day: std::sync::atomic::AtomicI64::new(i64::MIN),
            ejections_in_a_row: AtomicU32::new(0),
            ejections,
            readmissions,
            idle: std::sync::OnceLock::new(),
        })
    }

    /// Takes requests: ready, and not stalled or ejected by this node.
    pub fn in_rotation(&self) -> bool {
        self.ready() && self.state.load(Ordering::Relaxed) == IN_ROTATION
    }

    /// Ready, as the runtime or the connect check last said.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The labels of the images it runs.
    pub fn images(&self) -> Arc<[String]> {
        Arc::clone(&self.images.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn health(&self) -> Health {
        *self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why new connections to it fail, while pooled connections still
    /// reach it.
    pub fn new_refused(&self) -> Option<Arc<str>> {
        self.new_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// When the certificate it presented to this node's last check
    /// expires, in Unix seconds; `None` for a plain replica, or before a
    /// check.
    pub fn certificate_not_after(&self) -> Option<i64> {
        Some(self.cert_not_after.load(Ordering::Relaxed)).filter(|t| *t != 0)
    }

    /// Its ejections for what it answered since it last served well.
    pub fn ejections_in_a_row(&self) -> u32 {
        self.ejections_in_a_row.load(Ordering::Relaxed)
    }

    /// Why it fails traffic while kept in rotation, the only replica left;
    /// `None` while it serves (or is ejected).
    pub fn failing(&self) -> Option<EjectReason> {
        if !self.failing_now.load(Ordering::Relaxed) {
            return None;
        }
        *self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A replica as a runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The runtime's name for it: a pod, a container.
    pub id: String,
    /// Where it is reached; `None` while it has no address (not started).
    pub target: Option<Target>,
    pub ready: bool,
    /// The labels (`targets::image::label`) of every
    /// image it runs: a pod's app and its sidecars, a container's one
    /// image; empty when the runtime does not tell.
    pub images: Vec<String>,
    /// Its readiness comes from this node's connect check (a Kubernetes
    /// Service without selector, or RBAC forbidding the watch).
    pub checked: bool,
}

/// Where a replica without an address is filed; never dialled.
const NOWHERE: Target = Target::Addr(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    0,
));

/// The highest `tries` a route can be configured with.
pub const MAX_TRIES: usize = 10;

/// The replicas a request has tried, at most [`MAX_TRIES`], and the trial
/// it holds, if it went to a replica on probation.
#[derive(Debug, Default)]
pub struct Tried {
    /// Identities (addresses) of the replicas.
    replicas: [usize; MAX_TRIES],
    len: usize,
    trial: Option<Trial>,
}

/// The one trial request of a replica on probation, held while the request
/// that took it lives: the next may go once it is answered (or given up).
#[derive(Debug)]
struct Trial(Arc<Replica>);

impl Drop for Trial {
    fn drop(&mut self) {
        self.0.trial.store(false, Ordering::Release);
    }
}

/// A request sent to a replica and not yet answered, counted on the
/// replica while it lives: a replica that has gone silent holds each
/// request it took until the first-answer bound, and the count passes it
/// over meanwhile ([`Upstream::next_untried`]).
#[derive(Debug)]
pub struct Awaiting<'r>(&'r Replica);

impl Awaiting<'_> {
    pub fn new(replica: &Replica) -> Awaiting<'_> {
        replica.awaiting.fetch_add(1, Ordering::Relaxed);
        Awaiting(replica)
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.0.awaiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Tried {
    fn id(replica: &Arc<Replica>) -> usize {
        Arc::as_ptr(replica) as usize
    }

    pub fn contains(&self, replica: &Arc<Replica>) -> bool {
        self.replicas[..self.len].contains(&Tried::id(replica))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, replica: &Arc<Replica>) {
        if self.len < MAX_TRIES {
            self.replicas[self.len] = Tried::id(replica);
            self.len += 1;
        }
    }
}

/// Where an upstream's replicas come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `replicas = [...]`: checked by TCP connect.
    Static,
    /// `upstream = "https://..."`: checked by a connect as requests make
    /// it (TLS handshake included, through the forward proxy if any).
    External,
    /// `service = "..."`: reported by the runtime.
    Runtime,
}

/// A route's upstream on this node.
#[derive(Debug)]
pub struct Upstream {
    pub route: Arc<str>,
    pub source: Source,
    replicas: ArcSwap<Vec<Arc<Replica>>>,
    pub pool: Arc<Pool>,
    pub tls: Option<TlsTarget>,
    /// Why a runtime service has no replicas the node can know of (a
    /// right the runtime refuses it), when that is why.
    unresolved: Mutex<Option<Arc<str>>>,
    /// The same TLS for checks and probes, which never resume a session:
    /// each sees and verifies the replica's certificate as it is now.
    check_tls: Option<TlsTarget>,
    /// The forward proxy every connection goes through (external hosts
    /// behind `HTTP_PROXY`/`HTTPS_PROXY` only).
    pub via: Option<ForwardProxy>,
    /// Attempts per request as configured; never more than the replicas.
    tries: usize,
    pub eject_for: Duration,
    /// The protocol spoken to its replicas.
    pub protocol: crate::config::Protocol,
    /// How replicas that no runtime reports on are checked.
    pub check: crate::config::CheckKind,
    /// Header names holding `_` pass (trailers of HTTP/2 replicas):
    /// `[global] underscores_in_headers`, which a reload may change.
    underscores: AtomicBool,
    /// Gateway errors in a row that eject a replica.
    eject_after: u32,
    next: AtomicUsize,
    in_rotation: Gauge,
    metrics: Arc<Metrics>,
    /// Wakes the node's verdict task.
    changes: Arc<Changes>,
    this: Weak<Upstream>,
}

impl Upstream {
    pub fn new(
        route: &RouteConfig,
        pool: Arc<Pool>,
        tls: Option<TlsTarget>,
        via: Option<ForwardProxy>,
        metrics: &Arc<Metrics>,
        changes: Arc<Changes>,
    ) -> Arc<Upstream> {
        let name = route.name.as_str();
        let profile = tls.as_ref().map_or(0, |t| t.profile);
        let (source, replicas): (Source, Vec<Arc<Replica>>) = match &route.upstream {
            UpstreamConfig::Replicas(list) => (
                Source::Static,
                list.iter()
                    .map(|addr| {
                        let key = ReplicaKey {
                            target: Target::Addr(*addr),
                            tls: profile,
                            proxied: false,
                            protocol: route.protocol,
                        };
                        Replica::new(key, addr.to_string(), true, true, &[], name, metrics)
                    })
                    .collect(),
            ),
            UpstreamConfig::External(ext) => {
                let target = Target::Named {
                    host: ext.host.as_str().into(),
                    port: ext.port,
                };
                let label = format!("{}:{}", ext.host, ext.port);
                {
                    let key = ReplicaKey {
                        target,
                        tls: profile,
                        proxied: via.is_some(),
                        protocol: route.protocol,
                    };
                    (
                        Source::External,
                        vec![Replica::new(key, label, true, true, &[], name, metrics)],
                    )
                }
            }
            // Empty until the runtime reports.
            UpstreamConfig::Service { .. } => (Source::Runtime, Vec::new()),
        };
        let in_rotation = metrics.replicas_in_rotation(name);
        in_rotation.set(i64::try_from(replicas.len()).unwrap_or(i64::MAX));
        Arc::new_cyclic(|this| Upstream {
            route: name.into(),
            source,
            tries: (route.tries.value as usize).clamp(1, MAX_TRIES),
            replicas: ArcSwap::from_pointee(replicas),
            pool,
            unresolved: Mutex::new(None),
            check_tls: tls.as_ref().map(TlsTarget::without_resumption),
            tls,
            via,
            eject_for: route.eject_for.value,
            protocol: route.protocol,
            check: route.check.clone(),
            underscores: AtomicBool::new(route.underscores_in_headers),
            eject_after: route.consecutive_gateway_errors.value,
            next: AtomicUsize::new(0),
            in_rotation,
            metrics: Arc::clone(metrics),
            changes,
            this: this.clone(),
        })
    }

    /// Whether header names holding `_` pass.
    pub fn underscores(&self) -> bool {
        self.underscores.load(Ordering::Relaxed)
    }

    /// `[global] underscores_in_headers` after a reload.
    pub fn set_underscores(&self, underscores: bool) {
        self.underscores.store(underscores, Ordering::Relaxed);
    }

    /// The replica set now.
    pub fn replicas(&self) -> Arc<Vec<Arc<Replica>>> {
        self.replicas.load_full()
    }

    /// Attempts a request may make now: the configured tries, never more
    /// than there are replicas.
    pub fn tries(&self) -> usize {
        self.tries.min(self.replicas.load().len()).max(1)
    }

    /// The next replica for a request, recorded in `tried`; `None` when the
    /// request used up its tries or no untried replica is available.
    pub fn next_untried(&self, tried: &mut Tried) -> Option<Arc<Replica>> {
        let replicas = self.replicas.load();
        // Bounded by the tries alone, not by the replicas there are now: a
        // replica removed while a connect to it is pending (a task stopped
        // by a rolling update) must not keep the connect from racing the
        // next one. Only untried replicas are picked below.
        if tried.len() >= self.tries {
            return None;
        }
        let n = replicas.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let pick = |wanted: &dyn Fn(&Replica, u8) -> bool| {
            (0..n).map(|i| &replicas[(start + i) % n]).find(|r| {
                r.ready() && !tried.contains(r) && wanted(r, r.state.load(Ordering::Relaxed))
            })
        };
        // A replica on probation takes its turn when its one trial is free
        // (and this request holds no other).
        let may_trial = tried.trial.is_none();
        // Whether the pick took a trial slot: known from the slot itself,
        // not from the state, which may move on meanwhile.
        let took_trial = std::cell::Cell::new(false);
        let serving = |r: &Replica, state: u8| {
            if state == IN_ROTATION {
                return true;
            }
            let took = state == PROBATION
                && may_trial
                && r.trial
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
            took_trial.set(took);
            took
        };
        let chosen = pick(&serving)
            .map(|first| match took_trial.get() {
                true => first,
                false => self.less_awaited(&replicas, first, &*tried),
            })
            .or_else(|| pick(&|_, state| state == STALLED))
            .or_else(|| {
                // Panic routing: ejection may shrink a rotation, never
                // empty it. With no ready replica in rotation or stalled,
                // requests still go to those on probation or ejected,
                // however many at once (the verdict is red meanwhile), so
                // that a lone replica back from a restart serves at once.
                let none_left = !replicas.iter().any(|r| {
                    r.ready() && matches!(r.state.load(Ordering::Relaxed), IN_ROTATION | STALLED)
                });
                none_left
                    .then(|| pick(&|_, state| state == PROBATION || state == EJECTED))
                    .flatten()
            })?;
        let chosen = Arc::clone(chosen);
        if took_trial.get() {
            tried.trial = Some(Trial(Arc::clone(&chosen)));
        }
        tried.push(&chosen);
        Some(chosen)
    }

    /// `first`, the replica in rotation whose turn it is, or the next one
    /// in rotation when that one awaits fewer answers: the choice of two
    /// (Envoy's least-request balancing, with the turn order in place of
    /// chance). Replicas that answer promptly await none and take their
    /// turns; one that has gone silent holds every request it took until
    /// the first-answer bound, and is passed over meanwhile, so that only
    /// the first request it swallows waits the bound out, not every other
    /// one until the node has learnt of its silence.
    fn less_awaited<'r>(
        &self,
        replicas: &'r [Arc<Replica>],
        first: &'r Arc<Replica>,
        tried: &Tried,
    ) -> &'r Arc<Replica> {
        let load = |r: &Replica| r.awaiting.load(Ordering::Relaxed);
        let waiting = load(first);
        if waiting == 0 {
            return first;
        }
        let n = replicas.len();
        let Some(at) = replicas.iter().position(|r| Arc::ptr_eq(r, first)) else {
            return first;
        };
        (1..n)
            .map(|i| &replicas[(at + i) % n])
            .find(|r| r.in_rotation() && !tried.contains(r))
            .filter(|second| load(second) < waiting)
            .unwrap_or(first)
    }

    /// A request on `replica` got no response head within the first-answer
    /// bound: the replica is ejected as silent, unless no other replica of
    /// the route is in rotation. The last one keeps taking requests, each
    /// bounded, rather than the route answering 502 to all; its silences
    /// count as the 504s its clients get, and enough of them in a row mark
    /// it as failing traffic ([`Upstream::answered`]).
    pub fn silent(&self, replica: &Arc<Replica>) {
        if self.others_in_rotation(replica) {
            self.observe(replica, Observation::TrafficFailed(EjectReason::Silent));
        } else {
            self.answered(replica, http::StatusCode::GATEWAY_TIMEOUT);
        }
    }

    /// An exchange with `replica` failed before any answer: the connection
    /// closed or was reset after the request went out, or the head did not
    /// parse. Counted as the 502 its client gets. (A pooled connection the
    /// replica closed while idle is no failure: the request is sent again
    /// on a fresh one first.)
    pub fn unanswered(&self, replica: &Arc<Replica>) {
        self.answered(replica, http::StatusCode::BAD_GATEWAY);
    }

    /// The replica failed traffic `reason` times in a row: ejected while
    /// another replica is in rotation; else kept, the only one left, and
    /// marked as failing (the verdict does not count it as ready, and says
    /// why it is kept), once.
    fn failed_in_a_row(&self, replica: &Arc<Replica>, reason: EjectReason) {
        if self.others_in_rotation(replica) {
            self.observe(replica, Observation::TrafficFailed(reason));
            return;
        }
        let mut failing = replica.failing.lock().unwrap_or_else(|e| e.into_inner());
        let first = failing.is_none();
        *failing = Some(reason);
        drop(failing);
        replica.failing_now.store(true, Ordering::Relaxed);
        if first {
            tracing::warn!(
                route = &*self.route,
                replica = %replica.label,
                %reason,
                "replica fails traffic; kept in rotation: no other replica"
            );
            self.changed();
        }
    }

    /// `replica` served: a failing mark of the kind `served` undoes (an
    /// answer that is no gateway error undoes gateway errors and silences;
    /// a body that ended whole undoes broken answers) is cleared, once.
    /// One relaxed load when all is well.
    fn served(&self, replica: &Replica, whole_body: bool) {
        if !replica.failing_now.load(Ordering::Relaxed) {
            return;
        }
        let mut failing = replica.failing.lock().unwrap_or_else(|e| e.into_inner());
        let undone = match *failing {
            Some(EjectReason::Broken { .. }) => whole_body,
            Some(_) => !whole_body,
            None => false,
        };
        if !undone {
            return;
        }
        *failing = None;
        drop(failing);
        self.unmarked(replica, "replica serves traffic again");
    }

    /// A failing mark just taken off `replica`: its mirror, one log line,
    /// and the verdict judged again.
    fn unmarked(&self, replica: &Replica, what: &'static str) {
        replica.failing_now.store(false, Ordering::Relaxed);
        tracing::info!(route = &*self.route, replica = %replica.label, "{what}");
        self.changed();
    }

    /// The connections that served `replica` while new ones failed are
    /// gone: its note goes quietly (the ejection that follows says why).
    pub fn pooled_gone(&self, replica: &Replica) {
        let mut note = replica
            .new_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if note.take().is_some() {
            drop(note);
            self.changed();
        }
    }

    /// A health check of `replica` that it answered (HTTP, gRPC) passed:
    /// back from any ejection, off probation, and a lone replica's failing
    /// mark cleared whatever its kind. No client has to be its trial.
    pub fn check_answered(&self, replica: &Arc<Replica>) {
        self.observe(replica, Observation::Answered);
        if !replica.failing_now.load(Ordering::Relaxed) {
            return;
        }
        let mut failing = replica.failing.lock().unwrap_or_else(|e| e.into_inner());
        if failing.take().is_none() {
            return;
        }
        drop(failing);
        self.unmarked(replica, "replica answers its health check again");
    }

    /// Whether a replica other than `replica` takes requests.
    fn others_in_rotation(&self, replica: &Arc<Replica>) -> bool {
        self.replicas
            .load()
            .iter()
            .any(|r| !Arc::ptr_eq(r, replica) && r.in_rotation())
    }

    /// A replica answered `status`. Its answers of 502, 503 or 504 are
    /// counted in a row (any other answer, a 500 included, starts the count
    /// again); at `consecutive_gateway_errors` it is ejected, while another
    /// replica is in rotation, as Envoy's consecutive gateway failure
    /// detection does. One relaxed load per answer when all is well.
    pub fn answered(&self, replica: &Arc<Replica>, status: http::StatusCode) {
        let status = status.as_u16();
        let errors = &replica.gateway_errors;
        let before = errors.load(Ordering::Relaxed);
        let count = health::gateway_errors(before, status);
        if count == 0 {
            self.served(replica, false);
            if replica.state.load(Ordering::Relaxed) == PROBATION {
                self.observe(replica, Observation::Served);
            }
        } else if replica.state.load(Ordering::Relaxed) == PROBATION
            && self.others_in_rotation(replica)
        {
            // A trial that fails ejects at once, for longer.
            errors.store(0, Ordering::Relaxed);
            self.observe(
                replica,
                Observation::TrafficFailed(EjectReason::Answers { status, count: 1 }),
            );
            return;
        }
        if count == before {
            return;
        }
        errors.store(count, Ordering::Relaxed);
        if count >= self.eject_after {
            errors.store(0, Ordering::Relaxed);
            self.failed_in_a_row(replica, EjectReason::Answers { status, count });
        }
    }

    /// An answer of `replica` broke off: it closed or reset the connection
    /// before the end of its body, or sent bytes that do not parse
    /// (`garbled`). The client got a cut answer: a failed exchange, counted
    /// in a row until an answer ends whole; at `consecutive_gateway_errors`
    /// the replica is ejected, while another replica is in rotation.
    pub fn broke_off(&self, replica: &Arc<Replica>, garbled: bool) {
        if replica.state.load(Ordering::Relaxed) == PROBATION && self.others_in_rotation(replica) {
            replica.broken_answers.store(0, Ordering::Relaxed);
            self.observe(
                replica,
                Observation::TrafficFailed(EjectReason::Broken { count: 1, garbled }),
            );
            return;
        }
        let count = replica.broken_answers.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(route = %self.route, replica = %replica.label, garbled, count, "answer broke off");
        if count >= self.eject_after {
            replica.broken_answers.store(0, Ordering::Relaxed);
            self.failed_in_a_row(replica, EjectReason::Broken { count, garbled });
        }
    }

    /// An answer of `replica` ended whole: its count of broken answers
    /// starts again. One relaxed load when all is well.
    pub fn ended_whole(&self, replica: &Replica) {
        if replica.broken_answers.load(Ordering::Relaxed) != 0 {
            replica.broken_answers.store(0, Ordering::Relaxed);
        }
        self.served(replica, true);
    }

    /// Feeds one observation of a replica to its health state machine and
    /// carries out the change: one log line, metrics, a probe on ejection.
    pub fn observe(&self, replica: &Arc<Replica>, observation: Observation) {
        self.record(replica, observation, None);
    }

    /// A connect to `replica` failed (a request's, a check's or a probe's):
    /// an ejection logs the failure in full, once, while the replica's
    /// state keeps its short reason.
    pub fn connect_failed(&self, replica: &Arc<Replica>, failure: &ConnectFailure, probe: bool) {
        let reason = failure.reason();
        let observation = if probe {
            Observation::ProbeFailed(reason)
        } else {
            Observation::ConnectFailed(reason)
        };
        self.record(replica, observation, Some(failure));
    }

    fn record(
        &self,
        replica: &Arc<Replica>,
        observation: Observation,
        failure: Option<&ConnectFailure>,
    ) {
        let change = {
            let mut health = replica.health.lock().unwrap_or_else(|e| e.into_inner());
            let (next, change) = health.observe(observation, Instant::now());
            *health = next;
            let state = match next {
                Health::InRotation => IN_ROTATION,
                Health::Stalled { .. } => STALLED,
                Health::Ejected { .. } => EJECTED,
                Health::Probation { .. } => PROBATION,
            };
            replica.state.store(state, Ordering::Relaxed);
            change
        };
        let Some(change) = change else { return };
        let route = &*self.route;
        let label = replica.label.as_str();
        match change {
            Change::Stalled => {
                tracing::debug!(
                    route,
                    replica = label,
                    "connect overdue; replica avoided until it ends"
                );
            }
            Change::Unstalled => {
                tracing::debug!(route, replica = label, "overdue connect succeeded");
            }
            Change::OnProbation => {
                // A trial slot left taken by a request of an earlier
                // probation (it cannot be: a request gives it back when it
                // ends) would keep this one from ever being tried.
                replica.trial.store(false, Ordering::Release);
                tracing::info!(
                    route,
                    replica = label,
                    "replica on trial: one request at a time until one is answered well"
                );
            }
            Change::Ejected(reason) => {
                let eject_for = match reason.judges_answers() {
                    true => health::ejection_period(
                        self.eject_for,
                        replica.ejections_in_a_row.fetch_add(1, Ordering::Relaxed) + 1,
                    ),
                    false => self.eject_for,
                };
                replica.ejections.inc();
                self.metrics.ejected(route, reason.slug());
                match failure {
                    // The detail says more than the reason (which names a
                    // certificate is valid for, say).
                    Some(failure) if failure.to_string() != reason.to_string() => {
                        tracing::warn!(
                            route,
                            replica = label,
                            %reason,
                            detail = %failure,
                            eject_for = %humantime::format_duration(eject_for),
                            "replica ejected"
                        );
                    }
                    _ => tracing::warn!(
                        route,
                        replica = label,
                        %reason,
                        eject_for = %humantime::format_duration(eject_for),
                        "replica ejected"
                    ),
                }
                if !replica.probing.swap(true, Ordering::AcqRel) {
                    probe::spawn(self.this.clone(), Arc::downgrade(replica));
                }
            }
            Change::Readmitted | Change::Resumed => {
                replica.ejections_in_a_row.store(0, Ordering::Relaxed);
                replica.readmissions.inc();
                let by = if change == Change::Resumed {
                    "its runtime reports it ready again"
                } else {
                    "a successful probe"
                };
                tracing::info!(route, replica = label, by, "replica re-admitted");
            }
        }
        self.changed();
    }

    /// What a check learned of new connections to `replica`: `Some(why)`
    /// when they fail (its name no longer resolves, its certificate is
    /// refused) though pooled connections still serve (the replica stays,
    /// the verdict says both), `None` once one succeeds again.
    pub fn new_connections(&self, replica: &Replica, refused: Option<String>) {
        let mut note = replica
            .new_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if note.as_deref() == refused.as_deref() {
            return;
        }
        match &refused {
            Some(why) if note.is_none() => tracing::warn!(
                route = &*self.route,
                replica = %replica.label,
                %why,
                "replica refuses new connections; pooled connections still serve"
            ),
            None => {
                tracing::info!(route = &*self.route, replica = %replica.label, "replica takes new connections again")
            }
            Some(_) => {}
        }
        *note = refused.map(Arc::from);
        drop(note);
        self.changed();
    }

    /// A check saw `replica`'s certificate, expiring at `not_after`: kept
    /// for the status API and the metric, and warned of once a day within
    /// 14 days of its end, as the node's own certificates are.
    pub fn certificate_seen(&self, replica: &Replica, not_after: i64) {
        replica.cert_not_after.store(not_after, Ordering::Relaxed);
        self.metrics
            .replica_certificate_expiry(&self.route, &replica.label, not_after);
        let now = crate::clock::now_unix_ms() as i64 / 1000;
        let day = now / 86_400;
        if not_after - now < crate::certificate::WARN_WITHIN
            && replica.cert_warned_day.swap(day, Ordering::Relaxed) != day
        {
            tracing::warn!(
                route = &*self.route,
                replica = %replica.label,
                days_left = (not_after - now) / 86_400,
                not_after = %crate::certificate::rfc3339(not_after),
                "replica's certificate expires soon"
            );
        }
    }

    /// Says why the runtime service has no replicas the node can know of
    /// (`None`: nothing keeps it from knowing).
    pub fn set_unresolved(&self, why: Option<String>) {
        let mut unresolved = self.unresolved.lock().unwrap_or_else(|e| e.into_inner());
        if unresolved.as_deref() != why.as_deref() {
            *unresolved = why.map(Arc::from);
            drop(unresolved);
            self.changed();
        }
    }

    /// Why the runtime service has no replicas the node can know of.
    pub fn unresolved(&self) -> Option<Arc<str>> {
        self.unresolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the replica set with what the runtime reports. Replicas
    /// that stay (same name, same address) keep this node's view of them:
    /// ejections, pooled connections.
    pub fn set_endpoints(&self, endpoints: &[Endpoint]) {
        let current = self.replicas.load_full();
        let mut changed = endpoints.len() != current.len();
        // Replicas the runtime reports ready again after not ready.
        let mut back = Vec::new();
        let next: Vec<Arc<Replica>> = endpoints
            .iter()
            .map(|endpoint| {
                let target = endpoint.target.clone().unwrap_or(NOWHERE);
                let ready = endpoint.ready && endpoint.target.is_some();
                let same = |r: &&Arc<Replica>| {
                    r.id == endpoint.id && r.key.target == target && r.checked == endpoint.checked
                };
                match current.iter().find(same) {
                    Some(existing) => {
                        // A connect-checked replica's readiness is the check's.
                        if !existing.checked {
                            let was = existing.ready.swap(ready, Ordering::Relaxed);
                            changed |= was != ready;
                            if ready && !was {
                                back.push(Arc::clone(existing));
                            }
                        }
                        let mut images = existing.images.lock().unwrap_or_else(|e| e.into_inner());
                        if **images != *endpoint.images {
                            *images = endpoint.images.as_slice().into();
                            changed = true;
                        }
                        Arc::clone(existing)
                    }
                    None => {
                        changed = true;
                        let key = ReplicaKey {
                            target,
                            tls: self.tls.as_ref().map_or(0, |t| t.profile),
                            proxied: false,
                            protocol: self.protocol,
                        };
                        Replica::new(
                            key,
                            endpoint.id.clone(),
                            endpoint.checked,
                            ready,
                            &endpoint.images,
                            &self.route,
                            &self.metrics,
                        )
                    }
                }
            })
            .collect();
        for gone in current
            .iter()
            .filter(|r| !next.iter().any(|n| Arc::ptr_eq(n, r)))
        {
            self.metrics.forget_replica(&self.route, &gone.label);
        }
        if changed {
            tracing::debug!(
                route = &*self.route,
                replicas = next.len(),
                "replica set from the runtime"
            );
            self.replicas.store(Arc::new(next));
            self.changed();
        }
        for replica in &back {
            self.observe(replica, Observation::RuntimeReady);
        }
    }

    /// Something that can move the verdict changed.
    fn changed(&self) {
        let replicas = self.replicas.load();
        let ready = replicas.iter().filter(|r| r.in_rotation()).count();
        self.in_rotation
            .set(i64::try_from(ready).unwrap_or(i64::MAX));
        self.changes.signal();
    }
}
