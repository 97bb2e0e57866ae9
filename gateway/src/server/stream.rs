//! A client's connection as HTTP reads and writes it: plain TCP, or TLS
//! over it. Both protocols serve either the same way.
//!
//! TLS buffers: a write may leave bytes inside the TLS session when the
//! socket is full, so whoever ends a message flushes (a no-op on TCP).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

pub enum ClientIo {
    Plain(TcpStream),
    /// Boxed: a TLS session is large, and most connections are plain.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            ClientIo::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientIo::Plain(io) => Pin::new(io).poll_write(cx, buf),
            ClientIo::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientIo::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            ClientIo::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientIo::Plain(io) => io.is_write_vectored(),
            ClientIo::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Plain(io) => Pin::new(io).poll_flush(cx),
            ClientIo::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            ClientIo::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}
