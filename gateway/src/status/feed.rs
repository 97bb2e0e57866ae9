//! The QUIC feed: the cluster view this node holds, streamed to
//! `picket-tui` and other clients as a snapshot and then its changes.
//!
//! ## Protocol
//! See [`picket_proto::feed`]: the client opens a stream and writes a
//! `Subscribe` request; the node answers with frames until either side
//! goes away.
//!
//! ## Invariants
//! - A client never slows the node. Each client has a task of its own
//!   that reads the newest view from a watch channel, which holds one view
//!   whatever the client's pace: a client that falls behind skips the
//!   views in between and gets the difference to the newest one (or a
//!   fresh snapshot, when that is smaller). A client that takes nothing
//!   for [`STALL`] is let go.
//! - Memory per client is bounded: QUIC flow control bounds what is in
//!   flight, and a request larger than [`MAX_REQUEST`] is refused unread.
//! - The feed is read-only: nothing a client sends changes anything.
//! - A handshake starts only for a client whose address is proven: a
//!   first Initial packet gets a Retry (QUIC's address validation, a token
//!   the client must echo from the address it claims), so packets from
//!   forged or one-shot sources take no handshake work.
//! - A place is given only once the handshake has ended (with
//!   `feed_client_ca`, the client's certificate checked): at most
//!   [`MAX_CLIENTS`], and [`MAX_PER_SOURCE`] to one address. Handshakes in
//!   progress are bounded on their own, and a stalled one makes room for
//!   a newcomer ([`handshakes`]), so clients that stall their handshakes
//!   never lock out one that finishes its.
//! - With `[node] feed_client_ca`, only clients with a certificate that CA
//!   signed finish the handshake: the way to restrict who reads the
//!   cluster view.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use picket_proto::ClusterView;
use picket_proto::codec::{self, CodecError, FRAME_HEADER};
use picket_proto::feed::{self, ALPN, Ask, Frame};
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::sync::{Semaphore, watch};

mod handshakes;

use handshakes::Handshakes;

use crate::config::FeedSettings;
use crate::metrics::FeedMetrics;
use crate::shutdown::{Shutdown, Tasks};

/// How long a client may take nothing before it is let go.
pub const STALL: Duration = Duration::from_secs(10);
/// How long a client has to send its request.
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// How long a handshake may take, from the client's proven Initial to
/// its end.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(5);
/// The largest request frame read.
const MAX_REQUEST: usize = 1024;
/// Clients served at once; more are refused.
const MAX_CLIENTS: usize = 256;
/// Clients served at once from one address (a NAT, or one host's many
/// terminals); more from it are refused.
pub const MAX_PER_SOURCE: usize = 16;
/// Bytes in flight to one client before it must acknowledge them.
const SEND_WINDOW: u64 = 4 << 20;

/// Why the feed could not start.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("reading the feed's {what} {path}: {message}")]
    Read {
        what: &'static str,
        path: String,
        message: String,
    },
    #[error("the feed's TLS setup: {0}")]
    Tls(String),
    #[error("binding the feed to {addr}/udp: {message}")]
    Bind { addr: SocketAddr, message: String },
}

/// The feed's endpoint, bound and ready to serve.
pub struct Feed {
    endpoint: quinn::Endpoint,
    /// Where it listens.
    pub addr: SocketAddr,
    /// SHA-256 of its certificate, lowercase hex: what clients pin.
    pub fingerprint: String,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("addr", &self.addr)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

pub use picket_proto::feed::fingerprint;

/// The certificate chain and key the feed presents.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

fn identity(
    settings: &FeedSettings,
    dir: Option<&Path>,
    node: &str,
) -> Result<Identity, FeedError> {
    let Some((cert, key)) = &settings.cert else {
        let generated = rcgen::generate_simple_self_signed(vec![node.to_string()])
            .map_err(|e| FeedError::Tls(format!("generating a certificate: {e}")))?;
        return Ok(Identity {
            chain: vec![generated.cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                generated.signing_key.serialize_der(),
            )),
        });
    };
    let resolve = |path: &Path| resolve(dir, path);
    let read = |what: &'static str, path: &Path| {
        let path = resolve(path);
        std::fs::read(&path).map_err(|e| FeedError::Read {
            what,
            path: path.display().to_string(),
            message: e.to_string(),
        })
    };
    let pem = read("certificate", cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| FeedError::Read {
            what: "certificate",
            path: resolve(cert).display().to_string(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(FeedError::Read {
            what: "certificate",
            path: resolve(cert).display().to_string(),
            message: "no PEM certificate in it".into(),
        });
    }
    let pem = read("key", key)?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| match e {
            pem::Error::NoItemsFound => "no PEM private key in it".to_string(),
            e => e.to_string(),
        })
        .map_err(|message| FeedError::Read {
            what: "key",
            path: resolve(key).display().to_string(),
            message,
        })?;
    Ok(Identity { chain, key })
}

/// `path` as written in the configuration, read from its directory when
/// relative.
fn resolve(dir: Option<&Path>, path: &Path) -> std::path::PathBuf {
    match dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

/// The CA certificates of `feed_client_ca`.
fn client_roots(path: &Path) -> Result<rustls::RootCertStore, FeedError> {
    let failed = |message: String| FeedError::Read {
        what: "client CA",
        path: path.display().to_string(),
        message,
    };
    let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| failed(e.to_string()))?;
        roots.add(cert).map_err(|e| failed(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(failed("no PEM certificate in it".into()));
    }
    Ok(roots)
}

/// Binds the feed: on `socket` when given (bound before the node started),
/// else on the configured address.
pub fn bind(
    settings: &FeedSettings,
    dir: Option<&Path>,
    node: &str,
    socket: Option<std::net::UdpSocket>,
) -> Result<Feed, FeedError> {
    let identity = identity(settings, dir, node)?;
    let fingerprint = identity
        .chain
        .first()
        .map(|leaf| fingerprint(leaf))
        .unwrap_or_default();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| FeedError::Tls(e.to_string()))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = client_roots(&resolve(dir, ca))?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| FeedError::Tls(format!("the feed's client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut tls = builder
        .with_single_cert(identity.chain, identity.key)
        .map_err(|e| FeedError::Tls(e.to_string()))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| FeedError::Tls(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .keep_alive_interval(Some(Duration::from_millis(500)))
        .max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
            10_000,
        ))))
        .max_concurrent_bidi_streams(quinn::VarInt::from_u32(4))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(0))
        .send_window(SEND_WINDOW);
    server.transport_config(Arc::new(transport));
    let bind_error = |e: std::io::Error| FeedError::Bind {
        addr: settings.addr,
        message: e.to_string(),
    };
    let socket = match socket {
        Some(socket) => socket,
        None => std::net::UdpSocket::bind(settings.addr).map_err(bind_error)?,
    };
    let runtime = quinn::default_runtime()
        .ok_or_else(|| FeedError::Tls("no async runtime for QUIC".into()))?;
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        runtime,
    )
    .map_err(bind_error)?;
    let addr = endpoint.local_addr().map_err(bind_error)?;
    Ok(Feed {
        endpoint,
        addr,
        fingerprint,
    })
}

/// Serves the feed until `shutdown`.
pub fn spawn(
    feed: Feed,
    views: watch::Receiver<Arc<ClusterView>>,
    metrics: FeedMetrics,
    mut shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    tasks.spawn("feed", async move {
        let clients = Arc::new(Semaphore::new(MAX_CLIENTS));
        let sources = Arc::new(Sources::default());
        let handshakes = Arc::new(Handshakes::default());
        loop {
            let incoming = tokio::select! {
                incoming = feed.endpoint.accept() => incoming,
                () = shutdown.wait() => break,
            };
            let Some(incoming) = incoming else { break };
            // An address not yet proven gets a Retry, and no place: only a
            // client that answers from the address it claims comes back.
            if !incoming.remote_address_validated() {
                if incoming.may_retry() {
                    let _ = incoming.retry();
                } else {
                    incoming.ignore();
                }
                continue;
            }
            let peer = incoming.remote_address();
            let (handshake, evicted, made_room) = handshakes.begin(peer.ip());
            if made_room {
                metrics.handshake_evicted();
            }
            let connecting = match incoming.accept() {
                Ok(connecting) => connecting,
                Err(error) => {
                    tracing::debug!(%peer, %error, "feed handshake refused");
                    metrics.refused();
                    continue;
                }
            };
            let (views, metrics, shutdown) = (views.clone(), metrics.clone(), shutdown.clone());
            let (clients, sources) = (Arc::clone(&clients), Arc::clone(&sources));
            tokio::spawn(async move {
                // Dropped unfinished (evicted, or past its time), the
                // handshake's connection is closed.
                let connection = tokio::select! {
                    connected = connecting => match connected {
                        Ok(connection) => connection,
                        Err(error) => {
                            tracing::debug!(%peer, %error, "feed handshake failed");
                            metrics.refused();
                            return;
                        }
                    },
                    _ = evicted => {
                        tracing::debug!(%peer, "feed handshake gave its place to a newer one");
                        return;
                    }
                    () = tokio::time::sleep(HANDSHAKE_WAIT) => {
                        tracing::debug!(%peer, "feed handshake took too long");
                        metrics.refused();
                        return;
                    }
                };
                drop(handshake);
                // A place only now, for a client whose handshake ended
                // (its certificate checked, with `feed_client_ca`).
                let Some(source) = sources.take(peer.ip()) else {
                    metrics.refused();
                    connection.close(
                        quinn::VarInt::from_u32(3),
                        b"too many clients from this address",
                    );
                    return;
                };
                let Ok(permit) = clients.try_acquire_owned() else {
                    metrics.refused();
                    connection.close(quinn::VarInt::from_u32(4), b"the feed is full");
                    return;
                };
                metrics.attached();
                tracing::debug!(%peer, "feed client attached");
                let ended = serve(&connection, views, &metrics, shutdown).await;
                metrics.detached();
                drop((permit, source));
                match ended {
                    Ok(()) => {}
                    Err(Ended::Slow) => {
                        metrics.slow();
                        tracing::info!(%peer, "feed client took nothing for {STALL:?}; let go");
                        connection.close(quinn::VarInt::from_u32(2), b"too slow");
                    }
                    Err(Ended::Refused(why)) => {
                        metrics.refused();
                        tracing::debug!(%peer, %why, "feed client refused");
                        connection.close(quinn::VarInt::from_u32(1), b"bad request");
                    }
                    Err(Ended::Gone) => {}
                }
            });
        }
        feed.endpoint
            .close(quinn::VarInt::from_u32(0), b"node stopping");
        let _ = tokio::time::timeout(Duration::from_secs(1), feed.endpoint.wait_idle()).await;
    });
}

/// Places held by each client address.
#[derive(Debug, Default)]
struct Sources(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One of an address's places, given back when dropped.
struct Source {
    sources: Arc<Sources>,
    ip: std::net::IpAddr,
}

impl Sources {
    /// A place for `ip`, unless it holds [`MAX_PER_SOURCE`] already.
    fn take(self: &Arc<Sources>, ip: std::net::IpAddr) -> Option<Source> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(ip).or_default();
        if *count >= MAX_PER_SOURCE {
            return None;
        }
        *count += 1;
        Some(Source {
            sources: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        let mut held = self.sources.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// How a client's session ended, other than by shutdown.
enum Ended {
    Slow,
    Refused(String),
    Gone,
}

async fn serve(
    connection: &quinn::Connection,
    mut views: watch::Receiver<Arc<ClusterView>>,
    metrics: &FeedMetrics,
    mut shutdown: Shutdown,
) -> Result<(), Ended> {
    let (mut send, mut recv) = tokio::time::timeout(HELLO_WAIT, connection.accept_bi())
        .await
        .map_err(|_| Ended::Refused("no stream in time".into()))?
        .map_err(|_| Ended::Gone)?;
    let request = tokio::time::timeout(HELLO_WAIT, read_request(&mut recv))
        .await
        .map_err(|_| Ended::Refused("no request in time".into()))??;
    match request {
        Ask::Subscribe => {}
    }
    let mut sent: Option<Arc<ClusterView>> = None;
    loop {
        let next = Arc::clone(&views.borrow_and_update());
        let frames = match &sent {
            Some(sent) => feed::diff(sent, &next),
            None => feed::snapshot(&next),
        };
        let snapshot = matches!(frames.first(), Some(Frame::Reset { .. }));
        let mut bytes = Vec::new();
        let mut count = 0;
        for frame in &frames {
            match codec::encode_frame(frame) {
                Ok(encoded) => {
                    bytes.extend_from_slice(&encoded);
                    count += 1;
                }
                Err(error) => tracing::warn!(%error, "a feed frame could not be encoded; skipped"),
            }
        }
        tokio::select! {
            written = tokio::time::timeout(STALL, send.write_all(&bytes)) => match written {
                Ok(Ok(())) => metrics.sent(count, bytes.len(), snapshot),
                Ok(Err(_)) => return Err(Ended::Gone),
                Err(_) => return Err(Ended::Slow),
            },
            () = shutdown.wait() => return Ok(()),
        }
        sent = Some(next);
        tokio::select! {
            changed = views.changed() => if changed.is_err() { return Ok(()) },
            () = shutdown.wait() => return Ok(()),
            _ = connection.closed() => return Err(Ended::Gone),
        }
    }
}

async fn read_request(recv: &mut quinn::RecvStream) -> Result<Ask, Ended> {
    let mut header = [0u8; FRAME_HEADER];
    recv.read_exact(&mut header)
        .await
        .map_err(|e| Ended::Refused(e.to_string()))?;
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_REQUEST {
        return Err(Ended::Refused(CodecError::TooLarge { len }.to_string()));
    }
    let mut message = vec![0u8; len];
    recv.read_exact(&mut message)
        .await
        .map_err(|e| Ended::Refused(e.to_string()))?;
    codec::decode(&message).map_err(|e| Ended::Refused(e.to_string()))
}
