//! Which runtime API endpoints answer, as a pure decider: each endpoint
//! (the API server; each engine or socket proxy of a swarm) is reachable
//! or not on its own, and the node's runtime data is stale while any one
//! of them is not, since the earliest of them stopped answering.
//!
//! In a swarm, one engine answering again says nothing of another still
//! silent: only its own observation clears its mark.

use std::collections::BTreeMap;

/// One endpoint's reachability changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// It answers now (`true`) or stopped answering (`false`).
    pub reachable: bool,
    /// Since when the node's runtime data is stale after this change, in
    /// Unix ms; `None`: every endpoint answers.
    pub stale_since: Option<u64>,
}

/// The reachability of every endpoint a node follows.
#[derive(Debug, Default, Clone)]
pub struct Reachability {
    /// Unix ms since which each endpoint has not answered; `None` while it
    /// answers.
    by_endpoint: BTreeMap<String, Option<u64>>,
}

impl Reachability {
    /// Records that `endpoint` answered (`ok`) or did not at `now` (Unix
    /// ms); returns the change, if this is one. An endpoint first seen
    /// answering is no change: nothing was marked.
    pub fn observe(&mut self, endpoint: &str, ok: bool, now: u64) -> Option<Change> {
        let before = self.by_endpoint.get(endpoint).copied();
        let after = if ok {
            None
        } else {
            // Stale since the first silence, not the latest.
            Some(before.flatten().unwrap_or(now.max(1)))
        };
        self.by_endpoint.insert(endpoint.to_string(), after);
        let changed = match before {
            None => !ok,
            Some(before) => before.is_some() == ok,
        };
        changed.then(|| Change {
            reachable: ok,
            stale_since: self.stale_since(),
        })
    }

    /// Drops an endpoint the node no longer follows (an engine that left
    /// the swarm), and its mark with it.
    pub fn forget(&mut self, endpoint: &str) -> Option<Change> {
        let was_unreachable = self.by_endpoint.remove(endpoint)?.is_some();
        was_unreachable.then(|| Change {
            reachable: true,
            stale_since: self.stale_since(),
        })
    }

    /// Since when the runtime data is stale: the earliest silence of an
    /// endpoint that has not answered since.
    pub fn stale_since(&self) -> Option<u64> {
        self.by_endpoint.values().flatten().min().copied()
    }

    /// Whether `endpoint` answers, as far as the node knows.
    pub fn is_reachable(&self, endpoint: &str) -> Option<bool> {
        self.by_endpoint.get(endpoint).map(Option::is_none)
    }

    /// Endpoints that do not answer now.
    pub fn unreachable(&self) -> impl Iterator<Item = &str> {
        self.by_endpoint
            .iter()
            .filter(|(_, since)| since.is_some())
            .map(|(endpoint, _)| endpoint.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(endpoint, ok, now)` in order, and the change each must give.
    #[test]
    fn each_endpoint_is_judged_on_its_own() {
        let lost = |since| {
            Some(Change {
                reachable: false,
                stale_since: Some(since),
            })
        };
        let found = |since| {
            Some(Change {
                reachable: true,
                stale_since: since,
            })
        };
        let steps: &[(&str, bool, u64, Option<Change>)] = &[
            ("a", true, 10, None),
            ("b", true, 10, None),
            ("a", true, 20, None),
            ("a", false, 30, lost(30)),
            ("a", false, 40, None),
            // A second engine goes: still stale since the first silence.
            ("b", false, 50, lost(30)),
            // One engine back: the other still keeps the data stale.
            ("a", true, 60, found(Some(50))),
            ("a", true, 70, None),
            ("b", true, 80, found(None)),
            // First seen silent: a change.
            ("c", false, 90, lost(90)),
        ];
        let mut reach = Reachability::default();
        for (i, (endpoint, ok, now, want)) in steps.iter().enumerate() {
            assert_eq!(
                reach.observe(endpoint, *ok, *now),
                *want,
                "step {i}: {endpoint} ok={ok} at {now}"
            );
        }
        assert_eq!(reach.stale_since(), Some(90));
        assert_eq!(reach.unreachable().collect::<Vec<_>>(), ["c"]);
        assert_eq!(reach.is_reachable("a"), Some(true));
        assert_eq!(reach.is_reachable("zz"), None);
    }

    #[test]
    fn an_engine_that_leaves_takes_its_mark_with_it() {
        let mut reach = Reachability::default();
        reach.observe("a", false, 5);
        reach.observe("b", true, 6);
        assert_eq!(reach.forget("b"), None, "it was answering");
        assert_eq!(
            reach.forget("a"),
            Some(Change {
                reachable: true,
                stale_since: None
            })
        );
        assert_eq!(reach.forget("a"), None, "already gone");
        assert_eq!(reach.stale_since(), None);
    }

    #[test]
    fn time_zero_still_marks() {
        let mut reach = Reachability::default();
        assert!(reach.observe("a", false, 0).is_some());
        assert_eq!(reach.stale_since(), Some(1));
    }
}
