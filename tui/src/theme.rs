//! Every colour, symbol and word the TUI draws with, in one place.
//!
//! ## Symbols
//! | symbol | meaning |
//! |--------|---------|
//! | `♥` green  | the node judges the route green (every replica ready) |
//! | `❣` orange | orange, a heart with a drop below: some replicas ready, not all (drawn in the terminal's yellow, which most palettes render amber) |
//! | `♡` red    | red, an empty heart: nothing ready, the host refuses, or the circuit is open |
//!
//! Each heart has a symbol of its own as well as a colour, so that a
//! terminal without colour, a screenshot or a colour-blind operator still
//! tells green, orange and red apart.
//! | `◇` blue   | stale: the node's runtime has gone silent, so its last pass is not a current verdict (the detail pane shows what it last saw, and since when) |
//! | `◐` after a heart | the route's circuit is half-open on that node (trial requests) |
//! | `○` after a heart | the circuit is open (an open loop: nothing passes) |
//! | nothing after a heart | the circuit is closed, or the breaker is disabled |
//! | `·` | the node has no verdict on the route |
//! | `≠` before a route | live nodes disagree: the Alive and Suspect members' hearts differ (Dead members do not count) |
//! | `●` `◌` `✕` | a node is alive, suspect or dead |
//!
//! Hearts keep their colour on Dead members' columns but are dimmed: what a
//! dead node last said is history, not a judgement.
//!
//! The help overlay ([`HELP_SYMBOLS`]) lists the same table for the operator.

use picket_proto::{BreakerState, Heart, Liveness};
use ratatui::style::{Color, Modifier, Style};

pub const HEART: &str = "♥";
pub const PARTIAL_HEART: &str = "❣";
pub const BROKEN_HEART: &str = "♡";
pub const STALE_HEART: &str = "◇";
pub const HALF_OPEN: &str = "◐";
pub const OPEN: &str = "○";
pub const NO_VERDICT: &str = "·";
pub const DISAGREEMENT: &str = "≠";
pub const ALIVE: &str = "●";
pub const SUSPECT: &str = "◌";
pub const DEAD: &str = "✕";
pub const ELLIPSIS: &str = "…";

pub const GREEN: Color = Color::Green;
pub const ORANGE: Color = Color::Yellow;
pub const RED: Color = Color::Red;
pub const STALE: Color = Color::Blue;

/// The symbol and legend the help overlay shows, one row each.
pub const HELP_SYMBOLS: &[(&str, &str)] = &[
    ("♥", "green: every replica ready"),
    ("❣", "orange: some replicas ready, not all"),
    ("♡", "red (empty): none ready, refused, or circuit open"),
    ("◇", "stale: runtime silent, last pass not current"),
    ("◐ ○", "after a heart: circuit half-open, open"),
    ("·", "no verdict from that node"),
    ("≠", "live nodes disagree on the route"),
    ("● ◌ ✕", "node alive, suspect, dead (column: data age)"),
];

pub fn heart_symbol(heart: Heart) -> &'static str {
    match heart {
        Heart::Green => HEART,
        Heart::Orange => PARTIAL_HEART,
        Heart::Red => BROKEN_HEART,
    }
}

pub fn heart_color(heart: Heart) -> Color {
    match heart {
        Heart::Green => GREEN,
        Heart::Orange => ORANGE,
        Heart::Red => RED,
    }
}

pub fn heart_style(heart: Heart) -> Style {
    Style::new().fg(heart_color(heart))
}

/// A cell's symbol and style: its heart's, or the stale heart's when the
/// node's runtime has gone silent.
pub fn cell_heart(heart: Heart, stale: bool) -> (&'static str, Style) {
    match stale {
        true => (STALE_HEART, Style::new().fg(STALE)),
        false => (heart_symbol(heart), heart_style(heart)),
    }
}

pub fn heart_word(heart: Heart) -> &'static str {
    match heart {
        Heart::Green => "green",
        Heart::Orange => "orange",
        Heart::Red => "red",
    }
}

/// What follows a heart: nothing when traffic flows normally.
pub fn circuit_marker(circuit: BreakerState) -> &'static str {
    match circuit {
        BreakerState::Disabled | BreakerState::Closed => " ",
        BreakerState::HalfOpen => HALF_OPEN,
        BreakerState::Open => OPEN,
    }
}

pub fn circuit_style(circuit: BreakerState) -> Style {
    match circuit {
        BreakerState::Disabled => Style::new().fg(Color::DarkGray),
        BreakerState::Closed => Style::new(),
        BreakerState::HalfOpen => Style::new().fg(ORANGE),
        BreakerState::Open => Style::new().fg(RED).add_modifier(Modifier::BOLD),
    }
}

pub fn circuit_word(circuit: BreakerState) -> &'static str {
    match circuit {
        BreakerState::Disabled => "disabled",
        BreakerState::Closed => "closed",
        BreakerState::HalfOpen => "half-open",
        BreakerState::Open => "open",
    }
}

pub fn liveness_symbol(liveness: Liveness) -> &'static str {
    match liveness {
        Liveness::Alive => ALIVE,
        Liveness::Suspect => SUSPECT,
        Liveness::Dead => DEAD,
    }
}

pub fn liveness_style(liveness: Liveness) -> Style {
    match liveness {
        Liveness::Alive => Style::new().fg(GREEN),
        Liveness::Suspect => Style::new().fg(ORANGE),
        Liveness::Dead => Style::new().fg(RED),
    }
}

pub fn liveness_word(liveness: Liveness) -> &'static str {
    match liveness {
        Liveness::Alive => "alive",
        Liveness::Suspect => "suspect",
        Liveness::Dead => "dead",
    }
}

/// A Dead member's cell: its last word, dimmed.
pub fn dead() -> Style {
    Style::new().add_modifier(Modifier::DIM)
}

/// A note that the data behind a verdict is old (its runtime unreachable).
pub fn warning() -> Style {
    Style::new().fg(ORANGE)
}

/// An ACME certificate whose last order failed on a node.
pub fn failing() -> Style {
    Style::new().fg(RED)
}

pub fn no_verdict() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub fn disagreement() -> Style {
    Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD)
}

pub fn header() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// Secondary text: ages, counts, hints.
pub fn muted() -> Style {
    Style::new().fg(Color::DarkGray)
}

/// The selected row; only the background, so hearts keep their colour.
pub fn selected() -> Style {
    Style::new()
        .bg(Color::DarkGray)
        .add_modifier(Modifier::BOLD)
}

pub fn live() -> Style {
    Style::new().fg(GREEN).add_modifier(Modifier::BOLD)
}

pub fn stale() -> Style {
    Style::new().fg(RED).add_modifier(Modifier::BOLD)
}

pub fn connecting() -> Style {
    Style::new().fg(ORANGE).add_modifier(Modifier::BOLD)
}

/// A key in the footer and the help.
pub fn key() -> Style {
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
}

pub fn title() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub fn popup() -> Style {
    Style::new().fg(Color::White).bg(Color::Black)
}
