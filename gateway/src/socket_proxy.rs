//! `picket socket-proxy`: a read-only window on the local Docker engine,
//! for the Picket nodes of a swarm to follow this engine's containers.
//!
//! Only `GET` (and `HEAD`) of an allow-list of paths passes — the engine's
//! version, info, containers (list and inspect), events, services, tasks
//! and nodes — with or without a `/v1.NN` version prefix (bollard 0.21
//! sends unversioned paths). Everything else gets 403 and never reaches
//! the engine. Responses are streamed as they come: the event stream is
//! not buffered.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UnixStream};

use crate::shutdown::Shutdown;

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

/// Serves the proxy on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, socket: PathBuf, mut shutdown: Shutdown) {
    let socket = Arc::new(socket);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            () = shutdown.wait() => return,
        };
        let socket = Arc::clone(&socket);
        let service = service_fn(move |req| {
            let socket = Arc::clone(&socket);
            async move { Ok::<_, Infallible>(pass(&socket, req).await) }
        });
        tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
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
