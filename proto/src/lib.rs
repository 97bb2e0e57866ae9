//! Wire types and the codec that the Picket gateway and `picket-tui` share.
//!
//! Besides the types and the codec, it holds what both sides must do
//! alike: the back-off they wait by ([`backoff`]), the wall clock they
//! stamp by ([`clock`]), and the feed's framing ([`feed`]). Nothing here
//! opens a socket.
//! Every value that crosses a process boundary (a gossip value, a feed frame)
//! is one of these types, encoded by [`codec`], which carries a version byte
//! and refuses anything larger than its limit before allocating for it.

#![forbid(unsafe_code)]

pub mod acme;
pub mod backoff;
pub mod clock;
mod cluster;
pub mod codec;
pub mod feed;
pub mod gossip;
pub mod verdict;

pub use acme::{CertificateState, Phase as AcmePhase};
pub use backoff::Backoff;
pub use cluster::{ClusterView, Liveness, Member, NodeInfo, TableGeneration};
pub use verdict::{BreakerState, Heart, ImageCount, NodeView, Shown, ShownHeart, Verdict};
