//! Picket: an HTTP gateway that runs as a cluster, one node per machine.
//!
//! This crate is one node. Each node proxies traffic ([`proxy`]) to the
//! replicas of its routes ([`upstream`]), bounds how long it waits for
//! them, keeps replicas that fail to connect out of its own rotation, and
//! reports on itself through the admin listener ([`status`]).
//!
//! Decisions (route matching, replica health, configuration validation and
//! reload plans) are pure code that takes `now` and inputs; sockets, timers
//! and files live at the edges.

#![forbid(unsafe_code)]

// The public surface: what the `picket` command (`gateway/cli`) runs a
// node, checks a file and serves the demo and the socket proxy with, and
// what the integration tests and benchmarks drive and observe. The rest
// is the node's own.
pub mod access;
pub mod acme;
pub mod breaker;
pub mod challenges;
pub mod changes;
pub mod clock;
pub mod config;
pub mod demo;
pub mod edge;
pub mod gossip;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod proxy;
pub mod shutdown;
pub mod socket_proxy;
pub mod status;
pub mod targets;
pub mod tls;
pub mod upstream;

mod body;
mod certificate;
mod checks;
mod ending;
mod reload;
mod resources;
mod router;
mod server;
mod verdict;

use picket_h1 as h1;

/// A log sink for tests, shared with the integration tests' harness
/// (`picket_tests::logs`) so that it is written once.
#[doc(hidden)]
pub mod testing;
