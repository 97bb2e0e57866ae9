//! Idle upstream connections, one pool per pair of bounds.
//!
//! A connection is checked in when the response it carried has been read to
//! its end, and checked out last-in first-out, so that a few warm
//! connections carry the traffic and the rest age out. Connections idle
//! longer than [`IDLE_TIMEOUT`], or closed by the upstream, are dropped on
//! checkout and by [`Pools::sweep`].
//!
//! HTTP/2 connections are shared rather than lent: one stays in the pool
//! while it carries requests, and a checkout hands out a handle on the
//! first with room for another stream. One unused for [`IDLE_TIMEOUT`] is
//! dropped (and closed with GOAWAY).

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::ReplicaKey;
use super::conn::{Conn, Connection};
use super::h2::H2Conn;
use crate::config::Bounds;

/// How long an idle connection is kept. Shorter than the keep-alive timeout
/// of common upstream servers (nginx: 75 s), so that the pool rarely hands
/// out a connection the upstream is closing.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections kept per replica.
pub const MAX_IDLE_PER_REPLICA: usize = 512;

struct Idle {
    conn: Connection,
    since: Instant,
}

/// The idle connections of every route whose bounds are `bounds`.
pub struct Pool {
    pub bounds: Bounds,
    /// Keyed by replicas of the configuration: a fast unkeyed hash is safe.
    idle: Mutex<FxHashMap<ReplicaKey, Vec<Idle>>>,
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
    pub fn checkout(&self, key: &ReplicaKey) -> Option<Conn> {
        if key.protocol != crate::config::Protocol::Http1
            && let Some(shared) = self.checkout_shared(key)
        {
            return Some(Conn::H2(shared));
        }
        self.checkout_idle(key).map(Conn::H1)
    }

    fn checkout_shared(&self, key: &ReplicaKey) -> Option<H2Conn> {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let list = shared.get_mut(key)?;
        list.retain(|c| !c.is_closed());
        list.iter_mut()
            .find_map(|c| c.has_room().then(|| c.clone()))
    }

    /// Keeps an HTTP/2 connection for the requests to come.
    pub fn share(&self, key: &ReplicaKey, conn: H2Conn) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let list = match shared.get_mut(key) {
            Some(list) => list,
            None => shared.entry(key.clone()).or_default(),
        };
        if !list.iter().any(|c| c.same(&conn)) && list.len() < MAX_IDLE_PER_REPLICA {
            list.push(conn);
        }
    }

    /// Returns a connection: an HTTP/1.1 one whose last response has
    /// ended, or an HTTP/2 one to share.
    pub fn put(&self, key: &ReplicaKey, conn: Conn) {
        match conn {
            Conn::H1(conn) => self.checkin(key, conn),
            Conn::H2(conn) => self.share(key, conn),
        }
    }

    fn checkout_idle(&self, key: &ReplicaKey) -> Option<Connection> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(mut entry) = list.pop() {
            if now.duration_since(entry.since) < IDLE_TIMEOUT && entry.conn.is_usable() {
                return Some(entry.conn);
            }
        }
        None
    }

    /// Returns a connection whose last response has ended.
    pub fn checkin(&self, key: &ReplicaKey, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = match idle.get_mut(key) {
            Some(list) => list,
            None => idle.entry(key.clone()).or_default(),
        };
        if list.len() < MAX_IDLE_PER_REPLICA {
            list.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// Idle connections to a replica.
    pub fn idle(&self, key: &ReplicaKey) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.get(key).map_or(0, Vec::len)
    }

    fn sweep(&self, now: Instant) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|_, list| {
            list.retain_mut(|e| now.duration_since(e.since) < IDLE_TIMEOUT && e.conn.is_usable());
            !list.is_empty()
        });
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
