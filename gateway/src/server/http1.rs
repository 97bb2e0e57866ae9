//! HTTP/1.x clients: one loop per connection reads a request head, has it
//! forwarded, and writes the answer; keep-alive and pipelining included.
//!
//! Nothing is translated through a header map: the request's header lines
//! go upstream as they arrived (less what must not cross), and the
//! upstream's come back the same way. A response that arrived whole leaves
//! in one write with its head.
//!
//! ## Connection rules
//! - A client has the header timeout (`[node] header_timeout`, 30 s) to
//!   finish a head it started, and an idle keep-alive connection the idle
//!   timeout (`[node] idle_timeout`, 60 s) to start the next one; past
//!   either, the connection is closed.
//! - A request body that stops arriving for the body bound (`[global]
//!   body_timeout`) ends the request with 408.
//! - A malformed head gets 400 (431 when too large) and the connection is
//!   closed; nothing of it is forwarded.
//! - The connection is kept only when both sides allow it and the request
//!   body was read to its end.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, StatusCode, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{Instant, sleep_until};

use super::ClientLimits;
use super::spare;
use super::stream::ClientIo;
use crate::access::Record;
use crate::ending::{Bound, Cause, Ending, Phase};
use crate::h1::body::{BodyDecoder, BodyEncoder, Decoded, Framed};
use crate::h1::request::{BodyKind, RequestParts, can_begin, parse_request};
use crate::h1::response::{BodyFraming, ClientFraming, end_response_head, write_status_line};
use crate::h1::{self, FieldAt, ParseError};
use crate::proxy::forward::Trace;
use crate::proxy::{
    Answer, AnswerBody, BodyError, Client, ClientRequest, Fields, Page, Proxy, ProxyError,
    RequestBody, RequestId, Route, forward,
};
use crate::shutdown::Shutdown;
use crate::upstream::{Io, UpstreamBody};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes reserved when the read buffer runs low.
const READ_CHUNK: usize = 8 * 1024;

/// What a client speaks, told from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// A client connection and its buffers, kept across its requests.
pub struct ClientConn {
    io: ClientIo,
    /// Bytes read and not yet used.
    buf: BytesMut,
    /// The response head being written.
    out: Vec<u8>,
    /// The header list of the last request, for its allocation.
    fields: Vec<FieldAt>,
    limits: ClientLimits,
}

impl ClientConn {
    pub fn new(io: ClientIo, limits: ClientLimits) -> ClientConn {
        ClientConn {
            io,
            buf: BytesMut::new(),
            out: Vec::new(),
            fields: Vec::new(),
            limits,
        }
    }

    async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(READ_CHUNK);
        }
        self.io.read_buf(&mut self.buf).await
    }

    /// Reads the first bytes of a request, the buffer empty: while the
    /// client has sent nothing, the connection holds no read buffer, head
    /// buffer or header list (nginx frees its buffers the same way), so
    /// that an idle keep-alive client costs little more than its socket.
    /// The buffers go to the thread's shelf ([`spare`]), where the next
    /// connection to read takes them. TLS sessions keep their own buffers
    /// and read as before.
    ///
    /// The read goes through tokio's `poll_read`, which takes a read that
    /// did not fill the buffer as proof that the socket is drained (epoll
    /// is edge-triggered) and forgets its readiness: the wait for the next
    /// request then costs no read that finds nothing. (`try_read` keeps
    /// the readiness until a read finds nothing: one more `recvfrom` per
    /// keep-alive request.)
    async fn fill_idle(&mut self) -> io::Result<usize> {
        let tokio_util::either::Either::Left(tcp) = &mut self.io else {
            return self.fill().await;
        };
        let (buf, out, fields) = (&mut self.buf, &mut self.out, &mut self.fields);
        std::future::poll_fn(|cx| {
            // Polled rather than awaited through `readable()`, whose future
            // an idle task would hold.
            let read = match tcp.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {
                    spare::take(buf);
                    if buf.capacity() - buf.len() < 1024 {
                        buf.reserve(READ_CHUNK);
                    }
                    tokio_util::io::poll_read_buf(Pin::new(&mut *tcp), cx, buf)
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            };
            match read {
                // Nothing to read: the buffers go to the shelf while the
                // client is idle.
                Poll::Pending => {
                    if buf.is_empty() {
                        spare::put(buf);
                    }
                    spare::put(out);
                    spare::put(fields);
                }
                // A request begins: it takes its head buffer and header
                // list now (a client that closed takes none off the shelf
                // only to free them).
                Poll::Ready(Ok(n)) if n > 0 => {
                    spare::take(out);
                    spare::take(fields);
                }
                Poll::Ready(_) => {}
            }
            read
        })
        .await
    }

    /// Closes the connection with nothing left to read: TLS says
    /// close_notify first; plain TCP is simply closed (the kernel sends
    /// the FIN), without a `shutdown` call of its own.
    async fn close(&mut self) {
        if let tokio_util::either::Either::Right(tls) = &mut self.io {
            let _ = tls.shutdown().await;
        }
    }

    /// Reads until the protocol is known: the HTTP/2 preface, or anything
    /// else. `None` when the client goes away or stays silent.
    pub async fn sniff(&mut self) -> Option<Protocol> {
        let deadline = Instant::now() + self.limits.header;
        loop {
            let n = self.buf.len().min(H2_PREFACE.len());
            if self.buf[..n] != H2_PREFACE[..n] {
                return Some(Protocol::Http1);
            }
            if n == H2_PREFACE.len() {
                return Some(Protocol::Http2);
            }
            tokio::select! {
                read = self.fill_idle() => match read {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                },
                () = sleep_until(deadline) => return None,
            }
        }
    }

    /// The connection is done: its buffers go to the thread's shelf, where
    /// the next connection to read takes them. Freed instead, a client that
    /// opens a connection a request would have the node allocate, and grow
    /// a reallocation at a time, a read buffer, head buffer and header list
    /// for each request.
    pub fn shelve(&mut self) {
        spare::put(&mut self.buf);
        spare::put(&mut self.out);
        spare::put(&mut self.fields);
    }

    /// The bounds the connection is served under.
    pub fn limits(&self) -> ClientLimits {
        self.limits
    }

    /// The stream with the bytes read so far put back in front, for hyper.
    pub fn into_rewind(self) -> Rewind {
        Rewind {
            prefix: self.buf.freeze(),
            io: self.io,
        }
    }
}

/// A stream whose first bytes were already read.
pub struct Rewind {
    prefix: Bytes,
    io: ClientIo,
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.prefix.is_empty() {
                // Releases the read buffer it was cut from.
                this.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// What the connection does after a request.
enum Next {
    KeepAlive,
    Close,
    /// The upstream switched protocols: the connection becomes a tunnel.
    Tunnel {
        upstream: Io,
        leftover: Bytes,
    },
}

enum Read {
    Request(RequestParts),
    /// Closed, timed out, or shutting down while idle.
    Gone,
    Refused(ParseError),
}

/// Serves requests on `conn` until either side closes it.
///
/// While the connection waits for a request its task holds little: what a
/// request needs (routing, forwarding, writing the answer, a tunnel, the
/// lingering close and its buffer) is boxed and allocated only while it
/// runs, so that ten thousand idle keep-alive clients do not each keep the
/// largest request's state. The connection, its client and the shutdown
/// signal are the caller's, borrowed: an async function keeps what it owns
/// twice over.
pub async fn serve(conn: &mut ClientConn, proxy: &Proxy, client: &Client, shutdown: &mut Shutdown) {
    loop {
        let read = read_request(conn, shutdown).await;
        if matches!(read, Read::Gone)
            || !Box::pin(answer(conn, read, proxy, client, shutdown)).await
        {
            return;
        }
    }
}

/// Answers what [`read_request`] read: whether the connection goes on to
/// its next request.
async fn answer(
    conn: &mut ClientConn,
    read: Read,
    proxy: &Proxy,
    client: &Client,
    shutdown: &Shutdown,
) -> bool {
    let parts = match read {
        Read::Request(parts) => parts,
        Read::Gone => return false,
        Read::Refused(error) => {
            Box::pin(refuse(conn, error, proxy, client)).await;
            return false;
        }
    };
    let bodiless = parts.body == BodyKind::None;
    match one(conn, parts, proxy, client).await {
        Next::KeepAlive if !shutdown.is_fired() => true,
        Next::Tunnel { upstream, leftover } => {
            Box::pin(tunnel(conn, upstream, leftover)).await;
            false
        }
        // Nothing of the client's is left unread, as far as the node can
        // know: closed at once, as nginx does, rather than waiting for the
        // client's end (one wake-up and up to 2 s per connection that
        // churns).
        Next::KeepAlive | Next::Close if bodiless && conn.buf.is_empty() => {
            conn.close().await;
            false
        }
        Next::KeepAlive | Next::Close => {
            Box::pin(linger(conn)).await;
            false
        }
    }
}

/// Answers a head that could not be parsed (400, 431 or 501), logs it, and
/// closes the connection.
async fn refuse(conn: &mut ClientConn, error: ParseError, proxy: &Proxy, client: &Client) {
    let started = Instant::now();
    let time = std::time::SystemTime::now();
    let id = RequestId::generate();
    proxy.metrics().connections.refused.inc();
    let status = match error {
        ParseError::HeadTooLarge | ParseError::TooManyHeaders => {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        }
        ParseError::TransferEncoding => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::BAD_REQUEST,
    };
    let body = format!(
        "{} {}\n{error}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let page = Page {
        status,
        content_type: "text/plain; charset=utf-8",
        body: format!("{body}request id: {}\n", id.as_str()).into(),
        retry_after: None,
        location: None,
        request_id: Some(id),
    };
    let written = write_page(conn, &page, Version::HTTP_11, false, false).await;
    if let Some(log) = proxy.access_log() {
        log.log(&Record {
            time,
            client: client.ip(),
            method: "-",
            host: None,
            path: b"-",
            protocol: "HTTP/1.1",
            status: status.as_u16(),
            bytes_in: 0,
            bytes_out: written.as_ref().map_or(0, |n| *n),
            duration: started.elapsed(),
            route: None,
            replica: None,
            tries: 0,
            decided_by: Some("bad_request"),
            ending: match written {
                Ok(_) => Ending::new(Cause::NodeRefused, Phase::Request),
                Err(_) => Ending::new(Cause::ClientGone, Phase::Body),
            },
            request_id: id.as_str(),
            user_agent: None,
            referer: None,
        });
    }
    if written.is_ok() {
        linger(conn).await;
    }
}

async fn read_request(conn: &mut ClientConn, shutdown: &mut Shutdown) -> Read {
    let mut deadline = Instant::now() + conn.limits.idle;
    let mut started = false;
    // Bytes of the buffer already searched for the end of the head: a head
    // is parsed once it is whole (or too large), not on every read.
    let mut scanned = 0;
    // Whether the head's first bytes were found able to begin a request
    // line: looked at only until [`REQUEST_LINE_PREFIX`] bytes or a line
    // end have come, so a head that trickles in is never scanned again.
    let mut beginning_checked = false;
    loop {
        if !conn.buf.is_empty() {
            if h1::has_head_end(&conn.buf, scanned) || conn.buf.len() > h1::MAX_HEAD {
                match parse_request(&mut conn.buf, &mut conn.fields) {
                    Ok(Some(parts)) => return Read::Request(parts),
                    Ok(None) => {}
                    Err(error) => return Read::Refused(error),
                }
            } else if !beginning_checked {
                // A TLS ClientHello on the plain port, or anything else
                // that no blank line will ever end: refused now, not at the
                // head bound.
                let prefix = &conn.buf[..conn.buf.len().min(REQUEST_LINE_PREFIX)];
                if !can_begin(prefix) {
                    return Read::Refused(ParseError::Head("not an HTTP/1 request line".into()));
                }
                beginning_checked = prefix.len() == REQUEST_LINE_PREFIX || prefix.contains(&b'\n');
            }
            scanned = conn.buf.len();
            if !started {
                started = true;
                deadline = Instant::now() + conn.limits.header;
            }
        }
        let idle = conn.buf.is_empty();
        let read = async {
            if idle {
                conn.fill_idle().await
            } else {
                conn.fill().await
            }
        };
        tokio::select! {
            read = read => match read {
                Ok(0) | Err(_) => return Read::Gone,
                Ok(_) => {}
            },
            () = sleep_until(deadline) => return Read::Gone,
            () = shutdown.wait(), if idle => return Read::Gone,
        }
    }
}

/// The first bytes of a head looked at for whether they can begin a
/// request line: enough for any method and the start of a target.
const REQUEST_LINE_PREFIX: usize = 32;

/// How long a closing connection's unread bytes are read and dropped.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Closes a connection the lingering way, as nginx does when the client
/// may still be sending (a body not read to its end, bytes past the last
/// request): our side is shut first, then what the client still sends is
/// read and dropped for at most [`LINGER`]. Closed at once, those unread
/// bytes would reset the connection and could destroy the answer before
/// the client reads it.
async fn linger(conn: &mut ClientConn) {
    if conn.io.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4 * 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(conn.io.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// What the access log learns of a request as it is served.
struct Served {
    status: StatusCode,
    bytes_out: u64,
    decided_by: Option<&'static str>,
    ending: Ending,
}

/// Serves one request.
async fn one(conn: &mut ClientConn, parts: RequestParts, proxy: &Proxy, client: &Client) -> Next {
    let started = Instant::now();
    let time = std::time::SystemTime::now();
    let id = RequestId::of_request(parts.get(b"x-request-id"));
    let version = parts.version;
    let head_request = parts.method == Method::HEAD;
    let mut trace = Trace::default();
    let mut bytes_in = 0;
    let route = if parts.method == Method::CONNECT {
        Err(ProxyError::Connect)
    } else if version == Version::HTTP_11 && parts.host.is_none() {
        Err(ProxyError::BadRequest(
            "HTTP/1.1 request without Host header",
        ))
    } else {
        proxy.route(parts.host.as_deref(), &parts.path, client)
    };
    let mut routed_to = None;
    let (next, served) = match route {
        Ok(route) => {
            let served = routed(conn, &parts, &route, client, &id, &mut trace, &mut bytes_in).await;
            routed_to = Some(route);
            served
        }
        Err(error) => {
            // The body, if any, was not read: the connection cannot go on.
            let keep = parts.keep_alive && parts.body == BodyKind::None;
            let page = error.page(parts.get(b"accept"), &id);
            let written = write_page(conn, &page, version, keep, head_request).await;
            let next = match written {
                Ok(_) if keep => Next::KeepAlive,
                _ => Next::Close,
            };
            let served = Served {
                status: page.status,
                bytes_out: *written.as_ref().unwrap_or(&0),
                decided_by: Some(error.decided_by()),
                ending: match written {
                    Ok(_) => error.ending(),
                    Err(_) => Ending::new(Cause::ClientGone, Phase::Body),
                },
            };
            (next, served)
        }
    };
    if let Some(log) = proxy.access_log() {
        let request = Request {
            parts: &parts,
            client,
            time,
            started,
            id: &id,
        };
        let route = routed_to.as_ref().map(|r| r.config.name.as_str());
        log_request(log, &request, route, &served, &trace, bytes_in);
    }
    conn.fields = parts.into_fields();
    next
}

/// A request as the access log names it.
struct Request<'a> {
    parts: &'a RequestParts,
    client: &'a Client,
    time: std::time::SystemTime,
    started: Instant,
    id: &'a RequestId,
}

/// Writes a request's line to the access log.
fn log_request(
    log: &crate::access::AccessLog,
    request: &Request<'_>,
    route: Option<&str>,
    served: &Served,
    trace: &Trace,
    bytes_in: u64,
) {
    let Request {
        parts,
        client,
        time,
        started,
        id,
    } = *request;
    log.log(&Record {
        time,
        client: client.ip(),
        method: parts.method.as_str(),
        host: parts.host.as_deref(),
        path: &parts.path,
        protocol: match parts.version {
            Version::HTTP_10 => "HTTP/1.0",
            _ => "HTTP/1.1",
        },
        status: served.status.as_u16(),
        bytes_in,
        bytes_out: served.bytes_out,
        duration: started.elapsed(),
        route,
        replica: trace.replica.as_ref().map(|r| r.label.as_str()),
        tries: trace.tries,
        decided_by: served.decided_by,
        ending: served.ending,
        request_id: id.as_str(),
        user_agent: parts.get(b"user-agent"),
        referer: parts.get(b"referer"),
    });
}

/// Serves a request that has a route: forwards it and writes the answer.
async fn routed(
    conn: &mut ClientConn,
    parts: &RequestParts,
    route: &Arc<Route>,
    client: &Client,
    id: &RequestId,
    trace: &mut Trace,
    bytes_in: &mut u64,
) -> (Next, Served) {
    let version = parts.version;
    let head_request = parts.method == Method::HEAD;
    let req = ClientRequest {
        method: &parts.method,
        path: &parts.path,
        host: parts.host.as_deref(),
        fields: Fields::Raw(parts),
        upgrade: parts.upgrade.as_deref(),
        body: parts.body,
        grpc: crate::proxy::grpc::is_call(&Fields::Raw(parts)),
        id,
    };
    let mut body = ClientBody::new(
        &mut conn.io,
        &mut conn.buf,
        parts.body,
        parts.expect_continue,
        route.config.body_timeout,
    );
    let result = forward(route, &req, &mut body, client, trace).await;
    let body_done = body.is_done();
    *bytes_in = body.read;
    let keep = parts.keep_alive && body_done;
    let mut served = Served {
        status: StatusCode::OK,
        bytes_out: 0,
        decided_by: None,
        ending: Ending::COMPLETE,
    };
    let next = match result {
        Ok(answer) => {
            route.metrics.count(answer.head.status);
            served.status = answer.head.status;
            let reply = Reply {
                route,
                id,
                grpc: req.grpc,
                host: parts.host.as_deref(),
                version,
                keep,
                head_request,
            };
            match write_answer(conn, answer, reply, &mut served.bytes_out).await {
                Ok(next) => next,
                Err(cut) => {
                    tracing::debug!(route = %route.config.name, ?cut, "answer cut");
                    served.ending = cut.ending();
                    Next::Close
                }
            }
        }
        Err(error) => {
            tracing::debug!(route = %route.config.name, %error, "request failed");
            let page = error.page(parts.get(b"accept"), id);
            route.metrics.count(page.status);
            served.status = page.status;
            served.decided_by = Some(error.decided_by());
            served.ending = error.ending();
            match write_page(conn, &page, version, keep, head_request).await {
                Ok(n) => {
                    served.bytes_out = n;
                    if keep { Next::KeepAlive } else { Next::Close }
                }
                Err(_) => {
                    served.ending = Ending::new(Cause::ClientGone, Phase::Body);
                    Next::Close
                }
            }
        }
    };
    route.metrics.ended(served.ending);
    (next, served)
}

/// How an answer goes back to its client.
struct Reply<'a> {
    route: &'a Route,
    id: &'a RequestId,
    /// A gRPC call: the replica's trailers are its metadata.
    grpc: bool,
    /// The host the client asked for, for redirects naming it.
    host: Option<&'a [u8]>,
    version: Version,
    keep: bool,
    head_request: bool,
}

/// Writes a page the gateway made; the bytes of its body written.
async fn write_page(
    conn: &mut ClientConn,
    page: &Page,
    version: Version,
    keep: bool,
    head_request: bool,
) -> io::Result<u64> {
    conn.out.clear();
    write_status_line(&mut conn.out, page.status);
    h1::write_header(&mut conn.out, b"content-type", page.content_type.as_bytes());
    if let Some(seconds) = page.retry_after {
        h1::write_header(
            &mut conn.out,
            b"retry-after",
            seconds.to_string().as_bytes(),
        );
    }
    if let Some(location) = &page.location {
        h1::write_header(&mut conn.out, b"location", location.as_bytes());
    }
    if let Some(id) = &page.request_id {
        h1::write_header(&mut conn.out, b"x-request-id", id.as_bytes());
    }
    end_response_head(
        &mut conn.out,
        ClientFraming::Length(page.body.len() as u64),
        keep,
        version,
    );
    if !head_request {
        conn.out.extend_from_slice(&page.body);
    }
    // A page is small: its whole write is bounded.
    let (io, out) = (&mut conn.io, &conn.out);
    tokio::time::timeout(conn.limits.send, async {
        io.write_all(out).await?;
        io.flush().await
    })
    .await
    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    Ok(if head_request {
        0
    } else {
        page.body.len() as u64
    })
}

/// Why an answer did not reach its client whole.
#[derive(Debug)]
enum Cut {
    /// Writing to the client failed: it closed or reset the connection.
    Client,
    /// The client took nothing of the answer for the send bound.
    Stalled,
    /// The replica's body broke off: closed, reset, or bytes that do not
    /// parse.
    Replica(io::Error),
    /// What the replica sent does not fit the framing the client was
    /// promised (a body shorter or longer than its length): refused, and
    /// the connection closed, so that the client sees it cut.
    Framing,
}

impl Cut {
    fn ending(&self) -> Ending {
        match self {
            Cut::Client => Ending::new(Cause::ClientGone, Phase::Body),
            Cut::Stalled => Ending::new(Cause::Bound(Bound::Send), Phase::Body),
            Cut::Replica(e) => Ending::of_replica_error(e),
            Cut::Framing => Ending::new(Cause::NodeRefused, Phase::Body),
        }
    }
}

/// Writes an upstream's answer: its head (through the route's response
/// rules, with the request's ID), then its body as it arrives, counting
/// in `bytes_out` the body bytes written to the client.
async fn write_answer(
    conn: &mut ClientConn,
    answer: Answer,
    reply: Reply<'_>,
    bytes_out: &mut u64,
) -> Result<Next, Cut> {
    let Reply {
        route,
        id,
        grpc,
        host,
        version,
        keep,
        head_request,
    } = reply;
    let Answer { head, body } = answer;
    conn.out.clear();
    write_status_line(&mut conn.out, head.status);
    let out = &mut conn.out;
    crate::proxy::rules::response_fields(head.fields(), route, id, host, |name, value| {
        h1::write_header(out, name, value)
    });
    let mut body = match body {
        AnswerBody::Switched { io, leftover } => {
            if let Some(protocol) = &head.upgrade {
                h1::write_header(&mut conn.out, b"connection", b"upgrade");
                h1::write_header(&mut conn.out, b"upgrade", protocol);
            }
            conn.out.extend_from_slice(b"\r\n");
            conn.io
                .write_all(&conn.out)
                .await
                .map_err(|_| Cut::Client)?;
            conn.io.flush().await.map_err(|_| Cut::Client)?;
            return Ok(Next::Tunnel {
                upstream: io,
                leftover,
            });
        }
        AnswerBody::Stream(body) => body,
    };
    let framing = ClientFraming::for_client(&head, version);
    let keep = keep && framing != ClientFraming::UntilClose;
    end_response_head(&mut conn.out, framing, keep, version);
    // An answer to HEAD, a 204 or a 304 is its head alone, whatever it
    // declares.
    let encoder = match head.framing {
        BodyFraming::Empty => None,
        _ if head_request => None,
        _ => Some(framing.encoder()),
    };
    let rules = &route.config.response_headers;
    write_body(conn, &mut body, encoder, (rules, grpc), bytes_out).await?;
    Ok(if keep { Next::KeepAlive } else { Next::Close })
}

/// Frames one piece of a body: the last one with what ends the body.
fn frame(encoder: &mut BodyEncoder, data: Bytes, last: bool) -> Result<Framed, Cut> {
    let framed = match last {
        true => encoder.encode_last(data),
        false => encoder.encode(data),
    };
    framed.map_err(|_| Cut::Framing)
}

/// Writes all of `bytes` to the client and flushes: a stream's events
/// reach the client as they come. A write that makes no progress for
/// `bound` (the client stopped reading) gives the answer up; one that
/// keeps moving, however slowly, is never cut.
async fn send(io: &mut ClientIo, bytes: &mut impl Buf, bound: Duration) -> Result<(), Cut> {
    while bytes.has_remaining() {
        match tokio::time::timeout(bound, io.write_buf(bytes)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(Cut::Client),
            Ok(Ok(_)) => {}
            Err(_) => return Err(Cut::Stalled),
        }
    }
    match tokio::time::timeout(bound, io.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Cut::Client),
        Err(_) => Err(Cut::Stalled),
    }
}

/// Writes the head in `conn.out`, then the body framed by `encoder` (none:
/// the head alone), each piece as it arrives, and the trailers the
/// route's `rules` let cross; `bytes_out` counts the body bytes written.
async fn write_body(
    conn: &mut ClientConn,
    body: &mut UpstreamBody,
    encoder: Option<BodyEncoder>,
    (rules, grpc): (&crate::config::HeaderRules, bool),
    bytes_out: &mut u64,
) -> Result<(), Cut> {
    let Some(mut encoder) = encoder else {
        return send(&mut conn.io, &mut &conn.out[..], conn.limits.send).await;
    };
    // What already arrived goes out with the head, in one write.
    let first = body
        .next_buffered()
        .map_err(Cut::Replica)?
        .unwrap_or_default();
    let mut ended = http_body::Body::is_end_stream(body);
    let len = first.len() as u64;
    let first = frame(&mut encoder, first, ended)?;
    send(
        &mut conn.io,
        &mut Buf::chain(&conn.out[..], first),
        conn.limits.send,
    )
    .await?;
    *bytes_out += len;
    while !ended {
        let data = match body.frame().await {
            None => {
                ended = true;
                Bytes::new()
            }
            Some(Err(e)) => return Err(Cut::Replica(e)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    ended = http_body::Body::is_end_stream(body);
                    data
                }
                // Trailers end the body: written after the last chunk of
                // a chunked body, else left (no way to carry them).
                Err(frame) => {
                    let Ok(trailers) = frame.into_trailers() else {
                        continue;
                    };
                    let trailers = crate::proxy::rules::response_trailers(trailers, rules, grpc);
                    let fields = trailers
                        .iter()
                        .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
                    let mut end = encoder.finish_with(fields).map_err(|_| Cut::Framing)?;
                    return send(&mut conn.io, &mut end, conn.limits.send).await;
                }
            },
        };
        let len = data.len() as u64;
        send(
            &mut conn.io,
            &mut frame(&mut encoder, data, ended)?,
            conn.limits.send,
        )
        .await?;
        *bytes_out += len;
    }
    Ok(())
}

/// Joins the client's connection to the upstream's after a 101, and copies
/// bytes both ways until either closes. What either side sent past its
/// head goes first.
async fn tunnel(conn: &mut ClientConn, mut upstream: Io, leftover: Bytes) {
    let ClientConn { io, buf, .. } = conn;
    if !buf.is_empty() && upstream.write_all(buf).await.is_err() {
        return;
    }
    if !leftover.is_empty() && io.write_all(&leftover).await.is_err() {
        return;
    }
    if let Err(error) = tokio::io::copy_bidirectional(io, &mut upstream).await {
        tracing::debug!(%error, "upgraded connection ended");
    }
}

/// Tells the client to send its body, within `bound`.
async fn send_continue(io: &mut ClientIo, bound: Duration) -> io::Result<()> {
    tokio::time::timeout(bound, async {
        io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        io.flush().await
    })
    .await
    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// A request body read from the client connection, each read bounded by
/// the body inactivity bound.
struct ClientBody<'a> {
    io: &'a mut ClientIo,
    buf: &'a mut BytesMut,
    decoder: BodyDecoder,
    /// The client waits for `100 Continue` before sending its body.
    continue_pending: bool,
    /// The longest wait for the next bytes of the body.
    bound: std::time::Duration,
    /// The trailers of a chunked body, once read.
    trailers: Option<http::HeaderMap>,
    /// Body bytes read so far.
    read: u64,
}

impl<'a> ClientBody<'a> {
    fn new(
        io: &'a mut ClientIo,
        buf: &'a mut BytesMut,
        kind: BodyKind,
        expect_continue: bool,
        bound: std::time::Duration,
    ) -> ClientBody<'a> {
        let decoder = kind.decoder();
        let continue_pending = expect_continue && !decoder.is_done();
        ClientBody {
            io,
            buf,
            decoder,
            continue_pending,
            bound,
            trailers: None,
            read: 0,
        }
    }

    fn is_done(&self) -> bool {
        self.decoder.is_done()
    }

    fn error(e: io::Error) -> Option<Result<Bytes, BodyError>> {
        Some(Err(BodyError::from_io(e)))
    }
}

impl RequestBody for ClientBody<'_> {
    fn trailers(&mut self) -> Option<http::HeaderMap> {
        self.trailers.clone()
    }

    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        if self.continue_pending {
            self.continue_pending = false;
            if self.buf.is_empty()
                && let Err(e) = send_continue(self.io, self.bound).await
            {
                return Self::error(e);
            }
        }
        loop {
            match self.decoder.decode(self.buf) {
                Ok(Decoded::Data(data)) => {
                    self.read += data.len() as u64;
                    return Some(Ok(data));
                }
                Ok(Decoded::Trailers(lines)) => {
                    self.trailers = Some(crate::h1::body::trailer_map(&lines));
                    return None;
                }
                Ok(Decoded::Done) => return None,
                Ok(Decoded::NeedMore) => {}
                Err(e) => return Some(Err(BodyError::Framing(e))),
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(READ_CHUNK);
            }
            match tokio::time::timeout(self.bound, self.io.read_buf(self.buf)).await {
                Ok(Ok(0)) => {
                    return Self::error(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "client closed mid-body",
                    ));
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Self::error(e),
                Err(_) => return Some(Err(BodyError::timed_out(self.bound))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    fn ready(tcp: &TcpStream) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        tcp.poll_read_ready(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn a_request_read_whole_leaves_no_readiness_behind() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let mut client = client.unwrap();
        let limits = ClientLimits {
            header: std::time::Duration::from_secs(5),
            idle: std::time::Duration::from_secs(5),
            send: std::time::Duration::from_secs(5),
            max_connections: 1,
        };
        let mut conn = ClientConn::new(
            tokio_util::either::Either::Left(accepted.unwrap().0),
            limits,
        );
        for _ in 0..2 {
            let request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
            client.write_all(request).await.unwrap();
            conn.buf.clear();
            let n = conn.fill_idle().await.unwrap();
            assert_eq!(n, request.len());
            // The read did not fill the buffer: the socket is drained, and
            // the wait for the next request starts with no read that would
            // find nothing.
            let tokio_util::either::Either::Left(tcp) = &conn.io else {
                unreachable!("a plain connection")
            };
            assert!(!ready(tcp), "readiness kept after the socket was drained");
        }
        // An idle connection gives its buffers back.
        conn.buf.clear();
        let idle =
            tokio::time::timeout(std::time::Duration::from_millis(50), conn.fill_idle()).await;
        assert!(idle.is_err(), "nothing to read");
        assert_eq!(
            conn.buf.capacity(),
            0,
            "the read buffer is shelved while idle"
        );
        assert_eq!(
            conn.out.capacity(),
            0,
            "the head buffer is shelved while idle"
        );
    }

    /// A connection that ends leaves its buffers to the next one on its
    /// thread: a client that opens a connection a request does not have
    /// the node allocate and grow them again each time.
    #[tokio::test]
    async fn a_connection_that_ends_leaves_its_buffers_to_the_next() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ClientLimits {
            header: std::time::Duration::from_secs(5),
            idle: std::time::Duration::from_secs(5),
            send: std::time::Duration::from_secs(5),
            max_connections: 2,
        };
        let mut first = None;
        for _ in 0..2 {
            let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
            let mut client = client.unwrap();
            let mut conn = ClientConn::new(
                tokio_util::either::Either::Left(accepted.unwrap().0),
                limits,
            );
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .await
                .unwrap();
            conn.fill_idle().await.unwrap();
            let at = conn.buf.as_ptr();
            conn.out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            match first {
                None => first = Some((at, conn.out.as_ptr())),
                Some((buf, out)) => {
                    assert_eq!(at, buf, "the read buffer of the connection before");
                    assert_eq!(conn.out.as_ptr(), out, "its head buffer");
                }
            }
            conn.shelve();
            assert_eq!(conn.buf.capacity() + conn.out.capacity(), 0);
        }
    }
}
