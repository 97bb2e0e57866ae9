//! One HTTP/1.1 connection to a replica, driven by the task that serves
//! the client: it writes the request, reads the response head, and lends
//! itself to the response body, which gives it back to the pool when the
//! body has been read to its end. HTTP/2 connections are in [`super::http2`];
//! what serves either is in [`super::conn`].

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::Method;
use http_body::{Body, Frame, SizeHint};
use tokio::io::AsyncWriteExt;
use tokio_util::either::Either;
use tokio_util::io::poll_read_buf;

use super::Release;
use super::io::{Io, tcp};
use crate::h1::body::{BodyDecoder, Decoded, Framed};
use crate::h1::response::{self, BodyFraming, ResponseHead};
use crate::h1::{self, ParseError};

/// Bytes reserved when the read buffer runs low.
const READ_CHUNK: usize = 8 * 1024;
/// Spare capacity below which the read buffer grows before a read: small
/// responses then share one allocation for many requests.
const READ_LOW: usize = 1024;

fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < READ_LOW {
        buf.reserve(READ_CHUNK);
    }
}

/// What went wrong on an upstream connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("upstream closed the connection before answering")]
    Closed,
    #[error("upstream connection failed: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// An open HTTP/1.1 connection to a replica.
pub struct Connection {
    io: Io,
    /// Bytes read and not yet used.
    buf: BytesMut,
    /// The request head being written; kept to reuse its allocation.
    head: Vec<u8>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Connection {
    pub fn new(io: Io) -> Connection {
        Connection {
            io,
            buf: BytesMut::new(),
            head: Vec::new(),
        }
    }

    /// Whether an idle connection is still usable: the upstream has not
    /// closed it, nor sent anything unasked. Costs a syscall only when the
    /// socket has signalled readability since its last read.
    pub fn is_usable(&mut self) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        match tcp(&self.io).poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(tcp(&self.io).try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// After a TLS 1.3 handshake, waits up to `within` for the replica to
    /// refuse it. In TLS 1.3 a server judges the client's certificate (or
    /// its absence) after the client has finished the handshake, so a
    /// replica that requires one this node does not present accepts the
    /// handshake and answers with an alert a round trip later: the first
    /// request would fail, and a check that stops at the handshake would
    /// pass. Returns the refusal; `None` when nothing came, or when the
    /// connection is plain or TLS 1.2 (whose handshake carries the verdict).
    /// What is read is dropped: the connection is for a check only.
    pub async fn refused_after_handshake(
        &mut self,
        within: std::time::Duration,
    ) -> Option<io::Error> {
        use tokio::io::AsyncReadExt;
        let Either::Right(tls) = &mut self.io else {
            return None;
        };
        if tls.get_ref().1.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
            return None;
        }
        let mut scratch = [0u8; 64];
        match tokio::time::timeout(within, tls.read(&mut scratch)).await {
            Err(_) | Ok(Ok(1..)) => None,
            Ok(Ok(0)) => Some(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed right after the TLS handshake",
            )),
            Ok(Err(e)) => Some(e),
        }
    }

    /// The buffer a request head is encoded into.
    pub fn head_buffer(&mut self) -> &mut Vec<u8> {
        self.head.clear();
        &mut self.head
    }

    /// Writes the encoded head alone.
    pub async fn write_head(&mut self) -> io::Result<()> {
        self.io.write_all(&self.head).await
    }

    /// Writes the encoded head and the first piece of the body, in one
    /// write when the stream takes vectors.
    pub async fn write_head_and_body(&mut self, first: Framed) -> io::Result<()> {
        let mut all = self.head.as_slice().chain(first);
        self.io.write_all_buf(&mut all).await
    }

    /// Writes one piece of a request body, framed.
    pub async fn write_body(&mut self, mut framed: impl Buf + Send) -> io::Result<()> {
        self.io.write_all_buf(&mut framed).await
    }

    /// Reads the response head.
    pub async fn read_head(&mut self, method: &Method) -> Result<ResponseHead, ConnError> {
        // Parsed once the head is whole (or too large), not on every read.
        let mut scanned = 0;
        loop {
            let whole = h1::has_head_end(&self.buf, scanned) || self.buf.len() > h1::MAX_HEAD;
            if whole && let Some(head) = response::parse_response(&mut self.buf, method)? {
                return Ok(head);
            }
            scanned = self.buf.len();
            self.buf.reserve(READ_CHUNK);
            let n =
                std::future::poll_fn(|cx| poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf))
                    .await?;
            if n == 0 {
                return Err(ConnError::Closed);
            }
        }
    }

    /// The connection as raw bytes, for an upgrade: the stream and what was
    /// read past the 101 head.
    pub fn into_parts(self) -> (Io, Bytes) {
        (self.io, self.buf.freeze())
    }

    /// The stream, for a protocol that takes it over (HTTP/2).
    pub fn into_io(self) -> Io {
        self.io
    }

    /// When the certificate the replica presented expires (Unix seconds):
    /// `None` over plain TCP, or when it cannot be read.
    pub fn peer_not_after(&self) -> Option<i64> {
        let Either::Right(tls) = &self.io else {
            return None;
        };
        let leaf = tls.get_ref().1.peer_certificates()?.first()?;
        crate::certificate::validity::validity(leaf).map(|(_, not_after)| not_after)
    }

    /// The protocol the TLS handshake agreed on, if any.
    pub fn alpn_h2(&self) -> bool {
        match &self.io {
            Either::Right(tls) => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
            Either::Left(_) => false,
        }
    }
}

/// A response body read from an HTTP/1.1 connection.
pub struct H1Body {
    conn: Option<Connection>,
    decoder: BodyDecoder,
    /// Whether the connection can carry another request after this body.
    reusable: bool,
    release: Option<Release>,
    /// Header names holding `_` pass in trailers.
    underscores: bool,
    /// Trailers decoded with the last data, for the next poll.
    trailers: Option<Box<http::HeaderMap>>,
}

impl std::fmt::Debug for H1Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Body")
            .field("reusable", &self.reusable)
            .finish_non_exhaustive()
    }
}

impl H1Body {
    pub fn new(
        conn: Connection,
        framing: BodyFraming,
        keep_alive: bool,
        release: Option<Release>,
    ) -> H1Body {
        let decoder = match framing {
            BodyFraming::Empty => BodyDecoder::empty(),
            BodyFraming::Length(n) => BodyDecoder::length(n),
            BodyFraming::Chunked => BodyDecoder::chunked(),
            BodyFraming::UntilClose => BodyDecoder::until_close(),
        };
        let underscores = release.as_ref().is_some_and(|r| r.upstream.underscores());
        let mut body = H1Body {
            conn: Some(conn),
            decoder,
            reusable: keep_alive,
            release,
            underscores,
            trailers: None,
        };
        // hyper does not poll a body that is already at its end.
        if body.decoder.is_done() {
            body.finish();
        }
        body
    }

    /// The body has ended: the connection goes back to its pool if it can
    /// carry another request.
    fn finish(&mut self) {
        let (Some(mut conn), Some(release)) = (self.conn.take(), self.release.take()) else {
            return;
        };
        release.upstream.ended_whole(&release.replica);
        // Bytes past the end of the body (read, or waiting in the socket)
        // are an answer nobody asked for: the connection is not reused.
        if self.reusable && conn.buf.is_empty() && conn.is_usable() {
            release.upstream.pool.checkin(&release.replica, conn);
        }
    }

    fn fail(
        &mut self,
        error: impl Into<io::Error>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Poll::Ready(Some(Err(self.broke_off(error.into()))))
    }

    /// The replica's answer broke off with `error` (closed, reset, or
    /// bytes that do not parse): the connection is dropped, and the
    /// replica's health hears of it.
    fn broke_off(&mut self, error: io::Error) -> io::Error {
        self.decoder = BodyDecoder::empty();
        self.conn = None;
        if let Some(release) = self.release.take() {
            let garbled = error.kind() == io::ErrorKind::InvalidData;
            release.upstream.broke_off(&release.replica, garbled);
        }
        error
    }
}

/// What the bytes already read hold of the body.
enum Buffered {
    Data(Bytes),
    /// The trailers that may cross; the body has ended.
    Trailers(http::HeaderMap),
    /// Read more.
    Nothing,
    End,
}

impl H1Body {
    pub(super) fn next_buffered(&mut self) -> io::Result<Option<Bytes>> {
        match self.buffered()? {
            Buffered::Data(data) => Ok(Some(data)),
            // Kept for the next poll: trailers go out as a frame.
            Buffered::Trailers(trailers) => {
                self.trailers = Some(Box::new(trailers));
                Ok(None)
            }
            Buffered::Nothing | Buffered::End => Ok(None),
        }
    }

    fn buffered(&mut self) -> io::Result<Buffered> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Buffered::End);
        };
        let found = match self.decoder.decode(&mut conn.buf) {
            Ok(Decoded::Data(data)) => Buffered::Data(data),
            Ok(Decoded::Trailers(lines)) => Buffered::Trailers(crate::h1::body::clean_trailers(
                crate::h1::body::trailer_map(&lines),
                self.underscores,
            )),
            Ok(Decoded::NeedMore) => Buffered::Nothing,
            Ok(Decoded::Done) => Buffered::End,
            Err(e) => return Err(self.broke_off(e.into())),
        };
        // The end is known as soon as the last byte is taken: the
        // connection goes back to the pool before the data is even written.
        if self.decoder.is_done() {
            self.finish();
        }
        Ok(found)
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(trailers) = this.trailers.take() {
            return Poll::Ready((!trailers.is_empty()).then(|| Ok(Frame::trailers(*trailers))));
        }
        loop {
            match this.buffered() {
                Ok(Buffered::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(Buffered::Trailers(trailers)) => {
                    return Poll::Ready(
                        (!trailers.is_empty()).then(|| Ok(Frame::trailers(trailers))),
                    );
                }
                Ok(Buffered::End) => return Poll::Ready(None),
                Ok(Buffered::Nothing) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            make_room(&mut conn.buf);
            let read = ready!(poll_read_buf(Pin::new(&mut conn.io), cx, &mut conn.buf));
            match read {
                Ok(0) => {
                    if this.decoder.at_eof().is_err() {
                        return this.fail(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "upstream closed mid-body",
                        ));
                    }
                    this.reusable = false;
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(_) => {}
                Err(e) => return this.fail(e),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
