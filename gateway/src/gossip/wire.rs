//! How gossip reaches the network: the node's own UDP socket (bound
//! before the node starts, sealed with the cluster key unless knowingly
//! insecure), or a transport a test hands in.

use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::Arc;

use arc_swap::ArcSwap;
use chitchat::transport::{Transport, UdpTransport};

use super::seal::Keys;
use super::transport::SealedTransport;
use crate::metrics::GossipMetrics;

/// How gossip reaches the network: sealed UDP normally, anything chitchat
/// can use in tests.
#[derive(Clone)]
pub enum Wire {
    /// The node's own gossip socket, already bound.
    Udp(Arc<std::sync::Mutex<Option<StdUdpSocket>>>),
    /// A transport given by a test (chitchat's in-memory one).
    Given(Arc<dyn Transport>),
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wire::Udp(_) => "Wire::Udp",
            Wire::Given(_) => "Wire::Given",
        })
    }
}

impl Wire {
    /// The address gossip is bound to (`configured` for a given transport).
    pub(super) fn bound(&self, configured: SocketAddr) -> SocketAddr {
        match self {
            Wire::Udp(socket) => socket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(|s| s.local_addr().ok())
                .unwrap_or(configured),
            Wire::Given(_) => configured,
        }
    }

    /// The transport chitchat opens: sealed with `keys` when there are.
    pub(super) fn transport(
        &self,
        keys: Option<&Arc<ArcSwap<Keys>>>,
        metrics: &GossipMetrics,
        advertise: SocketAddr,
    ) -> Box<dyn Transport> {
        match self {
            Wire::Udp(socket) => Box::new(Prebound {
                socket: Arc::clone(socket),
                sealed: keys.map(|keys| SealedTransport {
                    keys: Arc::clone(keys),
                    metrics: metrics.clone(),
                    advertise,
                }),
            }),
            Wire::Given(transport) => Box::new(Shared(Arc::clone(transport))),
        }
    }
}

/// Hands chitchat a socket bound before the node started.
struct Prebound {
    socket: Arc<std::sync::Mutex<Option<StdUdpSocket>>>,
    sealed: Option<SealedTransport>,
}

#[async_trait::async_trait]
impl Transport for Prebound {
    async fn open(
        &self,
        listen: SocketAddr,
    ) -> anyhow::Result<Box<dyn chitchat::transport::Socket>> {
        let socket = self
            .socket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| anyhow::anyhow!("the gossip socket on {listen} was already opened"))?;
        socket.set_nonblocking(true)?;
        match &self.sealed {
            Some(sealed) => {
                sealed
                    .open_on(tokio::net::UdpSocket::from_std(socket)?)
                    .await
            }
            None => {
                // chitchat's own socket binds by address: hand the port back.
                let addr = socket.local_addr()?;
                drop(socket);
                UdpTransport.open(addr).await
            }
        }
    }
}

/// A transport shared with the test that made it.
struct Shared(Arc<dyn Transport>);

#[async_trait::async_trait]
impl Transport for Shared {
    async fn open(
        &self,
        listen: SocketAddr,
    ) -> anyhow::Result<Box<dyn chitchat::transport::Socket>> {
        self.0.open(listen).await
    }
}
