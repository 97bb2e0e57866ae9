//! Kubernetes: the Services and Pods of the node's namespace (and of every
//! namespace in `[runtime] namespaces`), listed once then watched (kube's
//! runtime watcher: re-watch from the last resource version when a stream
//! drops, full re-list on `410 Gone`, back-off on errors capped at 2 s).
//!
//! A Service's replicas are the pods its selector picks, on the target port
//! its port names (a number, or a container port's name), ready when their
//! `Ready` condition is true and they are not terminating. A Service
//! without a selector is checked like an external host: a connect to its
//! name. If RBAC forbids the watch in a namespace, every service there
//! falls back to that connect check, the node says once which right is
//! missing, and tries the watch again every breaker cool-down, so a
//! RoleBinding applied later takes effect without a restart.
//!
//! ## Ingresses and TLS Secrets
//! The Ingresses (`networking.k8s.io/v1`) and the `kubernetes.io/tls`
//! Secrets of the same namespaces are watched apart, each kind by a task
//! of its own ([`ingress`] decides what they declare). A kind RBAC refuses
//! (or an API server that does not serve it) costs the node only what it
//! gives: no routes from Ingresses, or their routes without certificates;
//! never the Services and Pods watch, which alone judges whether the API
//! server answers. Secrets are kept as their certificate and key alone.
//!
//! ## The API server's gate and the probe
//! The client is built with the gate's tower layer ([`GateLayer`]): the
//! watchers, the reflectors and the probe all pass one breaker. The
//! watcher retries a failing watch by itself, without a word, and a hung
//! API server leaves open watches merely quiet; so when nothing at all has
//! come from the API server for [`PROBE_QUIET`] (watch events and answers
//! count), the node probes it (`GET /version`). No answer within
//! [`STALE_AFTER`] marks the data stale (a hung server is seen within
//! `PROBE_QUIET + STALE_AFTER`, under 6 s); no answer within
//! [`PROBE_TIMEOUT`] is a failure for the breaker. A healthy but calm API
//! server costs one request per `PROBE_QUIET` per node (under 0.2/s), not
//! one per second. Routing keeps the last known replicas meanwhile.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use picket_proto::Backoff;

use self::objects::{Ingress, Pod, Secret, Service};
use super::gate::{Gate, GateLayer};
use super::image::label as image_label;
use super::{Catalog, Inventory, Link, RuntimeCertificate};
use crate::config::declared::Declared;
use crate::config::{RuntimeSettings, ServicePort};
use crate::shutdown::{Shutdown, Tasks};
use crate::upstream::{Endpoint, Target};

mod ingress;
mod objects;

/// The namespace a node watches: configured, else the pod's own.
pub fn namespace(settings: &RuntimeSettings) -> String {
    settings
        .namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_string())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// A client for the configured API server (else in-cluster or
/// kubeconfig) whose every call passes the API server's gate.
pub async fn client(
    settings: &RuntimeSettings,
    namespace: &str,
    link: &Arc<Link>,
) -> Result<(kube::Client, Arc<Gate>), kube::Error> {
    let mut config = match &settings.api {
        Some(api) => {
            let url = api.parse().map_err(|e| kube::Error::Service(Box::new(e)))?;
            kube::Config::new(url)
        }
        None => kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
    };
    config.default_namespace = namespace.to_string();
    // A connect that takes longer is as good as refused; the probe bounds
    // the rest.
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    // No retries inside the client, under the gate: a 503 reaches the
    // watcher at once (which backs off by itself) and marks the data
    // stale, instead of seconds later.
    config.default_retry = false;
    let endpoint = config.cluster_url.to_string();
    let gate = link.gates.get(&endpoint);
    // A watch that starts again after an outage proves the data current:
    // its events since the last version arrive in it, and there may be
    // none.
    let answered = Arc::clone(link);
    let layer = GateLayer::new(Arc::clone(&gate))
        .on_success(Arc::new(move || answered.answered(&endpoint)));
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build();
    Ok((client, gate))
}

/// The namespaces a node watches: its own and the configured ones; `None`
/// for every namespace.
pub fn watched(settings: &RuntimeSettings, own: &str) -> Option<Vec<String>> {
    if settings.namespaces.iter().any(|n| n == "*") {
        return None;
    }
    let mut namespaces = settings.namespaces.clone();
    namespaces.push(own.to_string());
    namespaces.sort();
    namespaces.dedup();
    Some(namespaces)
}

/// What a node knows of one watched namespace (or of every namespace, when
/// it watches them all at once).
#[derive(Debug, Clone)]
pub enum NamespaceView {
    Objects {
        services: Vec<Arc<Service>>,
        pods: Vec<Arc<Pod>>,
    },
    /// RBAC forbids the watch there (these lists): services are checked
    /// by connect.
    Forbidden(Refused),
}

/// The lists RBAC refused in a namespace: each needs its own grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Refused {
    pub services: bool,
    pub pods: bool,
}

impl Refused {
    /// What to grant, in words: `services`, `pods`, or both.
    pub fn lists(self) -> &'static str {
        match (self.services, self.pods) {
            (true, false) => "services",
            (false, true) => "pods",
            _ => "services and pods",
        }
    }

    fn add(&mut self, kind: Kind) {
        match kind {
            Kind::Services => self.services = true,
            Kind::Pods => self.pods = true,
        }
    }
}

/// The key of the view of every namespace at once.
pub const ALL: &str = "*";

/// The Ingresses and TLS Secrets of one watched namespace (or of every
/// namespace): what routes and certificates the node takes from it.
#[derive(Debug, Clone, Default)]
pub struct IngressView {
    /// `None` until listed, or while the node may not read them.
    pub ingresses: Option<Vec<Arc<Ingress>>>,
    pub secrets: Vec<Arc<Secret>>,
}

/// The Services and Pods of every watched namespace, and its Ingresses.
#[derive(Debug, Clone, Default)]
pub struct KubeInventory {
    /// The node's own namespace: where a route's bare service name is.
    pub own: String,
    /// By namespace, or one under [`ALL`].
    pub namespaces: BTreeMap<String, NamespaceView>,
    /// The `ingressClassName` of the Ingresses the node serves.
    pub class: String,
    /// By namespace, or one under [`ALL`].
    pub ingresses: BTreeMap<String, IngressView>,
}

fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
}

fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The port of `pod` that `target` names.
fn target_port(target: Option<&IntOrString>, port: i32, pod: &Pod) -> Option<u16> {
    let number = match target {
        None => port,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(name)) => {
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(name.as_str()))?
                .container_port
        }
    };
    u16::try_from(number).ok()
}

/// The labels of the images a pod runs: one per container (init and
/// ephemeral containers aside), in the order of its spec, each with its
/// registry digest once the kubelet reports it (`imageID`). Before any
/// container status, the images its spec names.
fn pod_images(pod: &Pod) -> Vec<String> {
    let containers = pod.spec.as_ref().map_or(&[][..], |s| &s.containers[..]);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let mut labelled: Vec<(usize, String)> = if statuses.is_empty() {
        containers
            .iter()
            .enumerate()
            .filter_map(|(at, c)| Some((at, image_label(c.image.as_deref()?, None))))
            .collect()
    } else {
        statuses
            .iter()
            .map(|status| {
                let at = containers.iter().position(|c| c.name == status.name);
                // Some runtimes report the image ID as the image when several
                // tags name it; the spec says which one was asked for.
                let asked = at.and_then(|at| containers[at].image.as_deref());
                let reference = match asked {
                    Some(asked)
                        if status.image.is_empty() || status.image.starts_with("sha256:") =>
                    {
                        asked
                    }
                    _ => status.image.as_str(),
                };
                let digest = Some(status.image_id.as_str()).filter(|d| d.contains("sha256:"));
                (at.unwrap_or(usize::MAX), image_label(reference, digest))
            })
            .collect()
    };
    labelled.sort_by_key(|(at, _)| *at);
    let mut images: Vec<String> = Vec::with_capacity(labelled.len());
    for (_, label) in labelled {
        if !images.contains(&label) {
            images.push(label);
        }
    }
    images
}

impl Inventory for KubeInventory {
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint> {
        let (namespace, name) = service
            .split_once('/')
            .unwrap_or((self.own.as_str(), service));
        let in_namespace = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.namespace.as_deref().unwrap_or(&self.own) == namespace
        };
        match self
            .namespaces
            .get(namespace)
            .map(|v| (v, false))
            .or_else(|| self.namespaces.get(ALL).map(|v| (v, true)))
        {
            None => Vec::new(),
            Some((NamespaceView::Forbidden(_), _)) => match port {
                ServicePort::Number(port) => vec![fallback(name, namespace, *port)],
                // A named port needs the Service object, which the node may not read.
                ServicePort::Name(_) => Vec::new(),
            },
            Some((NamespaceView::Objects { services, pods }, filter)) => {
                let services = services
                    .iter()
                    .filter(|s| !filter || in_namespace(&s.metadata));
                let pods: Vec<&Pod> = pods
                    .iter()
                    .filter(|p| !filter || in_namespace(&p.metadata))
                    .map(|p| &**p)
                    .collect();
                endpoints_in(namespace, services.map(|s| &**s), &pods, name, port)
            }
        }
    }

    /// Why a route has no replicas when the runtime says why: RBAC hides
    /// the Service's named port, the Service does not exist, or it has no
    /// such port (a typo in a route or an Ingress, which "scaled to zero"
    /// would hide).
    fn unresolved(&self, service: &str, port: &ServicePort) -> Option<String> {
        let (namespace, name) = service
            .split_once('/')
            .unwrap_or((self.own.as_str(), service));
        let (view, all) = match self.namespaces.get(namespace) {
            Some(view) => (view, false),
            None => (self.namespaces.get(ALL)?, true),
        };
        match view {
            NamespaceView::Forbidden(refused) => match port {
                ServicePort::Name(port) => Some(format!(
                    "port \"{port}\" of service {namespace}/{name} cannot be resolved: RBAC forbids \
                     this node to list and watch {lists} in namespace {namespace}; grant list and \
                     watch on {lists} there, or give the port by number",
                    lists = refused.lists()
                )),
                ServicePort::Number(_) => None,
            },
            NamespaceView::Objects { services, .. } => {
                let found = services.iter().find(|s| {
                    s.metadata.name.as_deref() == Some(name)
                        && (!all
                            || s.metadata.namespace.as_deref().unwrap_or(&self.own) == namespace)
                });
                let Some(found) = found else {
                    return Some(format!("no Service {namespace}/{name}"));
                };
                let has_port = found
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.ports.as_ref())
                    .is_some_and(|ports| {
                        ports.iter().any(|p| match port {
                            ServicePort::Number(n) => p.port == i32::from(*n),
                            ServicePort::Name(n) => p.name.as_deref() == Some(n.as_str()),
                        })
                    });
                (!has_port).then(|| format!("Service {namespace}/{name} has no port {port}"))
            }
        }
    }

    /// The routes of the Ingresses of the node's class. A Service in the
    /// node's own namespace goes by its bare name, as a file's route names
    /// it.
    fn routes(&self) -> Vec<Declared> {
        let own = format!("{}/", self.own);
        self.ingresses
            .values()
            .flat_map(|view| view.ingresses.iter().flatten())
            .flat_map(|i| ingress::routes(i, &self.class))
            .map(|mut declared| {
                if let Some(bare) = declared.service.strip_prefix(&own) {
                    declared.service = bare.to_string();
                }
                declared
            })
            .collect()
    }

    /// The TLS Secrets the Ingresses of the node's class name, each once,
    /// asked for every host the Ingresses that name it list.
    fn certificates(&self) -> Vec<RuntimeCertificate> {
        let mut certificates: Vec<RuntimeCertificate> = self
            .ingresses
            .values()
            .flat_map(|view| {
                view.ingresses.iter().flatten().flat_map(|i| {
                    ingress::certificates(i, &self.class, view.secrets.iter().map(|s| &**s))
                })
            })
            .collect();
        certificates.sort_by(|a, b| a.source.cmp(&b.source));
        // `dedup_by` hands the later one first: its hosts join the kept one.
        certificates.dedup_by(|later, kept| {
            let same = later.source == kept.source;
            if same {
                for host in later.hosts.drain(..) {
                    if !kept.hosts.contains(&host) {
                        kept.hosts.push(host);
                    }
                }
            }
            same
        });
        certificates
    }
}

/// The endpoints of the Service `service` of `namespace`, among its
/// objects.
fn endpoints_in<'a>(
    namespace: &str,
    mut services: impl Iterator<Item = &'a Service>,
    pods: &[&Pod],
    service: &str,
    port: &ServicePort,
) -> Vec<Endpoint> {
    let Some(svc) = services.find(|s| s.metadata.name.as_deref() == Some(service)) else {
        return Vec::new();
    };
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let Some(svc_port) = spec.ports.iter().flatten().find(|p| match port {
        ServicePort::Number(n) => p.port == i32::from(*n),
        ServicePort::Name(name) => p.name.as_deref() == Some(name.as_str()),
    }) else {
        return Vec::new();
    };
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty());
    let Some(selector) = selector else {
        // No selector: endpoints are managed by hand; check the Service
        // itself by connect, at its cluster IP when it has one.
        let port = u16::try_from(svc_port.port).unwrap_or(0);
        let cluster_ip = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<std::net::IpAddr>().ok());
        let mut endpoint = fallback(service, namespace, port);
        if let Some(ip) = cluster_ip {
            endpoint.target = Some(Target::Addr((ip, port).into()));
        }
        return vec![endpoint];
    };
    pods.iter()
        .filter(|pod| selects(selector, pod))
        .map(|pod| {
            let ip = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok());
            let port = target_port(svc_port.target_port.as_ref(), svc_port.port, pod);
            let target = ip
                .zip(port)
                .map(|(ip, port): (std::net::IpAddr, u16)| Target::Addr((ip, port).into()));
            Endpoint {
                id: pod.metadata.name.clone().unwrap_or_default(),
                target,
                ready: pod_ready(pod),
                images: pod_images(pod),
                checked: false,
            }
        })
        .collect()
}

/// A Service checked by connect to its cluster DNS name.
fn fallback(service: &str, namespace: &str, port: u16) -> Endpoint {
    Endpoint {
        id: service.to_string(),
        target: Some(Target::Named {
            host: format!("{service}.{namespace}.svc").into(),
            port,
        }),
        ready: true,
        images: [].into(),
        checked: true,
    }
}

fn forbidden(error: &watcher::Error) -> bool {
    let api = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        _ => return false,
    };
    matches!(api, kube::Error::Api(status) if status.code == 403)
}

/// A connect taking longer than this to the API server is a failure.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Quiet time (nothing from the API server: no watch event, no answer)
/// after which the node probes it. Over 5 s, so a calm cluster costs under
/// 0.2 requests/s per node.
pub const PROBE_QUIET: Duration = Duration::from_millis(5_250);
/// A probe unanswered this long marks the data stale.
pub const STALE_AFTER: Duration = Duration::from_millis(500);
/// A probe unanswered this long is a failure for the breaker.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the API server's answer to a probe says its data is current.
fn current(answer: &Result<k8s_openapi::apimachinery::pkg::version::Info, kube::Error>) -> bool {
    match answer {
        Ok(_) => true,
        Err(kube::Error::Api(status)) => status.code < 500,
        Err(_) => false,
    }
}

/// Probes the API server whenever it has been quiet for [`PROBE_QUIET`],
/// until `shutdown`; never while its breaker is open.
fn spawn_probe(
    client: kube::Client,
    gate: Arc<Gate>,
    link: Arc<Link>,
    mut shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    tasks.spawn("kubernetes probe", async move {
        let endpoint = gate.endpoint().to_string();
        // One probe per quiet period at most, whatever became of the last
        // (refused at once, say, while a trial call is under way).
        let mut probed = tokio::time::Instant::now();
        loop {
            let quiet_until = gate.last_alive().max(probed) + PROBE_QUIET;
            let due = match gate.open_for() {
                Some(left) => tokio::time::Instant::now() + left,
                None => quiet_until,
            };
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = shutdown.wait() => return,
            }
            if gate.open_for().is_some()
                || gate.last_alive().max(probed) + PROBE_QUIET > tokio::time::Instant::now()
            {
                continue;
            }
            probed = tokio::time::Instant::now();
            let probe = client.apiserver_version();
            let mut probe = std::pin::pin!(probe);
            let answer = tokio::select! {
                answer = &mut probe => Some(answer),
                () = tokio::time::sleep(STALE_AFTER) => None,
                () = shutdown.wait() => return,
            };
            let answer = match answer {
                Some(answer) => Some(answer),
                None => {
                    let why = format!(
                        "no answer to GET /version within {}",
                        humantime::format_duration(STALE_AFTER)
                    );
                    link.silent(&endpoint, &why);
                    tokio::select! {
                        answer = tokio::time::timeout(PROBE_TIMEOUT - STALE_AFTER, probe) => answer.ok(),
                        () = shutdown.wait() => return,
                    }
                }
            };
            match answer {
                Some(answer) if current(&answer) => link.answered(&endpoint),
                Some(Err(error)) => link.silent(&endpoint, &error),
                Some(Ok(_)) => {}
                None => link.silent(
                    &endpoint,
                    &format!(
                        "no answer to GET /version within {}",
                        humantime::format_duration(PROBE_TIMEOUT)
                    ),
                ),
            }
        }
    });
}

/// The views of every watched namespace, merged and published as one,
/// under one lock.
#[derive(Debug)]
struct Views {
    own: String,
    class: String,
    by_namespace: Mutex<Known>,
    catalog: Arc<Catalog>,
}

/// What the watches of every namespace know.
#[derive(Debug, Default)]
struct Known {
    objects: BTreeMap<String, NamespaceView>,
    ingresses: BTreeMap<String, IngressView>,
}

impl Views {
    fn update(&self, change: impl FnOnce(&mut Known)) {
        let mut known = self.by_namespace.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut known);
        self.catalog.publish(Arc::new(KubeInventory {
            own: self.own.clone(),
            namespaces: known.objects.clone(),
            class: self.class.clone(),
            ingresses: known.ingresses.clone(),
        }));
    }

    fn publish(&self, namespace: &str, view: NamespaceView) {
        self.update(|known| {
            known.objects.insert(namespace.to_string(), view);
        });
    }

    /// Changes what the node knows of a namespace's Ingresses or Secrets.
    fn publish_extra(&self, namespace: &str, change: impl FnOnce(&mut IngressView)) {
        self.update(|known| change(known.ingresses.entry(namespace.to_string()).or_default()));
    }
}

/// Watches the Services and Pods of `namespaces` (`None`: of every
/// namespace), and probes the API server, until `shutdown`. `own` is where
/// a route's bare service name is.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    client: kube::Client,
    gate: Arc<Gate>,
    own: String,
    class: String,
    namespaces: Option<Vec<String>>,
    link: Arc<Link>,
    shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    spawn_probe(
        client.clone(),
        Arc::clone(&gate),
        Arc::clone(&link),
        shutdown.clone(),
        tasks,
    );
    let views = Arc::new(Views {
        own,
        class,
        by_namespace: Mutex::default(),
        catalog: Arc::clone(&link.catalog),
    });
    let namespaces: Vec<Option<String>> = match namespaces {
        Some(list) => list.into_iter().map(Some).collect(),
        None => vec![None],
    };
    for namespace in namespaces {
        let (client, views, link, gate, shutdown) = (
            client.clone(),
            Arc::clone(&views),
            Arc::clone(&link),
            Arc::clone(&gate),
            shutdown.clone(),
        );
        for (what, kind) in [
            ("kubernetes ingress watch", Extra::Ingresses),
            ("kubernetes secret watch", Extra::Secrets),
        ] {
            tasks.spawn(
                what,
                follow_extra(
                    kind,
                    client.clone(),
                    namespace.clone(),
                    Arc::clone(&views),
                    Arc::clone(&link),
                    shutdown.clone(),
                ),
            );
        }
        tasks.spawn(
            "kubernetes watch",
            follow_namespace(client, namespace, views, link, gate, shutdown),
        );
    }
}

/// A kind a node watches beside Services and Pods, for routes from
/// Ingress objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extra {
    Ingresses,
    /// `kubernetes.io/tls` Secrets only.
    Secrets,
}

impl Extra {
    fn name(self) -> &'static str {
        match self {
            Extra::Ingresses => "ingresses (networking.k8s.io/v1)",
            Extra::Secrets => "secrets",
        }
    }

    /// What the node does without them.
    fn without(self) -> &'static str {
        match self {
            Extra::Ingresses => "no routes from Ingress objects in this namespace",
            Extra::Secrets => "Ingress routes here are served without their TLS Secrets",
        }
    }
}

/// Follows one kind of [`Extra`] of one namespace (or all), apart from its
/// Services and Pods: a right RBAC refuses (or an API server without
/// `networking.k8s.io/v1`) costs the node what that kind gives, said
/// once, never its service routes. The watch is tried again every breaker
/// cool-down, so a RoleBinding applied later takes effect without a
/// restart.
async fn follow_extra(
    kind: Extra,
    client: kube::Client,
    namespace: Option<String>,
    views: Arc<Views>,
    link: Arc<Link>,
    mut shutdown: Shutdown,
) {
    let key = namespace.clone().unwrap_or_else(|| ALL.to_string());
    let mut refused_said = false;
    loop {
        let watch = async {
            match kind {
                Extra::Ingresses => {
                    watch_extra::<Ingress>(
                        &client,
                        namespace.as_deref(),
                        None,
                        (&key, kind),
                        &link,
                        |all| {
                            views.publish_extra(&key, |view| view.ingresses = Some(all));
                            after_refusal(&key, kind, &mut refused_said);
                        },
                    )
                    .await
                }
                Extra::Secrets => {
                    watch_extra::<Secret>(
                        &client,
                        namespace.as_deref(),
                        Some("type=kubernetes.io/tls"),
                        (&key, kind),
                        &link,
                        |all| {
                            views.publish_extra(&key, |view| view.secrets = all);
                            after_refusal(&key, kind, &mut refused_said);
                        },
                    )
                    .await
                }
            }
        };
        let refused = tokio::select! {
            refused = watch => refused,
            () = shutdown.wait() => return,
        };
        if let Some(error) = refused {
            views.publish_extra(&key, |view| match kind {
                Extra::Ingresses => view.ingresses = None,
                Extra::Secrets => view.secrets = Vec::new(),
            });
            if !refused_said {
                refused_said = true;
                tracing::warn!(
                    namespace = %key,
                    %error,
                    retry_every = %humantime::format_duration(link.retry_forbidden),
                    "the node may not list and watch {} here: {}; grant list and watch on them",
                    kind.name(),
                    kind.without(),
                );
            }
        }
        tokio::select! {
            () = tokio::time::sleep(link.retry_forbidden) => {}
            () = shutdown.wait() => return,
        }
    }
}

/// Says once that a kind refused before is read again.
fn after_refusal(key: &str, kind: Extra, refused_said: &mut bool) {
    if std::mem::take(refused_said) {
        tracing::info!(namespace = %key, "the node may list and watch {} here now", kind.name());
    }
}

/// What a failed watch of an [`Extra`] kind means to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExtraFailure {
    /// RBAC refuses the kind (403), or the API server does not serve it
    /// (404): the watch stops; the node goes without the kind, says so
    /// once and tries again every cool-down.
    Unavailable,
    /// The API server answers, but not with objects the node can read
    /// (another 4xx, an object it cannot decode): the watcher retries,
    /// the last listed objects are kept, and the node says so once until
    /// a listing succeeds.
    Unusable,
    /// An expired resource version (410: the watcher lists again), or no
    /// answer or a 5xx: the Services and Pods watch and the probe judge
    /// the API server, so these watches do not mark the node's runtime
    /// data stale a second time, nor leave it stale once the services'
    /// watch has answered.
    Passing,
}

fn extra_failure(error: &watcher::Error) -> ExtraFailure {
    let by_code = |code: u16| match code {
        403 | 404 => ExtraFailure::Unavailable,
        410 | 500.. => ExtraFailure::Passing,
        _ => ExtraFailure::Unusable,
    };
    let api = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => return by_code(status.code),
        watcher::Error::NoResourceVersion => return ExtraFailure::Unusable,
    };
    match api {
        kube::Error::Api(status) => by_code(status.code),
        kube::Error::SerdeError(_) => ExtraFailure::Unusable,
        _ => ExtraFailure::Passing,
    }
}

/// Watches one kind of one namespace (or all), `fields` selecting, and
/// hands every object known to `publish` after the first listing and
/// each change, until the kind is unavailable; returns why. `None`: the
/// stream ended.
async fn watch_extra<K>(
    client: &kube::Client,
    namespace: Option<&str>,
    fields: Option<&str>,
    (key, kind): (&str, Extra),
    link: &Link,
    mut publish: impl FnMut(Vec<Arc<K>>),
) -> Option<watcher::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut config = watcher::Config::default();
    if let Some(fields) = fields {
        config = config.fields(fields);
    }
    let (store, writer) = reflector::store::<K>();
    let events = watcher(api, config)
        .backoff(Retry::default())
        .reflect(writer)
        .map(|e| e.map(Changed::of));
    let mut events = std::pin::pin!(events);
    let mut unusable_said = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(Changed::Listing) => {}
            Ok(Changed::Changed) => {
                publish(store.state());
                link.changes.signal();
                if std::mem::take(&mut unusable_said) {
                    tracing::info!(namespace = %key, "the watch of {} lists again", kind.name());
                }
            }
            Err(error) => match extra_failure(&error) {
                ExtraFailure::Unavailable => return Some(error),
                ExtraFailure::Unusable => {
                    if !std::mem::replace(&mut unusable_said, true) {
                        tracing::warn!(
                            namespace = %key,
                            %error,
                            "the API server answers the watch of {} with an error; \
                             the last listed are kept and the watch is tried again",
                            kind.name(),
                        );
                    }
                }
                ExtraFailure::Passing => {
                    tracing::debug!(namespace = %key, %error, "the watch of {} is watched again", kind.name());
                }
            },
        }
    }
    None
}

/// Follows one namespace (or all): watches until RBAC forbids it, then
/// falls back to connect checks and tries again every cool-down.
async fn follow_namespace(
    client: kube::Client,
    namespace: Option<String>,
    views: Arc<Views>,
    link: Arc<Link>,
    gate: Arc<Gate>,
    mut shutdown: Shutdown,
) {
    let key = namespace.clone().unwrap_or_else(|| ALL.to_string());
    let mut forbidden_said = false;
    loop {
        let watch = watch(
            &client,
            namespace.as_deref(),
            &key,
            &views,
            &link,
            &gate,
            &mut forbidden_said,
        );
        let stopped = tokio::select! {
            stopped = watch => stopped,
            () = shutdown.wait() => return,
        };
        let Some((refused, error)) = stopped else {
            // The watcher's stream never ends; were it to, watch again.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                () = shutdown.wait() => return,
            }
        };
        views.publish(&key, NamespaceView::Forbidden(refused));
        link.changes.signal();
        if !forbidden_said {
            forbidden_said = true;
            tracing::warn!(
                namespace = %key,
                refused = refused.lists(),
                %error,
                retry_every = %humantime::format_duration(link.retry_forbidden),
                "RBAC forbids list/watch of {} in this namespace; \
                 falling back to connect checks of each service's name",
                refused.lists()
            );
        }
        tokio::select! {
            () = tokio::time::sleep(link.retry_forbidden) => {}
            () = shutdown.wait() => return,
        }
    }
}

/// Watches one namespace (or all) until RBAC forbids it; returns which
/// lists it refused (each list's first answer heard, up to
/// [`REFUSALS_HEARD`]) and the first refusal. `None`: the watch stream
/// ended.
async fn watch(
    client: &kube::Client,
    namespace: Option<&str>,
    key: &str,
    views: &Views,
    link: &Link,
    gate: &Gate,
    forbidden_said: &mut bool,
) -> Option<(Refused, watcher::Error)> {
    let (services, pods): (Api<Service>, Api<Pod>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (service_store, service_writer) = reflector::store::<Service>();
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let service_events = watcher(services, watcher::Config::default())
        .backoff(Retry::default())
        .reflect(service_writer)
        .map(|e| e.map(Changed::of));
    let pod_events = watcher(pods, watcher::Config::default())
        .backoff(Retry::default())
        .reflect(pod_writer)
        .map(|e| e.map(Changed::of));
    let events = futures_util::stream::select(
        service_events.map(|e| (Kind::Services, e)),
        pod_events.map(|e| (Kind::Pods, e)),
    );
    let mut events = std::pin::pin!(events);
    let mut listed = (false, false);
    let mut refused: Option<(Refused, watcher::Error, tokio::time::Instant)> = None;
    let endpoint = gate.endpoint();
    loop {
        // Once a list is refused, the other's first answer is waited for
        // (briefly), so that the refusal names every list it covers.
        let next = match &refused {
            None => events.next().await,
            Some((_, _, until)) => tokio::time::timeout_at(*until, events.next())
                .await
                .ok()
                .flatten(),
        };
        let Some((kind, event)) = next else {
            return refused.map(|(lists, error, _)| (lists, error));
        };
        if let Some((lists, _, _)) = &mut refused {
            match &event {
                Err(error) if forbidden(error) => lists.add(kind),
                _ => {}
            }
            let heard = |k| match k {
                Kind::Services => lists.services || listed.0,
                Kind::Pods => lists.pods || listed.1,
            };
            let answered = matches!(&event, Ok(Changed::Changed));
            if heard(Kind::Services) && heard(Kind::Pods) || answered {
                return refused.map(|(lists, error, _)| (lists, error));
            }
            continue;
        }
        match event {
            Ok(Changed::Listing) => {}
            Ok(Changed::Changed) => {
                match kind {
                    Kind::Services => listed.0 = true,
                    Kind::Pods => listed.1 = true,
                }
                if listed == (true, true) {
                    views.publish(
                        key,
                        NamespaceView::Objects {
                            services: service_store.state(),
                            pods: pod_store.state(),
                        },
                    );
                    if std::mem::take(forbidden_said) {
                        tracing::info!(
                            namespace = %key,
                            "RBAC now allows list/watch in this namespace; connect checks by name end"
                        );
                    }
                    link.answered(endpoint);
                    link.changes.signal();
                }
            }
            Err(error) if forbidden(&error) => {
                let mut lists = Refused::default();
                lists.add(kind);
                let other_heard = match kind {
                    Kind::Services => listed.1,
                    Kind::Pods => listed.0,
                };
                if other_heard {
                    return Some((lists, error));
                }
                refused = Some((lists, error, tokio::time::Instant::now() + REFUSALS_HEARD));
            }
            Err(error) => link.silent(endpoint, &error),
        }
    }
}

/// How long a watch refused for one list waits for the other's first
/// answer, to name both when both are refused.
const REFUSALS_HEARD: Duration = Duration::from_secs(2);

/// How a failing watch is retried: 250 ms doubling to 2 s, jittered. The gate
/// refuses retries before any I/O while the API server's breaker is open,
/// so a short cap costs nothing while it is down, and the watch is back
/// within 2 s of the breaker's trial, where kube's default (up to 30 s)
/// would keep the data stale long after the API server returned.
#[derive(Debug, Clone)]
struct Retry(Backoff);

impl Retry {
    const FIRST: Duration = Duration::from_millis(250);
    const CAP: Duration = Duration::from_secs(2);
}

impl Default for Retry {
    fn default() -> Self {
        Retry(Backoff::new(Retry::FIRST, Retry::CAP))
    }
}

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0.next_wait())
    }
}

impl kube::runtime::utils::Backoff for Retry {
    fn reset(&mut self) {
        self.0.reset();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Services,
    Pods,
}

/// What a watcher event means for the inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Changed {
    /// Mid-listing: the store swaps in the listed set at its end.
    Listing,
    Changed,
}

impl Changed {
    fn of<K>(event: watcher::Event<K>) -> Changed {
        match event {
            watcher::Event::Init | watcher::Event::InitApply(_) => Changed::Listing,
            watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                Changed::Changed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(json: serde_json::Value) -> Arc<Service> {
        Arc::new(serde_json::from_value(json).unwrap())
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "labels": labels },
                "spec": { "containers": [{ "name": "app", "image": "api:1.4", "ports": [{ "name": "http", "containerPort": 8081 }] }] },
                "status": {
                    "podIP": ip,
                    "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }],
                    "containerStatuses": [{
                        "name": "app", "image": "registry.example.com/api:1.4",
                        "imageID": "registry.example.com/api@sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22",
                        "ready": ready, "restartCount": 0
                    }]
                }
            }))
            .unwrap(),
        )
    }

    fn inventory() -> KubeInventory {
        KubeInventory {
            own: "shop".into(),
            namespaces: BTreeMap::from([("shop".to_string(), shop())]),
            ..KubeInventory::default()
        }
    }

    fn shop() -> NamespaceView {
        NamespaceView::Objects {
            services: vec![
                service(serde_json::json!({
                    "metadata": { "name": "api" },
                    "spec": {
                        "selector": { "app": "api" },
                        "ports": [
                            { "name": "http", "port": 80, "targetPort": "http" },
                            { "name": "admin", "port": 9000, "targetPort": 9001 },
                            { "name": "plain", "port": 7000 }
                        ]
                    }
                })),
                service(
                    serde_json::json!({ "metadata": { "name": "legacy" }, "spec": { "ports": [{ "port": 5432 }] } }),
                ),
                service(serde_json::json!({
                    "metadata": { "name": "billing" },
                    "spec": { "clusterIP": "10.96.0.7", "ports": [{ "port": 443 }] }
                })),
            ],
            pods: vec![
                pod(
                    "api-1",
                    Some("10.1.0.1"),
                    true,
                    serde_json::json!({ "app": "api" }),
                ),
                pod(
                    "api-2",
                    Some("10.1.0.2"),
                    false,
                    serde_json::json!({ "app": "api" }),
                ),
                pod("api-3", None, false, serde_json::json!({ "app": "api" })),
                pod(
                    "web-1",
                    Some("10.1.0.9"),
                    true,
                    serde_json::json!({ "app": "web" }),
                ),
            ],
        }
    }

    fn addr(e: &Endpoint) -> Option<String> {
        match &e.target {
            Some(Target::Addr(a)) => Some(a.to_string()),
            Some(Target::Named { host, port }) => Some(format!("{host}:{port}")),
            None => None,
        }
    }

    #[test]
    fn a_services_replicas_are_the_pods_its_selector_picks() {
        let inv = inventory();
        let by_name = inv.endpoints("api", &ServicePort::Name("http".into()));
        let summary: Vec<(&str, Option<String>, bool)> = by_name
            .iter()
            .map(|e| (e.id.as_str(), addr(e), e.ready))
            .collect();
        assert_eq!(
            summary,
            [
                ("api-1", Some("10.1.0.1:8081".into()), true),
                ("api-2", Some("10.1.0.2:8081".into()), false),
                ("api-3", None, false),
            ]
        );
        assert_eq!(by_name[0].images, ["api:1.4@sha256:4c0f12ab9d2e"]);
        let numbered = inv.endpoints("api", &ServicePort::Number(9000));
        assert_eq!(addr(&numbered[0]).as_deref(), Some("10.1.0.1:9001"));
        let plain = inv.endpoints("api", &ServicePort::Number(7000));
        assert_eq!(
            addr(&plain[0]).as_deref(),
            Some("10.1.0.1:7000"),
            "no targetPort: the port itself"
        );
        assert!(
            inv.endpoints("api", &ServicePort::Number(1234)).is_empty(),
            "no such port"
        );
        assert!(
            inv.endpoints("nothing", &ServicePort::Number(80))
                .is_empty()
        );
    }

    /// A route to a Service that is not there, or to a port it does not
    /// have, says so, instead of reading as scaled to zero; a Service
    /// whose pods are all gone is scaled to zero.
    #[test]
    fn a_missing_service_or_port_says_so() {
        let inventory = inventory();
        let why = |service: &str, port: ServicePort| inventory.unresolved(service, &port);
        assert_eq!(why("api", ServicePort::Number(80)), None);
        assert_eq!(why("api", ServicePort::Name("admin".into())), None);
        assert_eq!(why("legacy", ServicePort::Number(5432)), None);
        assert_eq!(
            why("api", ServicePort::Number(9999)).as_deref(),
            Some("Service shop/api has no port 9999")
        );
        assert_eq!(
            why("api", ServicePort::Name("grpc".into())).as_deref(),
            Some("Service shop/api has no port \"grpc\"")
        );
        assert_eq!(
            why("shop/cart", ServicePort::Number(80)).as_deref(),
            Some("no Service shop/cart")
        );
        assert_eq!(
            why("elsewhere/api", ServicePort::Number(80)),
            None,
            "not watched: nothing known"
        );
    }

    #[test]
    fn a_service_without_selector_is_checked_by_connect() {
        let endpoints = inventory().endpoints("legacy", &ServicePort::Number(5432));
        assert_eq!(endpoints.len(), 1);
        assert!(endpoints[0].checked);
        assert_eq!(addr(&endpoints[0]).as_deref(), Some("legacy.shop.svc:5432"));
        let with_ip = inventory().endpoints("billing", &ServicePort::Number(443));
        assert_eq!(
            addr(&with_ip[0]).as_deref(),
            Some("10.96.0.7:443"),
            "at its cluster IP"
        );
        let forbidden = KubeInventory {
            own: "shop".into(),
            namespaces: BTreeMap::from([(
                "shop".to_string(),
                NamespaceView::Forbidden(Refused {
                    services: true,
                    pods: true,
                }),
            )]),
            ..KubeInventory::default()
        }
        .endpoints("api", &ServicePort::Number(80));
        assert_eq!(
            (addr(&forbidden[0]).as_deref(), forbidden[0].checked),
            (Some("api.shop.svc:80"), true)
        );
    }

    const OLD: &str = "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
    const NEW: &str = "sha256:9b1d7e0c3a5500aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
    const ENVOY: &str = "sha256:77aa00bb11cc22dd33ee44ff5566778899aabbccddeeff001122334455667788";

    /// A running pod of `app` whose spec lists `containers` (name, image)
    /// and whose status reports `statuses` (name, image, imageID), as the
    /// kubelet does: sorted by name, an init container beside them.
    fn running(
        name: &str,
        containers: &[(&str, &str)],
        statuses: &[(&str, &str, &str)],
    ) -> Arc<Pod> {
        let containers: Vec<serde_json::Value> = containers
            .iter()
            .map(|(name, image)| serde_json::json!({ "name": name, "image": image }))
            .collect();
        let mut statuses: Vec<serde_json::Value> = statuses
            .iter()
            .map(|(name, image, id)| {
                serde_json::json!({
                    "name": name, "image": image, "imageID": id,
                    "ready": true, "restartCount": 0
                })
            })
            .collect();
        statuses.sort_by_key(|s| s["name"].as_str().map(String::from));
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "labels": { "app": "api" } },
                "spec": {
                    "initContainers": [{ "name": "migrate", "image": "migrate:7" }],
                    "containers": containers
                },
                "status": {
                    "podIP": "10.1.0.1",
                    "conditions": [{ "type": "Ready", "status": "True" }],
                    "initContainerStatuses": [{
                        "name": "migrate", "image": "migrate:7",
                        "imageID": format!("docker.io/library/migrate@{OLD}"),
                        "ready": false, "restartCount": 0
                    }],
                    "containerStatuses": statuses
                }
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_pod_runs_every_image_of_its_containers() {
        let sidecar = running(
            "api-1",
            &[("web", "shop/api:1.4"), ("envoy", "envoyproxy/envoy:v1.31")],
            &[
                (
                    "web",
                    "docker.io/shop/api:1.4",
                    &format!("docker-pullable://docker.io/shop/api@{OLD}"),
                ),
                (
                    "envoy",
                    "docker.io/envoyproxy/envoy:v1.31",
                    &format!("docker.io/envoyproxy/envoy@{ENVOY}"),
                ),
            ],
        );
        assert_eq!(
            pod_images(&sidecar),
            [
                "api:1.4@sha256:4c0f12ab9d2e",
                "envoy:v1.31@sha256:77aa00bb11cc"
            ],
            "every container in the spec's order, the app first; no init container"
        );

        let pending = running(
            "api-2",
            &[("web", "shop/api:1.4"), ("envoy", "envoyproxy/envoy:v1.31")],
            &[],
        );
        assert_eq!(
            pod_images(&pending),
            ["api:1.4", "envoy:v1.31"],
            "no status yet: the spec's images, no digest known"
        );

        let pulling = running(
            "api-3",
            &[("web", "shop/api:1.5")],
            &[("web", "shop/api:1.5", "")],
        );
        assert_eq!(pod_images(&pulling), ["api:1.5"], "no imageID yet");

        // containerd reports the image ID as the image when several tags
        // name it: the spec says which was asked for.
        let by_id = running(
            "api-4",
            &[("web", "shop/api:1.4")],
            &[("web", OLD, &format!("docker.io/shop/api@{OLD}"))],
        );
        assert_eq!(pod_images(&by_id), ["api:1.4@sha256:4c0f12ab9d2e"]);

        let twice = running(
            "api-5",
            &[("web", "shop/api:1.4"), ("worker", "shop/api:1.4")],
            &[
                ("web", "shop/api:1.4", OLD),
                ("worker", "shop/api:1.4", OLD),
            ],
        );
        assert_eq!(pod_images(&twice), ["api:1.4@sha256:4c0f12ab9d2e"]);
    }

    #[test]
    fn two_builds_under_one_tag_are_two_images_in_the_verdict() {
        use crate::upstream::Source;
        use crate::verdict::{BreakerFacts, ReplicaFacts, judge};

        let pod = |name: &str, id: &str| {
            running(
                name,
                &[("web", "shop/api:1.4"), ("envoy", "envoyproxy/envoy:v1.31")],
                &[
                    ("web", "shop/api:1.4", &format!("docker.io/shop/api@{id}")),
                    (
                        "envoy",
                        "envoyproxy/envoy:v1.31",
                        &format!("docker.io/envoyproxy/envoy@{ENVOY}"),
                    ),
                ],
            )
        };
        let mut inv = inventory();
        if let Some(NamespaceView::Objects { pods, .. }) = inv.namespaces.get_mut("shop") {
            *pods = vec![pod("api-1", OLD), pod("api-2", NEW), pod("api-3", NEW)];
        }
        let endpoints = inv.endpoints("api", &ServicePort::Number(7000));
        let facts: Vec<ReplicaFacts<'_>> = endpoints
            .iter()
            .map(|e| ReplicaFacts {
                ready: e.ready,
                ejected: None,
                failing: None,
                new_refused: None,
                images: e.images.iter().map(String::as_str).collect(),
            })
            .collect();
        let verdict = judge(Source::Runtime, true, &facts, &BreakerFacts::DISABLED);
        let images: Vec<(&str, u32)> = verdict
            .images
            .iter()
            .map(|i| (i.image.as_str(), i.replicas))
            .collect();
        assert_eq!(
            images,
            [
                ("envoy:v1.31@sha256:77aa00bb11cc", 3),
                ("api:1.4@sha256:9b1d7e0c3a55", 2),
                ("api:1.4@sha256:4c0f12ab9d2e", 1),
            ]
        );
        assert_eq!((verdict.ready, verdict.total), (3, 3));
    }

    #[test]
    fn a_namespaced_service_is_looked_up_in_its_namespace() {
        let billing_pod = |ns: Option<&str>| {
            let mut p = (*pod(
                "api-b",
                Some("10.2.0.1"),
                true,
                serde_json::json!({ "app": "api" }),
            ))
            .clone();
            p.metadata.namespace = ns.map(Into::into);
            Arc::new(p)
        };
        let billing_api = |ns: Option<&str>| {
            service(serde_json::json!({
                "metadata": { "name": "api", "namespace": ns },
                "spec": { "selector": { "app": "api" }, "ports": [{ "port": 80, "targetPort": 8080 }] }
            }))
        };
        let mut inv = inventory();
        inv.namespaces.insert(
            "billing".into(),
            NamespaceView::Objects {
                services: vec![billing_api(Some("billing"))],
                pods: vec![billing_pod(Some("billing"))],
            },
        );
        inv.namespaces.insert(
            "locked".into(),
            NamespaceView::Forbidden(Refused::default()),
        );
        let ids = |e: Vec<Endpoint>| e.into_iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(
            ids(inv.endpoints("billing/api", &ServicePort::Number(80))),
            ["api-b"]
        );
        assert_eq!(
            ids(inv.endpoints("api", &ServicePort::Number(80))),
            ["api-1", "api-2", "api-3"],
            "a bare name is in the node's own namespace"
        );
        assert_eq!(
            ids(inv.endpoints("shop/api", &ServicePort::Number(80))),
            ["api-1", "api-2", "api-3"]
        );
        let locked = inv.endpoints("locked/api", &ServicePort::Number(80));
        assert_eq!(
            (addr(&locked[0]).as_deref(), locked[0].checked),
            (Some("api.locked.svc:80"), true),
            "only the forbidden namespace falls back"
        );
        assert!(
            inv.endpoints("elsewhere/api", &ServicePort::Number(80))
                .is_empty()
        );

        let all = KubeInventory {
            own: "shop".into(),
            namespaces: BTreeMap::from([(
                ALL.to_string(),
                NamespaceView::Objects {
                    services: vec![billing_api(Some("billing"))],
                    pods: vec![billing_pod(Some("billing")), billing_pod(Some("shop"))],
                },
            )]),
            ..KubeInventory::default()
        };
        assert_eq!(
            ids(all.endpoints("billing/api", &ServicePort::Number(80))),
            ["api-b"],
            "watching every namespace, objects are told apart by their own namespace"
        );
        assert!(all.endpoints("api", &ServicePort::Number(80)).is_empty());
    }

    fn ingress(namespace: &str, name: &str, class: &str, service: &str) -> Arc<Ingress> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "namespace": namespace },
                "spec": {
                    "ingressClassName": class,
                    "rules": [{ "host": format!("{name}.example.com"), "http": { "paths": [
                        { "path": "/", "pathType": "Prefix",
                          "backend": { "service": { "name": service, "port": { "number": 80 } } } }
                    ] } }],
                    "tls": [{ "hosts": [format!("{name}.example.com")], "secretName": "shop-tls" }]
                }
            }))
            .unwrap(),
        )
    }

    fn tls_secret(namespace: &str) -> Arc<Secret> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "shop-tls", "namespace": namespace },
                "type": "kubernetes.io/tls",
                "data": { "tls.crt": "Q0VSVA==", "tls.key": "S0VZ" }
            }))
            .unwrap(),
        )
    }

    /// A Service of the node's own namespace goes by its bare name, as a
    /// file's route names it; a Secret two Ingresses name is served once;
    /// a namespace whose Ingresses the node may not read declares nothing.
    #[test]
    fn ingresses_of_the_class_declare_routes_and_name_their_certificates_once() {
        let inv = KubeInventory {
            own: "shop".into(),
            class: "picket".into(),
            ingresses: BTreeMap::from([
                (
                    "shop".to_string(),
                    IngressView {
                        ingresses: Some(vec![
                            ingress("shop", "web", "picket", "cart"),
                            ingress("shop", "api", "picket", "api"),
                            ingress("shop", "blog", "nginx", "blog"),
                        ]),
                        secrets: vec![tls_secret("shop")],
                    },
                ),
                (
                    "billing".to_string(),
                    IngressView {
                        ingresses: Some(vec![ingress("billing", "pay", "picket", "pay")]),
                        secrets: Vec::new(),
                    },
                ),
                (
                    "locked".to_string(),
                    IngressView {
                        ingresses: None,
                        secrets: vec![tls_secret("locked")],
                    },
                ),
            ]),
            ..KubeInventory::default()
        };
        let routes: Vec<(String, String)> = inv
            .routes()
            .into_iter()
            .map(|d| (d.route_name(), d.service))
            .collect();
        assert_eq!(
            routes,
            [
                ("billing/pay/0.0".to_string(), "billing/pay".to_string()),
                ("shop/web/0.0".to_string(), "cart".to_string()),
                ("shop/api/0.0".to_string(), "api".to_string()),
            ]
        );
        let sources: Vec<String> = inv.certificates().into_iter().map(|c| c.source).collect();
        assert_eq!(sources, ["secret shop/shop-tls"]);
    }

    /// Only a refusal of the kind itself stops its watch; only an answer
    /// the node cannot use is said; no answer, a 5xx or an expired version
    /// is left to the Services and Pods watch and the probe.
    #[test]
    fn what_a_failed_ingress_or_secret_watch_means() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("no", "Because")
                    .with_code(code)
                    .boxed(),
            )
        };
        let unreadable = || kube::Error::SerdeError(serde_json::from_str::<u8>("x").unwrap_err());
        let no_answer = || kube::Error::Service("connection refused".into());
        let status = |code: u16| {
            kube::core::Status::failure("no", "Because")
                .with_code(code)
                .boxed()
        };
        use ExtraFailure::{Passing, Unavailable, Unusable};
        let table = [
            (watcher::Error::InitialListFailed(api(403)), Unavailable),
            (watcher::Error::InitialListFailed(api(404)), Unavailable),
            (watcher::Error::WatchStartFailed(api(403)), Unavailable),
            (watcher::Error::InitialListFailed(api(422)), Unusable),
            (watcher::Error::InitialListFailed(unreadable()), Unusable),
            (watcher::Error::WatchFailed(unreadable()), Unusable),
            (watcher::Error::NoResourceVersion, Unusable),
            (watcher::Error::WatchError(status(410)), Passing),
            (watcher::Error::WatchError(status(400)), Unusable),
            (watcher::Error::InitialListFailed(api(503)), Passing),
            (watcher::Error::InitialListFailed(no_answer()), Passing),
            (watcher::Error::WatchFailed(no_answer()), Passing),
        ];
        for (error, meaning) in table {
            assert_eq!(extra_failure(&error), meaning, "{error}");
        }
    }

    #[test]
    fn terminating_pods_are_not_ready() {
        let mut terminating = (*pod(
            "api-9",
            Some("10.1.0.5"),
            true,
            serde_json::json!({ "app": "api" }),
        ))
        .clone();
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!pod_ready(&terminating));
    }
}
