//! What the cluster's gossip holds for ACME ([`picket_proto::acme`]),
//! read from every node's keys into plain values, and what this node
//! writes. Pure: the entries come in, the keys and values go out.
//!
//! A value that does not decode, a part beyond its certificate's count, a
//! certificate whose parts do not add up to its digest: each is left out
//! and counted, never served.

use std::collections::{BTreeMap, HashMap};

use picket_proto::acme::{
    ALPN_PREFIX, AcmeNode, CERT_PREFIX, CertificateState, HELD_KEY, HTTP_PREFIX, Held, Issued,
    MAX_PARTS, NODE_KEY, PART, STATE_PREFIX,
};
use picket_proto::gossip::{decode_value, encode_value};

pub use crate::gossip::Entry;

/// A certificate some node passes on, whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Passed {
    pub node: String,
    pub name: String,
    pub issued: Issued,
    /// The chain, then the key, as PEM.
    pub pem: String,
}

impl std::fmt::Debug for Passed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Passed")
            .field("node", &self.node)
            .field("name", &self.name)
            .field("issued", &self.issued)
            .finish_non_exhaustive()
    }
}

/// What gossip holds, by kind.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Shared {
    /// HTTP-01 key authorizations of live nodes, by token.
    pub http: BTreeMap<String, String>,
    /// TLS-ALPN-01 key authorizations of live nodes, by name.
    pub alpn: BTreeMap<String, String>,
    /// What each live node answers.
    pub held: HashMap<String, Vec<String>>,
    /// Each live node's states, by node, then by certificate name.
    pub states: HashMap<String, HashMap<String, CertificateState>>,
    /// The directory each live node orders from.
    pub directories: HashMap<String, String>,
    /// Every whole certificate any node passes on, live or not: a dead
    /// node's copy is as good as a live one's.
    pub certificates: Vec<Passed>,
    /// Values left out.
    pub refused: usize,
}

/// Reads every node's ACME keys.
pub fn read(entries: &[Entry]) -> Shared {
    let mut shared = Shared::default();
    // (node, name) → header, parts.
    type Parts = (Option<Issued>, BTreeMap<u32, String>);
    let mut passed: BTreeMap<(String, String), Parts> = BTreeMap::new();
    for entry in entries {
        let key = entry.key.as_str();
        if let Some(rest) = key.strip_prefix(CERT_PREFIX) {
            match rest.rsplit_once('/') {
                Some((name, index)) => match index.parse::<u32>() {
                    Ok(index) if index < MAX_PARTS && entry.value.len() <= PART => {
                        passed
                            .entry((entry.node.clone(), name.to_string()))
                            .or_default()
                            .1
                            .insert(index, entry.value.clone());
                    }
                    _ => shared.refused += 1,
                },
                None => match decode_value::<Issued>(&entry.value) {
                    Ok(issued) if issued.parts <= MAX_PARTS => {
                        passed
                            .entry((entry.node.clone(), rest.to_string()))
                            .or_default()
                            .0 = Some(issued);
                    }
                    _ => shared.refused += 1,
                },
            }
            continue;
        }
        if !entry.live {
            continue;
        }
        if let Some(token) = key.strip_prefix(HTTP_PREFIX) {
            shared.http.insert(token.to_string(), entry.value.clone());
        } else if let Some(name) = key.strip_prefix(ALPN_PREFIX) {
            shared.alpn.insert(name.to_string(), entry.value.clone());
        } else if key == NODE_KEY {
            match decode_value::<AcmeNode>(&entry.value) {
                Ok(node) => {
                    shared
                        .directories
                        .insert(entry.node.clone(), node.directory);
                }
                Err(_) => shared.refused += 1,
            }
        } else if key == HELD_KEY {
            match decode_value::<Held>(&entry.value) {
                Ok(held) => {
                    shared.held.insert(entry.node.clone(), held.challenges);
                }
                Err(_) => shared.refused += 1,
            }
        } else if let Some(name) = key.strip_prefix(STATE_PREFIX) {
            match decode_value::<CertificateState>(&entry.value) {
                Ok(state) if state.name == name => {
                    shared
                        .states
                        .entry(entry.node.clone())
                        .or_default()
                        .insert(name.to_string(), state);
                }
                _ => shared.refused += 1,
            }
        }
    }
    for ((node, name), (issued, parts)) in passed {
        let Some(issued) = issued else {
            // Parts whose header is not here yet (or any more).
            continue;
        };
        if parts.len() != issued.parts as usize {
            continue;
        }
        let pem: String = parts.into_values().collect();
        if digest(&pem) != issued.digest {
            // Parts of another version, mid-change: read again next time.
            continue;
        }
        shared.certificates.push(Passed {
            node,
            name,
            issued,
            pem,
        });
    }
    shared
}

/// The SHA-256 of `pem`, lowercase hex.
pub fn digest(pem: &str) -> String {
    picket_proto::feed::fingerprint(pem.as_bytes())
}

/// The keys and values that pass on the certificate `name`; `None` when
/// it does not fit [`MAX_PARTS`].
pub fn pass_on(name: &str, issued: &Issued, pem: &str) -> Option<Vec<(String, String)>> {
    let parts = cut(pem);
    if parts.len() > MAX_PARTS as usize {
        return None;
    }
    let header = Issued {
        parts: u32::try_from(parts.len()).ok()?,
        digest: digest(pem),
        ..issued.clone()
    };
    let mut keys = vec![(format!("{CERT_PREFIX}{name}"), encode_value(&header).ok()?)];
    keys.extend(
        parts
            .into_iter()
            .enumerate()
            .map(|(i, part)| (format!("{CERT_PREFIX}{name}/{i}"), part)),
    );
    Some(keys)
}

/// `pem` in pieces of at most [`PART`] bytes, each cut at a character
/// boundary (PEM is ASCII; the cut does not rely on it).
fn cut(pem: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = pem;
    while !rest.is_empty() {
        let mut end = rest.len().min(PART);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        parts.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(node: &str, live: bool, key: &str, value: &str) -> Entry {
        Entry {
            node: node.into(),
            live,
            key: key.into(),
            value: value.into(),
        }
    }

    fn issued(parts: u32) -> Issued {
        Issued {
            serial: "0a".into(),
            not_before_unix: 1,
            not_after_unix: 2,
            by: "a".into(),
            directory: "https://ca.test/dir".into(),
            parts,
            digest: String::new(),
        }
    }

    #[test]
    fn a_certificate_passes_whole_or_not_at_all() {
        let pem = "-----BEGIN CERTIFICATE-----\n".to_string() + &"A".repeat(4000);
        let keys = pass_on("shop.example.com", &issued(0), &pem).expect("fits");
        assert_eq!(keys.len(), 1 + 3, "a header and three parts");
        let entries: Vec<Entry> = keys.iter().map(|(k, v)| entry("a", false, k, v)).collect();
        let shared = read(&entries);
        assert_eq!(shared.refused, 0);
        assert_eq!(shared.certificates.len(), 1, "a dead node's copy counts");
        assert_eq!(shared.certificates[0].pem, pem);
        assert_eq!(shared.certificates[0].name, "shop.example.com");
        // A part missing, a part changed: nothing.
        let missing: Vec<Entry> = entries.iter().take(3).cloned().collect();
        assert!(read(&missing).certificates.is_empty());
        let mut changed = entries.clone();
        changed[2].value.replace_range(0..1, "B");
        assert!(read(&changed).certificates.is_empty());
    }

    #[test]
    fn challenges_and_states_count_from_live_nodes_only_and_junk_is_refused() {
        let state = CertificateState {
            name: "shop.example.com".into(),
            phase: picket_proto::acme::Phase::Ordering,
            serial: None,
            not_after_unix: None,
            renew_at_unix: None,
            orderer: Some("a".into()),
            issued_by: None,
            error: None,
            retry_at_unix: None,
        };
        let held = Held {
            challenges: vec!["0011".into()],
        };
        let entries = [
            entry("a", true, "acme/http/tok", "tok.thumb"),
            entry("b", false, "acme/http/old", "old.thumb"),
            entry("a", true, "acme/alpn/shop.example.com", "t.k"),
            entry("b", true, HELD_KEY, &encode_value(&held).unwrap()),
            entry(
                "a",
                true,
                "acme/state/shop.example.com",
                &encode_value(&state).unwrap(),
            ),
            // A state under another certificate's key, junk, a part too far.
            entry(
                "c",
                true,
                "acme/state/api.example.com",
                &encode_value(&state).unwrap(),
            ),
            entry("c", true, HELD_KEY, "%%%"),
            entry("c", true, "acme/certificate/x/99", "x"),
            entry("c", true, "acme/certificate/x", "%%%"),
            entry(
                "a",
                true,
                "acme/node",
                &encode_value(&AcmeNode {
                    directory: "https://ca.test/dir".into(),
                })
                .unwrap(),
            ),
            entry("b", false, "acme/node", "%%%"),
        ];
        let shared = read(&entries);
        assert_eq!(shared.http.keys().collect::<Vec<_>>(), ["tok"]);
        assert_eq!(shared.alpn["shop.example.com"], "t.k");
        assert_eq!(shared.held["b"], ["0011"]);
        assert_eq!(shared.states["a"]["shop.example.com"], state);
        assert!(!shared.states.contains_key("c"));
        assert_eq!(shared.directories["a"], "https://ca.test/dir");
        assert_eq!(shared.directories.len(), 1, "live nodes only");
        assert_eq!(shared.refused, 4);
    }
}
