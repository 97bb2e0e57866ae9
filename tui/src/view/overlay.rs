//! What opens over the matrix: the help, and the node picker.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::app::{App, PAGE};
use crate::theme;

fn keys() -> [(&'static str, String); 10] {
    [
        ("↑ ↓  j k", "move the selection"),
        ("PgUp PgDn", &format!("move by {PAGE} rows")),
        ("Home End  g G", "first, last route"),
        ("/", "filter routes by name (Enter keeps, Esc clears)"),
        ("Esc", "clear the filter"),
        ("s", "sort by severity (disagreement, worst heart) or name"),
        ("n", "attach to another node's feed"),
        ("c", "each node's ACME certificates, side by side"),
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

/// Each node's state of each ACME certificate: a row per certificate, a
/// column per member (as many as fit), then the errors of the failing.
pub(super) fn certificates(frame: &mut Frame, area: Rect, app: &App) {
    let Some(view) = app.view() else {
        return;
    };
    let rows = crate::certificates::rows(view);
    const CELL: usize = 18;
    let name_width = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp("certificate".len(), 32);
    let fit_columns =
        usize::from(area.width.saturating_sub(4)).saturating_sub(name_width + 2) / (CELL + 1);
    let shown = view.members.len().min(fit_columns.max(1));
    let mut lines = Vec::new();
    let mut header = vec![Span::styled(
        format!("  {:<name_width$}", "certificate"),
        theme::header(),
    )];
    for member in view.members.iter().take(shown) {
        header.push(Span::styled(
            format!(" {:<CELL$}", super::fit_tail(&member.name, CELL)),
            theme::header(),
        ));
    }
    lines.push(Line::from(header));
    if rows.is_empty() {
        lines.push(Line::styled(
            "  no node obtains certificates from ACME",
            theme::muted(),
        ));
    }
    let mut errors = Vec::new();
    for row in &rows {
        let mark = if row.disagree || !row.failing.is_empty() {
            Span::styled(format!("{} ", theme::DISAGREEMENT), theme::disagreement())
        } else {
            Span::raw("  ")
        };
        let mut spans = vec![
            mark,
            Span::raw(format!("{:<name_width$}", super::fit(row.name, name_width))),
        ];
        for (member, state) in view.members.iter().zip(&row.cells).take(shown) {
            let text = crate::certificates::cell(*state);
            let style = match state.map(|s| s.phase) {
                Some(picket_proto::AcmePhase::Failing) => theme::failing(),
                Some(picket_proto::AcmePhase::Serving) => Style::new(),
                Some(_) => theme::connecting(),
                None => theme::no_verdict(),
            };
            let style = if member.liveness == picket_proto::Liveness::Dead {
                theme::dead()
            } else {
                style
            };
            spans.push(Span::styled(
                format!(" {:<CELL$}", super::fit(&text, CELL)),
                style,
            ));
            if let Some(error) = state.and_then(|s| s.error.as_deref()) {
                errors.push(format!("{} on {}: {error}", row.name, member.name));
            }
        }
        lines.push(Line::from(spans));
    }
    if shown < view.members.len() {
        lines.push(Line::styled(
            format!(
                "  … {} more nodes (a wider terminal shows them)",
                view.members.len() - shown
            ),
            theme::muted(),
        ));
    }
    for error in errors {
        lines.push(Line::styled(format!("  {error}"), theme::failing()));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled("c", theme::key()),
        Span::raw(" or "),
        Span::styled("Esc", theme::key()),
        Span::raw(" close"),
    ]));
    // As wide as the table and the errors, as the terminal allows; as high
    // as the lines once wrapped.
    let widest = lines.iter().map(Line::width).max().unwrap_or(0);
    let width = (widest + 2)
        .max(name_width + 4 + shown * (CELL + 1))
        .max(48)
        .min(usize::from(area.width));
    let inner_width = width.saturating_sub(2).max(1);
    let wrapped: usize = lines
        .iter()
        .map(|l| l.width().div_ceil(inner_width).max(1))
        .sum();
    let width = u16::try_from(width).unwrap_or(u16::MAX);
    let height = u16::try_from(wrapped + 2).unwrap_or(u16::MAX);
    let inner = popup(
        frame,
        area,
        width,
        height,
        "ACME certificates, node by node",
    );
    frame.render_widget(
        Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: false }),
        inner,
    );
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
