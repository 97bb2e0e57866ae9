//! Why a TLS handshake with an upstream failed, in a few words that fit a
//! replica's state and a verdict.
//!
//! rustls says why in detail (the names a certificate was valid for, the
//! times it was valid between); that text is logged once, when the replica
//! is ejected. What the replica's state keeps is a [`TlsFailure`]: small and
//! `Copy`, like every other ejection reason, and the same from one failed
//! handshake to the next, so that a verdict changes when the cause does and
//! not on every check.

use std::fmt;
use std::io;

use rustls::{AlertDescription, CertificateError};

/// What went wrong in a TLS handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// The certificate chains to no root this node trusts.
    UnknownIssuer,
    Expired,
    NotValidYet,
    /// The certificate does not name the upstream.
    NotValidForName,
    Revoked,
    /// Any other fault of the certificate (signature, encoding, purpose).
    BadCertificate,
    /// The upstream ended the handshake with a fatal alert.
    Alert(AlertDescription),
    /// What the upstream sent is not TLS (a plain HTTP server, say).
    NotTls,
    /// The upstream speaks no version or cipher suite this node accepts.
    Incompatible,
    /// The connection ended before the handshake did.
    Closed,
    /// The upstream's name cannot be verified by TLS.
    InvalidName,
    Other,
}

impl TlsFailure {
    /// The failure of a handshake that ended with `e` (as tokio-rustls
    /// reports it: rustls' own error inside an `io::Error`).
    pub fn of(e: &io::Error) -> TlsFailure {
        if let Some(tls) = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
            return TlsFailure::from_rustls(tls);
        }
        match e.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => TlsFailure::Closed,
            _ => TlsFailure::Other,
        }
    }

    pub fn from_rustls(e: &rustls::Error) -> TlsFailure {
        use rustls::Error;
        match e {
            Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => TlsFailure::UnknownIssuer,
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    TlsFailure::Expired
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    TlsFailure::NotValidYet
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => TlsFailure::NotValidForName,
                CertificateError::Revoked => TlsFailure::Revoked,
                _ => TlsFailure::BadCertificate,
            },
            Error::NoCertificatesPresented => TlsFailure::BadCertificate,
            Error::AlertReceived(alert) => TlsFailure::Alert(*alert),
            Error::InvalidMessage(_)
            | Error::InappropriateMessage { .. }
            | Error::InappropriateHandshakeMessage { .. }
            | Error::PeerSentOversizedRecord => TlsFailure::NotTls,
            Error::PeerIncompatible(_) | Error::NoApplicationProtocol => TlsFailure::Incompatible,
            Error::UnsupportedNameType => TlsFailure::InvalidName,
            _ => TlsFailure::Other,
        }
    }
}

impl TlsFailure {
    /// A fault of the certificate presented, which connections made
    /// before it (and sessions resumed from them) do not meet.
    pub fn is_certificate(self) -> bool {
        matches!(
            self,
            TlsFailure::UnknownIssuer
                | TlsFailure::Expired
                | TlsFailure::NotValidYet
                | TlsFailure::NotValidForName
                | TlsFailure::Revoked
                | TlsFailure::BadCertificate
        )
    }
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Worded as rustls words them, without the parts that change from
        // one handshake to the next.
        f.write_str(match self {
            TlsFailure::UnknownIssuer => "invalid peer certificate: UnknownIssuer",
            TlsFailure::Expired => "invalid peer certificate: certificate expired",
            TlsFailure::NotValidYet => "invalid peer certificate: certificate not valid yet",
            TlsFailure::NotValidForName => {
                "invalid peer certificate: certificate not valid for the upstream's name"
            }
            TlsFailure::Revoked => "invalid peer certificate: Revoked",
            TlsFailure::BadCertificate => "invalid peer certificate",
            TlsFailure::Alert(alert) => return write!(f, "received fatal alert: {alert:?}"),
            TlsFailure::NotTls => "the upstream does not speak TLS",
            TlsFailure::Incompatible => "peer is incompatible",
            TlsFailure::Closed => "connection closed during the handshake",
            TlsFailure::InvalidName => "the upstream's name is not valid for TLS",
            TlsFailure::Other => "handshake failed",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::Error;

    #[test]
    fn failures_of_handshakes() {
        let wrapped = |e: Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let cases = [
            (
                wrapped(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
                TlsFailure::UnknownIssuer,
                "invalid peer certificate: UnknownIssuer",
            ),
            (
                wrapped(Error::InvalidCertificate(CertificateError::Expired)),
                TlsFailure::Expired,
                "invalid peer certificate: certificate expired",
            ),
            (
                wrapped(Error::InvalidCertificate(CertificateError::NotValidForName)),
                TlsFailure::NotValidForName,
                "invalid peer certificate: certificate not valid for the upstream's name",
            ),
            (
                wrapped(Error::InvalidCertificate(CertificateError::BadSignature)),
                TlsFailure::BadCertificate,
                "invalid peer certificate",
            ),
            (
                wrapped(Error::AlertReceived(AlertDescription::HandshakeFailure)),
                TlsFailure::Alert(AlertDescription::HandshakeFailure),
                "received fatal alert: HandshakeFailure",
            ),
            (
                wrapped(Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidContentType,
                )),
                TlsFailure::NotTls,
                "the upstream does not speak TLS",
            ),
            (
                io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof"),
                TlsFailure::Closed,
                "connection closed during the handshake",
            ),
            (
                io::Error::other("something else"),
                TlsFailure::Other,
                "handshake failed",
            ),
        ];
        for (error, failure, text) in cases {
            assert_eq!(TlsFailure::of(&error), failure, "{error}");
            assert_eq!(failure.to_string(), text);
        }
    }
}
