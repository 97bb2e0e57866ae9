//! Forwarding one request: attempts on replicas, the first-answer bound,
//! and retries. The answer is the upstream's response head and its body
//! still on the wire; each client protocol writes it out its own way.
//!
//! ## Retries
//! Whether a request moves on to another replica, tries the same one again
//! on a fresh connection, or is answered, is decided by [`super::plan`]
//! from what became of each attempt; this module carries the steps out.
//! Each attempt goes to a different replica, at most `tries` of them. When
//! no other replica can be had, the client gets the last answer.
//!
//! ## Bounds
//! The connect bound is the upstream's ([`crate::upstream`]). Every write
//! of the request to the replica is bounded by the body inactivity bound
//! (`body_timeout`): a replica that stops reading the body is treated as
//! one silent at the first-answer bound (ejected while another replica is
//! in rotation) and the client gets 504. Reading the client's body is
//! bounded the same way by the client protocol. The
//! first-answer bound runs from the end of the request (its last byte
//! written to the upstream) to the response head, on each attempt; past
//! it, 504 when the request cannot move on (a body, a method that is not
//! idempotent, no other replica, or no try left). A client therefore waits
//! at most `tries` bounds for a head. Nothing bounds the response body.
//! A gRPC call's `grpc-timeout` caps its first-answer bound.
//!
//! ## HTTP/2 replicas
//! A request opens a stream on a shared connection ([`crate::upstream::http2`]).
//! Its body and trailers go up as they come; a replica may answer before
//! the body has ended (a bidirectional gRPC stream): the rest of the body
//! then goes on in a task of its own, unbounded, while the answer streams
//! back. The body of a gRPC call is kept (up to
//! [`super::incoming::REPLAY_LIMIT`]) so that a call a replica refuses
//! unprocessed can go to the next.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, StatusCode};
use tokio::time::{Instant, timeout};

use super::error::Fault;
use super::headers::{self, Client, Forwarding};
use super::incoming::ClientRequest;
use super::{ProxyError, Route, grpc, plan, redirect};
use crate::body::{BodyError, Limited, Replay, RequestBody};
use crate::breaker::Outcome;
use crate::config::Protocol;
use crate::h1::request::BodyKind;
use crate::h1::response::{BodyFraming, ResponseHead};
use crate::upstream::http2::{H2Body, H2Conn, io_error};
use crate::upstream::{
    Attempt, Awaiting, Conn, ConnError, Connection, Io, Release, Replica, Target, Tried,
    UpstreamBody,
};

/// An upstream's answer: its head, and its body still on the wire.
#[derive(Debug)]
pub struct Answer {
    pub head: ResponseHead,
    pub body: AnswerBody,
}

#[derive(Debug)]
pub enum AnswerBody {
    Stream(UpstreamBody),
    /// `101 Switching Protocols`: the upstream's connection, and the bytes
    /// it sent after its head, for the tunnel.
    Switched {
        io: Io,
        leftover: Bytes,
    },
}

/// What became of one request on one connection.
enum Exchange {
    Answered(ResponseHead),
    /// Failed before any byte of an answer arrived.
    Failed(ConnError),
    ClientBody(BodyError),
    TimedOut,
    /// The replica stopped reading the request for the body bound.
    Stalled,
}

impl Exchange {
    /// The exchange as the retry planner sees it; a gRPC call's answer by
    /// its [`grpc::effective_status`].
    fn attempted(&self, grpc: bool) -> plan::Attempted {
        match self {
            Exchange::Answered(head) => {
                plan::Attempted::Answered(grpc::effective_status(head, grpc))
            }
            Exchange::TimedOut => plan::Attempted::TimedOut,
            Exchange::Stalled => plan::Attempted::Stalled,
            Exchange::ClientBody(_) => plan::Attempted::ClientBody,
            failed if failed.closed_unanswered() => plan::Attempted::ClosedUnanswered,
            Exchange::Failed(_) => plan::Attempted::Failed,
        }
    }

    /// The upstream closed the connection without answering: on a pooled
    /// connection, the sign of a keep-alive race rather than a fault.
    fn closed_unanswered(&self) -> bool {
        match self {
            Exchange::Failed(ConnError::Closed) => true,
            Exchange::Failed(ConnError::Io(e)) => matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            _ => false,
        }
    }
}

/// What became of a request's attempts, for the access log.
#[derive(Debug, Default)]
pub struct Trace {
    /// Replicas tried.
    pub tries: u32,
    /// The replica of the last attempt.
    pub replica: Option<Arc<Replica>>,
}

/// Forwards `req` on `route`, reading its body from `body`, within the
/// route's limits and through its circuit breaker when it has one: a
/// request over the rate limit or `max_body` is refused before anything
/// else, an open circuit refuses at once, and the request's outcome,
/// after its retries, is the breaker's only input. `trace` learns the
/// tries and the last replica.
pub async fn forward<B: RequestBody>(
    route: &Arc<Route>,
    req: &ClientRequest<'_>,
    body: &mut B,
    client: &Client,
    trace: &mut Trace,
) -> Result<Answer, ProxyError> {
    if let Some(rate) = &route.rate
        && let Err(wait) = rate.admit(client.ip(), Instant::now())
    {
        route.metrics.rate_limited.inc();
        return Err(ProxyError::RateLimited { retry_after: wait });
    }
    let max_body = route.config.max_body.value;
    if let (Some(max), BodyKind::Length(n)) = (max_body, req.body)
        && n > max
    {
        route.metrics.too_large.inc();
        return Err(ProxyError::TooLarge(max));
    }
    let rewritten;
    let mut req = *req;
    if let Some(rewrite) = &route.rewrite {
        rewritten = rewrite.upstream_path(req.path);
        req.path = &rewritten;
    }
    let req = &req;
    let ticket = match &route.breaker {
        Some(circuit) => match circuit.admit() {
            Ok(ticket) => Some(ticket),
            Err(retry_after) => return Err(ProxyError::Unavailable { retry_after }),
        },
        None => None,
    };
    let grpc = req.grpc;
    let kept = grpc && !matches!(req.body, BodyKind::None | BodyKind::Length(0));
    // A body of declared length was measured above; a chunked one is
    // counted as it comes.
    let limit = max_body.filter(|_| req.body == BodyKind::Chunked);
    let result = match (limit, kept) {
        (Some(max), true) => {
            let mut body = Replay::new(body);
            let mut body = Limited::new(&mut body, max);
            attempts(route, req, &mut body, client, grpc, trace).await
        }
        (Some(max), false) => {
            attempts(
                route,
                req,
                &mut Limited::new(body, max),
                client,
                grpc,
                trace,
            )
            .await
        }
        (None, true) => attempts(route, req, &mut Replay::new(body), client, grpc, trace).await,
        (None, false) => attempts(route, req, body, client, grpc, trace).await,
    };
    if let Err(ProxyError::ClientBody(e)) = &result
        && e.is_too_large()
    {
        route.metrics.too_large.inc();
    }
    if let Some(ticket) = ticket {
        ticket.record(outcome(&result, grpc));
    }
    result
}

/// What a request's result says of its upstream.
fn outcome(result: &Result<Answer, ProxyError>, grpc: bool) -> Outcome {
    match result {
        Ok(answer) if plan::retryable_status(grpc::effective_status(&answer.head, grpc)) => {
            Outcome::Failure
        }
        Ok(_) => Outcome::Success,
        Err(error) => match error.fault() {
            Fault::Upstream => Outcome::Failure,
            Fault::Downstream | Fault::Node => Outcome::Abandoned,
        },
    }
}

/// The attempts of one request on the route's replicas.
async fn attempts<B: RequestBody>(
    route: &Arc<Route>,
    req: &ClientRequest<'_>,
    body: &mut B,
    client: &Client,
    grpc: bool,
    trace: &mut Trace,
) -> Result<Answer, ProxyError> {
    if req.upgrade.is_some() && matches!(route.upstream.protocol, Protocol::H2 | Protocol::H2c) {
        return Err(ProxyError::BadRequest(
            "this route's replicas speak HTTP/2, which carries no protocol upgrade",
        ));
    }
    let forwarding = Forwarding {
        client,
        host: req.host,
        upstream_host: route.upstream_host.as_ref().map(|h| h.as_bytes()),
        upgrade: req.upgrade,
        underscores: route.config.underscores_in_headers,
        proxy_origin: route.proxy_origin.as_deref().map(str::as_bytes),
        proxy_authorization: route
            .upstream
            .via
            .as_ref()
            .filter(|_| route.proxy_origin.is_some())
            .and_then(|proxy| proxy.authorization())
            .map(HeaderValue::as_bytes),
        rules: &route.config.request_headers,
        trusted: route.config.trusted_proxies.contains(client.ip()),
    };
    let first_answer = route.upstream.pool.bounds.first_answer;
    let bounds = Waits {
        first_answer: match grpc {
            true => grpc::timeout(&req.fields, first_answer),
            false => first_answer,
        },
        body: route.config.body_timeout,
    };
    let underscores = route.config.underscores_in_headers;
    let bodiless = matches!(req.body, BodyKind::None | BodyKind::Length(0));
    let kind = plan::Kind::of(req.method, bodiless, req.upgrade.is_some(), grpc);
    let mut body_started = false;

    let upstream = &route.upstream;
    let mut tried = Tried::default();
    // What the client gets if no other replica can be had: the last
    // replica's 502/503/504, or its failure.
    let mut last: Option<Result<Answer, ProxyError>> = None;
    let state = |tried: &Tried, body_started: bool, reused: bool, kept: bool| {
        plan::Standing::of(
            kind,
            tried.len(),
            upstream.tries(),
            body_started,
            reused,
            kept,
        )
    };
    let retried = |retry: plan::Retry| match retry {
        plan::Retry::Connect => route.metrics.retry_connect.inc(),
        plan::Retry::Timeout => route.metrics.retry_timeout.inc(),
        plan::Retry::Answer => route.metrics.retry_answer.inc(),
    };
    // The response body of an answer from an HTTP/2 replica.
    let mut h2_body: Option<H2Body> = None;
    'replicas: loop {
        // A body kept for a replay is given again from its start.
        if body_started && body.rewind() {
            body_started = false;
        }
        let before = tried.len();
        let mut attempt = match upstream.connection(&mut tried).await {
            Ok(attempt) => attempt,
            Err(failure) => {
                trace.tries = tried.len() as u32;
                // The connect raced every replica left: nothing more to try.
                let step = plan::next(
                    plan::Attempted::NoReplica,
                    state(&tried, body_started, false, body.kept()),
                );
                debug_assert_eq!(step, plan::Step::Answer);
                return last.unwrap_or(Err(ProxyError::Unreachable(failure)));
            }
        };
        trace.tries = tried.len() as u32;
        trace.replica = Some(Arc::clone(&attempt.replica));
        let raced = plan::raced(before, tried.len());
        if raced > 0 {
            route.metrics.retry_connect.inc_by(raced as u64);
        }
        let mut reused = attempt.reused;
        loop {
            let sent_at = Instant::now();
            let awaiting = Awaiting::new(&attempt.replica);
            let target = &attempt.replica.key.target;
            let exchange = match &mut attempt.conn {
                Conn::H1(conn) => {
                    exchange(
                        conn,
                        target,
                        req,
                        &forwarding,
                        body,
                        &mut body_started,
                        bounds,
                    )
                    .await
                }
                Conn::H2(conn) => {
                    let scheme = if attempt.replica.key.tls == 0 {
                        "http"
                    } else {
                        "https"
                    };
                    let sent = H2Send {
                        req,
                        forwarding: &forwarding,
                        target,
                        scheme,
                        underscores,
                        waits: bounds,
                    };
                    exchange_h2(conn, sent, body, &mut body_started, &mut h2_body).await
                }
            };
            drop(awaiting);
            let attempted = exchange.attempted(grpc);
            match plan::told(attempted, reused) {
                plan::Told::Silent => upstream.silent(&attempt.replica),
                plan::Told::Answered(status) => {
                    route
                        .metrics
                        .first_answer
                        .observe(sent_at.elapsed().as_secs_f64());
                    upstream.answered(&attempt.replica, status);
                }
                plan::Told::Unanswered => upstream.unanswered(&attempt.replica),
                plan::Told::Nothing => {}
            }
            match plan::next(attempted, state(&tried, body_started, reused, body.kept())) {
                plan::Step::Again => {
                    // A pooled connection the upstream closed meanwhile:
                    // once more on a new one, without spending a try.
                    reused = false;
                    if body_started && body.rewind() {
                        body_started = false;
                    }
                    let replica = Arc::clone(&attempt.replica);
                    attempt = match upstream.fresh_connection(replica).await {
                        Ok(fresh) => fresh,
                        Err(failure) => {
                            let step = plan::next(
                                plan::Attempted::NotConnected,
                                state(&tried, body_started, false, body.kept()),
                            );
                            let failed = Err(ProxyError::Unreachable(failure));
                            match step {
                                plan::Step::Next(retry) => {
                                    retried(retry);
                                    last = Some(failed);
                                    continue 'replicas;
                                }
                                plan::Step::Again | plan::Step::Answer => {
                                    return last.unwrap_or(failed);
                                }
                            }
                        }
                    };
                }
                plan::Step::Next(retry) => {
                    retried(retry);
                    let body = h2_body.take();
                    last = Some(conclude(
                        route, req, client, attempt, exchange, bounds, body,
                    ));
                    continue 'replicas;
                }
                plan::Step::Answer => {
                    let body = h2_body.take();
                    return conclude(route, req, client, attempt, exchange, bounds, body);
                }
            }
        }
    }
}

/// What the client gets from one exchange: the upstream's answer with its
/// body still on the wire (its redirects that name the replica naming the
/// client's origin instead, [`redirect`]), or the error.
fn conclude(
    route: &Arc<Route>,
    req: &ClientRequest<'_>,
    client: &Client,
    attempt: Attempt,
    exchange: Exchange,
    waits: Waits,
    h2_body: Option<H2Body>,
) -> Result<Answer, ProxyError> {
    let head = match exchange {
        Exchange::Answered(head) => head,
        Exchange::TimedOut => return Err(ProxyError::FirstAnswerTimeout(waits.first_answer)),
        Exchange::Stalled => return Err(ProxyError::UpstreamStalled(waits.body)),
        Exchange::ClientBody(e) => return Err(ProxyError::ClientBody(e)),
        Exchange::Failed(e) => return Err(ProxyError::Upstream(e)),
    };
    let head = redirect::head(
        head,
        &redirect::ReplicaOrigin {
            tls: attempt.replica.key.tls != 0,
            target: &attempt.replica.key.target,
            // As `headers::write_upstream_head` wrote it.
            host: route
                .upstream_host
                .as_ref()
                .map(HeaderValue::as_bytes)
                .or(req.host),
        },
        &redirect::ClientOrigin {
            scheme: client.scheme().proto(),
            host: req.host,
        },
    );
    let conn = match attempt.conn {
        Conn::H1(conn) => conn,
        Conn::H2(_) => {
            let body = h2_body.ok_or_else(|| {
                ProxyError::Upstream(ConnError::Io(std::io::Error::other(
                    "an HTTP/2 answer without its stream",
                )))
            })?;
            let body = body.from(Release::new(Arc::clone(&route.upstream), attempt.replica));
            return Ok(Answer {
                head,
                body: AnswerBody::Stream(UpstreamBody::H2(body)),
            });
        }
    };
    let switched = head.status == StatusCode::SWITCHING_PROTOCOLS;
    if switched && req.upgrade.is_none() {
        return Err(ProxyError::Upstream(ConnError::Io(std::io::Error::other(
            "upstream switched protocols unasked",
        ))));
    }
    let body = if switched {
        let (io, leftover) = conn.into_parts();
        AnswerBody::Switched { io, leftover }
    } else {
        let release = Release::new(Arc::clone(&route.upstream), attempt.replica);
        AnswerBody::Stream(UpstreamBody::new(
            conn,
            head.framing,
            head.keep_alive,
            Some(release),
        ))
    };
    Ok(Answer { head, body })
}

/// The waits of one exchange.
#[derive(Debug, Clone, Copy)]
struct Waits {
    first_answer: Duration,
    /// The longest pause of a write to the replica.
    body: Duration,
}

/// Sends the request on `conn` and waits for the response head within
/// the first-answer bound, counted from the request's last byte. Each
/// write waits at most the body bound.
async fn exchange<B: RequestBody>(
    conn: &mut Connection,
    replica: &Target,
    req: &ClientRequest<'_>,
    forwarding: &Forwarding<'_>,
    body: &mut B,
    body_started: &mut bool,
    waits: Waits,
) -> Exchange {
    headers::write_upstream_head(conn.head_buffer(), req, forwarding, replica);
    let underscores = forwarding.underscores;
    let trailers = Trailers {
        underscores,
        rules: forwarding.rules,
        grpc: req.grpc,
    };
    if let Err(failed) = write_request(conn, req, body, body_started, waits.body, trailers).await {
        return match failed {
            WriteError::Io(e) => Exchange::Failed(ConnError::Io(e)),
            WriteError::Stalled => Exchange::Stalled,
            WriteError::ClientBody(e) => Exchange::ClientBody(e),
        };
    }
    match timeout(waits.first_answer, conn.read_head(req.method)).await {
        Ok(Ok(head)) => Exchange::Answered(head),
        Ok(Err(e)) => Exchange::Failed(e),
        Err(_) => Exchange::TimedOut,
    }
}

/// Why a request could not be written.
enum WriteError {
    Io(std::io::Error),
    /// The replica did not take a write within the body bound.
    Stalled,
    ClientBody(BodyError),
}

/// Bounds one write by the body bound.
async fn bounded(
    bound: Duration,
    write: impl Future<Output = std::io::Result<()>>,
) -> Result<(), WriteError> {
    match timeout(bound, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(WriteError::Io(e)),
        Err(_) => Err(WriteError::Stalled),
    }
}

/// Writes the head in `conn`'s buffer and the body, framed from what was
/// parsed; each write waits at most `bound`.
async fn write_request<B: RequestBody>(
    conn: &mut Connection,
    req: &ClientRequest<'_>,
    body: &mut B,
    body_started: &mut bool,
    bound: Duration,
    trailers: Trailers<'_>,
) -> Result<(), WriteError> {
    if matches!(req.body, BodyKind::None | BodyKind::Length(0)) {
        return bounded(bound, conn.write_head()).await;
    }
    let mut encoder = req.body.encoder();
    // A body longer or shorter than the client declared.
    let framing = |e: crate::h1::ParseError| WriteError::ClientBody(BodyError::Framing(e));
    // The first piece goes with the head, in one write.
    *body_started = true;
    let first = match body.next().await {
        Some(Ok(data)) => data,
        Some(Err(e)) => return Err(WriteError::ClientBody(e)),
        None => Bytes::new(),
    };
    let first = encoder.encode(first).map_err(framing)?;
    bounded(bound, conn.write_head_and_body(first)).await?;
    while let Some(piece) = body.next().await {
        let framed = encoder
            .encode(piece.map_err(WriteError::ClientBody)?)
            .map_err(framing)?;
        bounded(bound, conn.write_body(framed)).await?;
    }
    // The end of the body, with the client's trailers that may cross.
    let trailers = body
        .trailers()
        .map(|t| trailers.of_client(t))
        .unwrap_or_default();
    let end = encoder
        .finish_with(
            trailers
                .iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
        )
        .map_err(framing)?;
    if end.is_empty() {
        return Ok(());
    }
    bounded(bound, conn.write_body(end)).await
}

/// What an HTTP/2 exchange sends, besides the body.
struct H2Send<'a, 'r> {
    req: &'a ClientRequest<'r>,
    forwarding: &'a Forwarding<'a>,
    target: &'a Target,
    /// `http` (h2c) or `https`.
    scheme: &'static str,
    underscores: bool,
    waits: Waits,
}

/// An HTTP/2 error of a stream, as the retry planner sees it: a stream
/// the replica refused, or one past its GOAWAY, was not processed.
fn h2_failure(e: h2::Error) -> ConnError {
    if e.reason() == Some(h2::Reason::REFUSED_STREAM) || e.is_go_away() {
        return ConnError::Closed;
    }
    ConnError::Io(io_error(e))
}

/// Sends the request on a new stream of `conn` and waits for the response
/// head within the first-answer bound, counted from the end of the body;
/// an answer that comes before the end of the body is taken at once.
async fn exchange_h2<B: RequestBody>(
    conn: &mut H2Conn,
    sent: H2Send<'_, '_>,
    body: &mut B,
    body_started: &mut bool,
    answer: &mut Option<H2Body>,
) -> Exchange {
    let H2Send {
        req,
        forwarding,
        target,
        scheme,
        underscores,
        waits,
    } = sent;
    let trailers = Trailers {
        underscores,
        rules: forwarding.rules,
        grpc: req.grpc,
    };
    let request = match headers::upstream_h2_request(req, forwarding, target, scheme) {
        Ok(request) => request,
        Err(e) => {
            return Exchange::ClientBody(BodyError::Failed(Box::new(e)));
        }
    };
    let bodiless = matches!(req.body, BodyKind::None | BodyKind::Length(0));
    let (response, mut stream, slot) = match conn.send(request, bodiless).await {
        Ok(opened) => opened,
        Err(e) => return Exchange::Failed(h2_failure(e)),
    };
    let mut response = std::pin::pin!(response);
    let head = |response: http::Response<h2::RecvStream>, answer: &mut Option<H2Body>| {
        let (head, body) = h2_head(response, req.method, slot, underscores);
        *answer = Some(body);
        Exchange::Answered(head)
    };
    if !bodiless {
        *body_started = true;
        loop {
            tokio::select! {
                biased;
                early = &mut response => {
                    let early = match early {
                        Ok(early) => early,
                        Err(e) => return Exchange::Failed(h2_failure(e)),
                    };
                    // A whole answer (a gRPC refusal, trailers only): the
                    // rest of the body is not wanted, and what was read
                    // stays kept for another replica.
                    if early.body().is_end_stream() {
                        stream.send_reset(h2::Reason::CANCEL);
                        return head(early, answer);
                    }
                    match body.detach() {
                        Some(rest) => {
                            let rules = forwarding.rules.clone();
                            tokio::spawn(pump(rest, stream, underscores, rules, req.grpc));
                        }
                        // The body cannot leave this task: it goes up to
                        // its end before the answer goes back. A body that
                        // broke off is reset, never ended as if whole.
                        None => {
                            let mut whole = true;
                            while let Some(piece) = body.next().await {
                                let sent = match piece {
                                    Ok(piece) => {
                                        send_h2_data(&mut stream, piece, Some(waits.body))
                                            .await
                                            .is_ok()
                                    }
                                    Err(_) => false,
                                };
                                if !sent {
                                    whole = false;
                                    break;
                                }
                            }
                            match whole {
                                true => end_h2_body(
                                    &mut stream,
                                    body.trailers().map(|t| trailers.of_client(t)),
                                ),
                                false => stream.send_reset(h2::Reason::CANCEL),
                            }
                        }
                    }
                    return head(early, answer);
                }
                piece = body.next() => match piece {
                    Some(Ok(data)) => {
                        if let Err(failed) = send_h2_data(&mut stream, data, Some(waits.body)).await {
                            return failed.into();
                        }
                    }
                    Some(Err(e)) => {
                        stream.send_reset(h2::Reason::CANCEL);
                        return Exchange::ClientBody(e);
                    }
                    None => {
                        end_h2_body(&mut stream, body.trailers().map(|t| trailers.of_client(t)));
                        break;
                    }
                },
            }
        }
    }
    match timeout(waits.first_answer, response).await {
        Ok(Ok(response)) => head(response, answer),
        Ok(Err(e)) => Exchange::Failed(h2_failure(e)),
        Err(_) => {
            stream.send_reset(h2::Reason::CANCEL);
            Exchange::TimedOut
        }
    }
}

impl From<WriteError> for Exchange {
    fn from(failed: WriteError) -> Exchange {
        match failed {
            WriteError::Io(e) => Exchange::Failed(ConnError::Io(e)),
            WriteError::Stalled => Exchange::Stalled,
            WriteError::ClientBody(e) => Exchange::ClientBody(e),
        }
    }
}

/// The head of an HTTP/2 replica's answer, and its body.
fn h2_head(
    response: http::Response<h2::RecvStream>,
    method: &Method,
    slot: crate::upstream::http2::StreamSlot,
    underscores: bool,
) -> (ResponseHead, H2Body) {
    let (parts, recv) = response.into_parts();
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let status = parts.status;
    let bodiless = *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let grpc = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| grpc::is_grpc_type(v.as_bytes()));
    let (framing, declared_length) = if bodiless {
        (
            BodyFraming::Empty,
            declared.filter(|_| *method == Method::HEAD),
        )
    } else if recv.is_end_stream() {
        // A gRPC answer of trailers only has no length to tell.
        match grpc {
            true => (BodyFraming::Empty, None),
            false => (BodyFraming::Length(0), None),
        }
    } else {
        match declared {
            Some(n) => (BodyFraming::Length(n), None),
            None => (BodyFraming::Chunked, None),
        }
    };
    let head = ResponseHead::from_fields(
        status,
        parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes())),
        framing,
        declared_length,
    );
    (head, H2Body::new(recv, slot, underscores))
}

/// Sends one piece of a body on an HTTP/2 stream once the replica has
/// window for it, waiting at most `bound` (none: unbounded) for it.
async fn send_h2_data(
    stream: &mut h2::SendStream<Bytes>,
    data: Bytes,
    bound: Option<Duration>,
) -> Result<(), WriteError> {
    if data.is_empty() {
        return Ok(());
    }
    stream.reserve_capacity(data.len());
    while stream.capacity() == 0 {
        let wait = std::future::poll_fn(|cx| stream.poll_capacity(cx));
        let granted = match bound {
            Some(bound) => timeout(bound, wait)
                .await
                .map_err(|_| WriteError::Stalled)?,
            None => wait.await,
        };
        match granted {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(WriteError::Io(io_error(e))),
            None => {
                return Err(WriteError::Io(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the replica closed the stream",
                )));
            }
        }
    }
    stream
        .send_data(data, false)
        .map_err(|e| WriteError::Io(io_error(e)))
}

/// What of a client's trailers may reach a replica: what may cross at
/// all ([`crate::h1::body::clean_trailers`]), less what the node owns and
/// what the route's rules remove or set ([`super::rules::request_trailers`]).
#[derive(Clone, Copy)]
struct Trailers<'a> {
    underscores: bool,
    rules: &'a crate::config::HeaderRules,
    /// A gRPC call: the client's trailers are its metadata.
    grpc: bool,
}

impl Trailers<'_> {
    fn of_client(&self, trailers: http::HeaderMap) -> http::HeaderMap {
        let crossing = crate::h1::body::clean_trailers(trailers, self.underscores);
        super::rules::request_trailers(crossing, self.rules, self.grpc)
    }
}

/// Ends the body of a stream, with the client's trailers that may cross
/// ([`Trailers`]), if it sent any.
fn end_h2_body(stream: &mut h2::SendStream<Bytes>, trailers: Option<http::HeaderMap>) {
    let ended = match trailers {
        Some(trailers) if !trailers.is_empty() => stream.send_trailers(trailers),
        _ => stream.send_data(Bytes::new(), true),
    };
    if let Err(error) = ended {
        tracing::debug!(%error, "ending a request body to an HTTP/2 replica");
    }
}

/// Sends the rest of a client's body on its stream, in a task of its own,
/// after the replica has answered: a stream that has started is never cut
/// by a bound.
async fn pump(
    mut rest: crate::body::IncomingBody,
    mut stream: h2::SendStream<Bytes>,
    underscores: bool,
    rules: crate::config::HeaderRules,
    grpc: bool,
) {
    rest.unbound();
    loop {
        match rest.next().await {
            Some(Ok(data)) => {
                if send_h2_data(&mut stream, data, None).await.is_err() {
                    stream.send_reset(h2::Reason::CANCEL);
                    return;
                }
            }
            Some(Err(error)) => {
                tracing::debug!(%error, "a client's body to an HTTP/2 replica broke");
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
            None => {
                let trailers = Trailers {
                    underscores,
                    rules: &rules,
                    grpc,
                };
                end_h2_body(&mut stream, rest.trailers().map(|t| trailers.of_client(t)));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &[u8]) -> ResponseHead {
        let mut buf = bytes::BytesMut::from(raw);
        crate::h1::response::parse_response(&mut buf, &Method::GET)
            .expect("a valid head")
            .expect("a whole head")
    }

    fn io(kind: std::io::ErrorKind) -> Exchange {
        Exchange::Failed(ConnError::Io(std::io::Error::from(kind)))
    }

    /// Each exchange becomes the attempt the plan decides on: a replica
    /// that closed, reset or broke the pipe before any answer closed
    /// unanswered (the plan tries a pooled connection's request again);
    /// any other failure failed.
    #[test]
    fn every_exchange_is_one_attempt() {
        use plan::Attempted;
        use std::io::ErrorKind;
        let cases = [
            (
                Exchange::Failed(ConnError::Closed),
                Attempted::ClosedUnanswered,
            ),
            (io(ErrorKind::ConnectionReset), Attempted::ClosedUnanswered),
            (io(ErrorKind::BrokenPipe), Attempted::ClosedUnanswered),
            (io(ErrorKind::TimedOut), Attempted::Failed),
            (io(ErrorKind::ConnectionAborted), Attempted::Failed),
            (Exchange::TimedOut, Attempted::TimedOut),
            (Exchange::Stalled, Attempted::Stalled),
        ];
        for (exchange, attempted) in cases {
            assert_eq!(exchange.attempted(false), attempted);
            assert_eq!(exchange.attempted(true), attempted, "a gRPC call alike");
        }
    }

    /// A gRPC call answered 200 with `grpc-status: 14` was not processed:
    /// the plan sees the 503 it means. Any other request's 200 is a 200.
    #[test]
    fn a_grpc_unavailable_is_a_refusal() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ngrpc-status: 14\r\ncontent-length: 0\r\n\r\n";
        let unavailable = Exchange::Answered(head(raw));
        assert_eq!(
            unavailable.attempted(true),
            plan::Attempted::Answered(StatusCode::SERVICE_UNAVAILABLE)
        );
        assert_eq!(
            unavailable.attempted(false),
            plan::Attempted::Answered(StatusCode::OK)
        );
        let fine = Exchange::Answered(head(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
        assert_eq!(
            fine.attempted(true),
            plan::Attempted::Answered(StatusCode::OK)
        );
    }
}
