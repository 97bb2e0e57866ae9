//! The recent transitions of each route, kept as views arrive.
//!
//! When a member's heart or circuit on a route differs between two
//! consecutive views, a [`Transition`] is recorded at the new view's time.
//! A route keeps its last [`PER_ROUTE`] transitions; a route gone from the
//! view is forgotten, so memory is bounded by the routes in the view.
//!
//! Only views taken by the same node are compared: after the TUI switches to
//! another node's feed, the first view is a new baseline (two nodes' views
//! differ by gossip lag, which is not a transition).

use std::collections::{HashMap, VecDeque};

use super::matrix::{Matrix, Seen};

/// How many transitions a route keeps.
pub const PER_ROUTE: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The time of the view that showed the change.
    pub at_unix_ms: u64,
    pub node: String,
    pub from: Seen,
    pub to: Seen,
}

#[derive(Debug, Clone, Default)]
pub struct History {
    routes: HashMap<String, VecDeque<Transition>>,
}

impl History {
    /// Records what changed from `old` to `new`, and forgets the routes
    /// `new` no longer has.
    pub fn record(&mut self, old: &Matrix, new: &Matrix, at_unix_ms: u64) {
        self.routes.retain(|route, _| new.find(route).is_some());
        if old.rows().is_empty() {
            return;
        }
        // Where each new column and row was in the old matrix: mostly
        // where it is now.
        let was: Vec<Option<usize>> = new
            .columns()
            .iter()
            .enumerate()
            .map(|(col, c)| match old.columns().get(col) {
                Some(o) if o.name == c.name => Some(col),
                _ => old.find_column(&c.name),
            })
            .collect();
        let same_columns = old.columns().len() == was.len()
            && was.iter().enumerate().all(|(col, w)| *w == Some(col));
        for (row, route) in new.rows().iter().enumerate() {
            let old_row = match old.rows().get(row) {
                Some(o) if o.name == route.name => Some(row),
                _ => old.find(&route.name),
            };
            let Some(old_row) = old_row else {
                continue;
            };
            let before = old.cells(old_row);
            if same_columns && before == new.cells(row) {
                continue;
            }
            for (col, cell) in new.cells(row).iter().enumerate() {
                let (Some(cell), Some(old_col)) = (cell, was[col]) else {
                    continue;
                };
                let Some(Some(prior)) = before.get(old_col) else {
                    continue;
                };
                if prior.seen != cell.seen {
                    self.push(
                        &route.name,
                        Transition {
                            at_unix_ms,
                            node: new.columns()[col].name.clone(),
                            from: prior.seen,
                            to: cell.seen,
                        },
                    );
                }
            }
        }
    }

    fn push(&mut self, route: &str, transition: Transition) {
        let kept = self.routes.entry(route.to_owned()).or_default();
        if kept.len() == PER_ROUTE {
            kept.pop_front();
        }
        kept.push_back(transition);
    }

    /// A route's transitions, newest first.
    pub fn of(&self, route: &str) -> impl Iterator<Item = &Transition> {
        self.routes
            .get(route)
            .into_iter()
            .flat_map(|t| t.iter().rev())
    }

    pub fn len(&self, route: &str) -> usize {
        self.routes.get(route).map_or(0, VecDeque::len)
    }
}
