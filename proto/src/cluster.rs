//! What nodes tell each other and what an operator's client sees of the
//! cluster: each node's description and every node's verdicts, with how
//! alive each node looks from where the view was taken.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{CertificateState, Verdict};

/// What a node says of itself in gossip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    /// The Picket version it runs.
    pub version: String,
    /// Where its status API answers (`host:port`).
    pub admin: String,
    /// Where its QUIC feed answers, if it serves one.
    pub feed: Option<String>,
    /// The SHA-256 fingerprint of the feed's certificate, hex, for pinning.
    pub feed_fingerprint: Option<String>,
    /// `none`, `docker`, `swarm` or `kubernetes`.
    pub runtime: String,
    pub started_unix_ms: u64,
}

/// Which route table a node serves: a digest of every route it serves (the
/// file's and the runtime's, as configured) and how many there are. Two
/// nodes with the same digest route alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TableGeneration {
    /// The first 8 bytes of a SHA-256 over the routes, in hex.
    pub digest: String,
    pub routes: u32,
    /// When this node installed the table.
    pub since_unix_ms: u64,
}

/// How alive a node looks from the node that reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    Alive,
    /// The failure detector still counts it live, but its heartbeat has
    /// not advanced for several gossip intervals.
    Suspect,
    Dead,
}

/// One node as another node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its node name (unique in the cluster).
    pub name: String,
    /// Its gossip address, as it advertises it.
    pub gossip: String,
    /// Its start time: a restarted node is a new generation.
    pub generation: u64,
    pub liveness: Liveness,
    /// When the reporting node last saw this node's heartbeat advance
    /// (its own: when the view was taken).
    pub heard_unix_ms: u64,
    /// `None` until its node info has arrived.
    pub info: Option<NodeInfo>,
    /// The route table it serves; `None` until it has said (or from a
    /// node too old to say).
    #[serde(default)]
    pub table: Option<TableGeneration>,
    /// Its state of each certificate it obtains from ACME, by name; empty
    /// without `[acme]` (or from a node too old to say).
    #[serde(default)]
    pub certificates: Vec<CertificateState>,
    /// Its verdicts, by route name. Shared, not copied: the view of a
    /// member whose values did not change holds the very verdicts the
    /// view before it held, and this node's own are those its checks
    /// published.
    pub verdicts: Arc<Vec<Verdict>>,
}

/// The cluster as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterView {
    /// The node whose view this is.
    pub node: String,
    pub cluster: String,
    /// When the view was taken.
    pub taken_unix_ms: u64,
    /// Every node it knows, itself included, by name.
    pub members: Vec<Member>,
}
