//! Target checks: how a node learns which replicas of a route are ready.
//!
//! - A runtime ([`docker`], [`kube`], Swarm through [`docker`] on every
//!   engine) watches its objects and publishes an [`Inventory`] to the
//!   node's [`Catalog`]; the catalog hands each service route its
//!   endpoints at once. Nothing on that path waits for a reload, a gossip
//!   round or a status request.
//! - Static replicas and external hosts (and runtime endpoints marked
//!   `checked`) get a plain TCP connect at a fixed interval ([`checks`]);
//!   without any such target, no timer runs.
//!
//! Every call to a runtime API endpoint passes its [`gate`] (a breaker);
//! an endpoint that cannot be reached marks the node's runtime data stale
//! ([`reach`], per endpoint); routing keeps the last known replicas
//! meanwhile.

pub mod docker;
pub mod gate;
pub mod image;
pub mod kube;
pub mod labels;
pub mod reach;
pub mod runtime_status;
pub mod swarm;

use std::fmt::Debug;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;

use crate::changes::Changes;
use crate::config::declared::Declared;
use crate::config::{RuntimeBreakerSettings, ServicePort};
use crate::metrics::Metrics;
use crate::upstream::{Endpoint, Upstream};
use gate::Gates;
use runtime_status::RuntimeStatus;

/// What a runtime knows, as the endpoints of each service.
pub trait Inventory: Send + Sync + Debug {
    /// The replicas of `service` on `port`; empty for a service the
    /// runtime does not know or that runs nothing.
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint>;

    /// Why `service` on `port` has no endpoints although it may run
    /// replicas: what the node lacks to resolve it (a right the runtime
    /// refuses it), in words for the verdict and the access log. `None`
    /// when what [`Inventory::endpoints`] says is all there is.
    fn unresolved(&self, _service: &str, _port: &ServicePort) -> Option<String> {
        None
    }

    /// The routes the runtime declares (labels, Ingress rules), unchecked.
    fn routes(&self) -> Vec<Declared> {
        Vec::new()
    }

    /// The certificates the runtime holds for its routes (an Ingress's TLS
    /// Secrets).
    fn certificates(&self) -> Vec<RuntimeCertificate> {
        Vec::new()
    }
}

/// A certificate and its key from the runtime, in PEM, and the names it
/// is asked to serve: a claim, until [`crate::config::ownership`] admits
/// it.
#[derive(Clone, PartialEq, Eq)]
pub struct RuntimeCertificate {
    /// Where it comes from: `secret shop/shop-tls`.
    pub source: String,
    /// The names it is asked to serve: the `tls.hosts` of the Ingresses
    /// that name it.
    pub hosts: Vec<String>,
    /// The tenant it belongs to: its namespace.
    pub tenant: Option<String>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for RuntimeCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("RuntimeCertificate")
            .field("source", &self.source)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// What a runtime declares beside its endpoints: routes and certificates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declarations {
    pub routes: Vec<Declared>,
    pub certificates: Vec<RuntimeCertificate>,
}

#[derive(Debug)]
struct Attached {
    service: String,
    port: ServicePort,
    upstream: Weak<Upstream>,
}

#[derive(Debug, Default)]
struct CatalogState {
    inventory: Option<Arc<dyn Inventory>>,
    attached: Vec<Attached>,
}

/// The routes and certificates of the latest inventory, told when they
/// change: what the node builds its route table from, beside the file.
#[derive(Debug)]
struct Told(watch::Sender<Arc<Declarations>>);

impl Default for Told {
    fn default() -> Self {
        Told(watch::channel(Arc::default()).0)
    }
}

/// The runtime's latest inventory, and the service routes it feeds.
///
/// One lock covers both: a route attached while an inventory is published
/// gets either the old one and then the new one, or the new one, never the
/// old one alone; and inventories reach routes in the order they were
/// published.
#[derive(Debug, Default)]
pub struct Catalog {
    state: Mutex<CatalogState>,
    declared: Told,
}

impl Catalog {
    fn lock(&self) -> std::sync::MutexGuard<'_, CatalogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Feeds `upstream` the endpoints of `service` from now on, starting
    /// with what the runtime already reported.
    pub fn attach(&self, upstream: &Arc<Upstream>, service: &str, port: &ServicePort) {
        let mut state = self.lock();
        if let Some(inventory) = &state.inventory {
            upstream.set_endpoints(&inventory.endpoints(service, port));
            upstream.set_unresolved(inventory.unresolved(service, port));
        }
        state.attached.retain(|a| a.upstream.strong_count() > 0);
        state.attached.push(Attached {
            service: service.to_string(),
            port: port.clone(),
            upstream: Arc::downgrade(upstream),
        });
    }

    /// Takes a new inventory and updates every service route from it.
    pub fn publish(&self, inventory: Arc<dyn Inventory>) {
        let mut state = self.lock();
        state.attached.retain(|a| match a.upstream.upgrade() {
            Some(upstream) => {
                upstream.set_endpoints(&inventory.endpoints(&a.service, &a.port));
                upstream.set_unresolved(inventory.unresolved(&a.service, &a.port));
                true
            }
            None => false,
        });
        let declarations = Declarations {
            routes: inventory.routes(),
            certificates: inventory.certificates(),
        };
        state.inventory = Some(inventory);
        // Under the lock, so that declarations are told in the order the
        // inventories were published.
        self.declared.0.send_if_modified(|told| {
            if **told == declarations {
                return false;
            }
            *told = Arc::new(declarations);
            true
        });
    }

    /// The routes and certificates the runtime declares, now and as they
    /// change.
    pub fn declared(&self) -> watch::Receiver<Arc<Declarations>> {
        self.declared.0.subscribe()
    }

    /// Services routes ask for, by name: what a runtime needs to watch.
    pub fn services(&self) -> Vec<String> {
        let state = self.lock();
        let mut names: Vec<String> = state
            .attached
            .iter()
            .filter(|a| a.upstream.strong_count() > 0)
            .map(|a| a.service.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// What runtime watchers report to: the catalog their inventories feed,
/// the gate of each API endpoint, and the reachability of each.
#[derive(Debug)]
pub struct Link {
    pub catalog: Arc<Catalog>,
    pub gates: Gates,
    pub status: Arc<RuntimeStatus>,
    pub changes: Arc<Changes>,
    /// How long a refused right (403) is left before the next try: the
    /// breaker's cool-down.
    pub retry_forbidden: Duration,
    metrics: Arc<Metrics>,
}

impl Link {
    pub fn new(
        catalog: Arc<Catalog>,
        settings: &RuntimeBreakerSettings,
        status: Arc<RuntimeStatus>,
        changes: Arc<Changes>,
        metrics: Arc<Metrics>,
    ) -> Link {
        Link {
            catalog,
            gates: Gates::new(settings.active(), Arc::clone(&metrics)),
            status,
            changes,
            retry_forbidden: settings.cooldown.value,
            metrics,
        }
    }

    /// `endpoint` answered: its data is current again.
    pub fn answered(&self, endpoint: &str) {
        let change = self.status.observe(endpoint, true);
        self.metrics
            .runtime_reachable(endpoint, true, change.is_some());
        if let Some(change) = change {
            tracing::info!(
                endpoint,
                still_stale = change.stale_since.is_some(),
                "runtime API answers again; its data is current"
            );
            self.changes.signal();
        }
    }

    /// `endpoint` did not answer: the node's runtime data is stale.
    pub fn silent(&self, endpoint: &str, why: &dyn std::fmt::Display) {
        let change = self.status.observe(endpoint, false);
        self.metrics
            .runtime_reachable(endpoint, false, change.is_some());
        match change {
            Some(_) => {
                tracing::warn!(endpoint, %why, "runtime API not answering; keeping the last known replicas");
                self.changes.signal();
            }
            None => tracing::debug!(endpoint, %why, "runtime API still not answering"),
        }
    }

    /// The node no longer follows `endpoint`.
    pub fn forget(&self, endpoint: &str) {
        self.metrics.forget_runtime_endpoint(endpoint);
        if self.status.forget(endpoint).is_some() {
            self.changes.signal();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::upstream::{Pool, Target};

    #[derive(Debug)]
    struct Fixed(Vec<(&'static str, Endpoint)>);

    impl Inventory for Fixed {
        fn endpoints(&self, service: &str, _: &ServicePort) -> Vec<Endpoint> {
            self.0
                .iter()
                .filter(|(s, _)| *s == service)
                .map(|(_, e)| e.clone())
                .collect()
        }
    }

    fn endpoint(id: &str, port: u16, ready: bool) -> Endpoint {
        Endpoint {
            id: id.into(),
            target: Some(Target::Addr(([10, 0, 0, 1], port).into())),
            ready,
            images: [].into(),
            checked: false,
        }
    }

    fn upstream() -> Arc<Upstream> {
        let config = Config::parse(
            "t.toml",
            "[runtime]\nkind = \"docker\"\n[[route]]\nname = \"api\"\nservice = \"api\"\nport = 80\n",
        )
        .unwrap();
        let route = &config.routes[0];
        let metrics = Arc::new(Metrics::new());
        Upstream::new(
            route,
            Arc::new(Pool::new(route.bounds())),
            None,
            None,
            &metrics,
            Default::default(),
        )
    }

    /// The generation an upstream's endpoints came from (its replica id).
    fn generation(up: &Upstream) -> u64 {
        up.replicas()
            .first()
            .and_then(|r| r.id.strip_prefix("gen-")?.parse().ok())
            .unwrap_or(0)
    }

    #[derive(Debug)]
    struct Generation(u64);

    impl Inventory for Generation {
        fn endpoints(&self, _: &str, _: &ServicePort) -> Vec<Endpoint> {
            vec![endpoint(&format!("gen-{}", self.0), 1, true)]
        }
    }

    /// A route attached while inventories are published (a reload during a
    /// burst of runtime events) never ends up with an inventory older than
    /// one whose publication had finished.
    #[test]
    fn a_route_attached_during_a_publish_never_keeps_an_older_inventory() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let catalog = Arc::new(Catalog::default());
        let published = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = {
            let (catalog, published, stop) = (
                Arc::clone(&catalog),
                Arc::clone(&published),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut generation = 0;
                while !stop.load(Ordering::Acquire) {
                    generation += 1;
                    catalog.publish(Arc::new(Generation(generation)));
                    published.store(generation, Ordering::Release);
                }
            })
        };
        let port = ServicePort::Number(80);
        let mut stale = Vec::new();
        for _ in 0..5_000 {
            let up = upstream();
            catalog.attach(&up, "api", &port);
            let finished = published.load(Ordering::Acquire);
            let got = generation(&up);
            if got < finished {
                stale.push((got, finished));
            }
        }
        stop.store(true, Ordering::Release);
        publisher.join().unwrap();
        assert!(
            stale.is_empty(),
            "{} routes kept an older inventory than one already published, e.g. {:?}",
            stale.len(),
            &stale[..stale.len().min(3)]
        );
    }

    #[tokio::test]
    async fn routes_get_endpoints_when_attached_and_when_published() {
        let catalog = Catalog::default();
        catalog.publish(Arc::new(Fixed(vec![("api", endpoint("a", 1, true))])));
        let up = upstream();
        catalog.attach(&up, "api", &ServicePort::Number(80));
        assert_eq!(
            up.replicas().len(),
            1,
            "what was already known comes at once"
        );
        catalog.publish(Arc::new(Fixed(vec![
            ("api", endpoint("a", 1, false)),
            ("api", endpoint("b", 2, true)),
        ])));
        let replicas = up.replicas();
        assert_eq!(
            replicas
                .iter()
                .map(|r| (r.id.as_str(), r.ready()))
                .collect::<Vec<_>>(),
            [("a", false), ("b", true)]
        );
        assert_eq!(catalog.services(), ["api"]);
        drop(up);
        assert!(
            catalog.services().is_empty(),
            "dropped routes are forgotten"
        );
    }
}
