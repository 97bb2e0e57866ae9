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

pub mod access;
pub mod body;
pub mod breaker;
pub mod certificate;
pub mod changes;
pub mod checks;
pub mod clock;

pub mod config;
pub mod demo;
pub mod edge;
pub mod ending;
pub mod gossip;
pub use picket_h1 as h1;
pub mod metrics;
pub mod node;
pub mod proxy;
pub mod reload;
pub mod resources;
pub mod router;
pub mod server;
pub mod shutdown;
pub mod socket_proxy;
pub mod status;
pub mod targets;
pub mod tls;
pub mod upstream;
pub mod verdict;

/// A log sink for tests, shared with the integration tests' harness
/// (`picket_tests::logs`) so that it is written once.
#[doc(hidden)]
pub mod testing;
