//! Why a request could not be proxied, whose fault it was, and the one
//! place that turns that into a response.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};

use crate::body::GatewayBody;
use crate::upstream::ConnectFailure;

/// Whose fault a failed request was. Only upstream faults will ever count
/// against an upstream (breaker, verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Upstream,
    Downstream,
}

/// A page the gateway writes itself.
#[derive(Debug, Clone)]
pub struct Page {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Bytes,
}

impl Page {
    pub fn response(self) -> Response<GatewayBody> {
        let mut response = Response::new(GatewayBody::local(self.body));
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        response
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no route for this host and path")]
    NoRoute,
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("method not allowed: Picket is not a forward proxy")]
    Connect,
    #[error("{0}")]
    Unreachable(ConnectFailure),
    #[error("no response head within {}", humantime::format_duration(*.0))]
    FirstAnswerTimeout(Duration),
    #[error("{0}")]
    Upstream(crate::upstream::ConnError),
    #[error(transparent)]
    ClientBody(crate::proxy::request::BodyError),
}

impl ProxyError {
    pub fn fault(&self) -> Fault {
        match self {
            ProxyError::NoRoute
            | ProxyError::BadRequest(_)
            | ProxyError::Connect
            | ProxyError::ClientBody(_) => Fault::Downstream,
            ProxyError::Unreachable(_)
            | ProxyError::FirstAnswerTimeout(_)
            | ProxyError::Upstream(_) => Fault::Upstream,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::BadRequest(_) | ProxyError::ClientBody(_) => StatusCode::BAD_REQUEST,
            ProxyError::Connect => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::Unreachable(_) | ProxyError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ProxyError::FirstAnswerTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The page the client gets: the status, and the reason in one line.
    pub fn page(&self) -> Page {
        let status = self.status();
        let text = format!(
            "{} {}\n{}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            self
        );
        Page {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from(text),
        }
    }

    /// The page as a response going out through hyper.
    pub fn response(&self) -> Response<GatewayBody> {
        self.page().response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_faults() {
        let cases = [
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
                ProxyError::FirstAnswerTimeout(Duration::from_secs(2)),
                StatusCode::GATEWAY_TIMEOUT,
                Fault::Upstream,
            ),
        ];
        for (error, status, fault) in cases {
            assert_eq!(error.status(), status, "{error}");
            assert_eq!(error.fault(), fault, "{error}");
            assert_eq!(error.response().status(), status);
        }
    }
}
