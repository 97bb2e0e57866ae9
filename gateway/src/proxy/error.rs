//! Why a request could not be proxied, whose fault it was, and the one
//! place that turns that into the page the client gets.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, LOCATION, RETRY_AFTER};
use http::{Response, StatusCode};

use super::rules::RequestId;
use crate::body::GatewayBody;
use crate::ending::{Cause, Ending, Phase};
use crate::upstream::{ConnError, ConnectFailure};

/// Whose fault a failed request was. Only upstream faults count against
/// an upstream (breaker, verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Upstream,
    Downstream,
    /// The node itself (out of file descriptors): no upstream is blamed.
    Node,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the route's circuit is open on this node")]
    Unavailable { retry_after: Duration },
    #[error("no route for this host and path")]
    NoRoute,
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("method not allowed: Picket is not a forward proxy")]
    Connect,
    #[error("this route is served over HTTPS only: {}", .0.to_str().unwrap_or("(not text)"))]
    HttpsOnly(HeaderValue),
    #[error("{0}")]
    Unreachable(ConnectFailure),
    #[error("no response head within {}", humantime::format_duration(*.0))]
    FirstAnswerTimeout(Duration),
    #[error("{0}")]
    Upstream(crate::upstream::ConnError),
    #[error("the replica stopped reading the request body for {}", humantime::format_duration(*.0))]
    UpstreamStalled(Duration),
    #[error(transparent)]
    ClientBody(crate::body::BodyError),
    #[error("the route's rate limit on this node is reached")]
    RateLimited { retry_after: Duration },
    #[error("the request body is larger than this route takes ({0} bytes)")]
    TooLarge(u64),
    /// Not a failure: an ACME HTTP-01 challenge, which the node answers
    /// itself with this key authorization.
    #[error("an ACME challenge, answered by the node")]
    Challenge(Bytes),
}

/// A page the gateway writes itself.
#[derive(Debug, Clone)]
pub struct Page {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Bytes,
    /// Seconds for `Retry-After`.
    pub retry_after: Option<u64>,
    /// Where a redirect sends the client.
    pub location: Option<HeaderValue>,
    /// The request's ID, in the page and in `X-Request-Id`.
    pub request_id: Option<RequestId>,
}

impl Page {
    /// The page as a response going out through hyper.
    pub fn response(self) -> Response<GatewayBody> {
        let mut response = Response::new(GatewayBody::local(self.body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        if let Some(seconds) = self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(location) = self.location {
            headers.insert(LOCATION, location);
        }
        if let Some(id) = &self.request_id {
            headers.insert("x-request-id", id.header_value());
        }
        response
    }
}

/// Whether a client's `Accept` asks for JSON.
fn wants_json(accept: Option<&[u8]>) -> bool {
    accept.is_some_and(|a| {
        a.windows(16)
            .any(|w| w.eq_ignore_ascii_case(b"application/json"))
    })
}

impl ProxyError {
    pub fn fault(&self) -> Fault {
        match self {
            ProxyError::NoRoute
            | ProxyError::BadRequest(_)
            | ProxyError::Connect
            | ProxyError::HttpsOnly(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::TooLarge(_)
            | ProxyError::Challenge(_)
            | ProxyError::ClientBody(_) => Fault::Downstream,
            ProxyError::Unreachable(failure) if !failure.blames_replica() => Fault::Node,
            ProxyError::Unavailable { .. }
            | ProxyError::Unreachable(_)
            | ProxyError::FirstAnswerTimeout(_)
            | ProxyError::UpstreamStalled(_)
            | ProxyError::Upstream(_) => Fault::Upstream,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Challenge(_) => StatusCode::OK,
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::ClientBody(e) if e.is_timeout() => StatusCode::REQUEST_TIMEOUT,
            ProxyError::ClientBody(e) if e.is_too_large() => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::BadRequest(_) | ProxyError::ClientBody(_) => StatusCode::BAD_REQUEST,
            ProxyError::Connect => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::HttpsOnly(_) => StatusCode::PERMANENT_REDIRECT,
            ProxyError::Unreachable(failure) if !failure.blames_replica() => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::Unreachable(_) | ProxyError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ProxyError::FirstAnswerTimeout(_) | ProxyError::UpstreamStalled(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
        }
    }

    /// What decided the answer, as the access log names it: the bound,
    /// the breaker or the limit, or what was wrong.
    pub fn decided_by(&self) -> &'static str {
        match self {
            ProxyError::Unavailable { .. } => "breaker",
            ProxyError::NoRoute => "no_route",
            ProxyError::BadRequest(_) | ProxyError::Connect => "bad_request",
            ProxyError::HttpsOnly(_) => "https_only",
            ProxyError::Unreachable(failure) if !failure.blames_replica() => "node_resources",
            ProxyError::Unreachable(ConnectFailure::TimedOut) => "connect_timeout",
            ProxyError::Unreachable(ConnectFailure::NoReplica) => "no_replica",
            ProxyError::Unreachable(ConnectFailure::Unresolved(_)) => "port_unresolved",
            ProxyError::Unreachable(_) => "connect",
            ProxyError::FirstAnswerTimeout(_) => "first_answer_timeout",
            ProxyError::UpstreamStalled(_) => "body_timeout",
            ProxyError::Upstream(_) => "upstream_error",
            ProxyError::ClientBody(e) if e.is_timeout() => "client_body_timeout",
            ProxyError::ClientBody(e) if e.is_too_large() => "max_body",
            ProxyError::ClientBody(_) => "client_body",
            ProxyError::RateLimited { .. } => "rate_limit",
            ProxyError::TooLarge(_) => "max_body",
            ProxyError::Challenge(_) => "acme_challenge",
        }
    }

    /// How the exchange ended when it ended in this error, for the access
    /// log: the node's own answer went out, whole, in its place.
    pub fn ending(&self) -> Ending {
        use crate::ending::Bound;
        let (cause, phase) = match self {
            ProxyError::Challenge(_) => return Ending::COMPLETE,
            ProxyError::Unavailable { .. }
            | ProxyError::NoRoute
            | ProxyError::BadRequest(_)
            | ProxyError::Connect
            | ProxyError::HttpsOnly(_)
            | ProxyError::RateLimited { .. }
            | ProxyError::TooLarge(_) => (Cause::NodeRefused, Phase::Request),
            ProxyError::Unreachable(ConnectFailure::TimedOut) => {
                (Cause::Bound(Bound::Connect), Phase::Connect)
            }
            ProxyError::Unreachable(ConnectFailure::NoReplica | ConnectFailure::Unresolved(_)) => {
                (Cause::NodeRefused, Phase::Connect)
            }
            ProxyError::Unreachable(failure) if failure.blames_replica() => {
                (Cause::ReplicaClosed, Phase::Connect)
            }
            ProxyError::Unreachable(_) => (Cause::NodeRefused, Phase::Connect),
            ProxyError::FirstAnswerTimeout(_) => (Cause::Bound(Bound::FirstAnswer), Phase::Head),
            ProxyError::UpstreamStalled(_) => (Cause::Bound(Bound::ReplicaBody), Phase::Request),
            ProxyError::Upstream(ConnError::Parse(_)) => (Cause::ReplicaUnparsable, Phase::Head),
            ProxyError::Upstream(_) => (Cause::ReplicaClosed, Phase::Head),
            ProxyError::ClientBody(e) if e.is_timeout() => {
                (Cause::Bound(Bound::ClientBody), Phase::Request)
            }
            ProxyError::ClientBody(e) if e.is_client_gone() => (Cause::ClientGone, Phase::Request),
            ProxyError::ClientBody(_) => (Cause::NodeRefused, Phase::Request),
        };
        Ending::new(cause, phase)
    }

    /// The page the client gets, given its `Accept` header: the status and
    /// the reason in one line, and the request's ID; for an open circuit,
    /// a small page in JSON or HTML and the seconds to wait.
    pub fn page(&self, accept: Option<&[u8]>, id: &RequestId) -> Page {
        let status = self.status();
        if let ProxyError::Challenge(authorization) = self {
            return Page {
                status,
                content_type: "application/octet-stream",
                body: authorization.clone(),
                retry_after: None,
                location: None,
                request_id: Some(*id),
            };
        }
        if let ProxyError::RateLimited { retry_after } = self {
            let seconds = super::limits::retry_after_secs(*retry_after);
            let body = format!(
                "429 Too Many Requests\n{self}; try again in {seconds} s\nrequest id: {}\n",
                id.as_str()
            );
            return Page {
                status,
                content_type: "text/plain; charset=utf-8",
                body: body.into(),
                retry_after: Some(seconds),
                location: None,
                request_id: Some(*id),
            };
        }
        if let ProxyError::Unavailable { retry_after } = self {
            // Whole seconds, rounded up: a client that waits that long
            // finds the cool-down over.
            let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            let seconds = seconds.max(1);
            return if wants_json(accept) {
                let body = format!(
                    "{{\"status\":503,\"error\":\"unavailable\",\"message\":\"the circuit of this route is open on this node\",\"retry_after_s\":{seconds},\"request_id\":\"{}\"}}\n",
                    id.as_str()
                );
                Page {
                    status,
                    content_type: "application/json",
                    body: body.into(),
                    retry_after: Some(seconds),
                    location: None,
                    request_id: Some(*id),
                }
            } else {
                let body = format!(
                    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>503 Service Unavailable</title></head>\n\
                     <body><h1>Service unavailable</h1><p>This service is failing and is given a rest. \
                     Try again in {seconds} s.</p><p>Request ID: {}</p></body></html>\n",
                    id.as_str()
                );
                Page {
                    status,
                    content_type: "text/html; charset=utf-8",
                    body: body.into(),
                    retry_after: Some(seconds),
                    location: None,
                    request_id: Some(*id),
                }
            };
        }
        let text = format!(
            "{} {}\n{}\nrequest id: {}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            self,
            id.as_str()
        );
        let location = match self {
            ProxyError::HttpsOnly(location) => Some(location.clone()),
            _ => None,
        };
        Page {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from(text),
            retry_after: None,
            location,
            request_id: Some(*id),
        }
    }

    /// The page as a response going out through hyper.
    pub fn response(&self, accept: Option<&[u8]>, id: &RequestId) -> Response<GatewayBody> {
        self.page(accept, id).response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_faults() {
        let cases = [
            (
                ProxyError::Unavailable {
                    retry_after: Duration::from_secs(3),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                Fault::Upstream,
            ),
            (
                ProxyError::NoRoute,
                StatusCode::NOT_FOUND,
                Fault::Downstream,
            ),
            (
                ProxyError::BadRequest("no host"),
                StatusCode::BAD_REQUEST,
                Fault::Downstream,
            ),
            (
                ProxyError::Connect,
                StatusCode::METHOD_NOT_ALLOWED,
                Fault::Downstream,
            ),
            (
                ProxyError::Unreachable(ConnectFailure::Refused),
                StatusCode::BAD_GATEWAY,
                Fault::Upstream,
            ),
            (
                ProxyError::Unreachable(ConnectFailure::TimedOut),
                StatusCode::BAD_GATEWAY,
                Fault::Upstream,
            ),
            (
                ProxyError::Unreachable(ConnectFailure::NoReplica),
                StatusCode::BAD_GATEWAY,
                Fault::Upstream,
            ),
            (
                ProxyError::Unreachable(ConnectFailure::Unresolved("port \"http\"".into())),
                StatusCode::BAD_GATEWAY,
                Fault::Upstream,
            ),
            (
                ProxyError::FirstAnswerTimeout(Duration::from_secs(2)),
                StatusCode::GATEWAY_TIMEOUT,
                Fault::Upstream,
            ),
            (
                ProxyError::HttpsOnly(HeaderValue::from_static("https://a.test/")),
                StatusCode::PERMANENT_REDIRECT,
                Fault::Downstream,
            ),
        ];
        for (error, status, fault) in cases {
            assert_eq!(error.status(), status, "{error}");
            assert_eq!(error.fault(), fault, "{error}");
            assert_eq!(error.page(None, &RequestId::generate()).status, status);
        }
        let unresolved = ProxyError::Unreachable(ConnectFailure::Unresolved("why".into()));
        assert_eq!(unresolved.decided_by(), "port_unresolved");
        assert_eq!(unresolved.to_string(), "why");
    }

    #[test]
    fn a_redirect_says_where() {
        let to = HeaderValue::from_static("https://a.test:8443/x?y=1");
        let response = ProxyError::HttpsOnly(to.clone()).response(None, &RequestId::generate());
        assert_eq!(response.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(response.headers().get(LOCATION), Some(&to));
    }

    #[test]
    fn the_unavailable_page_speaks_json_or_html_and_says_when() {
        let open = ProxyError::Unavailable {
            retry_after: Duration::from_millis(11_200),
        };
        let json = open.page(
            Some(b"application/json, text/plain"),
            &RequestId::generate(),
        );
        assert_eq!(
            (json.content_type, json.retry_after),
            ("application/json", Some(12))
        );
        let value: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
        assert_eq!(value["retry_after_s"], 12);
        let html = open.page(
            Some(b"text/html,application/xhtml+xml"),
            &RequestId::generate(),
        );
        assert!(html.content_type.starts_with("text/html"));
        assert!(String::from_utf8_lossy(&html.body).contains("12 s"));
        let soon = ProxyError::Unavailable {
            retry_after: Duration::ZERO,
        }
        .page(None, &RequestId::generate());
        assert_eq!(soon.retry_after, Some(1), "never zero");
    }
}
