//! The client side of a node's QUIC feed.
//!
//! [`Session`] is one subscription: connect, verify the node's
//! certificate (pinned, from a CA, or, spelled out, not at all), then read
//! frames into whole cluster views. [`follow`] keeps a session alive:
//! it reconnects by itself, reports the link's state, and moves to another
//! node when asked.
//!
//! Frames are bounded: a length above [`codec::MAX_MESSAGE`] is refused
//! before anything is allocated for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use picket_proto::codec::{self, CodecError, FRAME_HEADER};
use picket_proto::feed::{ALPN, Ask, FollowError, Follower, Frame};
use picket_proto::{Backoff, ClusterView};
use quinn::crypto::rustls::QuicClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::sync::mpsc;

use crate::app::{FeedTarget, Link, Msg};

/// The first wait before the feed is dialled again after a failure, and
/// the most it grows to.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_CAP: Duration = Duration::from_secs(2);

/// How the node's certificate is trusted.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Its SHA-256 fingerprint, lowercase hex, as the node logs and
    /// publishes it.
    Pin(String),
    /// Certificates signed by one of these.
    Ca(Vec<CertificateDer<'static>>),
    /// Any certificate at all: for a loopback demo only.
    Insecure,
}

/// The certificate this client shows a node whose feed asks for one
/// (`[node] feed_client_ca`), and its key.
#[derive(Debug)]
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: rustls::pki_types::PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// Reads a PEM certificate chain and its PEM key.
    pub fn read(cert: &std::path::Path, key: &std::path::Path) -> Result<ClientIdentity, String> {
        use rustls::pki_types::pem::PemObject;
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let chain = CertificateDer::pem_slice_iter(&read(cert)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("{} holds no PEM certificate", cert.display()));
        }
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&read(key)?)
            .map_err(|e| format!("{}: {e}", key.display()))?;
        Ok(ClientIdentity { chain, key })
    }
}

/// Why a session could not start or ended.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("{0} does not resolve to an address")]
    Resolve(String),
    #[error("the TLS setup: {0}")]
    Tls(String),
    #[error("connecting: {0}")]
    Connect(String),
    #[error(
        "the node's feed certificate is not the one pinned: its fingerprint is {received}, \
         --pin said {pinned} (a node's fingerprint is in its /v1/node and its start log)"
    )]
    PinMismatch { pinned: String, received: String },
    #[error("the connection: {0}")]
    Connection(String),
    #[error("a frame: {0}")]
    Frame(#[from] CodecError),
    #[error("the node broke the protocol: {0}")]
    Protocol(#[from] FollowError),
}

/// Keep-alives, and how long silence means the node is gone.
const KEEP_ALIVE: Duration = Duration::from_millis(300);
const IDLE: u32 = 1_500;
const CONNECT_WAIT: Duration = Duration::from_secs(3);

pub use picket_proto::feed::fingerprint;

/// Normalises a fingerprint as operators may write it: any case, with or
/// without colons.
pub fn normalise(fingerprint: &str) -> String {
    fingerprint
        .chars()
        .filter(|c| *c != ':')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Accepts exactly the pinned certificate, or, insecure, any; keeps the
/// fingerprint it was shown, so that a refusal can name it.
#[derive(Debug)]
struct Pinned {
    pin: Option<String>,
    provider: Arc<CryptoProvider>,
    shown: Arc<std::sync::Mutex<Option<String>>>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let shown = fingerprint(end_entity.as_ref());
        let matches = self.pin.as_ref().is_none_or(|pin| *pin == shown);
        *self.shown.lock().unwrap_or_else(|e| e.into_inner()) = Some(shown);
        if matches {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The QUIC client configuration for `trust`: TLS 1.3, the feed's ALPN,
/// keep-alives, and an idle timeout that notices a vanished node.
pub fn client_config(trust: &Trust) -> Result<quinn::ClientConfig, FeedError> {
    client_config_shown(trust, None).map(|(config, _)| config)
}

/// The fingerprint a pinned or insecure handshake was shown, once shown.
type Shown = Arc<std::sync::Mutex<Option<String>>>;

fn client_config_shown(
    trust: &Trust,
    identity: Option<&ClientIdentity>,
) -> Result<(quinn::ClientConfig, Shown), FeedError> {
    let shown = Shown::default();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| FeedError::Tls(e.to_string()))?;
    let tls = match trust {
        Trust::Ca(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs {
                roots
                    .add(cert.clone())
                    .map_err(|e| FeedError::Tls(e.to_string()))?;
            }
            builder.with_root_certificates(roots)
        }
        Trust::Pin(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                pin: Some(normalise(pin)),
                provider,
                shown: Arc::clone(&shown),
            })),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                pin: None,
                provider,
                shown: Arc::clone(&shown),
            })),
    };
    let mut tls = match identity {
        None => tls.with_no_client_auth(),
        Some(identity) => tls
            .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
            .map_err(|e| FeedError::Tls(format!("the client certificate: {e}")))?,
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| FeedError::Tls(e.to_string()))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
            IDLE,
        ))));
    config.transport_config(Arc::new(transport));
    Ok((config, shown))
}

/// Nothing answered at `addr`: most often a TCP port given for the feed.
fn no_answer(addr: &str) -> FeedError {
    FeedError::Connect(format!(
        "no answer from {addr}; the feed is QUIC over UDP, on a node's `[node] feed` port \
         (9901 unless set; its /v1/node names it), not the status API's TCP port"
    ))
}

/// Resolves `host:port`.
pub async fn resolve(addr: &str) -> Result<SocketAddr, FeedError> {
    tokio::net::lookup_host(addr)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| FeedError::Resolve(addr.to_string()))
}

/// The name the node's certificate is checked against: the host part of
/// the address.
fn server_name(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

/// One subscription to one node's feed.
pub struct Session {
    endpoint: quinn::Endpoint,
    connection: quinn::Connection,
    recv: quinn::RecvStream,
    // Kept open: finishing it would tell the node the client is done.
    _send: quinn::SendStream,
    follower: Follower,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("node", &self.connection.remote_address())
            .finish()
    }
}

impl Session {
    /// Connects to the feed at `addr` (`host:port`) and subscribes.
    pub async fn open(addr: &str, trust: &Trust) -> Result<Session, FeedError> {
        Session::open_as(addr, trust, None).await
    }

    /// As [`Session::open`], showing `identity` to a node that asks for a
    /// client certificate.
    pub async fn open_as(
        addr: &str,
        trust: &Trust,
        identity: Option<&ClientIdentity>,
    ) -> Result<Session, FeedError> {
        let remote = resolve(addr).await?;
        let local: SocketAddr = if remote.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let mut endpoint =
            quinn::Endpoint::client(local).map_err(|e| FeedError::Connect(e.to_string()))?;
        let (config, shown) = client_config_shown(trust, identity)?;
        endpoint.set_default_client_config(config);
        let connecting = endpoint
            .connect(remote, &server_name(addr))
            .map_err(|e| FeedError::Connect(e.to_string()))?;
        let connection = tokio::time::timeout(CONNECT_WAIT, connecting)
            .await
            .map_err(|_| no_answer(addr))?
            .map_err(|e| {
                let received = shown.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match (trust, received, e) {
                    (Trust::Pin(pinned), Some(received), _) if normalise(pinned) != received => {
                        FeedError::PinMismatch {
                            pinned: normalise(pinned),
                            received,
                        }
                    }
                    (_, _, quinn::ConnectionError::TimedOut) => no_answer(addr),
                    (_, _, e) => FeedError::Connect(e.to_string()),
                }
            })?;
        let (mut send, recv) = connection
            .open_bi()
            .await
            .map_err(|e| FeedError::Connection(e.to_string()))?;
        let request = codec::encode_frame(&Ask::Subscribe)?;
        send.write_all(&request)
            .await
            .map_err(|e| FeedError::Connection(e.to_string()))?;
        Ok(Session {
            endpoint,
            connection,
            recv,
            _send: send,
            follower: Follower::new(),
            buf: Vec::new(),
        })
    }

    /// The next whole view: the snapshot first, then one per batch of
    /// changes.
    pub async fn next_view(&mut self) -> Result<ClusterView, FeedError> {
        loop {
            let frame = self.next_frame().await?;
            if let Some(view) = self.follower.apply(frame)? {
                return Ok(view);
            }
        }
    }

    async fn next_frame(&mut self) -> Result<Frame, FeedError> {
        let mut header = [0u8; FRAME_HEADER];
        self.recv
            .read_exact(&mut header)
            .await
            .map_err(|e| FeedError::Connection(e.to_string()))?;
        let len = codec::frame_len(&header)?.unwrap_or(0);
        self.buf.clear();
        self.buf.resize(len, 0);
        self.recv
            .read_exact(&mut self.buf)
            .await
            .map_err(|e| FeedError::Connection(e.to_string()))?;
        Ok(codec::decode(&self.buf)?)
    }

    /// Closes the connection and waits (briefly) until the node knows.
    pub async fn close(self) {
        self.connection
            .close(quinn::VarInt::from_u32(0), b"client done");
        let _ = tokio::time::timeout(Duration::from_millis(500), self.endpoint.wait_idle()).await;
    }
}

pub use picket_proto::clock::now_unix_ms;

/// Follows the feed at `addr` for as long as `out` is open: views and link
/// changes go to `out`; a target on `switch` moves to another node.
pub async fn follow(
    addr: String,
    trust: Trust,
    identity: Option<Arc<ClientIdentity>>,
    out: mpsc::Sender<Msg>,
    mut switch: mpsc::Receiver<FeedTarget>,
) {
    let (mut addr, mut trust) = (addr, trust);
    let mut stale_since: Option<u64> = None;
    let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
    loop {
        if out
            .send(Msg::Link(Link::Connecting { addr: addr.clone() }))
            .await
            .is_err()
        {
            return;
        }
        let error = tokio::select! {
            error = session(&addr, &trust, identity.as_deref(), &out, &mut stale_since, &mut backoff) => error,
            target = switch.recv() => match target {
                Some(target) => {
                    (addr, trust) = switched(&target, &trust);
                    continue;
                }
                None => return,
            },
        };
        let Some(error) = error else { return };
        let since = *stale_since.get_or_insert_with(now_unix_ms);
        let stale = Msg::Link(Link::Stale {
            addr: addr.clone(),
            since_unix_ms: since,
            error: error.to_string(),
        });
        if out.send(stale).await.is_err() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_wait()) => {}
            target = switch.recv() => match target {
                Some(target) => (addr, trust) = switched(&target, &trust),
                None => return,
            },
        }
    }
}

/// Where a switch leads, and how to trust it: the node's published
/// fingerprint, else the trust already in use (a CA, or insecure).
fn switched(target: &FeedTarget, trust: &Trust) -> (String, Trust) {
    let trust = match (&target.fingerprint, trust) {
        (Some(pin), Trust::Pin(_) | Trust::Insecure) => Trust::Pin(pin.clone()),
        (_, trust) => trust.clone(),
    };
    (target.addr.clone(), trust)
}

/// Runs one session; `None` when `out` closed, else why it ended.
async fn session(
    addr: &str,
    trust: &Trust,
    identity: Option<&ClientIdentity>,
    out: &mpsc::Sender<Msg>,
    stale_since: &mut Option<u64>,
    backoff: &mut Backoff,
) -> Option<FeedError> {
    let mut session = match Session::open_as(addr, trust, identity).await {
        Ok(session) => session,
        Err(error) => return Some(error),
    };
    let mut first = true;
    loop {
        let view = match session.next_view().await {
            Ok(view) => view,
            Err(error) => return Some(error),
        };
        let mut sent = out.send(Msg::View(view)).await.is_ok();
        if first && sent {
            // A whole snapshot arrived: the link is live (again).
            first = false;
            *stale_since = None;
            backoff.reset();
            let live = Msg::Link(Link::Live {
                addr: addr.to_string(),
            });
            sent = out.send(live).await.is_ok();
        }
        if !sent {
            session.close().await;
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_normalised() {
        assert_eq!(normalise("AB:cd:01"), "abcd01");
        assert_eq!(fingerprint(b"x").len(), 64);
    }

    #[test]
    fn the_server_name_is_the_host() {
        assert_eq!(server_name("node-1.picket:9901"), "node-1.picket");
        assert_eq!(server_name("[::1]:9901"), "::1");
        assert_eq!(server_name("127.0.0.1:9901"), "127.0.0.1");
    }

    #[test]
    fn a_switch_pins_the_published_fingerprint() {
        let target = FeedTarget {
            name: "n2".into(),
            addr: "10.0.0.2:9901".into(),
            fingerprint: Some("ab".into()),
        };
        let (addr, trust) = switched(&target, &Trust::Pin("cd".into()));
        assert_eq!(addr, "10.0.0.2:9901");
        assert!(matches!(trust, Trust::Pin(pin) if pin == "ab"));
        let (_, trust) = switched(&target, &Trust::Ca(vec![]));
        assert!(matches!(trust, Trust::Ca(_)));
    }
}
