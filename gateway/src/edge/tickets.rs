//! Session tickets that resume on any node of the cluster.
//!
//! Behind a load balancer a client's next connection often lands on
//! another node. Every node derives its ticket keys from the cluster key,
//! so a ticket one node issues, another accepts: the client skips the key
//! exchange and the certificate signature wherever it lands, with nothing
//! new to share or distribute (nginx needs `ssl_session_ticket_key` files
//! copied to every instance by hand for this). A node without a cluster
//! key makes a key of its own at start: its tickets resume on it alone.
//!
//! ## Keys
//! Time is cut in periods of [`PERIOD_SECS`] (12 h) of the wall clock. A
//! ticket is sealed (AES-256-GCM) with a key derived by HKDF-SHA256 from
//! the cluster key, the period and the issuing node's random id; it opens
//! in its period and the next, so no ticket lives longer than two periods
//! (and a client is told 12 h). The issuer id makes every node's keys its
//! own, so each numbers its nonces with a counter: no two tickets ever
//! share a key and a nonce, however many the cluster issues.
//!
//! When the cluster key rotates (see [`crate::gossip::seal`]), tickets are
//! sealed with the new first key and every listed key opens them: a ticket
//! under a key removed from the list gets a full handshake.
//!
//! ## Ticket
//! ```text
//! 0       format (1)
//! 1..5    cluster key id
//! 5..9    period, big-endian
//! 9..25   issuer id, random per node start
//! 25..37  nonce: 4 zero bytes, then the issuer's counter, big-endian
//! 37..    the session state, encrypted, then the 16-byte tag
//! ```
//! Bytes 0..37 are authenticated as associated data. Tickets come from
//! clients: anything malformed, of another format, period or key, or that
//! fails its tag, is a full handshake, never an error.
//!
//! ## TLS 1.3 only
//! A TLS 1.2 ticket holds its session's master secret: sealed with the
//! cluster key, whoever ever got the key file could decrypt every recorded
//! TLS 1.2 session that got one, from any period. So a TLS 1.2 session is
//! never sealed ([`session_version`]): its client gets an empty ticket
//! (RFC 5077, 3.3) and resumes by session ID from the node's own cache
//! ([`super::server_config`]). A TLS 1.3 ticket is sealed as above; with
//! `psk_dhe_ke` its resumption makes fresh keys, so a leaked ticket key
//! opens no recorded traffic.
//!
//! The clock is injected ([`WallClock`]); which periods a ticket opens in
//! is decided by the pure [`opens`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

use crate::gossip::seal::{Key, Keys};

/// Seconds of one period: keys change at every multiple of it.
pub const PERIOD_SECS: u64 = 12 * 60 * 60;
/// How far ahead of this node's clock a ticket's period may be, for nodes
/// whose clocks differ a little at the turn of a period.
pub const SKEW_SECS: u64 = 5 * 60;
/// The format byte.
const FORMAT: u8 = 1;
const ISSUER: usize = 16;
/// Bytes before the encrypted state.
const HEADER: usize = 1 + 4 + 4 + ISSUER + NONCE_LEN;
const TAG: usize = 16;
/// Derived keys kept, at most: two periods of a large cluster's issuers.
const MAX_DERIVED: usize = 1024;

/// The wall clock the periods are read from, in Unix seconds.
#[derive(Clone)]
pub struct WallClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl WallClock {
    /// The system's.
    pub fn system() -> WallClock {
        WallClock::new(|| u64::try_from(crate::clock::now_unix()).unwrap_or(0))
    }

    /// Another (tests: a clock they move).
    pub fn new(now: impl Fn() -> u64 + Send + Sync + 'static) -> WallClock {
        WallClock(Arc::new(now))
    }

    fn now(&self) -> u64 {
        (self.0)()
    }
}

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WallClock({})", self.now())
    }
}

/// The TLS version of a session rustls asks to seal or has opened (its
/// `ServerSessionValue`: whether it names a server, the name, then the
/// version); `None` when it does not read as one.
pub fn session_version(plain: &[u8]) -> Option<u16> {
    let (&named, rest) = plain.split_first()?;
    let rest = match named {
        0 => rest,
        1 => {
            let (&len, rest) = rest.split_first()?;
            rest.get(usize::from(len)..)?
        }
        _ => return None,
    };
    Some(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]))
}

/// TLS 1.3, as [`session_version`] reads it.
const TLS13: u16 = 0x0304;

/// The period `unix` seconds fall in.
pub fn period_of(unix: u64) -> u32 {
    u32::try_from(unix / PERIOD_SECS).unwrap_or(u32::MAX)
}

/// Whether a ticket of `period` opens at `now` (Unix seconds): in its own
/// period and the next; one period ahead only within [`SKEW_SECS`] of its
/// start.
pub fn opens(period: u32, now: u64) -> bool {
    let current = period_of(now);
    if period == current || period.checked_add(1) == Some(current) {
        return true;
    }
    let next_start = (u64::from(current) + 1) * PERIOD_SECS;
    current.checked_add(1) == Some(period) && next_start - now <= SKEW_SECS
}

/// The keys a ticket is sealed with: derived from one cluster key, for
/// one period and one issuer.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Scope {
    key: [u8; 4],
    period: u32,
    issuer: [u8; ISSUER],
}

impl Scope {
    fn derive(&self, key: &Key) -> Option<LessSafeKey> {
        let period = self.period.to_be_bytes();
        let info = [b"picket session ticket".as_slice(), &period, &self.issuer];
        let okm = key.tickets().expand(&info, &AES_256_GCM).ok()?;
        Some(LessSafeKey::new(UnboundKey::from(okm)))
    }
}

/// Where the keys come from: the cluster's, as reloads replace them, or
/// this node's own.
pub enum Source {
    Cluster(Arc<ArcSwap<Keys>>),
    Own(Keys),
}

impl Source {
    /// A key of this node's own, random; `None` if the system has no
    /// randomness to give.
    pub fn own() -> Option<Source> {
        let secret = crate::gossip::keys::random_secret()?;
        Keys::new(vec![Key::new(&secret)]).map(Source::Own)
    }

    fn with<T>(&self, f: impl FnOnce(&Keys) -> T) -> T {
        match self {
            Source::Cluster(keys) => f(&keys.load()),
            Source::Own(keys) => f(keys),
        }
    }
}

/// The edge's ticketer.
pub struct Tickets {
    source: Source,
    issuer: [u8; ISSUER],
    counter: AtomicU64,
    clock: WallClock,
    derived: Mutex<HashMap<Scope, Arc<LessSafeKey>>>,
}

impl fmt::Debug for Tickets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match self.source {
            Source::Cluster(_) => "cluster",
            Source::Own(_) => "own",
        };
        f.debug_struct("Tickets").field("keys", &source).finish()
    }
}

impl Tickets {
    /// `None` if the system has no randomness for the issuer id.
    pub fn new(source: Source, clock: WallClock) -> Option<Tickets> {
        let mut issuer = [0u8; ISSUER];
        SystemRandom::new().fill(&mut issuer).ok()?;
        Some(Tickets {
            source,
            issuer,
            counter: AtomicU64::new(0),
            clock,
            derived: Mutex::new(HashMap::new()),
        })
    }

    /// The key of `scope` if it was derived before.
    fn kept(&self, scope: &Scope) -> Option<Arc<LessSafeKey>> {
        let derived = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        derived.get(scope).cloned()
    }

    /// Derives the key of `scope`, from the cluster key it names.
    fn derive(&self, scope: &Scope) -> Option<Arc<LessSafeKey>> {
        self.source
            .with(|keys| keys.find(&scope.key).and_then(|key| scope.derive(key)))
            .map(Arc::new)
    }

    /// Keeps a key that sealed or opened a ticket; `now` drops what no
    /// ticket can open with any more when the room is full.
    fn keep(&self, scope: Scope, key: &Arc<LessSafeKey>, now: u64) {
        let mut derived = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if derived.len() >= MAX_DERIVED {
            derived.retain(|s, _| opens(s.period, now));
            if derived.len() >= MAX_DERIVED {
                derived.clear();
            }
        }
        derived.insert(scope, Arc::clone(key));
    }
}

impl rustls::server::ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        // A ticket issued at any time of its period still opens this long
        // after: up to the end of the next.
        u32::try_from(PERIOD_SECS).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        // A TLS 1.2 session (or one that does not read as TLS 1.3) is never
        // sealed: its client gets an empty ticket.
        if session_version(plain) != Some(TLS13) {
            return None;
        }
        let now = self.clock.now();
        let scope = Scope {
            key: self.source.with(|keys| keys.sealing().id),
            period: period_of(now),
            issuer: self.issuer,
        };
        let key = match self.kept(&scope) {
            Some(key) => key,
            None => {
                let key = self.derive(&scope)?;
                self.keep(scope, &key, now);
                key
            }
        };
        let count = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut nonce = [0u8; NONCE_LEN];
        nonce[4..].copy_from_slice(&count.to_be_bytes());
        let mut ticket = Vec::with_capacity(HEADER + plain.len() + TAG);
        ticket.push(FORMAT);
        ticket.extend_from_slice(&scope.key);
        ticket.extend_from_slice(&scope.period.to_be_bytes());
        ticket.extend_from_slice(&scope.issuer);
        ticket.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&ticket[..HEADER]),
            &mut sealed,
        )
        .ok()?;
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < HEADER + TAG || ticket[0] != FORMAT {
            return None;
        }
        let (header, sealed) = ticket.split_at(HEADER);
        let period = u32::from_be_bytes(header[5..9].try_into().ok()?);
        let now = self.clock.now();
        if !opens(period, now) {
            return None;
        }
        let scope = Scope {
            key: header[1..5].try_into().ok()?,
            period,
            issuer: header[9..25].try_into().ok()?,
        };
        let nonce = Nonce::try_assume_unique_for_key(&header[25..HEADER]).ok()?;
        // A key is kept once it opened a ticket: tickets a client made up
        // cost a derivation each and take no room.
        let (key, fresh) = match self.kept(&scope) {
            Some(key) => (key, false),
            None => (self.derive(&scope)?, true),
        };
        let mut plain = sealed.to_vec();
        let len = key
            .open_in_place(nonce, Aad::from(header), &mut plain)
            .ok()?
            .len();
        plain.truncate(len);
        if session_version(&plain) != Some(TLS13) {
            // A TLS 1.2 ticket of an earlier release: a full handshake.
            return None;
        }
        if fresh {
            self.keep(scope, &key, now);
        }
        Some(plain)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use rustls::server::ProducesTickets;

    use super::*;

    fn keys(secrets: &[u8]) -> Arc<ArcSwap<Keys>> {
        let keys = secrets.iter().map(|s| Key::new(&[*s; 32])).collect();
        Arc::new(ArcSwap::from_pointee(Keys::new(keys).expect("a key")))
    }

    fn at(now: &Arc<AtomicU64>) -> WallClock {
        let now = Arc::clone(now);
        WallClock::new(move || now.load(Ordering::Relaxed))
    }

    fn node(keys: &Arc<ArcSwap<Keys>>, now: &Arc<AtomicU64>) -> Tickets {
        Tickets::new(Source::Cluster(Arc::clone(keys)), at(now)).expect("randomness")
    }

    const T0: u64 = 1_800_000_000;

    /// A TLS 1.3 session as rustls hands it to the ticketer: no server
    /// name, the version, then `state`.
    fn tls13(state: &[u8]) -> Vec<u8> {
        [&[0, 0x03, 0x04][..], state].concat()
    }

    /// The same for TLS 1.2, naming the server.
    fn tls12(state: &[u8]) -> Vec<u8> {
        [&[1, 4][..], b"shop", &[0x03, 0x03], state].concat()
    }

    #[test]
    fn a_tls12_session_is_never_sealed_nor_opened() {
        assert_eq!(session_version(&tls13(b"x")), Some(0x0304));
        assert_eq!(session_version(&tls12(b"x")), Some(0x0303));
        assert_eq!(session_version(&[1, 9, b'a']), None, "a name cut short");
        assert_eq!(session_version(&[2, 3, 4]), None);
        assert_eq!(session_version(&[]), None);
        let cluster = keys(&[5]);
        let now = Arc::new(AtomicU64::new(T0));
        let one = node(&cluster, &now);
        assert_eq!(one.encrypt(&tls12(b"master secret")), None);
        assert!(one.encrypt(&tls13(b"state")).is_some());
        // A TLS 1.2 ticket sealed by an earlier release does not open.
        let scope = Scope {
            key: cluster.load().sealing().id,
            period: period_of(T0),
            issuer: one.issuer,
        };
        let key = scope.derive(cluster.load().sealing()).expect("a key");
        let mut ticket = vec![FORMAT];
        ticket.extend_from_slice(&scope.key);
        ticket.extend_from_slice(&scope.period.to_be_bytes());
        ticket.extend_from_slice(&scope.issuer);
        ticket.extend_from_slice(&[0; NONCE_LEN]);
        let mut sealed = tls12(b"master secret");
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key([0; NONCE_LEN]),
            Aad::from(&ticket[..HEADER]),
            &mut sealed,
        )
        .expect("sealed");
        ticket.extend_from_slice(&sealed);
        assert_eq!(one.decrypt(&ticket), None);
    }

    #[test]
    fn a_ticket_opens_in_its_period_and_the_next_only() {
        let start = period_of(T0);
        let p = u64::from(start) * PERIOD_SECS;
        assert!(opens(start, p));
        assert!(opens(start, p + PERIOD_SECS - 1));
        assert!(opens(start, p + 2 * PERIOD_SECS - 1));
        assert!(!opens(start, p + 2 * PERIOD_SECS));
        // One period ahead: only when the next starts within the skew.
        assert!(opens(start + 1, p + PERIOD_SECS - SKEW_SECS));
        assert!(!opens(start + 1, p + PERIOD_SECS - SKEW_SECS - 1));
        assert!(!opens(start + 2, p + PERIOD_SECS - 1));
        assert!(!opens(u32::MAX, p));
        assert!(!opens(0, p));
    }

    #[test]
    fn every_node_with_the_cluster_key_opens_another_nodes_ticket() {
        let cluster = keys(&[7]);
        let now = Arc::new(AtomicU64::new(T0));
        let (one, two) = (node(&cluster, &now), node(&cluster, &now));
        let ticket = one.encrypt(&tls13(b"session state")).expect("sealed");
        assert_eq!(
            two.decrypt(&ticket).as_deref(),
            Some(&tls13(b"session state")[..])
        );
        assert_eq!(
            one.decrypt(&ticket).as_deref(),
            Some(&tls13(b"session state")[..])
        );
        // Another cluster's key does not.
        let other = node(&keys(&[8]), &now);
        assert_eq!(other.decrypt(&ticket), None);
        // Nor a node's own key.
        let own = Tickets::new(Source::own().expect("randomness"), at(&now)).expect("randomness");
        assert_eq!(own.decrypt(&ticket), None);
    }

    #[test]
    fn tickets_expire_after_two_periods() {
        let cluster = keys(&[7]);
        let now = Arc::new(AtomicU64::new(T0));
        let (one, two) = (node(&cluster, &now), node(&cluster, &now));
        let ticket = one.encrypt(&tls13(b"state")).expect("sealed");
        let issued = u64::from(period_of(T0)) * PERIOD_SECS;
        now.store(issued + 2 * PERIOD_SECS - 1, Ordering::Relaxed);
        assert!(two.decrypt(&ticket).is_some(), "the next period opens it");
        now.store(issued + 2 * PERIOD_SECS, Ordering::Relaxed);
        assert_eq!(two.decrypt(&ticket), None, "two periods on it is gone");
        assert_eq!(one.decrypt(&ticket), None);
    }

    #[test]
    fn a_rotated_cluster_key_keeps_opening_until_removed() {
        let cluster = keys(&[1]);
        let now = Arc::new(AtomicU64::new(T0));
        let one = node(&cluster, &now);
        let old = one.encrypt(&tls13(b"old")).expect("sealed");
        // The new key first, the old one second: both open, the new seals.
        cluster.store(keys(&[2, 1]).load_full());
        let new = one.encrypt(&tls13(b"new")).expect("sealed");
        assert_ne!(old[1..5], new[1..5]);
        assert!(one.decrypt(&old).is_some());
        assert!(one.decrypt(&new).is_some());
        // The old key removed: its tickets are a full handshake.
        cluster.store(keys(&[2]).load_full());
        let fresh = node(&cluster, &now);
        assert_eq!(fresh.decrypt(&old), None);
        assert!(fresh.decrypt(&new).is_some());
    }

    #[test]
    fn nonces_never_repeat_and_tampering_fails() {
        let cluster = keys(&[3]);
        let now = Arc::new(AtomicU64::new(T0));
        let one = node(&cluster, &now);
        let a = one.encrypt(&tls13(b"same")).expect("sealed");
        let b = one.encrypt(&tls13(b"same")).expect("sealed");
        assert_ne!(a[25..HEADER], b[25..HEADER]);
        assert_ne!(a, b);
        for i in 0..a.len() {
            let mut bad = a.clone();
            bad[i] ^= 0x01;
            assert_eq!(one.decrypt(&bad), None, "byte {i} flipped");
        }
        for len in 0..a.len() {
            assert_eq!(one.decrypt(&a[..len]), None, "cut at {len}");
        }
        assert_eq!(one.decrypt(&[]), None);
    }

    #[test]
    fn the_derived_keys_stay_bounded() {
        let cluster = keys(&[4]);
        let now = Arc::new(AtomicU64::new(T0));
        let one = node(&cluster, &now);
        let ticket = one.encrypt(&tls13(b"state")).expect("sealed");
        // Tickets claiming ever new issuers (a hostile client's) each cost
        // a derivation and are kept nowhere.
        for i in 0..(3 * MAX_DERIVED as u32) {
            let mut forged = ticket.clone();
            forged[9..13].copy_from_slice(&i.to_be_bytes());
            assert_eq!(one.decrypt(&forged), None);
        }
        assert_eq!(one.derived.lock().expect("lock").len(), 1);
        assert!(one.decrypt(&ticket).is_some());
        // Real tickets of more issuers than there is room for: the room
        // stays bounded, and every ticket still opens.
        for _ in 0..(2 * MAX_DERIVED) {
            let ticket = node(&cluster, &now)
                .encrypt(&tls13(b"state"))
                .expect("sealed");
            assert!(one.decrypt(&ticket).is_some());
        }
        assert!(one.derived.lock().expect("lock").len() <= MAX_DERIVED);
    }
}
