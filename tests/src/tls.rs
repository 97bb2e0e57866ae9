//! TLS for tests: a certificate authority made at test time, an upstream
//! that serves HTTPS with a certificate it signed (counting the handshakes
//! it was offered and completed), and clients of a node's HTTPS listener
//! that say which certificate they were shown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A certificate authority of a test.
pub struct TestCa {
    /// Its certificate, PEM.
    pub pem: String,
    /// Its certificate, DER.
    pub der: CertificateDer<'static>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        TestCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) that this CA
    /// signed, and its key.
    pub fn leaf(&self, names: &[&str]) -> (rcgen::Certificate, rcgen::KeyPair) {
        self.leaf_expiring(names, None)
    }

    /// A certificate for `names` that expires at `not_after` (Unix
    /// seconds; `None`: rcgen's far future), and its key. Every call makes
    /// a new key, and so a new certificate and serial.
    pub fn leaf_expiring(
        &self,
        names: &[&str],
        not_after: Option<u64>,
    ) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("certificate parameters");
        if let Some(not_after) = not_after {
            params.not_after =
                rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after);
            params.not_before =
                rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after / 2);
        }
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        (cert, key)
    }

    /// Writes a certificate for `names` (its chain: the leaf, then this
    /// CA) and its key into `dir` as `<stem>.crt` and `<stem>.key`.
    pub fn write_leaf(&self, dir: &Path, stem: &str, names: &[&str]) -> Leaf {
        let (cert, key) = self.leaf(names);
        Leaf::write(dir, stem, &cert, &key, &self.pem)
    }

    /// Writes the CA's certificate into `dir`: a file for `SSL_CERT_FILE`
    /// (`--extra-ca`) or `curl --cacert`.
    pub fn write_pem(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.pem).expect("write the CA file");
        path
    }

    /// A server configuration whose certificate, for `names` (DNS names or
    /// IP addresses), this CA signed.
    /// A server for `names` that requires a client certificate this CA
    /// issued (mutual TLS).
    pub fn server_config_requiring_clients(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.leaf(names);
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).expect("the CA as a root");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&provider),
        )
        .build()
        .expect("a client verifier");
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .expect("a server configuration");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// A server configuration that offers `alpn` (`h2` for HTTP/2).
    pub fn server_config_alpn(&self, names: &[&str], alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
        let mut config = (*self.server_config(names)).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        self.server_config_expiring(names, None)
    }

    /// A server configuration whose certificate expires at `not_after`
    /// (Unix seconds; `None`: far in the future).
    pub fn server_config_expiring(
        &self,
        names: &[&str],
        not_after: Option<u64>,
    ) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.leaf_expiring(names, not_after);
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a server configuration");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A certificate written to files.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The leaf, as a client is shown it.
    pub der: CertificateDer<'static>,
}

impl Leaf {
    /// Writes `cert` (then `chain`, PEM) and `key` into `dir` as
    /// `<stem>.crt` and `<stem>.key`.
    pub fn write(
        dir: &Path,
        stem: &str,
        cert: &rcgen::Certificate,
        key: &rcgen::KeyPair,
        chain: &str,
    ) -> Leaf {
        let (cert_path, key_path) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&cert_path, format!("{}{chain}", cert.pem())).expect("write a certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("write a key");
        Leaf {
            cert: cert_path,
            key: key_path,
            der: cert.der().clone(),
        }
    }

    /// Its `[[certificate]]` table.
    pub fn table(&self) -> String {
        format!(
            "[[certificate]]\ncert = {:?}\nkey = {:?}\n",
            self.cert.display().to_string(),
            self.key.display().to_string()
        )
    }
}

/// A client of a node's HTTPS listener that trusts `ca`, offers `alpn`,
/// and never resumes a session: each handshake shows the certificate the
/// node serves now.
pub fn client_config(ca: &TestCa, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).expect("the CA as a root");
    client_trusting(roots, alpn)
}

/// A self-signed certificate for `names`, valid from 2026-01-01 until
/// `until` (`YYYY-MM-DD`), then its key, as one PEM text: what a holder
/// of the cluster key could plant as an ACME certificate.
pub fn self_signed_pem(names: &[&str], until: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("a key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).expect("parameters");
    let date: Vec<i32> = until.split('-').filter_map(|p| p.parse().ok()).collect();
    let (year, month, day) = (date[0], date[1] as u8, date[2] as u8);
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(year, month, day);
    let cert = params.self_signed(&key).expect("a certificate");
    format!("{}{}", cert.pem(), key.serialize_pem())
}

/// A client that trusts `roots`, offers `alpn`, and never resumes.
pub fn client_trusting(roots: rustls::RootCertStore, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut config = client_builder(roots, alpn);
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// A client that trusts `roots`, offers `alpn`, and resumes its sessions
/// (rustls's default: TLS 1.3 tickets kept in memory).
pub fn client_resuming(roots: rustls::RootCertStore, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    Arc::new(client_builder(roots, alpn))
}

/// What both clients share: aws-lc, safe protocol versions, `roots`, `alpn`.
fn client_builder(roots: rustls::RootCertStore, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A client that takes whatever certificate it is shown, for tests that
/// then check which one it was; `sni`: whether it names the server.
pub fn inspecting_client(sni: bool) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.enable_sni = sni;
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// Accepts any certificate (its signatures are still checked).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS connection to `addr` for the server `name`.
pub async fn connect(
    addr: SocketAddr,
    name: &str,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = rustls::pki_types::ServerName::try_from(name.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stream = TcpStream::connect(addr).await?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
}

/// The leaf certificate the server showed on `stream`.
pub fn shown(
    stream: &tokio_rustls::client::TlsStream<TcpStream>,
) -> Option<CertificateDer<'static>> {
    stream
        .get_ref()
        .1
        .peer_certificates()?
        .first()
        .map(|c| c.clone().into_owned())
}

/// `GET path` for `host` over HTTPS on a new connection: HTTP/2 when ALPN
/// chose it, else HTTP/1.1. Returns the answer, the certificate shown and
/// the protocol.
pub async fn get(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    host: &str,
    path: &str,
) -> anyhow::Result<(
    crate::client::Answer,
    CertificateDer<'static>,
    http::Version,
)> {
    let start = tokio::time::Instant::now();
    let stream = connect(addr, host, config).await?;
    let leaf = shown(&stream).ok_or_else(|| anyhow::anyhow!("no certificate shown"))?;
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let mut req = http::Request::new(http_body_util::Empty::<Bytes>::new());
    let response = if h2 {
        *req.uri_mut() = format!("https://{host}{path}").parse()?;
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await?;
        tokio::spawn(connection);
        sender.send_request(req).await?
    } else {
        *req.uri_mut() = path.parse()?;
        req.headers_mut()
            .insert(http::header::HOST, http::HeaderValue::from_str(host)?);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        sender.send_request(req).await?
    };
    let (parts, body) = response.into_parts();
    let body = http_body_util::BodyExt::collect(body).await?.to_bytes();
    let answer = crate::client::Answer {
        status: parts.status,
        headers: parts.headers,
        body,
        elapsed: start.elapsed(),
    };
    Ok((answer, leaf, parts.version))
}

/// An HTTPS upstream: answers 200 `name: METHOD TARGET` to every request.
#[derive(Debug)]
pub struct TlsUpstream {
    pub addr: SocketAddr,
    config: Arc<Mutex<Arc<rustls::ServerConfig>>>,
    accepted: Arc<AtomicUsize>,
    handshakes: Arc<AtomicUsize>,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl TlsUpstream {
    pub async fn start(name: &str, config: Arc<rustls::ServerConfig>) -> TlsUpstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a TLS upstream");
        TlsUpstream::on(listener, name, config)
    }

    /// A TLS upstream on a listener the test bound (the port of one it
    /// dropped: a restart, every connection of the old one closed).
    pub fn on(listener: TcpListener, name: &str, config: Arc<rustls::ServerConfig>) -> TlsUpstream {
        let addr = listener.local_addr().expect("local address");
        let config = Arc::new(Mutex::new(config));
        let (accepted, handshakes, hits) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let task = tokio::spawn(serve(
            listener,
            name.to_string(),
            Arc::clone(&config),
            [
                Arc::clone(&accepted),
                Arc::clone(&handshakes),
                Arc::clone(&hits),
            ],
        ));
        TlsUpstream {
            addr,
            config,
            accepted,
            handshakes,
            hits,
            task,
        }
    }

    /// Serves this certificate from the next connection on.
    pub fn set_config(&self, config: Arc<rustls::ServerConfig>) {
        *self.config.lock().expect("config lock") = config;
    }

    /// TCP connections accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// TLS handshakes completed.
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// Requests answered.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: TcpListener,
    name: String,
    config: Arc<Mutex<Arc<rustls::ServerConfig>>>,
    [accepted, handshakes, hits]: [Arc<AtomicUsize>; 3],
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let acceptor =
            tokio_rustls::TlsAcceptor::from(Arc::clone(&config.lock().expect("config lock")));
        let (name, handshakes, hits) = (name.clone(), Arc::clone(&handshakes), Arc::clone(&hits));
        connections.spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            handshakes.fetch_add(1, Ordering::SeqCst);
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                hits.fetch_add(1, Ordering::SeqCst);
                let mut text = format!("{name}: {} {}", req.method(), req.uri());
                if h2 {
                    text.push_str(" over HTTP/2");
                }
                async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text)))) }
            });
            // HTTP/2 when the client asked for it by ALPN.
            let _ = if h2 {
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await
            } else {
                http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await
            };
        });
    }
}
