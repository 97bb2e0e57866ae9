//! The two bodies of the proxy: what goes upstream, and what goes back to
//! the client. Neither boxes; neither is bounded in time once it started.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::watch;

use crate::upstream::{Sender, Upstream};

/// The request body sent upstream: the client's, streamed, or none.
#[derive(Debug)]
pub enum ProxyBody {
    Empty,
    /// `sent` turns true once the last byte was handed to the upstream
    /// connection: the first-answer bound starts then.
    Client {
        body: Incoming,
        sent: watch::Sender<bool>,
    },
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Client { body, sent } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                if matches!(polled, Poll::Ready(None)) || body.is_end_stream() {
                    sent.send_replace(true);
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Client { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Client { body, .. } => body.size_hint(),
        }
    }
}

/// The response body sent to the client: the upstream's, streamed, or a
/// page the gateway wrote itself.
#[derive(Debug)]
pub struct GatewayBody {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Local(Option<Bytes>),
    Upstream {
        body: Incoming,
        /// Given back to the pool when the body ends; dropped (and with it
        /// the connection) if the client goes away first.
        connection: Option<PooledConnection>,
    },
}

/// A connection lent to one response.
pub struct PooledConnection {
    pub upstream: Arc<Upstream>,
    pub replica: usize,
    pub sender: Sender,
}

impl std::fmt::Debug for PooledConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledConnection")
            .field("route", &self.upstream.route)
            .field("replica", &self.replica)
            .finish()
    }
}

impl PooledConnection {
    fn give_back(self) {
        let key = &self.upstream.replicas[self.replica].key;
        self.upstream.pool.checkin(key, self.sender);
    }
}

impl GatewayBody {
    /// A body written by the gateway.
    pub fn local(bytes: impl Into<Bytes>) -> GatewayBody {
        GatewayBody {
            kind: Kind::Local(Some(bytes.into())),
        }
    }

    pub fn empty() -> GatewayBody {
        GatewayBody {
            kind: Kind::Local(None),
        }
    }

    /// The upstream's body; `connection` goes back to its pool at the end.
    pub fn upstream(body: Incoming, connection: Option<PooledConnection>) -> GatewayBody {
        let connection = match connection {
            // hyper does not poll a body that is already at its end, so the
            // connection is given back now.
            Some(c) if body.is_end_stream() => {
                c.give_back();
                None
            }
            other => other,
        };
        GatewayBody {
            kind: Kind::Upstream { body, connection },
        }
    }
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Local(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Upstream { body, connection } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                // hyper stops polling once `is_end_stream` is true, so the
                // end may show after the last frame rather than as `None`.
                let ended = match &polled {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    Poll::Ready(Some(Err(_))) => {
                        *connection = None;
                        false
                    }
                    Poll::Pending => false,
                };
                if ended {
                    if let Some(c) = connection.take() {
                        c.give_back();
                    }
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Local(bytes) => bytes.is_none(),
            Kind::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Local(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Kind::Upstream { body, .. } => body.size_hint(),
        }
    }
}
