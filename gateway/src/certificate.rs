//! One certificate for HTTPS clients: a PEM chain and its key, checked
//! before it may serve.
//!
//! ## What is refused
//! A chain with no certificate, a key file with no key or a key ring
//! cannot sign with, a key that is not the certificate's (their public
//! keys differ), a certificate that has expired or is not valid yet, and a
//! `hosts` entry the certificate does not cover. Each is refused with what
//! is wrong; the caller names the file, since it knows the file.
//!
//! ## Names
//! A certificate serves the DNS names of its subject alternative names,
//! or, when `hosts` is given, only those (each one must be covered by a
//! name of the certificate: `a.example.com` by itself or by
//! `*.example.com`). The common name is not a name: browsers stopped
//! reading it, and so does Picket.

use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

pub(crate) mod validity;

/// A certificate that expires within this (seconds) is warned about: the
/// node's own, and those its TLS replicas present.
pub const WARN_WITHIN: i64 = 14 * 86_400;

use validity::validity;

/// A certificate that passed every check, ready to serve.
pub struct Certificate {
    /// The chain and the signing key, as rustls serves them.
    pub key: Arc<CertifiedKey>,
    /// The DNS names of its subject alternative names, lower case.
    pub sans: Vec<String>,
    /// The names it serves: `hosts` when given, else `sans`.
    pub names: Vec<String>,
    /// The serial number, lowercase hex.
    pub serial: String,
    /// Unix seconds.
    pub not_before: i64,
    /// Unix seconds.
    pub not_after: i64,
    /// What was read: a digest of both files, to tell a new version from
    /// the one served.
    pub version: Version,
}

/// A digest of a certificate file and its key file together.
pub type Version = [u8; 32];

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Certificate")
            .field("names", &self.names)
            .field("serial", &self.serial)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Certificate {
    fn eq(&self, other: &Self) -> bool {
        self.version == other.version && self.names == other.names
    }
}

/// Which file, or which part of the configuration, a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Culprit {
    Cert,
    Key,
    /// The `hosts` entry at this index.
    Host(usize),
}

/// Why a certificate may not serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("no certificate in it (PEM `CERTIFICATE`)")]
    NoCertificate,
    #[error("not a readable PEM file: {0}")]
    Pem(String),
    #[error("no private key in it (PEM `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`)")]
    NoKey,
    #[error("the certificate cannot be parsed: {0}")]
    Malformed(String),
    #[error("the certificate expired on {0}")]
    Expired(String),
    #[error("the certificate is not valid before {0}")]
    NotYetValid(String),
    #[error("the key cannot sign: {0}")]
    UnusableKey(String),
    #[error("the key does not match the certificate (their public keys differ)")]
    Mismatch,
    #[error("{host:?} is not among the certificate's names ({})", names.join(", "))]
    NotCovered { host: String, names: Vec<String> },
}

impl CertError {
    /// What the refusal is about.
    pub fn culprit(&self, hosts: Option<&[String]>) -> Culprit {
        match self {
            CertError::NoKey | CertError::UnusableKey(_) | CertError::Mismatch => Culprit::Key,
            CertError::NotCovered { host, .. } => hosts
                .and_then(|hosts| hosts.iter().position(|h| h.eq_ignore_ascii_case(host)))
                .map_or(Culprit::Cert, Culprit::Host),
            _ => Culprit::Cert,
        }
    }
}

/// Checks a PEM chain and key at `now` (Unix seconds); `hosts` narrows
/// the names served.
pub fn check(
    cert_pem: &[u8],
    key_pem: &[u8],
    hosts: Option<&[String]>,
    now: i64,
) -> Result<Certificate, CertError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<CertificateDer<'static>>, _>>()
        .map_err(|e| CertError::Pem(e.to_string()))?;
    let Some(leaf) = chain.first() else {
        return Err(CertError::NoCertificate);
    };
    let parsed = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| CertError::Malformed(format!("{e:?}")))?;
    let mut sans: Vec<String> = parsed
        .valid_dns_names()
        .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
        .collect();
    sans.dedup();
    let serial = parsed.serial().iter().map(|b| format!("{b:02x}")).collect();
    let (not_before, not_after) = validity(leaf.as_ref())
        .ok_or_else(|| CertError::Malformed("no readable validity period".into()))?;
    if now > not_after {
        return Err(CertError::Expired(rfc3339(not_after)));
    }
    if now < not_before {
        return Err(CertError::NotYetValid(rfc3339(not_before)));
    }
    let key = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => return Err(CertError::NoKey),
        Err(e) => return Err(CertError::Pem(e.to_string())),
    };
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| CertError::UnusableKey(e.to_string()))?;
    let key = CertifiedKey::new(chain, signer);
    match key.keys_match() {
        // ring's keys all know their public key: "unknown" does not happen,
        // and would not be a reason to refuse.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => return Err(CertError::Mismatch),
        Err(e) => return Err(CertError::Malformed(e.to_string())),
    }
    let names = match hosts {
        None => sans.clone(),
        Some(hosts) => {
            let mut names = Vec::with_capacity(hosts.len());
            for host in hosts {
                let host = host.to_ascii_lowercase();
                if !sans.iter().any(|san| covers(san, &host)) {
                    return Err(CertError::NotCovered { host, names: sans });
                }
                names.push(host);
            }
            names
        }
    };
    Ok(Certificate {
        key: Arc::new(key),
        sans,
        names,
        serial,
        not_before,
        not_after,
        version: version(cert_pem, key_pem),
    })
}

/// The digest of a certificate file and its key file.
pub fn version(cert_pem: &[u8], key_pem: &[u8]) -> Version {
    let mut context = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    context.update(&(cert_pem.len() as u64).to_be_bytes());
    context.update(cert_pem);
    context.update(key_pem);
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// Whether the certificate name `san` covers `host`: the same name, or a
/// wildcard over exactly one more label (`*.example.com` covers
/// `a.example.com`, not `a.b.example.com` nor `example.com`).
pub fn covers(san: &str, host: &str) -> bool {
    if san == host {
        return true;
    }
    match (san.strip_prefix("*."), host.split_once('.')) {
        (Some(parent), Some((label, rest))) => !label.is_empty() && label != "*" && rest == parent,
        _ => false,
    }
}

/// A Unix time as RFC 3339, for messages.
pub fn rfc3339(unix: i64) -> String {
    let time = if unix >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix.unsigned_abs())
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_secs(unix.unsigned_abs())
    };
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate for `names`, valid over `years` (from, to), and its
    /// key, as PEM.
    fn pem(names: &[&str], years: (i32, i32)) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
        params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
        params.serial_number = Some(rcgen::SerialNumber::from(vec![0x0a, 0x0b]));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// 2026-12-01.
    const NOW: i64 = 1_796_083_200;

    #[test]
    fn a_good_pair_serves_its_names() {
        let (cert, key) = pem(&["A.example.com", "*.example.com"], (2020, 2040));
        let checked = check(cert.as_bytes(), key.as_bytes(), None, NOW).unwrap();
        assert_eq!(checked.names, ["a.example.com", "*.example.com"]);
        assert_eq!(checked.serial, "0a0b");
        assert_eq!(checked.not_after, 2_208_988_800);
        let hosts = ["b.example.com".to_string()];
        let narrowed = check(cert.as_bytes(), key.as_bytes(), Some(&hosts), NOW).unwrap();
        assert_eq!(narrowed.names, ["b.example.com"]);
        assert_eq!(narrowed.sans, checked.sans);
        assert_ne!(narrowed, checked, "other names, another certificate");
    }

    #[test]
    fn refusals_say_what_and_where() {
        let (cert, key) = pem(&["a.example.com"], (2020, 2040));
        let (_, other_key) = pem(&["a.example.com"], (2020, 2040));
        let (expired, expired_key) = pem(&["a.example.com"], (2000, 2001));
        let (early, early_key) = pem(&["a.example.com"], (2030, 2040));
        let hosts = ["a.example.com".to_string(), "b.example.com".to_string()];
        /// Certificate and key PEM, `hosts`, and the refusal.
        type Case<'a> = (&'a str, &'a str, Option<&'a [String]>, CertError, Culprit);
        let cases: [Case<'_>; 7] = [
            (&cert, &other_key, None, CertError::Mismatch, Culprit::Key),
            (
                &expired,
                &expired_key,
                None,
                CertError::Expired("2001-01-01T00:00:00Z".into()),
                Culprit::Cert,
            ),
            (
                &early,
                &early_key,
                None,
                CertError::NotYetValid("2030-01-01T00:00:00Z".into()),
                Culprit::Cert,
            ),
            ("", &key, None, CertError::NoCertificate, Culprit::Cert),
            (&key, &key, None, CertError::NoCertificate, Culprit::Cert),
            (&cert, &cert, None, CertError::NoKey, Culprit::Key),
            (
                &cert,
                &key,
                Some(&hosts),
                CertError::NotCovered {
                    host: "b.example.com".into(),
                    names: vec!["a.example.com".into()],
                },
                Culprit::Host(1),
            ),
        ];
        for (cert, key, hosts, error, culprit) in cases {
            let refused = check(cert.as_bytes(), key.as_bytes(), hosts, NOW).unwrap_err();
            assert_eq!(refused, error);
            assert_eq!(refused.culprit(hosts), culprit, "{refused}");
        }
    }

    #[test]
    fn wildcards_cover_one_label() {
        let cases = [
            ("a.example.com", "a.example.com", true),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "*.example.com", true),
            ("*.example.com", "a.b.example.com", false),
            ("*.example.com", "example.com", false),
            ("*.example.com", ".example.com", false),
            ("a.example.com", "b.example.com", false),
        ];
        for (san, host, covered) in cases {
            assert_eq!(covers(san, host), covered, "{san} covers {host}");
        }
    }

    #[test]
    fn a_version_is_both_files() {
        assert_ne!(version(b"ab", b"c"), version(b"a", b"bc"));
        assert_eq!(version(b"a", b"b"), version(b"a", b"b"));
    }
}
