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
//! A runtime that cannot be reached marks the node's runtime data stale;
//! routing keeps the last known replicas meanwhile.

pub mod checks;
pub mod docker;
pub mod kube;
pub mod swarm;

use std::fmt::Debug;
use std::sync::{Arc, Mutex, Weak};

use crate::config::ServicePort;
use crate::upstream::{Endpoint, Upstream};

/// What a runtime knows, as the endpoints of each service.
pub trait Inventory: Send + Sync + Debug {
    /// The replicas of `service` on `port`; empty for a service the
    /// runtime does not know or that runs nothing.
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint>;
}

#[derive(Debug)]
struct Attached {
    service: String,
    port: ServicePort,
    upstream: Weak<Upstream>,
}

/// The runtime's latest inventory, and the service routes it feeds.
#[derive(Debug, Default)]
pub struct Catalog {
    inventory: Mutex<Option<Arc<dyn Inventory>>>,
    attached: Mutex<Vec<Attached>>,
}

impl Catalog {
    /// Feeds `upstream` the endpoints of `service` from now on, starting
    /// with what the runtime already reported.
    pub fn attach(&self, upstream: &Arc<Upstream>, service: &str, port: &ServicePort) {
        let inventory = self
            .inventory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(inventory) = inventory {
            upstream.set_endpoints(&inventory.endpoints(service, port));
        }
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        attached.retain(|a| a.upstream.strong_count() > 0);
        attached.push(Attached {
            service: service.to_string(),
            port: port.clone(),
            upstream: Arc::downgrade(upstream),
        });
    }

    /// Takes a new inventory and updates every service route from it.
    pub fn publish(&self, inventory: Arc<dyn Inventory>) {
        *self.inventory.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&inventory));
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        attached.retain(|a| match a.upstream.upgrade() {
            Some(upstream) => {
                upstream.set_endpoints(&inventory.endpoints(&a.service, &a.port));
                true
            }
            None => false,
        });
    }

    /// Services routes ask for, by name: what a runtime needs to watch.
    pub fn services(&self) -> Vec<String> {
        let attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = attached
            .iter()
            .filter(|a| a.upstream.strong_count() > 0)
            .map(|a| a.service.clone())
            .collect();
        names.sort();
        names.dedup();
        names
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
            image: None,
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
