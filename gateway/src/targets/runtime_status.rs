//! Whether the runtime's data is current, shared by the runtime's tasks
//! (which observe its endpoints answering or not) and the verdict board
//! and status API (which read it without waiting). The decision is
//! [`Reachability`]'s; this holds it with the wall clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::reach::{Change, Reachability};
use crate::clock::now_unix_ms;

/// Whether the runtime's data is current: every endpoint of its API (the
/// API server; each engine of a swarm) answering.
#[derive(Debug, Default)]
pub struct RuntimeStatus {
    reach: Mutex<Reachability>,
    /// Unix ms since which it is stale; 0 while current. A copy of what
    /// `reach` says, for readers that must not wait.
    stale_since: AtomicU64,
    /// The runtime has answered once (its first inventory arrived).
    reached: AtomicBool,
}

impl RuntimeStatus {
    /// Records whether `endpoint` answered; returns the change, if this is
    /// one.
    pub fn observe(&self, endpoint: &str, ok: bool) -> Option<Change> {
        if ok {
            self.reached.store(true, Ordering::Release);
        }
        let mut reach = self.reach.lock().unwrap_or_else(|e| e.into_inner());
        let change = reach.observe(endpoint, ok, now_unix_ms());
        self.stale_since
            .store(reach.stale_since().unwrap_or(0), Ordering::Release);
        change
    }

    /// Forgets an endpoint the node no longer follows.
    pub fn forget(&self, endpoint: &str) -> Option<Change> {
        let mut reach = self.reach.lock().unwrap_or_else(|e| e.into_inner());
        let change = reach.forget(endpoint);
        self.stale_since
            .store(reach.stale_since().unwrap_or(0), Ordering::Release);
        change
    }

    /// Endpoints that do not answer now.
    pub fn unreachable(&self) -> Vec<String> {
        let reach = self.reach.lock().unwrap_or_else(|e| e.into_inner());
        reach.unreachable().map(str::to_string).collect()
    }

    /// Whether the runtime has ever answered this node.
    pub fn reached(&self) -> bool {
        self.reached.load(Ordering::Acquire)
    }

    pub fn stale_since(&self) -> Option<u64> {
        Some(self.stale_since.load(Ordering::Acquire)).filter(|t| *t != 0)
    }
}
