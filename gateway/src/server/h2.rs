//! HTTP/2 clients (prior knowledge, or over TLS by ALPN), served by hyper: each request becomes
//! a [`ClientRequest`] with a header map, and each answer a hyper response
//! whose body streams from the upstream connection.
//!
//! ## Connection rules
//! - At most [`MAX_STREAMS`] streams at once per connection.
//! - A connection with no request open for the idle timeout (`[node]
//!   idle_timeout`, 60 s) is closed (GOAWAY, then the streams still open
//!   finish), as an idle HTTP/1 connection is.
//! - Each stream's body is read under the body inactivity bound, as an
//!   HTTP/1 body is.
//! - The path is normalised before routing, as for HTTP/1.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, HOST};
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::h1::Rewind;
use crate::body::GatewayBody;
use crate::h1::request::{BodyKind, is_host};
use crate::proxy::{
    AnswerBody, BodyError, Client, ClientRequest, Fields, Proxy, ProxyError, RequestBody, forward,
};
use crate::shutdown::Shutdown;

/// Streams one HTTP/2 connection carries at once, at most.
pub const MAX_STREAMS: u32 = 100;

/// Requests in flight on a connection, and when the last one ended.
#[derive(Debug, Default)]
struct Activity {
    open: std::sync::atomic::AtomicUsize,
    changed: tokio::sync::Notify,
}

/// Counts a request as open while it lives.
struct Open(Arc<Activity>);

impl Open {
    fn new(activity: &Arc<Activity>) -> Open {
        activity
            .open
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        activity.changed.notify_waiters();
        Open(Arc::clone(activity))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.0.changed.notify_waiters();
    }
}

/// A response body that keeps its request counted as open until it ends.
struct Counted {
    body: GatewayBody,
    _open: Open,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Activity {
    /// Resolves once no request has been open for `idle`.
    async fn idle_for(&self, idle: std::time::Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.open.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                changed.await;
                continue;
            }
            tokio::select! {
                () = changed => continue,
                () = tokio::time::sleep(idle) => return,
            }
        }
    }
}

/// Serves HTTP/2 on `io` until the client or the node ends it, or it has
/// had no request open for `idle`.
pub async fn serve(
    io: Rewind,
    proxy: Arc<Proxy>,
    client: Client,
    mut shutdown: Shutdown,
    idle: std::time::Duration,
) {
    let client = Arc::new(client);
    let activity = Arc::new(Activity::default());
    let service = {
        let activity = Arc::clone(&activity);
        service_fn(move |req| {
            let proxy = Arc::clone(&proxy);
            let client = Arc::clone(&client);
            let open = Open::new(&activity);
            async move {
                let response = handle(&proxy, req, &client).await;
                Ok::<_, Infallible>(response.map(|body| Counted { body, _open: open }))
            }
        })
    };
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(crate::h1::MAX_HEAD as u32);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let closing = tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "HTTP/2 client connection ended with an error");
            }
            return;
        }
        () = shutdown.wait() => "shutdown",
        () = activity.idle_for(idle) => "idle",
    };
    tracing::debug!(closing, "closing an HTTP/2 client connection");
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// Answers one HTTP/2 request. Never fails: every error is a response.
async fn handle(proxy: &Proxy, req: Request<Incoming>, client: &Client) -> Response<GatewayBody> {
    let (parts, body) = req.into_parts();
    let accept = parts.headers.get(ACCEPT).map(|v| v.as_bytes());
    let grpc = crate::proxy::grpc::is_call(&Fields::Map(&parts.headers));
    // What the node answers itself: trailers only to a gRPC call.
    let refuse = |error: ProxyError| match grpc {
        true => crate::proxy::grpc::answer(&error),
        false => error.response(accept),
    };
    if parts.method == Method::CONNECT {
        return refuse(ProxyError::Connect);
    }
    let host = match parts.uri.authority() {
        Some(authority) => Some(authority.as_str().as_bytes()),
        None => parts.headers.get(HOST).map(|h| h.as_bytes()),
    };
    if host.is_some_and(|h| !is_host(h)) {
        return refuse(ProxyError::BadRequest("invalid host"));
    }
    let target = parts
        .uri
        .path_and_query()
        .map_or(&b"/"[..], |pq| pq.as_str().as_bytes());
    let path = match crate::h1::target::normalize(target) {
        Ok(path) => path,
        Err(_) => {
            proxy.metrics().connections.refused.inc();
            return refuse(ProxyError::BadRequest("invalid request target"));
        }
    };
    let path = &path[..];
    let route = match proxy.route(host, path, client) {
        Ok(route) => route,
        Err(error) => return refuse(error),
    };
    let kind = if http_body::Body::is_end_stream(&body) {
        BodyKind::None
    } else {
        match parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
        {
            Some(n) => BodyKind::Length(n),
            None => BodyKind::Chunked,
        }
    };
    let req = ClientRequest {
        method: &parts.method,
        path,
        host,
        fields: Fields::Map(&parts.headers),
        upgrade: None,
        body: kind,
        grpc,
    };
    let mut body = IncomingBody {
        body: Some(body),
        bound: Some(route.config.body_timeout),
        trailers: None,
    };
    // A call the node answers itself is counted by the HTTP status its
    // failure stands for, not the 200 that carries its grpc-status.
    let mut counted = None;
    let response = match forward(&route, &req, &mut body, client).await {
        Ok(answer) => {
            let mut response = Response::new(GatewayBody::empty());
            *response.status_mut() = answer.head.status;
            *response.headers_mut() = answer.head.header_map();
            if let AnswerBody::Stream(stream) = answer.body {
                *response.body_mut() = GatewayBody::Upstream(stream);
            }
            response
        }
        Err(error) if grpc => {
            tracing::debug!(route = %route.config.name, %error, "call failed");
            counted = Some(error.status());
            crate::proxy::grpc::answer(&error)
        }
        Err(error) => {
            tracing::debug!(route = %route.config.name, %error, "request failed");
            error.response(accept)
        }
    };
    route.metrics.count(counted.unwrap_or(response.status()));
    response
}

/// The body of an HTTP/2 request, each frame awaited at most `bound`
/// (while the request waits for its answer), and its trailers.
pub struct IncomingBody {
    /// `None` once detached.
    body: Option<Incoming>,
    bound: Option<std::time::Duration>,
    trailers: Option<http::HeaderMap>,
}

impl IncomingBody {
    /// No more bound on the wait for the next frame: the answer has
    /// started, and a stream that has started is never cut by a bound.
    pub fn unbound(&mut self) {
        self.bound = None;
    }
}

impl RequestBody for IncomingBody {
    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        let body = self.body.as_mut()?;
        loop {
            let frame = match self.bound {
                Some(bound) => match tokio::time::timeout(bound, body.frame()).await {
                    Ok(frame) => frame,
                    Err(_) => return Some(Err(BodyError::timed_out(bound))),
                },
                None => body.frame().await,
            };
            match frame? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.trailers = Some(trailers);
                        }
                    }
                },
                Err(e) => return Some(Err(BodyError(Box::new(e)))),
            }
        }
    }

    fn trailers(&mut self) -> Option<http::HeaderMap> {
        self.trailers.clone()
    }

    fn detach(&mut self) -> Option<IncomingBody> {
        Some(IncomingBody {
            body: self.body.take(),
            bound: self.bound,
            trailers: self.trailers.take(),
        })
    }
}
