//! TLS for tests: a certificate authority made at test time, and an
//! upstream that serves HTTPS with a certificate it signed, counting the
//! handshakes it was offered and completed.

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
use tokio::net::TcpListener;
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

    /// Writes the CA's certificate into `dir`: a file for `SSL_CERT_FILE`
    /// (`--extra-ca`).
    /// A certificate for `names` (DNS names or IP addresses) that this CA
    /// signed, and its key.
    pub fn leaf(&self, names: &[&str]) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .expect("certificate parameters")
            .signed_by(&key, &self.issuer)
            .expect("a certificate");
        (cert, key)
    }

    pub fn write_pem(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.pem).expect("write the CA file");
        path
    }

    /// A server configuration whose certificate, for `names` (DNS names or
    /// IP addresses), this CA signed.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.leaf(names);
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
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
            let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                hits.fetch_add(1, Ordering::SeqCst);
                let text = format!("{name}: {} {}", req.method(), req.uri());
                async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text)))) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}
