//! Handshakes in progress on the feed, and who makes room for a newcomer.
//!
//! A client takes a feed place (of [`super::MAX_CLIENTS`], and of
//! [`super::MAX_PER_SOURCE`] for its address) only once its handshake has
//! ended, its certificate checked when `feed_client_ca` asks for one. Until
//! then it holds one of a bounded set of handshakes in progress, and a
//! handshake that stalls (a client that answered the Retry and sends
//! nothing more) is the first to go: a newcomer from an address at its
//! share takes the place of that address's oldest handshake, and one
//! arriving when every handshake is taken, the place of the oldest
//! handshake of the address holding the most. An operator alone at its
//! address is never pushed out by a flood from fewer than
//! [`MAX_HANDSHAKES`] addresses, each of which must answer a Retry.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Handshakes in progress at once.
pub const MAX_HANDSHAKES: usize = 64;
/// Handshakes in progress from one address.
pub const MAX_PER_SOURCE: usize = 8;

/// What a newcomer's handshake needs done first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// There is room.
    Free,
    /// The handshake with this ID gives its place up.
    Evict(u64),
}

/// Who makes room for a newcomer from `ip`, among `pending` (IDs and
/// addresses, oldest first): the oldest handshake of its own address when
/// that address holds `per_source`; else, when `max` are in progress, the
/// oldest handshake of the address holding the most (of those holding as
/// many, the one whose oldest is oldest). A client alone at its address
/// keeps its place while any address holds two.
pub fn room(pending: &[(u64, IpAddr)], ip: IpAddr, max: usize, per_source: usize) -> Room {
    // Each address's count and oldest handshake, in order of its oldest.
    let mut held: Vec<(IpAddr, usize, u64)> = Vec::new();
    for &(id, from) in pending {
        match held.iter_mut().find(|(address, ..)| *address == from) {
            Some((_, count, _)) => *count += 1,
            None => held.push((from, 1, id)),
        }
    }
    if let Some((.., oldest)) = held
        .iter()
        .find(|(address, count, _)| *address == ip && *count >= per_source)
    {
        return Room::Evict(*oldest);
    }
    if pending.len() < max {
        return Room::Free;
    }
    // The first of the fullest: `max_by_key` would take the last.
    let most = held.iter().map(|(_, count, _)| *count).max().unwrap_or(0);
    match held.iter().find(|(_, count, _)| *count == most) {
        Some((.., oldest)) => Room::Evict(*oldest),
        None => Room::Free,
    }
}

/// The feed's handshakes in progress.
#[derive(Debug, Default)]
pub struct Handshakes {
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    next: u64,
    /// Oldest first.
    list: VecDeque<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    ip: IpAddr,
    /// Told when the handshake must give its place up.
    evict: oneshot::Sender<()>,
}

/// A handshake's place, given back when dropped.
#[derive(Debug)]
pub struct Place {
    handshakes: Arc<Handshakes>,
    id: u64,
}

impl Handshakes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a handshake from `ip`, made by evicting another when
    /// [`room`] says so; the receiver fires when this one is evicted in
    /// turn. Returns whether another was evicted.
    pub fn begin(self: &Arc<Handshakes>, ip: IpAddr) -> (Place, oneshot::Receiver<()>, bool) {
        let mut pending = self.lock();
        let ids: Vec<(u64, IpAddr)> = pending.list.iter().map(|e| (e.id, e.ip)).collect();
        let evicted = match room(&ids, ip, MAX_HANDSHAKES, MAX_PER_SOURCE) {
            Room::Free => false,
            Room::Evict(id) => {
                if let Some(at) = pending.list.iter().position(|e| e.id == id)
                    && let Some(entry) = pending.list.remove(at)
                {
                    let _ = entry.evict.send(());
                }
                true
            }
        };
        let id = pending.next;
        pending.next += 1;
        let (evict, evicted_rx) = oneshot::channel();
        pending.list.push_back(Entry { id, ip, evict });
        let place = Place {
            handshakes: Arc::clone(self),
            id,
        };
        (place, evicted_rx, evicted)
    }

    /// Handshakes in progress now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().list.len()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut pending = self.handshakes.lock();
        if let Some(at) = pending.list.iter().position(|e| e.id == self.id) {
            pending.list.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn who_makes_room() {
        let a = ip(1);
        let b = ip(2);
        let c = ip(3);
        /// Pending oldest first, the newcomer, the limits (all, per
        /// source), and who makes room.
        type Case<'a> = (&'a [(u64, IpAddr)], IpAddr, usize, usize, Room);
        let cases: &[Case] = &[
            (&[], a, 4, 2, Room::Free),
            (&[(1, a)], a, 4, 2, Room::Free),
            // Its address holds its share: its own oldest goes, not the
            // oldest of all.
            (&[(1, b), (2, a), (3, a)], a, 4, 2, Room::Evict(2)),
            (&[(1, b), (2, a), (3, c), (4, a)], a, 4, 2, Room::Evict(2)),
            // Every handshake taken: the oldest of the address holding
            // the most goes, the oldest of all among equals.
            (&[(1, b), (2, c), (3, b), (4, c)], a, 4, 2, Room::Evict(1)),
            (&[(1, a), (2, b), (3, b)], c, 3, 4, Room::Evict(2)),
            (
                &[(1, a), (2, b), (3, c), (4, c), (5, b), (6, c)],
                a,
                6,
                4,
                Room::Evict(3),
            ),
            (&[(5, c), (6, b), (7, a)], c, 3, 2, Room::Evict(5)),
            (
                &[(5, c), (6, b), (7, a)],
                IpAddr::from([0u8; 16]),
                3,
                2,
                Room::Evict(5),
            ),
            (&[(1, b), (2, c)], a, 4, 2, Room::Free),
        ];
        for (pending, newcomer, max, per_source, expected) in cases {
            assert_eq!(
                room(pending, *newcomer, *max, *per_source),
                *expected,
                "{pending:?} + {newcomer}"
            );
        }
    }

    #[test]
    fn an_evicted_handshake_is_told_and_its_place_given_back() {
        let handshakes = Arc::new(Handshakes::default());
        let mut held = Vec::new();
        for _ in 0..MAX_PER_SOURCE {
            held.push(handshakes.begin(ip(1)));
        }
        assert!(held.iter().all(|(_, _, evicted)| !evicted));
        let (_newest, _, evicted) = handshakes.begin(ip(1));
        assert!(evicted);
        let (_, first, _) = &mut held[0];
        assert_eq!(first.try_recv(), Ok(()), "the oldest was told");
        assert_eq!(handshakes.len(), MAX_PER_SOURCE);
        // Places given back as handshakes end.
        held.clear();
        assert_eq!(handshakes.len(), 1);
        // Many addresses fill every place; the next evicts the oldest.
        let mut many = Vec::new();
        for i in 0..MAX_HANDSHAKES - 1 {
            many.push(handshakes.begin(IpAddr::from([10, 1, (i / 200) as u8, (i % 200) as u8])));
        }
        assert_eq!(handshakes.len(), MAX_HANDSHAKES);
        let (_place, _, evicted) = handshakes.begin(ip(200));
        assert!(evicted);
        assert_eq!(handshakes.len(), MAX_HANDSHAKES);
    }
}
