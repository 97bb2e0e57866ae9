//! Kubernetes: the Services and Pods of the node's namespace, listed once
//! then watched (kube's runtime watcher: re-watch from the last resource
//! version when a stream drops, full re-list on `410 Gone`, capped
//! back-off on errors).
//!
//! A Service's replicas are the pods its selector picks, on the target port
//! its port names (a number, or a container port's name), ready when their
//! `Ready` condition is true and they are not terminating. A Service
//! without a selector is checked like an external host: a connect to its
//! name. If RBAC forbids the watch, every service falls back to that
//! connect check, and the node says once which right is missing.
//!
//! The watcher retries a failing watch by itself, without a word: an API
//! server that went away shows only in a bounded probe of it (`GET
//! /version`, every [`PROBE_EVERY`], at most [`PROBE_TIMEOUT`]). Any HTTP
//! answer is reachable; no answer, or a 5xx, is not, and marks the data
//! stale until the probe gets an answer again. Routing keeps the last
//! known replicas meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::{Catalog, Inventory};
use crate::changes::Changes;
use crate::config::{RuntimeSettings, ServicePort};
use crate::shutdown::Shutdown;
use crate::upstream::{Endpoint, Target};
use crate::verdict::board::RuntimeStatus;
use crate::verdict::image_label;

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

/// A client for the configured API server, else in-cluster or kubeconfig.
pub async fn client(
    settings: &RuntimeSettings,
    namespace: &str,
) -> Result<kube::Client, kube::Error> {
    match &settings.api {
        Some(api) => {
            let url = api.parse().map_err(|e| kube::Error::Service(Box::new(e)))?;
            let mut config = kube::Config::new(url);
            config.default_namespace = namespace.to_string();
            kube::Client::try_from(config)
        }
        None => kube::Client::try_default().await,
    }
}

/// The Services and Pods of one namespace.
#[derive(Debug, Clone, Default)]
pub struct KubeInventory {
    pub namespace: String,
    pub services: Vec<Arc<Service>>,
    pub pods: Vec<Arc<Pod>>,
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

fn pod_image(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    Some(image_label(
        &status.image,
        Some(status.image_id.as_str()).filter(|d| d.contains("sha256:")),
    ))
}

impl Inventory for KubeInventory {
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint> {
        let Some(svc) = self
            .services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(service))
        else {
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
            let mut endpoint = fallback(service, &self.namespace, port);
            if let Some(ip) = cluster_ip {
                endpoint.target = Some(Target::Addr((ip, port).into()));
            }
            return vec![endpoint];
        };
        self.pods
            .iter()
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
                    image: pod_image(pod),
                    checked: false,
                }
            })
            .collect()
    }
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
        image: None,
        checked: true,
    }
}

/// What a node falls back to when RBAC forbids the watch: every service
/// checked by connect to its name.
#[derive(Debug)]
pub struct ForbiddenInventory {
    pub namespace: String,
}

impl Inventory for ForbiddenInventory {
    fn endpoints(&self, service: &str, port: &ServicePort) -> Vec<Endpoint> {
        match port {
            ServicePort::Number(port) => vec![fallback(service, &self.namespace, *port)],
            // A named port needs the Service object, which the node may not read.
            ServicePort::Name(_) => Vec::new(),
        }
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

/// How often the API server is probed, and how long a probe may take.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the API server answered a probe at all.
fn reachable(
    answer: &Result<
        Result<k8s_openapi::apimachinery::pkg::version::Info, kube::Error>,
        tokio::time::error::Elapsed,
    >,
) -> bool {
    match answer {
        Ok(Ok(_)) => true,
        Ok(Err(kube::Error::Api(status))) => status.code < 500,
        Ok(Err(_)) | Err(_) => false,
    }
}

/// Probes the API server until `shutdown`; marks the runtime's data stale
/// while it does not answer, and clears only what it marked.
fn spawn_probe(
    client: kube::Client,
    namespace: String,
    status: Arc<RuntimeStatus>,
    changes: Arc<Changes>,
    mut shutdown: Shutdown,
) {
    tokio::spawn(async move {
        let mut marked = false;
        let mut every = tokio::time::interval(PROBE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = shutdown.wait() => return,
            }
            let answer = tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await;
            match (reachable(&answer), marked) {
                (false, false) => {
                    marked = true;
                    if status.set_stale(true) {
                        tracing::warn!(%namespace, "Kubernetes API not answering; keeping the last known replicas");
                        changes.signal();
                    }
                }
                (true, true) => {
                    marked = false;
                    if status.set_stale(false) {
                        tracing::info!(%namespace, "Kubernetes API reachable again");
                        changes.signal();
                    }
                }
                _ => {}
            }
        }
    });
}

/// Watches the namespace's Services and Pods until `shutdown`.
pub fn spawn(
    client: kube::Client,
    namespace: String,
    catalog: Arc<Catalog>,
    status: Arc<RuntimeStatus>,
    changes: Arc<Changes>,
    mut shutdown: Shutdown,
) {
    spawn_probe(
        client.clone(),
        namespace.clone(),
        Arc::clone(&status),
        Arc::clone(&changes),
        shutdown.clone(),
    );
    tokio::spawn(async move {
        let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
        let pods: Api<Pod> = Api::namespaced(client, &namespace);
        let (service_store, service_writer) = reflector::store::<Service>();
        let (pod_store, pod_writer) = reflector::store::<Pod>();
        let service_events = watcher(services, watcher::Config::default())
            .default_backoff()
            .reflect(service_writer)
            .map(|e| e.map(Changed::of));
        let pod_events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .reflect(pod_writer)
            .map(|e| e.map(Changed::of));
        let events = futures_util::stream::select(
            service_events.map(|e| (Kind::Services, e)),
            pod_events.map(|e| (Kind::Pods, e)),
        );
        let mut events = std::pin::pin!(events);
        let mut listed = (false, false);
        loop {
            let (kind, event) = tokio::select! {
                Some(next) = events.next() => next,
                () = shutdown.wait() => return,
            };
            match event {
                Ok(changed) => {
                    if changed == Changed::Listing {
                        continue;
                    }
                    match kind {
                        Kind::Services => listed.0 = true,
                        Kind::Pods => listed.1 = true,
                    }
                    if listed == (true, true) {
                        publish(&catalog, &namespace, &service_store, &pod_store);
                        if status.set_stale(false) {
                            tracing::info!(%namespace, "Kubernetes API reachable again");
                        }
                        changes.signal();
                    }
                }
                Err(error) if forbidden(&error) => {
                    tracing::warn!(
                        %namespace,
                        %error,
                        "RBAC forbids list/watch of pods and services in this namespace; \
                         falling back to connect checks of each service's name"
                    );
                    catalog.publish(Arc::new(ForbiddenInventory {
                        namespace: namespace.clone(),
                    }));
                    changes.signal();
                    return;
                }
                Err(error) => {
                    if status.set_stale(true) {
                        tracing::warn!(%namespace, %error, "Kubernetes API lost; keeping the last known replicas");
                        changes.signal();
                    } else {
                        tracing::debug!(%namespace, %error, "Kubernetes API still unreachable");
                    }
                }
            }
        }
    });
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

fn publish(catalog: &Catalog, namespace: &str, services: &Store<Service>, pods: &Store<Pod>) {
    catalog.publish(Arc::new(KubeInventory {
        namespace: namespace.to_string(),
        services: services.state(),
        pods: pods.state(),
    }));
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
            namespace: "shop".into(),
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
        assert_eq!(by_name[0].image.as_deref(), Some("api:1.4"));
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
        let forbidden = ForbiddenInventory {
            namespace: "shop".into(),
        }
        .endpoints("api", &ServicePort::Number(80));
        assert_eq!(
            (addr(&forbidden[0]).as_deref(), forbidden[0].checked),
            (Some("api.shop.svc:80"), true)
        );
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
