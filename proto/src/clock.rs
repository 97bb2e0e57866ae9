//! The wall clock both sides stamp by: the gateway's verdicts and views,
//! the terminal view's ages and stale links.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds (0 before 1970, saturated far after).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
