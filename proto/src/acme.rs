//! Certificates from ACME, as the cluster shares them in gossip.
//!
//! ## Keys a node writes (only its own)
//! - `acme/node`: the directory it orders from ([`AcmeNode`]): the nodes
//!   that may order a certificate are the live ones of the same directory
//!   that manage it (they write its state).
//! - `acme/state/NAME`: its [`CertificateState`] for the certificate whose
//!   first name is `NAME`: what it serves, who orders, what failed.
//! - `acme/certificate/NAME`: the [`Issued`] certificate it passes on, and
//!   `acme/certificate/NAME/I` its parts (the PEM chain, then the key, cut
//!   in [`PART`]-byte pieces): a certificate and its key do not fit one
//!   gossip value. Only while a live node that manages it serves another
//!   (or none), and by one node of those that serve it: steady, no node
//!   passes a certificate on. Gossip is sealed and encrypted with the
//!   cluster key; a node without one refuses `[acme]`. (`acme/cert/…`,
//!   without the directory, is what earlier releases wrote.)
//! - `acme/http/TOKEN`: the key authorization of an HTTP-01 challenge the
//!   node is answering for an order of its own.
//! - `acme/alpn/NAME`: the key authorization of a TLS-ALPN-01 challenge
//!   for `NAME`.
//! - `acme/held`: the challenges the node answers now, from any node
//!   ([`Held`]): what tells the ordering node that every node answers
//!   before it asks the CA to validate.
//!
//! Nodes that do not know these keys ignore them.

use serde::{Deserialize, Serialize};

/// The key of what a node orders from and manages.
pub const NODE_KEY: &str = "acme/node";
/// The prefix of a node's certificate states.
pub const STATE_PREFIX: &str = "acme/state/";
/// The prefix of the certificates a node passes on, and of their parts.
pub const CERT_PREFIX: &str = "acme/certificate/";
/// The prefix of HTTP-01 key authorizations, by token.
pub const HTTP_PREFIX: &str = "acme/http/";
/// The prefix of TLS-ALPN-01 key authorizations, by name.
pub const ALPN_PREFIX: &str = "acme/alpn/";
/// The key of the challenges a node answers.
pub const HELD_KEY: &str = "acme/held";
/// Bytes of PEM text in one part of a certificate: far below a gossip
/// value's limit.
pub const PART: usize = 1536;
/// The most parts of one certificate (a chain of a dozen certificates).
pub const MAX_PARTS: u32 = 32;
/// The longest error a state carries, in bytes.
pub const MAX_ERROR: usize = 400;

/// Where a node stands with one certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// It has no certificate yet; another node orders it.
    Waiting,
    /// It has no certificate yet and orders it now.
    Ordering,
    /// It serves a certificate.
    Serving,
    /// It serves a certificate and orders its successor now.
    Renewing,
    /// Its last order failed; it retries at `retry_at_unix`.
    Failing,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Ordering => "ordering",
            Phase::Serving => "serving",
            Phase::Renewing => "renewing",
            Phase::Failing => "failing",
        }
    }

    pub const ALL: [Phase; 5] = [
        Phase::Waiting,
        Phase::Ordering,
        Phase::Serving,
        Phase::Renewing,
        Phase::Failing,
    ];
}

/// One node's state of one certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateState {
    /// The certificate's first name, as configured: what names it.
    pub name: String,
    pub phase: Phase,
    /// The serial number of the certificate it serves, lowercase hex.
    pub serial: Option<String>,
    pub not_after_unix: Option<i64>,
    /// When the certificate served is renewed: at two thirds of its
    /// lifetime.
    pub renew_at_unix: Option<i64>,
    /// The node that orders this certificate, as this node reckons.
    pub orderer: Option<String>,
    /// The node that ordered the certificate served.
    pub issued_by: Option<String>,
    /// This node's last failed order: what the CA (or the way to it) said.
    pub error: Option<String>,
    /// When this node orders again after a failure.
    pub retry_at_unix: Option<i64>,
}

/// What a node orders from: the nodes that may order a certificate are
/// the live ones that manage it from the same directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcmeNode {
    pub directory: String,
}

/// A certificate a node passes on: its parts follow under
/// `acme/certificate/NAME/0` and on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issued {
    pub serial: String,
    pub not_before_unix: i64,
    pub not_after_unix: i64,
    /// The node that ordered it.
    pub by: String,
    /// The directory that issued it: a node serves only its own
    /// directory's.
    pub directory: String,
    pub parts: u32,
    /// SHA-256 of the whole PEM text (chain, then key), lowercase hex.
    pub digest: String,
}

/// The challenges a node answers now: the first 8 bytes (hex) of the
/// SHA-256 of each token (HTTP-01) and of each `alpn:NAME` (TLS-ALPN-01).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub challenges: Vec<String>,
}

/// What [`Held`] lists for a token or a name.
pub fn held_id(what: &str) -> String {
    let mut digest = crate::feed::fingerprint(what.as_bytes());
    digest.truncate(16);
    digest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::{decode_value, encode_value};

    #[test]
    fn states_and_headers_fit_and_read_back() {
        let state = CertificateState {
            name: "shop.example.com".into(),
            phase: Phase::Failing,
            serial: Some("0a".repeat(20)),
            not_after_unix: Some(1_800_000_000),
            renew_at_unix: Some(1_799_000_000),
            orderer: Some("node-a".into()),
            issued_by: Some("node-b".into()),
            error: Some("e".repeat(MAX_ERROR)),
            retry_at_unix: Some(1_798_000_000),
        };
        let text = encode_value(&state).expect("fits");
        assert_eq!(decode_value::<CertificateState>(&text).unwrap(), state);
        let issued = Issued {
            serial: "0a".repeat(20),
            not_before_unix: 1,
            not_after_unix: 2,
            by: "node-a".into(),
            directory: format!("https://{}/directory", "a".repeat(200)),
            parts: MAX_PARTS,
            digest: "f".repeat(64),
        };
        let text = encode_value(&issued).expect("fits");
        assert_eq!(decode_value::<Issued>(&text).unwrap(), issued);
        let node = AcmeNode {
            directory: "https://acme-v02.api.letsencrypt.org/directory".into(),
        };
        let text = encode_value(&node).expect("fits");
        assert_eq!(decode_value::<AcmeNode>(&text).unwrap(), node);
        assert_eq!(held_id("token"), held_id("token"));
        assert_eq!(held_id("token").len(), 16);
        assert_ne!(held_id("token"), held_id("alpn:token"));
    }
}
