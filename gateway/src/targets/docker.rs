//! Docker: one inventory of the engine's containers, then its event stream.
//!
//! A service's replicas are its containers. What a container belongs to is
//! read off the labels its maker writes ([`member_of`]): a Swarm task is
//! of its Swarm service (`shop_web`), a compose container of its project's
//! service (`shop/web`), and a container of neither that declares routes
//! (`picket.enable=true`) is a service of its own (`container:blog`). A
//! container that copies one label of a service, or a service's name
//! without its project, joins nothing. A replica is ready when it runs, is
//! not paused, and — if it has a healthcheck — is healthy.
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
//! ## A hung engine
//! Every call (list, inspect, ping) passes the engine's gate (its breaker,
//! see [`super::gate`]) and is bounded by [`CALL_TIMEOUT`]. A calm engine
//! and a hung one both send no events, so an engine whose stream has been
//! quiet for [`QUIET`] is pinged (`/_ping`): no answer within
//! [`STALE_AFTER`] marks its data stale, none at all ends the session, and
//! the next one starts with a fresh inventory.
//!
//! ## A refused right
//! An engine (or a socket proxy) that answers 403 to the list, an inspect
//! or the events gets the same fallback as Kubernetes: a service no other
//! engine reports is checked by a connect to its name; the node says once
//! which right is missing and tries again every breaker cool-down.
//!
//! For Swarm, one such watcher follows each engine of the swarm through
//! its read-only socket proxy, and their inventories are merged; each
//! engine is reachable or not on its own ([`super::reach`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, HealthStatusEnum};
use bollard::query_parameters::{EventsOptionsBuilder, ListContainersOptionsBuilder};
use futures_util::StreamExt;
use picket_proto::Backoff;

mod swarm_task;

pub use swarm_task::Vouch;

use super::gate::{Gate, Refused};
use super::image::label as image_label;
use super::{Catalog, Inventory, Link, labels};
use crate::config::ServicePort;
use crate::config::declared::Declared;
use crate::shutdown::Shutdown;
use crate::upstream::{Endpoint, Target};

/// The label of a Swarm task's service.
pub const SWARM_SERVICE_LABEL: &str = "com.docker.swarm.service.name";
/// The label of a Swarm task's container.
pub const SWARM_TASK_LABEL: &str = "com.docker.swarm.task.id";
/// The labels of a compose container: its project and its service.
pub const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";
pub const COMPOSE_SERVICE_LABEL: &str = "com.docker.compose.service";
pub use labels::CONTAINER_PREFIX;

/// The service a container belongs to, as routes name it: the Swarm
/// service of a task (`shop_web`: its service's label with its task's),
/// else the compose service of a project (`shop/web`: both labels), else,
/// for a container that declares routes (`picket.enable=true`), itself
/// (`container:NAME`); `None`: none.
pub fn member_of(name: &str, labels: &HashMap<String, String>) -> Option<String> {
    let label = |key: &str| labels.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
    if let (Some(service), Some(_)) = (label(SWARM_SERVICE_LABEL), label(SWARM_TASK_LABEL)) {
        return Some(service.to_string());
    }
    if let (Some(project), Some(service)) =
        (label(COMPOSE_PROJECT_LABEL), label(COMPOSE_SERVICE_LABEL))
    {
        return Some(format!("{project}/{service}"));
    }
    (label(labels::ENABLE) == Some("true") && !name.is_empty())
        .then(|| format!("{CONTAINER_PREFIX}{name}"))
}

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
    /// The label of its image ([`image_label`]): the reference it was
    /// created from, with the start of the engine's image ID (`Image` of
    /// the inspect), or of the registry digest pinned in the reference (a
    /// Swarm task's `name:tag@sha256:…`). The image ID is local to the
    /// engine, not the registry's digest, but it too differs between two
    /// builds pushed under one tag.
    pub image: Option<String>,
    /// When it was created, as the engine says it (RFC 3339, UTC): the
    /// newest container of a service declares its routes.
    pub created: String,
    /// Its `picket.*` labels: the routes it declares ([`labels`]).
    pub labels: BTreeMap<String, String>,
    /// The Swarm task it says it is.
    pub task: Option<String>,
    /// What the swarm says of that ([`swarm_task`]); `Unknown` for a
    /// container that claims no task.
    pub vouch: Vouch,
}

impl ContainerFacts {
    pub fn ready(&self) -> bool {
        self.running && !self.paused && self.healthy != Some(false)
    }

    /// It may serve its service: not a claim of a Swarm task the swarm
    /// denied.
    pub fn belongs(&self) -> bool {
        self.vouch != Vouch::Denied
    }
}

/// The facts of an inspected container, if it belongs to a service.
/// With a `network`, only a container attached to it does, at its address
/// there (none while stopped); else any, at its first network's address by
/// name.
pub fn facts(inspect: &ContainerInspectResponse, network: Option<&str>) -> Option<ContainerFacts> {
    let config = inspect.config.as_ref()?;
    let labels = config.labels.as_ref()?;
    let name = inspect
        .name
        .as_deref()
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_string();
    let service = member_of(&name, labels)?;
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
    Some(ContainerFacts {
        name,
        service,
        ip,
        running,
        paused,
        healthy,
        image,
        created: inspect.created.clone().unwrap_or_default(),
        labels: labels
            .iter()
            .filter(|(key, _)| labels::ours(key))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        task: labels
            .get(SWARM_SERVICE_LABEL)
            .and(labels.get(SWARM_TASK_LABEL))
            .filter(|task| !task.trim().is_empty())
            .cloned(),
        vouch: Vouch::Unknown,
    })
}

/// Every service container of one or more engines, by container id.
#[derive(Debug, Clone, Default)]
pub struct DockerInventory {
    pub containers: BTreeMap<String, ContainerFacts>,
    /// An engine refuses (403) to list its containers: a service none of
    /// the others runs is checked by a connect to its name.
    pub forbidden: bool,
}

impl Inventory for DockerInventory {
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint> {
        let ServicePort::Number(port) = port else {
            return Vec::new();
        };
        let endpoints: Vec<Endpoint> = self
            .containers
            .values()
            .filter(|c| c.service == service && c.belongs())
            .map(|c| Endpoint {
                id: c.name.clone(),
                target: c.ip.map(|ip| Target::Addr((ip, *port).into())),
                ready: c.ready(),
                images: c.image.iter().cloned().collect(),
                checked: false,
            })
            .collect();
        if endpoints.is_empty() && self.forbidden {
            // By the name the engine's DNS answers for it: a compose
            // service's own name on its project's network, a container's
            // name, a Swarm service's name.
            let host = service
                .strip_prefix(CONTAINER_PREFIX)
                .or_else(|| service.rsplit_once('/').map(|(_, name)| name))
                .unwrap_or(service);
            return vec![Endpoint {
                id: service.to_string(),
                target: Some(Target::Named {
                    host: host.into(),
                    port: *port,
                }),
                ready: true,
                images: [].into(),
                checked: true,
            }];
        }
        endpoints
    }

    /// Each service's routes, as its newest container's labels declare
    /// them (a running one before a stopped one); the service is as old as
    /// its oldest container.
    fn routes(&self) -> Vec<Declared> {
        let mut newest: BTreeMap<&str, &ContainerFacts> = BTreeMap::new();
        let mut oldest: BTreeMap<&str, i64> = BTreeMap::new();
        for container in self.containers.values().filter(|c| c.belongs()) {
            let key = |c: &ContainerFacts| (c.running, c.created.clone(), c.name.clone());
            match newest.get(container.service.as_str()) {
                Some(held) if key(held) >= key(container) => {}
                _ => {
                    newest.insert(&container.service, container);
                }
            }
            if let Some(created) = unix_ms(&container.created) {
                let since = oldest.entry(&container.service).or_insert(created);
                *since = (*since).min(created);
            }
        }
        newest
            .into_iter()
            .flat_map(|(service, container)| {
                let mut declared = labels::routes(service, &container.labels);
                for route in &mut declared {
                    route.since_ms = oldest.get(service).copied();
                }
                declared
            })
            .collect()
    }
}

/// An engine's RFC 3339 time (`2026-12-04T10:00:01.5Z`) in Unix ms.
fn unix_ms(time: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339_weak(time.trim()).ok()?;
    let ms = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    i64::try_from(ms).ok()
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

/// What one engine reported.
#[derive(Debug, Clone)]
enum EngineView {
    Containers(BTreeMap<String, ContainerFacts>),
    /// It refuses to list its containers.
    Forbidden,
}

/// The inventories of the engines a node follows (one for Docker, one per
/// engine for Swarm), merged and published as one. Merging and publishing
/// happen under one lock, so inventories reach routes in the order the
/// engines reported them.
#[derive(Debug)]
pub struct Engines {
    by_engine: Mutex<HashMap<String, EngineView>>,
    catalog: Arc<Catalog>,
    /// Who may be asked about the swarm's tasks ([`swarm_task`]).
    swarm: Mutex<SwarmAsk>,
}

/// The engines a node follows, as askers of the swarm's tasks.
#[derive(Debug, Default)]
struct SwarmAsk {
    engines: Vec<Engine>,
    /// Engines that answered that they are no manager: asked last.
    not_managers: std::collections::HashSet<String>,
    /// Swarm services' names by ID (a service is never renamed).
    names: HashMap<String, String>,
}

impl Engines {
    pub fn new(catalog: Arc<Catalog>) -> Arc<Engines> {
        Arc::new(Engines {
            by_engine: Mutex::new(HashMap::new()),
            catalog,
            swarm: Mutex::default(),
        })
    }

    fn swarm(&self) -> std::sync::MutexGuard<'_, SwarmAsk> {
        self.swarm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops an engine that left, and what it ran.
    pub fn forget(&self, engine: &str) {
        self.swarm().engines.retain(|e| e.name != engine);
        self.update(|by_engine| {
            by_engine.remove(engine);
        });
    }

    /// What the swarm says of `container` (its full ID) being the task its
    /// labels claim, asked of `first`, then of the other engines followed,
    /// managers first.
    async fn vouch(&self, first: &Engine, container: &str, facts: &ContainerFacts) -> Vouch {
        let Some(task_id) = &facts.task else {
            return Vouch::Unknown;
        };
        let mut asked: Vec<Engine> = {
            let swarm = self.swarm();
            let mut others: Vec<Engine> = swarm
                .engines
                .iter()
                .filter(|e| e.name != first.name)
                .cloned()
                .collect();
            others.sort_by_key(|e| swarm.not_managers.contains(&e.name));
            others
        };
        asked.insert(0, first.clone());
        for engine in asked {
            match engine.call(engine.docker.inspect_task(task_id)).await {
                Ok(task) => {
                    let name = match task.service_id.as_deref() {
                        Some(id) => self.service_name(&engine, id).await,
                        None => None,
                    };
                    return swarm_task::judge(container, &facts.service, &task, name.as_deref());
                }
                Err(CallError::Answered(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404,
                    ..
                })) => return Vouch::Denied,
                Err(CallError::Answered(bollard::errors::Error::DockerResponseServerError {
                    status_code: 503,
                    ..
                })) => {
                    self.swarm().not_managers.insert(engine.name.clone());
                }
                Err(_) => {}
            }
        }
        Vouch::Unknown
    }

    /// The name of the Swarm service `id`, asked of `engine` once.
    async fn service_name(&self, engine: &Engine, id: &str) -> Option<String> {
        if let Some(name) = self.swarm().names.get(id) {
            return Some(name.clone());
        }
        let service = engine
            .call(engine.docker.inspect_service(id, None))
            .await
            .ok()?;
        let name = service.spec?.name?;
        self.swarm().names.insert(id.to_string(), name.clone());
        Some(name)
    }

    fn publish(&self, engine: &str, view: EngineView) {
        self.update(|by_engine| {
            by_engine.insert(engine.to_string(), view);
        });
    }

    fn update(&self, change: impl FnOnce(&mut HashMap<String, EngineView>)) {
        let mut by_engine = self.by_engine.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut by_engine);
        let mut merged = DockerInventory::default();
        for view in by_engine.values() {
            match view {
                EngineView::Containers(containers) => merged
                    .containers
                    .extend(containers.iter().map(|(k, v)| (k.clone(), v.clone()))),
                EngineView::Forbidden => merged.forbidden = true,
            }
        }
        self.catalog.publish(Arc::new(merged));
    }
}

/// Back-off between attempts to reach an engine: doubling, capped,
/// jittered ([`Backoff`]).
pub const BACKOFF_FIRST: Duration = Duration::from_millis(250);
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// The longest one engine call (list, inspect, ping) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// An engine whose event stream has been quiet this long is pinged: a hung
/// engine sends no events, as a calm one does.
pub const QUIET: Duration = Duration::from_secs(3);
/// A ping unanswered this long marks the engine's data stale (the ping
/// still waits for [`CALL_TIMEOUT`] before it counts as a failure). A hung
/// engine is marked within `QUIET + STALE_AFTER`.
pub const STALE_AFTER: Duration = Duration::from_secs(1);

/// One engine, every call to it through its gate.
#[derive(Debug, Clone)]
pub struct Engine {
    pub name: String,
    pub docker: Docker,
    pub gate: Arc<Gate>,
}

/// Why an engine call got nothing usable.
#[derive(Debug)]
enum CallError {
    /// Not made: the breaker is open.
    Refused(Refused),
    /// No HTTP answer.
    NoAnswer(String),
    /// 403: a right is missing.
    Forbidden(String),
    /// Another HTTP error.
    Answered(bollard::errors::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Refused(refused) => refused.fmt(f),
            CallError::NoAnswer(why) | CallError::Forbidden(why) => f.write_str(why),
            CallError::Answered(error) => error.fmt(f),
        }
    }
}

/// The HTTP status an engine answered with, if it answered at all.
fn answered_status(error: &bollard::errors::Error) -> Option<u16> {
    use bollard::errors::Error as E;
    match error {
        E::DockerResponseServerError { status_code, .. } => Some(*status_code),
        // An answer the client could not read is still an answer.
        E::JsonDataError { .. } | E::JsonSerdeError { .. } | E::StrParseError { .. } => Some(200),
        _ => None,
    }
}

impl Engine {
    /// One call, through the gate, bounded by [`CALL_TIMEOUT`].
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, CallError> {
        let permit = self.gate.admit().map_err(CallError::Refused)?;
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Err(_) => {
                let why = format!(
                    "no answer within {}",
                    humantime::format_duration(CALL_TIMEOUT)
                );
                permit.failed(&why);
                Err(CallError::NoAnswer(why))
            }
            Ok(Ok(value)) => {
                permit.answered();
                Ok(value)
            }
            Ok(Err(error)) => match answered_status(&error) {
                Some(403) => {
                    permit.answered();
                    Err(CallError::Forbidden(error.to_string()))
                }
                Some(_) => {
                    permit.answered();
                    Err(CallError::Answered(error))
                }
                None => {
                    permit.failed(&error);
                    Err(CallError::NoAnswer(error.to_string()))
                }
            },
        }
    }

    /// Pings the engine: marks its data stale if no answer comes within
    /// [`STALE_AFTER`], and ends the session if none comes at all.
    async fn ping(&self, link: &Link) -> Result<(), Ended> {
        let permit = self
            .gate
            .admit()
            .map_err(|r| Ended::from(CallError::Refused(r)))?;
        let ping = self.docker.ping();
        let mut ping = std::pin::pin!(ping);
        let answer = tokio::select! {
            answer = &mut ping => Some(answer),
            () = tokio::time::sleep(STALE_AFTER) => None,
        };
        let answer = match answer {
            Some(answer) => Some(answer),
            None => {
                let why = format!(
                    "no answer to a ping within {}",
                    humantime::format_duration(STALE_AFTER)
                );
                link.silent(&self.name, &why);
                tokio::time::timeout(CALL_TIMEOUT - STALE_AFTER, ping)
                    .await
                    .ok()
            }
        };
        match answer {
            None => {
                let why = format!(
                    "no answer to a ping within {}",
                    humantime::format_duration(CALL_TIMEOUT)
                );
                permit.failed(&why);
                Err(Ended {
                    reached: false,
                    forbidden: false,
                    reached_events: true,
                    why,
                })
            }
            Some(Err(error)) if answered_status(&error).is_none() => {
                permit.failed(&error);
                Err(Ended {
                    reached: false,
                    forbidden: false,
                    reached_events: true,
                    why: error.to_string(),
                })
            }
            Some(_) => {
                permit.answered();
                link.answered(&self.name);
                Ok(())
            }
        }
    }
}

/// Follows one engine until `shutdown` (or until the task is aborted).
pub async fn run(
    engine: Engine,
    network: Option<String>,
    engines: Arc<Engines>,
    link: Arc<Link>,
    mut shutdown: Shutdown,
) {
    {
        let mut swarm = engines.swarm();
        swarm.engines.retain(|e| e.name != engine.name);
        swarm.engines.push(engine.clone());
    }
    let mut backoff = Backoff::new(BACKOFF_FIRST, BACKOFF_CAP);
    let (mut forbidden_said, mut events_said) = (false, false);
    loop {
        // While its breaker is open, the engine is not called at all.
        if let Some(left) = engine.gate.open_for() {
            tokio::select! {
                () = tokio::time::sleep(left) => {}
                () = shutdown.wait() => return,
            }
        }
        let session = follow(
            &engine,
            network.as_deref(),
            &engines,
            &link,
            &mut forbidden_said,
        );
        let ended = tokio::select! {
            ended = session => ended,
            () = shutdown.wait() => return,
        };
        if ended.forbidden && ended.reached_events {
            // The list answers, the events do not: the listed
            // containers stand, listed again every cool-down.
            link.answered(&engine.name);
            if !events_said {
                events_said = true;
                tracing::warn!(
                    engine = %engine.name,
                    error = %ended,
                    "the engine refuses (403) to stream events: grant GET /events (socket proxy: EVENTS=1); \
                     listing its containers again every breaker cool-down instead"
                );
            }
            tokio::select! {
                () = tokio::time::sleep(link.retry_forbidden) => {}
                () = shutdown.wait() => return,
            }
            continue;
        }
        if ended.forbidden {
            engines.publish(&engine.name, EngineView::Forbidden);
            link.answered(&engine.name);
            if !forbidden_said {
                forbidden_said = true;
                tracing::warn!(
                    engine = %engine.name,
                    error = %ended,
                    "the engine refuses (403) to list, inspect or follow containers: grant GET /containers/json, \
                     /containers/{{id}}/json and /events (socket proxy: CONTAINERS=1, EVENTS=1); \
                     falling back to connect checks of each service's name"
                );
            }
            tokio::select! {
                () = tokio::time::sleep(link.retry_forbidden) => {}
                () = shutdown.wait() => return,
            }
            continue;
        }
        link.silent(&engine.name, &ended);
        if ended.reached {
            backoff.reset();
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_wait()) => {}
            () = shutdown.wait() => return,
        }
    }
}

/// Why a session with an engine ended.
#[derive(Debug)]
struct Ended {
    /// The engine was reached and its stream ran.
    reached: bool,
    /// The engine refuses a right the node needs.
    forbidden: bool,
    /// The inventory was taken; the event stream was what ended.
    reached_events: bool,
    why: String,
}

impl From<CallError> for Ended {
    fn from(error: CallError) -> Ended {
        Ended {
            reached: matches!(error, CallError::Answered(_) | CallError::Forbidden(_)),
            forbidden: matches!(error, CallError::Forbidden(_)),
            reached_events: false,
            why: error.to_string(),
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

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

/// `facts` with what the swarm says of the task it claims, if any: asked
/// anew unless `before` (the container as last seen) claimed the same
/// task and was confirmed or denied. A denial is logged once.
async fn vouched(
    engine: &Engine,
    engines: &Engines,
    id: &str,
    mut facts: ContainerFacts,
    before: Option<&ContainerFacts>,
) -> ContainerFacts {
    if facts.task.is_none() {
        return facts;
    }
    let settled = before.filter(|b| b.task == facts.task && b.vouch != Vouch::Unknown);
    facts.vouch = match settled {
        Some(before) => before.vouch,
        None => engines.vouch(engine, id, &facts).await,
    };
    if facts.vouch == Vouch::Denied && settled.is_none() {
        tracing::warn!(
            engine = %engine.name,
            container = %facts.name,
            service = %facts.service,
            task = facts.task.as_deref().unwrap_or_default(),
            "a container claims to be a task of a Swarm service, and the swarm says it is not: not a replica"
        );
    }
    facts
}

/// One session: a fresh inventory, then the event stream until it ends,
/// with a ping whenever the stream has been quiet for [`QUIET`].
async fn follow(
    engine: &Engine,
    network: Option<&str>,
    engines: &Engines,
    link: &Link,
    forbidden_said: &mut bool,
) -> Ended {
    let name = engine.name.as_str();
    let docker = &engine.docker;
    let since = u64::try_from(crate::clock::now_unix())
        .unwrap_or(0)
        .saturating_sub(1);
    let listed = match engine
        .call(docker.list_containers(Some(ListContainersOptionsBuilder::new().all(true).build())))
        .await
    {
        Ok(listed) => listed,
        Err(error) => return error.into(),
    };
    let mut containers = BTreeMap::new();
    for summary in listed {
        let Some(id) = summary.id else { continue };
        match engine.call(docker.inspect_container(&id, None)).await {
            Ok(inspect) => {
                if let Some(facts) = facts(&inspect, network) {
                    let facts = vouched(engine, engines, &id, facts, None).await;
                    containers.insert(id, facts);
                }
            }
            // Gone between the list and the inspect.
            Err(CallError::Answered(bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            })) => {}
            Err(error) => return error.into(),
        }
    }
    tracing::debug!(
        engine = name,
        containers = containers.len(),
        "Docker inventory taken"
    );
    engines.publish(name, EngineView::Containers(containers.clone()));
    link.answered(name);
    if std::mem::take(forbidden_said) {
        tracing::info!(
            engine = name,
            "the engine lets the node list containers again; connect checks by name end"
        );
    }
    link.changes.signal();
    // The stream request goes out on its first poll; the list just made was
    // the call that proved the engine, so the stream's own admission only
    // keeps it from going out while the breaker is open.
    match engine.gate.admit() {
        Ok(permit) => permit.abandon(),
        Err(refused) => return CallError::Refused(refused).into(),
    }
    let filters = HashMap::from([("type", vec!["container"])]);
    let options = EventsOptionsBuilder::new()
        .since(&since.to_string())
        .filters(&filters)
        .build();
    let mut events = docker.events(Some(options));
    // Containers a stop was asked of, still running.
    let mut going: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        let quiet_until = engine.gate.last_alive() + QUIET;
        let event = tokio::select! {
            event = events.next() => event,
            () = tokio::time::sleep_until(quiet_until) => {
                if engine.gate.last_alive() + QUIET <= tokio::time::Instant::now()
                    && let Err(ended) = engine.ping(link).await
                {
                    return ended;
                }
                continue;
            }
        };
        let event = match event {
            None => {
                return Ended {
                    reached: true,
                    forbidden: false,
                    reached_events: true,
                    why: "the event stream ended".into(),
                };
            }
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                return Ended {
                    reached: answered_status(&error).is_some(),
                    forbidden: answered_status(&error) == Some(403),
                    reached_events: true,
                    why: error.to_string(),
                };
            }
        };
        engine.gate.alive();
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
        let before = containers.get(&id).cloned();
        if action == "destroy" {
            containers.remove(&id);
        } else {
            match engine.call(docker.inspect_container(&id, None)).await {
                Ok(inspect) => match facts(&inspect, network) {
                    Some(facts) => {
                        let mut facts = vouched(engine, engines, &id, facts, before.as_ref()).await;
                        // Still running, but on its way out: not ready.
                        if going.contains(&id) {
                            facts.running = false;
                        }
                        containers.insert(id.clone(), facts);
                    }
                    None => {
                        containers.remove(&id);
                    }
                },
                Err(CallError::Answered(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404,
                    ..
                })) => {
                    containers.remove(&id);
                }
                Err(error) => return error.into(),
            }
        }
        if containers.get(&id) != before.as_ref() {
            tracing::debug!(engine = name, container = %id, action, "container changed");
            engines.publish(name, EngineView::Containers(containers.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container_of(service: &str, name: String) -> ContainerFacts {
        ContainerFacts {
            name,
            service: service.into(),
            ip: Some([10, 0, 0, 1].into()),
            running: true,
            paused: false,
            healthy: None,
            image: None,
            created: String::new(),
            labels: BTreeMap::new(),
            task: None,
            vouch: Vouch::Unknown,
        }
    }

    fn route(service: &str) -> Arc<crate::upstream::Upstream> {
        let text = format!(
            "[runtime]\nkind = \"swarm\"\nproxies = [\"p:2375\"]\n[[route]]\nname = \"{service}\"\nservice = \"{service}\"\nport = 80\n"
        );
        let config = crate::config::Config::parse("t.toml", &text).unwrap();
        let route = &config.routes[0];
        crate::upstream::Upstream::new(
            route,
            Arc::new(crate::upstream::Pool::new(route.bounds())),
            None,
            None,
            &Arc::new(crate::metrics::Metrics::new()),
            Default::default(),
        )
    }

    fn generation(up: &crate::upstream::Upstream) -> u64 {
        up.replicas()
            .first()
            .and_then(|r| r.id.rsplit('-').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Two engines reporting at once: neither's news is ever overwritten by
    /// a merge taken before it.
    #[test]
    fn two_engines_publishing_at_once_never_roll_each_other_back() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let catalog = Arc::new(Catalog::default());
        let engines = Engines::new(Arc::clone(&catalog));
        let routes = [route("a"), route("b")];
        for (up, service) in routes.iter().zip(["a", "b"]) {
            catalog.attach(up, service, &ServicePort::Number(80));
        }
        let done = std::sync::atomic::AtomicUsize::new(0);
        let rollbacks = std::thread::scope(|scope| {
            for service in ["a", "b"] {
                let (engines, done) = (&engines, &done);
                scope.spawn(move || {
                    for g in 1..=20_000u64 {
                        let containers = BTreeMap::from([(
                            service.to_string(),
                            container_of(service, format!("{service}-{g}")),
                        )]);
                        engines.publish(service, EngineView::Containers(containers));
                        // Room for the other engine's publication to land.
                        std::thread::yield_now();
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                });
            }
            // A route's generation never goes back.
            let observer = scope.spawn(|| {
                let mut rollbacks = 0;
                let mut seen = [0, 0];
                while done.load(std::sync::atomic::Ordering::Acquire) < 2 {
                    for (i, route) in routes.iter().enumerate() {
                        let now = generation(route);
                        if now < seen[i] {
                            rollbacks += 1;
                        }
                        seen[i] = seen[i].max(now);
                    }
                }
                rollbacks
            });
            observer.join().unwrap()
        });
        assert_eq!(rollbacks, 0, "a merge taken earlier was published later");
        assert_eq!(
            routes.iter().map(|r| generation(r)).collect::<Vec<_>>(),
            [20_000, 20_000]
        );
    }

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
        let compose = serde_json::json!({
            "com.docker.compose.project": "shop",
            "com.docker.compose.service": "api"
        });
        let running = container(serde_json::json!({"Running": true}), compose.clone());
        let facts_of = facts(&running, None).unwrap();
        assert_eq!(facts_of.name, "shop-api-1");
        assert_eq!(facts_of.service, "shop/api");
        assert_eq!(
            facts_of.ip,
            Some("172.20.0.5".parse().unwrap()),
            "the first network by name"
        );
        assert_eq!(
            facts_of.image.as_deref(),
            Some("api@sha256:4c0f12ab9d2e"),
            "tagged latest: the image ID says which build"
        );
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
        let task = serde_json::json!({"com.docker.swarm.service.name": "web", "com.docker.swarm.task.id": "t1"});
        let running_task = container(serde_json::json!({"Running": true}), task.clone());
        assert_eq!(facts(&running_task, None).unwrap().service, "web");
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

    /// What a container belongs to is read off the labels its maker
    /// writes, whole: one label copied joins nothing.
    #[test]
    fn a_container_belongs_to_a_service_by_every_label_of_it() {
        let labels = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        type Labels<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Labels<'_>, Option<&str>)] = &[
            (
                &[
                    (COMPOSE_PROJECT_LABEL, "shop"),
                    (COMPOSE_SERVICE_LABEL, "web"),
                ],
                Some("shop/web"),
            ),
            // A compose service's name alone: no project, no service.
            (&[(COMPOSE_SERVICE_LABEL, "web")], None),
            (&[(COMPOSE_PROJECT_LABEL, "shop")], None),
            (
                &[(COMPOSE_SERVICE_LABEL, "web"), (labels::ENABLE, "true")],
                Some("container:blog-1"),
            ),
            (
                &[(SWARM_SERVICE_LABEL, "shop_web"), (SWARM_TASK_LABEL, "t1")],
                Some("shop_web"),
            ),
            // A Swarm service's name without a task.
            (&[(SWARM_SERVICE_LABEL, "shop_web")], None),
            // A Swarm task wins over compose labels copied beside it.
            (
                &[
                    (SWARM_SERVICE_LABEL, "shop_web"),
                    (SWARM_TASK_LABEL, "t1"),
                    (COMPOSE_PROJECT_LABEL, "shop"),
                    (COMPOSE_SERVICE_LABEL, "web"),
                ],
                Some("shop_web"),
            ),
            // A container of no service that declares routes.
            (&[(labels::ENABLE, "true")], Some("container:blog-1")),
            (&[(labels::ENABLE, "false")], None),
            (
                &[(COMPOSE_PROJECT_LABEL, " "), (COMPOSE_SERVICE_LABEL, "web")],
                None,
            ),
        ];
        for (pairs, expected) in cases {
            assert_eq!(
                member_of("blog-1", &labels(pairs)).as_deref(),
                *expected,
                "{pairs:?}"
            );
        }
        assert_eq!(member_of("", &labels(&[(labels::ENABLE, "true")])), None);
    }

    #[test]
    fn two_builds_under_one_tag_have_two_labels() {
        let compose = serde_json::json!({
            "com.docker.compose.project": "shop",
            "com.docker.compose.service": "api"
        });
        let built = |reference: &str, id: &str| {
            let mut inspect = container(serde_json::json!({"Running": true}), compose.clone());
            inspect.image = Some(id.into());
            if let Some(config) = inspect.config.as_mut() {
                config.image = Some(reference.into());
            }
            facts(&inspect, None).unwrap().image
        };
        let old = "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
        let new = "sha256:9b1d7e0c3a5500aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
        assert_eq!(
            built("registry.example.com/shop/api:1.4", old).as_deref(),
            Some("api:1.4@sha256:4c0f12ab9d2e")
        );
        assert_eq!(
            built("registry.example.com/shop/api:1.4", new).as_deref(),
            Some("api:1.4@sha256:9b1d7e0c3a55")
        );
        // A Swarm task's reference is pinned to the registry's digest,
        // which wins over the engine's image ID.
        assert_eq!(
            built(&format!("shop/api:1.4@{new}"), old).as_deref(),
            Some("api:1.4@sha256:9b1d7e0c3a55")
        );
        let mut unnamed = container(serde_json::json!({"Running": true}), compose.clone());
        if let Some(config) = unnamed.config.as_mut() {
            config.image = None;
        }
        assert_eq!(facts(&unnamed, None).unwrap().image, None);
    }

    /// While a service rolls to new labels, its newest container speaks
    /// for it; a stopped container only when none runs.
    #[test]
    fn the_newest_container_of_a_service_declares_its_routes() {
        let container = |created: &str, running: bool, host: &str| {
            let mut facts = container_of("shop_web", format!("shop_web.{created}"));
            facts.running = running;
            facts.created = format!("2026-12-04T10:00:0{created}.000000000Z");
            facts.labels = [
                ("picket.enable", "true"),
                ("picket.route.shop.host", host),
                ("picket.route.shop.port", "80"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            facts
        };
        let hosts = |containers: Vec<ContainerFacts>| -> Vec<String> {
            let inventory = DockerInventory {
                containers: containers
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| (i.to_string(), c))
                    .collect(),
                forbidden: false,
            };
            inventory
                .routes()
                .iter()
                .flat_map(|d| d.fields.iter().filter(|(k, _)| k == "host"))
                .map(|(_, v)| v.clone())
                .collect()
        };
        assert_eq!(
            hosts(vec![
                container("1", true, "old.example"),
                container("2", true, "new.example")
            ]),
            ["new.example"]
        );
        assert_eq!(
            hosts(vec![
                container("2", true, "new.example"),
                container("1", true, "old.example")
            ]),
            ["new.example"],
            "whatever the order of their ids"
        );
        assert_eq!(
            hosts(vec![
                container("1", true, "old.example"),
                container("2", false, "new.example")
            ]),
            ["old.example"],
            "a running container before a stopped one"
        );
        assert!(hosts(vec![]).is_empty());
    }

    #[test]
    fn inventories_give_endpoints() {
        let mut inventory = DockerInventory::default();
        for (id, service, ip, running, vouch) in [
            ("1", "api", Some("10.0.0.1"), true, Vouch::Confirmed),
            ("2", "api", None, false, Vouch::Unknown),
            ("3", "web", Some("10.0.0.3"), true, Vouch::Unknown),
            // A copy of a task's labels the swarm denied: no replica.
            ("4", "api", Some("10.0.0.4"), true, Vouch::Denied),
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
                    image: (id != "2").then(|| "api:1@sha256:4c0f12ab9d2e".into()),
                    created: String::new(),
                    labels: BTreeMap::new(),
                    task: (vouch != Vouch::Unknown).then(|| format!("t{id}")),
                    vouch,
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
            endpoints[0].images,
            ["api:1@sha256:4c0f12ab9d2e"],
            "one container, one image"
        );
        assert_eq!(
            (
                endpoints[1].target.as_ref(),
                endpoints[1].ready,
                endpoints[1].images.as_slice()
            ),
            (None, false, &[][..])
        );
        assert!(
            inventory
                .endpoints("nothing", &ServicePort::Number(1))
                .is_empty()
        );
    }
}
