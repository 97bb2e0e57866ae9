//! HTTP/2 to replicas (`protocol = "h2c"`, `"h2"`, or `"auto"` when ALPN
//! picks it): one connection carries many requests at once.
//!
//! ## Connections
//! A connection is open once the replica has answered a PING sent after
//! the preface: its SETTINGS came first, so the connect bound covers the
//! whole HTTP/2 handshake, and a replica that takes TCP but does not speak
//! HTTP/2 fails its connect (and its check) rather than a request. Each
//! connection carries at most [`MAX_STREAMS`] requests at once (fewer if
//! the replica says so); the pool opens another when all are full.
//!
//! ## Flow control
//! Response data is handed on as it arrives and its window released when
//! the client's side takes it, so a slow client slows its replica's stream
//! and no other. Request data waits for the replica's window, each wait
//! bounded by the body bound.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use h2::client::SendRequest;
use http_body::{Body, Frame};
use tokio::time::Instant;

use super::conn::Io;
use super::connect::ConnectFailure;

/// Requests one HTTP/2 connection to a replica carries at once, at most.
pub const MAX_STREAMS: usize = 100;
/// The receive window of each stream: a replica may send this much ahead of
/// the client.
const STREAM_WINDOW: u32 = 1 << 20;
/// The receive window of a connection.
const CONNECTION_WINDOW: u32 = 8 << 20;

#[derive(Debug, Default)]
struct Shared {
    /// Requests in flight.
    open: AtomicUsize,
    /// The connection has ended (GOAWAY, error, or the replica closed).
    closed: AtomicBool,
}

/// A multiplexed HTTP/2 connection to a replica; clones share it.
#[derive(Clone)]
pub struct H2Conn {
    send: SendRequest<Bytes>,
    shared: Arc<Shared>,
    /// When it last carried a request, for the pool's idle timeout.
    pub since: Instant,
}

impl std::fmt::Debug for H2Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Conn")
            .field("open", &self.shared.open.load(Ordering::Relaxed))
            .field("closed", &self.shared.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// Counts a request as in flight on its connection while it lives.
#[derive(Debug)]
pub struct StreamSlot(Arc<Shared>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs the HTTP/2 handshake on `io`: the preface, SETTINGS both ways and
/// a PING answered. Unbounded: the caller bounds it with the connect.
pub async fn handshake(io: Io) -> Result<H2Conn, ConnectFailure> {
    let failed = |e: h2::Error| ConnectFailure::Failed(format!("HTTP/2 handshake: {e}"));
    let (send, mut connection) = h2::client::Builder::new()
        .enable_push(false)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(crate::h1::MAX_HEAD as u32)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(failed)?;
    let ping = connection.ping_pong();
    let shared = Arc::new(Shared::default());
    let watch = Arc::clone(&shared);
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "HTTP/2 connection to a replica ended");
        }
        watch.closed.store(true, Ordering::Release);
    });
    let Some(mut ping) = ping else {
        return Err(ConnectFailure::Failed("HTTP/2 handshake: no PING".into()));
    };
    ping.ping(h2::Ping::opaque()).await.map_err(failed)?;
    Ok(H2Conn {
        send,
        shared,
        since: Instant::now(),
    })
}

impl H2Conn {
    /// Whether the connection can take another request now.
    pub fn has_room(&mut self) -> bool {
        if self.shared.closed.load(Ordering::Acquire) {
            return false;
        }
        let limit = MAX_STREAMS.min(self.send.current_max_send_streams());
        if self.shared.open.load(Ordering::Acquire) >= limit {
            return false;
        }
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        matches!(self.send.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Requests in flight.
    pub fn open(&self) -> usize {
        self.shared.open.load(Ordering::Acquire)
    }

    /// Whether two handles are the same connection.
    pub fn same(&self, other: &H2Conn) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Opens a stream for `request`; `end` when it has no body.
    pub async fn send(
        &mut self,
        request: http::Request<()>,
        end: bool,
    ) -> Result<
        (
            h2::client::ResponseFuture,
            h2::SendStream<Bytes>,
            StreamSlot,
        ),
        h2::Error,
    > {
        self.shared.open.fetch_add(1, Ordering::AcqRel);
        let slot = StreamSlot(Arc::clone(&self.shared));
        self.since = Instant::now();
        let mut send = self.send.clone().ready().await?;
        let (response, stream) = send.send_request(request, end)?;
        Ok((response, stream, slot))
    }
}

/// A response body read from an HTTP/2 stream, its trailers last.
pub struct H2Body {
    recv: h2::RecvStream,
    data_done: bool,
    done: bool,
    /// Header names holding `_` pass in trailers too.
    underscores: bool,
    _slot: StreamSlot,
}

impl std::fmt::Debug for H2Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Body")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl H2Body {
    pub fn new(recv: h2::RecvStream, slot: StreamSlot, underscores: bool) -> H2Body {
        let done = recv.is_end_stream();
        H2Body {
            recv,
            data_done: done,
            done,
            underscores,
            _slot: slot,
        }
    }
}

/// An HTTP/2 error as the body's reader sees it.
pub fn io_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| io::Error::other("HTTP/2 I/O"));
    }
    io::Error::other(e)
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    this.done = true;
                    this.data_done = true;
                    return Poll::Ready(Some(Err(io_error(e))));
                }
                None => this.data_done = true,
            }
        }
        if this.done {
            return Poll::Ready(None);
        }
        let trailers = ready!(this.recv.poll_trailers(cx));
        this.done = true;
        match trailers {
            Ok(Some(trailers)) => {
                let trailers = crate::proxy::headers::clean_trailers(trailers, this.underscores);
                Poll::Ready((!trailers.is_empty()).then(|| Ok(Frame::trailers(trailers))))
            }
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(io_error(e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
