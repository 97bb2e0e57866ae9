//! The matrix: a route per row, a node per column, a heart per cell.
//!
//! ## Columns or counts
//! Each node gets a column as wide as its name (4 to 10 characters) when
//! every column fits beside a route column of at least 12 characters.
//! Otherwise the nodes collapse into one column that reads, per route, how
//! many live nodes give each heart and which ones are not green (red first),
//! cut with `…` to fit: `47♥ 2♥ 1♡: n7 n9 n3`; the header says how many
//! nodes are collapsed and how many are alive, suspect and dead.
//!
//! A node that serves another route table than the cluster's has its name
//! in the disagreement colour; the status line says how many there are.
//!
//! ## Rows
//! `≠` marks a row whose live nodes disagree. Only the rows on screen are
//! drawn; the selection stays in the middle of the screen when it can.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::{compact_age, fit, fit_tail};
use crate::app::{App, Matrix, RouteRow};
use crate::theme;
use picket_proto::{Heart, Liveness};

/// A route column is never cut shorter than this to keep node columns.
const MIN_ROUTE_WIDTH: usize = 12;
const MAX_ROUTE_WIDTH: usize = 32;
const MIN_COLUMN_WIDTH: usize = 4;
const MAX_COLUMN_WIDTH: usize = 10;

/// Two header lines and a row per route shown (at least one, for a
/// message).
pub(super) fn height_needed(app: &App) -> u16 {
    let rows = app.order().len().max(1);
    u16::try_from(rows + 2).unwrap_or(u16::MAX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    route_width: usize,
    /// The width of each node column, or `None` when collapsed.
    column_width: Option<usize>,
}

fn geometry(matrix: &Matrix, width: usize) -> Geometry {
    let nodes = matrix.columns().len();
    let route_width = matrix.route_width().clamp(5, MAX_ROUTE_WIDTH);
    let column_width = matrix
        .column_width()
        .clamp(MIN_COLUMN_WIDTH, MAX_COLUMN_WIDTH);
    // mark, space, route, then a space and a column per node.
    let room = width.saturating_sub(2 + nodes * (column_width + 1));
    if room >= route_width.min(MIN_ROUTE_WIDTH) {
        Geometry {
            route_width: route_width.min(room),
            column_width: Some(column_width),
        }
    } else {
        Geometry {
            route_width: route_width.min(width.saturating_sub(3) / 2),
            column_width: None,
        }
    }
}

/// The first row to draw so that `selected` is on screen, in the middle
/// when the rows allow.
fn offset(selected: usize, len: usize, visible: usize) -> usize {
    if len <= visible {
        0
    } else {
        selected.saturating_sub(visible / 2).min(len - visible)
    }
}

pub(super) fn render(buf: &mut Buffer, area: Rect, app: &App) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    if app.view().is_none() {
        buf.set_stringn(
            area.x,
            area.y,
            "waiting for the first cluster view…",
            usize::from(area.width),
            theme::muted(),
        );
        return;
    }
    let matrix = app.matrix();
    let geometry = geometry(matrix, usize::from(area.width));
    header(buf, area, app, geometry);

    let body = Rect {
        y: area.y.saturating_add(2),
        height: area.height.saturating_sub(2),
        ..area
    };
    if body.height == 0 {
        return;
    }
    if app.order().is_empty() {
        let message = if matrix.rows().is_empty() {
            "no routes".to_owned()
        } else {
            format!("no route matches “{}”", app.filter())
        };
        buf.set_stringn(
            body.x + 2,
            body.y,
            message,
            usize::from(body.width.saturating_sub(2)),
            theme::muted(),
        );
        return;
    }
    let visible = usize::from(body.height);
    let first = offset(app.selected(), app.order().len(), visible);
    for (i, &row) in app.order().iter().enumerate().skip(first).take(visible) {
        let line = Rect {
            y: body.y + u16::try_from(i - first).unwrap_or(0),
            height: 1,
            ..body
        };
        draw_row(buf, line, matrix, row, geometry);
        if i == app.selected() {
            buf.set_style(line, theme::selected());
        }
    }
}

fn header(buf: &mut Buffer, area: Rect, app: &App, geometry: Geometry) {
    let matrix = app.matrix();
    let (top, bottom) = (area.y, area.y + 1);
    let x = area.x + 2;
    buf.set_stringn(x, top, "route", geometry.route_width, theme::header());
    if area.height > 1 {
        // How many routes are shown: `all 3`, or `2 of 12` under a filter
        // (`2/12` when that does not fit); never read as replicas.
        let (shown, total) = (app.order().len(), matrix.rows().len());
        let label = if shown == total {
            format!("all {total}")
        } else {
            format!("{shown} of {total}")
        };
        let label = if label.chars().count() <= geometry.route_width {
            label
        } else {
            format!("{shown}/{total}")
        };
        buf.set_stringn(x, bottom, label, geometry.route_width, theme::muted());
    }
    let mut x = nodes_x(area, geometry);
    let right = usize::from(area.right());
    match geometry.column_width {
        Some(width) => {
            for column in matrix.columns() {
                if usize::from(x) >= right {
                    break;
                }
                // A node on another route table than the cluster's is
                // marked as a disagreement is.
                let style = if column.other_table {
                    theme::disagreement()
                } else {
                    theme::header()
                };
                buf.set_stringn(x, top, fit_tail(&column.name, width), width, style);
                if area.height > 1 {
                    let (after, _) = buf.set_stringn(
                        x,
                        bottom,
                        theme::liveness_symbol(column.liveness),
                        width,
                        theme::liveness_style(column.liveness),
                    );
                    let age = compact_age(column.age_ms);
                    buf.set_stringn(after, bottom, age, width - 1, theme::muted());
                }
                x = x.saturating_add(u16::try_from(width + 1).unwrap_or(u16::MAX));
            }
        }
        None => {
            let width = right.saturating_sub(usize::from(x));
            let title = format!("{} nodes collapsed", matrix.columns().len());
            buf.set_stringn(x, top, title, width, theme::header());
            if area.height > 1 {
                let count = |liveness: Liveness| {
                    matrix
                        .columns()
                        .iter()
                        .filter(|c| c.liveness == liveness)
                        .count()
                };
                let spans = [Liveness::Alive, Liveness::Suspect, Liveness::Dead]
                    .into_iter()
                    .map(|liveness| (liveness, count(liveness)))
                    .filter(|&(_, n)| n > 0)
                    .enumerate()
                    .flat_map(|(i, (liveness, n))| {
                        [
                            Span::raw(if i == 0 { "" } else { " " }),
                            Span::styled(
                                format!("{n}{}", theme::liveness_symbol(liveness)),
                                theme::liveness_style(liveness),
                            ),
                        ]
                    });
                let line = Line::from_iter(spans);
                buf.set_line(x, bottom, &line, u16::try_from(width).unwrap_or(u16::MAX));
            }
        }
    }
}

/// Where the first node column (or the collapsed one) starts.
fn nodes_x(area: Rect, geometry: Geometry) -> u16 {
    let offset = u16::try_from(geometry.route_width + 3).unwrap_or(u16::MAX);
    area.x.saturating_add(offset)
}

fn draw_row(buf: &mut Buffer, line: Rect, matrix: &Matrix, row: usize, geometry: Geometry) {
    let route = &matrix.rows()[row];
    if route.disagree {
        buf.set_string(line.x, line.y, theme::DISAGREEMENT, theme::disagreement());
    }
    buf.set_stringn(
        line.x + 2,
        line.y,
        fit(&route.name, geometry.route_width),
        geometry.route_width,
        Style::new(),
    );
    let x = nodes_x(line, geometry);
    let right = line.right();
    let Some(width) = geometry.column_width else {
        let width = usize::from(right.saturating_sub(x));
        let summary = summary(matrix, row, route, width);
        buf.set_line(
            x,
            line.y,
            &summary,
            u16::try_from(width).unwrap_or(u16::MAX),
        );
        return;
    };
    let step = u16::try_from(width + 1).unwrap_or(u16::MAX);
    let mut x = x;
    for (column, cell) in matrix.columns().iter().zip(matrix.cells(row)) {
        if x >= right {
            break;
        }
        let dim = if column.live() {
            Style::new()
        } else {
            theme::dead()
        };
        match cell {
            Some(cell) => {
                let (symbol, style) = theme::cell_heart(cell.seen.heart, cell.seen.stale);
                buf.set_string(x, line.y, symbol, style.patch(dim));
                if x + 1 < right {
                    let circuit = cell.seen.circuit;
                    let style = theme::circuit_style(circuit).patch(dim);
                    buf.set_string(x + 1, line.y, theme::circuit_marker(circuit), style);
                }
            }
            None => buf.set_string(x, line.y, theme::NO_VERDICT, theme::no_verdict()),
        }
        x = x.saturating_add(step);
    }
}

/// A collapsed row: `47♥ 2♥ 1♡ 1·: n7 n9 n3`, at most `width` wide.
fn summary(matrix: &Matrix, row: usize, route: &RouteRow, width: usize) -> Line<'static> {
    let counts = route.counts;
    let mut spans = Vec::new();
    let mut used = 0;
    let parts = [
        (
            counts.green,
            theme::heart_symbol(Heart::Green),
            theme::heart_style(Heart::Green),
        ),
        (
            counts.orange,
            theme::heart_symbol(Heart::Orange),
            theme::heart_style(Heart::Orange),
        ),
        (
            counts.red,
            theme::heart_symbol(Heart::Red),
            theme::heart_style(Heart::Red),
        ),
        (counts.missing, theme::NO_VERDICT, theme::no_verdict()),
    ];
    for (n, symbol, style) in parts.into_iter().filter(|&(n, ..)| n > 0) {
        let text = if spans.is_empty() {
            format!("{n}{symbol}")
        } else {
            format!(" {n}{symbol}")
        };
        used += text.chars().count();
        spans.push(Span::styled(text, style));
    }

    // The live nodes that are not green, red first, in column order.
    let mut names: Vec<(&str, Heart)> = Vec::new();
    for heart in [Heart::Red, Heart::Orange] {
        for (column, cell) in matrix.columns().iter().zip(matrix.cells(row)) {
            if column.live() && cell.is_some_and(|c| c.seen.heart == heart) {
                names.push((&column.name, heart));
            }
        }
    }
    if names.is_empty() {
        return Line::from(spans);
    }
    spans.push(Span::raw(":"));
    used += 1;
    for (i, &(name, heart)) in names.iter().enumerate() {
        let need = 1 + name.chars().count();
        // Leave room for ` …` unless this is the last name.
        let reserve = if i + 1 == names.len() { 0 } else { 2 };
        if used + need + reserve <= width {
            spans.push(Span::styled(format!(" {name}"), theme::heart_style(heart)));
            used += need;
        } else {
            spans.push(Span::styled(
                format!(" {}", theme::ELLIPSIS),
                theme::muted(),
            ));
            break;
        }
    }
    Line::from(spans)
}
