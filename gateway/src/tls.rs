//! TLS towards `https://` upstreams: rustls with ring, the Mozilla roots
//! compiled in (a `FROM scratch` image has no CA bundle), plus the PEM
//! certificates of `SSL_CERT_FILE` when it is set.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{file}: cannot read certificates: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: no usable certificate in it")]
    Empty { file: String },
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The client configuration of a route with its own `tls`: its CA (else
/// the Mozilla roots) and, for mutual TLS, its client certificate. The
/// files were read and checked with the configuration.
pub fn upstream_config(
    tls: &crate::config::UpstreamTls,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    match &tls.ca {
        Some((path, pem)) => {
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(pem).flatten() {
                if roots.add(cert).is_ok() {
                    added += 1;
                }
            }
            if added == 0 {
                return Err(TlsError::Empty {
                    file: path.display().to_string(),
                });
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match &tls.client {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let file = client.cert.display().to_string();
            let chain: Vec<_> = CertificateDer::pem_slice_iter(&client.cert_pem)
                .flatten()
                .collect();
            let key = PrivateKeyDer::from_pem_slice(&client.key_pem)
                .map_err(|_| TlsError::Empty { file })?;
            builder.with_client_auth_cert(chain, key)?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What tells a route's TLS settings apart, so that pooled connections
/// made with one identity never serve another: 0 is plain TCP, 1 the
/// node's own settings (`https://` external hosts).
pub fn profile(tls: Option<&crate::config::UpstreamTls>) -> u64 {
    use std::hash::{Hash, Hasher};
    match tls {
        None => 1,
        Some(tls) => {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            tls.hash(&mut hasher);
            hasher.finish().max(2)
        }
    }
}

/// The client configuration for `https://` upstreams.
pub fn client_config(extra_roots: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_roots {
        let file = path.display().to_string();
        let pem = std::fs::read(path).map_err(|source| TlsError::Read {
            file: file.clone(),
            source,
        })?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
            if roots.add(cert).is_ok() {
                added += 1;
            }
        }
        if added == 0 {
            return Err(TlsError::Empty { file });
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
