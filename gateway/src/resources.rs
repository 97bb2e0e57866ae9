//! The node's own resources: file descriptors, buffers, local ports.
//!
//! Running out of them is the node's problem, never a replica's: a connect
//! that fails with EMFILE says nothing of the replica it was for. So a
//! local resource error ([`is_local`]) never ejects a replica, never fails
//! a connect check, never refuses a configuration; it is counted, and
//! logged once per episode (when the node runs out, and once when it has
//! room again), never once per connection.
//!
//! An episode ends only when an operation succeeds after [`QUIET`] without
//! a local resource error: at the limit every closed connection frees a
//! descriptor the next accept takes, so successes and failures alternate
//! for as long as the shortage lasts, and ending the episode at the first
//! success would log it once per freed descriptor.
//!
//! ## Client connections
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit, and the
//! proxy serves at most [`default_max_connections`] client connections
//! (or `[node] max_connections`): each may hold a connection to a replica
//! too, and a reserve of descriptors stays for the admin listener, connect
//! checks, runtime watches, gossip and reloads. At the limit the proxy
//! stops accepting (clients wait in the listen backlog) rather than fail.

use std::io;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use prometheus_client::metrics::counter::Counter;

/// Raises the soft limit on open files to the hard limit; returns the limit
/// now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// Descriptors kept back from client connections for everything else the
/// node does: the admin listener's own `admin` places, and an eighth of
/// the limit (at least 64) for checks, runtime watches, gossip and reloads.
pub fn reserve(nofile: u64, admin: usize) -> u64 {
    (nofile / 8).max(64) + admin as u64
}

/// Client connections served at once when the configuration sets no
/// limit: half of what the reserve leaves (each client connection may hold
/// one to a replica), at least 1.
pub fn default_max_connections(nofile: u64, admin: usize) -> usize {
    let usable = nofile.saturating_sub(reserve(nofile, admin)) / 2;
    usize::try_from(usable).unwrap_or(usize::MAX).max(1)
}

/// Whether an error is the node running out of something of its own: file
/// descriptors (EMFILE, ENFILE), buffer space (ENOBUFS), memory (ENOMEM)
/// or local addresses (EADDRNOTAVAIL).
pub fn is_local(error: &io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOMEM: i32 = 12;
    const ENOBUFS: i32 = 105;
    const EADDRNOTAVAIL: i32 = 99;
    matches!(
        error.raw_os_error(),
        Some(EMFILE | ENFILE | ENOMEM | ENOBUFS | EADDRNOTAVAIL)
    ) || error.kind() == io::ErrorKind::OutOfMemory
}

/// How long a shortage must stay away before its episode ends.
pub const QUIET: Duration = Duration::from_secs(1);

/// Episodes of local resource exhaustion in this process (file
/// descriptors are the process's, whichever node in it hit the limit).
#[derive(Debug)]
pub struct Local {
    exhausted: AtomicBool,
    /// The last local resource error, in milliseconds since `origin`.
    last_error_ms: AtomicU64,
    origin: Instant,
    /// Every local resource error, wherever it happened.
    pub errors: Counter,
    /// Times the process ran out.
    pub episodes: Counter,
}

/// The process's local resource state.
pub static LOCAL: LazyLock<Local> = LazyLock::new(|| Local::new(Instant::now()));

impl Local {
    fn new(origin: Instant) -> Self {
        Local {
            exhausted: AtomicBool::new(false),
            last_error_ms: AtomicU64::new(0),
            origin,
            errors: Counter::default(),
            episodes: Counter::default(),
        }
    }

    /// Records a local resource error met while doing `during`.
    pub fn hit(&self, during: &'static str, error: &io::Error) {
        self.hit_at(Instant::now(), during, error);
    }

    fn hit_at(&self, now: Instant, during: &'static str, error: &io::Error) {
        self.errors.inc();
        self.last_error_ms
            .fetch_max(self.millis(now), Ordering::AcqRel);
        if !self.exhausted.swap(true, Ordering::AcqRel) {
            self.episodes.inc();
            tracing::warn!(
                %error,
                during,
                "out of a local resource (file descriptors, buffers or ports): replicas are not blamed and configuration is kept until it passes"
            );
        }
    }

    /// An operation that needs local resources succeeded: ends an episode
    /// if no local resource error came within [`QUIET`]. One atomic load
    /// when there is no episode.
    pub fn ok(&self) {
        if self.exhausted.load(Ordering::Relaxed) {
            self.ok_at(Instant::now());
        }
    }

    fn ok_at(&self, now: Instant) {
        let since = self
            .millis(now)
            .saturating_sub(self.last_error_ms.load(Ordering::Acquire));
        if Duration::from_millis(since) >= QUIET && self.exhausted.swap(false, Ordering::AcqRel) {
            tracing::info!("local resources available again");
        }
    }

    fn millis(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    #[cfg(test)]
    fn is_exhausted(&self) -> bool {
        self.exhausted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_leave_a_reserve() {
        assert_eq!(default_max_connections(1024, 0), (1024 - 128) / 2);
        assert_eq!(default_max_connections(256, 0), (256 - 64) / 2);
        assert_eq!(
            default_max_connections(1 << 20, 0),
            ((1 << 20) - (1 << 17)) / 2
        );
        assert_eq!(default_max_connections(10, 0), 1);
        // The admin listener's places are its own share.
        assert_eq!(default_max_connections(4096, 256), (4096 - 512 - 256) / 2);
    }

    #[test]
    fn local_errors_are_told_apart() {
        for errno in [24, 23, 12, 105, 99] {
            assert!(is_local(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
        for errno in [111, 110, 113, 104] {
            assert!(!is_local(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
    }

    #[test]
    fn one_episode_until_it_ends() {
        let origin = Instant::now();
        let local = Local::new(origin);
        let emfile = io::Error::from_raw_os_error(24);
        for _ in 0..100 {
            local.hit_at(origin, "connect", &emfile);
        }
        assert_eq!(local.errors.get(), 100);
        assert_eq!(local.episodes.get(), 1);
        local.ok_at(origin + QUIET);
        assert!(!local.is_exhausted());
        local.hit_at(origin + QUIET * 2, "accept", &emfile);
        assert_eq!(local.episodes.get(), 2);
    }

    #[test]
    fn successes_between_failures_do_not_end_an_episode() {
        // At the limit a freed descriptor lets one accept through before
        // the next fails: one episode, however often that happens.
        let origin = Instant::now();
        let local = Local::new(origin);
        let emfile = io::Error::from_raw_os_error(24);
        for step in 0..50u32 {
            let now = origin + Duration::from_millis(20) * step;
            local.hit_at(now, "accept", &emfile);
            local.ok_at(now + Duration::from_millis(10));
            assert!(local.is_exhausted(), "ended at step {step}");
        }
        assert_eq!(local.episodes.get(), 1);
        let last = origin + Duration::from_millis(20) * 49;
        local.ok_at(last + QUIET - Duration::from_millis(1));
        assert!(local.is_exhausted());
        local.ok_at(last + QUIET);
        assert!(!local.is_exhausted());
        assert_eq!(local.episodes.get(), 1);
    }
}
