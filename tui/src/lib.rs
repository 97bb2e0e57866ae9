//! `picket-tui`: every node's view of each route, side by side.
//!
//! State, update and view are apart: [`app::App::update`] is pure (keys,
//! cluster views, the feed link's state and clock ticks arrive as one
//! [`app::Msg`]), [`view::render`] draws and does nothing else, and
//! [`theme`] holds every colour and symbol. The matrix shows routes as rows
//! and nodes as columns, collapsing the columns into counts when they do
//! not fit; a detail pane shows the selected route on every node, and an
//! overlay ([`certificates`]) each node's state of each ACME certificate.

#![forbid(unsafe_code)]

pub mod app;
pub mod certificates;
pub mod cli;
pub mod feed;
pub mod table;
pub mod theme;
pub mod view;
