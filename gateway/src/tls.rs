//! TLS towards `https://` upstreams: rustls with ring, the Mozilla roots
//! compiled in (a `FROM scratch` image has no CA bundle), plus the PEM
//! certificates of `SSL_CERT_FILE` when it is set.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;

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
        for cert in rustls_pemfile::certs(&mut pem.as_slice()).flatten() {
            if roots.add(cert).is_ok() {
                added += 1;
            }
        }
        if added == 0 {
            return Err(TlsError::Empty { file });
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
