//! `picket-tui`: every node's view of each route, side by side.
//!
//! State, update and view are apart: [`app::App::update`] is pure,
//! [`view::render`] draws and does nothing else, and [`theme`] holds every
//! colour. This first version shows a cluster view read from a snapshot
//! file; the live QUIC feed of the nodes is its next source.

#![forbid(unsafe_code)]

pub mod app;
pub mod theme;
pub mod view;
