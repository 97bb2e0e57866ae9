//! The buckets of a per-client rate limit: bounded memory, constant work
//! per request, whatever the number of clients.
//!
//! - **Keys.** An IPv4 client by its address; an IPv6 client by its /64
//!   (one host holds a whole /64, so keying by the full address would give
//!   one client 2^64 buckets); an IPv4-mapped IPv6 address as the IPv4
//!   address it maps.
//! - **Shards.** [`SHARDS`] tables, each under its own lock, a client's
//!   picked by a hash of its key: a request locks one small table.
//! - **Bounded.** Each shard holds at most [`PER_SHARD`] buckets in a
//!   fixed ring of slots. A new client past that takes the slot the clock
//!   hand finds first that loses nothing or little: a bucket full again
//!   (forgetting it changes nothing), else one not used since the hand last
//!   passed (second chance). The hand looks at [`SCAN`] slots at most, so
//!   the work is bounded; past them it takes the slot it stands on.
//! - **What a flood costs.** A client that keeps sending sets its slot's
//!   mark on every request, so a flood of one-request clients takes the
//!   slots of each other and of idle clients first: a limited client is
//!   not reset by new addresses unless they outnumber the table within
//!   one turn of the hand, that is more than [`CAPACITY`] new clients
//!   between two of its requests.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;

use tokio::time::Instant;

use super::Bucket;
use crate::config::RateSettings;

/// Shards of the table.
pub const SHARDS: usize = 64;
/// Buckets a shard holds at most.
pub const PER_SHARD: usize = 1024;
/// Buckets the table holds at most: 65,536 clients at once.
pub const CAPACITY: usize = SHARDS * PER_SHARD;
/// Slots the clock hand looks at for one new client, at most.
const SCAN: usize = 16;

/// Whom a bucket belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
}

impl Key {
    pub fn of(ip: IpAddr) -> Key {
        match ip {
            IpAddr::V4(v4) => Key::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Key::V4(u32::from(v4)),
                None => Key::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[derive(Debug)]
struct Slot {
    key: Key,
    bucket: Bucket,
    /// Used since the hand last passed.
    used: bool,
}

#[derive(Debug, Default)]
struct Shard {
    index: HashMap<Key, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

impl Shard {
    /// The slot a new client takes in a full shard.
    fn victim(&mut self, settings: &RateSettings, now: Instant) -> usize {
        let n = self.slots.len();
        for _ in 0..SCAN.min(n) {
            let at = self.hand;
            self.hand = (self.hand + 1) % n;
            let slot = &mut self.slots[at];
            if slot.bucket.refilled(settings, now) || !slot.used {
                return at;
            }
            slot.used = false;
        }
        let at = self.hand;
        self.hand = (self.hand + 1) % n;
        at
    }

    fn take(
        &mut self,
        key: Key,
        settings: &RateSettings,
        now: Instant,
    ) -> Result<(), std::time::Duration> {
        if let Some(&at) = self.index.get(&key) {
            let slot = &mut self.slots[at];
            slot.used = true;
            return slot.bucket.take(settings, now);
        }
        let mut bucket = Bucket::full(settings, now);
        let taken = bucket.take(settings, now);
        let slot = Slot {
            key,
            bucket,
            used: false,
        };
        if self.slots.len() < PER_SHARD {
            self.index.insert(key, self.slots.len());
            self.slots.push(slot);
        } else {
            let at = self.victim(settings, now);
            self.index.remove(&self.slots[at].key);
            self.index.insert(key, at);
            self.slots[at] = slot;
        }
        taken
    }
}

/// The per-client buckets of one route.
#[derive(Debug)]
pub struct Clients {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for Clients {
    fn default() -> Clients {
        Clients {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl Clients {
    /// Takes a token from `client`'s bucket at `now`; when there is none,
    /// how long until one.
    pub fn take(
        &self,
        client: IpAddr,
        settings: &RateSettings,
        now: Instant,
    ) -> Result<(), std::time::Duration> {
        let key = Key::of(client);
        let shard = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[shard]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(key, settings, now)
    }

    /// Clients with a bucket now.
    pub fn count(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.slots.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RateKey;
    use std::time::Duration;

    fn settings(per_second: f64, burst: u32) -> RateSettings {
        RateSettings {
            per_second,
            burst,
            by: RateKey::Client,
        }
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64_and_mapped_ones_as_ipv4() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            Key::of(ip("2001:db8:1:2::1")),
            Key::of(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            Key::of(ip("2001:db8:1:2::1")),
            Key::of(ip("2001:db8:1:3::1"))
        );
        assert_eq!(Key::of(ip("::ffff:192.0.2.7")), Key::of(ip("192.0.2.7")));
        assert_ne!(Key::of(ip("192.0.2.7")), Key::of(ip("192.0.2.8")));
        // One bucket for the whole /64.
        let s = settings(1.0, 1);
        let clients = Clients::default();
        let t0 = Instant::now();
        assert!(clients.take(ip("2001:db8::1"), &s, t0).is_ok());
        assert!(clients.take(ip("2001:db8::2"), &s, t0).is_err(), "same /64");
        assert!(
            clients.take(ip("2001:db8:0:1::1"), &s, t0).is_ok(),
            "another /64"
        );
    }

    #[test]
    fn a_flood_of_new_clients_stays_bounded_and_never_resets_a_limited_one() {
        let s = settings(0.001, 2);
        let clients = Clients::default();
        let t0 = Instant::now();
        let limited: IpAddr = "198.51.100.1".parse().unwrap();
        assert!(clients.take(limited, &s, t0).is_ok());
        assert!(clients.take(limited, &s, t0).is_ok());
        assert!(clients.take(limited, &s, t0).is_err(), "limited");
        // Four times the table in one-request clients, the limited one
        // sending all along (every 1,000 new clients).
        for i in 0..(4 * CAPACITY) as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let now = t0 + Duration::from_micros(u64::from(i));
            assert!(clients.take(ip, &s, now).is_ok());
            if i % 1000 == 0 {
                assert!(
                    clients.take(limited, &s, now).is_err(),
                    "reset after {i} clients"
                );
            }
        }
        assert!(clients.count() <= CAPACITY, "{} buckets", clients.count());
    }

    #[test]
    fn full_buckets_give_their_slots_first() {
        let s = settings(1000.0, 1);
        let clients = Clients::default();
        let t0 = Instant::now();
        for i in 0..CAPACITY as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i));
            assert!(clients.take(ip, &s, t0).is_ok());
        }
        // A second later every bucket is full again: a new client takes
        // one of their slots, and the table stays at its size.
        let later = t0 + Duration::from_secs(1);
        assert!(
            clients
                .take("192.0.2.1".parse().unwrap(), &s, later)
                .is_ok()
        );
        assert!(clients.count() <= CAPACITY);
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use crate::config::RateKey;

    /// The old table, as it was: one map under one lock, scanned whole
    /// for every new client past 16,384.
    fn old_admit(
        map: &Mutex<HashMap<IpAddr, Bucket>>,
        client: IpAddr,
        s: &RateSettings,
        now: Instant,
    ) -> bool {
        let mut clients = map.lock().unwrap();
        if clients.len() >= 16 * 1024 && !clients.contains_key(&client) {
            clients.retain(|_, bucket| !bucket.refilled(s, now));
            if clients.len() >= 1024 * 1024 {
                clients.clear();
            }
        }
        clients
            .entry(client)
            .or_insert_with(|| Bucket::full(s, now))
            .take(s, now)
            .is_ok()
    }

    #[test]
    #[ignore = "a measurement, run by hand: cargo test -p picket-gateway --lib proxy::limits::clients::timing -- --ignored --nocapture"]
    fn cpu_for_4000_new_clients() {
        let s = RateSettings {
            per_second: 0.001,
            burst: 5,
            by: RateKey::Client,
        };
        let now = Instant::now();
        let ip = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(i));
        for size in [16_384u32, 40_000] {
            let old = Mutex::new(HashMap::new());
            let new = Clients::default();
            for i in 0..size {
                old_admit(&old, ip(i), &s, now);
                let _ = new.take(ip(i), &s, now);
            }
            let started = Instant::now();
            for i in size..size + 4000 {
                old_admit(&old, ip(i), &s, now);
            }
            let old_took = started.elapsed();
            let started = Instant::now();
            for i in size..size + 4000 {
                let _ = new.take(ip(i), &s, now);
            }
            eprintln!(
                "{size} clients: 4,000 new ones took {old_took:?} before, {:?} now",
                started.elapsed()
            );
        }
    }
}
