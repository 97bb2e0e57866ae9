//! A node's judgement of a route, as it travels between processes.
//!
//! Its texts are shared (`Arc`), not owned: a node holds every member's
//! verdict on each route, and the members of one cluster mostly name the
//! same routes, give the same reasons and run the same images. A node
//! that holds one copy of each such text and lets every verdict point to
//! it (see the gossip view's interner) holds 100,000 verdicts in a few
//! megabytes less per copy. On the wire they are plain strings and lists.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The colour of a verdict.
///
/// Ordered by severity so that sorting puts the worst first with `Reverse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Heart {
    /// Every replica is ready, or the external host accepts a connection.
    Green,
    /// Some replicas are ready, not all.
    Orange,
    /// None is ready, the host refuses, or the circuit is open.
    Red,
}

/// The state of a route's circuit breaker on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// The breaker is not enabled for this route.
    Disabled,
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    /// Its name, as logs, metrics, the status API and gossip's JSON say it.
    pub const fn label(self) -> &'static str {
        match self {
            BreakerState::Disabled => "disabled",
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// How many replicas run one image.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageCount {
    /// Its label: the name's last path part, the tag unless it is
    /// `latest`, and the start of the digest when one is known
    /// (`api:1.4@sha256:4c0f12ab9d2e`, `nginx@sha256:4c0f12ab9d2e`,
    /// `api:1.4`). Two builds under one tag are two labels.
    pub image: String,
    /// How many replicas run it; a replica with several images (a pod's
    /// app and sidecars) counts once under each.
    pub replicas: u32,
}

/// One node's verdict on one route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub route: Arc<str>,
    pub heart: Heart,
    /// Why the heart has its colour, in words an operator reads.
    pub reason: Arc<str>,
    pub ready: u32,
    pub total: u32,
    /// The images its replicas run, most replicas first, then by label.
    pub images: Arc<[ImageCount]>,
    pub circuit: BreakerState,
    /// When the heart or reason last changed, in milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// Since when the runtime's data is stale (its API unreachable), if it is.
    pub runtime_stale_since_unix_ms: Option<u64>,
}

/// Every verdict of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: String,
    pub verdicts: Vec<Verdict>,
}
