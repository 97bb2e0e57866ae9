//! The cluster view as a matrix of routes × nodes, computed once per view.
//!
//! Rows are every route any member has a verdict on, sorted by name; columns
//! are the members in the view's order (by name). A cell holds what one
//! member says of one route, and where its verdict sits in the view, so the
//! detail pane reads the full verdict without searching. Rendering reads
//! this and never walks the view's verdicts.
//!
//! ## Disagreement
//! A route's live nodes disagree when the hearts of its Alive and Suspect
//! members differ. Dead members' verdicts are what they last said and do not
//! count, nor do members without a verdict on the route.
//!
//! ## Severity
//! Sorting by severity puts disagreement first, then the worst heart among
//! live members, then the route name. A route no live member judges sorts
//! after every judged one.

use std::cmp::{Ordering, Reverse};

use picket_proto::{BreakerState, ClusterView, Heart, Liveness, Member, Verdict};

/// Every route any member judges, sorted, once each.
///
/// Members list their verdicts by route, and mostly the same routes: a
/// member whose routes are those already collected costs one comparison
/// per route, and only one that differs is sorted and merged in.
fn route_names(members: &[Member]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for member in members {
        let same = member.verdicts.len() == names.len()
            && member
                .verdicts
                .iter()
                .zip(&names)
                .all(|(v, n)| *v.route == **n);
        if same {
            continue;
        }
        let mut theirs: Vec<&str> = member.verdicts.iter().map(|v| &*v.route).collect();
        theirs.sort_unstable();
        theirs.dedup();
        names = merge(&names, &theirs);
    }
    names
}

/// The union of two sorted lists without repeats, sorted.
fn merge<'v>(a: &[&'v str], b: &[&'v str]) -> Vec<&'v str> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        match x.cmp(y) {
            Ordering::Less => {
                out.push(x);
                i += 1;
            }
            Ordering::Greater => {
                out.push(y);
                j += 1;
            }
            Ordering::Equal => {
                out.push(x);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// What one node shows of one route: the things history tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub heart: Heart,
    pub circuit: BreakerState,
    /// The node's runtime has gone silent: the heart is its last pass,
    /// drawn as stale, never as current.
    pub stale: bool,
}

/// One member's verdict on one route, by reference into the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub seen: Seen,
    /// Its index in the member's `verdicts`.
    verdict: u32,
}

/// A member as a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub liveness: Liveness,
    /// How old its data is: the view's time minus when its heartbeat last
    /// advanced.
    pub age_ms: u64,
    /// It serves another route table than the cluster's ([`tables`]).
    pub other_table: bool,
}

/// A route table and the live members that serve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The digest's first 4 hex characters: what the TUI shows.
    pub tag: String,
    pub routes: u32,
    pub nodes: Vec<String>,
}

/// The route tables live members serve, the cluster's first: the one most
/// of them serve; of two served by as many, the one installed last (a
/// change on its way through the cluster), then by digest. Dead members
/// and members that have not said are left out. The status API decides
/// alike.
pub fn tables(members: &[Member]) -> Vec<Served> {
    let mut served: Vec<(&str, Served, u64)> = Vec::new();
    for member in members {
        let Some(table) = member
            .table
            .as_ref()
            .filter(|_| member.liveness != Liveness::Dead)
        else {
            continue;
        };
        match served.iter_mut().find(|(d, _, _)| *d == table.digest) {
            Some((_, s, since)) => {
                s.nodes.push(member.name.clone());
                *since = (*since).max(table.since_unix_ms);
            }
            None => served.push((
                &table.digest,
                Served {
                    tag: table.digest.chars().take(4).collect(),
                    routes: table.routes,
                    nodes: vec![member.name.clone()],
                },
                table.since_unix_ms,
            )),
        }
    }
    served.sort_by(|(a_digest, a, a_since), (b_digest, b, b_since)| {
        (b.nodes.len(), b_since, a_digest).cmp(&(a.nodes.len(), a_since, b_digest))
    });
    served.into_iter().map(|(_, s, _)| s).collect()
}

impl Column {
    /// Alive and Suspect members count; Dead ones do not.
    pub fn live(&self) -> bool {
        self.liveness != Liveness::Dead
    }
}

/// How many live members give each heart on a route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub green: usize,
    pub orange: usize,
    pub red: usize,
    /// Live members without a verdict on the route.
    pub missing: usize,
}

impl Counts {
    fn add(&mut self, heart: Option<Heart>) {
        match heart {
            Some(Heart::Green) => self.green += 1,
            Some(Heart::Orange) => self.orange += 1,
            Some(Heart::Red) => self.red += 1,
            None => self.missing += 1,
        }
    }

    fn worst(&self) -> Option<Heart> {
        if self.red > 0 {
            Some(Heart::Red)
        } else if self.orange > 0 {
            Some(Heart::Orange)
        } else if self.green > 0 {
            Some(Heart::Green)
        } else {
            None
        }
    }

    fn disagree(&self) -> bool {
        [self.green, self.orange, self.red]
            .iter()
            .filter(|&&n| n > 0)
            .count()
            > 1
    }
}

/// One route as a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRow {
    pub name: String,
    /// The name in lower case, for the filter.
    folded: String,
    pub counts: Counts,
    pub disagree: bool,
    /// The worst heart among live members.
    pub worst: Option<Heart>,
}

/// How the rows are ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sort {
    /// Disagreement first, then the worst heart, then the name.
    #[default]
    Severity,
    Name,
}

impl Sort {
    pub fn toggled(self) -> Sort {
        match self {
            Sort::Severity => Sort::Name,
            Sort::Name => Sort::Severity,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Sort::Severity => "severity",
            Sort::Name => "name",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matrix {
    columns: Vec<Column>,
    rows: Vec<RouteRow>,
    /// Row-major: `rows.len() × columns.len()`.
    cells: Vec<Option<Cell>>,
    /// The longest route name and member name, in characters.
    route_width: usize,
    column_width: usize,
    disagreements: usize,
    /// The route tables served, the cluster's first ([`tables`]).
    tables: Vec<Served>,
}

impl Matrix {
    pub fn new(view: &ClusterView) -> Matrix {
        let names = route_names(&view.members);
        let width = view.members.len();
        let mut cells = vec![None; names.len() * width];
        for (col, member) in view.members.iter().enumerate() {
            let mut row = 0;
            for (i, verdict) in member.verdicts.iter().enumerate() {
                // Verdicts come by route, so the next row is the likely one.
                if names.get(row) != Some(&&*verdict.route) {
                    match names.binary_search(&&*verdict.route) {
                        Ok(found) => row = found,
                        Err(_) => continue,
                    }
                }
                cells[row * width + col] = Some(Cell {
                    seen: Seen {
                        heart: verdict.heart,
                        circuit: verdict.circuit,
                        stale: verdict.runtime_stale_since_unix_ms.is_some(),
                    },
                    verdict: u32::try_from(i).unwrap_or(u32::MAX),
                });
                row += 1;
            }
        }

        let tables = tables(&view.members);
        let columns: Vec<Column> = view
            .members
            .iter()
            .map(|m| Column {
                name: m.name.clone(),
                liveness: m.liveness,
                age_ms: view.taken_unix_ms.saturating_sub(m.heard_unix_ms),
                other_table: tables.iter().skip(1).any(|t| t.nodes.contains(&m.name)),
            })
            .collect();
        let rows: Vec<RouteRow> = names
            .iter()
            .enumerate()
            .map(|(row, name)| {
                let mut counts = Counts::default();
                for (col, cell) in cells[row * width..(row + 1) * width].iter().enumerate() {
                    if columns[col].live() {
                        counts.add(cell.map(|c| c.seen.heart));
                    }
                }
                RouteRow {
                    name: (*name).to_owned(),
                    folded: name.to_lowercase(),
                    counts,
                    disagree: counts.disagree(),
                    worst: counts.worst(),
                }
            })
            .collect();
        Matrix {
            route_width: rows
                .iter()
                .map(|r| r.name.chars().count())
                .max()
                .unwrap_or(0),
            column_width: columns
                .iter()
                .map(|c| c.name.chars().count())
                .max()
                .unwrap_or(0),
            disagreements: rows.iter().filter(|r| r.disagree).count(),
            tables,
            columns,
            rows,
            cells,
        }
    }

    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    pub fn rows(&self) -> &[RouteRow] {
        &self.rows
    }

    /// Every member's cell on one route, in column order.
    pub fn cells(&self, row: usize) -> &[Option<Cell>] {
        let width = self.columns.len();
        self.cells
            .get(row * width..(row + 1) * width)
            .unwrap_or_default()
    }

    /// The full verdict behind a cell.
    pub fn verdict<'v>(
        &self,
        view: &'v ClusterView,
        row: usize,
        col: usize,
    ) -> Option<&'v Verdict> {
        let cell = (*self.cells(row).get(col)?)?;
        view.members
            .get(col)?
            .verdicts
            .get(usize::try_from(cell.verdict).ok()?)
    }

    pub fn find(&self, route: &str) -> Option<usize> {
        self.rows
            .binary_search_by(|r| r.name.as_str().cmp(route))
            .ok()
    }

    pub fn find_column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    pub fn route_width(&self) -> usize {
        self.route_width
    }

    pub fn column_width(&self) -> usize {
        self.column_width
    }

    pub fn disagreements(&self) -> usize {
        self.disagreements
    }

    /// The route tables served, the cluster's first.
    pub fn tables(&self) -> &[Served] {
        &self.tables
    }

    /// The rows to show, as indexes into [`Matrix::rows`]: those whose name
    /// contains `filter` (ignoring case), in `sort` order.
    pub fn order(&self, filter: &str, sort: Sort) -> Vec<usize> {
        let filter = filter.to_lowercase();
        let mut order: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].folded.contains(&filter))
            .collect();
        if sort == Sort::Severity {
            // Rows are already in name order, and the sort is stable.
            order.sort_by_key(|&i| {
                let row = &self.rows[i];
                (Reverse(row.disagree), Reverse(row.worst))
            });
        }
        order
    }
}
