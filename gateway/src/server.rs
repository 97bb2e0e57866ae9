//! The proxy listeners: accept client connections and serve each with
//! HTTP/1.x ([`http1`], Picket's own) or, when the client opens with the
//! HTTP/2 preface, HTTP/2 ([`http2`], hyper's). The HTTPS listener first
//! completes a TLS handshake ([`crate::edge`]), then serves the same two
//! protocols over it, HTTP/2 when ALPN chose `h2`.
//!
//! ## Bounds
//! A TLS handshake must finish within the header timeout, as a request
//! head must. Plain and TLS connections share one `max_connections`: a
//! connection holds its slot from accept, handshake included.
//!
//! On shutdown the listeners close at once, connections finish the request
//! they carry, and whatever is still open after the drain deadline is
//! dropped.

pub mod http1;
pub mod http2;
mod spare;
pub mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::metrics::ConnectionMetrics;
use crate::proxy::{Client, Proxy, Scheme};
use crate::shutdown::Shutdown;
use tokio_util::either::Either;

/// What the listener allows each client, and how many at once.
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    /// To finish a request head once started.
    pub header: Duration,
    /// Between requests (HTTP/1), or with no request open (HTTP/2).
    pub idle: Duration,
    pub max_connections: usize,
}

/// Where the proxy listens.
pub struct ProxyListeners {
    /// Plain HTTP.
    pub plain: TcpListener,
    /// HTTPS, with the TLS configuration of its handshakes.
    pub tls: Option<(TcpListener, TlsAcceptor)>,
}

/// How the connections of one listener are served.
#[derive(Clone)]
enum Edge {
    /// Plain; `https_port` is where `https_only` routes send clients.
    Plain {
        https_port: Option<u16>,
    },
    Tls(TlsAcceptor),
}

/// Serves the proxy on `listeners` until `shutdown`, at most
/// `max_connections` clients at once over both, then drains for at most
/// `drain`.
///
/// At the limit the listeners stop accepting: new clients wait in the
/// listen backlog until a connection closes. Reaching it is counted and
/// logged once per episode, never per connection.
pub async fn serve(
    listeners: ProxyListeners,
    proxy: Arc<Proxy>,
    mut shutdown: Shutdown,
    drain: Duration,
    limits: ClientLimits,
) {
    let ProxyListeners { plain, tls } = listeners;
    let https_port = tls
        .as_ref()
        .and_then(|(listener, _)| listener.local_addr().ok())
        .map(|addr| addr.port());
    let max_connections = limits.max_connections;
    let mut connections = JoinSet::new();
    let slots = Arc::new(Semaphore::new(max_connections));
    let metrics = proxy.metrics().connections.clone();
    let mut at_limit = false;
    loop {
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if !at_limit {
                    at_limit = true;
                    metrics.limit_reached.inc();
                    tracing::warn!(
                        max_connections,
                        "client connection limit reached: not accepting until a connection closes"
                    );
                }
                tokio::select! {
                    permit = Arc::clone(&slots).acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                    () = shutdown.wait() => break,
                }
            }
        };
        if at_limit {
            at_limit = false;
            tracing::info!(max_connections, "accepting client connections again");
        }
        let accepted = tokio::select! {
            accepted = plain.accept() => accepted.map(|a| (a, Edge::Plain { https_port })),
            accepted = accept_tls(tls.as_ref()) => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = shutdown.wait() => break,
        };
        let ((stream, peer), edge) = match accepted {
            Ok(accepted) => {
                crate::resources::LOCAL.ok();
                accepted
            }
            Err(error) => {
                // Out of file descriptors and the like: the node's own
                // problem, logged once per episode; give it a moment.
                if crate::resources::is_local(&error) {
                    crate::resources::LOCAL.hit("accepting a client connection", &error);
                } else {
                    tracing::debug!(%error, "accepting a connection failed");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let open = metrics.open.clone();
        open.inc();
        let task = connection(
            stream,
            peer,
            edge,
            Arc::clone(&proxy),
            shutdown.clone(),
            limits,
        );
        connections.spawn(async move {
            task.await;
            open.dec();
            drop(permit);
        });
    }
    drop((plain, tls));
    let drained = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!(drain = ?drain, open = connections.len(), "drain deadline passed; closing the remaining connections");
        connections.abort_all();
    }
}

type Accepted = ((TcpStream, SocketAddr), Edge);

/// The next connection of the HTTPS listener; never, without one.
async fn accept_tls(tls: Option<&(TcpListener, TlsAcceptor)>) -> std::io::Result<Accepted> {
    match tls {
        Some((listener, acceptor)) => listener
            .accept()
            .await
            .map(|accepted| (accepted, Edge::Tls(acceptor.clone()))),
        None => std::future::pending().await,
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    edge: Edge,
    proxy: Arc<Proxy>,
    mut shutdown: Shutdown,
    limits: ClientLimits,
) {
    let _ = stream.set_nodelay(true);
    let (io, scheme, h2) = match edge {
        Edge::Plain { https_port } => (Either::Left(stream), Scheme::Http { https_port }, false),
        Edge::Tls(acceptor) => {
            let connections = &proxy.metrics().connections;
            // Boxed, as HTTP/2 below: an idle connection's task keeps only
            // what waiting for a request needs.
            let accept = Box::pin(tokio::time::timeout(limits.header, acceptor.accept(stream)));
            let handshake = tokio::select! {
                done = accept => done,
                () = shutdown.wait() => return,
            };
            let Some(tls) = handshaken(handshake, peer, limits.header, connections) else {
                return;
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(crate::edge::ALPN_H2);
            (Either::Right(Box::new(tls)), Scheme::Https, h2)
        }
    };
    let client = Client::new(peer.ip(), scheme);
    let mut conn = http1::ClientConn::new(io, limits);
    if h2 {
        return Box::pin(http2::serve(
            conn.into_rewind(),
            proxy,
            client,
            shutdown,
            limits.idle,
        ))
        .await;
    }
    match conn.sniff().await {
        Some(http1::Protocol::Http2) => {
            Box::pin(http2::serve(
                conn.into_rewind(),
                proxy,
                client,
                shutdown,
                limits.idle,
            ))
            .await
        }
        Some(http1::Protocol::Http1) => http1::serve(conn, &proxy, &client, shutdown).await,
        None => {}
    }
}

/// The TLS stream of a handshake that finished in time; a failed or slow
/// one is counted, and said at debug level only: scanners and clients that
/// give up are routine, and one line each would flood the log.
fn handshaken<T>(
    handshake: Result<std::io::Result<T>, tokio::time::error::Elapsed>,
    peer: SocketAddr,
    bound: Duration,
    metrics: &ConnectionMetrics,
) -> Option<T> {
    match handshake {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(error)) => {
            metrics.tls_handshake_failed.inc();
            tracing::debug!(%peer, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            metrics.tls_handshake_failed.inc();
            tracing::debug!(%peer, bound = ?bound, "TLS handshake not finished within the header timeout; dropped");
            None
        }
    }
}
