//! `[acme]` and the `[[certificate]]`s it obtains (`acme = [...]`).

use super::*;

impl Validator<'_> {
    /// `[acme]` and its certificates; `None` without `[acme]` (then a
    /// `[[certificate]]` with `acme` is refused where it stands).
    pub(super) fn acme(&mut self, raw: &RawConfig, dir: &Path) -> Option<AcmeSettings> {
        let names = self.acme_certificates(raw);
        let Some(section) = &raw.acme else {
            for certificate in &raw.certificates {
                if let Some(acme) = &certificate.get_ref().acme {
                    self.problem(
                        acme.span(),
                        "`acme` needs an [acme] section: the directory of the CA, and the cache",
                    );
                }
            }
            return None;
        };
        let whole = section.span();
        let section: &RawAcme = section.get_ref();
        let directory = match &section.directory {
            None => {
                self.problem(
                    whole.clone(),
                    "[acme] needs `directory`: the CA's directory URL, such as \"https://acme-v02.api.letsencrypt.org/directory\"",
                );
                None
            }
            Some(directory) => {
                let url = directory.get_ref();
                let https = url
                    .parse::<http::Uri>()
                    .ok()
                    .is_some_and(|uri| uri.scheme_str() == Some("https") && uri.host().is_some());
                if !https {
                    self.problem(
                        directory.span(),
                        format!("directory {url:?} is not an https:// URL"),
                    );
                }
                Some(url.clone())
            }
        };
        let email = section.email.as_ref().and_then(|email| {
            let text = email.get_ref();
            let valid = text
                .split_once('@')
                .is_some_and(|(user, domain)| !user.is_empty() && is_dns_name(domain))
                && !text.contains(|c: char| c.is_whitespace() || c == ',' || c == ':');
            if valid {
                Some(text.clone())
            } else {
                self.problem(
                    email.span(),
                    format!("email {text:?} is not an address such as \"ops@example.com\""),
                );
                None
            }
        });
        let ca = section.ca.as_ref().and_then(|ca| self.pem_roots(ca, dir));
        let issuers = section
            .issuers
            .as_ref()
            .and_then(|issuers| self.pem_roots(issuers, dir));
        let max_lifetime = section
            .max_lifetime
            .as_ref()
            .and_then(|raw| self.duration(raw, "max_lifetime", ACME_LIFETIME_RANGE))
            .unwrap_or(DEFAULT_ACME_MAX_LIFETIME);
        let cache = match &section.cache {
            None => {
                self.problem(
                    whole.clone(),
                    "[acme] needs `cache`: a directory on a volume, where the node keeps its account and certificates",
                );
                None
            }
            Some(cache) => match std::path::absolute(dir.join(cache.get_ref())) {
                Ok(path) => Some(path),
                Err(e) => {
                    self.problem(cache.span(), format!("cannot resolve the path: {e}"));
                    None
                }
            },
        };
        let challenge = match &section.challenge {
            None => AcmeChallenge::Http01,
            Some(challenge) => match challenge.get_ref().to_ascii_lowercase().as_str() {
                "http-01" => AcmeChallenge::Http01,
                "tls-alpn-01" => {
                    if raw.node.listen_tls.is_none() {
                        self.problem(
                            challenge.span(),
                            "tls-alpn-01 is answered by the HTTPS listener: set `[node] listen_tls`",
                        );
                    }
                    AcmeChallenge::TlsAlpn01
                }
                other => {
                    self.problem(
                        challenge.span(),
                        format!("challenge {other:?} is not one of \"http-01\", \"tls-alpn-01\""),
                    );
                    AcmeChallenge::Http01
                }
            },
        };
        if let Some(cluster) = &raw.cluster
            && let Some(insecure) = &cluster.get_ref().insecure
            && *insecure.get_ref()
        {
            self.problem(
                insecure.span(),
                "[acme] passes certificate keys to the other nodes through gossip: it needs a cluster key, not `insecure = true`",
            );
        }
        if names.is_empty() {
            self.problem(
                whole,
                "[acme] obtains nothing: add a [[certificate]] with `acme = [\"shop.example.com\"]`",
            );
        }
        Some(AcmeSettings {
            directory: directory?,
            email,
            ca,
            issuers,
            max_lifetime,
            cache: cache?,
            challenge,
            certificates: names,
        })
    }

    /// A PEM file of root certificates (relative to the file's directory):
    /// its path and its text, with at least one certificate in it.
    fn pem_roots(&mut self, raw: &Spanned<String>, dir: &Path) -> Option<(PathBuf, Vec<u8>)> {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        let path = dir.join(raw.get_ref());
        match std::fs::read(&path) {
            Ok(pem) => {
                if CertificateDer::pem_slice_iter(&pem)
                    .flatten()
                    .next()
                    .is_none()
                {
                    self.problem(
                        raw.span(),
                        format!("{}: no PEM certificate in it", path.display()),
                    );
                    return None;
                }
                Some((path, pem))
            }
            Err(e) => {
                self.problem(
                    raw.span(),
                    format!("cannot read CA certificates {}: {e}", path.display()),
                );
                None
            }
        }
    }

    /// The names of each `[[certificate]]` with `acme`, checked: DNS
    /// names (no wildcards: they need DNS-01), each in one certificate,
    /// not beside `cert`, `key` or `hosts`.
    fn acme_certificates(&mut self, raw: &RawConfig) -> Vec<Vec<String>> {
        let mut seen: HashMap<String, ()> = HashMap::new();
        let mut certificates = Vec::new();
        for certificate in &raw.certificates {
            let certificate = certificate.get_ref();
            let Some(list) = &certificate.acme else {
                continue;
            };
            for (field, name) in [(&certificate.cert, "cert"), (&certificate.key, "key")] {
                if let Some(field) = field {
                    self.problem(
                        field.span(),
                        format!("`{name}` and `acme` contradict each other: a certificate is either read from files or obtained from ACME"),
                    );
                }
            }
            if let Some(hosts) = &certificate.hosts {
                self.problem(
                    hosts.span(),
                    "`hosts` narrows a certificate read from files; an ACME certificate serves the names in `acme`",
                );
            }
            if list.get_ref().is_empty() {
                self.problem(list.span(), "acme must name at least one host");
                continue;
            }
            let mut names = Vec::new();
            for name in list.get_ref() {
                let lower = name.get_ref().trim_end_matches('.').to_ascii_lowercase();
                if lower.starts_with("*.") {
                    self.problem(
                        name.span(),
                        format!("{:?}: a wildcard is validated by DNS-01 only, which Picket does not answer; name each host", name.get_ref()),
                    );
                } else if !is_dns_name(&lower) || !lower.contains('.') {
                    self.problem(
                        name.span(),
                        format!(
                            "{:?} is not a DNS name such as \"shop.example.com\"",
                            name.get_ref()
                        ),
                    );
                } else if seen.insert(lower.clone(), ()).is_some() {
                    self.problem(
                        name.span(),
                        format!(
                            "{lower:?} is in another ACME certificate already: each name in one"
                        ),
                    );
                } else {
                    names.push(lower);
                }
            }
            if names.len() == list.get_ref().len() {
                certificates.push(names);
            }
        }
        certificates
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems};
    use super::*;

    const CLUSTER: &str = "[cluster]\nid = \"c\"\nkey_file = \"k\"\n";

    fn text(acme: &str, certificates: &str) -> String {
        format!("{CLUSTER}\n{acme}\n{certificates}\n{ROUTE}")
    }

    #[test]
    fn an_acme_certificate_is_read_with_its_section() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("picket.toml");
        let body = text(
            "[acme]\ndirectory = \"https://ca.example/dir\"\nemail = \"ops@example.com\"\ncache = \"acme\"\n",
            "[[certificate]]\nacme = [\"Shop.Example.com\", \"www.example.com\"]\n\n[[certificate]]\nacme = [\"api.example.com\"]\n",
        );
        let config = validate(file.to_str().unwrap(), &body, 0).unwrap_or_else(|p| panic!("{p:?}"));
        let acme = config.acme.expect("[acme]");
        assert_eq!(acme.directory, "https://ca.example/dir");
        assert_eq!(acme.email.as_deref(), Some("ops@example.com"));
        assert_eq!(acme.cache, dir.path().join("acme"));
        assert_eq!(acme.challenge, AcmeChallenge::Http01);
        assert_eq!(
            acme.certificates,
            [
                vec!["shop.example.com".to_string(), "www.example.com".into()],
                vec!["api.example.com".to_string()]
            ]
        );
        assert!(config.certificates.is_empty(), "no file certificates");
    }

    #[test]
    fn each_mistake_is_named_where_it_stands() {
        let cases = [
            (
                text("", "[[certificate]]\nacme = [\"a.example.com\"]\n"),
                "7:8: `acme` needs an [acme] section",
            ),
            (
                text(
                    "[acme]\ndirectory = \"http://ca.example/dir\"\ncache = \"c\"\n",
                    "[[certificate]]\nacme = [\"a.example.com\"]\n",
                ),
                "6:13: directory \"http://ca.example/dir\" is not an https:// URL",
            ),
            (
                text(
                    "[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\n",
                    "[[certificate]]\nacme = [\"*.example.com\"]\n",
                ),
                "10:9: \"*.example.com\": a wildcard is validated by DNS-01 only",
            ),
            (
                text(
                    "[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\n",
                    "[[certificate]]\nacme = [\"a.example.com\"]\n[[certificate]]\nacme = [\"A.example.com\"]\n",
                ),
                "12:9: \"a.example.com\" is in another ACME certificate already",
            ),
            (
                text(
                    "[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\nemail = \"not an address\"\n",
                    "[[certificate]]\nacme = [\"a.example.com\"]\n",
                ),
                "8:9: email \"not an address\" is not an address",
            ),
            (
                text(
                    "[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\nchallenge = \"dns-01\"\n",
                    "[[certificate]]\nacme = [\"a.example.com\"]\n",
                ),
                "8:13: challenge \"dns-01\" is not one of",
            ),
            (
                text(
                    "[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\nchallenge = \"tls-alpn-01\"\n",
                    "[[certificate]]\nacme = [\"a.example.com\"]\n",
                ),
                "8:13: tls-alpn-01 is answered by the HTTPS listener",
            ),
            (
                text(
                    "[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\n",
                    "[[certificate]]\nacme = [\"a.example.com\"]\ncert = \"c.pem\"\n",
                ),
                "11:8: `cert` and `acme` contradict each other",
            ),
            (
                format!(
                    "[cluster]\nid = \"c\"\ninsecure = true\n\n[acme]\ndirectory = \"https://ca.example/dir\"\ncache = \"c\"\n\n[[certificate]]\nacme = [\"a.example.com\"]\n{ROUTE}"
                ),
                "3:12: [acme] passes certificate keys to the other nodes through gossip",
            ),
            (
                text("", "[[certificate]]\nhosts = [\"a.example.com\"]\n"),
                "6:1: a [[certificate]] needs `cert` and `key`",
            ),
        ];
        let mut wrong = Vec::new();
        for (text, expected) in cases {
            let found = problems(&text);
            if !found.iter().any(|p| p.starts_with(expected)) {
                wrong.push(format!("{expected}\n  found {found:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
