//! The stream to a replica, plain or TLS, as both protocols use it.

use tokio::net::TcpStream;
use tokio_util::either::Either;

/// A plain (`Left`) or TLS (`Right`) stream to a replica.
pub type Io = Either<TcpStream, Box<tokio_rustls::client::TlsStream<TcpStream>>>;

/// The TCP stream under either.
pub(super) fn tcp(io: &Io) -> &TcpStream {
    match io {
        Either::Left(tcp) => tcp,
        Either::Right(tls) => tls.get_ref().0,
    }
}
