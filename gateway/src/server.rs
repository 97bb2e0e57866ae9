//! The proxy listener: accepts client connections and serves each with
//! HTTP/1.x ([`h1`], Picket's own) or, when the client opens with the
//! HTTP/2 preface, HTTP/2 ([`h2`], hyper's).
//!
//! On shutdown the listener closes at once, connections finish the request
//! they carry, and whatever is still open after the drain deadline is
//! dropped.

pub mod h1;
pub mod h2;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::proxy::{Client, Proxy};
use crate::shutdown::Shutdown;

/// Time a client has to send a complete request head once it started
/// (default of `[node] header_timeout`).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an idle client connection waits for its next request (default of
/// `[node] idle_timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the listener allows each client, and how many at once.
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    /// To finish a request head once started.
    pub header: Duration,
    /// Between requests (HTTP/1), or with no request open (HTTP/2).
    pub idle: Duration,
    pub max_connections: usize,
}

/// Serves the proxy on `listener` until `shutdown`, at most
/// `max_connections` clients at once, then drains for at most `drain`.
///
/// At the limit the listener stops accepting: new clients wait in the
/// listen backlog until a connection closes. Reaching it is counted and
/// logged once per episode, never per connection.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    mut shutdown: Shutdown,
    drain: Duration,
    limits: ClientLimits,
) {
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
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
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
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = shutdown.wait() => break,
        };
        let open = metrics.open.clone();
        open.inc();
        let task = connection(stream, peer, Arc::clone(&proxy), shutdown.clone(), limits);
        connections.spawn(async move {
            task.await;
            open.dec();
            drop(permit);
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!(drain = ?drain, open = connections.len(), "drain deadline passed; closing the remaining connections");
        connections.abort_all();
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    proxy: Arc<Proxy>,
    shutdown: Shutdown,
    limits: ClientLimits,
) {
    let _ = stream.set_nodelay(true);
    let client = Client::new(peer.ip());
    let mut conn = h1::ClientConn::new(stream, limits);
    match conn.sniff().await {
        Some(h1::Protocol::Http2) => {
            h2::serve(conn.into_rewind(), proxy, client, shutdown, limits.idle).await
        }
        Some(h1::Protocol::Http1) => h1::serve(conn, &proxy, &client, shutdown).await,
        None => {}
    }
}
