//! Sealed gossip packets: every datagram a node sends is encrypted and
//! authenticated with the cluster key (ChaCha20-Poly1305), stamped with
//! the time it was sent and a random nonce, and bound to its sender and its
//! recipient, so that a packet from outside the cluster, a tampered one, an
//! old one, a replayed one, one reflected back to its sender or one meant
//! for another node is dropped before anything parses it.
//!
//! ## Packet
//! ```text
//! 0       format (2)
//! 1..5    key id: the first 4 bytes of SHA-256 of the key
//! 5..13   sent, Unix milliseconds, big-endian
//! 13..25  nonce, random
//! 25..43  sender: IPv6 address (IPv4 as ::ffff:a.b.c.d), port big-endian
//! 43..61  recipient: the same
//! 61..65  message id, big-endian
//! 65      part index
//! 66      parts (1 to MAX_PARTS)
//! 67..    the part of the message, encrypted, then the 16-byte tag
//! ```
//! Bytes 0..67 are authenticated as associated data. A message larger
//! than one datagram's room is sent in parts and put back together.
//! Format 1 had no sender and recipient; it is refused as malformed.
//!
//! ## Sender and recipient
//! Each side writes and checks only what it knows for sure:
//! - the **sender** is the sender's advertised gossip address, the one it
//!   gossips as. Not the source address of the datagram: behind NAT, or
//!   bound to `0.0.0.0`, that is not the sender's to know.
//! - the **recipient** is the address the sender addressed: the peer's
//!   advertised address when it gossips to a member or a seed. When it
//!   answers, chitchat addresses the source the question came from, which
//!   the asker may not know as its own (NAT, a node bound to `0.0.0.0`
//!   whose kernel picked the source); so the sealer writes the advertised
//!   address it last heard from that source instead ([`Sealer::heard`]).
//!
//! The opener knows the node's own addresses ([`Own`]): its advertised
//! address, and the address it is bound to unless that is unspecified. A
//! packet whose sender is one of them is this node's own, sent back to
//! it: dropped as [`Dropped::Replayed`]. A packet whose recipient is none
//! of them was meant for another node: dropped as
//! [`Dropped::Misdirected`]. Both are checked once the tag verifies (a
//! rewritten sender or recipient does not), before the time and the nonce.
//! Addresses compare as IP and port, an IPv4 address and its IPv6-mapped
//! form alike. So a seed must be named by an address its node advertises
//! or is bound to, not by a load balancer's.
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
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use aws_lc_rs::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

use crate::metrics::Dropped;

/// The format byte of a sealed packet.
pub const FORMAT: u8 = 2;
/// Bytes of an address in the header: an IPv6 address, then the port.
const ADDR: usize = 18;
/// Bytes before the encrypted part.
pub const HEADER: usize = 31 + 2 * ADDR;
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
/// Nodes remembered by the source address they were heard from, at most:
/// far more than a cluster has.
const MAX_HEARD: usize = 4096;

/// One cluster key.
pub struct Key {
    pub id: [u8; 4],
    sealing: LessSafeKey,
    /// What the edge's session ticket keys are derived from
    /// ([`crate::edge::tickets`]): never the gossip key itself.
    tickets: hkdf::Prk,
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
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, secret);
        let mut id = [0; 4];
        id.copy_from_slice(&digest.as_ref()[..4]);
        // A 32-byte key is always valid for ChaCha20-Poly1305.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, secret)
            .unwrap_or_else(|_| unreachable!("32-byte ChaCha20-Poly1305 key"));
        Key {
            id,
            sealing: LessSafeKey::new(unbound),
            tickets: hkdf::Salt::new(hkdf::HKDF_SHA256, b"picket session tickets").extract(secret),
        }
    }

    /// The root of the session ticket keys sealed under this key.
    pub fn tickets(&self) -> &hkdf::Prk {
        &self.tickets
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

    pub fn find(&self, id: &[u8]) -> Option<&Key> {
        self.keys.iter().find(|k| k.id == id)
    }

    pub fn labels(&self) -> Vec<String> {
        self.keys.iter().map(Key::label).collect()
    }
}

/// An address as a header carries it: IPv4 as IPv6-mapped, so that both
/// forms of one address are the same bytes.
fn wire(addr: SocketAddr) -> [u8; ADDR] {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let mut bytes = [0; ADDR];
    bytes[..16].copy_from_slice(&ip.octets());
    bytes[16..].copy_from_slice(&addr.port().to_be_bytes());
    bytes
}

fn unwire(bytes: &[u8; ADDR]) -> SocketAddr {
    let mut ip = [0; 16];
    ip.copy_from_slice(&bytes[..16]);
    let ip = IpAddr::V6(Ipv6Addr::from(ip)).to_canonical();
    SocketAddr::new(ip, u16::from_be_bytes([bytes[16], bytes[17]]))
}

/// This node's own gossip addresses, which a packet's sender must not be
/// and its recipient must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Own {
    /// The address the node gossips as.
    pub advertise: SocketAddr,
    /// The address its gossip socket is bound to; not an address of the
    /// node's when unspecified (`0.0.0.0`, `[::]`).
    pub bound: SocketAddr,
}

impl Own {
    /// Whether `addr` is one of this node's addresses.
    pub fn is(&self, addr: SocketAddr) -> bool {
        self.holds(&wire(addr))
    }

    fn holds(&self, addr: &[u8; ADDR]) -> bool {
        *addr == wire(self.advertise)
            || (!self.bound.ip().is_unspecified() && *addr == wire(self.bound))
    }
}

/// The clear part of a packet, all of it authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    key: [u8; 4],
    sent_ms: u64,
    nonce: [u8; NONCE_LEN],
    sender: [u8; ADDR],
    recipient: [u8; ADDR],
    id: u32,
    index: u8,
    parts: u8,
}

impl Header {
    fn write(&self) -> [u8; HEADER] {
        let fields: [&[u8]; 9] = [
            &[FORMAT],
            &self.key,
            &self.sent_ms.to_be_bytes(),
            &self.nonce,
            &self.sender,
            &self.recipient,
            &self.id.to_be_bytes(),
            &[self.index],
            &[self.parts],
        ];
        let mut bytes = [0; HEADER];
        let mut at = 0;
        for field in fields {
            bytes[at..at + field.len()].copy_from_slice(field);
            at += field.len();
        }
        bytes
    }

    /// `None` for another format or length.
    fn read(bytes: &[u8]) -> Option<Header> {
        let (&format, rest) = bytes.split_first()?;
        let (key, rest) = rest.split_first_chunk::<4>()?;
        let (sent, rest) = rest.split_first_chunk::<8>()?;
        let (nonce, rest) = rest.split_first_chunk::<NONCE_LEN>()?;
        let (sender, rest) = rest.split_first_chunk::<ADDR>()?;
        let (recipient, rest) = rest.split_first_chunk::<ADDR>()?;
        let (id, rest) = rest.split_first_chunk::<4>()?;
        let &[index, parts] = rest else {
            return None;
        };
        (format == FORMAT).then_some(Header {
            key: *key,
            sent_ms: u64::from_be_bytes(*sent),
            nonce: *nonce,
            sender: *sender,
            recipient: *recipient,
            id: u32::from_be_bytes(*id),
            index,
            parts,
        })
    }
}

/// Seals one node's messages with the first key.
#[derive(Debug)]
pub struct Sealer {
    rng: SystemRandom,
    next_id: u32,
    /// Every packet's sender: the node's advertised address.
    sender: [u8; ADDR],
    /// The advertised address of each node heard from another source
    /// address than that, by the source.
    heard: HashMap<SocketAddr, SocketAddr>,
}

impl Sealer {
    /// A sealer for the node that gossips as `advertise`.
    pub fn new(advertise: SocketAddr) -> Sealer {
        let rng = SystemRandom::new();
        let mut start = [0; 4];
        let _ = rng.fill(&mut start);
        Sealer {
            rng,
            next_id: u32::from_be_bytes(start),
            sender: wire(advertise),
            heard: HashMap::new(),
        }
    }

    /// Notes that the node advertised as `sender` was heard from `from`,
    /// so that a packet to `from` (an answer) names `sender` as its
    /// recipient: the address that node knows as its own.
    pub fn heard(&mut self, from: SocketAddr, sender: SocketAddr) {
        if wire(from) == wire(sender) {
            self.heard.remove(&from);
            return;
        }
        if self.heard.len() >= MAX_HEARD && !self.heard.contains_key(&from) {
            self.heard.clear();
        }
        self.heard.insert(from, sender);
    }

    /// The datagrams of `message` to `to`; empty if it needs more than
    /// [`MAX_PARTS`] of them or randomness fails.
    pub fn seal(
        &mut self,
        keys: &Keys,
        message: &[u8],
        to: SocketAddr,
        now_ms: u64,
    ) -> Vec<Vec<u8>> {
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
        let recipient = wire(self.heard.get(&to).copied().unwrap_or(to));
        let mut sealed = Vec::with_capacity(parts.len());
        for (index, part) in parts.iter().enumerate() {
            let mut nonce = [0u8; NONCE_LEN];
            if self.rng.fill(&mut nonce).is_err() {
                return Vec::new();
            }
            let header = Header {
                key: key.id,
                sent_ms: now_ms,
                nonce,
                sender: self.sender,
                recipient,
                id,
                index: index as u8,
                parts: parts.len() as u8,
            }
            .write();
            let mut body = part.to_vec();
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
            let mut packet = Vec::with_capacity(HEADER + body.len());
            packet.extend_from_slice(&header);
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

/// A whole message, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub message: Vec<u8>,
    /// The sender's advertised address.
    pub sender: SocketAddr,
}

/// Opens sealed packets for one node: verifies, refuses replays, stale
/// ones, its own and other nodes', puts parts back together.
pub struct Opener {
    own: Own,
    /// Nonces of accepted packets, oldest first, with when they arrived.
    seen_order: VecDeque<(u64, [u8; NONCE_LEN])>,
    seen: HashSet<[u8; NONCE_LEN]>,
    /// By sender and message id.
    partial: HashMap<([u8; ADDR], u32), Partial>,
}

impl fmt::Debug for Opener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opener")
            .field("own", &self.own)
            .field("seen", &self.seen.len())
            .field("partial", &self.partial.len())
            .finish()
    }
}

impl Opener {
    pub fn new(own: Own) -> Opener {
        Opener {
            own,
            seen_order: VecDeque::new(),
            seen: HashSet::new(),
            partial: HashMap::new(),
        }
    }

    /// The message `packet` completes, `Ok(None)` while its other parts
    /// are missing, or why it is dropped.
    pub fn open(
        &mut self,
        keys: &Keys,
        packet: &[u8],
        now_ms: u64,
    ) -> Result<Option<Opened>, Dropped> {
        if packet.len() < HEADER + TAG {
            return Err(Dropped::Malformed);
        }
        let (clear, body) = packet.split_at(HEADER);
        let header = Header::read(clear).ok_or(Dropped::Malformed)?;
        let key = keys.find(&header.key).ok_or(Dropped::UnknownKey)?;
        let (index, parts) = (usize::from(header.index), usize::from(header.parts));
        if parts == 0 || parts > MAX_PARTS || index >= parts {
            return Err(Dropped::Malformed);
        }
        let aad: [u8; HEADER] = clear.try_into().map_err(|_| Dropped::Malformed)?;
        let mut plain = body.to_vec();
        let opened = key
            .sealing
            .open_in_place(
                Nonce::assume_unique_for_key(header.nonce),
                Aad::from(aad),
                &mut plain,
            )
            .map_err(|_| Dropped::NotAuthentic)?
            .len();
        plain.truncate(opened);
        // The ends are authentic now: this node's own packet came back,
        // or one for another node came here.
        if self.own.holds(&header.sender) {
            return Err(Dropped::Replayed);
        }
        if !self.own.holds(&header.recipient) {
            return Err(Dropped::Misdirected);
        }
        // Only an authentic packet's time and nonce are worth remembering.
        if header.sent_ms.abs_diff(now_ms) > WINDOW_MS {
            return Err(Dropped::Stale);
        }
        self.forget_before(now_ms.saturating_sub(2 * WINDOW_MS));
        if !self.seen.insert(header.nonce) {
            return Err(Dropped::Replayed);
        }
        self.seen_order.push_back((now_ms, header.nonce));
        if self.seen_order.len() > MAX_SEEN
            && let Some((_, oldest)) = self.seen_order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        let whole = if parts == 1 {
            Some(plain)
        } else {
            self.reassemble((header.sender, header.id), index, parts, plain, now_ms)?
        };
        Ok(whole.map(|message| Opened {
            message,
            sender: unwire(&header.sender),
        }))
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
        key: ([u8; ADDR], u32),
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
    use std::ops::Range;

    use super::*;

    const NOW: u64 = 1_796_000_000_000;
    /// Where the header carries the sender and the recipient.
    const SENDER: Range<usize> = 25..43;
    const RECIPIENT: Range<usize> = 43..61;

    fn keys(secrets: &[u8]) -> Keys {
        Keys::new(secrets.iter().map(|s| Key::new(&[*s; 32])).collect()).unwrap()
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    /// Node a sends, node b receives; both bound to every interface.
    fn a() -> SocketAddr {
        addr("10.0.0.1:7946")
    }

    fn b() -> SocketAddr {
        addr("10.0.0.2:7946")
    }

    fn at(advertise: SocketAddr) -> Opener {
        Opener::new(Own {
            advertise,
            bound: addr("0.0.0.0:7946"),
        })
    }

    fn opened(message: &[u8], sender: SocketAddr) -> Result<Option<Opened>, Dropped> {
        Ok(Some(Opened {
            message: message.to_vec(),
            sender,
        }))
    }

    #[test]
    fn sealed_messages_open_once() {
        let keys = keys(&[1]);
        let (mut sealer, mut opener) = (Sealer::new(a()), at(b()));
        let packets = sealer.seal(&keys, b"digest and delta", b(), NOW);
        assert_eq!(packets.len(), 1);
        assert_eq!(packets[0].len(), HEADER + 16 + TAG);
        assert!(
            !packets[0].windows(6).any(|w| w == b"digest"),
            "the payload is encrypted"
        );
        assert_eq!(
            opener.open(&keys, &packets[0], NOW + 5),
            opened(b"digest and delta", a())
        );
        assert_eq!(
            opener.open(&keys, &packets[0], NOW + 6),
            Err(Dropped::Replayed)
        );
    }

    /// What happens, the sender, where it sends to, a field rewritten on
    /// the way (with an address), the receiver's advertised and bound
    /// addresses, what the receiver makes of it.
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        Option<(Range<usize>, &'static str)>,
        &'static str,
        &'static str,
        Result<(), Dropped>,
    );

    #[test]
    fn packets_are_bound_to_their_sender_and_recipient() {
        #[rustfmt::skip]
        let cases: [Case; 12] = [
            ("a to b, at b",
             "10.0.0.1:7946", "10.0.0.2:7946", None, "10.0.0.2:7946", "0.0.0.0:7946", Ok(())),
            ("a to b's bound address, at b advertising another",
             "10.0.0.1:7946", "10.0.0.2:7946", None, "203.0.113.2:7946", "10.0.0.2:7946", Ok(())),
            ("a to b as IPv4-mapped IPv6, at b",
             "10.0.0.1:7946", "[::ffff:10.0.0.2]:7946", None, "10.0.0.2:7946", "0.0.0.0:7946", Ok(())),
            ("b's own packet to a, sent back to b",
             "10.0.0.2:7946", "10.0.0.1:7946", None, "10.0.0.2:7946", "0.0.0.0:7946", Err(Dropped::Replayed)),
            ("b's own packet to itself",
             "10.0.0.2:7946", "10.0.0.2:7946", None, "10.0.0.2:7946", "0.0.0.0:7946", Err(Dropped::Replayed)),
            ("b's packet sent as its bound address, back to b",
             "10.0.0.2:7946", "10.0.0.1:7946", None, "203.0.113.2:7946", "10.0.0.2:7946", Err(Dropped::Replayed)),
            ("a's packet for b, delivered to c",
             "10.0.0.1:7946", "10.0.0.2:7946", None, "10.0.0.3:7946", "0.0.0.0:7946", Err(Dropped::Misdirected)),
            ("a's packet for b's IP on another port, at b",
             "10.0.0.1:7946", "10.0.0.2:7947", None, "10.0.0.2:7946", "0.0.0.0:7946", Err(Dropped::Misdirected)),
            ("a's packet for 0.0.0.0, at b bound to 0.0.0.0",
             "10.0.0.1:7946", "0.0.0.0:7946", None, "10.0.0.2:7946", "0.0.0.0:7946", Err(Dropped::Misdirected)),
            ("a's packet for b, its recipient rewritten to c, at c",
             "10.0.0.1:7946", "10.0.0.2:7946", Some((RECIPIENT, "10.0.0.3:7946")), "10.0.0.3:7946", "0.0.0.0:7946", Err(Dropped::NotAuthentic)),
            ("b's own packet, its sender rewritten to a, back at b",
             "10.0.0.2:7946", "10.0.0.2:7946", Some((SENDER, "10.0.0.1:7946")), "10.0.0.2:7946", "0.0.0.0:7946", Err(Dropped::NotAuthentic)),
            ("a's packet for b, its sender rewritten to c, at b",
             "10.0.0.1:7946", "10.0.0.2:7946", Some((SENDER, "10.0.0.3:7946")), "10.0.0.2:7946", "0.0.0.0:7946", Err(Dropped::NotAuthentic)),
        ];
        let keys = keys(&[1]);
        for (what, sender, to, rewrite, advertise, bound, expected) in cases {
            let mut packet = Sealer::new(addr(sender))
                .seal(&keys, b"syn", addr(to), NOW)
                .remove(0);
            assert_eq!(packet[SENDER].to_vec(), wire(addr(sender)), "{what}");
            assert_eq!(packet[RECIPIENT].to_vec(), wire(addr(to)), "{what}");
            if let Some((field, to)) = rewrite {
                packet[field].copy_from_slice(&wire(addr(to)));
            }
            let mut opener = Opener::new(Own {
                advertise: addr(advertise),
                bound: addr(bound),
            });
            let result = opener.open(&keys, &packet, NOW);
            let expected = expected.map(|()| {
                Some(Opened {
                    message: b"syn".to_vec(),
                    sender: addr(sender),
                })
            });
            assert_eq!(result, expected, "{what}");
        }
    }

    #[test]
    fn answers_name_the_asker_by_its_advertised_address() {
        let keys = keys(&[1]);
        // a advertises a public address; behind NAT its packets come from
        // another one.
        let (public, translated) = (addr("203.0.113.1:7946"), addr("198.51.100.7:40000"));
        let (mut asker, mut asked) = (Sealer::new(public), Sealer::new(b()));
        let mut at_a = Opener::new(Own {
            advertise: public,
            bound: addr("0.0.0.0:7946"),
        });
        let syn = asker.seal(&keys, b"syn", b(), NOW).remove(0);
        let heard = at(b()).open(&keys, &syn, NOW).unwrap().unwrap();
        assert_eq!(heard.sender, public);

        let before = asked.seal(&keys, b"syn-ack", translated, NOW).remove(0);
        assert_eq!(
            at_a.open(&keys, &before, NOW),
            Err(Dropped::Misdirected),
            "a does not know the translated address as its own"
        );
        asked.heard(translated, heard.sender);
        let answer = asked.seal(&keys, b"syn-ack", translated, NOW).remove(0);
        assert_eq!(at_a.open(&keys, &answer, NOW), opened(b"syn-ack", b()));
        // Heard again from its own address: the answer names the address.
        asked.heard(translated, translated);
        let answer = asked.seal(&keys, b"syn-ack", translated, NOW).remove(0);
        assert_eq!(answer[RECIPIENT].to_vec(), wire(translated));
    }

    #[test]
    fn other_keys_tampering_and_garbage_are_dropped() {
        let (ours, theirs) = (keys(&[1]), keys(&[2]));
        let mut opener = at(b());
        let foreign = Sealer::new(a()).seal(&theirs, b"x", b(), NOW).remove(0);
        assert_eq!(opener.open(&ours, &foreign, NOW), Err(Dropped::UnknownKey));
        let good = Sealer::new(a()).seal(&ours, b"hello", b(), NOW).remove(0);
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            let result = opener.open(&ours, &bad, NOW);
            assert!(result.is_err(), "byte {i} flipped: {result:?}");
        }
        for cut in 0..good.len() {
            assert!(opener.open(&ours, &good[..cut], NOW).is_err());
        }
        let mut rng = fastrand::Rng::with_seed(7);
        for len in 0..300 {
            let mut noise = vec![0; len];
            rng.fill(&mut noise);
            assert!(opener.open(&ours, &noise, NOW).is_err());
        }
        // The untouched packet still opens: nothing above was remembered.
        assert!(opener.open(&ours, &good, NOW).is_ok());
    }

    #[test]
    fn the_first_format_is_malformed() {
        let keys = keys(&[1]);
        let mut packet = Sealer::new(a()).seal(&keys, b"x", b(), NOW).remove(0);
        packet[0] = 1;
        assert_eq!(at(b()).open(&keys, &packet, NOW), Err(Dropped::Malformed));
    }

    #[test]
    fn old_and_future_packets_are_stale() {
        let keys = keys(&[1]);
        let mut opener = at(b());
        let old = Sealer::new(a())
            .seal(&keys, b"x", b(), NOW - WINDOW_MS - 1)
            .remove(0);
        assert_eq!(opener.open(&keys, &old, NOW), Err(Dropped::Stale));
        let future = Sealer::new(a())
            .seal(&keys, b"x", b(), NOW + WINDOW_MS + 1)
            .remove(0);
        assert_eq!(opener.open(&keys, &future, NOW), Err(Dropped::Stale));
    }

    #[test]
    fn rotation_opens_with_every_key_and_seals_with_the_first() {
        let (old, both, new) = (keys(&[1]), keys(&[2, 1]), keys(&[2]));
        let mut opener = at(b());
        let from_old = Sealer::new(a()).seal(&old, b"a", b(), NOW).remove(0);
        let from_both = Sealer::new(a()).seal(&both, b"b", b(), NOW).remove(0);
        assert!(opener.open(&both, &from_old, NOW).is_ok());
        assert!(opener.open(&new, &from_both, NOW).is_ok());
        assert_eq!(opener.open(&new, &from_old, NOW), Err(Dropped::UnknownKey));
    }

    #[test]
    fn large_messages_travel_in_parts() {
        let keys = keys(&[1]);
        let (mut sealer, mut opener) = (Sealer::new(a()), at(b()));
        let message: Vec<u8> = (0..MAX_DATAGRAM).map(|i| i as u8).collect();
        let packets = sealer.seal(&keys, &message, b(), NOW);
        assert_eq!(packets.len(), 2);
        assert!(packets.iter().all(|p| p.len() <= MAX_DATAGRAM));
        assert_eq!(opener.open(&keys, &packets[1], NOW), Ok(None));
        assert_eq!(opener.open(&keys, &packets[0], NOW), opened(&message, a()));
        // A part whose sibling never comes is forgotten.
        let lonely = sealer.seal(&keys, &message, b(), NOW).remove(0);
        assert_eq!(opener.open(&keys, &lonely, NOW), Ok(None));
        assert_eq!(opener.partial.len(), 1);
        let later = sealer.seal(&keys, b"x", b(), NOW + REASSEMBLY_MS + 1);
        let _ = opener.reassemble((wire(a()), 0), 0, 2, Vec::new(), NOW + REASSEMBLY_MS + 1);
        assert_eq!(opener.partial.len(), 1, "only the fresh one");
        assert_eq!(later.len(), 1);
        assert!(
            sealer
                .seal(&keys, &vec![0; MAX_PART * MAX_PARTS + 1], b(), NOW)
                .is_empty()
        );
    }

    #[test]
    fn replay_memory_is_bounded_in_time() {
        let keys = keys(&[1]);
        let mut opener = at(b());
        let mut sealer = Sealer::new(a());
        for i in 0..100 {
            let packet = sealer.seal(&keys, b"x", b(), NOW + i * 1000).remove(0);
            assert!(opener.open(&keys, &packet, NOW + i * 1000).is_ok());
        }
        assert!(opener.seen.len() <= 61, "{} remembered", opener.seen.len());
    }

    /// Every format this release opens: the current one and, for one
    /// release after a change, the one before (docs/cluster.md, "Rolling
    /// upgrades").
    const READ: &[u8] = &[FORMAT];

    fn recording(format: u8) -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/recorded")
            .join(format!("gossip-{format}.txt"))
    }

    fn line<'t>(text: &'t str, name: &str) -> &'t str {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} recorded"))
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Recorded packets of every format read open, from a sender of an
    /// earlier release: node a to node b, sealed with the key of secret
    /// `[7; 32]`. `PICKET_RECORD=1` records the current format's.
    #[test]
    fn recorded_packets_of_every_format_read_open() {
        let message = b"a chitchat message, as the sender serialized it";
        if std::env::var_os("PICKET_RECORD").is_some() {
            let packets = Sealer::new(a()).seal(&keys(&[7]), message, b(), NOW);
            let hex: String = packets[0].iter().map(|b| format!("{b:02x}")).collect();
            let text = format!("sent_ms {NOW}\npacket {hex}\n");
            std::fs::write(recording(FORMAT), text).unwrap();
        }
        for &format in READ {
            let text = std::fs::read_to_string(recording(format)).unwrap();
            let sent: u64 = line(&text, "sent_ms").parse().unwrap();
            let packet = unhex(line(&text, "packet"));
            assert_eq!(packet[0], format);
            assert_eq!(
                at(b()).open(&keys(&[7]), &packet, sent + 1),
                opened(message, a()),
                "format {format}"
            );
        }
    }
}
