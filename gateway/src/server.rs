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
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::proxy::{Client, Proxy};
use crate::shutdown::Shutdown;

/// Time a client has to send a complete request head once it started.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an idle keep-alive connection waits for its next request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves the proxy on `listener` until `shutdown`, then drains for at most
/// `drain`.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    mut shutdown: Shutdown,
    drain: Duration,
) {
    let mut connections = JoinSet::new();
    let mut last_accept_warning: Option<Instant> = None;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: say so at most
                    // every few seconds, and give the system a moment.
                    if last_accept_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                        tracing::warn!(%error, "accepting a connection failed");
                        last_accept_warning = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = shutdown.wait() => break,
        };
        connections.spawn(connection(
            stream,
            peer,
            Arc::clone(&proxy),
            shutdown.clone(),
        ));
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

async fn connection(stream: TcpStream, peer: SocketAddr, proxy: Arc<Proxy>, shutdown: Shutdown) {
    let _ = stream.set_nodelay(true);
    let client = Client::new(peer.ip());
    let mut conn = h1::ClientConn::new(stream);
    match conn.sniff().await {
        Some(h1::Protocol::Http2) => h2::serve(conn.into_rewind(), proxy, client, shutdown).await,
        Some(h1::Protocol::Http1) => h1::serve(conn, &proxy, &client, shutdown).await,
        None => {}
    }
}
