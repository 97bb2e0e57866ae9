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

use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
    /// A write to the client making no progress (HTTP/1), or an HTTP/2
    /// stream's answer not taken by its client, for this long gives the
    /// answer up and frees its replica connection.
    pub send: Duration,
    pub max_connections: usize,
}

/// Where the proxy listens.
pub struct ProxyListeners {
    /// Plain HTTP.
    pub plain: TcpListener,
    /// HTTPS, with the TLS configuration of its handshakes.
    pub tls: Option<(TcpListener, TlsAcceptor)>,
}

/// How the connections of one listener are served; `port` is the
/// listener's own (`X-Forwarded-Port`), `None` if it could not tell.
#[derive(Clone)]
enum Edge {
    /// Plain; `https_port` is where `https_only` routes send clients.
    Plain {
        port: Option<u16>,
        https_port: Option<u16>,
    },
    Tls {
        acceptor: TlsAcceptor,
        port: Option<u16>,
    },
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
    // Set once on each listener, which its accepted connections inherit
    // (Linux copies the option to them): no system call per connection.
    no_delay(&plain);
    if let Some((listener, _)) = &tls {
        no_delay(listener);
    }
    // Asked once per listener, not per connection.
    let port = |listener: &TcpListener| listener.local_addr().ok().map(|addr| addr.port());
    let plain_port = port(&plain);
    let https_port = tls.as_ref().and_then(|(listener, _)| port(listener));
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
            accepted = plain.accept() => accepted.map(|a| (a, Edge::Plain { port: plain_port, https_port })),
            accepted = accept_tls(tls.as_ref(), https_port) => accepted,
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
        let slot = Slot::new(&metrics.open, permit);
        connections.spawn(connection(
            stream,
            peer,
            edge,
            Arc::clone(&proxy),
            shutdown.clone(),
            limits,
            slot,
        ));
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

/// Turns Nagle's algorithm off for the connections `listener` accepts: an
/// answer's head and body leave as written, never held back for an
/// acknowledgement.
fn no_delay(listener: &TcpListener) {
    if let Err(error) = socket2::SockRef::from(listener).set_tcp_nodelay(true) {
        tracing::warn!(%error, "setting TCP_NODELAY on a proxy listener failed");
    }
}

/// The next connection of the HTTPS listener, which listens on `port`;
/// never, without one.
async fn accept_tls(
    tls: Option<&(TcpListener, TlsAcceptor)>,
    port: Option<u16>,
) -> std::io::Result<Accepted> {
    match tls {
        Some((listener, acceptor)) => listener.accept().await.map(|accepted| {
            let acceptor = acceptor.clone();
            (accepted, Edge::Tls { acceptor, port })
        }),
        None => std::future::pending().await,
    }
}

/// A client connection's place: it counts as open, and holds one of the
/// `max_connections` permits, until its task ends.
struct Slot {
    open: Gauge,
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    fn new(open: &Gauge, permit: OwnedSemaphorePermit) -> Slot {
        open.inc();
        Slot {
            open: open.clone(),
            _permit: permit,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// Serves one client connection until it closes.
///
/// Its task lives as long as the connection, idle keep-alive time
/// included, so it holds as little as it can: opening the connection (the
/// TLS handshake, telling HTTP/2 from HTTP/1) is boxed and freed once
/// done, as is HTTP/2 and each request (see [`http1::serve`]). An idle
/// HTTP/1.x connection's task keeps the connection, its client and the
/// wait for the next request, under a kilobyte in all.
fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    edge: Edge,
    proxy: Arc<Proxy>,
    shutdown: Shutdown,
    limits: ClientLimits,
    slot: Slot,
) -> impl Future<Output = ()> + Send + 'static {
    let opening = Box::pin(open(stream, peer, edge, proxy, shutdown, limits));
    async move {
        // Held (not moved out: that would keep it twice) until the end.
        let _slot = &slot;
        let Some(Opened {
            mut conn,
            client,
            proxy,
            mut shutdown,
            protocol,
        }) = opening.await
        else {
            return;
        };
        match protocol {
            http1::Protocol::Http1 => {
                http1::serve(&mut conn, &proxy, &client, &mut shutdown).await;
                conn.shelve();
            }
            http1::Protocol::Http2 => {
                let limits = conn.limits();
                Box::pin(http2::serve(
                    conn.into_rewind(),
                    proxy,
                    client,
                    shutdown,
                    limits,
                ))
                .await;
            }
        }
    }
}

/// A connection ready for its requests.
struct Opened {
    conn: http1::ClientConn,
    client: Client,
    proxy: Arc<Proxy>,
    shutdown: Shutdown,
    protocol: http1::Protocol,
}

/// Completes the TLS handshake (HTTPS) and tells the protocol: ALPN's
/// choice over TLS (none, or `http/1.x`, is HTTP/1), else the client's
/// first bytes. `None` when the client
/// goes away, stays silent or fails its handshake.
async fn open(
    stream: TcpStream,
    peer: SocketAddr,
    edge: Edge,
    proxy: Arc<Proxy>,
    mut shutdown: Shutdown,
    limits: ClientLimits,
) -> Option<Opened> {
    // Over TLS, ALPN decides (`Some(h2)`): a connection that agreed on
    // HTTP/1 and then sends the HTTP/2 preface gets 400, as any request
    // line that does not parse. In clear, the first bytes tell.
    let (io, scheme, alpn_h2, port) = match edge {
        Edge::Plain { port, https_port } => (
            Either::Left(stream),
            Scheme::Http { https_port },
            None,
            port,
        ),
        Edge::Tls { acceptor, port } => {
            let connections = &proxy.metrics().connections;
            let handshake = tokio::select! {
                done = tokio::time::timeout(limits.header, acceptor.accept(stream)) => done,
                () = shutdown.wait() => return None,
            };
            let tls = handshaken(handshake, peer, limits.header, connections)?;
            let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            connections.tls_handshakes[usize::from(resumed)].inc();
            let alpn = tls.get_ref().1.alpn_protocol();
            if alpn == Some(crate::challenges::ALPN_ACME) {
                // A TLS-ALPN-01 validation: the handshake was the answer.
                return None;
            }
            let h2 = alpn == Some(crate::edge::ALPN_H2);
            (Either::Right(Box::new(tls)), Scheme::Https, Some(h2), port)
        }
    };
    let client = Client::new(peer.ip(), port, scheme);
    let mut conn = http1::ClientConn::new(io, limits);
    let protocol = match alpn_h2 {
        Some(true) => http1::Protocol::Http2,
        Some(false) => http1::Protocol::Http1,
        None => conn.sniff().await?,
    };
    Some(Opened {
        conn,
        client,
        proxy,
        shutdown,
        protocol,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections take TCP_NODELAY from their listener: the proxy sets it
    /// there once rather than on every connection it accepts.
    #[tokio::test]
    async fn accepted_connections_inherit_no_delay_from_the_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        no_delay(&listener);
        let addr = listener.local_addr().unwrap();
        let (_client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (stream, _) = accepted.unwrap();
        assert!(
            stream.nodelay().unwrap(),
            "the accepted connection has Nagle off"
        );
    }

    /// The task of a client connection lives as long as the connection,
    /// idle keep-alive time included: ten thousand idle clients hold ten
    /// thousand of them. It once held 3.8 kB (the connection's future
    /// twice over, and the largest state of opening it inline), when
    /// nginx keeps under 600 bytes per idle connection.
    #[tokio::test]
    async fn a_connection_task_stays_small() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (stream, peer) = accepted.unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let proxy = Arc::new(Proxy::new(
            crate::router::RouteTable::default(),
            Arc::clone(&metrics),
        ));
        let (_trigger, shutdown) = crate::shutdown::channel();
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let limits = ClientLimits {
            header: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            send: Duration::from_secs(60),
            max_connections: 1,
        };
        let slot = Slot::new(&metrics.connections.open, permit);
        assert_eq!(metrics.connections.open.get(), 1);
        let task = connection(
            stream,
            peer,
            Edge::Plain {
                port: Some(addr.port()),
                https_port: None,
            },
            proxy,
            shutdown,
            limits,
            slot,
        );
        let size = std::mem::size_of_val(&task);
        eprintln!("connection task: {size} bytes");
        assert!(size <= 1024, "a connection's task holds {size} bytes");
        drop((task, client));
        assert_eq!(metrics.connections.open.get(), 0, "its slot is given back");
    }
}
