//! Docker: one inventory of the engine's containers, then its event stream.
//!
//! A service's replicas are its containers: the compose service label, or
//! the Swarm service label. A replica is ready when it runs, is not
//! paused, and — if it has a healthcheck — is healthy.
//!
//! ## The stream
//! Each event of a container (start, die, stop, kill, health_status,
//! destroy, pause, unpause, …) re-inspects it and publishes the new
//! inventory at once. A broken stream is reopened after a capped back-off,
//! always with a fresh inventory first: the engine replays only its last
//! 256 events, so nothing that happened meanwhile is missed. Losing and
//! finding the engine are logged once each; meanwhile routing keeps the
//! last known replicas and verdicts say the data is stale.
//!
//! A container being stopped leaves the rotation at the engine's first word
//! of it: the `kill` event with a terminating signal (`docker stop`, a
//! Swarm task shut down by a rolling update) or `stop`, while the process
//! may still run and answer its last requests, not only at `die`, when its
//! address already refuses ([`stopping`]).
//!
//! For Swarm, one such watcher follows each engine of the swarm through
//! its read-only socket proxy, and their inventories are merged.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, HealthStatusEnum};
use bollard::query_parameters::{EventsOptionsBuilder, ListContainersOptionsBuilder};
use futures_util::StreamExt;

use super::{Catalog, Inventory};
use crate::changes::Changes;
use crate::config::ServicePort;
use crate::shutdown::Shutdown;
use crate::upstream::{Endpoint, Target};
use crate::verdict::board::RuntimeStatus;
use crate::verdict::image_label;

/// The labels that name a container's service, in order of preference.
pub const SERVICE_LABELS: [&str; 2] = [
    "com.docker.compose.service",
    "com.docker.swarm.service.name",
];

/// The label of a Swarm task's container.
pub const SWARM_TASK_LABEL: &str = "com.docker.swarm.task.id";

/// What a node needs to know of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerFacts {
    pub name: String,
    pub service: String,
    pub ip: Option<IpAddr>,
    pub running: bool,
    pub paused: bool,
    /// `None` when the container has no healthcheck.
    pub healthy: Option<bool>,
    pub image: Option<String>,
}

impl ContainerFacts {
    pub fn ready(&self) -> bool {
        self.running && !self.paused && self.healthy != Some(false)
    }
}

/// The facts of an inspected container, if it belongs to a service.
/// With a `network`, only a container attached to it does, at its address
/// there (none while stopped); else any, at its first network's address by
/// name.
pub fn facts(inspect: &ContainerInspectResponse, network: Option<&str>) -> Option<ContainerFacts> {
    let config = inspect.config.as_ref()?;
    let labels = config.labels.as_ref()?;
    let service = SERVICE_LABELS.iter().find_map(|l| labels.get(*l))?.clone();
    let state = inspect.state.as_ref();
    let running = state.and_then(|s| s.running).unwrap_or(false);
    // A Swarm task's container never starts again: Swarm replaces it with a
    // new task. Once it stops it is history (kept by the task history
    // limit), not a replica.
    if !running && labels.contains_key(SWARM_TASK_LABEL) {
        return None;
    }
    let paused = state.and_then(|s| s.paused).unwrap_or(false);
    let healthy = state
        .and_then(|s| s.health.as_ref())
        .and_then(|h| h.status)
        .and_then(|status| match status {
            HealthStatusEnum::HEALTHY => Some(true),
            HealthStatusEnum::UNHEALTHY | HealthStatusEnum::STARTING => Some(false),
            HealthStatusEnum::NONE | HealthStatusEnum::EMPTY => None,
        });
    let networks: BTreeMap<&str, Option<IpAddr>> = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
        .map(|networks| {
            networks
                .iter()
                .map(|(name, settings)| {
                    let ip = settings
                        .ip_address
                        .as_deref()
                        .and_then(|ip| ip.parse().ok());
                    (name.as_str(), ip)
                })
                .collect()
        })
        .unwrap_or_default();
    let ip = match network {
        Some(wanted) => *networks.get(wanted)?,
        None => networks.values().find_map(|ip| *ip),
    };
    let image = config
        .image
        .as_deref()
        .map(|reference| image_label(reference, inspect.image.as_deref()));
    let name = inspect
        .name
        .as_deref()
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    Some(ContainerFacts {
        name,
        service,
        ip,
        running,
        paused,
        healthy,
        image,
    })
}

/// Every service container of one or more engines, by container id.
#[derive(Debug, Clone, Default)]
pub struct DockerInventory {
    pub containers: BTreeMap<String, ContainerFacts>,
}

impl Inventory for DockerInventory {
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint> {
        let ServicePort::Number(port) = port else {
            return Vec::new();
        };
        self.containers
            .values()
            .filter(|c| c.service == service)
            .map(|c| Endpoint {
                id: c.name.clone(),
                target: c.ip.map(|ip| Target::Addr((ip, *port).into())),
                ready: c.ready(),
                image: c.image.clone(),
                checked: false,
            })
            .collect()
    }
}

/// How an engine is reached.
pub fn connect(endpoint: Option<&str>) -> Result<Docker, bollard::errors::Error> {
    match endpoint {
        Some(unix) if unix.starts_with("unix://") => {
            Docker::connect_with_unix(unix, 120, bollard::API_DEFAULT_VERSION)
        }
        Some(http) => Docker::connect_with_http(http, 120, bollard::API_DEFAULT_VERSION),
        None => Docker::connect_with_defaults(),
    }
}

/// The inventories of the engines a node follows (one for Docker, one per
/// engine for Swarm), merged and published as one.
#[derive(Debug)]
pub struct Engines {
    by_engine: Mutex<HashMap<String, DockerInventory>>,
    catalog: Arc<Catalog>,
}

impl Engines {
    pub fn new(catalog: Arc<Catalog>) -> Arc<Engines> {
        Arc::new(Engines {
            by_engine: Mutex::new(HashMap::new()),
            catalog,
        })
    }

    /// Drops an engine that left, and what it ran.
    pub fn forget(&self, engine: &str) {
        self.update(|by_engine| {
            by_engine.remove(engine);
        });
    }

    fn publish(&self, engine: &str, inventory: DockerInventory) {
        self.update(|by_engine| {
            by_engine.insert(engine.to_string(), inventory);
        });
    }

    fn update(&self, change: impl FnOnce(&mut HashMap<String, DockerInventory>)) {
        let merged = {
            let mut by_engine = self.by_engine.lock().unwrap_or_else(|e| e.into_inner());
            change(&mut by_engine);
            let mut merged = DockerInventory::default();
            for inventory in by_engine.values() {
                merged.containers.extend(
                    inventory
                        .containers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
            }
            merged
        };
        self.catalog.publish(Arc::new(merged));
    }
}

/// Back-off between attempts to reach an engine: doubling, capped.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(250);
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// Follows one engine until `shutdown` (or until the task is aborted).
pub fn spawn(
    engine: String,
    docker: Docker,
    network: Option<String>,
    engines: Arc<Engines>,
    status: Arc<RuntimeStatus>,
    changes: Arc<Changes>,
    mut shutdown: Shutdown,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = BACKOFF_FIRST;
        loop {
            let session = follow(
                &engine,
                &docker,
                network.as_deref(),
                &engines,
                &status,
                &changes,
            );
            let error = tokio::select! {
                error = session => error,
                () = shutdown.wait() => return,
            };
            if status.set_stale(true) {
                tracing::warn!(engine = %engine, %error, "Docker engine lost; keeping the last known replicas");
                changes.signal();
            } else {
                tracing::debug!(engine = %engine, %error, "Docker engine still unreachable");
            }
            if error.reached {
                backoff = BACKOFF_FIRST;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shutdown.wait() => return,
            }
            backoff = (backoff * 2).min(BACKOFF_CAP);
        }
    })
}

/// Why a session with an engine ended.
#[derive(Debug)]
struct Ended {
    /// The engine was reached and its stream ran.
    reached: bool,
    why: String,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// One session: a fresh inventory, then the event stream until it ends.
/// What an event says of a container being stopped: `Some(true)` when it
/// is on its way out (a `kill` with a terminating signal, or `stop`),
/// `Some(false)` when it runs again (`start`, `restart`), `None` when it
/// says neither (`kill -s HUP` asks for a reload, not a stop).
pub fn stopping(action: &str, signal: Option<&str>) -> Option<bool> {
    const TERMINATING: [&str; 8] = [
        "15", "9", "2", "3", "SIGTERM", "SIGKILL", "SIGINT", "SIGQUIT",
    ];
    match action {
        // `docker kill` without a signal sends SIGKILL.
        "kill" => match signal {
            None => Some(true),
            Some(signal) => TERMINATING
                .iter()
                .any(|t| t.eq_ignore_ascii_case(signal))
                .then_some(true),
        },
        "stop" => Some(true),
        "start" | "restart" => Some(false),
        _ => None,
    }
}

async fn follow(
    engine: &str,
    docker: &Docker,
    network: Option<&str>,
    engines: &Engines,
    status: &RuntimeStatus,
    changes: &Changes,
) -> Ended {
    let unreached = |e: bollard::errors::Error| Ended {
        reached: false,
        why: e.to_string(),
    };
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().saturating_sub(1));
    let listed = match docker
        .list_containers(Some(ListContainersOptionsBuilder::new().all(true).build()))
        .await
    {
        Ok(listed) => listed,
        Err(e) => return unreached(e),
    };
    let mut inventory = DockerInventory::default();
    for summary in listed {
        let Some(id) = summary.id else { continue };
        match docker.inspect_container(&id, None).await {
            Ok(inspect) => {
                if let Some(facts) = facts(&inspect, network) {
                    inventory.containers.insert(id, facts);
                }
            }
            // Gone between the list and the inspect.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => return unreached(e),
        }
    }
    tracing::debug!(
        engine,
        containers = inventory.containers.len(),
        "Docker inventory taken"
    );
    engines.publish(engine, inventory.clone());
    if status.set_stale(false) {
        tracing::info!(engine, "Docker engine reachable again; inventory refreshed");
    }
    changes.signal();
    let filters = HashMap::from([("type", vec!["container"])]);
    let options = EventsOptionsBuilder::new()
        .since(&since.to_string())
        .filters(&filters)
        .build();
    let mut events = docker.events(Some(options));
    // Containers a stop was asked of, still running.
    let mut going: std::collections::HashSet<String> = std::collections::HashSet::new();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                return Ended {
                    reached: true,
                    why: e.to_string(),
                };
            }
        };
        let Some(actor) = event.actor else {
            continue;
        };
        let Some(id) = actor.id else {
            continue;
        };
        let action = event.action.unwrap_or_default();
        let signal = actor
            .attributes
            .as_ref()
            .and_then(|a| a.get("signal"))
            .map(String::as_str);
        match stopping(&action, signal) {
            Some(true) => {
                going.insert(id.clone());
            }
            Some(false) => {
                going.remove(&id);
            }
            None => {}
        }
        let before = inventory.containers.get(&id).cloned();
        if action == "destroy" {
            inventory.containers.remove(&id);
        } else {
            match docker.inspect_container(&id, None).await {
                Ok(inspect) => match facts(&inspect, network) {
                    Some(mut facts) => {
                        // Still running, but on its way out: not ready.
                        if going.contains(&id) {
                            facts.running = false;
                        }
                        inventory.containers.insert(id.clone(), facts);
                    }
                    None => {
                        inventory.containers.remove(&id);
                    }
                },
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => {
                    inventory.containers.remove(&id);
                }
                Err(e) => {
                    return Ended {
                        reached: true,
                        why: e.to_string(),
                    };
                }
            }
        }
        if inventory.containers.get(&id) != before.as_ref() {
            tracing::debug!(engine, container = %id, action, "container changed");
            engines.publish(engine, inventory.clone());
        }
    }
    Ended {
        reached: true,
        why: "the event stream ended".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_seen_at_its_first_event() {
        let cases = [
            ("kill", Some("15"), Some(true)),
            ("kill", Some("SIGTERM"), Some(true)),
            ("kill", Some("9"), Some(true)),
            ("kill", None, Some(true)),
            ("kill", Some("1"), None),
            ("kill", Some("SIGHUP"), None),
            ("kill", Some("10"), None),
            ("stop", None, Some(true)),
            ("start", None, Some(false)),
            ("restart", None, Some(false)),
            ("die", Some("15"), None),
            ("health_status: healthy", None, None),
            ("pause", None, None),
        ];
        for (action, signal, want) in cases {
            assert_eq!(stopping(action, signal), want, "{action} {signal:?}");
        }
    }

    fn inspect(json: serde_json::Value) -> ContainerInspectResponse {
        serde_json::from_value(json).unwrap()
    }

    fn container(state: serde_json::Value, labels: serde_json::Value) -> ContainerInspectResponse {
        inspect(serde_json::json!({
            "Id": "abc",
            "Name": "/shop-api-1",
            "Image": "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22",
            "State": state,
            "Config": { "Image": "registry.example.com/shop/api:latest", "Labels": labels },
            "NetworkSettings": { "Networks": {
                "backend": { "IPAddress": "172.20.0.5" },
                "frontend": { "IPAddress": "172.21.0.5" }
            }}
        }))
    }

    #[test]
    fn containers_become_facts() {
        let compose = serde_json::json!({"com.docker.compose.service": "api"});
        let running = container(serde_json::json!({"Running": true}), compose.clone());
        let facts_of = facts(&running, None).unwrap();
        assert_eq!(facts_of.name, "shop-api-1");
        assert_eq!(facts_of.service, "api");
        assert_eq!(
            facts_of.ip,
            Some("172.20.0.5".parse().unwrap()),
            "the first network by name"
        );
        assert_eq!(facts_of.image.as_deref(), Some("api@sha256:4c0f12ab9d2e"));
        assert!(facts_of.ready());
        assert_eq!(
            facts(&running, Some("frontend")).unwrap().ip,
            Some("172.21.0.5".parse().unwrap())
        );
        assert!(
            facts(&running, Some("elsewhere")).is_none(),
            "not attached to the gateway's network: not a replica"
        );
        let stopped = inspect(serde_json::json!({
            "Name": "/shop-api-2",
            "State": {"Running": false},
            "Config": { "Labels": compose },
            "NetworkSettings": { "Networks": { "backend": { "IPAddress": "" } } }
        }));
        let stopped = facts(&stopped, Some("backend")).unwrap();
        assert_eq!(
            (stopped.ip, stopped.ready()),
            (None, false),
            "attached, stopped, without an address"
        );

        let cases = [
            (serde_json::json!({"Running": false}), false),
            (serde_json::json!({"Running": true, "Paused": true}), false),
            (
                serde_json::json!({"Running": true, "Health": {"Status": "unhealthy"}}),
                false,
            ),
            (
                serde_json::json!({"Running": true, "Health": {"Status": "starting"}}),
                false,
            ),
            (
                serde_json::json!({"Running": true, "Health": {"Status": "healthy"}}),
                true,
            ),
        ];
        for (state, ready) in cases {
            assert_eq!(
                facts(&container(state.clone(), compose.clone()), None)
                    .unwrap()
                    .ready(),
                ready,
                "{state}"
            );
        }
        let swarm = container(
            serde_json::json!({"Running": true}),
            serde_json::json!({"com.docker.swarm.service.name": "web"}),
        );
        assert_eq!(facts(&swarm, None).unwrap().service, "web");
        let task = serde_json::json!({"com.docker.swarm.service.name": "web", "com.docker.swarm.task.id": "t1"});
        assert!(
            facts(
                &container(serde_json::json!({"Running": true}), task.clone()),
                None
            )
            .is_some()
        );
        assert!(
            facts(
                &container(serde_json::json!({"Running": false}), task),
                None
            )
            .is_none(),
            "a stopped Swarm task is history, not a replica"
        );
        let loose = container(
            serde_json::json!({"Running": true}),
            serde_json::json!({"other": "x"}),
        );
        assert!(
            facts(&loose, None).is_none(),
            "a container of no service is not tracked"
        );
    }

    #[test]
    fn inventories_give_endpoints() {
        let mut inventory = DockerInventory::default();
        for (id, service, ip, running) in [
            ("1", "api", Some("10.0.0.1"), true),
            ("2", "api", None, false),
            ("3", "web", Some("10.0.0.3"), true),
        ] {
            inventory.containers.insert(
                id.into(),
                ContainerFacts {
                    name: format!("c{id}"),
                    service: service.into(),
                    ip: ip.map(|i| i.parse().unwrap()),
                    running,
                    paused: false,
                    healthy: None,
                    image: Some("api:1".into()),
                },
            );
        }
        let endpoints = inventory.endpoints("api", &ServicePort::Number(8080));
        assert_eq!(endpoints.len(), 2);
        assert_eq!(
            endpoints[0].target,
            Some(Target::Addr(([10, 0, 0, 1], 8080).into()))
        );
        assert!(endpoints[0].ready);
        assert_eq!(
            (endpoints[1].target.as_ref(), endpoints[1].ready),
            (None, false)
        );
        assert!(
            inventory
                .endpoints("nothing", &ServicePort::Number(1))
                .is_empty()
        );
    }
}
