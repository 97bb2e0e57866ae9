//! Certificates for the whole cluster from ACME (RFC 8555), whichever node
//! the CA's validation reaches.
//!
//! ## Who does what
//! - **One node orders** each certificate: the one rendezvous hashing
//!   picks among the live nodes that manage it ([`plan::orderer`]). When
//!   it dies, or while its last order failed, the next one takes its
//!   orders over ([`plan::orderer_among`]).
//! - **Every node answers** the challenges: the ordering node writes each
//!   HTTP-01 token (TLS-ALPN-01: each name) into its gossip; every node
//!   answers what any live node wrote ([`crate::challenges`]) and says so
//!   (`acme/held`); the ordering node asks the CA to validate once every
//!   node answers, or after [`order::HELD_WAIT`].
//! - **Every node serves** the newest certificate it knows: from its
//!   cache (a restart serves at once), or passed on in gossip by any node
//!   ([`shared`]). Each node passes on the certificate it serves, so that a
//!   node that joins later gets it from its peers and orders nothing.
//!   Gossip is sealed and encrypted with the cluster key.
//! - **Renewal** at two thirds of the lifetime, by the ordering node; a
//!   failed order is retried with back-off, the certificate in hand
//!   serving on.
//!
//! Each node's state of each certificate is gossiped (`acme/state/NAME`),
//! so `/v1/cluster` and the TUI show every node's; `/v1/node` and the
//! metrics show its own. One log line per change of state.
//!
//! The decisions are pure ([`plan`], [`shared`]); the protocol is
//! instant-acme's ([`order`]) over the node's own HTTP client ([`client`]).

pub mod client;
pub mod order;
pub mod plan;
pub mod shared;
pub mod store;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use picket_proto::Backoff;
use picket_proto::acme::{CertificateState, HELD_KEY, Held, Issued, MAX_ERROR, Phase};
use picket_proto::gossip::encode_value;
use tokio::sync::{mpsc, watch};

use crate::challenges::Challenges;
use crate::config::{AcmeSettings, CertificateConfig};
use crate::edge::Certificates;
use crate::gossip::Membership;
use crate::metrics::Metrics;
use crate::shutdown::{Shutdown, Tasks};

/// The first wait after a failed order; it doubles up to [`RETRY_CAP`]. A
/// CA limits failed validations (Let's Encrypt: 5 an hour for one account
/// and name): a minute, then two, then four…
pub const RETRY_FIRST: Duration = Duration::from_secs(60);
/// The longest wait between two orders of a failing certificate.
pub const RETRY_CAP: Duration = Duration::from_secs(3600);
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
/// The node places no order for `settle` after it starts: long enough to
/// hear the other nodes' states (ten gossip rounds), so that nodes that
/// start together do not all order.
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
        settled: tokio::time::Instant::now() + settle,
        me: membership.info.name.clone(),
        acme,
        membership,
        certificates,
        metrics,
        managed: BTreeMap::new(),
        written: BTreeMap::new(),
        answered: None,
        http: None,
        done,
    };
    tasks.spawn("acme", keeper.run(results, shutdown));
}

/// A certificate this node serves, checked.
#[derive(Clone)]
struct Serving {
    held: plan::Held,
    issued_by: String,
    pem: String,
    config: CertificateConfig,
}

/// What the node keeps of one certificate.
struct Managed {
    names: Vec<String>,
    serving: Option<Serving>,
    /// The order under way, if this node placed one.
    order: Option<tokio::task::AbortHandle>,
    /// The last order's failure, and when to order again.
    failure: Option<(String, i64)>,
    backoff: Backoff,
    /// The state last published.
    state: Option<CertificateState>,
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

/// What the node's ACME task keeps between steps: the certificates it
/// manages, the keys it wrote, its client, and how orders end.
struct Keeper {
    /// No order before this.
    settled: tokio::time::Instant,
    me: String,
    acme: Arc<Acme>,
    membership: Arc<Membership>,
    certificates: Arc<Certificates>,
    metrics: Arc<Metrics>,
    /// By first name.
    managed: BTreeMap<String, Managed>,
    /// This node's ACME keys as written (states, certificates, held),
    /// not the challenges orders write.
    written: BTreeMap<String, String>,
    /// The challenges asked of the cluster (HTTP-01 by token, TLS-ALPN-01
    /// by name) as last answered, and what the node says it answers.
    answered: Option<(Asked, Vec<String>)>,
    /// The client, with the `[acme] ca` it was made with.
    http: Option<(Option<CaFile>, Arc<client::Http>)>,
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
            self.step(current.as_deref(), crate::clock::now_unix())
                .await;
            tokio::select! {
                _ = settings.changed() => {}
                Ok(()) = views.changed() => {}
                Some(done) = results.recv() => self.finished(done, crate::clock::now_unix()),
                _ = ticks.tick() => {}
                () = shutdown.wait() => break,
            }
        }
        for managed in self.managed.values() {
            if let Some(order) = &managed.order {
                order.abort();
            }
        }
    }

    /// Everything the node does about its certificates, once.
    async fn step(&mut self, settings: Option<&AcmeSettings>, now: i64) {
        self.reconcile(settings, now);
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
            self.adopt(&shared, settings, now);
            self.order(&shared, settings, now);
            let settled = tokio::time::Instant::now() >= self.settled;
            for (name, managed) in &mut self.managed {
                let state = state(&self.me, name, managed, &shared);
                if managed.state.as_ref() != Some(&state) {
                    log_change(name, managed.state.as_ref(), &state, settled);
                    self.metrics.acme_phase(name, state.phase);
                    managed.state = Some(state.clone());
                }
                if let Ok(value) = encode_value(&state) {
                    own.insert(format!("{}{name}", picket_proto::acme::STATE_PREFIX), value);
                }
                if let Some(serving) = &managed.serving {
                    let issued = Issued {
                        serial: serving.held.serial.clone(),
                        not_before_unix: serving.held.not_before,
                        not_after_unix: serving.held.not_after,
                        by: serving.issued_by.clone(),
                        parts: 0,
                        digest: String::new(),
                    };
                    if let Some(keys) = shared::pass_on(name, &issued, &serving.pem) {
                        own.extend(keys);
                    }
                }
            }
        }
        self.write(own).await;
        let serving: Vec<CertificateConfig> = self
            .managed
            .values()
            .filter_map(|m| m.serving.as_ref().map(|s| s.config.clone()))
            .collect();
        self.certificates.set_acme(serving);
        let states: Vec<CertificateState> = self
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

    /// Follows the settings: a certificate new to them is read from the
    /// cache; one that left them is dropped, its order stopped.
    fn reconcile(&mut self, settings: Option<&AcmeSettings>, now: i64) {
        let wanted: &[Vec<String>] = settings.map_or(&[], |s| &s.certificates);
        let gone: Vec<String> = self
            .managed
            .iter()
            .filter(|(name, managed)| {
                !wanted
                    .iter()
                    .any(|names| names[0] == **name && names == &managed.names)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(managed) = self.managed.remove(&name)
                && let Some(order) = managed.order
            {
                order.abort();
            }
            self.metrics.forget_acme(&name);
        }
        let Some(settings) = settings else {
            self.http = None;
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
        for names in wanted {
            let name = &names[0];
            if self.managed.contains_key(name) {
                continue;
            }
            let file = store::certificate_file(&settings.cache, name);
            let serving = match store::read(&file) {
                Ok(Some(pem)) => match check(&pem, names, &file, now) {
                    Ok((held, config)) => Some(Serving {
                        held,
                        issued_by: String::new(),
                        pem,
                        config,
                    }),
                    Err(error) => {
                        tracing::warn!(file = %file.display(), %error, "the cached certificate is not served");
                        None
                    }
                },
                Ok(None) => None,
                Err(error) => {
                    tracing::warn!(file = %file.display(), %error, "cannot read the cached certificate");
                    None
                }
            };
            // A failure kept from before a restart holds until its time.
            let failure = store::read_failure(&store::failure_file(&settings.cache, name))
                .filter(|(retry_at, _)| *retry_at > now)
                .map(|(retry_at, error)| (error, retry_at));
            self.managed.insert(
                name.clone(),
                Managed {
                    names: names.clone(),
                    serving,
                    order: None,
                    failure,
                    backoff: Backoff::new(RETRY_FIRST, RETRY_CAP),
                    state: None,
                },
            );
        }
    }

    /// Serves the newest certificate any node passes on, when it is newer
    /// than this node's, and keeps it in the cache.
    fn adopt(&mut self, shared: &shared::Shared, settings: &AcmeSettings, now: i64) {
        for (name, managed) in &mut self.managed {
            let mine = managed.serving.as_ref().map(|s| s.held.clone());
            let newer = shared
                .certificates
                .iter()
                .filter(|passed| passed.name == *name)
                .filter(|passed| match &mine {
                    None => true,
                    Some(mine) => {
                        let theirs = held_of(&passed.issued);
                        plan::newest([mine, &theirs]) == Some(&theirs) && theirs != *mine
                    }
                })
                .max_by_key(|passed| {
                    (
                        passed.issued.not_after_unix,
                        passed.issued.not_before_unix,
                        passed.issued.digest.clone(),
                    )
                });
            let Some(passed) = newer else { continue };
            let file = store::certificate_file(&settings.cache, name);
            match check(&passed.pem, &managed.names, &file, now) {
                Ok((held, config)) => {
                    if let Err(error) = store::write(&file, &passed.pem) {
                        tracing::warn!(file = %file.display(), %error, "cannot keep the certificate in the cache");
                    }
                    tracing::info!(
                        certificate = %name, serial = %held.serial,
                        not_after = %crate::certificate::rfc3339(held.not_after),
                        from = %passed.node, ordered_by = %passed.issued.by,
                        "ACME certificate received from the cluster; serving it"
                    );
                    managed.serving = Some(Serving {
                        held,
                        issued_by: passed.issued.by.clone(),
                        pem: passed.pem.clone(),
                        config,
                    });
                    // Another node got it: this node's failure is moot.
                    managed.failure = None;
                    managed.backoff.reset();
                    store::clear_failure(&store::failure_file(&settings.cache, name));
                }
                Err(error) => {
                    tracing::debug!(certificate = %name, from = %passed.node, %error, "a certificate passed on is not served");
                }
            }
        }
    }

    /// Starts the orders that are this node's to place now.
    fn order(&mut self, shared: &shared::Shared, settings: &AcmeSettings, now: i64) {
        let Some((_, http)) = &self.http else { return };
        if tokio::time::Instant::now() < self.settled {
            return;
        }
        for (name, managed) in &mut self.managed {
            let orderer = orderer_of(&self.me, managed.failure.is_some(), name, shared);
            let situation = plan::Situation {
                now,
                me: &self.me,
                orderer: orderer.as_deref(),
                held: managed.serving.as_ref().map(|s| &s.held),
                ordering: managed.order.is_some(),
                ordered_elsewhere: ordered_elsewhere(&self.me, name, shared),
                fresh_elsewhere: fresh_elsewhere(&self.me, name, shared, now),
                retry_at: managed.failure.as_ref().map(|(_, at)| *at),
            };
            if !plan::start(&situation) {
                continue;
            }
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
            };
            let done = self.done.clone();
            let name = name.clone();
            let task = tokio::spawn(async move {
                let result = order::order(&ordering).await.map_err(|e| e.to_string());
                let _ = done.send(Done { name, result });
            });
            managed.order = Some(task.abort_handle());
        }
    }

    /// An order ended: its certificate serves, or its failure waits.
    fn finished(&mut self, done: Done, now: i64) {
        let Some(settings) = self.acme.settings() else {
            return;
        };
        let Some(managed) = self.managed.get_mut(&done.name) else {
            return;
        };
        managed.order = None;
        let file = store::certificate_file(&settings.cache, &done.name);
        let result = done
            .result
            .and_then(|pem| check(&pem, &managed.names, &file, now).map(|checked| (pem, checked)));
        match result {
            Ok((pem, (held, config))) => {
                self.metrics.acme_order(&done.name, true);
                if let Err(error) = store::write(&file, &pem) {
                    tracing::warn!(file = %file.display(), %error, "cannot keep the certificate in the cache");
                }
                tracing::info!(
                    certificate = %done.name, serial = %held.serial,
                    not_after = %crate::certificate::rfc3339(held.not_after),
                    "ACME certificate issued; serving it and passing it on"
                );
                managed.serving = Some(Serving {
                    held,
                    issued_by: self.me.clone(),
                    pem,
                    config,
                });
                managed.failure = None;
                managed.backoff.reset();
                store::clear_failure(&store::failure_file(&settings.cache, &done.name));
            }
            Err(error) => {
                self.metrics.acme_order(&done.name, false);
                let wait = managed.backoff.next_wait();
                let retry_at = now + i64::try_from(wait.as_secs()).unwrap_or(i64::MAX / 2).max(1);
                tracing::warn!(
                    certificate = %done.name, %error,
                    retry_in = %humantime::format_duration(Duration::from_secs(wait.as_secs().max(1))),
                    "ACME order failed"
                );
                let error = picket_proto::gossip::cut(&error, MAX_ERROR).unwrap_or(error);
                let kept = store::failure_file(&settings.cache, &done.name);
                if let Err(e) = store::write_failure(&kept, retry_at, &error) {
                    tracing::warn!(file = %kept.display(), error = %e, "cannot keep the ACME failure");
                }
                managed.failure = Some((error, retry_at));
            }
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

/// The node that orders the certificate `name`: of the live nodes that
/// manage it (they publish a state of it; this node among them, failing
/// when `me_failing`), those whose last order did not fail, else all.
fn orderer_of(me: &str, me_failing: bool, name: &str, shared: &shared::Shared) -> Option<String> {
    let mut candidates: Vec<(&str, bool)> = shared
        .states
        .iter()
        .filter(|(node, _)| node.as_str() != me)
        .filter_map(|(node, states)| {
            let state = states.get(name)?;
            Some((node.as_str(), state.phase == Phase::Failing))
        })
        .collect();
    candidates.push((me, me_failing));
    plan::orderer_among(name, &candidates).map(str::to_string)
}

/// Whether another live node says it orders `name` now.
fn ordered_elsewhere(me: &str, name: &str, shared: &shared::Shared) -> bool {
    shared.states.iter().any(|(node, states)| {
        node != me
            && states
                .get(name)
                .is_some_and(|s| matches!(s.phase, Phase::Ordering | Phase::Renewing))
    })
}

/// Whether another live node serves `name` and it is not due yet.
fn fresh_elsewhere(me: &str, name: &str, shared: &shared::Shared, now: i64) -> bool {
    shared.states.iter().any(|(node, states)| {
        node != me
            && states
                .get(name)
                .and_then(|s| s.renew_at_unix)
                .is_some_and(|at| at > now)
    })
}

/// This node's state of one certificate.
fn state(me: &str, name: &str, managed: &Managed, shared: &shared::Shared) -> CertificateState {
    let orderer = orderer_of(me, managed.failure.is_some(), name, shared);
    let held = managed.serving.as_ref().map(|s| &s.held);
    CertificateState {
        name: name.to_string(),
        phase: plan::phase(
            held.is_some(),
            managed.order.is_some(),
            managed.failure.is_some(),
        ),
        serial: held.map(|h| h.serial.clone()),
        not_after_unix: held.map(|h| h.not_after),
        renew_at_unix: held.map(|h| plan::renew_at(h.not_before, h.not_after)),
        orderer,
        issued_by: managed
            .serving
            .as_ref()
            .map(|s| s.issued_by.clone())
            .filter(|by| !by.is_empty()),
        error: managed.failure.as_ref().map(|(error, _)| error.clone()),
        retry_at_unix: managed.failure.as_ref().map(|(_, at)| *at),
    }
}

/// One line per change: the first state of a certificate (what the node
/// starts with), and a new ordering node once the node has settled (before,
/// it is still hearing of the others). Orders, certificates issued or
/// received, and failures have their own lines where they happen.
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

/// The planner's view of a certificate passed on.
fn held_of(issued: &Issued) -> plan::Held {
    plan::Held {
        serial: issued.serial.clone(),
        not_before: issued.not_before_unix,
        not_after: issued.not_after_unix,
        digest: issued.digest.clone(),
    }
}

/// Checks a chain and key (one PEM text) for `names`: valid now, every
/// name covered.
fn check(
    pem: &str,
    names: &[String],
    file: &std::path::Path,
    now: i64,
) -> Result<(plan::Held, CertificateConfig), String> {
    let checked = crate::certificate::check(pem.as_bytes(), pem.as_bytes(), Some(names), now)
        .map_err(|e| e.to_string())?;
    let held = plan::Held {
        serial: checked.serial.clone(),
        not_before: checked.not_before,
        not_after: checked.not_after,
        digest: shared::digest(pem),
    };
    let config = CertificateConfig {
        cert: PathBuf::from(file),
        key: PathBuf::from(file),
        hosts: Some(names.to_vec()),
        current: Arc::new(checked),
    };
    Ok((held, config))
}
