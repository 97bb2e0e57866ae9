//! One signal for "something changed that can move a verdict or the need
//! for connect checks": replica sets and states, circuit transitions,
//! reloads, the runtime's reachability. Every interested task subscribes;
//! a burst of changes reads as one.

use tokio::sync::watch;

#[derive(Debug)]
pub struct Changes(watch::Sender<u64>);

impl Default for Changes {
    fn default() -> Self {
        Changes(watch::channel(0).0)
    }
}

impl Changes {
    /// Says that something changed.
    pub fn signal(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that wakes on the next signal.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}
