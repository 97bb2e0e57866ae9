//! The wall clock, for what is stamped for people and peers: verdicts,
//! transitions, ages in the view, certificate validity. Decisions take `now`
//! as an argument; only the edges read it here.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds (0 before 1970, saturated far after).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Now, in Unix seconds.
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
