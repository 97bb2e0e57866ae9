//! Certificates for the whole cluster from ACME (RFC 8555), whichever node
//! the CA's validation reaches.
//!
//! ## Who does what
//! - **One node orders** each certificate: the one rendezvous hashing
//!   picks among the live nodes that manage it from the same directory
//!   ([`plan::orderer`]). When it dies, or while its last order failed,
//!   the next one takes its orders over ([`plan::orderer_among`]). A
//!   certificate a node starts to manage (at start, at a reload, with new
//!   names or a new directory) waits ten gossip rounds before it is
//!   ordered, so that nodes reloaded together hear of each other and pick
//!   the same one ([`book`]).
//! - **Every node answers** the challenges: the ordering node writes each
//!   HTTP-01 token (TLS-ALPN-01: each name) into its gossip; every node
//!   answers what any live node wrote ([`crate::challenges`]) and says so
//!   (`acme/held`); the ordering node asks the CA to validate once every
//!   node answers, or after [`order::HELD_WAIT`].
//! - **Every node serves** the newest certificate it trusts: from its
//!   cache (a restart serves at once), or passed on in gossip by a peer
//!   ([`shared`]). Whatever its source, a certificate serves only if it is
//!   the CA's ([`trust`]): chained to the roots of the CA's certificates,
//!   no longer-lived than the CA's, of this node's directory; a forgery
//!   from a holder of the cluster key is refused, counted, logged once,
//!   and never cached or passed on. A certificate travels from one node
//!   that serves it to the nodes that lack it, and only while one does.
//! - **Renewal** at two thirds of the lifetime, by the ordering node; a
//!   failed order is retried with back-off, the certificate in hand
//!   serving on. A certificate whose names change keeps serving the names
//!   it has until its successor serves.
//!
//! Each node's state of each certificate is gossiped (`acme/state/NAME`),
//! so `/v1/cluster` and the TUI show every node's; `/v1/node` and the
//! metrics show its own. One log line per change of state.
//!
//! The decisions are pure ([`plan`], [`book`], [`shared`], [`trust`]); the
//! protocol is instant-acme's ([`order`]) over the node's own HTTP client
//! ([`client`]).

pub mod book;
pub mod client;
pub mod order;
pub mod plan;
pub mod shared;
pub mod store;
#[cfg(test)]
mod testing;
pub mod trust;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use picket_proto::acme::{AcmeNode, CertificateState, HELD_KEY, Held, Issued, MAX_ERROR, NODE_KEY};
use picket_proto::gossip::encode_value;
use tokio::sync::{mpsc, watch};

use crate::challenges::Challenges;
use crate::config::{AcmeSettings, CertificateConfig};
use crate::edge::Certificates;
use crate::gossip::Membership;
use crate::metrics::Metrics;
use crate::shutdown::{Shutdown, Tasks};

pub use book::{RETRY_CAP, RETRY_FIRST};
/// How often the node looks again when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);

/// The node's ACME part: its settings (a reload replaces them), the
/// challenges it answers, and its state of each certificate.
pub struct Acme {
    settings: watch::Sender<Option<Arc<AcmeSettings>>>,
    challenges: Arc<Challenges>,
    states: watch::Sender<Arc<Vec<CertificateState>>>,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme")
            .field("states", &self.states.borrow().len())
            .finish_non_exhaustive()
    }
}

impl Acme {
    pub fn new(settings: Option<AcmeSettings>, challenges: Arc<Challenges>) -> Acme {
        Acme {
            settings: watch::channel(settings.map(Arc::new)).0,
            challenges,
            states: watch::channel(Arc::default()).0,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> Option<AcmeSettings> {
        self.settings.borrow().as_deref().cloned()
    }

    /// Replaces the settings (a reload); the certificates that stay keep
    /// what they serve.
    pub fn set(&self, settings: Option<AcmeSettings>) {
        self.settings.send_if_modified(|current| {
            if current.as_deref() == settings.as_ref() {
                return false;
            }
            *current = settings.map(Arc::new);
            true
        });
    }

    /// This node's state of each certificate, now.
    pub fn states(&self) -> Arc<Vec<CertificateState>> {
        self.states.borrow().clone()
    }

    /// The same, as it changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Vec<CertificateState>>> {
        self.states.subscribe()
    }

    pub fn challenges(&self) -> &Arc<Challenges> {
        &self.challenges
    }
}

/// Starts managing the certificates of `[acme]` (now or after a reload).
/// A certificate the node starts to manage is not ordered for `settle`:
/// long enough to hear the other nodes' states (ten gossip rounds), so
/// that nodes that start, or reload, together do not all order.
pub fn spawn(
    acme: Arc<Acme>,
    membership: Arc<Membership>,
    certificates: Arc<Certificates>,
    metrics: Arc<Metrics>,
    settle: Duration,
    shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    let (done, results) = mpsc::unbounded_channel();
    let keeper = Keeper {
        settle_ms: i64::try_from(settle.as_millis()).unwrap_or(i64::MAX / 4),
        me: membership.info.name.clone(),
        acme,
        membership,
        certificates,
        metrics,
        book: book::Book::default(),
        orders: HashMap::new(),
        written: BTreeMap::new(),
        answered: None,
        http: None,
        trust: None,
        refused: HashSet::new(),
        accounts: Arc::default(),
        done,
    };
    tasks.spawn("acme", keeper.run(results, shutdown));
}

/// How an order ended.
struct Done {
    name: String,
    result: Result<String, String>,
}

/// Key authorizations asked of the cluster: HTTP-01 by token, TLS-ALPN-01
/// by name.
type Asked = (BTreeMap<String, String>, BTreeMap<String, String>);

/// `[acme] ca`: its file, and its PEM.
type CaFile = (PathBuf, Vec<u8>);

/// The ACME task: it reads the cache and gossip, and carries out what the
/// book ([`book::Book`]) decides.
struct Keeper {
    /// No order of a certificate before this long after it is first
    /// managed here (ms).
    settle_ms: i64,
    me: String,
    acme: Arc<Acme>,
    membership: Arc<Membership>,
    certificates: Arc<Certificates>,
    metrics: Arc<Metrics>,
    book: book::Book,
    /// The orders under way, by certificate.
    orders: HashMap<String, tokio::task::AbortHandle>,
    /// This node's ACME keys as written (its node, states, certificates,
    /// held), not the challenges orders write.
    written: BTreeMap<String, String>,
    /// The challenges asked of the cluster (HTTP-01 by token, TLS-ALPN-01
    /// by name) as last answered, and what the node says it answers.
    answered: Option<(Asked, Vec<String>)>,
    /// The client, with the `[acme] ca` it was made with.
    http: Option<(Option<CaFile>, Arc<client::Http>)>,
    /// The check of every certificate, with the settings it was made of.
    trust: Option<(AcmeSettings, Arc<trust::Trust>)>,
    /// Copies from peers refused already (by digest): counted and logged
    /// once.
    refused: HashSet<String>,
    accounts: Arc<order::Accounts>,
    done: mpsc::UnboundedSender<Done>,
}

impl Keeper {
    async fn run(mut self, mut results: mpsc::UnboundedReceiver<Done>, mut shutdown: Shutdown) {
        let mut settings = self.acme.settings.subscribe();
        let mut views = self.membership.subscribe();
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let current = settings.borrow_and_update().clone();
            self.step(current.as_deref(), crate::clock::now_unix_ms())
                .await;
            tokio::select! {
                _ = settings.changed() => {}
                Ok(()) = views.changed() => {}
                Some(done) = results.recv() => self.finished(done, crate::clock::now_unix()),
                _ = ticks.tick() => {}
                () = shutdown.wait() => break,
            }
        }
        for order in self.orders.values() {
            order.abort();
        }
    }

    /// Everything the node does about its certificates, once, at `now_ms`.
    async fn step(&mut self, settings: Option<&AcmeSettings>, now_ms: u64) {
        let now_ms = i64::try_from(now_ms).unwrap_or(i64::MAX / 4);
        let now = now_ms.div_euclid(1000);
        self.reconcile(settings, now_ms);
        let entries = self.membership.acme_entries().await;
        let shared = shared::read(&entries);
        for _ in 0..shared.refused {
            self.metrics.value_refused();
        }
        let mut own = BTreeMap::new();
        // Answer what any live node asks the CA to validate: set again
        // only when that changed, not at every view.
        let asked = (shared.http.clone(), shared.alpn.clone());
        if self.answered.as_ref().is_none_or(|(was, _)| *was != asked) {
            let held = self.acme.challenges.set(
                asked.0.clone().into_iter().collect(),
                asked.1.clone().into_iter().collect(),
            );
            self.answered = Some((asked, held));
        }
        let held = self
            .answered
            .as_ref()
            .map(|(_, held)| held.clone())
            .unwrap_or_default();
        if (settings.is_some() || !held.is_empty())
            && let Ok(value) = encode_value(&Held { challenges: held })
        {
            own.insert(HELD_KEY.to_string(), value);
        }
        if let Some(settings) = settings {
            let node = AcmeNode {
                directory: settings.directory.clone(),
            };
            if let Ok(value) = encode_value(&node) {
                own.insert(NODE_KEY.to_string(), value);
            }
            self.adopt(&shared, settings, now);
            self.order(&shared, settings, now_ms);
            let names: Vec<String> = self.book.managed.keys().cloned().collect();
            for name in names {
                let Some(state) = self.book.state(&self.me, &name, &shared) else {
                    continue;
                };
                let settled = self
                    .book
                    .managed
                    .get(&name)
                    .is_some_and(|m| now_ms >= m.settled_ms);
                let passes = self.book.passes(&self.me, &name, &shared, now_ms);
                let Some(managed) = self.book.managed.get_mut(&name) else {
                    continue;
                };
                if managed.state.as_ref() != Some(&state) {
                    log_change(&name, managed.state.as_ref(), &state, settled);
                    self.metrics.acme_phase(&name, state.phase);
                    managed.state = Some(state.clone());
                }
                if let Ok(value) = encode_value(&state) {
                    own.insert(format!("{}{name}", picket_proto::acme::STATE_PREFIX), value);
                }
                if passes && let Some(serving) = &managed.serving {
                    let issued = Issued {
                        serial: serving.held.serial.clone(),
                        not_before_unix: serving.held.not_before,
                        not_after_unix: serving.held.not_after,
                        by: serving.issued_by.clone(),
                        directory: serving.directory.clone(),
                        parts: 0,
                        digest: String::new(),
                    };
                    if let Some(keys) = shared::pass_on(&name, &issued, &serving.pem) {
                        own.extend(keys);
                    }
                }
            }
        }
        self.write(own).await;
        let serving: Vec<CertificateConfig> = self
            .book
            .managed
            .values()
            .filter_map(|m| m.serving.as_ref().map(|s| s.config.clone()))
            .collect();
        self.certificates.set_acme(serving);
        let states: Vec<CertificateState> = self
            .book
            .managed
            .values()
            .filter_map(|m| m.state.clone())
            .collect();
        self.acme.states.send_if_modified(|current| {
            if **current == states {
                return false;
            }
            *current = Arc::new(states);
            true
        });
    }

    /// Follows the settings: the client and the trust they make, and the
    /// certificates the book manages.
    fn reconcile(&mut self, settings: Option<&AcmeSettings>, now_ms: i64) {
        let Some(settings) = settings else {
            self.http = None;
            self.trust = None;
            let notes = self.book.reconcile(None, None, |_| None, now_ms, 0);
            self.drop_orders(notes);
            return;
        };
        let ca = settings.ca.clone();
        if self.http.as_ref().is_none_or(|(was, _)| *was != ca) {
            match client::Http::new(ca.clone()) {
                Ok(http) => self.http = Some((ca, Arc::new(http))),
                Err(error) => {
                    tracing::error!(%error, "[acme] ca: the roots cannot be used");
                    self.http = None;
                }
            }
        }
        let same = |a: &AcmeSettings| {
            a.directory == settings.directory
                && a.ca == settings.ca
                && a.issuers == settings.issuers
                && a.max_lifetime == settings.max_lifetime
        };
        if self.trust.as_ref().is_none_or(|(was, _)| !same(was)) {
            match trust::Trust::new(settings) {
                Ok(trust) => self.trust = Some((settings.clone(), Arc::new(trust))),
                Err(error) => {
                    tracing::error!(%error, "[acme] issuers: the roots cannot be used");
                    self.trust = None;
                }
            }
        }
        let Some((_, trust)) = self.trust.clone() else {
            return;
        };
        let cache = settings.cache.clone();
        let cached = |name: &str| match store::read_certificate(&cache, name) {
            Ok(Some((pem, meta))) => Some(book::Cached {
                pem,
                directory: meta.as_ref().map(|m| m.directory.clone()),
                issued_by: meta.map(|m| m.issued_by).unwrap_or_default(),
            }),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(file = %store::certificate_file(&cache, name).display(), %error, "cannot read the cached certificate");
                None
            }
        };
        let new: Vec<String> = settings
            .certificates
            .iter()
            .map(|names| names[0].clone())
            .filter(|name| !self.book.managed.contains_key(name))
            .collect();
        let notes =
            self.book
                .reconcile(Some(settings), Some(&trust), cached, now_ms, self.settle_ms);
        for name in new {
            // A failure kept from before a restart holds until its time.
            if let Some((retry_at, error)) =
                store::read_failure(&store::failure_file(&settings.cache, &name))
            {
                self.book
                    .keep_failure(&name, error, retry_at, now_ms.div_euclid(1000));
            }
        }
        self.drop_orders(notes);
    }

    /// Carries out what reconciling said: orders of certificates no longer
    /// managed stop (their challenge keys go with them), and the rest is
    /// logged.
    fn drop_orders(&mut self, notes: Vec<book::Note>) {
        for note in notes {
            match note {
                book::Note::Dropped { name } => {
                    if let Some(order) = self.orders.remove(&name) {
                        order.abort();
                    }
                    self.metrics.forget_acme(&name);
                }
                book::Note::CacheRefused { name, why } => {
                    self.metrics.acme_refused(&name, "cache");
                    tracing::warn!(certificate = %name, reason = %why, "the cached certificate is not served");
                }
                book::Note::StandIn { name, from } => tracing::info!(
                    certificate = %name, serving = %from,
                    "the names it shares with another certificate keep that one's until its own is served"
                ),
                _ => {}
            }
        }
    }

    /// Serves the newest trusted copy any node passes on, when it is newer
    /// than this node's, and keeps it in the cache. A copy that is not the
    /// CA's is refused, counted and logged once, never kept.
    fn adopt(&mut self, shared: &shared::Shared, settings: &AcmeSettings, now: i64) {
        let Some((_, trust)) = self.trust.clone() else {
            return;
        };
        let refused = &self.refused;
        let candidates: Vec<&shared::Passed> = shared
            .certificates
            .iter()
            .filter(|p| !refused.contains(&p.issued.digest))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let passed: Vec<shared::Passed> = candidates.into_iter().cloned().collect();
        let notes = self.book.adopt(&passed, |copy, names| {
            trust.check(&copy.pem, names, &copy.issued.directory, now)
        });
        for note in notes {
            match note {
                book::Note::Adopted {
                    name,
                    from,
                    serial,
                    not_after,
                } => {
                    let Some(serving) = self
                        .book
                        .managed
                        .get(&name)
                        .and_then(|m| m.serving.as_ref())
                    else {
                        continue;
                    };
                    keep(&settings.cache, &name, serving);
                    store::clear_failure(&store::failure_file(&settings.cache, &name));
                    tracing::info!(
                        certificate = %name, %serial,
                        not_after = %crate::certificate::rfc3339(not_after),
                        %from, ordered_by = %serving.issued_by,
                        "ACME certificate received from the cluster; serving it"
                    );
                }
                book::Note::Distrusted {
                    name,
                    from,
                    digest,
                    why,
                } => {
                    self.metrics.acme_refused(&name, why.slug());
                    tracing::warn!(
                        certificate = %name, %from, reason = %why,
                        "a certificate passed on by a peer is not the CA's: refused, not kept, not passed on"
                    );
                    self.refused.insert(digest);
                }
                _ => {}
            }
        }
    }

    /// Starts the orders that are this node's to place now.
    fn order(&mut self, shared: &shared::Shared, settings: &AcmeSettings, now_ms: i64) {
        let Some((_, http)) = &self.http else { return };
        if self.trust.is_none() {
            return;
        }
        for name in self.book.to_order(&self.me, shared, now_ms) {
            let Some(managed) = self.book.managed.get(&name) else {
                continue;
            };
            tracing::info!(
                certificate = %name, names = %managed.names.join(", "),
                renewing = managed.serving.is_some(),
                "ordering an ACME certificate for the cluster"
            );
            let ordering = order::Ordering {
                settings: Arc::new(settings.clone()),
                names: managed.names.clone(),
                membership: Arc::clone(&self.membership),
                http: Arc::clone(http),
                accounts: Arc::clone(&self.accounts),
            };
            let done = self.done.clone();
            let task_name = name.clone();
            let task = tokio::spawn(async move {
                let result = order::order(&ordering).await.map_err(|e| e.to_string());
                let _ = done.send(Done {
                    name: task_name,
                    result,
                });
            });
            self.orders.insert(name, task.abort_handle());
        }
    }

    /// An order ended: its certificate serves, or its failure waits.
    fn finished(&mut self, done: Done, now: i64) {
        self.orders.remove(&done.name);
        let (Some(settings), Some((_, trust))) = (self.acme.settings(), self.trust.clone()) else {
            return;
        };
        let Some(note) = self
            .book
            .finish(&done.name, done.result, &trust, &self.me, now)
        else {
            return;
        };
        match note {
            book::Note::Issued {
                name,
                serial,
                not_after,
            } => {
                self.metrics.acme_order(&name, true);
                if let Some(serving) = self
                    .book
                    .managed
                    .get(&name)
                    .and_then(|m| m.serving.as_ref())
                {
                    keep(&settings.cache, &name, serving);
                }
                store::clear_failure(&store::failure_file(&settings.cache, &name));
                tracing::info!(
                    certificate = %name, %serial,
                    not_after = %crate::certificate::rfc3339(not_after),
                    "ACME certificate issued; serving it and passing it on"
                );
            }
            book::Note::Failed {
                name,
                error,
                retry_at,
            } => {
                self.metrics.acme_order(&name, false);
                tracing::warn!(
                    certificate = %name, %error,
                    retry_in = %humantime::format_duration(Duration::from_secs(
                        u64::try_from(retry_at - now).unwrap_or(1).max(1)
                    )),
                    "ACME order failed"
                );
                let error = picket_proto::gossip::cut(&error, MAX_ERROR).unwrap_or(error);
                if let Some(managed) = self.book.managed.get_mut(&name) {
                    managed.failure = Some((error.clone(), retry_at));
                }
                let kept = store::failure_file(&settings.cache, &name);
                if let Err(e) = store::write_failure(&kept, retry_at, &error) {
                    tracing::warn!(file = %kept.display(), error = %e, "cannot keep the ACME failure");
                }
            }
            _ => {}
        }
    }

    /// Writes this node's ACME keys that changed, deletes those that went.
    async fn write(&mut self, own: BTreeMap<String, String>) {
        for (key, value) in &own {
            if self.written.get(key) != Some(value) {
                self.membership.set_own(key, value).await;
            }
        }
        for key in self.written.keys() {
            if !own.contains_key(key) {
                self.membership.delete_own(key).await;
            }
        }
        self.written = own;
    }
}

/// Keeps a certificate that serves in the cache, with what it says of
/// itself; a failure to is logged, the certificate serving on.
fn keep(cache: &std::path::Path, name: &str, serving: &book::Serving) {
    let meta = store::Meta {
        directory: serving.directory.clone(),
        issued_by: serving.issued_by.clone(),
    };
    if let Err(error) = store::write_certificate(cache, name, &serving.pem, &meta) {
        tracing::warn!(file = %store::certificate_file(cache, name).display(), %error, "cannot keep the certificate in the cache");
    }
}

/// One line per change: the first state of a certificate (what the node
/// starts with), and a new ordering node once the certificate has settled
/// (before, the node is still hearing of the others). Orders, certificates
/// issued or received, and failures have their own lines where they
/// happen.
fn log_change(
    name: &str,
    before: Option<&CertificateState>,
    now: &CertificateState,
    settled: bool,
) {
    match before {
        None => tracing::info!(
            certificate = %name, phase = now.phase.as_str(),
            serial = now.serial.as_deref().unwrap_or("-"),
            orderer = now.orderer.as_deref().unwrap_or("-"),
            "ACME certificate managed"
        ),
        Some(before) if settled && before.orderer != now.orderer => tracing::info!(
            certificate = %name,
            from = before.orderer.as_deref().unwrap_or("-"),
            to = now.orderer.as_deref().unwrap_or("-"),
            "ACME orders of the certificate pass to another node"
        ),
        Some(_) => {}
    }
}
