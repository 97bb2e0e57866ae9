//! Forwarding one request: attempts on replicas, the first-answer bound,
//! retries, and upgrades.
//!
//! ## Retries
//! - Nothing reached the upstream (connect refused or timed out): the
//!   request moves on at once, whatever its method.
//! - A pooled connection the upstream had closed meanwhile: the request is
//!   sent again on a new connection to the same replica, without spending
//!   a try, if it is idempotent and has no body.
//! - A replica answered 502/503/504, or its connection broke after the
//!   request was written: the request moves to another replica only if its
//!   method is idempotent and it has no body.
//! - Each attempt goes to a different replica, at most `tries` of them.
//!   When no other replica can be had, the client gets the last answer.
//!
//! ## Bounds
//! The connect bound is the upstream's ([`crate::upstream`]). The
//! first-answer bound runs from the end of the request (its last byte
//! written to the upstream) to the response head; past it, 504, and the
//! request is not retried (the upstream may be working on it). Nothing
//! bounds the response body.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::time::{Instant, timeout};

use super::{ProxyError, Route, headers};
use crate::body::GatewayBody;
use crate::upstream::h1::{RequestFraming, ResponseHead};
use crate::upstream::{Attempt, ConnError, Connection, Io, Release, Tried, UpstreamBody};

fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

fn retryable_status(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

/// The request as it goes upstream, written anew for each attempt.
struct Outgoing<'a> {
    method: &'a Method,
    path: &'a str,
    headers: &'a HeaderMap,
    forwarding: headers::Forwarding<'a>,
    framing: RequestFraming,
    /// The client's body, until it has been sent.
    body: Option<Incoming>,
}

/// What became of one request on one connection.
enum Exchange {
    Answered(ResponseHead),
    /// Failed before any byte of an answer arrived.
    Failed(ConnError),
    ClientBody(hyper::Error),
    TimedOut,
}

impl Exchange {
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

pub(super) async fn forward(
    route: &Arc<Route>,
    mut req: Request<Incoming>,
    client: &headers::Client,
) -> Result<Response<GatewayBody>, ProxyError> {
    let upgrade = headers::upgrade_of(req.headers());
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let bodiless = body.is_end_stream();
    let framing = if parts.headers.contains_key(CONTENT_LENGTH) {
        RequestFraming::Length
    } else if bodiless {
        RequestFraming::None
    } else {
        RequestFraming::Chunked
    };
    let host = parts.headers.get(HOST).map_or(&b""[..], HeaderValue::as_bytes);
    let mut out = Outgoing {
        method: &parts.method,
        path: parts.uri.path_and_query().map_or("/", |pq| pq.as_str()),
        headers: &parts.headers,
        forwarding: headers::Forwarding {
            client,
            host,
            upstream_host: route.upstream_host.as_ref(),
            upgrade: upgrade.as_ref(),
        },
        framing,
        body: (!bodiless).then_some(body),
    };
    let replayable = bodiless && upgrade.is_none() && is_idempotent(out.method);

    let upstream = &route.upstream;
    let bound = upstream.pool.bounds.first_answer;
    let mut tried = Tried::default();
    // What the client gets if no other replica can be had: the last
    // replica's 502/503/504, or its failure.
    let mut last: Option<Result<Response<GatewayBody>, ProxyError>> = None;
    loop {
        let before = tried.len();
        let mut attempt = match upstream.connection(&mut tried).await {
            Ok(attempt) => attempt,
            Err(failure) => return last.unwrap_or(Err(ProxyError::Unreachable(failure))),
        };
        if let Some(raced) = (tried.len() - before).checked_sub(1).filter(|n| *n > 0) {
            route.metrics.retry_connect.inc_by(raced as u64);
        }
        let sent_at = Instant::now();
        let mut exchange = exchange(&mut attempt.conn, &mut out, bound).await;
        // A pooled connection the upstream closed meanwhile: once more on
        // a new one, without spending a try, when that is safe: nothing of
        // the request can have been acted on (its body is still here), or
        // acting twice does no harm (idempotent, no body).
        let resendable = replayable || out.body.is_some();
        if attempt.reused && exchange.closed_unanswered() && resendable {
            attempt = match upstream.fresh_connection(attempt.replica).await {
                Ok(fresh) => fresh,
                Err(failure) => return last.unwrap_or(Err(ProxyError::Unreachable(failure))),
            };
            exchange = self::exchange(&mut attempt.conn, &mut out, bound).await;
        }
        match exchange {
            Exchange::TimedOut => return Err(ProxyError::FirstAnswerTimeout(bound)),
            Exchange::ClientBody(e) => return Err(ProxyError::ClientBody(e)),
            Exchange::Failed(e) => {
                if replayable && tried.len() < upstream.tries {
                    route.metrics.retry_answer.inc();
                    last = Some(Err(ProxyError::Upstream(e)));
                    continue;
                }
                return Err(ProxyError::Upstream(e));
            }
            Exchange::Answered(head) => {
                route
                    .metrics
                    .first_answer
                    .observe(sent_at.elapsed().as_secs_f64());
                let retry =
                    replayable && retryable_status(head.status) && tried.len() < upstream.tries;
                let response = respond(
                    head,
                    attempt,
                    upstream,
                    client_upgrade.is_some(),
                    &route.config.name,
                )?;
                if retry {
                    route.metrics.retry_answer.inc();
                    last = Some(Ok(response.0));
                    continue;
                }
                let (response, tunnel_to) = response;
                if let (Some(client_side), Some((io, leftover))) = (client_upgrade, tunnel_to) {
                    tunnel(client_side, io, leftover, &route.config.name);
                }
                return Ok(response);
            }
        }
    }
}

/// Sends the request on `conn` and waits for the response head within
/// `bound`, counted from the request's last byte.
async fn exchange(conn: &mut Connection, out: &mut Outgoing<'_>, bound: Duration) -> Exchange {
    headers::write_upstream_head(
        conn.head_buffer(),
        out.method,
        out.path,
        out.headers,
        &out.forwarding,
        out.framing,
    );
    match out.body.take() {
        None => {
            if let Err(e) = conn.write_head(None).await {
                return Exchange::Failed(e.into());
            }
        }
        Some(mut body) => {
            let chunked = out.framing == RequestFraming::Chunked;
            if let Err(e) = conn.write_head(None).await {
                // Nothing of the body was read: it can go on another connection.
                out.body = Some(body);
                return Exchange::Failed(e.into());
            }
            loop {
                match body.frame().await {
                    None => break,
                    Some(Err(e)) => return Exchange::ClientBody(e),
                    Some(Ok(frame)) => {
                        let Ok(data) = frame.into_data() else {
                            continue;
                        };
                        if let Err(e) = conn.write_body(data, chunked).await {
                            return Exchange::Failed(e.into());
                        }
                    }
                }
            }
            if chunked && let Err(e) = conn.end_chunked().await {
                return Exchange::Failed(e.into());
            }
        }
    }
    match timeout(bound, conn.read_head(out.method)).await {
        Ok(Ok(head)) => Exchange::Answered(head),
        Ok(Err(e)) => Exchange::Failed(e),
        Err(_) => Exchange::TimedOut,
    }
}

type Tunnel = (Io, Bytes);

/// The client's response from the upstream's head; the connection is lent
/// to the body, or, for a `101`, handed over for the tunnel.
fn respond(
    head: ResponseHead,
    attempt: Attempt,
    upstream: &Arc<crate::upstream::Upstream>,
    client_asked_upgrade: bool,
    route: &str,
) -> Result<(Response<GatewayBody>, Option<Tunnel>), ProxyError> {
    let ResponseHead {
        status,
        headers,
        framing,
        keep_alive,
        upgrade,
    } = head;
    let mut response = Response::new(GatewayBody::empty());
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        if !client_asked_upgrade {
            return Err(ProxyError::Upstream(ConnError::Io(std::io::Error::other(
                "upstream switched protocols unasked",
            ))));
        }
        if let Some(protocol) = upgrade {
            headers::set_upgrade(response.headers_mut(), protocol);
        }
        tracing::debug!(route, "upgrade accepted by the upstream");
        return Ok((response, Some(attempt.conn.into_parts())));
    }
    let release = Release {
        upstream: Arc::clone(upstream),
        replica: attempt.replica,
    };
    *response.body_mut() = GatewayBody::Upstream(UpstreamBody::new(
        attempt.conn,
        framing,
        keep_alive,
        Some(release),
    ));
    Ok((response, None))
}

/// Joins the client's upgraded connection to the upstream's once the
/// client side has switched, and copies bytes both ways until either
/// closes. Bytes the upstream sent right after its 101 go first.
fn tunnel(client: OnUpgrade, mut upstream: Io, leftover: Bytes, route: &str) {
    let route = route.to_string();
    tokio::spawn(async move {
        let mut client = match client.await {
            Ok(upgraded) => TokioIo::new(upgraded),
            Err(e) => {
                tracing::debug!(route, error = %e, "client upgrade did not complete");
                return;
            }
        };
        if !leftover.is_empty() && client.write_all(&leftover).await.is_err() {
            return;
        }
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(route, error = %e, "upgraded connection ended");
        }
    });
}
