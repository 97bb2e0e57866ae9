//! The TUI's state and its pure update function.

use std::collections::BTreeSet;

use picket_proto::{Heart, NodeView, Verdict};

/// Everything the TUI reacts to, from one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    Up,
    Down,
    Quit,
    /// A new cluster view: one view per node.
    View(Vec<NodeView>),
}

/// One route across every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub route: String,
    /// One cell per node, in the order of [`App::nodes`]; `None` when that
    /// node has no verdict on the route.
    pub cells: Vec<Option<Verdict>>,
}

impl Row {
    /// True when nodes that have a verdict give it different hearts.
    pub fn disagreement(&self) -> bool {
        let hearts: BTreeSet<Heart> = self.cells.iter().flatten().map(|v| v.heart).collect();
        hearts.len() > 1
    }
}

#[derive(Debug, Default)]
pub struct App {
    pub nodes: Vec<String>,
    pub rows: Vec<Row>,
    pub selected: usize,
    pub quit: bool,
}

impl App {
    pub fn update(&mut self, msg: Msg) {
        match msg {
            Msg::Up => self.selected = self.selected.saturating_sub(1),
            Msg::Down => {
                if self.selected + 1 < self.rows.len() {
                    self.selected += 1;
                }
            }
            Msg::Quit => self.quit = true,
            Msg::View(views) => self.set_view(views),
        }
    }

    fn set_view(&mut self, mut views: Vec<NodeView>) {
        views.sort_by(|a, b| a.node.cmp(&b.node));
        let routes: BTreeSet<&str> = views
            .iter()
            .flat_map(|v| v.verdicts.iter().map(|d| d.route.as_str()))
            .collect();
        self.rows = routes
            .into_iter()
            .map(|route| Row {
                route: route.to_string(),
                cells: views
                    .iter()
                    .map(|v| v.verdicts.iter().find(|d| d.route == route).cloned())
                    .collect(),
            })
            .collect();
        self.nodes = views.into_iter().map(|v| v.node).collect();
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::Circuit;

    pub(crate) fn verdict(route: &str, heart: Heart) -> Verdict {
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
    fn rows_are_routes_and_columns_nodes() {
        let mut app = App::default();
        app.update(Msg::View(vec![
            NodeView {
                node: "n2".into(),
                verdicts: vec![verdict("api", Heart::Red)],
            },
            NodeView {
                node: "n1".into(),
                verdicts: vec![verdict("web", Heart::Green), verdict("api", Heart::Green)],
            },
        ]));
        assert_eq!(app.nodes, ["n1", "n2"]);
        assert_eq!(app.rows.len(), 2);
        assert_eq!(app.rows[0].route, "api");
        assert!(app.rows[0].disagreement());
        assert!(!app.rows[1].disagreement());
        assert!(app.rows[1].cells[1].is_none());
        app.update(Msg::Down);
        app.update(Msg::Down);
        assert_eq!(app.selected, 1);
        app.update(Msg::Up);
        assert_eq!(app.selected, 0);
        app.update(Msg::Quit);
        assert!(app.quit);
    }
}
