//! The certificates a node serves now, and which one a handshake gets.
//!
//! ## Picking
//! By the client's server name (SNI), without case: a certificate that
//! names it exactly, else one whose wildcard covers it (`*.example.com`
//! for `a.example.com`), else the default: the file's first certificate,
//! else the first from ACME, which is also what a client that sends no
//! name gets. When two certificates serve a name, the first in the file
//! wins. A certificate from the runtime serves only the names the
//! ownership rule admits ([`crate::config::ownership`]), and is never the
//! default: without a certificate of the file, a handshake that names no
//! host the runtime's serve gets none.
//!
//! ## Swapping
//! Handshakes read one snapshot ([`Served`]) from an `ArcSwap`; a reload
//! or a rotation builds a new one and swaps it whole. A connection keeps
//! the certificate its handshake got; only new handshakes see the new
//! one. Writers (reloads, the rotation task) take a lock among
//! themselves, so that a rotation never puts back what a reload replaced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::Notify;

use crate::certificate::Version;
use crate::challenges::{ALPN_ACME, Challenges};
use crate::config::CertificateConfig;
use crate::config::ownership::{Admitted, Rule};
use crate::metrics::Metrics;
use crate::targets::RuntimeCertificate;

/// A snapshot of the certificates served, with the index handshakes use.
#[derive(Debug, Default)]
pub struct Served {
    /// In the file's order; the first is the default.
    pub entries: Vec<CertificateConfig>,
    /// Obtained from ACME, after the file's. Their `cert` and `key` name
    /// the cache file; rotation never reads them.
    pub acme: Vec<CertificateConfig>,
    /// From the runtime (an Ingress's TLS Secrets), after the file's and
    /// ACME's: a name they serve keeps their certificate. Their `cert` and
    /// `key` name the Secret, not files; rotation never reads them. Each
    /// serves the names the ownership rule admitted, narrowed by its own.
    pub runtime: Vec<CertificateConfig>,
    /// What of the runtime's certificates the node does not serve: each
    /// refused name, with its certificate and the rule.
    pub refused: Vec<RefusedName>,
    exact: HashMap<String, usize>,
    /// By the parent of the wildcard: `example.com` for `*.example.com`.
    wildcard: HashMap<String, usize>,
}

impl Served {
    pub fn new(entries: Vec<CertificateConfig>) -> Served {
        Served::with_runtime(entries, Vec::new(), Vec::new())
    }

    /// The file's certificates, then ACME's, then the runtime's.
    pub fn with_runtime(
        entries: Vec<CertificateConfig>,
        acme: Vec<CertificateConfig>,
        runtime: Vec<CertificateConfig>,
    ) -> Served {
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        for (i, entry) in entries.iter().chain(&acme).chain(&runtime).enumerate() {
            for name in &entry.current.names {
                let (index, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut wildcard, parent),
                    None => (&mut exact, name.as_str()),
                };
                index.entry(key.to_string()).or_insert(i);
            }
        }
        Served {
            entries,
            acme,
            runtime,
            refused: Vec::new(),
            exact,
            wildcard,
        }
    }

    /// Every certificate, in the order of [`Served::pick`]'s indexes.
    pub fn all(&self) -> impl Iterator<Item = &CertificateConfig> {
        self.entries.iter().chain(&self.acme).chain(&self.runtime)
    }

    /// The certificate at index `i` of [`Served::pick`].
    pub fn get(&self, i: usize) -> Option<&CertificateConfig> {
        self.all().nth(i)
    }

    /// The index of the certificate for a handshake that named
    /// `server_name`; `None` when none serves it and there is no default
    /// (no certificate of the file's own, nor from ACME).
    pub fn pick(&self, server_name: Option<&str>) -> Option<usize> {
        let default = (!self.entries.is_empty() || !self.acme.is_empty()).then_some(0);
        let named = server_name.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if let Some(i) = self.exact.get(&name) {
                return Some(*i);
            }
            let (label, parent) = name.split_once('.')?;
            (!label.is_empty())
                .then(|| self.wildcard.get(parent).copied())
                .flatten()
        });
        named.or(default)
    }

    /// The directories of every file served: what rotation watches.
    pub fn directories(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .entries
            .iter()
            .flat_map(|e| [&e.cert, &e.key])
            .filter_map(|file| file.parent().map(PathBuf::from))
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

/// The certificates in force, read by every handshake.
pub struct Certificates {
    served: ArcSwap<Served>,
    /// Held by whoever builds the next snapshot.
    writer: Mutex<Writer>,
    metrics: Arc<Metrics>,
    /// Woken when a reload replaced the list, so that rotation follows
    /// the new files.
    pub(super) replaced: Notify,
    /// TLS-ALPN-01 challenges this node answers.
    challenges: Arc<Challenges>,
}

/// What the writers of [`Certificates`] remember between snapshots.
#[derive(Debug, Default)]
pub(super) struct Writer {
    /// The names published as metric series.
    pub(super) published: Vec<String>,
    /// The last version of each certificate file refused, so that each
    /// bad version is logged once.
    pub(super) refusals: Refusals,
    /// When each certificate (by version) was last warned about as
    /// expiring.
    pub(super) warned: HashMap<Version, i64>,
    /// The runtime's certificates as last given, admitted.
    runtime_given: Vec<Admitted<RuntimeCertificate>>,
    /// The names of the runtime's certificates last refused: each new
    /// refusal is logged once.
    refused_names: Vec<RefusedName>,
}

/// A name a certificate from the runtime may not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedName {
    /// The certificate: `secret shop/shop-tls`.
    pub source: String,
    pub name: String,
    pub rule: Rule,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates")
            .field("served", &self.served.load().entries.len())
            .finish_non_exhaustive()
    }
}

impl Certificates {
    pub fn new(entries: Vec<CertificateConfig>, metrics: Arc<Metrics>) -> Certificates {
        let certificates = Certificates {
            served: ArcSwap::from_pointee(Served::default()),
            writer: Mutex::new(Writer::default()),
            metrics,
            replaced: Notify::new(),
            challenges: Arc::default(),
        };
        certificates.replace(entries);
        certificates
    }

    /// The same, answering TLS-ALPN-01 challenges from `challenges`.
    pub fn with_challenges(self, challenges: Arc<Challenges>) -> Certificates {
        Certificates { challenges, ..self }
    }

    /// The snapshot handshakes read now.
    pub fn load(&self) -> Arc<Served> {
        self.served.load_full()
    }

    /// Serves `entries` from the next handshake on (a reload).
    pub fn replace(&self, entries: Vec<CertificateConfig>) {
        let mut writer = self.lock();
        if self.served.load().entries == entries {
            return;
        }
        self.store(&mut writer, entries);
        self.replaced.notify_one();
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves the runtime's certificates (an Ingress's TLS Secrets) from
    /// the next handshake on, beside the file's: each for the names it was
    /// admitted for that its own names cover. One that fails its check, or
    /// is left with no name, serves nothing; each refusal is logged once.
    pub fn set_runtime(&self, certificates: Vec<Admitted<RuntimeCertificate>>) {
        let mut writer = self.lock();
        if writer.runtime_given == certificates {
            return;
        }
        writer.runtime_given.clone_from(&certificates);
        let now = crate::clock::now_unix();
        let mut runtime = Vec::with_capacity(certificates.len());
        let mut refused = Vec::new();
        for admitted in certificates {
            let certificate = admitted.value();
            let source = certificate.source.clone();
            let read =
                crate::certificate::check(&certificate.cert_pem, &certificate.key_pem, None, now);
            let admitted = match read {
                Ok(read) => admitted.narrowed(&read.sans),
                Err(error) => {
                    if writer
                        .refusals
                        .first(Path::new(&source), Refused::Unreadable(error.to_string()))
                    {
                        tracing::warn!(certificate = %source, %error, "certificate from the runtime refused");
                    }
                    continue;
                }
            };
            refused.extend(admitted.refused().iter().map(|(name, rule)| RefusedName {
                source: source.clone(),
                name: name.clone(),
                rule: rule.clone(),
            }));
            if admitted.names().is_empty() {
                continue;
            }
            let certificate = admitted.value();
            match crate::certificate::check(
                &certificate.cert_pem,
                &certificate.key_pem,
                Some(admitted.names()),
                now,
            ) {
                Ok(current) => {
                    writer.refusals.clear(Path::new(&source));
                    let at = PathBuf::from(&source);
                    runtime.push(CertificateConfig {
                        cert: at.clone(),
                        key: at,
                        hosts: Some(admitted.names().to_vec()),
                        current: Arc::new(current),
                    });
                }
                Err(error) => {
                    if writer
                        .refusals
                        .first(Path::new(&source), Refused::Unreadable(error.to_string()))
                    {
                        tracing::warn!(certificate = %source, %error, "certificate from the runtime refused");
                    }
                }
            }
        }
        for refusal in refused.iter().filter(|r| !writer.refused_names.contains(r)) {
            tracing::warn!(
                certificate = %refusal.source,
                name = %refusal.name,
                rule = refusal.rule.slug(),
                reason = %refusal.rule,
                "certificate from the runtime refused for a name"
            );
        }
        writer.refused_names.clone_from(&refused);
        self.metrics.certificate_names_refused(refused.len());
        let served = self.served.load();
        let (entries, acme) = (served.entries.clone(), served.acme.clone());
        let mut next = Served::with_runtime(entries, acme, runtime);
        next.refused = refused;
        self.store_all(&mut writer, next);
    }

    /// Serves the certificates obtained from ACME from the next handshake
    /// on, after the file's: already checked.
    pub fn set_acme(&self, acme: Vec<CertificateConfig>) {
        let mut writer = self.lock();
        let served = self.served.load();
        if served.acme == acme {
            return;
        }
        let (entries, runtime) = (served.entries.clone(), served.runtime.clone());
        let mut next = Served::with_runtime(entries, acme, runtime);
        next.refused.clone_from(&served.refused);
        self.store_all(&mut writer, next);
    }

    /// Swaps in a new snapshot and publishes its expiry metrics.
    pub(super) fn store(&self, writer: &mut Writer, entries: Vec<CertificateConfig>) {
        let served = self.served.load();
        let (acme, runtime) = (served.acme.clone(), served.runtime.clone());
        let mut next = Served::with_runtime(entries, acme, runtime);
        next.refused.clone_from(&served.refused);
        self.store_all(writer, next);
    }

    fn store_all(&self, writer: &mut Writer, served: Served) {
        let names: Vec<String> = served.all().map(label).collect();
        for (name, entry) in names.iter().zip(served.all()) {
            self.metrics
                .certificate_expiry(name, entry.current.not_after);
        }
        for gone in writer.published.iter().filter(|n| !names.contains(n)) {
            self.metrics.forget_certificate(gone);
        }
        writer.published = names;
        self.served.store(Arc::new(served));
    }
}

/// A certificate as metrics and logs name it: its first name, else its
/// file.
pub fn label(entry: &CertificateConfig) -> String {
    entry
        .current
        .names
        .first()
        .cloned()
        .unwrap_or_else(|| entry.cert.display().to_string())
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A TLS-ALPN-01 validation offers `acme-tls/1` alone (RFC 8737):
        // it gets the challenge certificate for its name, or nothing.
        let mut alpn = hello.alpn().into_iter().flatten();
        if alpn.any(|p| p == ALPN_ACME) {
            return self.challenges.alpn(hello.server_name()?);
        }
        let served = self.served.load();
        let i = served.pick(hello.server_name())?;
        Some(Arc::clone(&served.get(i)?.current.key))
    }
}

/// What was last refused of a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Files that were read and failed a check.
    Version(Version),
    /// Files that could not be read, and why.
    Unreadable(String),
}

/// The refusal last logged for each certificate (by its certificate
/// file): what makes one log line per bad version.
#[derive(Debug, Default)]
pub struct Refusals {
    last: HashMap<PathBuf, Refused>,
}

impl Refusals {
    /// Records a refusal of `cert`; true when it differs from the last one
    /// recorded, so that it is to be logged.
    pub fn first(&mut self, cert: &Path, refused: Refused) -> bool {
        match self.last.get(cert) {
            Some(last) if *last == refused => false,
            _ => {
                self.last.insert(cert.to_path_buf(), refused);
                true
            }
        }
    }

    /// `cert` serves what its files hold: any later refusal is news.
    pub fn clear(&mut self, cert: &Path) {
        self.last.remove(cert);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::check;

    fn entry(names: &[&str]) -> CertificateConfig {
        let owned: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(owned)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let current = check(
            cert.pem().as_bytes(),
            key.serialize_pem().as_bytes(),
            None,
            1_796_083_200,
        )
        .unwrap();
        CertificateConfig {
            cert: PathBuf::from(format!("/certs/{}/tls.crt", names[0])),
            key: PathBuf::from(format!("/keys/{}.key", names[0])),
            hosts: None,
            current: Arc::new(current),
        }
    }

    #[test]
    fn exact_then_wildcard_then_the_first() {
        let served = Served::new(vec![
            entry(&["default.example.org"]),
            entry(&["api.example.com", "shop.example.com"]),
            entry(&["*.example.com"]),
            entry(&["shop.example.com", "*.example.com", "example.net"]),
        ]);
        let cases = [
            (Some("api.example.com"), Some(1)),
            (Some("API.Example.COM."), Some(1)),
            (Some("shop.example.com"), Some(1)),
            (Some("blog.example.com"), Some(2)),
            (Some("a.b.example.com"), Some(0)),
            (Some("example.com"), Some(0)),
            (Some("example.net"), Some(3)),
            (Some("unknown.test"), Some(0)),
            (None, Some(0)),
        ];
        for (name, picked) in cases {
            assert_eq!(served.pick(name), picked, "{name:?}");
        }
        assert_eq!(Served::default().pick(Some("api.example.com")), None);
        assert_eq!(
            served.directories(),
            [
                "/certs/*.example.com",
                "/certs/api.example.com",
                "/certs/default.example.org",
                "/certs/shop.example.com",
                "/keys",
            ]
            .map(PathBuf::from)
        );
    }

    /// Without a certificate of the file's (a node whose certificates all
    /// come from ACME, none obtained yet), a runtime's serves its own names
    /// and nothing else: a client that names no host, or another host,
    /// gets no certificate. With one, the file's is the default.
    #[test]
    fn a_certificate_from_the_runtime_is_never_the_default() {
        let runtime = Served::with_runtime(Vec::new(), Vec::new(), vec![entry(&["shop.test"])]);
        assert_eq!(runtime.pick(Some("shop.test")), Some(0));
        assert_eq!(runtime.pick(None), None);
        assert_eq!(runtime.pick(Some("other.test")), None);
        let with_file = Served::with_runtime(
            vec![entry(&["file.test"])],
            Vec::new(),
            vec![entry(&["shop.test"])],
        );
        assert_eq!(with_file.pick(Some("shop.test")), Some(1));
        assert_eq!(with_file.pick(None), Some(0));
        assert_eq!(with_file.pick(Some("other.test")), Some(0));
        let with_acme = Served::with_runtime(
            Vec::new(),
            vec![entry(&["acme.test"])],
            vec![entry(&["shop.test"])],
        );
        assert_eq!(with_acme.pick(None), Some(0), "ACME's are the file's");
    }

    #[test]
    fn a_replacement_moves_the_metrics() {
        let metrics = Arc::new(Metrics::new());
        let certificates = Certificates::new(vec![entry(&["a.example.com"])], Arc::clone(&metrics));
        assert!(
            metrics
                .encode()
                .contains("picket_certificate_expiry_seconds{name=\"a.example.com\"}")
        );
        certificates.replace(vec![entry(&["b.example.com"])]);
        let text = metrics.encode();
        assert!(!text.contains("a.example.com"), "{text}");
        assert!(
            text.contains("picket_certificate_expiry_seconds{name=\"b.example.com\"}"),
            "{text}"
        );
        assert_eq!(
            certificates.load().entries[0].current.names,
            ["b.example.com"]
        );
    }
}
