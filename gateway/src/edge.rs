//! TLS at the edge: the proxy's HTTPS listener, the certificates it
//! serves to clients, and their rotation.
//!
//! ## What a client gets
//! TLS 1.3 or 1.2 (rustls with aws-lc-rs, its default cipher suites, no
//! 0-RTT), key exchange X25519MLKEM768 first ([`TLS_GROUPS`]); in TLS 1.3
//! session tickets that resume on every node of the cluster ([`tickets`]),
//! in TLS 1.2 resumption by session ID from this node's own cache (a
//! TLS 1.2 ticket would hold the session's master secret under the
//! cluster key);
//! ALPN `h2`, `http/1.1` or `http/1.0` (nginx offers the same: a client
//! offering only `http/1.0` is served, not refused at the handshake), and
//! the certificate its server name picks ([`served`]). HTTP/2 over TLS is
//! then served as HTTP/2 prior knowledge is, HTTP/1.x as on the plain
//! listener ([`crate::server`]), with the version the request line names.
//!
//! ## Invariants
//! - A certificate serves only after every check of [`certificate`]:
//!   validation refuses a configuration whose files fail them, and
//!   rotation refuses a new version that does, the old one serving on.
//! - Handshakes read a snapshot; nothing a reload or a rotation does
//!   touches a connection already made.

pub mod rotation;
pub mod served;
pub mod tickets;

use std::sync::Arc;

pub use crate::certificate::{CertError, Certificate, Culprit};
pub use served::{Certificates, Served};

/// ALPN protocol ids, in the server's order of preference.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP1: &[u8] = b"http/1.1";
pub const ALPN_HTTP10: &[u8] = b"http/1.0";

pub use crate::config::TLS_GROUPS;

/// The provider's groups named by `groups` (names of [`TLS_GROUPS`]), in
/// that order; all of them when `None`.
fn key_exchange(
    mut provider: rustls::crypto::CryptoProvider,
    groups: Option<&[String]>,
) -> rustls::crypto::CryptoProvider {
    if let Some(groups) = groups {
        let all = std::mem::take(&mut provider.kx_groups);
        provider.kx_groups = groups
            .iter()
            .filter_map(|name| {
                all.iter()
                    .find(|g| format!("{:?}", g.name()).eq_ignore_ascii_case(name))
                    .copied()
            })
            .collect();
    }
    provider
}

/// TLS 1.2 sessions a node keeps for resumption by session ID (a few
/// hundred bytes each).
pub const TLS12_SESSIONS: usize = 8192;

/// The server configuration of the HTTPS listener: its certificates are
/// whatever `certificates` holds at each handshake; its key exchange
/// `groups` (`None`: every one of [`TLS_GROUPS`]); its session tickets
/// sealed and opened by `tickets`.
pub fn server_config(
    certificates: Arc<Certificates>,
    groups: Option<&[String]>,
    tickets: Arc<tickets::Tickets>,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(key_exchange(
        rustls::crypto::aws_lc_rs::default_provider(),
        groups,
    ));
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(certificates);
    // Last, `acme-tls/1`: offered alone by a CA validating TLS-ALPN-01
    // (RFC 8737), which gets the challenge certificate and nothing else.
    config.alpn_protocols = vec![
        ALPN_H2.to_vec(),
        ALPN_HTTP1.to_vec(),
        ALPN_HTTP10.to_vec(),
        crate::challenges::ALPN_ACME.to_vec(),
    ];
    // Stateless resumption in TLS 1.3: a returning client skips the key
    // exchange on whichever node it reaches. The ticketer seals no TLS 1.2
    // session: those resume by session ID from this node's cache.
    config.ticketer = tickets;
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(TLS12_SESSIONS);
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(provider: &rustls::crypto::CryptoProvider) -> Vec<String> {
        provider
            .kx_groups
            .iter()
            .map(|g| format!("{:?}", g.name()))
            .collect()
    }

    #[test]
    fn the_known_groups_are_the_providers_in_its_order() {
        let all = key_exchange(rustls::crypto::aws_lc_rs::default_provider(), None);
        assert_eq!(names(&all), TLS_GROUPS);
    }

    #[test]
    fn tls_groups_narrow_and_order_the_key_exchange() {
        let groups = ["secp256r1".to_string(), "X25519".to_string()];
        let narrowed = key_exchange(rustls::crypto::aws_lc_rs::default_provider(), Some(&groups));
        assert_eq!(names(&narrowed), ["secp256r1", "X25519"]);
        // Names are matched whatever their case, as the configuration is.
        let lower = ["x25519mlkem768".to_string()];
        let one = key_exchange(rustls::crypto::aws_lc_rs::default_provider(), Some(&lower));
        assert_eq!(names(&one), ["X25519MLKEM768"]);
    }
}
