//! The admin listener: `/healthz`, `/readyz`, `/metrics`, and the status
//! API: `/v1/node`, `/v1/routes`, `/v1/routes/{name}`, `/v1/nodes`,
//! `/v1/cluster`.
//!
//! Every answer comes from state already in memory: nothing here waits on
//! a probe, an upstream or a peer. The listener runs on a thread and
//! runtime of its own, so that a proxy saturated with hanging upstreams
//! cannot delay it. No endpoint changes anything.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::clock::now_unix_ms;
use crate::edge::Certificates;
use crate::gossip::Membership;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::shutdown::Shutdown;
use crate::verdict::board::Board;
use filter::Filter;

pub mod cluster;
pub mod feed;
pub mod filter;
mod places;
pub mod routes;
pub mod streamed;

/// What the admin endpoints report.
#[derive(Debug)]
pub struct AdminState {
    /// True once the node serves traffic; false again while it drains.
    pub ready: AtomicBool,
    pub metrics: Arc<Metrics>,
    pub node: String,
    /// Read only: the route table and what hangs on it.
    pub proxy: Arc<Proxy>,
    /// Read only: this node's verdicts.
    pub board: Arc<Board>,
    /// Read only: the cluster as this node knows it, once it has started.
    pub membership: OnceLock<Arc<Membership>>,
    /// Read only: the certificates served to HTTPS clients.
    pub certificates: Arc<Certificates>,
    /// The HTTPS listener, once bound.
    pub listen_tls: OnceLock<SocketAddr>,
    /// Places for answers being encoded (`/metrics`, `/v1/cluster`), each
    /// on a thread of its own while it encodes: [`ENCODERS`].
    encoders: Arc<Semaphore>,
}

/// Answers encoded at once. An encoder waits for its client while it
/// encodes (up to 60 s a piece for `/v1/cluster`), so slow clients hold
/// threads; past this many, more are refused with 503 instead of queueing
/// behind them, and `/healthz`, `/readyz` and the small answers stay quick.
const ENCODERS: usize = 32;

impl AdminState {
    pub fn new(
        node: &str,
        metrics: Arc<Metrics>,
        proxy: Arc<Proxy>,
        board: Arc<Board>,
        certificates: Arc<Certificates>,
    ) -> AdminState {
        AdminState {
            certificates,
            listen_tls: OnceLock::new(),
            board,
            node: node.to_string(),
            proxy,
            ready: AtomicBool::new(false),
            metrics,
            membership: OnceLock::new(),
            encoders: Arc::new(Semaphore::new(ENCODERS)),
        }
    }

    /// A place for one more encoder, if one is free.
    fn encoder(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.encoders).try_acquire_owned().ok()
    }
}

/// An admin answer's body: whole, or (`/v1/cluster`, up to 18 MB at 100
/// nodes x 1,000 routes; `/metrics`, 2 MB at 1,000 routes) sent as it is
/// encoded.
pub type AnswerBody = Either<Full<Bytes>, streamed::Streamed>;

/// Answers one admin request (`query`: the filters of `/v1/cluster`).
/// Within a tokio runtime: `/v1/cluster` and `/metrics` are encoded on a
/// blocking thread.
pub fn answer(
    state: &AdminState,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Response<AnswerBody> {
    if method == Method::GET || method == Method::HEAD {
        match path {
            "/v1/cluster" => return cluster_view(state, query),
            "/metrics" => return exposition(state),
            _ => {}
        }
    }
    whole(state, method, path).map(Either::Left)
}

/// `/metrics`: the text exposition, sent as it is encoded, so that a
/// scrape holds a few pieces of it rather than all of it.
fn exposition(state: &AdminState) -> Response<AnswerBody> {
    let Some(encoder) = state.encoder() else {
        return busy();
    };
    let metrics = Arc::clone(&state.metrics);
    let mut response = Response::new(Either::Right(streamed::text(move |out| {
        let _encoder = encoder;
        metrics.encode_to(out)
    })));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// `/v1/cluster`: every member with its verdicts, filtered by `query`.
fn cluster_view(state: &AdminState, query: Option<&str>) -> Response<AnswerBody> {
    let Some(membership) = state.membership.get() else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "starting\n").map(Either::Left);
    };
    let filter = match Filter::parse(query) {
        Ok(filter) => filter,
        Err(error) => {
            return text(StatusCode::BAD_REQUEST, format!("{error}\n")).map(Either::Left);
        }
    };
    let Some(encoder) = state.encoder() else {
        return busy();
    };
    let view = membership.view();
    let name = membership.cluster.clone();
    let now = now_unix_ms();
    json_response(Either::Right(streamed::json(move |out| {
        let _encoder = encoder;
        let answer = cluster::cluster(&view, name.as_deref(), true, now, &filter);
        serde_json::to_writer(out, &answer)
    })))
}

/// The answer when every encoder is taken.
fn busy() -> Response<AnswerBody> {
    let mut busy = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("busy: {ENCODERS} answers are being sent; try again\n"),
    );
    busy.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    busy.map(Either::Left)
}

fn json_response(body: AnswerBody) -> Response<AnswerBody> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Every answer but a cluster view's.
fn whole(state: &AdminState, method: &Method, path: &str) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "read-only: GET or HEAD\n");
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/v1/routes" => json(&routes::routes(
            &state.node,
            &state.proxy.table(),
            &state.proxy.refused(),
            &state.board.snapshot(),
            crate::clock::now_unix_ms(),
        )),
        "/v1/node" | "/v1/nodes" => {
            let Some(membership) = state.membership.get() else {
                return text(StatusCode::SERVICE_UNAVAILABLE, "starting\n");
            };
            match path {
                "/v1/node" => json(&cluster::node(
                    membership,
                    state.listen_tls.get().copied(),
                    &state.certificates.load(),
                    crate::clock::now_unix(),
                )),
                _ => json(&cluster::cluster(
                    &membership.view(),
                    membership.cluster.as_deref(),
                    false,
                    now_unix_ms(),
                    &Filter::default(),
                )),
            }
        }
        // A route of the runtime has `/` in its name (`shop/web/api`):
        // the rest of the path is the name, whether its slashes are
        // written as they are or as `%2F`.
        _ => match path.strip_prefix("/v1/routes/").map(route_name) {
            Some(name) if !name.is_empty() => {
                let name = name.as_str();
                let Some(membership) = state.membership.get() else {
                    return text(StatusCode::SERVICE_UNAVAILABLE, "starting\n");
                };
                match cluster::route(membership, name, now_unix_ms()) {
                    Some(answer) => json(&answer),
                    None => no_route(name),
                }
            }
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        },
    }
}

/// The most characters of an asked-for name said back: a route name has at
/// most 253, so no real name is cut.
const ECHOED: usize = 256;

/// A route's name as a path carries it: `%2F` (any case) stands for `/`;
/// nothing else is decoded, as no route name has another character that
/// needs it.
fn route_name(segment: &str) -> String {
    let mut name = String::with_capacity(segment.len());
    let mut rest = segment;
    while let Some(at) = rest.find('%') {
        name.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        if escape.is_some_and(|e| e.eq_ignore_ascii_case("%2f")) {
            name.push('/');
            rest = &rest[at + 3..];
        } else {
            name.push('%');
            rest = &rest[at + 1..];
        }
    }
    name.push_str(rest);
    name
}

/// 404 for a route no node has. The name is the client's, not ours: it is
/// said back cut to [`ECHOED`] characters, control characters escaped.
fn no_route(name: &str) -> Response<Full<Bytes>> {
    let mut response = json(&serde_json::json!({
        "error": format!("no node has a route named {}", echoed(name))
    }));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// `name` quoted, with what `Debug` escapes escaped (control characters,
/// quotes, backslashes), cut after [`ECHOED`] characters with how many
/// there were.
fn echoed(name: &str) -> String {
    let shown: String = name.chars().take(ECHOED).collect();
    if shown.len() == name.len() {
        format!("{shown:?}")
    } else {
        format!("{shown:?}… ({} characters)", name.chars().count())
    }
}

/// An answer's JSON body, as the status API sends it: compact, as the
/// Kubernetes and Docker APIs send theirs (`jq .` indents it). Indenting
/// made the whole cluster view at 100 nodes x 1,000 routes half as large
/// again, and slower to encode than a script may wait.
pub fn json_body(value: &impl serde::Serialize) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(value)
}

fn json(value: &impl serde::Serialize) -> Response<Full<Bytes>> {
    match json_body(value) {
        Ok(mut body) => {
            body.push(b'\n');
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the answer\n",
        ),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// How long an admin connection may take to send a request head, from
/// its accept or from the end of its last answer: health checks, scrapes
/// and scripts send theirs at once. Shorter than the proxy's, so that idle
/// connections make room soon.
pub const ADMIN_HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the admin endpoints until `shutdown`, at most `max_connections`
/// at once.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AdminState>,
    max_connections: usize,
    mut shutdown: Shutdown,
) {
    let places = places::Places::new(
        max_connections,
        state.metrics.connections.admin_open.clone(),
    );
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = shutdown.wait() => return,
        };
        let _ = stream.set_nodelay(true);
        let taken = places.take(stream);
        let connections = &state.metrics.connections;
        if taken.evicted > 0 {
            connections.admin_evicted.inc_by(taken.evicted);
        }
        let Some((place, stream)) = taken.held else {
            // Twice the limit, every place answering: closed at once.
            connections.admin_refused.inc();
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let place = Arc::new(place);
            let marks = Arc::clone(&place);
            let service = service_fn(move |req: Request<Incoming>| {
                // Answering from the head read to the body's last byte.
                marks.activity.answering();
                let response = answer(&state, req.method(), req.uri().path(), req.uri().query())
                    .map(|body| places::Finishing::new(body, &marks));
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(ADMIN_HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                () = place.close.notified() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's admin state with no routes.
    fn state() -> AdminState {
        let metrics = Arc::new(Metrics::new());
        let proxy = Arc::new(Proxy::new(
            crate::router::RouteTable::default(),
            Arc::clone(&metrics),
        ));
        let certificates = Arc::new(Certificates::new(Vec::new(), Arc::clone(&metrics)));
        AdminState::new(
            "n1",
            metrics,
            proxy,
            Arc::new(Board::default()),
            certificates,
        )
    }

    #[tokio::test]
    async fn endpoints() {
        let state = state();
        assert_eq!(
            answer(&state, &Method::GET, "/healthz", None).status(),
            StatusCode::OK
        );
        assert_eq!(
            answer(&state, &Method::GET, "/readyz", None).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.ready.store(true, Ordering::Relaxed);
        assert_eq!(
            answer(&state, &Method::GET, "/readyz", None).status(),
            StatusCode::OK
        );
        let scrape = answer(&state, &Method::GET, "/metrics", None);
        assert_eq!(scrape.status(), StatusCode::OK);
        let text = http_body_util::BodyExt::collect(scrape.into_body())
            .await
            .expect("a whole exposition")
            .to_bytes();
        assert_eq!(text, state.metrics.encode().as_bytes());
        assert!(text.ends_with(b"# EOF\n"));
        assert_eq!(
            answer(&state, &Method::POST, "/healthz", None).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            answer(&state, &Method::GET, "/nope", None).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn past_its_encoders_the_listener_says_busy() {
        let state = state();
        let taken: Vec<_> = (0..ENCODERS).map(|_| state.encoder()).collect();
        assert!(taken.iter().all(Option::is_some), "{ENCODERS} places");
        let busy = answer(&state, &Method::GET, "/metrics", None);
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[RETRY_AFTER], "1");
        assert_eq!(
            answer(&state, &Method::GET, "/healthz", None).status(),
            StatusCode::OK,
            "small answers still come"
        );
        drop(taken);
        assert_eq!(
            answer(&state, &Method::GET, "/metrics", None).status(),
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn an_unknown_route_name_is_said_back_bounded() {
        async fn error(name: &str) -> String {
            use http_body_util::BodyExt;
            let response = no_route(name);
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            answer["error"].as_str().unwrap().to_string()
        }
        assert_eq!(error("web").await, "no node has a route named \"web\"");
        let longest = format!("{}/{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(
            error(&longest).await,
            format!("no node has a route named \"{longest}\""),
            "a route name as long as one can be is said whole"
        );

        let huge = "x".repeat(100_000);
        let said = error(&huge).await;
        assert!(said.len() < 320, "{} bytes: {said}", said.len());
        assert!(
            said.ends_with(&format!("\"{}\"… (100000 characters)", "x".repeat(ECHOED))),
            "{said}"
        );

        let said = error("a\u{1b}[31mred\nline\u{7f}").await;
        assert!(
            !said.chars().any(char::is_control),
            "control characters escaped: {said:?}"
        );
        assert!(said.contains("\\u{1b}[31mred\\nline"), "{said}");

        // Cut on a character, not a byte.
        let wide = "é".repeat(ECHOED + 1);
        assert!(error(&wide).await.contains(&"é".repeat(ECHOED)));
    }
}
