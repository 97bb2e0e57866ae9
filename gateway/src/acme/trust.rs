//! Whether a certificate may serve as the CA's, wherever it comes from:
//! this node's own order, its cache, or a peer's gossip.
//!
//! Whoever holds the cluster key can write any certificate into gossip,
//! and a cache can hold a certificate of another CA (a directory changed
//! from staging to production). So every certificate is checked as a
//! client would check the CA's, before it serves, is cached or is passed
//! on:
//! - it chains to the roots the CA's certificates chain to (`[acme]
//!   issuers`, else `[acme] ca`, else the Mozilla roots), and is valid now
//!   for every name it is to serve;
//! - its key is its certificate's, and it passes the checks a file's does
//!   ([`crate::certificate::check`]);
//! - it lives no longer than `[acme] max_lifetime` (398 days unless said:
//!   the longest a public CA may issue);
//! - the directory it says issued it is the node's own.
//!
//! What fails is refused with the reason ([`Distrust`]); the caller counts
//! it and logs it once.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::certificate::Certificate;
use crate::config::AcmeSettings;

/// The check every ACME certificate passes, for one `[acme]`.
pub struct Trust {
    verifier: Arc<WebPkiServerVerifier>,
    directory: String,
    max_lifetime: i64,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("directory", &self.directory)
            .field("max_lifetime", &self.max_lifetime)
            .finish_non_exhaustive()
    }
}

/// Why a certificate may not serve as the CA's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Distrust {
    /// It fails a check a file's certificate passes (a key that is not
    /// its own, expired, a name missing).
    #[error("{0}")]
    Unusable(String),
    /// It does not chain to the CA's roots for a name.
    #[error("it does not chain to the roots of the CA's certificates for {name}: {why}")]
    Chain { name: String, why: String },
    /// It claims to live longer than the CA's certificates may.
    #[error("it lives {days} days, more than [acme] max_lifetime ({max} days)")]
    Lifetime { days: i64, max: i64 },
    /// Another directory issued it.
    #[error("it was issued by {theirs}, not by this node's [acme] directory {ours}")]
    Directory { theirs: String, ours: String },
}

impl Distrust {
    /// A short name, for the metric.
    pub fn slug(&self) -> &'static str {
        match self {
            Distrust::Unusable(_) => "unusable",
            Distrust::Chain { .. } => "chain",
            Distrust::Lifetime { .. } => "lifetime",
            Distrust::Directory { .. } => "directory",
        }
    }
}

impl Trust {
    /// The trust of `settings`: its roots, directory and lifetime.
    pub fn new(settings: &AcmeSettings) -> Result<Trust, String> {
        let mut roots = rustls::RootCertStore::empty();
        match settings.issuers.as_ref().or(settings.ca.as_ref()) {
            Some((file, pem)) => {
                for cert in CertificateDer::pem_slice_iter(pem).flatten() {
                    roots
                        .add(cert)
                        .map_err(|e| format!("{}: {e}", file.display()))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Trust {
            verifier,
            directory: settings.directory.clone(),
            max_lifetime: i64::try_from(settings.max_lifetime.as_secs()).unwrap_or(i64::MAX),
        })
    }

    /// The directory certificates are to come from.
    pub fn directory(&self) -> &str {
        &self.directory
    }

    /// `pem` (the chain, then the key) as a certificate that serves
    /// `names` at `now` (Unix seconds), issued through `directory`; else
    /// why not.
    pub fn check(
        &self,
        pem: &str,
        names: &[String],
        directory: &str,
        now: i64,
    ) -> Result<Certificate, Distrust> {
        if directory != self.directory {
            return Err(Distrust::Directory {
                theirs: directory.to_string(),
                ours: self.directory.clone(),
            });
        }
        let checked = crate::certificate::check(pem.as_bytes(), pem.as_bytes(), Some(names), now)
            .map_err(|e| Distrust::Unusable(e.to_string()))?;
        let lifetime = checked.not_after.saturating_sub(checked.not_before);
        if lifetime > self.max_lifetime {
            return Err(Distrust::Lifetime {
                days: lifetime / 86_400,
                max: self.max_lifetime / 86_400,
            });
        }
        let chain = &checked.key.cert;
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| Distrust::Unusable("no certificate in it".into()))?;
        let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(now).unwrap_or(0),
        ));
        for name in names {
            let server = ServerName::try_from(name.as_str()).map_err(|e| Distrust::Chain {
                name: name.clone(),
                why: e.to_string(),
            })?;
            self.verifier
                .verify_server_cert(leaf, intermediates, &server, &[], at)
                .map_err(|e| Distrust::Chain {
                    name: name.clone(),
                    why: e.to_string(),
                })?;
        }
        Ok(checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acme::testing::{Ca, NOW, settings};
    use std::time::Duration;

    #[test]
    fn a_certificate_serves_only_as_its_cas_from_the_nodes_directory() {
        let ca = Ca::new("the CA");
        let trust = Trust::new(&settings(&ca)).unwrap();
        let names = ["shop.test".to_string(), "www.shop.test".to_string()];
        let good = ca.issue(&["shop.test", "www.shop.test"], 90);
        assert!(
            trust
                .check(&good, &names, "https://ca.test/dir", NOW)
                .is_ok()
        );

        // Another CA (a peer pointed at another directory, or a forgery
        // with the cluster key), self-signed, valid until 9999.
        let other = Ca::new("another CA").issue(&["shop.test", "www.shop.test"], 90);
        let self_signed = crate::acme::testing::self_signed(&["shop.test", "www.shop.test"]);
        let long = ca.issue(&["shop.test", "www.shop.test"], 900);
        let one_name = ca.issue(&["shop.test"], 90);
        let cases = [
            (&other, "https://ca.test/dir", "chain"),
            (&self_signed, "https://ca.test/dir", "lifetime"),
            (&long, "https://ca.test/dir", "lifetime"),
            (&good, "https://staging.ca.test/dir", "directory"),
            (&one_name, "https://ca.test/dir", "unusable"),
        ];
        for (pem, directory, expected) in cases {
            let refused = trust.check(pem, &names, directory, NOW).unwrap_err();
            assert_eq!(refused.slug(), expected, "{refused}");
        }
        // Expired by the time it is read.
        let expired = trust
            .check(&good, &names, "https://ca.test/dir", NOW + 100 * 86_400)
            .unwrap_err();
        assert_eq!(expired.slug(), "unusable", "{expired}");
        // Within a longer max_lifetime, the chain check still holds.
        let lenient = Trust::new(&AcmeSettings {
            max_lifetime: Duration::from_secs(3650 * 86_400),
            ..settings(&ca)
        })
        .unwrap();
        assert!(
            lenient
                .check(&long, &names, "https://ca.test/dir", NOW)
                .is_ok()
        );
        let refused = lenient
            .check(&other, &names, "https://ca.test/dir", NOW)
            .unwrap_err();
        assert_eq!(refused.slug(), "chain", "{refused}");
    }
}
