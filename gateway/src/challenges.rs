//! The ACME challenges this node answers now, whichever node ordered
//! ([`crate::acme`]): HTTP-01 tokens on every listener, before any route;
//! TLS-ALPN-01 certificates on the HTTPS listener. Read by every request
//! and handshake, replaced whole.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;

/// The path prefix of HTTP-01 challenges (RFC 8555, section 8.3).
pub const HTTP_PATH: &str = "/.well-known/acme-challenge/";
/// The ALPN protocol of TLS-ALPN-01 (RFC 8737).
pub const ALPN_ACME: &[u8] = b"acme-tls/1";

/// What is answered now.
#[derive(Default)]
pub struct Challenges {
    now: ArcSwap<Answers>,
}

impl std::fmt::Debug for Challenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let now = self.now.load();
        f.debug_struct("Challenges")
            .field("http", &now.http.len())
            .field("alpn", &now.alpn.len())
            .finish()
    }
}

/// One snapshot of the answers.
#[derive(Default)]
pub struct Answers {
    /// Key authorization by token.
    http: HashMap<String, bytes::Bytes>,
    /// The self-signed challenge certificate by name (lower case), with
    /// the key authorization it was made for.
    alpn: HashMap<String, (String, Arc<CertifiedKey>)>,
}

impl Challenges {
    /// The body that answers `GET path`, when `path` is a token this node
    /// holds.
    pub fn http(&self, path: &[u8]) -> Option<bytes::Bytes> {
        let token = path.strip_prefix(HTTP_PATH.as_bytes())?;
        let token = std::str::from_utf8(token).ok()?;
        let now = self.now.load();
        if now.http.is_empty() {
            return None;
        }
        now.http.get(token).cloned()
    }

    /// The certificate that answers a TLS-ALPN-01 handshake for `name`.
    pub fn alpn(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let now = self.now.load();
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        now.alpn.get(&name).map(|(_, key)| Arc::clone(key))
    }

    /// Answers these and only these from now on: HTTP-01 key
    /// authorizations by token, TLS-ALPN-01 ones by name. A name whose key
    /// authorization did not change keeps its certificate. Returns the
    /// ids ([`picket_proto::acme::held_id`]) of what is answered.
    pub fn set(&self, http: Vec<(String, String)>, alpn: Vec<(String, String)>) -> Vec<String> {
        let before = self.now.load_full();
        let mut held = Vec::new();
        let mut next = Answers::default();
        for (token, authorization) in http {
            held.push(picket_proto::acme::held_id(&token));
            next.http.insert(token, bytes::Bytes::from(authorization));
        }
        for (name, authorization) in alpn {
            let name = name.to_ascii_lowercase();
            let kept = before
                .alpn
                .get(&name)
                .filter(|(was, _)| *was == authorization)
                .map(|(_, key)| Arc::clone(key));
            let key = match kept {
                Some(key) => key,
                None => match alpn_certificate(&name, &authorization) {
                    Ok(key) => key,
                    Err(error) => {
                        tracing::warn!(%name, %error, "cannot make the TLS-ALPN-01 certificate");
                        continue;
                    }
                },
            };
            held.push(picket_proto::acme::held_id(&format!("alpn:{name}")));
            next.alpn.insert(name, (authorization, key));
        }
        held.sort();
        self.now.store(Arc::new(next));
        held
    }
}

/// The self-signed certificate that proves control of `name` for the key
/// authorization `authorization` (RFC 8737, section 3): the name as its
/// one SAN, and the SHA-256 of the key authorization in a critical
/// acmeIdentifier extension.
pub fn alpn_certificate(name: &str, authorization: &str) -> Result<Arc<CertifiedKey>, String> {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, authorization.as_bytes());
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest.as_ref())];
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signer = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signer,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_answer_only_their_own_path() {
        let challenges = Challenges::default();
        assert_eq!(challenges.http(b"/.well-known/acme-challenge/abc"), None);
        let held = challenges.set(vec![("abc".into(), "abc.thumb".into())], Vec::new());
        assert_eq!(held, [picket_proto::acme::held_id("abc")]);
        assert_eq!(
            challenges
                .http(b"/.well-known/acme-challenge/abc")
                .as_deref(),
            Some(&b"abc.thumb"[..])
        );
        for other in [
            &b"/.well-known/acme-challenge/abd"[..],
            b"/.well-known/acme-challenge/",
            b"/.well-known/acme-challenge/abc/",
            b"/abc",
        ] {
            assert_eq!(challenges.http(other), None, "{other:?}");
        }
        challenges.set(Vec::new(), Vec::new());
        assert_eq!(challenges.http(b"/.well-known/acme-challenge/abc"), None);
    }

    #[test]
    fn an_alpn_certificate_carries_the_digest_and_is_kept_while_unchanged() {
        let challenges = Challenges::default();
        challenges.set(Vec::new(), vec![("Shop.example.com".into(), "t.k".into())]);
        let first = challenges.alpn("shop.example.com.").expect("a certificate");
        let der = first.cert[0].as_ref();
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"t.k");
        assert!(
            der.windows(32).any(|w| w == digest.as_ref()),
            "the digest is in the certificate"
        );
        challenges.set(Vec::new(), vec![("shop.example.com".into(), "t.k".into())]);
        let again = challenges.alpn("shop.example.com").expect("still");
        assert!(Arc::ptr_eq(&first, &again), "kept, not made again");
        challenges.set(Vec::new(), vec![("shop.example.com".into(), "u.k".into())]);
        let other = challenges.alpn("shop.example.com").expect("a new one");
        assert!(!Arc::ptr_eq(&first, &other));
        assert!(challenges.alpn("api.example.com").is_none());
    }
}
