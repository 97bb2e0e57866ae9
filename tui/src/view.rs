//! Drawing the matrix: routes as rows, nodes as columns.

use ratatui::Frame;
use ratatui::layout::Constraint;
use ratatui::widgets::{Block, Borders, Cell, Row as TableRow, Table};

use crate::app::App;
use crate::theme;

pub fn render(frame: &mut Frame, app: &App) {
    let header = TableRow::new(
        ["", "route"]
            .into_iter()
            .map(Cell::from)
            .chain(app.nodes.iter().map(|n| Cell::from(n.as_str()))),
    )
    .style(theme::header());
    let rows = app.rows.iter().enumerate().map(|(i, row)| {
        let mark = if row.disagreement() {
            Cell::from(theme::DISAGREEMENT).style(theme::disagreement())
        } else {
            Cell::from(" ")
        };
        let cells = row.cells.iter().map(|cell| match cell {
            Some(verdict) => {
                let (symbol, style) = theme::heart(verdict.heart);
                Cell::from(symbol).style(style)
            }
            None => Cell::from(theme::NO_VERDICT),
        });
        let line = TableRow::new(
            [mark, Cell::from(row.route.as_str())]
                .into_iter()
                .chain(cells),
        );
        if i == app.selected {
            line.style(theme::selected())
        } else {
            line
        }
    });
    let widths = [Constraint::Length(1), Constraint::Length(20)]
        .into_iter()
        .chain(
            app.nodes
                .iter()
                .map(|n| Constraint::Length(n.chars().count().max(3) as u16)),
        );
    let title = format!(
        " {} routes × {} nodes — q quits ",
        app.rows.len(),
        app.nodes.len()
    );
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::default().borders(Borders::ALL).title(title));
    frame.render_widget(table, frame.area());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Msg;
    use picket_proto::{Circuit, Heart, NodeView, Verdict};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::style::Color;

    fn verdict(route: &str, heart: Heart) -> Verdict {
        Verdict {
            route: route.into(),
            heart,
            reason: String::new(),
            ready: 1,
            total: 1,
            images: vec![],
            circuit: Circuit::Closed,
            since_unix_ms: 0,
            runtime_stale_since_unix_ms: None,
        }
    }

    #[test]
    fn renders_hearts_and_marks_disagreement() {
        let mut app = App::default();
        app.update(Msg::View(vec![
            NodeView {
                node: "n1".into(),
                verdicts: vec![verdict("api", Heart::Green)],
            },
            NodeView {
                node: "n2".into(),
                verdicts: vec![verdict("api", Heart::Red)],
            },
        ]));
        let mut terminal = Terminal::new(TestBackend::new(40, 5)).unwrap();
        terminal.draw(|f| render(f, &app)).unwrap();
        let buffer = terminal.backend().buffer();
        let lines: Vec<String> = (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect()
            })
            .collect();
        assert!(
            lines[1].contains("route") && lines[1].contains("n1") && lines[1].contains("n2"),
            "{lines:#?}"
        );
        assert!(lines[2].starts_with("│! api"), "{lines:#?}");
        let x_of = |needle: &str| {
            lines[2]
                .chars()
                .position(|c| c.to_string() == needle)
                .unwrap() as u16
        };
        assert_eq!(buffer[(x_of(theme::HEART), 2)].fg, Color::Green);
        assert_eq!(buffer[(x_of(theme::BROKEN_HEART), 2)].fg, Color::Red);
    }
}
