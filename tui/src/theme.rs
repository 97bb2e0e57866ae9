//! Every colour and symbol of the TUI.

use picket_proto::Heart;
use ratatui::style::{Color, Modifier, Style};

pub const HEART: &str = "♥";
pub const BROKEN_HEART: &str = "♡";
pub const NO_VERDICT: &str = "·";
pub const DISAGREEMENT: &str = "!";

pub fn heart(heart: Heart) -> (&'static str, Style) {
    match heart {
        Heart::Green => (HEART, Style::new().fg(Color::Green)),
        Heart::Orange => (HEART, Style::new().fg(Color::Yellow)),
        Heart::Red => (BROKEN_HEART, Style::new().fg(Color::Red)),
    }
}

pub fn header() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub fn selected() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

pub fn disagreement() -> Style {
    Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD)
}
