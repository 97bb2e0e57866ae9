//! `picket socket-proxy`: a read-only window on the local Docker engine,
//! for the Picket nodes of a swarm to follow this engine's containers.
//!
//! Only `GET` (and `HEAD`) of an allow-list of paths passes — the engine's
//! version, info, containers (list and inspect), events, services, tasks
//! and nodes — with or without a `/v1.NN` version prefix (bollard 0.21
//! sends unversioned paths). Everything else gets 403 and never reaches
//! the engine. Responses are streamed as they come: the event stream is
//! not buffered.
//!
//! ## Bounds
//! The proxy listens on every engine of a swarm, so what a client can hold
//! is bounded ([`Bounds`]): a client has the header-read timeout to send a
//! request head and an idle keep-alive connection is closed after the idle
//! timeout (both in [`connection`]; a response in progress, such as the
//! event stream, is never cut). At most `max_connections` are open at
//! once: at the limit the proxy stops accepting, so further clients wait
//! in the listen backlog rather than being accepted and dropped, and it
//! says so once each time it reaches the limit.

pub mod connection;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::shutdown::Shutdown;
use connection::{Ended, Phase};

/// How far the proxy lets its clients go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Time a client has to send a complete request head: from accept for
    /// the first, from its first byte for the next ones.
    pub header_read: Duration,
    /// Time a kept-alive connection may wait between requests.
    pub idle: Duration,
    /// Connections open at once; at the limit the proxy stops accepting.
    pub max_connections: NonZeroUsize,
}

impl Bounds {
    /// A header-read timeout of 30 s and an idle timeout of 60 s (as the
    /// node's own listener), and 256 connections: every Picket node of the
    /// swarm holds one event stream and a few short-lived connections.
    pub const DEFAULT: Bounds = Bounds {
        header_read: Duration::from_secs(30),
        idle: Duration::from_secs(60),
        max_connections: match NonZeroUsize::new(256) {
            Some(n) => n,
            None => NonZeroUsize::MIN,
        },
    };
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds::DEFAULT
    }
}

/// One socket proxy: the engine it fronts, its bounds, and what it counted.
#[derive(Debug)]
pub struct SocketProxy {
    socket: PathBuf,
    bounds: Bounds,
    limit_reached: AtomicU64,
}

impl SocketProxy {
    pub fn new(socket: PathBuf, bounds: Bounds) -> Arc<SocketProxy> {
        Arc::new(SocketProxy {
            socket,
            bounds,
            limit_reached: AtomicU64::new(0),
        })
    }

    /// How many times the proxy reached its connection limit (each time
    /// counted once, however long it stayed there).
    pub fn limit_reached(&self) -> u64 {
        self.limit_reached.load(Ordering::Relaxed)
    }
}

/// Whether a request for `path` (without its query) may reach the engine.
pub fn allowed(method: &Method, path: &str) -> bool {
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    // An optional version prefix: `/v1.47/containers/json`.
    let path = match path.strip_prefix("/v") {
        Some(rest) => match rest.split_once('/') {
            Some((version, rest)) if is_version(version) => &path[path.len() - rest.len() - 1..],
            _ => path,
        },
        None => path,
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let id = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    };
    match segments.as_slice() {
        ["_ping"] | ["version"] | ["info"] | ["events"] => true,
        ["containers", "json"] => true,
        ["containers", container, "json"] => id(container),
        ["services"] | ["tasks"] | ["nodes"] => true,
        ["services", one] | ["tasks", one] | ["nodes", one] => id(one),
        _ => false,
    }
}

fn is_version(text: &str) -> bool {
    text.split_once('.').is_some_and(|(major, minor)| {
        !major.is_empty()
            && !minor.is_empty()
            && (major.bytes().chain(minor.bytes())).all(|b| b.is_ascii_digit())
    })
}

type Body = Either<Incoming, Full<Bytes>>;

fn refused(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "message": message }).to_string();
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

async fn pass(socket: &PathBuf, mut req: Request<Incoming>) -> Response<Body> {
    if !allowed(req.method(), req.uri().path()) {
        tracing::debug!(method = %req.method(), path = req.uri().path(), "refused");
        return refused(
            StatusCode::FORBIDDEN,
            "refused by picket socket-proxy: read-only, allow-listed paths only",
        );
    }
    let stream = match UnixStream::connect(socket).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::warn!(socket = %socket.display(), %error, "cannot reach the Docker engine");
            return refused(
                StatusCode::BAD_GATEWAY,
                "the Docker engine cannot be reached",
            );
        }
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(_) => {
                return refused(
                    StatusCode::BAD_GATEWAY,
                    "the Docker engine cannot be reached",
                );
            }
        };
    tokio::spawn(connection);
    // Only the path and query go to the engine; bodies of GETs are dropped.
    let uri = req
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    let mut upstream = Request::new(Full::new(Bytes::new()));
    *upstream.method_mut() = req.method().clone();
    *upstream.uri_mut() = uri.parse().unwrap_or_else(|_| http::Uri::from_static("/"));
    std::mem::swap(upstream.headers_mut(), req.headers_mut());
    upstream
        .headers_mut()
        .insert(http::header::HOST, http::HeaderValue::from_static("docker"));
    match sender.send_request(upstream).await {
        Ok(response) => response.map(Either::Left),
        Err(_) => refused(StatusCode::BAD_GATEWAY, "the Docker engine did not answer"),
    }
}

/// Serves the proxy on `listener` until `shutdown`; the connections still
/// open are closed then.
pub async fn serve(listener: TcpListener, proxy: Arc<SocketProxy>, mut shutdown: Shutdown) {
    let limit = proxy.bounds.max_connections.get();
    let slots = Arc::new(Semaphore::new(limit));
    let mut connections = JoinSet::new();
    let mut last_accept_warning: Option<Instant> = None;
    // Reaching the limit is said and counted once, until the proxy has a
    // slot to spare again: under a sustained overload, every connection
    // that closes lets one more in, and that is not news.
    let mut at_limit = false;
    loop {
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                if at_limit {
                    at_limit = false;
                    tracing::info!(
                        max_connections = limit,
                        "socket proxy below its connection limit again"
                    );
                }
                slot
            }
            Err(_) => {
                if !at_limit {
                    at_limit = true;
                    let times = proxy.limit_reached.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(
                        max_connections = limit,
                        times,
                        "socket proxy at its connection limit; clients wait in the listen backlog until a connection closes"
                    );
                }
                // Not accepting: the clients beyond the limit wait in the
                // listen backlog rather than being accepted and dropped.
                let slot = loop {
                    tokio::select! {
                        slot = Arc::clone(&slots).acquire_owned() => break slot,
                        Some(_) = connections.join_next(), if !connections.is_empty() => {}
                        () = shutdown.wait() => return,
                    }
                };
                let Ok(slot) = slot else { return };
                slot
            }
        };
        let stream = loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => break stream,
                    Err(error) => {
                        // Out of file descriptors and the like: say so at
                        // most every few seconds, and give the system a
                        // moment.
                        if last_accept_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                            tracing::warn!(%error, "socket proxy: accepting a connection failed");
                            last_accept_warning = Some(Instant::now());
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = shutdown.wait() => return,
            }
        };
        let proxy = Arc::clone(&proxy);
        connections.spawn(async move {
            client(stream, &proxy).await;
            drop(slot);
        });
    }
}

/// Serves one client until it closes or outlives a bound.
async fn client(stream: TcpStream, proxy: &Arc<SocketProxy>) {
    let peer = stream.peer_addr().ok();
    let Bounds {
        header_read, idle, ..
    } = proxy.bounds;
    let answer = |req| {
        let proxy = Arc::clone(proxy);
        async move { pass(&proxy.socket, req).await }
    };
    match connection::serve(stream, header_read, idle, answer).await {
        Ended::Closed(None) => {}
        Ended::Closed(Some(error)) => {
            tracing::debug!(?peer, %error, "socket proxy: connection ended");
        }
        Ended::Bounded(Phase::Idle { .. }) => {
            tracing::debug!(?peer, ?idle, "socket proxy: closed an idle connection");
        }
        Ended::Bounded(_) => {
            tracing::debug!(
                ?peer,
                ?header_read,
                "socket proxy: closed a connection whose request head did not come in time"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_list() {
        let get = Method::GET;
        for path in [
            "/_ping",
            "/version",
            "/v1.47/version",
            "/info",
            "/events",
            "/v1.41/events",
            "/containers/json",
            "/v1.53/containers/json",
            "/containers/3f2a9c/json",
            "/services",
            "/services/web",
            "/tasks",
            "/tasks/abc123",
            "/nodes",
            "/nodes/n1",
        ] {
            assert!(allowed(&get, path), "{path} should pass");
        }
        for path in [
            "/containers/create",
            "/containers/abc/start",
            "/containers/abc/logs",
            "/containers/abc/exec",
            "/containers/abc",
            "/exec/abc/start",
            "/secrets",
            "/configs",
            "/images/json",
            "/v1.47/containers/abc/archive",
            "/vx.y/version",
            "/",
            "/containers/../secrets/json",
        ] {
            assert!(!allowed(&get, path), "{path} should be refused");
        }
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert!(!allowed(&method, "/containers/json"), "{method}");
        }
        assert!(allowed(&Method::HEAD, "/_ping"));
    }
}
