//! What opens over the matrix: the help, and the node picker.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::app::{App, PAGE};
use crate::theme;

fn keys() -> [(&'static str, String); 9] {
    [
        ("↑ ↓  j k", "move the selection"),
        ("PgUp PgDn", &format!("move by {PAGE} rows")),
        ("Home End  g G", "first, last route"),
        ("/", "filter routes by name (Enter keeps, Esc clears)"),
        ("Esc", "clear the filter"),
        ("s", "sort by severity (disagreement, worst heart) or name"),
        ("n", "attach to another node's feed"),
        ("?", "this help"),
        ("q  Ctrl-C", "quit"),
    ]
    .map(|(key, what)| (key, what.to_owned()))
}

/// A box of `width` × `height` in the middle of `area`, cleared.
fn popup(frame: &mut Frame, area: Rect, width: u16, height: u16, title: &str) -> Rect {
    let rect = area.centered(
        Constraint::Length(width.min(area.width)),
        Constraint::Length(height.min(area.height)),
    );
    frame.render_widget(Clear, rect);
    let block = Block::new()
        .borders(Borders::ALL)
        .title(Span::styled(format!(" {title} "), theme::title()))
        .style(theme::popup());
    let inner = block.inner(rect);
    frame.render_widget(block, rect);
    inner
}

pub(super) fn help(frame: &mut Frame, area: Rect) {
    let mut lines = vec![Line::styled("keys", theme::header())];
    lines.extend(keys().into_iter().map(|(key, what)| {
        Line::from(vec![
            Span::styled(format!(" {key:<14}"), theme::key()),
            Span::raw(what),
        ])
    }));
    lines.push(Line::styled("symbols", theme::header()));
    lines.extend(theme::HELP_SYMBOLS.iter().map(|(symbol, what)| {
        Line::from(vec![
            Span::styled(format!(" {symbol:<14}"), theme::title()),
            Span::raw(*what),
        ])
    }));
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
    let inner = popup(frame, area, 72, height, "help — ? or Esc closes");
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The members that advertise a feed, with their liveness.
pub(super) fn picker(frame: &mut Frame, area: Rect, app: &App, selected: usize) {
    let entries = app.picker_entries();
    let attached = app.view().map(|v| v.node.as_str());
    let height = u16::try_from(entries.len().max(1) + 4).unwrap_or(u16::MAX);
    let inner = popup(frame, area, 70, height, "attach to a node");
    if inner.height == 0 {
        return;
    }
    let list = usize::from(inner.height.saturating_sub(2));
    let mut lines = Vec::new();
    if entries.is_empty() {
        lines.push(Line::styled("no member advertises a feed", theme::muted()));
    }
    let first = if entries.len() <= list {
        0
    } else {
        selected.saturating_sub(list / 2).min(entries.len() - list)
    };
    for (i, member) in entries.iter().enumerate().skip(first).take(list) {
        let feed = member
            .info
            .as_ref()
            .and_then(|info| info.feed.as_deref())
            .unwrap_or_default();
        let mark = if i == selected { "▶ " } else { "  " };
        let mut spans = vec![
            Span::raw(mark),
            Span::raw(format!("{:<12} ", member.name)),
            Span::styled(
                theme::liveness_symbol(member.liveness),
                theme::liveness_style(member.liveness),
            ),
            Span::raw(format!(" {:<8}", theme::liveness_word(member.liveness))),
            Span::raw(feed.to_owned()),
        ];
        if attached == Some(member.name.as_str()) {
            spans.push(Span::styled("  (attached)", theme::muted()));
        }
        let style = if i == selected {
            theme::selected()
        } else {
            Style::new()
        };
        lines.push(Line::from(spans).style(style));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled("↑↓", theme::key()),
        Span::raw(" choose  "),
        Span::styled("Enter", theme::key()),
        Span::raw(" attach  "),
        Span::styled("Esc", theme::key()),
        Span::raw(" close"),
    ]));
    frame.render_widget(Paragraph::new(lines), inner);
}
