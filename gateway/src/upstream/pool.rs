//! Idle upstream connections, one pool per pair of bounds.
//!
//! A connection is checked in when the response it carried has been read to
//! its end, and checked out last-in first-out, so that a few warm
//! connections carry the traffic and the rest age out. Connections idle
//! longer than [`IDLE_TIMEOUT`], or closed by the upstream, are dropped on
//! checkout and by [`Pools::sweep`].
//!
//! Each replica has its idle HTTP/1.1 connections in a stack per worker
//! thread, found once through the pool and then held by the replica: a
//! request checks out and in on its own worker's stack, under a lock no
//! other worker takes, and takes from another worker's only when its own is
//! empty. Nothing on the request path is shared across workers.
//!
//! HTTP/2 connections are shared rather than lent: one stays in the pool
//! while it carries requests, and a checkout hands out a handle on the
//! first with room for another stream. One unused for [`IDLE_TIMEOUT`] is
//! dropped (and closed with GOAWAY).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::conn::Conn;
use super::http1::Connection;
use super::http2::H2Conn;
use super::{Replica, ReplicaKey};
use crate::config::Bounds;

/// How long an idle connection is kept. Shorter than the keep-alive timeout
/// of common upstream servers (nginx: 75 s), so that the pool rarely hands
/// out a connection the upstream is closing.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections kept per replica, over all its stacks.
pub const MAX_IDLE_PER_REPLICA: usize = 512;

struct Idle<C> {
    conn: C,
    since: Instant,
}

/// What a stack asks of a connection it holds.
pub trait Reusable {
    /// Still open, with nothing unasked for waiting in it.
    fn is_usable(&mut self) -> bool;
}

impl Reusable for Connection {
    fn is_usable(&mut self) -> bool {
        Connection::is_usable(self)
    }
}

/// The idle HTTP/1.1 connections to one replica: one stack per worker
/// thread, each under its own lock.
pub struct IdleStack<C = Connection> {
    shards: Box<[Mutex<Vec<Idle<C>>>]>,
    /// Connections each stack keeps at most.
    per_shard: usize,
}

impl<C> std::fmt::Debug for IdleStack<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleStack")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

/// The stack of the calling thread: threads are numbered as they first ask.
fn shard_of_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SHARD.with(|shard| *shard)
}

impl<C: Reusable> IdleStack<C> {
    /// One stack per worker of the runtime it is made in.
    fn new() -> IdleStack<C> {
        let workers = tokio::runtime::Handle::try_current()
            .map_or(1, |runtime| runtime.metrics().num_workers())
            .clamp(1, 64);
        IdleStack::with_shards(workers)
    }

    fn with_shards(shards: usize) -> IdleStack<C> {
        IdleStack {
            shards: (0..shards).map(|_| Mutex::new(Vec::new())).collect(),
            per_shard: MAX_IDLE_PER_REPLICA.div_ceil(shards),
        }
    }

    fn shard(&self, i: usize) -> std::sync::MutexGuard<'_, Vec<Idle<C>>> {
        self.shards[i % self.shards.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used connection that is still open: the calling
    /// worker's own first, then another's.
    fn checkout(&self, now: Instant) -> Option<C> {
        let own = shard_of_thread();
        (0..self.shards.len()).find_map(|i| {
            let mut list = self.shard(own + i);
            while let Some(mut entry) = list.pop() {
                if now.duration_since(entry.since) < IDLE_TIMEOUT && entry.conn.is_usable() {
                    return Some(entry.conn);
                }
            }
            None
        })
    }

    fn checkin(&self, conn: C, now: Instant) {
        let mut list = self.shard(shard_of_thread());
        if list.len() < self.per_shard {
            list.push(Idle { conn, since: now });
        }
    }

    fn len(&self) -> usize {
        (0..self.shards.len()).map(|i| self.shard(i).len()).sum()
    }

    /// Drops what expired or was closed; whether any is left.
    fn sweep(&self, now: Instant) -> bool {
        let mut left = false;
        for i in 0..self.shards.len() {
            let mut list = self.shard(i);
            list.retain_mut(|e| now.duration_since(e.since) < IDLE_TIMEOUT && e.conn.is_usable());
            left |= !list.is_empty();
        }
        left
    }
}

/// The idle connections of every route whose bounds are `bounds`.
pub struct Pool {
    pub bounds: Bounds,
    /// Keyed by replicas of the configuration: a fast unkeyed hash is safe.
    /// Taken once per replica; its stack is then the replica's.
    idle: Mutex<FxHashMap<ReplicaKey, Arc<IdleStack>>>,
    /// HTTP/2 connections, by replica.
    shared: Mutex<FxHashMap<ReplicaKey, Vec<H2Conn>>>,
    /// HTTP/2 connects under way, by replica: the requests that find no
    /// room meanwhile wait for the new connection rather than each open
    /// one of their own.
    connecting: Mutex<FxHashMap<ReplicaKey, Arc<tokio::sync::Notify>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub fn new(bounds: Bounds) -> Pool {
        Pool {
            bounds,
            idle: Mutex::new(FxHashMap::default()),
            shared: Mutex::new(FxHashMap::default()),
            connecting: Mutex::new(FxHashMap::default()),
        }
    }

    /// Marks an HTTP/2 connect to a replica under way until the guard is
    /// dropped; `None` when one already is.
    pub fn begin_connect(self: &Arc<Self>, key: &ReplicaKey) -> Option<Connecting> {
        let mut connecting = self.connecting.lock().unwrap_or_else(|e| e.into_inner());
        if connecting.contains_key(key) {
            return None;
        }
        connecting.insert(key.clone(), Arc::new(tokio::sync::Notify::new()));
        Some(Connecting {
            pool: Arc::clone(self),
            key: key.clone(),
        })
    }

    /// Waits, at most `bound`, for the HTTP/2 connect under way to a
    /// replica, if any, to end; then a handle on a connection with room,
    /// if there is one.
    pub async fn after_connect(
        &self,
        key: &ReplicaKey,
        bound: std::time::Duration,
    ) -> Option<Conn> {
        let notify = {
            let connecting = self.connecting.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(connecting.get(key)?)
        };
        let ended = notify.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        // It may have ended between the lookup and the wait.
        let underway = self
            .connecting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .is_some_and(|n| Arc::ptr_eq(n, &notify));
        if underway {
            let _ = tokio::time::timeout(bound, ended).await;
        }
        self.checkout_shared(key).map(Conn::H2)
    }

    /// A connection to a replica for one request: a handle on an HTTP/2
    /// connection with room for another stream, else the most recently
    /// used idle HTTP/1.1 connection that is still open.
    pub fn checkout(&self, replica: &Replica) -> Option<Conn> {
        if replica.key.protocol != crate::config::Protocol::Http1
            && let Some(shared) = self.checkout_shared(&replica.key)
        {
            return Some(Conn::H2(shared));
        }
        self.stack(replica).checkout(Instant::now()).map(Conn::H1)
    }

    /// Whether open connections reach `replica`: idle in the pool, or
    /// serving a request now (awaiting its answer, or carrying its body).
    /// Requests can still reach it though a new connect would fail.
    pub fn holds(&self, replica: &Replica) -> bool {
        if replica.awaiting.load(Ordering::Relaxed) > 0 || replica.lent.load(Ordering::Relaxed) > 0
        {
            return true;
        }
        let shared = {
            let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            shared
                .get(&replica.key)
                .is_some_and(|list| list.iter().any(|c| !c.is_closed()))
        };
        // Closed idle connections hold nothing: swept first.
        shared
            || replica
                .idle
                .get()
                .is_some_and(|stack| stack.sweep(Instant::now()))
    }

    /// The replica's idle stack, found in the pool on its first use.
    fn stack<'r>(&self, replica: &'r Replica) -> &'r Arc<IdleStack> {
        replica.idle.get_or_init(|| {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(
                idle.entry(replica.key.clone())
                    .or_insert_with(|| Arc::new(IdleStack::new())),
            )
        })
    }

    fn checkout_shared(&self, key: &ReplicaKey) -> Option<H2Conn> {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let list = shared.get_mut(key)?;
        list.retain(|c| !c.is_closed());
        list.iter_mut().find_map(H2Conn::reserve)
    }

    /// Keeps an HTTP/2 connection for the requests to come.
    pub fn share(&self, key: &ReplicaKey, conn: H2Conn) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let list = match shared.get_mut(key) {
            Some(list) => list,
            None => shared.entry(key.clone()).or_default(),
        };
        if !list.iter().any(|c| c.same(&conn)) && list.len() < MAX_IDLE_PER_REPLICA {
            // A clone: the pool's handle reserves no stream.
            list.push(conn.clone());
        }
    }

    /// Returns a connection: an HTTP/1.1 one whose last response has
    /// ended, or an HTTP/2 one to share.
    pub fn put(&self, replica: &Replica, conn: Conn) {
        match conn {
            Conn::H1(conn) => self.checkin(replica, conn),
            Conn::H2(conn) => self.share(&replica.key, conn),
        }
    }

    /// Returns a connection whose last response has ended.
    pub fn checkin(&self, replica: &Replica, conn: Connection) {
        self.stack(replica).checkin(conn, Instant::now());
    }

    /// Idle connections to a replica.
    pub fn idle(&self, key: &ReplicaKey) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.get(key).map_or(0, |stack| stack.len())
    }

    fn sweep(&self, now: Instant) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // A stack stays while it holds connections or a replica holds it.
        idle.retain(|_, stack| stack.sweep(now) || Arc::strong_count(stack) > 1);
        drop(idle);
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.retain(|_, list| {
            list.retain(|c| {
                !c.is_closed()
                    && (c.open() > 0 || now.saturating_duration_since(c.last_used()) < IDLE_TIMEOUT)
            });
            !list.is_empty()
        });
    }
}

/// An HTTP/2 connect under way ([`Pool::begin_connect`]); its end wakes
/// the requests waiting for it.
pub struct Connecting {
    pool: Arc<Pool>,
    key: ReplicaKey,
}

impl Drop for Connecting {
    fn drop(&mut self) {
        let mut connecting = self
            .pool
            .connecting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = connecting.remove(&self.key) {
            notify.notify_waiters();
        }
    }
}

/// Every pool of the node, by bounds; kept across reloads.
#[derive(Debug, Default)]
pub struct Pools {
    by_bounds: Mutex<HashMap<Bounds, Arc<Pool>>>,
}

impl Pools {
    /// The pool for `bounds`, shared by every route with those bounds.
    pub fn get(&self, bounds: Bounds) -> Arc<Pool> {
        let mut pools = self.by_bounds.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            pools
                .entry(bounds)
                .or_insert_with(|| Arc::new(Pool::new(bounds))),
        )
    }

    /// Drops idle connections that expired or that the upstream closed, and
    /// pools no route uses any more.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut pools = self.by_bounds.lock().unwrap_or_else(|e| e.into_inner());
        pools.retain(|_, pool| Arc::strong_count(pool) > 1);
        for pool in pools.values() {
            pool.sweep(now);
        }
    }

    pub fn len(&self) -> usize {
        self.by_bounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that is usable while its flag says so.
    struct Fake(u32, bool);

    impl Reusable for Fake {
        fn is_usable(&mut self) -> bool {
            self.1
        }
    }

    #[test]
    fn a_worker_takes_its_own_most_recent_connection_first() {
        let stack = IdleStack::with_shards(4);
        let now = Instant::now();
        stack.checkin(Fake(1, true), now);
        stack.checkin(Fake(2, true), now);
        assert_eq!(stack.checkout(now).map(|c| c.0), Some(2));
        assert_eq!(stack.checkout(now).map(|c| c.0), Some(1));
        assert!(stack.checkout(now).is_none());
    }

    #[test]
    fn a_worker_with_none_takes_another_workers() {
        let stack = Arc::new(IdleStack::with_shards(2));
        let now = Instant::now();
        let other = Arc::clone(&stack);
        std::thread::spawn(move || other.checkin(Fake(7, true), now))
            .join()
            .expect("the other thread checked in");
        assert_eq!(stack.len(), 1);
        assert_eq!(stack.checkout(now).map(|c| c.0), Some(7));
        assert_eq!(stack.len(), 0);
    }

    #[test]
    fn threads_check_in_on_stacks_of_their_own() {
        let stack = Arc::new(IdleStack::with_shards(64));
        let now = Instant::now();
        let mine = shard_of_thread();
        let other = Arc::clone(&stack);
        let theirs = std::thread::spawn(move || {
            other.checkin(Fake(7, true), now);
            shard_of_thread()
        })
        .join()
        .expect("the other thread checked in");
        assert_ne!(mine, theirs, "threads are numbered apart");
        assert_eq!(stack.shard(theirs).len(), 1);
    }

    #[test]
    fn expired_and_closed_connections_are_never_handed_out() {
        let stack = IdleStack::with_shards(1);
        let then = Instant::now();
        stack.checkin(Fake(1, true), then);
        stack.checkin(Fake(2, false), then + IDLE_TIMEOUT);
        // Closed by the upstream: skipped; idle past the timeout: dropped.
        assert!(stack.checkout(then + IDLE_TIMEOUT).is_none());
        stack.checkin(Fake(3, true), then);
        stack.checkin(Fake(4, false), then);
        assert!(stack.sweep(then + Duration::from_secs(1)));
        assert_eq!(stack.len(), 1);
        assert!(!stack.sweep(then + IDLE_TIMEOUT));
    }

    #[test]
    fn a_replica_keeps_at_most_its_share_of_idle_connections() {
        let stack = IdleStack::with_shards(1);
        let now = Instant::now();
        for i in 0..(MAX_IDLE_PER_REPLICA + 10) {
            stack.checkin(Fake(u32::try_from(i).unwrap_or(u32::MAX), true), now);
        }
        assert_eq!(stack.len(), MAX_IDLE_PER_REPLICA);
    }
}
