//! A fake Docker engine (or socket proxy) on loopback, speaking the part
//! of the Engine API a node uses: `/_ping`, `/containers/json`,
//! `/containers/{id}/json` and the `/events` stream. It can hang (accept
//! connections and answer nothing), refuse every right (403), or drop
//! every connection at once; it counts the connections it accepted and
//! the requests it answered.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

/// The compose project of the fake's containers: a file's route names
/// their service `t/NAME`.
pub const PROJECT: &str = "t";

/// How the engine behaves towards new connections and requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Answers,
    /// Connections are accepted and held; nothing is answered; open event
    /// streams go quiet.
    Hangs,
    /// Every request but `/_ping` gets 403, as from a socket proxy that
    /// does not grant containers or events.
    Forbids,
    /// `/events` gets 403; the rest answers.
    ForbidsEvents,
    /// Connections are closed as they arrive.
    Drops,
}

#[derive(Debug, Default)]
struct State {
    mode: Mode,
    /// Inspect documents by container id.
    containers: BTreeMap<String, Value>,
    held: Vec<tokio::net::TcpStream>,
    requests: BTreeMap<String, usize>,
    /// Event streams opened so far, counted once they receive events.
    streams: usize,
}

/// The fake engine.
#[derive(Debug)]
pub struct FakeDocker {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<Option<String>>,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for FakeDocker {
    fn drop(&mut self) {
        self.task.abort();
    }
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

impl FakeDocker {
    pub async fn start() -> FakeDocker {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake engine");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(Mutex::new(State::default()));
        let (events, _) = broadcast::channel(1024);
        let connections = Arc::new(AtomicUsize::new(0));
        let (task_state, task_events, task_connections) =
            (Arc::clone(&state), events.clone(), Arc::clone(&connections));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                task_connections.fetch_add(1, Ordering::SeqCst);
                {
                    let mut state = task_state.lock().expect("fake state");
                    match state.mode {
                        Mode::Drops => {
                            drop(stream);
                            continue;
                        }
                        Mode::Hangs => {
                            state.held.push(stream);
                            continue;
                        }
                        Mode::Answers | Mode::Forbids | Mode::ForbidsEvents => {}
                    }
                }
                let (state, events) = (Arc::clone(&task_state), task_events.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (state, events) = (Arc::clone(&state), events.clone());
                    async move {
                        while state.lock().expect("fake state").mode == Mode::Hangs {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Ok::<_, Infallible>(handle(&state, &events, &req))
                    }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        FakeDocker {
            addr,
            state,
            events,
            connections,
            task,
        }
    }

    /// The engine's address as `[runtime] endpoint` or a swarm proxy takes
    /// it.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("fake state")
    }

    /// Changes how the engine behaves; leaving `Hangs` closes the held
    /// connections, and `Hangs` or `Drops` end every open event stream
    /// (a hung engine's streams go quiet: their clients cannot tell).
    pub fn set_mode(&self, mode: Mode) {
        let mut state = self.lock();
        state.mode = mode;
        if mode != Mode::Hangs {
            state.held.clear();
        }
        if mode == Mode::Drops {
            let _ = self.events.send(None);
        }
    }

    /// Runs (or changes) a container of compose service `service` of
    /// project [`PROJECT`] (routes name it `t/service`), at 127.0.0.1 on
    /// network `net`; the event stream says `action`.
    pub fn run(&self, id: &str, service: &str, running: bool, image: &str) {
        let inspect = json!({
            "Id": id,
            "Name": format!("/{id}"),
            "Image": "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22",
            "State": { "Running": running, "Paused": false },
            "Config": { "Image": image, "Labels": {
                "com.docker.compose.project": PROJECT,
                "com.docker.compose.service": service
            } },
            "NetworkSettings": { "Networks": { "net": { "IPAddress": "127.0.0.1" } } }
        });
        let action = if running { "start" } else { "die" };
        self.lock().containers.insert(id.to_string(), inspect);
        self.event(id, action);
    }

    /// Runs a container of compose service `service` of project
    /// [`PROJECT`] with more `labels`, created at `created` (RFC 3339):
    /// what routes from labels read. Run again with other labels, it is
    /// the container recreated with them.
    pub fn run_labelled(&self, id: &str, service: &str, labels: &[(&str, &str)], created: &str) {
        let mut all = serde_json::Map::new();
        all.insert("com.docker.compose.project".into(), Value::from(PROJECT));
        all.insert("com.docker.compose.service".into(), Value::from(service));
        for (key, value) in labels {
            all.insert((*key).into(), Value::from(*value));
        }
        let inspect = json!({
            "Id": id,
            "Name": format!("/{id}"),
            "Created": created,
            "Image": "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22",
            "State": { "Running": true, "Paused": false },
            "Config": { "Image": format!("{service}:1"), "Labels": all },
            "NetworkSettings": { "Networks": { "net": { "IPAddress": "127.0.0.1" } } }
        });
        self.lock().containers.insert(id.to_string(), inspect);
        self.event(id, "start");
    }

    /// Removes a container; the stream says `destroy`.
    pub fn remove(&self, id: &str) {
        self.lock().containers.remove(id);
        self.event(id, "destroy");
    }

    fn event(&self, id: &str, action: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let line = json!({
            "Type": "container", "Action": action,
            "Actor": { "ID": id, "Attributes": {} },
            "time": now
        })
        .to_string();
        let _ = self.events.send(Some(line));
    }

    /// Event streams opened so far: from the first, a change made is a
    /// change a node following the engine hears of. The fake replays no
    /// history (a real engine replays its last 256 events).
    pub fn streams(&self) -> usize {
        self.lock().streams
    }

    /// Connections accepted so far, answered or not.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests answered so far whose path starts with `prefix`.
    pub fn requests(&self, prefix: &str) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|(path, _)| path.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

fn handle(
    state: &Arc<Mutex<State>>,
    events: &broadcast::Sender<Option<String>>,
    req: &Request<Incoming>,
) -> Response<Body> {
    // Paths may carry the API version (`/v1.47/containers/json`).
    let path = req.uri().path();
    let path = match path.strip_prefix("/v") {
        Some(rest) => rest.find('/').map_or(path, |i| &rest[i..]),
        None => path,
    };
    let mut s = state.lock().expect("fake state");
    *s.requests.entry(path.to_string()).or_default() += 1;
    if path == "/_ping" {
        let mut response = Response::new(Full::new(Bytes::from_static(b"OK")).boxed());
        response
            .headers_mut()
            .insert("api-version", "1.47".parse().expect("static"));
        return response;
    }
    if s.mode == Mode::Forbids {
        return json_response(
            StatusCode::FORBIDDEN,
            &json!({ "message": "forbidden: this proxy does not grant this request" }),
        );
    }
    if path == "/containers/json" {
        let list: Vec<Value> = s.containers.keys().map(|id| json!({ "Id": id })).collect();
        return json_response(StatusCode::OK, &Value::Array(list));
    }
    if let Some(id) = path
        .strip_prefix("/containers/")
        .and_then(|rest| rest.strip_suffix("/json"))
    {
        return match s.containers.get(id) {
            Some(inspect) => json_response(StatusCode::OK, inspect),
            None => json_response(
                StatusCode::NOT_FOUND,
                &json!({ "message": format!("No such container: {id}") }),
            ),
        };
    }
    if path == "/events" {
        if s.mode == Mode::ForbidsEvents {
            return json_response(
                StatusCode::FORBIDDEN,
                &json!({ "message": "forbidden: this proxy does not grant events" }),
            );
        }
        drop(s);
        let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
        let mut live = events.subscribe();
        state.lock().expect("fake state").streams += 1;
        let state = Arc::clone(state);
        tokio::spawn(async move {
            while let Ok(event) = live.recv().await {
                let Some(line) = event else { return };
                // A hung engine sends nothing more.
                if state.lock().expect("fake state").mode == Mode::Hangs {
                    continue;
                }
                if tx.send(Bytes::from(format!("{line}\n"))).is_err() {
                    return;
                }
            }
        });
        let mut rx = rx;
        let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
            .map(|b| Ok::<_, Infallible>(Frame::data(b)));
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        response
            .headers_mut()
            .insert("content-type", "application/json".parse().expect("static"));
        return response;
    }
    json_response(
        StatusCode::NOT_FOUND,
        &json!({ "message": "not served by the fake" }),
    )
}
