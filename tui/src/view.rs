//! Drawing the App: a status line, the matrix of routes × nodes, the
//! selected route's detail, a footer of keys, and the help or node picker
//! over them.
//!
//! [`render`] reads the [`App`] and draws; it changes nothing and reads no
//! clock. It walks only the rows that fit on screen: everything per view
//! (counts, disagreement, order) was computed by the App when the view
//! arrived.
//!
//! ## Layout
//! The matrix takes the rows it needs (two header lines and a line per
//! route shown) when the detail pane still gets all it needs (a title, a
//! header, a line per node, the images, the history), and the pane the
//! rest. Otherwise the pane gets what it needs up to two fifths of the
//! height (or what the matrix leaves, if more), and the matrix scrolls,
//! keeping the selection in the middle when it can. PageUp and PageDown
//! move by [`crate::app::PAGE`] rows: the App does not know the terminal's
//! height.

mod detail;
mod grid;
mod overlay;

use std::borrow::Cow;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::{App, Link, Mode};
use crate::theme;

pub fn render(frame: &mut Frame, app: &App) {
    let [status, middle, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    render_status(frame, status, app);

    let detail_height = detail::height(app, middle.height, middle.width, grid::height_needed(app));
    let [matrix, detail] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(detail_height)]).areas(middle);
    grid::render(frame.buffer_mut(), matrix, app);
    detail::render(frame, detail, app);
    render_footer(frame, footer, app);

    match app.mode() {
        Mode::Help => overlay::help(frame, frame.area()),
        Mode::Picker { selected } => overlay::picker(frame, frame.area(), app, selected),
        Mode::Certificates => overlay::certificates(frame, frame.area(), app),
        Mode::Normal | Mode::Filter => {}
    }
}

/// Which node, over which link, and how fresh the data is. Laid out for
/// 80 columns: when the whole line does not fit, the disagreement loses
/// words first, then the node's address goes, then the counts' words.
/// When even that does not fit (a stale link's error), the full line is
/// cut at the edge: its start says what matters.
fn render_status(frame: &mut Frame, area: Rect, app: &App) {
    let width = usize::from(area.width);
    let line = (0..=3)
        .map(|terse| status_line(app, terse))
        .find(|line| line.width() <= width)
        .unwrap_or_else(|| status_line(app, 0));
    frame.render_widget(Paragraph::new(line), area);
}

/// The status line, `terse` from 0 (everything) to 3 (the fewest words).
fn status_line(app: &App, terse: u8) -> Line<'static> {
    let mut spans = vec![Span::styled("picket", theme::title())];
    if let Some(view) = app.view() {
        spans.push(Span::raw(format!(" {} ", view.cluster)));
    }
    let node = app.view().map(|v| v.node.clone());
    match (app.link(), node) {
        (Some(_), Some(node)) if terse > 1 => spans.push(Span::raw(format!(" {node}  "))),
        (Some(link), Some(node)) => spans.push(Span::raw(format!(" {node} @ {}  ", link.addr()))),
        (Some(link), None) => spans.push(Span::raw(format!(" {}  ", link.addr()))),
        (None, Some(node)) => spans.push(Span::raw(format!(" {node}  "))),
        (None, None) => spans.push(Span::raw("  ")),
    }
    match app.link() {
        None => spans.push(Span::styled("no feed yet", theme::connecting())),
        Some(Link::Connecting { addr }) => {
            spans.push(Span::styled(
                format!("connecting to {addr}…"),
                theme::connecting(),
            ));
        }
        Some(Link::Live { .. }) if app.view().is_none() => {
            spans.push(Span::styled(
                "live, waiting for a view",
                theme::connecting(),
            ));
        }
        Some(Link::Live { .. }) => spans.push(Span::styled("live", theme::live())),
        Some(Link::Stale {
            since_unix_ms,
            error,
            ..
        }) => {
            let age = compact_age(app.now_unix_ms().saturating_sub(*since_unix_ms));
            spans.push(Span::styled(
                format!("stale {age} — reconnecting"),
                theme::stale(),
            ));
            spans.push(Span::styled(" (n: another node)", theme::muted()));
            if !error.is_empty() {
                spans.push(Span::styled(format!(" {error}"), theme::muted()));
            }
        }
    }
    if app.view().is_some() {
        let matrix = app.matrix();
        let (routes, nodes) = (matrix.rows().len(), matrix.columns().len());
        let counts = if terse < 3 {
            format!("  {routes} routes × {nodes} nodes")
        } else {
            format!("  {routes}×{nodes}")
        };
        spans.push(Span::styled(counts, theme::muted()));
        let disagreements = match (matrix.disagreements(), terse) {
            (0, _) => None,
            (1, 0) => Some("1 route disagrees".to_owned()),
            (n, 0) => Some(format!("{n} routes disagree")),
            (1, _) => Some("1 disagrees".to_owned()),
            (n, _) => Some(format!("{n} disagree")),
        };
        if let Some(text) = disagreements {
            spans.push(Span::styled(
                format!("  {} {text}", theme::DISAGREEMENT),
                theme::disagreement(),
            ));
        }
        // Which route table the nodes serve: the cluster's, and how many
        // nodes serve another (their names are marked in the header).
        let tables = matrix.tables();
        let others: usize = tables.iter().skip(1).map(|t| t.nodes.len()).sum();
        match (tables.first(), others, terse) {
            (None, _, _) => {}
            (Some(table), 0, 0) => spans.push(Span::styled(
                format!("  table {}·{}", table.tag, table.routes),
                theme::muted(),
            )),
            (Some(_), 0, _) => {}
            (Some(table), n, 0) => spans.push(Span::styled(
                format!(
                    "  {} {n} {} on another table than {}·{}",
                    theme::DISAGREEMENT,
                    if n == 1 { "node" } else { "nodes" },
                    table.tag,
                    table.routes
                ),
                theme::disagreement(),
            )),
            (Some(_), n, 1) => spans.push(Span::styled(
                format!(
                    "  {} {n} {} on another table",
                    theme::DISAGREEMENT,
                    if n == 1 { "node" } else { "nodes" },
                ),
                theme::disagreement(),
            )),
            (Some(_), n, _) => spans.push(Span::styled(
                format!("  {} {n} table", theme::DISAGREEMENT),
                theme::disagreement(),
            )),
        }
        if let Some(view) = app.view() {
            spans.extend(certificates_status(view, terse));
        }
    }
    Line::from(spans)
}

/// The ACME certificates in a few words: how many, and the worst of them
/// (a live node failing, then live nodes on different serials); the
/// overlay (`c`) has them side by side.
fn certificates_status(view: &picket_proto::ClusterView, terse: u8) -> Option<Span<'static>> {
    let rows = crate::certificates::rows(view);
    if rows.is_empty() {
        return None;
    }
    if let Some(row) = rows.iter().find(|r| !r.failing.is_empty()) {
        let text = match terse {
            0 => format!("  ✗ {} failing on {}", row.name, row.failing.join(", ")),
            1 => format!("  ✗ {} failing", row.name),
            _ => "  ✗ cert".to_owned(),
        };
        return Some(Span::styled(text, theme::failing()));
    }
    if let Some(row) = rows.iter().find(|r| r.disagree) {
        let text = match terse {
            0 => format!("  {} {} on two serials", theme::DISAGREEMENT, row.name),
            _ => format!("  {} cert", theme::DISAGREEMENT),
        };
        return Some(Span::styled(text, theme::disagreement()));
    }
    (terse == 0).then(|| {
        let n = rows.len();
        Span::styled(
            format!(
                "  {n} {}",
                if n == 1 {
                    "certificate"
                } else {
                    "certificates"
                }
            ),
            theme::muted(),
        )
    })
}

fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
    let key = |k: &'static str| Span::styled(k, theme::key());
    let spans = if app.mode() == Mode::Filter {
        vec![
            key("/"),
            Span::raw(app.filter().to_owned()),
            Span::styled("█", theme::muted()),
            Span::raw("  "),
            key("Enter"),
            Span::raw(" keep  "),
            key("Esc"),
            Span::raw(" clear"),
        ]
    } else {
        let mut spans = vec![
            key("?"),
            Span::raw(" help  "),
            key("/"),
            Span::raw(" filter  "),
            key("s"),
            Span::raw(format!(" sort: {}  ", app.sort().word())),
            key("n"),
            Span::raw(" nodes  "),
            key("q"),
            Span::raw(" quit"),
        ];
        if !app.filter().is_empty() {
            spans.push(Span::raw("   filter: "));
            spans.push(Span::styled(app.filter().to_owned(), theme::title()));
            spans.push(Span::styled(" (Esc clears)", theme::muted()));
        }
        spans
    };
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// An age in its largest unit: `4s`, `12m`, `3h`, `2d`.
pub fn compact_age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// An age in its two largest units: `4s`, `3m12s`, `1h05m`, `2d03h`.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `text` cut to `width` characters, ending in `…` when cut.
fn fit(text: &str, width: usize) -> Cow<'_, str> {
    if text.chars().count() <= width {
        return Cow::Borrowed(text);
    }
    if width == 0 {
        return Cow::Borrowed("");
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push_str(theme::ELLIPSIS);
    Cow::Owned(cut)
}

/// `text` cut to its last `width` characters, starting with `…` when cut:
/// node names differ at their end more often than at their start.
fn fit_tail(text: &str, width: usize) -> Cow<'_, str> {
    let count = text.chars().count();
    if count <= width {
        return Cow::Borrowed(text);
    }
    if width == 0 {
        return Cow::Borrowed("");
    }
    let mut cut = String::from(theme::ELLIPSIS);
    cut.extend(text.chars().skip(count - (width - 1)));
    Cow::Owned(cut)
}

#[cfg(test)]
mod tests;
