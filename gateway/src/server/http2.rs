//! HTTP/2 clients (prior knowledge, or over TLS by ALPN), served by hyper: each request becomes
//! a [`ClientRequest`] with a header map, and each answer a hyper response
//! whose body streams from the upstream connection.
//!
//! ## Connection rules
//! - At most [`MAX_STREAMS`] streams at once per connection.
//! - A connection with no request open for the idle timeout (`[node]
//!   idle_timeout`, 60 s) is closed (GOAWAY and a PING, then at most
//!   [`IDLE_CLOSE`] for the PING's answer: a client that ignores it does
//!   not keep its place), as an idle HTTP/1 connection is.
//! - Each stream's body is read under the body inactivity bound, as an
//!   HTTP/1 body is.
//! - Each stream's answer is sent under the send bound (`[node]
//!   send_timeout`, 60 s): a stream whose client takes nothing of it for
//!   that long (a zero flow-control window) is given up, its replica
//!   connection freed, and it no longer counts as open ([`Watched`]). One
//!   [`Sweeper`] per connection keeps every stream's bound.
//! - The path is normalised before routing, as for HTTP/1.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, HOST};
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::http1::Rewind;
use crate::access::Record;
use crate::body::GatewayBody;
use crate::ending::{Bound, Cause, Ending, Phase};
use crate::h1::request::{BodyKind, is_host};
use crate::proxy::forward::Trace;
use crate::proxy::{
    AnswerBody, Client, ClientRequest, Fields, IncomingBody, Proxy, ProxyError, RequestId, Route,
    forward,
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

/// A response body that keeps its request counted as open until it ends,
/// counts its bytes, tells how it ended, and writes the request's access
/// log line when it is done (or dropped).
struct Counted {
    body: Held,
    log: Option<Box<Logged>>,
    /// The route whose metrics count an answer that did not go out whole.
    route: Option<Arc<Route>>,
    /// A gRPC call: the replica's trailers are its metadata.
    grpc: bool,
    /// How the exchange ended, as far as it is known: until the body ends,
    /// the answer's own (complete, or the node's page for a failure).
    ending: Ending,
    /// The body gave its last frame, or broke off.
    over: bool,
}

/// A request's access log line, waiting for its answer's end.
struct Logged {
    proxy: Arc<Proxy>,
    time: std::time::SystemTime,
    started: tokio::time::Instant,
    client: std::net::IpAddr,
    method: Method,
    host: Option<Bytes>,
    path: Bytes,
    status: u16,
    bytes_in: u64,
    bytes_out: u64,
    route: Option<Arc<Route>>,
    replica: Option<Arc<crate::upstream::Replica>>,
    tries: u32,
    decided_by: Option<&'static str>,
    id: RequestId,
    user_agent: Option<http::HeaderValue>,
    referer: Option<http::HeaderValue>,
}

/// A stream's answer body: its own when it is whole already (a page, an
/// empty body), else shared with the watch that bounds its sending.
enum Held {
    Own(GatewayBody, Open),
    Watched(Arc<Watched>),
    /// For a moment, from the one to the other.
    Moving,
}

/// The send bound of one HTTP/2 stream. hyper polls an answer's body only
/// while the client's flow-control window has room: a client that stops
/// reading stops the polls, and nothing in the stream's own task can
/// notice. So the connection's [`Sweeper`] looks from outside: when no
/// poll has come for the send bound while the body was not waiting on its
/// replica, it takes the body (closing the replica connection it holds)
/// and the stream's place among the open ones (so that the idle bound can
/// close a connection whose every stream was given up). The next poll, if
/// any, ends the stream with an error.
struct Watched {
    body: std::sync::Mutex<Option<GatewayBody>>,
    open: std::sync::Mutex<Option<Open>>,
    started: tokio::time::Instant,
    /// Milliseconds from `started` to the last poll.
    polled: std::sync::atomic::AtomicU64,
    /// The last poll found the body waiting on its replica: the replica's
    /// own body bound covers that wait.
    replica_turn: std::sync::atomic::AtomicBool,
    /// The sweeper gave the answer up.
    cut: std::sync::atomic::AtomicBool,
}

impl Watched {
    fn polled_now(&self, pending: bool) {
        let at = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.polled.store(at, std::sync::atomic::Ordering::Relaxed);
        self.replica_turn
            .store(pending, std::sync::atomic::Ordering::Relaxed);
    }

    /// At `now`, gives the answer up when its client has taken nothing of
    /// it for `bound`; else says when to look again.
    fn sweep(
        &self,
        now: tokio::time::Instant,
        bound: std::time::Duration,
    ) -> Option<tokio::time::Instant> {
        let polled = std::time::Duration::from_millis(
            self.polled.load(std::sync::atomic::Ordering::Relaxed),
        );
        let deadline = self.started + polled + bound;
        let replica_turn = self.replica_turn.load(std::sync::atomic::Ordering::Relaxed);
        if replica_turn {
            // Looked at again a bound later: a poll may come.
            return Some(now + bound);
        }
        if now < deadline {
            return Some(deadline);
        }
        let body = self.body.lock().unwrap_or_else(|e| e.into_inner()).take();
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner()).take();
        tracing::debug!("an HTTP/2 stream's client took nothing for the send bound");
        drop((body, open));
        self.cut.store(true, std::sync::atomic::Ordering::Relaxed);
        None
    }
}

/// The send bounds of one connection's answers, kept by one future that
/// runs with the connection: no task, timer or lock of its own per
/// answer. It sleeps until the earliest moment an answer could pass its
/// bound, and while no answer is being sent, until one is.
#[derive(Default)]
struct Sweeper {
    watched: std::sync::Mutex<Swept>,
    /// An answer came while none was watched.
    added: tokio::sync::Notify,
}

/// The answers being sent, and those that ended since the list was last
/// cleared of them.
#[derive(Default)]
struct Swept {
    list: Vec<std::sync::Weak<Watched>>,
    /// The length at which the answers that ended are cleared out: twice
    /// those left the last time, so the list stays within twice the
    /// streams open ([`MAX_STREAMS`]) at a constant cost per answer.
    clear_at: usize,
}

impl Sweeper {
    fn add(&self, watched: &Arc<Watched>) {
        let mut swept = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if swept.list.len() >= swept.clear_at {
            swept.list.retain(|weak| weak.strong_count() > 0);
            swept.clear_at = (2 * swept.list.len()).max(16);
        }
        if swept.list.is_empty() {
            self.added.notify_one();
        }
        swept.list.push(Arc::downgrade(watched));
    }

    /// Gives up every answer past its bound at `now`, forgets those that
    /// ended; when to sweep again, if any answer is left.
    fn sweep(
        &self,
        now: tokio::time::Instant,
        bound: std::time::Duration,
    ) -> Option<tokio::time::Instant> {
        let mut swept = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        let mut next: Option<tokio::time::Instant> = None;
        swept.list.retain(|weak| {
            let Some(watched) = weak.upgrade() else {
                return false;
            };
            match watched.sweep(now, bound) {
                Some(at) => {
                    next = Some(next.map_or(at, |next| next.min(at)));
                    true
                }
                None => false,
            }
        });
        next
    }

    /// Keeps the send bound of every answer of the connection; never
    /// returns.
    async fn run(&self, bound: std::time::Duration) {
        loop {
            match self.sweep(tokio::time::Instant::now(), bound) {
                Some(at) => tokio::time::sleep_until(at).await,
                None => self.added.notified().await,
            }
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        // Dropped before its end: the client reset the stream or left.
        if !self.over && !self.body_ended() {
            self.ending = Ending::new(Cause::ClientGone, Phase::Body);
        }
        if let Held::Watched(watched) = &self.body
            && !self.over
            && watched.cut.load(std::sync::atomic::Ordering::Relaxed)
        {
            self.ending = Ending::new(Cause::Bound(Bound::Send), Phase::Body);
        }
        if let Some(route) = &self.route {
            route.metrics.ended(self.ending);
        }
        let Some(logged) = self.log.take() else {
            return;
        };
        if let Some(log) = logged.proxy.access_log() {
            log.log(&Record {
                time: logged.time,
                client: logged.client,
                method: logged.method.as_str(),
                host: logged.host.as_deref(),
                path: &logged.path,
                protocol: "HTTP/2.0",
                status: logged.status,
                bytes_in: logged.bytes_in,
                bytes_out: logged.bytes_out,
                duration: logged.started.elapsed(),
                route: logged.route.as_ref().map(|r| r.config.name.as_str()),
                replica: logged.replica.as_ref().map(|r| r.label.as_str()),
                tries: logged.tries,
                decided_by: logged.decided_by,
                ending: self.ending,
                request_id: logged.id.as_str(),
                user_agent: logged.user_agent.as_ref().map(|v| v.as_bytes()),
                referer: logged.referer.as_ref().map(|v| v.as_bytes()),
            });
        }
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        let polled = match &mut this.body {
            Held::Own(body, _) => std::pin::Pin::new(body).poll_frame(cx),
            Held::Moving => std::task::Poll::Ready(None),
            Held::Watched(watched) => {
                let mut body = watched.body.lock().unwrap_or_else(|e| e.into_inner());
                let polled = match body.as_mut() {
                    Some(body) => std::pin::Pin::new(body).poll_frame(cx),
                    None => {
                        this.over = true;
                        this.ending = Ending::new(Cause::Bound(Bound::Send), Phase::Body);
                        return std::task::Poll::Ready(Some(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the client took nothing of the answer for the send bound",
                        ))));
                    }
                };
                watched.polled_now(polled.is_pending());
                polled
            }
        };
        let polled = match polled {
            // The replica's trailers cross as its head did: less what the
            // node owns and what the route's rules remove or set.
            std::task::Poll::Ready(Some(Ok(frame))) if frame.is_trailers() => {
                let frame = match (frame.into_trailers(), &this.route) {
                    (Ok(trailers), Some(route)) => {
                        http_body::Frame::trailers(crate::proxy::rules::response_trailers(
                            trailers,
                            &route.config.response_headers,
                            this.grpc,
                        ))
                    }
                    (Ok(trailers), None) => http_body::Frame::trailers(trailers),
                    (Err(frame), _) => frame,
                };
                std::task::Poll::Ready(Some(Ok(frame)))
            }
            polled => polled,
        };
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let (Some(logged), Some(data)) = (&mut this.log, frame.data_ref()) {
                    logged.bytes_out += data.len() as u64;
                }
            }
            std::task::Poll::Ready(Some(Err(e))) => {
                this.over = true;
                this.ending = Ending::of_replica_error(e);
            }
            std::task::Poll::Ready(None) => this.over = true,
            std::task::Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body_ended()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.body {
            Held::Own(body, _) => body.size_hint(),
            Held::Moving => http_body::SizeHint::with_exact(0),
            Held::Watched(watched) => watched
                .body
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map_or_else(http_body::SizeHint::default, http_body::Body::size_hint),
        }
    }
}

impl Counted {
    fn new(
        body: GatewayBody,
        open: Open,
        sweeper: &Sweeper,
        log: Option<Box<Logged>>,
        answered: Answered,
    ) -> Counted {
        let mut counted = Counted {
            body: Held::Own(body, open),
            log,
            route: answered.route,
            grpc: answered.grpc,
            ending: answered.ending,
            over: false,
        };
        // A body still to come is watched from the start: a client that
        // opened with a zero window is never asked for a first piece.
        if !counted.body_ended() {
            counted.watch(sweeper);
        }
        counted
    }

    fn body_ended(&self) -> bool {
        match &self.body {
            Held::Own(body, _) => http_body::Body::is_end_stream(body),
            Held::Moving => true,
            Held::Watched(watched) => watched
                .body
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_none_or(http_body::Body::is_end_stream),
        }
    }

    /// Shares the body with the connection's sweeper, once.
    fn watch(&mut self, sweeper: &Sweeper) {
        self.body = match std::mem::replace(&mut self.body, Held::Moving) {
            Held::Own(body, open) => {
                let watched = Arc::new(Watched {
                    body: std::sync::Mutex::new(Some(body)),
                    open: std::sync::Mutex::new(Some(open)),
                    started: tokio::time::Instant::now(),
                    polled: std::sync::atomic::AtomicU64::new(0),
                    replica_turn: std::sync::atomic::AtomicBool::new(false),
                    cut: std::sync::atomic::AtomicBool::new(false),
                });
                sweeper.add(&watched);
                Held::Watched(watched)
            }
            held => held,
        };
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
    limits: super::ClientLimits,
) {
    let (idle, send) = (limits.idle, limits.send);
    let client = Arc::new(client);
    let activity = Arc::new(Activity::default());
    let sweeper = Arc::new(Sweeper::default());
    let service = {
        let activity = Arc::clone(&activity);
        let sweeper = Arc::clone(&sweeper);
        service_fn(move |req| {
            let proxy = Arc::clone(&proxy);
            let client = Arc::clone(&client);
            let sweeper = Arc::clone(&sweeper);
            let open = Open::new(&activity);
            async move {
                let (response, answered, log) = handle(&proxy, req, &client).await;
                Ok::<_, Infallible>(
                    response.map(|body| Counted::new(body, open, &sweeper, log, answered)),
                )
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
    // The answers' send bounds are kept in this task, for as long as the
    // connection lives.
    let sweeping = sweeper.run(send);
    tokio::pin!(sweeping);
    let closing = tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "HTTP/2 client connection ended with an error");
            }
            return;
        }
        () = shutdown.wait() => "shutdown",
        () = activity.idle_for(idle) => "idle",
        () = sweeping.as_mut() => return,
    };
    tracing::debug!(closing, "closing an HTTP/2 client connection");
    connection.as_mut().graceful_shutdown();
    let closed = async {
        tokio::select! {
            _ = connection => {}
            () = sweeping => {}
        }
    };
    if closing == "idle" {
        // Nothing is open: the GOAWAY's PING needs only its answer. A
        // client that never answers it does not keep its place: the wait
        // is bounded, as an HTTP/1 lingering close is.
        let _ = tokio::time::timeout(IDLE_CLOSE, closed).await;
        return;
    }
    // Shutting down: the streams still open finish, within the node's
    // drain deadline.
    closed.await;
}

/// How long an idle HTTP/2 connection that was sent GOAWAY waits for the
/// client's answer to its PING before it is closed.
const IDLE_CLOSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Answers one HTTP/2 request. Never fails: every error is a response.
/// With the access log on, the request's line, to be written when the
/// answer has gone.
async fn handle(
    proxy: &Arc<Proxy>,
    req: Request<Incoming>,
    client: &Client,
) -> (Response<GatewayBody>, Answered, Option<Box<Logged>>) {
    let started = tokio::time::Instant::now();
    let time = std::time::SystemTime::now();
    let (parts, body) = req.into_parts();
    let id = RequestId::of_request(parts.headers.get("x-request-id").map(|v| v.as_bytes()));
    let mut logged = proxy.access_log().map(|_| {
        Box::new(Logged {
            proxy: Arc::clone(proxy),
            time,
            started,
            client: client.ip(),
            method: parts.method.clone(),
            host: None,
            path: Bytes::copy_from_slice(
                parts
                    .uri
                    .path_and_query()
                    .map_or(&b"/"[..], |pq| pq.as_str().as_bytes()),
            ),
            status: 0,
            bytes_in: 0,
            bytes_out: 0,
            route: None,
            replica: None,
            tries: 0,
            decided_by: None,
            id,
            user_agent: parts.headers.get(http::header::USER_AGENT).cloned(),
            referer: parts.headers.get(http::header::REFERER).cloned(),
        })
    });
    let mut trace = Trace::default();
    let (response, answered) =
        answer(proxy, &parts, body, client, &id, &mut trace, &mut logged).await;
    if let Some(logged) = &mut logged {
        logged.status = response.status().as_u16();
        logged.route = answered.route.clone();
        logged.replica = trace.replica.take();
        logged.tries = trace.tries;
        logged.decided_by = answered.decided_by;
        logged.bytes_in = answered.bytes_in;
    }
    (response, answered, logged)
}

/// What became of an HTTP/2 request before its answer's body.
struct Answered {
    /// The route it took.
    route: Option<Arc<Route>>,
    /// A gRPC call.
    grpc: bool,
    /// What decided a failure.
    decided_by: Option<&'static str>,
    /// How it ended, unless the body says otherwise.
    ending: Ending,
    /// Body bytes read.
    bytes_in: u64,
}

/// The answer to one HTTP/2 request, and what became of it.
async fn answer(
    proxy: &Proxy,
    parts: &http::request::Parts,
    body: Incoming,
    client: &Client,
    id: &RequestId,
    trace: &mut Trace,
    logged: &mut Option<Box<Logged>>,
) -> (Response<GatewayBody>, Answered) {
    let accept = parts.headers.get(ACCEPT).map(|v| v.as_bytes());
    let grpc = crate::proxy::grpc::is_call(&Fields::Map(&parts.headers));
    // What the node answers itself: trailers only to a gRPC call.
    let refuse = |error: ProxyError| {
        let mut response = match grpc {
            true => crate::proxy::grpc::answer(&error),
            false => error.response(accept, id),
        };
        response
            .headers_mut()
            .insert("x-request-id", id.header_value());
        let answered = Answered {
            route: None,
            grpc,
            decided_by: Some(error.decided_by()),
            ending: error.ending(),
            bytes_in: 0,
        };
        (response, answered)
    };
    if parts.method == Method::CONNECT {
        return refuse(ProxyError::Connect);
    }
    let host = match parts.uri.authority() {
        Some(authority) => Some(authority.as_str().as_bytes()),
        None => parts.headers.get(HOST).map(|h| h.as_bytes()),
    };
    if let Some(logged) = logged {
        logged.host = host.map(Bytes::copy_from_slice);
    }
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
        id,
    };
    let mut body = IncomingBody::new(body, route.config.body_timeout);
    // A call the node answers itself is counted by the HTTP status its
    // failure stands for, not the 200 that carries its grpc-status.
    let mut counted = None;
    let mut decided_by = None;
    let mut ending = Ending::COMPLETE;
    let mut response = match forward(&route, &req, &mut body, client, trace).await {
        Ok(answer) => {
            let mut response = Response::new(GatewayBody::empty());
            *response.status_mut() = answer.head.status;
            *response.headers_mut() = answer_headers(&answer.head, &route, id, host);
            if let AnswerBody::Stream(stream) = answer.body {
                *response.body_mut() = GatewayBody::Upstream(stream);
            }
            response
        }
        Err(error) if grpc => {
            tracing::debug!(route = %route.config.name, %error, "call failed");
            counted = Some(error.status());
            decided_by = Some(error.decided_by());
            ending = error.ending();
            crate::proxy::grpc::answer(&error)
        }
        Err(error) => {
            tracing::debug!(route = %route.config.name, %error, "request failed");
            decided_by = Some(error.decided_by());
            ending = error.ending();
            error.response(accept, id)
        }
    };
    response
        .headers_mut()
        .insert("x-request-id", id.header_value());
    route.metrics.count(counted.unwrap_or(response.status()));
    let answered = Answered {
        route: Some(route),
        grpc,
        decided_by,
        ending,
        bytes_in: body.read(),
    };
    (response, answered)
}

/// The headers of a replica's answer as the client gets them: the head's
/// own map (its values shared, not copied) when the route changes nothing,
/// else through the route's rules and rewriting. `X-Request-Id` is the
/// request's, set by the caller.
fn answer_headers(
    head: &crate::h1::response::ResponseHead,
    route: &Route,
    id: &RequestId,
    host: Option<&[u8]>,
) -> http::HeaderMap {
    if !route.config.response_headers.changes_head() && route.rewrite.is_none() {
        let mut headers = head.header_map();
        headers.remove("x-request-id");
        return headers;
    }
    let mut headers = http::HeaderMap::new();
    crate::proxy::rules::response_fields(head.fields(), route, id, host, |name, value| {
        if let (Ok(name), Ok(value)) = (
            http::header::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            headers.append(name, value);
        }
    });
    if let Some(n) = head.content_length() {
        headers.insert(CONTENT_LENGTH, http::HeaderValue::from(n));
    }
    headers
}
