//! Sealed gossip packets: every datagram a node sends is encrypted and
//! authenticated with the cluster key (ChaCha20-Poly1305), stamped with
//! the time it was sent and a random nonce, so that a packet from outside
//! the cluster, a tampered one, an old one or a replayed one is dropped
//! before anything parses it.
//!
//! ## Packet
//! ```text
//! 0       format (1)
//! 1..5    key id: the first 4 bytes of SHA-256 of the key
//! 5..13   sent, Unix milliseconds, big-endian
//! 13..25  nonce, random
//! 25..29  message id, big-endian
//! 29      part index
//! 30      parts (1 to MAX_PARTS)
//! 31..    the part of the message, encrypted, then the 16-byte tag
//! ```
//! Bytes 0..31 are authenticated as associated data. A message larger
//! than one datagram's room is sent in parts and put back together.
//!
//! ## Keys
//! The first key seals; every key opens. Rotating the key is two rolling
//! changes: add the new key as the second line everywhere, then make it
//! the first; remove the old one once every node seals with the new one.
//!
//! Everything here is pure: time comes in as an argument, randomness from
//! the sealer's generator.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::SocketAddr;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// The format byte of a sealed packet.
pub const FORMAT: u8 = 1;
/// Bytes before the encrypted part.
pub const HEADER: usize = 31;
/// Bytes of the authentication tag.
pub const TAG: usize = 16;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// Room for a message's part in one datagram.
pub const MAX_PART: usize = MAX_DATAGRAM - HEADER - TAG;
/// The most parts of one message (chitchat's own messages need 2 at most).
pub const MAX_PARTS: usize = 4;
/// How far a packet's time may be from the receiver's clock, either way.
pub const WINDOW_MS: u64 = 30_000;
/// How long the parts of a message wait for each other.
pub const REASSEMBLY_MS: u64 = 2_000;
/// Messages being put back together at once, at most.
const MAX_PARTIAL: usize = 64;
/// Nonces remembered against replay, at most.
const MAX_SEEN: usize = 1 << 18;

/// One cluster key.
pub struct Key {
    pub id: [u8; 4],
    sealing: LessSafeKey,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", hex(&self.id))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Key {
    pub fn new(secret: &[u8; 32]) -> Key {
        let digest = ring::digest::digest(&ring::digest::SHA256, secret);
        let mut id = [0; 4];
        id.copy_from_slice(&digest.as_ref()[..4]);
        // A 32-byte key is always valid for ChaCha20-Poly1305.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, secret)
            .unwrap_or_else(|_| unreachable!("32-byte ChaCha20-Poly1305 key"));
        Key {
            id,
            sealing: LessSafeKey::new(unbound),
        }
    }

    /// The key id as operators see it in logs.
    pub fn label(&self) -> String {
        hex(&self.id)
    }
}

/// The keys of a cluster: the first seals, all open.
#[derive(Debug)]
pub struct Keys {
    keys: Vec<Key>,
}

impl Keys {
    /// `None` for an empty list.
    pub fn new(keys: Vec<Key>) -> Option<Keys> {
        (!keys.is_empty()).then_some(Keys { keys })
    }

    pub fn sealing(&self) -> &Key {
        &self.keys[0]
    }

    fn find(&self, id: &[u8]) -> Option<&Key> {
        self.keys.iter().find(|k| k.id == id)
    }

    pub fn labels(&self) -> Vec<String> {
        self.keys.iter().map(Key::label).collect()
    }
}

/// Why a packet was dropped, as counted in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// Too short, an unknown format, or parts that do not add up.
    Malformed,
    /// Sealed with a key this node does not hold.
    UnknownKey,
    /// The tag does not verify: tampered, or not from the cluster.
    NotAuthentic,
    /// Sent too long ago, or too far in the future.
    Stale,
    /// A nonce already seen.
    Replayed,
    /// Verified, but chitchat could not read it.
    Undecodable,
    /// From a local socket other than the node's own codec.
    Injected,
}

impl Dropped {
    pub const ALL: [Dropped; 7] = [
        Dropped::Malformed,
        Dropped::UnknownKey,
        Dropped::NotAuthentic,
        Dropped::Stale,
        Dropped::Replayed,
        Dropped::Undecodable,
        Dropped::Injected,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Dropped::Malformed => "malformed",
            Dropped::UnknownKey => "unknown_key",
            Dropped::NotAuthentic => "not_authentic",
            Dropped::Stale => "stale",
            Dropped::Replayed => "replayed",
            Dropped::Undecodable => "undecodable",
            Dropped::Injected => "injected",
        }
    }
}

/// Seals messages with the first key.
#[derive(Debug)]
pub struct Sealer {
    rng: SystemRandom,
    next_id: u32,
}

impl Default for Sealer {
    fn default() -> Self {
        Sealer::new()
    }
}

impl Sealer {
    pub fn new() -> Sealer {
        let rng = SystemRandom::new();
        let mut start = [0; 4];
        let _ = rng.fill(&mut start);
        Sealer {
            rng,
            next_id: u32::from_be_bytes(start),
        }
    }

    /// The datagrams of `message`; empty if it needs more than
    /// [`MAX_PARTS`] of them or randomness fails.
    pub fn seal(&mut self, keys: &Keys, message: &[u8], now_ms: u64) -> Vec<Vec<u8>> {
        let parts: Vec<&[u8]> = if message.is_empty() {
            vec![message]
        } else {
            message.chunks(MAX_PART).collect()
        };
        if parts.len() > MAX_PARTS {
            return Vec::new();
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let key = keys.sealing();
        let mut sealed = Vec::with_capacity(parts.len());
        for (index, part) in parts.iter().enumerate() {
            let mut nonce = [0u8; NONCE_LEN];
            if self.rng.fill(&mut nonce).is_err() {
                return Vec::new();
            }
            let mut packet = Vec::with_capacity(HEADER + part.len() + TAG);
            packet.push(FORMAT);
            packet.extend_from_slice(&key.id);
            packet.extend_from_slice(&now_ms.to_be_bytes());
            packet.extend_from_slice(&nonce);
            packet.extend_from_slice(&id.to_be_bytes());
            packet.push(index as u8);
            packet.push(parts.len() as u8);
            let mut body = part.to_vec();
            let header: [u8; HEADER] = match packet[..HEADER].try_into() {
                Ok(header) => header,
                Err(_) => return Vec::new(),
            };
            if key
                .sealing
                .seal_in_place_append_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(header),
                    &mut body,
                )
                .is_err()
            {
                return Vec::new();
            }
            packet.extend_from_slice(&body);
            sealed.push(packet);
        }
        sealed
    }
}

struct Partial {
    parts: Vec<Option<Vec<u8>>>,
    first_ms: u64,
}

/// Opens sealed packets: verifies, refuses replays and stale ones, puts
/// parts back together.
#[derive(Default)]
pub struct Opener {
    /// Nonces of accepted packets, oldest first, with when they arrived.
    seen_order: VecDeque<(u64, [u8; NONCE_LEN])>,
    seen: HashSet<[u8; NONCE_LEN]>,
    partial: HashMap<(SocketAddr, u32), Partial>,
}

impl fmt::Debug for Opener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opener")
            .field("seen", &self.seen.len())
            .field("partial", &self.partial.len())
            .finish()
    }
}

impl Opener {
    /// The message `packet` completes, `Ok(None)` while its other parts
    /// are missing, or why it is dropped.
    pub fn open(
        &mut self,
        keys: &Keys,
        packet: &[u8],
        from: SocketAddr,
        now_ms: u64,
    ) -> Result<Option<Vec<u8>>, Dropped> {
        if packet.len() < HEADER + TAG || packet[0] != FORMAT {
            return Err(Dropped::Malformed);
        }
        let (header, body) = packet.split_at(HEADER);
        let key = keys.find(&header[1..5]).ok_or(Dropped::UnknownKey)?;
        let sent = u64::from_be_bytes(header[5..13].try_into().map_err(|_| Dropped::Malformed)?);
        let nonce: [u8; NONCE_LEN] = header[13..25].try_into().map_err(|_| Dropped::Malformed)?;
        let id = u32::from_be_bytes(header[25..29].try_into().map_err(|_| Dropped::Malformed)?);
        let (index, parts) = (usize::from(header[29]), usize::from(header[30]));
        if parts == 0 || parts > MAX_PARTS || index >= parts {
            return Err(Dropped::Malformed);
        }
        let aad: [u8; HEADER] = header.try_into().map_err(|_| Dropped::Malformed)?;
        let mut plain = body.to_vec();
        let opened = key
            .sealing
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut plain,
            )
            .map_err(|_| Dropped::NotAuthentic)?
            .len();
        plain.truncate(opened);
        // Only an authentic packet's time and nonce are worth remembering.
        if sent.abs_diff(now_ms) > WINDOW_MS {
            return Err(Dropped::Stale);
        }
        self.forget_before(now_ms.saturating_sub(2 * WINDOW_MS));
        if !self.seen.insert(nonce) {
            return Err(Dropped::Replayed);
        }
        self.seen_order.push_back((now_ms, nonce));
        if self.seen_order.len() > MAX_SEEN
            && let Some((_, oldest)) = self.seen_order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        if parts == 1 {
            return Ok(Some(plain));
        }
        self.reassemble((from, id), index, parts, plain, now_ms)
    }

    fn forget_before(&mut self, cutoff_ms: u64) {
        while let Some(&(at, nonce)) = self.seen_order.front() {
            if at >= cutoff_ms {
                break;
            }
            self.seen_order.pop_front();
            self.seen.remove(&nonce);
        }
    }

    fn reassemble(
        &mut self,
        key: (SocketAddr, u32),
        index: usize,
        parts: usize,
        part: Vec<u8>,
        now_ms: u64,
    ) -> Result<Option<Vec<u8>>, Dropped> {
        self.partial
            .retain(|_, p| now_ms.saturating_sub(p.first_ms) <= REASSEMBLY_MS);
        if !self.partial.contains_key(&key) && self.partial.len() >= MAX_PARTIAL {
            return Err(Dropped::Malformed);
        }
        let partial = self.partial.entry(key).or_insert_with(|| Partial {
            parts: vec![None; parts],
            first_ms: now_ms,
        });
        if partial.parts.len() != parts {
            self.partial.remove(&key);
            return Err(Dropped::Malformed);
        }
        partial.parts[index] = Some(part);
        if partial.parts.iter().any(Option::is_none) {
            return Ok(None);
        }
        let whole = self
            .partial
            .remove(&key)
            .map(|p| p.parts.into_iter().flatten().flatten().collect());
        Ok(whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_000_000_000;

    fn keys(secrets: &[u8]) -> Keys {
        Keys::new(secrets.iter().map(|s| Key::new(&[*s; 32])).collect()).unwrap()
    }

    fn peer() -> SocketAddr {
        "10.0.0.2:7946".parse().unwrap()
    }

    #[test]
    fn sealed_messages_open_once() {
        let keys = keys(&[1]);
        let (mut sealer, mut opener) = (Sealer::new(), Opener::default());
        let packets = sealer.seal(&keys, b"digest and delta", NOW);
        assert_eq!(packets.len(), 1);
        assert_eq!(packets[0].len(), HEADER + 16 + TAG);
        assert!(
            !packets[0].windows(6).any(|w| w == b"digest"),
            "the payload is encrypted"
        );
        assert_eq!(
            opener.open(&keys, &packets[0], peer(), NOW + 5),
            Ok(Some(b"digest and delta".to_vec()))
        );
        assert_eq!(
            opener.open(&keys, &packets[0], peer(), NOW + 6),
            Err(Dropped::Replayed)
        );
    }

    #[test]
    fn other_keys_tampering_and_garbage_are_dropped() {
        let (ours, theirs) = (keys(&[1]), keys(&[2]));
        let mut opener = Opener::default();
        let foreign = Sealer::new().seal(&theirs, b"x", NOW).remove(0);
        assert_eq!(
            opener.open(&ours, &foreign, peer(), NOW),
            Err(Dropped::UnknownKey)
        );
        let good = Sealer::new().seal(&ours, b"hello", NOW).remove(0);
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            let result = opener.open(&ours, &bad, peer(), NOW);
            assert!(result.is_err(), "byte {i} flipped: {result:?}");
        }
        for cut in 0..good.len() {
            assert!(opener.open(&ours, &good[..cut], peer(), NOW).is_err());
        }
        let mut seed = 7u32;
        for len in 0..300 {
            let noise: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            assert!(opener.open(&ours, &noise, peer(), NOW).is_err());
        }
        // The untouched packet still opens: nothing above was remembered.
        assert!(opener.open(&ours, &good, peer(), NOW).is_ok());
    }

    #[test]
    fn old_and_future_packets_are_stale() {
        let keys = keys(&[1]);
        let mut opener = Opener::default();
        let old = Sealer::new()
            .seal(&keys, b"x", NOW - WINDOW_MS - 1)
            .remove(0);
        assert_eq!(opener.open(&keys, &old, peer(), NOW), Err(Dropped::Stale));
        let future = Sealer::new()
            .seal(&keys, b"x", NOW + WINDOW_MS + 1)
            .remove(0);
        assert_eq!(
            opener.open(&keys, &future, peer(), NOW),
            Err(Dropped::Stale)
        );
    }

    #[test]
    fn rotation_opens_with_every_key_and_seals_with_the_first() {
        let (old, both, new) = (keys(&[1]), keys(&[2, 1]), keys(&[2]));
        let mut opener = Opener::default();
        let from_old = Sealer::new().seal(&old, b"a", NOW).remove(0);
        let from_both = Sealer::new().seal(&both, b"b", NOW).remove(0);
        assert!(opener.open(&both, &from_old, peer(), NOW).is_ok());
        assert!(opener.open(&new, &from_both, peer(), NOW).is_ok());
        assert_eq!(
            opener.open(&new, &from_old, peer(), NOW),
            Err(Dropped::UnknownKey)
        );
    }

    #[test]
    fn large_messages_travel_in_parts() {
        let keys = keys(&[1]);
        let (mut sealer, mut opener) = (Sealer::new(), Opener::default());
        let message: Vec<u8> = (0..MAX_DATAGRAM).map(|i| i as u8).collect();
        let packets = sealer.seal(&keys, &message, NOW);
        assert_eq!(packets.len(), 2);
        assert!(packets.iter().all(|p| p.len() <= MAX_DATAGRAM));
        assert_eq!(opener.open(&keys, &packets[1], peer(), NOW), Ok(None));
        assert_eq!(
            opener.open(&keys, &packets[0], peer(), NOW),
            Ok(Some(message.clone()))
        );
        // A part whose sibling never comes is forgotten.
        let lonely = sealer.seal(&keys, &message, NOW).remove(0);
        assert_eq!(opener.open(&keys, &lonely, peer(), NOW), Ok(None));
        assert_eq!(opener.partial.len(), 1);
        let later = sealer.seal(&keys, b"x", NOW + REASSEMBLY_MS + 1);
        let _ = opener.reassemble((peer(), 0), 0, 2, Vec::new(), NOW + REASSEMBLY_MS + 1);
        assert_eq!(opener.partial.len(), 1, "only the fresh one");
        assert_eq!(later.len(), 1);
        assert!(
            sealer
                .seal(&keys, &vec![0; MAX_PART * MAX_PARTS + 1], NOW)
                .is_empty()
        );
    }

    #[test]
    fn replay_memory_is_bounded_in_time() {
        let keys = keys(&[1]);
        let mut opener = Opener::default();
        let mut sealer = Sealer::new();
        for i in 0..100 {
            let packet = sealer.seal(&keys, b"x", NOW + i * 1000).remove(0);
            assert!(opener.open(&keys, &packet, peer(), NOW + i * 1000).is_ok());
        }
        assert!(opener.seen.len() <= 61, "{} remembered", opener.seen.len());
    }
}
