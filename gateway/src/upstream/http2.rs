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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use h2::client::SendRequest;
use http_body::{Body, Frame};
use tokio::time::Instant;

use super::failure::ConnectFailure;
use super::io::Io;

/// Requests one HTTP/2 connection to a replica carries at once, at most.
pub const MAX_STREAMS: usize = 100;
/// The receive window of each stream: a replica may send this much ahead of
/// the client.
const STREAM_WINDOW: u32 = 1 << 20;
/// The receive window of a connection.
const CONNECTION_WINDOW: u32 = 8 << 20;

#[derive(Debug)]
struct Shared {
    /// Requests in flight.
    open: AtomicUsize,
    /// The connection has ended (GOAWAY, error, or the replica closed).
    closed: AtomicBool,
    /// When it was opened, and when it last carried a request, in
    /// milliseconds since then.
    opened: Instant,
    last_used_ms: AtomicU64,
}

/// A multiplexed HTTP/2 connection to a replica; clones share it. A handle
/// the pool checked out holds the stream it reserved until it sends on it
/// (or is dropped): requests that check out at the same moment cannot
/// overfill a connection the replica limits.
pub struct H2Conn {
    send: SendRequest<Bytes>,
    shared: Arc<Shared>,
    reserved: Option<StreamSlot>,
}

impl Clone for H2Conn {
    /// Another handle on the connection, reserving nothing.
    fn clone(&self) -> H2Conn {
        H2Conn {
            send: self.send.clone(),
            shared: Arc::clone(&self.shared),
            reserved: None,
        }
    }
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
    // Connected, yet no HTTP/2: the replica closed, reset or answered
    // something else. Only the node's own shortage blames nobody.
    let failed = |e: h2::Error| {
        let e = io_error(e);
        if crate::resources::is_local(&e) {
            return ConnectFailure::from_io(&e);
        }
        ConnectFailure::NoHttp2(format!("HTTP/2 handshake: {e}"))
    };
    let (send, mut connection) = h2::client::Builder::new()
        .enable_push(false)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(crate::h1::MAX_HEAD as u32)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(failed)?;
    let ping = connection.ping_pong();
    let shared = Arc::new(Shared {
        open: AtomicUsize::new(0),
        closed: AtomicBool::new(false),
        opened: Instant::now(),
        last_used_ms: AtomicU64::new(0),
    });
    let watch = Arc::clone(&shared);
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "HTTP/2 connection to a replica ended");
        }
        watch.closed.store(true, Ordering::Release);
    });
    let Some(mut ping) = ping else {
        return Err(ConnectFailure::NoHttp2("HTTP/2 handshake: no PING".into()));
    };
    ping.ping(h2::Ping::opaque()).await.map_err(failed)?;
    Ok(H2Conn {
        send,
        shared,
        reserved: None,
    })
}

impl H2Conn {
    /// A handle holding one stream of the connection for a request, when
    /// it has room for another now.
    pub fn reserve(&mut self) -> Option<H2Conn> {
        if self.shared.closed.load(Ordering::Acquire) {
            return None;
        }
        let limit = MAX_STREAMS.min(self.send.current_max_send_streams());
        self.shared
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < limit).then_some(open + 1)
            })
            .ok()?;
        let slot = StreamSlot(Arc::clone(&self.shared));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        if !matches!(self.send.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
            return None;
        }
        Some(H2Conn {
            send: self.send.clone(),
            shared: Arc::clone(&self.shared),
            reserved: Some(slot),
        })
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Requests in flight.
    pub fn open(&self) -> usize {
        self.shared.open.load(Ordering::Acquire)
    }

    /// When it last carried a request (or was opened), for the pool's idle
    /// timeout.
    pub fn last_used(&self) -> Instant {
        let ms = self.shared.last_used_ms.load(Ordering::Relaxed);
        self.shared.opened + std::time::Duration::from_millis(ms)
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
        let slot = match self.reserved.take() {
            Some(slot) => slot,
            None => {
                self.shared.open.fetch_add(1, Ordering::AcqRel);
                StreamSlot(Arc::clone(&self.shared))
            }
        };
        let used = Instant::now().saturating_duration_since(self.shared.opened);
        self.shared.last_used_ms.store(
            u64::try_from(used.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
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
    /// The replica whose health hears how the body ended.
    from: Option<super::Release>,
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
            from: None,
            _slot: slot,
        }
    }

    /// The replica the body comes from, whose health hears how it ends.
    pub fn from(mut self, release: super::Release) -> H2Body {
        self.from = Some(release);
        if self.done {
            self.ended(None);
        }
        self
    }

    /// The body ended: whole (`None`), or broken off with the error.
    fn ended(&mut self, error: Option<&io::Error>) {
        let Some(from) = self.from.take() else {
            return;
        };
        match error {
            None => from.upstream.ended_whole(&from.replica),
            Some(e) => from
                .upstream
                .broke_off(&from.replica, e.kind() == io::ErrorKind::InvalidData),
        }
    }

    fn broke_off(&mut self, e: h2::Error) -> io::Error {
        self.done = true;
        self.data_done = true;
        let error = io_error(e);
        self.ended(Some(&error));
        error
    }
}

/// An HTTP/2 error as the body's reader sees it.
pub fn io_error(e: h2::Error) -> io::Error {
    // What does not follow the protocol (a body longer or shorter than its
    // content-length, a malformed frame) did not parse.
    if e.reason() == Some(h2::Reason::PROTOCOL_ERROR) {
        return io::Error::new(io::ErrorKind::InvalidData, e);
    }
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
                Some(Err(e)) => return Poll::Ready(Some(Err(this.broke_off(e)))),
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
                this.ended(None);
                let trailers = crate::h1::body::clean_trailers(trailers, this.underscores);
                Poll::Ready((!trailers.is_empty()).then(|| Ok(Frame::trailers(trailers))))
            }
            Ok(None) => {
                this.ended(None);
                Poll::Ready(None)
            }
            Err(e) => Poll::Ready(Some(Err(this.broke_off(e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The most bytes of a health answer read.
const HEALTH_ANSWER_LIMIT: usize = 1024;

/// One call of the standard gRPC health protocol
/// (`grpc.health.v1.Health/Check`) for `service` (empty: the server as a
/// whole): `Ok` when the replica says SERVING. Unbounded: the caller bounds
/// it with the check.
pub async fn health_check(
    conn: &mut H2Conn,
    scheme: &str,
    authority: &str,
    service: &str,
) -> Result<(), ConnectFailure> {
    use super::health::GrpcHealth;
    let broken = |e: h2::Error| ConnectFailure::Failed(format!("gRPC health check: {e}"));
    let uri = format!("{scheme}://{authority}/grpc.health.v1.Health/Check");
    let request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(())
        .map_err(|e| ConnectFailure::Failed(format!("gRPC health check: {e}")))?;
    let (response, mut stream, _slot) = conn.send(request, false).await.map_err(broken)?;
    stream
        .send_data(health_request(service), true)
        .map_err(broken)?;
    let response = response.await.map_err(broken)?;
    let (parts, mut body) = response.into_parts();
    let status_in = |map: &http::HeaderMap| {
        map.get("grpc-status")
            .and_then(|v| v.to_str().ok()?.trim().parse::<u16>().ok())
    };
    if parts.status != http::StatusCode::OK {
        return Err(ConnectFailure::NotServing(GrpcHealth::Malformed));
    }
    // Trailers only: the call failed before any answer.
    if let Some(status) = status_in(&parts.headers).filter(|s| *s != 0) {
        return Err(ConnectFailure::NotServing(GrpcHealth::Failed(status)));
    }
    let mut answer = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.map_err(broken)?;
        let _ = body.flow_control().release_capacity(data.len());
        answer.extend_from_slice(&data);
        if answer.len() > HEALTH_ANSWER_LIMIT {
            return Err(ConnectFailure::NotServing(GrpcHealth::Malformed));
        }
    }
    let trailers = body.trailers().await.map_err(broken)?;
    match trailers.as_ref().and_then(status_in) {
        Some(0) => {}
        Some(status) => return Err(ConnectFailure::NotServing(GrpcHealth::Failed(status))),
        None => return Err(ConnectFailure::NotServing(GrpcHealth::Malformed)),
    }
    match health_status(&answer) {
        Some(1) => Ok(()),
        Some(2) => Err(ConnectFailure::NotServing(GrpcHealth::NotServing)),
        Some(3) => Err(ConnectFailure::NotServing(GrpcHealth::ServiceUnknown)),
        Some(_) => Err(ConnectFailure::NotServing(GrpcHealth::Unknown)),
        None => Err(ConnectFailure::NotServing(GrpcHealth::Malformed)),
    }
}

/// A `HealthCheckRequest { service }` in a gRPC message frame: no
/// compression, its length, then field 1 as a string.
fn health_request(service: &str) -> Bytes {
    let mut message = Vec::with_capacity(service.len() + 8);
    if !service.is_empty() {
        message.push(0x0a);
        push_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = Vec::with_capacity(message.len() + 5);
    frame.push(0);
    frame.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    frame.extend_from_slice(&message);
    Bytes::from(frame)
}

fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut n = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
}

/// The `status` of a `HealthCheckResponse` in one uncompressed gRPC
/// message frame: field 1, a varint; 0 (UNKNOWN) when absent. `None` for
/// anything else.
fn health_status(frame: &[u8]) -> Option<u64> {
    let (&compressed, rest) = frame.split_first()?;
    let (length, message) = rest.split_at_checked(4)?;
    let length = u32::from_be_bytes(length.try_into().ok()?) as usize;
    if compressed != 0 || message.len() != length {
        return None;
    }
    let mut status = 0;
    let mut at = 0;
    while at < message.len() {
        let (key, used) = read_varint(&message[at..])?;
        at += used;
        match key & 7 {
            0 => {
                let (value, used) = read_varint(&message[at..])?;
                at += used;
                if key >> 3 == 1 {
                    status = value;
                }
            }
            2 => {
                let (len, used) = read_varint(&message[at..])?;
                at = at
                    .checked_add(used)?
                    .checked_add(usize::try_from(len).ok()?)?;
            }
            _ => return None,
        }
    }
    (at == message.len()).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_requests_are_framed() {
        assert_eq!(&health_request("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &health_request("echo")[..],
            &[0, 0, 0, 0, 6, 0x0a, 4, b'e', b'c', b'h', b'o']
        );
    }

    #[test]
    fn health_answers_are_read() {
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 1]), Some(1));
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 2]), Some(2));
        assert_eq!(
            health_status(&[0, 0, 0, 0, 0]),
            Some(0),
            "UNKNOWN by default"
        );
        // An unknown string field before the status is skipped.
        assert_eq!(
            health_status(&[0, 0, 0, 0, 5, 0x12, 1, b'x', 0x08, 1]),
            Some(1)
        );
        for bad in [
            &[][..],
            &[0, 0, 0, 0],
            &[1, 0, 0, 0, 2, 0x08, 1],
            &[0, 0, 0, 0, 3, 0x08, 1],
            &[0, 0, 0, 0, 2, 0x08, 0x80],
            &[0, 0, 0, 0, 2, 0x0d, 1],
        ] {
            assert_eq!(health_status(bad), None, "{bad:?}");
        }
    }
}
