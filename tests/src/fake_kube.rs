//! A fake Kubernetes API server for Pods and Services, by namespace,
//! speaking the protocol kube's watcher uses: lists carry a
//! `resourceVersion`; `watch=true` streams newline-delimited JSON events
//! from a given version; a version older than the server keeps is answered
//! with an `ERROR` event of code 410 inside the stream; streams can be
//! dropped; the server can hang or go away; and RBAC can be made to forbid
//! everything (403).
//!
//! Objects are k8s-openapi types, serialized as the real API server would.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, Service,
    ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pods,
    Services,
    Ingresses,
    Secrets,
}

impl Kind {
    fn list_kind(self) -> &'static str {
        match self {
            Kind::Pods => "PodList",
            Kind::Services => "ServiceList",
            Kind::Ingresses => "IngressList",
            Kind::Secrets => "SecretList",
        }
    }

    /// The object's `kind` and `apiVersion`.
    fn object(self) -> (&'static str, &'static str) {
        match self {
            Kind::Pods => ("Pod", "v1"),
            Kind::Services => ("Service", "v1"),
            Kind::Ingresses => ("Ingress", "networking.k8s.io/v1"),
            Kind::Secrets => ("Secret", "v1"),
        }
    }

    /// Its plural in URLs.
    fn plural(self) -> &'static str {
        match self {
            Kind::Pods => "pods",
            Kind::Services => "services",
            Kind::Ingresses => "ingresses",
            Kind::Secrets => "secrets",
        }
    }
}

#[derive(Debug, Clone)]
enum Live {
    Event {
        kind: Kind,
        namespace: String,
        line: String,
    },
    /// End every open stream.
    Drop,
    /// Tell every open stream its version expired (410), then end it.
    Expire,
}

#[derive(Debug, Default)]
struct State {
    rv: u64,
    /// By kind, namespace and name.
    objects: BTreeMap<(Kind, String, String), Value>,
    history: Vec<(u64, Kind, String, String)>,
    /// Watches from an older version get 410.
    compacted: u64,
    forbidden: bool,
    /// Kinds RBAC forbids (403) while the others answer.
    forbidden_kinds: Vec<Kind>,
    /// The server is gone: connections are closed as they arrive, and
    /// requests on open ones get 503.
    gone: bool,
    /// The server hangs: connections are accepted and held, and requests
    /// get no answer, until it recovers.
    hanging: bool,
    held: Vec<tokio::net::TcpStream>,
    lists: usize,
    watches: usize,
    /// `GET /version`: the node's probes.
    versions: usize,
    /// Every request, of any path.
    requests: usize,
}

/// The fake server.
#[derive(Debug)]
pub struct FakeKube {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    live: broadcast::Sender<Live>,
    /// Where objects without a namespace go.
    default_namespace: String,
    task: JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code })
}

fn query(uri: &http::Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().expect("static"));
    response
}

impl FakeKube {
    pub async fn start(namespace: &str) -> FakeKube {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake API server");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(Mutex::new(State::default()));
        let (live, _) = broadcast::channel(4096);
        let default_namespace = namespace.to_string();
        let (task_state, task_live) = (Arc::clone(&state), live.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                {
                    let mut state = task_state.lock().expect("fake state");
                    if state.gone {
                        drop(stream);
                        continue;
                    }
                    if state.hanging {
                        state.held.push(stream);
                        continue;
                    }
                }
                let (state, live) = (Arc::clone(&task_state), task_live.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (state, live) = (Arc::clone(&state), live.clone());
                    async move {
                        while state.lock().expect("fake state").hanging {
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                        Ok::<_, Infallible>(handle(&state, &live, &req))
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        FakeKube {
            addr,
            state,
            live,
            default_namespace,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("fake state")
    }

    /// Creates or replaces an object (in its own namespace, else the
    /// server's); streams see ADDED or MODIFIED.
    pub fn apply<T: serde::Serialize>(&self, kind: Kind, object: &T) {
        let mut value = serde_json::to_value(object).expect("serializable object");
        let name = value["metadata"]["name"]
            .as_str()
            .expect("named object")
            .to_string();
        let namespace = value["metadata"]["namespace"]
            .as_str()
            .map_or_else(|| self.default_namespace.clone(), str::to_string);
        value["metadata"]["namespace"] = json!(namespace);
        let mut state = self.lock();
        state.rv += 1;
        let rv = state.rv;
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        let (kind_name, api_version) = kind.object();
        value["kind"] = json!(kind_name);
        value["apiVersion"] = json!(api_version);
        let added = state
            .objects
            .insert((kind, namespace.clone(), name), value.clone())
            .is_none();
        let line = json!({ "type": if added { "ADDED" } else { "MODIFIED" }, "object": value })
            .to_string();
        state
            .history
            .push((rv, kind, namespace.clone(), line.clone()));
        let _ = self.live.send(Live::Event {
            kind,
            namespace,
            line,
        });
    }

    /// Deletes an object of the server's namespace; streams see DELETED.
    pub fn delete(&self, kind: Kind, name: &str) {
        let namespace = self.default_namespace.clone();
        let mut state = self.lock();
        let Some(mut value) = state
            .objects
            .remove(&(kind, namespace.clone(), name.to_string()))
        else {
            return;
        };
        state.rv += 1;
        let rv = state.rv;
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        let line = json!({ "type": "DELETED", "object": value }).to_string();
        state
            .history
            .push((rv, kind, namespace.clone(), line.clone()));
        let _ = self.live.send(Live::Event {
            kind,
            namespace,
            line,
        });
    }

    /// Ends every open watch stream, as a restarted API server would.
    pub fn drop_watches(&self) {
        let _ = self.live.send(Live::Drop);
    }

    /// Forgets the history: open streams get 410 Gone and must re-list.
    pub fn expire(&self) {
        let mut state = self.lock();
        state.compacted = state.rv + 1;
        state.history.clear();
        let _ = self.live.send(Live::Expire);
    }

    /// The API server goes away (every stream ends, every new connection
    /// is closed at once) or comes back.
    pub fn gone(&self, gone: bool) {
        self.lock().gone = gone;
        if gone {
            let _ = self.live.send(Live::Drop);
        }
    }

    /// The API server hangs (new connections are accepted and held, no
    /// request is answered, open streams go quiet) or recovers, closing
    /// the held connections.
    pub fn hang(&self, hanging: bool) {
        let mut state = self.lock();
        state.hanging = hanging;
        if !hanging {
            state.held.clear();
        }
    }

    /// RBAC forbids (403) or allows everything from now on.
    pub fn forbid(&self, forbidden: bool) {
        self.lock().forbidden = forbidden;
    }

    /// RBAC forbids (403) these kinds alone from now on.
    pub fn forbid_kinds(&self, kinds: &[Kind]) {
        self.lock().forbidden_kinds = kinds.to_vec();
    }

    /// Lists and watches served so far.
    pub fn requests(&self) -> (usize, usize) {
        let state = self.lock();
        (state.lists, state.watches)
    }

    /// `GET /version` requests (probes) served so far.
    pub fn versions(&self) -> usize {
        self.lock().versions
    }

    /// Requests of any kind received so far.
    pub fn all_requests(&self) -> usize {
        self.lock().requests
    }
}

fn handle(
    state: &Arc<Mutex<State>>,
    live: &broadcast::Sender<Live>,
    req: &Request<Incoming>,
) -> Response<Body> {
    state.lock().expect("fake state").requests += 1;
    if state.lock().expect("fake state").gone {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &status(503, "ServiceUnavailable", "the API server is gone"),
        );
    }
    let path = req.uri().path();
    if path == "/version" {
        state.lock().expect("fake state").versions += 1;
        return json_response(
            StatusCode::OK,
            &json!({ "major": "1", "minor": "33", "gitVersion": "v1.33.0", "gitCommit": "", "gitTreeState": "clean",
                     "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64" }),
        );
    }
    // `/api/v1/namespaces/{ns}/{kind}`, or `/api/v1/{kind}` for all; the
    // same under `/apis/networking.k8s.io/v1/` for Ingresses.
    let (namespace, kind) = match path
        .strip_prefix("/api/v1/")
        .or_else(|| path.strip_prefix("/apis/networking.k8s.io/v1/"))
    {
        Some(rest) => match rest.strip_prefix("namespaces/") {
            Some(rest) => match rest.split_once('/') {
                Some((ns, kind)) => (Some(ns.to_string()), kind),
                None => (None, ""),
            },
            None => (None, rest),
        },
        None => (None, ""),
    };
    let networking = path.starts_with("/apis/");
    let kind = match (kind, networking) {
        ("pods", false) => Kind::Pods,
        ("services", false) => Kind::Services,
        ("secrets", false) => Kind::Secrets,
        ("ingresses", true) => Kind::Ingresses,
        _ => {
            return json_response(
                StatusCode::NOT_FOUND,
                &status(404, "NotFound", "not served by the fake"),
            );
        }
    };
    let in_scope = |ns: &str| namespace.as_deref().is_none_or(|n| n == ns);
    let params = query(req.uri());
    let mut s = state.lock().expect("fake state");
    if s.forbidden || s.forbidden_kinds.contains(&kind) {
        let what = kind.plural();
        let message = format!(
            "{what} is forbidden: User \"system:serviceaccount:test:picket\" cannot list resource \"{what}\""
        );
        return json_response(StatusCode::FORBIDDEN, &status(403, "Forbidden", &message));
    }
    if params.get("watch").map(String::as_str) != Some("true") {
        s.lists += 1;
        let items: Vec<Value> = s
            .objects
            .iter()
            .filter(|((k, ns, _), _)| *k == kind && in_scope(ns))
            .map(|(_, v)| v.clone())
            .collect();
        let list = json!({ "apiVersion": "v1", "kind": kind.list_kind(), "metadata": { "resourceVersion": s.rv.to_string() }, "items": items });
        return json_response(StatusCode::OK, &list);
    }
    s.watches += 1;
    let since: u64 = params
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let line = |l: &str| Bytes::from(format!("{l}\n"));
    if since < s.compacted {
        let gone = json!({ "type": "ERROR", "object": status(410, "Expired", "too old resource version") });
        let _ = tx.send(line(&gone.to_string()));
    } else {
        for (rv, k, ns, l) in &s.history {
            if *k == kind && *rv > since && in_scope(ns) {
                let _ = tx.send(line(l));
            }
        }
        let mut events = live.subscribe();
        drop(s);
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                match event {
                    Live::Event {
                        kind: k,
                        namespace: ns,
                        line: l,
                    } if k == kind && namespace.as_deref().is_none_or(|n| n == ns) => {
                        if tx.send(line(&l)).is_err() {
                            return;
                        }
                    }
                    Live::Event { .. } => {}
                    Live::Drop => return,
                    Live::Expire => {
                        let gone = json!({ "type": "ERROR", "object": status(410, "Expired", "too old resource version") });
                        let _ = tx.send(line(&gone.to_string()));
                        return;
                    }
                }
            }
        });
    }
    let stream = tokio_stream_from(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().expect("static"));
    response
}

fn tokio_stream_from(
    mut rx: mpsc::UnboundedReceiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A pod of `app`, at `ip`, serving `port` as its container port `http`.
pub fn pod(name: &str, app: &str, ip: Option<&str>, port: u16, ready: bool, image: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("test".into()),
            labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some(image.into()),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: i32::from(port),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            pod_ip: ip.map(Into::into),
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                image: image.into(),
                image_id: String::new(),
                ready,
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// `pod` with its containers' images pulled: the kubelet reports each
/// container's `imageID` (the registry digest, `repo@sha256:…`), in the
/// order of `image_ids`.
pub fn pulled(mut pod: Pod, image_ids: &[&str]) -> Pod {
    let statuses = pod
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut());
    for (status, id) in statuses.into_iter().flatten().zip(image_ids) {
        status.image_id = (*id).into();
    }
    pod
}

/// `pod` with a sidecar container `proxy` of `image` beside its app, as a
/// service mesh injects one.
pub fn with_sidecar(mut pod: Pod, image: &str) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.push(Container {
            name: "proxy".into(),
            image: Some(image.into()),
            ..Default::default()
        });
    }
    if let Some(statuses) = pod
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        let ready = statuses.iter().all(|s| s.ready);
        statuses.push(ContainerStatus {
            name: "proxy".into(),
            image: image.into(),
            image_id: String::new(),
            ready,
            ..Default::default()
        });
    }
    pod
}

/// A Service selecting `app` (none when `None`), port 80 to the pods'
/// port named `http`.
pub fn service(name: &str, app: Option<&str>, cluster_ip: Option<&str>, port: u16) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("test".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: app.map(|a| BTreeMap::from([("app".to_string(), a.to_string())])),
            cluster_ip: cluster_ip.map(Into::into),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: i32::from(port),
                target_port: app.map(|_| IntOrString::String("http".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// An Ingress of `class` in namespace `test`: one rule for `host` with
/// `paths`, each `(path, pathType, service, port)` where the port is a
/// number or a Service port's name; with `tls`, the Secret it names for
/// `host`.
pub fn ingress(
    name: &str,
    class: &str,
    host: &str,
    paths: &[(&str, &str, &str, &str)],
    tls: Option<&str>,
) -> Value {
    let paths: Vec<Value> = paths
        .iter()
        .map(|(path, path_type, service, port)| {
            let port = match port.parse::<u16>() {
                Ok(number) => json!({ "number": number }),
                Err(_) => json!({ "name": port }),
            };
            json!({
                "path": path,
                "pathType": path_type,
                "backend": { "service": { "name": service, "port": port } }
            })
        })
        .collect();
    let mut spec = json!({
        "ingressClassName": class,
        "rules": [ { "host": host, "http": { "paths": paths } } ]
    });
    if let Some(secret) = tls {
        spec["tls"] = json!([ { "hosts": [host], "secretName": secret } ]);
    }
    json!({
        "metadata": { "name": name, "namespace": "test" },
        "spec": spec
    })
}

/// A `kubernetes.io/tls` Secret in namespace `test` holding a certificate
/// chain and its key, in PEM.
pub fn tls_secret(name: &str, cert_pem: &[u8], key_pem: &[u8]) -> Value {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({
        "metadata": { "name": name, "namespace": "test" },
        "type": "kubernetes.io/tls",
        "data": { "tls.crt": b64(cert_pem), "tls.key": b64(key_pem) }
    })
}
