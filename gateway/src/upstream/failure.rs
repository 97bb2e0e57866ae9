//! Why no connection to a replica could be had, and what that says of
//! the replica.

use std::io;

use super::handshake::TlsFailure;
use super::health::{EjectReason, GrpcHealth, HttpCheckFailure};

/// Why no connection could be had.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConnectFailure {
    #[error("no replica in rotation")]
    NoReplica,
    /// The replica's name does not resolve (to any address).
    #[error("{0}")]
    Unresolvable(String),
    /// No replica can be known of: the node lacks a right to resolve the
    /// service's port (the text says which).
    #[error("{0}")]
    Unresolved(std::sync::Arc<str>),
    #[error("connect refused")]
    Refused,
    #[error("connect timed out")]
    TimedOut,
    #[error("connect failed: {0}")]
    Failed(String),
    /// Connected, but the TLS handshake failed; `detail` is rustls' own
    /// word for it.
    #[error("TLS handshake: {detail}")]
    Tls { failure: TlsFailure, detail: String },
    /// The forward proxy would not open a tunnel to the upstream.
    #[error("the forward proxy answered {status} to CONNECT")]
    Tunnel { status: u16 },
    /// Connected, but it does not speak HTTP/2 as the route asks.
    #[error("connected, but it does not speak HTTP/2: {0}")]
    NoHttp2(String),
    /// Connected, but its gRPC health check did not say SERVING.
    #[error("gRPC health check: {0}")]
    NotServing(GrpcHealth),
    /// Connected, but its HTTP health check did not pass.
    #[error("HTTP check: {0}")]
    HttpCheck(HttpCheckFailure),
    /// The node ran out of something of its own (file descriptors): says
    /// nothing of the replica.
    #[error("the node is out of local resources: {0}")]
    Local(String),
}

impl ConnectFailure {
    /// The failure as a replica's ejection reason.
    pub fn reason(&self) -> EjectReason {
        match self {
            ConnectFailure::Refused => EjectReason::Refused,
            ConnectFailure::TimedOut => EjectReason::TimedOut,
            ConnectFailure::Tls { failure, .. } => EjectReason::Tls(*failure),
            ConnectFailure::Tunnel { status } => EjectReason::ProxyRefused { status: *status },
            ConnectFailure::NotServing(health) => EjectReason::NotServing(*health),
            ConnectFailure::NoHttp2(_) => EjectReason::NoHttp2,
            ConnectFailure::HttpCheck(failure) => EjectReason::HttpCheck(*failure),
            ConnectFailure::NoReplica
            | ConnectFailure::Unresolved(_)
            | ConnectFailure::Unresolvable(_)
            | ConnectFailure::Failed(_)
            | ConnectFailure::Local(_) => EjectReason::Unreachable,
        }
    }

    /// Whether the failure tells anything of the replica.
    pub fn blames_replica(&self) -> bool {
        !matches!(self, ConnectFailure::Local(_))
    }

    pub(super) fn from_io(e: &io::Error) -> ConnectFailure {
        if crate::resources::is_local(e) {
            crate::resources::LOCAL.hit("connecting to a replica", e);
            return ConnectFailure::Local(e.to_string());
        }
        match e.kind() {
            io::ErrorKind::ConnectionRefused => ConnectFailure::Refused,
            io::ErrorKind::TimedOut => ConnectFailure::TimedOut,
            _ => ConnectFailure::Failed(e.to_string()),
        }
    }
}
