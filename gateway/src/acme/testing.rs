//! What the ACME tests share: a CA that issues certificates, and settings
//! that trust it.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{AcmeChallenge, AcmeSettings};

/// 2027-01-01: the tests' now, in Unix seconds.
pub const NOW: i64 = 1_798_761_600;
/// The directory of [`settings`].
pub const DIRECTORY: &str = "https://ca.test/dir";

/// A CA that issues certificates for names, valid a number of days from a
/// day before [`NOW`].
pub struct Ca {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// The chain, then the key, for `names`, valid `days` from a day
    /// before [`NOW`].
    pub fn issue(&self, names: &[&str], days: u64) -> String {
        self.issue_from(names, NOW - 86_400, days)
    }

    /// The same, valid `days` from `from` (Unix seconds).
    pub fn issue_from(&self, names: &[&str], from: i64, days: u64) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        let from = u64::try_from(from).unwrap();
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.not_before = epoch + Duration::from_secs(from);
        params.not_after = epoch + Duration::from_secs(from + days * 86_400);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        format!("{}{}", cert.pem(), key.serialize_pem())
    }
}

/// A self-signed certificate for `names`, valid until 9999: what a holder
/// of the cluster key could plant.
pub fn self_signed(names: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(9999, 12, 31);
    let cert = params.self_signed(&key).unwrap();
    format!("{}{}", cert.pem(), key.serialize_pem())
}

/// `[acme]` at [`DIRECTORY`], trusting `issuers` for its certificates, for
/// one certificate of `shop.test` and `www.shop.test`.
pub fn settings(issuers: &Ca) -> AcmeSettings {
    AcmeSettings {
        directory: DIRECTORY.into(),
        email: None,
        ca: None,
        issuers: Some((
            PathBuf::from("issuers.pem"),
            issuers.pem.clone().into_bytes(),
        )),
        max_lifetime: Duration::from_secs(398 * 86_400),
        cache: PathBuf::from("/cache"),
        challenge: AcmeChallenge::Http01,
        certificates: vec![vec!["shop.test".into(), "www.shop.test".into()]],
    }
}
