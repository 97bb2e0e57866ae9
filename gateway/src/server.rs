//! The proxy listener: accepts client connections and serves HTTP/1.1 and
//! HTTP/2 (prior knowledge) on them, upgrades included.
//!
//! Malformed requests are answered by hyper (400, 431 for oversized heads)
//! and never reach the proxy. A client that does not finish its request
//! head within [`HEADER_READ_TIMEOUT`] is disconnected. On shutdown the
//! listener closes at once, connections finish the request they carry, and
//! whatever is still open after the drain deadline is dropped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::proxy::Proxy;
use crate::shutdown::Shutdown;

/// Time a client has to send a complete request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request head accepted; larger ones get 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

fn builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .max_header_list_size(MAX_HEAD_BYTES as u32);
    builder
}

/// Serves the proxy on `listener` until `shutdown`, then drains for at most
/// `drain`.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    mut shutdown: Shutdown,
    drain: Duration,
) {
    let builder = builder();
    let graceful = GracefulShutdown::new();
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
            () = shutdown.wait() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = service(Arc::clone(&proxy), peer);
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "client connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!(drain = ?drain, "drain deadline passed; closing the remaining connections");
    }
}

fn service(
    proxy: Arc<Proxy>,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<crate::body::GatewayBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<http::Response<crate::body::GatewayBody>, Infallible>> + Send,
> + Clone {
    let client = Arc::new(crate::proxy::Client::new(peer.ip()));
    service_fn(move |req| {
        let proxy = Arc::clone(&proxy);
        let client = Arc::clone(&client);
        async move { Ok::<_, Infallible>(proxy.handle(req, &client).await) }
    })
}
