//! A client's connection as HTTP reads and writes it: plain TCP, or TLS
//! over it. Both protocols serve either the same way.
//!
//! TLS buffers: a write may leave bytes inside the TLS session when the
//! socket is full, so whoever ends a message flushes (a no-op on TCP).

use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;

/// Plain TCP (`Left`) or TLS over it (`Right`, boxed: a TLS session is
/// large, and most connections are plain).
pub type ClientIo = Either<TcpStream, Box<TlsStream<TcpStream>>>;
