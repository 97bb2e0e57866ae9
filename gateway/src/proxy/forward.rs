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

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, StatusCode};
use tokio::time::{Instant, timeout};

use super::error::Fault;
use super::headers::{self, Client, Forwarding};
use super::request::{BodyError, ClientRequest, RequestBody};
use super::{ProxyError, Route, plan};
use crate::breaker::Outcome;
use crate::h1::request::BodyKind;
use crate::h1::response::ResponseHead;
use crate::upstream::{Attempt, ConnError, Connection, Io, Release, Target, Tried, UpstreamBody};

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

fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// What became of one request on one connection.
enum Exchange {
    Answered(ResponseHead),
    /// Failed before any byte of an answer arrived.
    Failed(ConnError),
    ClientBody(super::request::BodyError),
    TimedOut,
    /// The replica stopped reading the request for the body bound.
    Stalled,
}

impl Exchange {
    /// The exchange as the retry planner sees it.
    fn attempted(&self) -> plan::Attempted {
        match self {
            Exchange::Answered(head) => plan::Attempted::Answered(head.status),
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

/// Forwards `req` on `route`, reading its body from `body`, through the
/// route's circuit breaker when it has one: an open circuit refuses at
/// once, and the request's outcome, after its retries, is the breaker's
/// only input.
pub async fn forward<B: RequestBody>(
    route: &Arc<Route>,
    req: &ClientRequest<'_>,
    body: &mut B,
    client: &Client,
) -> Result<Answer, ProxyError> {
    let ticket = match &route.circuit {
        Some(circuit) => match circuit.admit() {
            Ok(ticket) => Some(ticket),
            Err(retry_after) => return Err(ProxyError::Unavailable { retry_after }),
        },
        None => None,
    };
    let result = attempts(route, req, body, client).await;
    if let Some(ticket) = ticket {
        ticket.record(outcome(&result));
    }
    result
}

/// What a request's result says of its upstream.
fn outcome(result: &Result<Answer, ProxyError>) -> Outcome {
    match result {
        Ok(answer) if plan::retryable_status(answer.head.status) => Outcome::Failure,
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
) -> Result<Answer, ProxyError> {
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
    };
    let bounds = Waits {
        first_answer: route.upstream.pool.bounds.first_answer,
        body: route.config.body_timeout,
    };
    let bodiless = matches!(req.body, BodyKind::None | BodyKind::Length(0));
    let replayable = bodiless && req.upgrade.is_none() && is_idempotent(req.method);
    let mut body_started = false;

    let upstream = &route.upstream;
    let mut tried = Tried::default();
    // What the client gets if no other replica can be had: the last
    // replica's 502/503/504, or its failure.
    let mut last: Option<Result<Answer, ProxyError>> = None;
    let state = |tried: &Tried, body_started: bool, reused: bool| plan::Request {
        replayable,
        body_started,
        reused,
        tried: tried.len(),
        tries: upstream.tries(),
    };
    let retried = |retry: plan::Retry| match retry {
        plan::Retry::Connect => route.metrics.retry_connect.inc(),
        plan::Retry::Timeout => route.metrics.retry_timeout.inc(),
        plan::Retry::Answer => route.metrics.retry_answer.inc(),
    };
    'replicas: loop {
        let before = tried.len();
        let mut attempt = match upstream.connection(&mut tried).await {
            Ok(attempt) => attempt,
            Err(failure) => return last.unwrap_or(Err(ProxyError::Unreachable(failure))),
        };
        if let Some(raced) = (tried.len() - before).checked_sub(1).filter(|n| *n > 0) {
            route.metrics.retry_connect.inc_by(raced as u64);
        }
        let mut reused = attempt.reused;
        loop {
            let sent_at = Instant::now();
            let exchange = exchange(
                &mut attempt.conn,
                &attempt.replica.key.target,
                req,
                &forwarding,
                body,
                &mut body_started,
                bounds,
            )
            .await;
            match &exchange {
                Exchange::TimedOut | Exchange::Stalled => upstream.silent(&attempt.replica),
                Exchange::Answered(head) => {
                    route
                        .metrics
                        .first_answer
                        .observe(sent_at.elapsed().as_secs_f64());
                    upstream.answered(&attempt.replica, head.status);
                }
                Exchange::Failed(_) | Exchange::ClientBody(_) => {}
            }
            match plan::next(exchange.attempted(), state(&tried, body_started, reused)) {
                plan::Step::Again => {
                    // A pooled connection the upstream closed meanwhile:
                    // once more on a new one, without spending a try.
                    reused = false;
                    let replica = Arc::clone(&attempt.replica);
                    attempt = match upstream.fresh_connection(replica).await {
                        Ok(fresh) => fresh,
                        Err(failure) => {
                            let step = plan::next(
                                plan::Attempted::NotConnected,
                                state(&tried, body_started, false),
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
                    last = Some(conclude(route, req, attempt, exchange, bounds));
                    continue 'replicas;
                }
                plan::Step::Answer => return conclude(route, req, attempt, exchange, bounds),
            }
        }
    }
}

/// What the client gets from one exchange: the upstream's answer with its
/// body still on the wire, or the error.
fn conclude(
    route: &Arc<Route>,
    req: &ClientRequest<'_>,
    attempt: Attempt,
    exchange: Exchange,
    waits: Waits,
) -> Result<Answer, ProxyError> {
    let head = match exchange {
        Exchange::Answered(head) => head,
        Exchange::TimedOut => return Err(ProxyError::FirstAnswerTimeout(waits.first_answer)),
        Exchange::Stalled => return Err(ProxyError::UpstreamStalled(waits.body)),
        Exchange::ClientBody(e) => return Err(ProxyError::ClientBody(e)),
        Exchange::Failed(e) => return Err(ProxyError::Upstream(e)),
    };
    let switched = head.status == StatusCode::SWITCHING_PROTOCOLS;
    if switched && req.upgrade.is_none() {
        return Err(ProxyError::Upstream(ConnError::Io(std::io::Error::other(
            "upstream switched protocols unasked",
        ))));
    }
    let body = if switched {
        let (io, leftover) = attempt.conn.into_parts();
        AnswerBody::Switched { io, leftover }
    } else {
        let release = Release {
            upstream: Arc::clone(&route.upstream),
            replica: attempt.replica,
        };
        AnswerBody::Stream(UpstreamBody::new(
            attempt.conn,
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
    if let Err(failed) = write_request(conn, req, body, body_started, waits.body).await {
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
) -> Result<(), WriteError> {
    if matches!(req.body, BodyKind::None | BodyKind::Length(0)) {
        return bounded(bound, conn.write_head()).await;
    }
    let mut encoder = req.body.encoder();
    // A body longer or shorter than the client declared.
    let framing = |e: crate::h1::ParseError| WriteError::ClientBody(BodyError(Box::new(e)));
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
    let end = encoder.finish().map_err(framing)?;
    bounded(bound, conn.end_body(end)).await
}
