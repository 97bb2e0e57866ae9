//! The wall clock, for what is stamped for people and peers: verdicts,
//! transitions, ages in the view, certificate validity. Decisions take `now`
//! as an argument; only the edges read it here.

use std::time::{SystemTime, UNIX_EPOCH};

pub use picket_proto::clock::now_unix_ms;

/// Now, in Unix seconds.
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
