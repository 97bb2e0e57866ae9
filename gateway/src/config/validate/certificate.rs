//! `[[certificate]]`: what the HTTPS listener serves, and what it needs.

use super::*;

impl Validator<'_> {
    /// A `[[certificate]]`: its files read from `dir` (when relative) and
    /// checked at `now`; each problem at the value it is about.
    pub(super) fn certificate(
        &mut self,
        raw: &Spanned<RawCertificate>,
        dir: &Path,
        now: i64,
    ) -> Option<CertificateConfig> {
        let whole = raw.span();
        let raw = raw.get_ref();
        if raw.acme.is_some() {
            // Obtained from ACME: checked with `[acme]`.
            return None;
        }
        let (Some(cert_field), Some(key_field)) = (&raw.cert, &raw.key) else {
            let at = raw
                .cert
                .as_ref()
                .or(raw.key.as_ref())
                .map_or(whole, Spanned::span);
            self.problem(
                at,
                "a [[certificate]] needs `cert` and `key` (a PEM chain and its key), or `acme` (the names to obtain from [acme])",
            );
            return None;
        };
        let hosts = match &raw.hosts {
            None => None,
            Some(list) if list.get_ref().is_empty() => {
                self.problem(
                    list.span(),
                    "hosts must name at least one host (leave it out to serve every name of the certificate)",
                );
                return None;
            }
            Some(list) => {
                let mut hosts = Vec::new();
                for host in list.get_ref() {
                    let name = host.get_ref().to_ascii_lowercase();
                    let bare = name.strip_prefix("*.").unwrap_or(&name);
                    if !is_dns_name(bare) {
                        self.problem(
                            host.span(),
                            format!(
                                "host {:?} must be a DNS name such as \"api.example.com\" or \"*.example.com\"",
                                host.get_ref()
                            ),
                        );
                        return None;
                    }
                    hosts.push(name);
                }
                Some(hosts)
            }
        };
        let path = |p: &Spanned<String>| std::path::absolute(dir.join(p.get_ref()));
        let (cert, key) = match (path(cert_field), path(key_field)) {
            (Ok(cert), Ok(key)) => (cert, key),
            (Err(e), _) | (_, Err(e)) => {
                self.problem(cert_field.span(), format!("cannot resolve the path: {e}"));
                return None;
            }
        };
        let cert_pem = match std::fs::read(&cert) {
            Ok(pem) => pem,
            Err(e) => {
                self.problem(
                    cert_field.span(),
                    format!("cannot read certificate {}: {e}", cert.display()),
                );
                return None;
            }
        };
        let key_pem = match std::fs::read(&key) {
            Ok(pem) => pem,
            Err(e) => {
                self.problem(
                    key_field.span(),
                    format!("cannot read key {}: {e}", key.display()),
                );
                return None;
            }
        };
        match crate::certificate::check(&cert_pem, &key_pem, hosts.as_deref(), now) {
            Ok(current) => Some(CertificateConfig {
                cert,
                key,
                hosts,
                current: Arc::new(current),
            }),
            Err(error) => {
                let (span, file) = match error.culprit(hosts.as_deref()) {
                    Culprit::Cert => (cert_field.span(), format!("certificate {}", cert.display())),
                    Culprit::Key => (
                        key_field.span(),
                        format!("key {} (for certificate {})", key.display(), cert.display()),
                    ),
                    Culprit::Host(i) => (
                        raw.hosts
                            .as_ref()
                            .and_then(|h| h.get_ref().get(i))
                            .map_or(cert_field.span(), Spanned::span),
                        format!("certificate {}", cert.display()),
                    ),
                };
                self.problem(span, format!("{file}: {error}"));
                None
            }
        }
    }

    /// The HTTPS settings hold together: a TLS listener has a certificate
    /// to serve, and an `https_only` route a TLS listener to send its
    /// clients to (which a flag may give, but not a certificate).
    pub(super) fn edge(&mut self, raw: &RawConfig) {
        if raw.certificates.is_empty() {
            if let Some(listen_tls) = &raw.node.listen_tls {
                self.problem(
                    listen_tls.span(),
                    "listen_tls needs at least one [[certificate]] (cert and key) to serve",
                );
            }
            for route in &raw.routes {
                if let Some(https_only) = &route.get_ref().https_only
                    && *https_only.get_ref()
                {
                    self.problem(
                        https_only.span(),
                        "https_only needs this node to serve HTTPS: set `[node] listen_tls` and add a [[certificate]]",
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems};

    #[test]
    fn a_certificate_whose_files_are_missing_is_refused_at_its_place() {
        let text = format!(
            "[node]\nlisten_tls = \"127.0.0.1:8443\"\n\n[[certificate]]\ncert = \"missing.crt\"\nkey = \"missing.key\"\n{ROUTE}"
        );
        let found = problems(&text);
        assert!(!found.is_empty());
        assert!(found[0].starts_with("5:8: "), "{found:?}");
        assert!(found[0].contains("missing.crt"), "{found:?}");
    }

    #[test]
    fn an_https_listener_needs_a_certificate() {
        let found = problems(&format!("[node]\nlisten_tls = \"127.0.0.1:8443\"\n{ROUTE}"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("certificate"), "{found:?}");
    }
}
