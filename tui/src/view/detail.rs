//! The selected route in detail: what each node says of it and why, the
//! images its replicas run, and its recent transitions.
//!
//! Nodes are listed worst first (live before dead, red before orange before
//! green, then by name), so a cut list still shows the trouble; the last
//! line then says how many more there are. Ages are on the attached node's
//! clock ([`App::node_now_unix_ms`]).
//!
//! ## Images
//! An image label can be long (`api:1.4@sha256:4c0f12ab9d2e`, and a route
//! with sidecars or a rollout under way has several), so images get lines
//! of their own below the nodes, one per image with its replica count,
//! rather than the end of a node's line, where they would be cut off.
//! Nodes see the same runtime, so their lists are usually the same and
//! shown once; when they differ, each list is shown under the nodes that
//! report it, the most common first. A label too long for the width keeps
//! its end, where the tag and digest that tell builds apart are.

use std::cmp::Reverse;

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::{age, fit, fit_tail};
use crate::app::{App, Matrix, Seen, Transition};
use crate::theme;
use picket_proto::{ClusterView, ImageCount, Verdict};

/// Node names longer than this are cut in the detail pane.
const MAX_NAME_WIDTH: usize = 16;

/// The columns before a node's reason, past its name: liveness, heart,
/// circuit marker, ready, circuit and since.
const BEFORE_REASON: usize = 33;

/// Lines each node takes: one, or two when a reason would not fit beside
/// the columns (at 80 columns, say) and goes on a line of its own.
fn lines_per_node(app: &App, row: usize, width: usize) -> usize {
    let matrix = app.matrix();
    let Some(view) = app.view() else {
        return 1;
    };
    let name_width = matrix.column_width().clamp(4, MAX_NAME_WIDTH);
    let longest = (0..matrix.columns().len())
        .filter_map(|col| matrix.verdict(view, row, col))
        .map(|v| v.reason.chars().count())
        .max()
        .unwrap_or(0);
    if name_width + 1 + BEFORE_REASON + longest > width {
        2
    } else {
        1
    }
}

/// The pane's height: what the matrix leaves when that is all the pane
/// needs, otherwise what it needs up to the larger of two fifths of
/// `available` and what the matrix leaves.
pub(super) fn height(app: &App, available: u16, width: u16, matrix_needs: u16) -> u16 {
    let Some(row) = app.selected_row() else {
        return 0;
    };
    let per_node = lines_per_node(app, row, usize::from(width));
    let route = &app.matrix().rows()[row].name;
    let transitions = app.history().len(route);
    let history = if transitions == 0 { 0 } else { 1 + transitions };
    let images = app.view().map_or(0, |view| {
        let order = node_order(app.matrix(), row);
        images_len(&image_groups(view, app.matrix(), row, &order))
    });
    let needed = 2 + per_node * app.matrix().columns().len() + images + history;
    let needed = u16::try_from(needed).unwrap_or(u16::MAX);
    if matrix_needs.saturating_add(needed) <= available {
        return available - matrix_needs;
    }
    let share = available
        .saturating_sub(matrix_needs)
        .max(available * 2 / 5)
        .max(6);
    needed.min(share).min(available)
}

pub(super) fn render(frame: &mut Frame, area: Rect, app: &App) {
    let (Some(view), Some(row)) = (app.view(), app.selected_row()) else {
        return;
    };
    if area.height == 0 {
        return;
    }
    let matrix = app.matrix();
    let route = &matrix.rows()[row];
    let mut title = vec![Span::styled(format!(" {} ", route.name), theme::title())];
    if route.disagree {
        title.push(Span::styled(
            format!("{} live nodes disagree ", theme::DISAGREEMENT),
            theme::disagreement(),
        ));
    }
    let block = Block::new().borders(Borders::TOP).title(Line::from(title));
    let inner = block.inner(area);
    frame.render_widget(block, area);

    let height = usize::from(inner.height);
    let transitions = app.history().len(&route.name);
    let history_lines = if transitions == 0 {
        0
    } else {
        (1 + transitions).min(3.max(height / 3)).min(height)
    };
    let rest = height - history_lines;
    // Images get what the node table leaves, and at least half the rest.
    let order = node_order(matrix, row);
    let groups = image_groups(view, matrix, row, &order);
    let per_node = lines_per_node(app, row, usize::from(inner.width));
    let image_lines = images_len(&groups).min(
        rest.saturating_sub(1 + per_node * order.len())
            .max(rest / 2),
    );
    let node_lines = rest - image_lines;

    let mut lines = node_table(app, view, matrix, row, &order, node_lines, per_node);
    lines.extend(images(&groups, usize::from(inner.width), image_lines));
    if history_lines > 0 {
        lines.push(Line::styled("history", theme::header()));
        let now = app.node_now_unix_ms();
        lines.extend(
            app.history()
                .of(&route.name)
                .take(history_lines - 1)
                .map(|t| transition(t, now)),
        );
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The columns of `row`, worst first.
fn node_order(matrix: &Matrix, row: usize) -> Vec<usize> {
    let columns = matrix.columns();
    let cells = matrix.cells(row);
    let mut nodes: Vec<usize> = (0..columns.len()).collect();
    nodes.sort_by_key(|&col| {
        (
            !columns[col].live(),
            cells[col].is_none(),
            Reverse(cells[col].map(|c| c.seen.heart)),
        )
    });
    nodes
}

/// A header and `per_node` lines per node of `nodes`, at most `room`
/// lines.
fn node_table(
    app: &App,
    view: &ClusterView,
    matrix: &Matrix,
    row: usize,
    nodes: &[usize],
    room: usize,
    per_node: usize,
) -> Vec<Line<'static>> {
    if room == 0 {
        return Vec::new();
    }
    let columns = matrix.columns();
    let cells = matrix.cells(row);
    let name_width = matrix.column_width().clamp(4, MAX_NAME_WIDTH);

    let header = if per_node == 1 {
        "      ready circuit   since      reason"
    } else {
        "      ready circuit   since"
    };
    let mut lines = vec![Line::styled(
        format!("{:<name_width$}{header}", "node"),
        theme::muted(),
    )];
    // The header, then the nodes; when not all fit, a line says how many
    // more there are.
    let shown = if per_node * nodes.len() < room {
        nodes.len()
    } else {
        room.saturating_sub(2) / per_node
    };
    let now = app.node_now_unix_ms();
    for &col in &nodes[..shown] {
        let column = &columns[col];
        let dim = if column.live() {
            Style::new()
        } else {
            theme::dead()
        };
        let mut spans = vec![
            Span::styled(
                format!("{:<name_width$} ", fit(&column.name, name_width)),
                dim,
            ),
            Span::styled(
                theme::liveness_symbol(column.liveness),
                theme::liveness_style(column.liveness),
            ),
            Span::raw(" "),
        ];
        match matrix.verdict(view, row, col) {
            Some(verdict) => {
                let mut said = verdict_spans(verdict, now, dim);
                if per_node == 1 {
                    spans.extend(said);
                    lines.push(Line::from(spans));
                } else {
                    // The reason and what follows it, on a line of their own.
                    let reason = said.split_off(REASON_SPAN);
                    spans.extend(said);
                    lines.push(Line::from(spans));
                    let mut below = vec![Span::raw("    ")];
                    below.extend(reason);
                    lines.push(Line::from(below));
                }
            }
            None => {
                spans.push(Span::styled(
                    format!("{}  no verdict", theme::NO_VERDICT),
                    theme::no_verdict(),
                ));
                lines.push(Line::from(spans));
                if per_node == 2 {
                    lines.push(Line::raw(""));
                }
            }
        }
    }
    let rest = &nodes[shown..];
    if !rest.is_empty() && room > 1 {
        let green = rest
            .iter()
            .filter(|&&col| cells[col].is_some_and(|c| c.seen.heart == picket_proto::Heart::Green))
            .count();
        lines.push(Line::styled(
            format!("{} {} more ({green} green)", theme::ELLIPSIS, rest.len()),
            theme::muted(),
        ));
    }
    lines
}

/// Where the reason starts among [`verdict_spans`].
const REASON_SPAN: usize = 5;

fn verdict_spans(verdict: &Verdict, now: u64, dim: Style) -> Vec<Span<'static>> {
    let mut spans = vec![
        Span::styled(
            theme::heart_symbol(verdict.heart),
            theme::heart_style(verdict.heart).patch(dim),
        ),
        Span::styled(
            theme::circuit_marker(verdict.circuit),
            theme::circuit_style(verdict.circuit).patch(dim),
        ),
        Span::styled(
            format!(" {:>5} ", format!("{}/{}", verdict.ready, verdict.total)),
            dim,
        ),
        Span::styled(
            format!("{:<9}", theme::circuit_word(verdict.circuit)),
            theme::circuit_style(verdict.circuit).patch(dim),
        ),
        Span::styled(
            format!(
                " {:<10} ",
                format!("{} ago", age(now.saturating_sub(verdict.since_unix_ms)))
            ),
            theme::muted(),
        ),
        Span::styled(verdict.reason.to_string(), dim),
    ];
    if let Some(stale) = verdict.runtime_stale_since_unix_ms {
        spans.push(Span::styled(
            format!("  runtime stale {}", age(now.saturating_sub(stale))),
            theme::warning(),
        ));
    }
    spans
}

/// Nodes that report the same images on a route, and those images.
struct ImageGroup<'v> {
    nodes: Vec<&'v str>,
    images: &'v [ImageCount],
}

/// The images of `row`, one group per distinct list, the most common
/// first (then in `nodes`' order); none when no node reports any image.
fn image_groups<'v>(
    view: &'v ClusterView,
    matrix: &'v Matrix,
    row: usize,
    nodes: &[usize],
) -> Vec<ImageGroup<'v>> {
    let mut groups: Vec<ImageGroup<'v>> = Vec::new();
    for &col in nodes {
        let Some(verdict) = matrix.verdict(view, row, col) else {
            continue;
        };
        let name = matrix.columns()[col].name.as_str();
        match groups.iter_mut().find(|g| *g.images == *verdict.images) {
            Some(group) => group.nodes.push(name),
            None => groups.push(ImageGroup {
                nodes: vec![name],
                images: &verdict.images,
            }),
        }
    }
    if groups.iter().all(|g| g.images.is_empty()) {
        return Vec::new();
    }
    groups.sort_by_key(|g| Reverse(g.nodes.len()));
    groups
}

/// The lines the images need: a title per group and a line per image.
fn images_len(groups: &[ImageGroup<'_>]) -> usize {
    groups.iter().map(|g| 1 + g.images.len().max(1)).sum()
}

/// `images` (or `images on n3` when nodes differ), then `  2× api:1.4@sha256:9b1d7e0c3a55`
/// per image, at most `room` lines, `width` wide.
fn images(groups: &[ImageGroup<'_>], width: usize, room: usize) -> Vec<Line<'static>> {
    // (line, whether it is an image)
    let mut lines: Vec<(Line<'static>, bool)> = Vec::new();
    for group in groups {
        let title = if groups.len() == 1 {
            "images".to_owned()
        } else {
            format!("images on {}", group.nodes.join(" "))
        };
        lines.push((
            Line::styled(fit(&title, width).into_owned(), theme::header()),
            false,
        ));
        if group.images.is_empty() {
            lines.push((Line::styled("  none reported", theme::muted()), false));
        }
        let count_width = group
            .images
            .iter()
            .map(|i| i.replicas.to_string().len())
            .max()
            .unwrap_or(1);
        for image in group.images {
            let count = format!("  {:>count_width$}× ", image.replicas);
            let label = fit_tail(&image.image, width.saturating_sub(count.chars().count()));
            lines.push((
                Line::from(vec![
                    Span::styled(count, theme::muted()),
                    Span::raw(label.into_owned()),
                ]),
                true,
            ));
        }
    }
    if lines.len() > room {
        let kept = room.saturating_sub(1);
        let hidden = lines[kept..].iter().filter(|(_, image)| *image).count();
        lines.truncate(kept);
        if room > 0 {
            lines.push((
                Line::styled(
                    format!("{} {hidden} more images", theme::ELLIPSIS),
                    theme::muted(),
                ),
                false,
            ));
        }
    }
    lines.into_iter().map(|(line, _)| line).collect()
}

/// `  4s ago  n3  ♥ → ♡○  green → red, circuit closed → open`
fn transition(t: &Transition, now: u64) -> Line<'static> {
    let look = |seen: Seen| {
        [
            Span::styled(
                theme::heart_symbol(seen.heart),
                theme::heart_style(seen.heart),
            ),
            Span::styled(
                theme::circuit_marker(seen.circuit),
                theme::circuit_style(seen.circuit),
            ),
        ]
    };
    let mut words = Vec::new();
    if t.from.heart != t.to.heart {
        words.push(format!(
            "{} → {}",
            theme::heart_word(t.from.heart),
            theme::heart_word(t.to.heart)
        ));
    }
    if t.from.circuit != t.to.circuit {
        words.push(format!(
            "circuit {} → {}",
            theme::circuit_word(t.from.circuit),
            theme::circuit_word(t.to.circuit)
        ));
    }
    let mut spans = vec![
        Span::styled(
            format!(
                "{:>10}  ",
                format!("{} ago", age(now.saturating_sub(t.at_unix_ms)))
            ),
            theme::muted(),
        ),
        Span::raw(format!("{}  ", t.node)),
    ];
    spans.extend(look(t.from));
    spans.push(Span::raw("→ "));
    spans.extend(look(t.to));
    spans.push(Span::raw(format!(" {}", words.join(", "))));
    Line::from(spans)
}
