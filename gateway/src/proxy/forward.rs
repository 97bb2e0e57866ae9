//! Forwarding one request: attempts on replicas, the first-answer bound,
//! retries, and upgrades.
//!
//! ## Retries
//! - Nothing reached the upstream (connect refused or timed out, or a
//!   pooled connection found closed before the request was written): the
//!   request moves on at once, whatever its method.
//! - A replica answered 502/503/504, or its connection broke after the
//!   request was written: the request moves to another replica only if its
//!   method is idempotent and it has no body.
//! - Each attempt goes to a different replica, at most `tries` of them.
//!   When no other replica can be had, the client gets the last answer.
//!
//! ## Bounds
//! The connect bound is the upstream's ([`crate::upstream`]). The
//! first-answer bound runs from the end of the request (its last body byte
//! handed to the connection) to the response head; past it, 504, and the
//! request is not retried (the upstream may be working on it). Nothing
//! bounds the response body.

use std::sync::Arc;
use std::time::Duration;

use http::header::{HOST, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio::time::{Instant, sleep};

use super::{ProxyError, Route, headers};
use crate::body::{GatewayBody, PooledConnection, ProxyBody};
use crate::upstream::{Attempt, ConnectFailure, Tried, Upstream};

/// The parts of the upstream request that a replay needs again.
struct Head {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

impl Head {
    /// The request for an attempt; keeps a copy of the head when `keep`.
    fn request(&mut self, body: ProxyBody, keep: bool) -> Request<ProxyBody> {
        let headers = if keep {
            self.headers.clone()
        } else {
            std::mem::take(&mut self.headers)
        };
        build(self.method.clone(), self.uri.clone(), headers, body)
    }

    /// The same request again, for a retry of a bodiless request.
    fn replay(&self) -> Request<ProxyBody> {
        build(
            self.method.clone(),
            self.uri.clone(),
            self.headers.clone(),
            ProxyBody::Empty,
        )
    }
}

fn build(method: Method, uri: Uri, headers: HeaderMap, body: ProxyBody) -> Request<ProxyBody> {
    let mut request = Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    request
}

fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    }
}

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

/// What became of one request on one connection.
enum Exchange {
    Answered(Response<Incoming>),
    /// The connection was closed before the request was written: it comes
    /// back untouched.
    NotSent(Request<ProxyBody>),
    Failed(hyper::Error),
    TimedOut,
}

pub(super) async fn forward(
    route: &Arc<Route>,
    mut req: Request<Incoming>,
    client: &headers::Client,
) -> Result<Response<GatewayBody>, ProxyError> {
    let upgrade = headers::upgrade_of(req.headers());
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut head = Head {
        uri: origin_form(&parts.uri),
        method: parts.method,
        headers: parts.headers,
    };
    let host = head
        .headers
        .get(HOST)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static(""));
    headers::to_upstream(&mut head.headers, client, &host, route.upstream_host.as_ref());
    if let Some(protocol) = &upgrade {
        headers::set_upgrade(&mut head.headers, protocol.clone());
    }

    let upstream = &route.upstream;
    let bodiless = body.is_end_stream();
    let replayable = bodiless && upgrade.is_none() && is_idempotent(&head.method);
    let (body, mut body_sent) = if bodiless {
        (ProxyBody::Empty, None)
    } else {
        let (sent, watch) = watch::channel(false);
        (ProxyBody::Client { body, sent }, Some(watch))
    };
    let mut request = Some(head.request(body, replayable && upstream.tries > 1));
    let mut tried = Tried::default();
    // An upstream's 502/503/504, kept while another replica is tried.
    let mut answered: Option<Response<GatewayBody>> = None;

    loop {
        let before = tried.len();
        let mut attempt = match upstream.connection(&mut tried).await {
            Ok(attempt) => attempt,
            Err(failure) => return answered.ok_or(ProxyError::Unreachable(failure)),
        };
        if let Some(raced) = (tried.len() - before).checked_sub(1).filter(|n| *n > 0) {
            route.metrics.retry_connect.inc_by(raced as u64);
        }
        let req = request.take().unwrap_or_else(|| head.replay());
        let sent_at = Instant::now();
        let bound = upstream.pool.bounds.first_answer;
        let mut exchange = exchange(&mut attempt, req, bound, body_sent.as_mut()).await;
        if let Exchange::NotSent(req) = exchange {
            // A pooled connection the upstream had closed: one fresh
            // connection to the same replica, without spending a try.
            attempt = match upstream.connection_to(attempt.replica).await {
                Ok(fresh) => fresh,
                Err(failure) => return answered.ok_or(ProxyError::Unreachable(failure)),
            };
            exchange = self::exchange(&mut attempt, req, bound, body_sent.as_mut()).await;
        }
        match exchange {
            Exchange::TimedOut => return Err(ProxyError::FirstAnswerTimeout(bound)),
            Exchange::NotSent(_) => {
                return Err(ProxyError::Unreachable(ConnectFailure::Failed(
                    "connection closed before the request was written".into(),
                )));
            }
            Exchange::Failed(e) if e.is_user() => return Err(ProxyError::ClientBody(e)),
            Exchange::Failed(e) => {
                if replayable && tried.len() < upstream.tries {
                    route.metrics.retry_answer.inc();
                    continue;
                }
                return Err(ProxyError::Upstream(e));
            }
            Exchange::Answered(response) => {
                route
                    .metrics
                    .first_answer
                    .observe(sent_at.elapsed().as_secs_f64());
                let retry = replayable
                    && retryable_status(response.status())
                    && tried.len() < upstream.tries;
                let (response, upstream_upgrade) =
                    respond(response, attempt, upstream, client_upgrade.is_some())?;
                if retry {
                    route.metrics.retry_answer.inc();
                    answered = Some(response);
                    continue;
                }
                if let (Some(client), Some(upstream_side)) = (client_upgrade, upstream_upgrade) {
                    tunnel(client, upstream_side, &route.config.name);
                }
                return Ok(response);
            }
        }
    }
}

/// Sends `req` and waits for the response head within `bound`, counted
/// from the end of the request body.
async fn exchange(
    attempt: &mut Attempt,
    req: Request<ProxyBody>,
    bound: Duration,
    body_sent: Option<&mut watch::Receiver<bool>>,
) -> Exchange {
    let send = attempt.sender.try_send_request(req);
    let clock = async {
        if let Some(sent) = body_sent {
            // Err: the body was dropped without ending; the send fails then.
            let _ = sent.wait_for(|done| *done).await;
        }
        sleep(bound).await;
    };
    tokio::select! {
        result = send => match result {
            Ok(response) => Exchange::Answered(response),
            Err(mut e) => match e.take_message() {
                Some(req) => Exchange::NotSent(req),
                None => Exchange::Failed(e.into_error()),
            },
        },
        () = clock => Exchange::TimedOut,
    }
}

/// The client's response from the upstream's: hop-by-hop headers removed,
/// the connection lent to the body until it ends. A `101` comes with the
/// upstream's side of the upgrade instead.
fn respond(
    mut response: Response<Incoming>,
    attempt: Attempt,
    upstream: &Arc<Upstream>,
    client_asked_upgrade: bool,
) -> Result<(Response<GatewayBody>, Option<OnUpgrade>), ProxyError> {
    let switching = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    if switching && !client_asked_upgrade {
        return Err(ProxyError::Unreachable(ConnectFailure::Failed(
            "upstream switched protocols unasked".into(),
        )));
    }
    let upstream_upgrade = switching.then(|| hyper::upgrade::on(&mut response));
    let (mut parts, body) = response.into_parts();
    let protocol = parts.headers.get(http::header::UPGRADE).cloned();
    headers::strip_hop_by_hop(&mut parts.headers);
    let connection = if switching {
        if let Some(protocol) = protocol {
            headers::set_upgrade(&mut parts.headers, protocol);
        }
        None
    } else {
        Some(PooledConnection {
            upstream: Arc::clone(upstream),
            replica: attempt.replica,
            sender: attempt.sender,
        })
    };
    let response = Response::from_parts(parts, GatewayBody::upstream(body, connection));
    Ok((response, upstream_upgrade))
}

/// Joins the client's and the upstream's upgraded connections once both
/// sides have switched, and copies bytes both ways until either closes.
fn tunnel(client: OnUpgrade, upstream: OnUpgrade, route: &str) {
    let route = route.to_string();
    tokio::spawn(async move {
        match tokio::try_join!(client, upstream) {
            Ok((client, upstream)) => {
                let mut client = TokioIo::new(client);
                let mut upstream = TokioIo::new(upstream);
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    tracing::debug!(route, error = %e, "upgraded connection ended");
                }
            }
            Err(e) => tracing::debug!(route, error = %e, "upgrade did not complete"),
        }
    });
}
