//! The TUI's state and its pure update function.
//!
//! Keys, cluster views, the feed link's state and clock ticks arrive as one
//! [`Msg`]; [`App::update`] folds them into the state and does nothing
//! else: no I/O, and no clock (the time is what the last [`Msg::Tick`]
//! said). The only thing it asks of the world, switching to another node's
//! feed, is left for the main loop to take with [`App::take_switch`].
//!
//! ## Invariants
//! - The [`Matrix`] is rebuilt once per [`Msg::View`], and the shown rows'
//!   order once per view, filter or sort change; drawing a frame only reads
//!   them and walks the rows it shows.
//! - The selection follows its route across views and re-sorts.
//! - [`History`] is bounded: [`history::PER_ROUTE`] transitions per route in
//!   the view.
//!
//! ## Keys, by mode
//! | mode | keys |
//! |------|------|
//! | normal | `q` quit, `↑↓ j k PgUp PgDn Home End` move, `/` filter, `Esc` clear the filter, `s` sort, `?` help, `n` pick a node |
//! | filter | characters type (the rows follow as you type), `Backspace`, `Enter` keeps the filter, `Esc` clears it, `↑↓` move |
//! | help | `?` or `Esc` closes, `q` quits |
//! | picker | `↑↓ j k` move, `Enter` attaches, `Esc` or `n` closes, `q` quits |
//!
//! `Ctrl-C` quits in every mode.

pub mod history;
pub mod matrix;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use picket_proto::{ClusterView, Member};

pub use history::{History, Transition};
pub use matrix::{Cell, Column, Counts, Matrix, RouteRow, Seen, Sort};

/// How far PageUp and PageDown move the selection.
pub const PAGE: usize = 10;

/// Everything the TUI reacts to, from one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    Key(KeyEvent),
    /// The cluster as the attached node sees it, whole.
    View(ClusterView),
    Link(Link),
    /// The current time; the App never reads a clock.
    Tick {
        now_unix_ms: u64,
    },
    /// The terminal changed size; the next frame lays itself out again.
    Resize,
}

/// The state of the feed connection, as the feed client reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connecting {
        addr: String,
    },
    Live {
        addr: String,
    },
    /// The feed stopped; the view shown is as of `since_unix_ms`.
    Stale {
        addr: String,
        since_unix_ms: u64,
        error: String,
    },
}

impl Link {
    pub fn addr(&self) -> &str {
        match self {
            Link::Connecting { addr } | Link::Live { addr } | Link::Stale { addr, .. } => addr,
        }
    }
}

/// A node's feed the operator chose to attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedTarget {
    pub name: String,
    pub addr: String,
    /// The feed certificate's SHA-256 fingerprint, hex, for pinning.
    pub fingerprint: Option<String>,
}

/// What keys mean right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Normal,
    /// Typing the filter.
    Filter,
    Help,
    /// Each node's state of each ACME certificate, over the matrix.
    Certificates,
    /// Choosing a node to attach to; `selected` indexes
    /// [`App::picker_entries`].
    Picker {
        selected: usize,
    },
}

#[derive(Debug, Default)]
pub struct App {
    view: Option<ClusterView>,
    matrix: Matrix,
    history: History,
    link: Option<Link>,
    now_unix_ms: u64,
    /// The time of the Tick before the current view arrived.
    view_arrived_unix_ms: u64,
    mode: Mode,
    filter: String,
    sort: Sort,
    /// The rows shown, as indexes into the matrix's rows, in order.
    order: Vec<usize>,
    /// An index into `order`.
    selected: usize,
    quit: bool,
    switch: Option<FeedTarget>,
}

impl App {
    pub fn new() -> App {
        App::default()
    }

    pub fn update(&mut self, msg: Msg) {
        match msg {
            Msg::Key(key) => self.key(key),
            Msg::View(view) => self.set_view(view),
            Msg::Link(link) => self.link = Some(link),
            Msg::Tick { now_unix_ms } => self.now_unix_ms = now_unix_ms,
            Msg::Resize => {}
        }
    }

    pub fn quit(&self) -> bool {
        self.quit
    }

    /// The feed the operator chose in the picker, once.
    pub fn take_switch(&mut self) -> Option<FeedTarget> {
        self.switch.take()
    }

    pub fn view(&self) -> Option<&ClusterView> {
        self.view.as_ref()
    }

    pub fn matrix(&self) -> &Matrix {
        &self.matrix
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn link(&self) -> Option<&Link> {
        self.link.as_ref()
    }

    pub fn now_unix_ms(&self) -> u64 {
        self.now_unix_ms
    }

    /// The time to measure verdicts' ages against, on the attached node's
    /// clock: the view's time plus what passed here since it arrived. This
    /// keeps ages right when this machine's clock and the nodes' differ.
    pub fn node_now_unix_ms(&self) -> u64 {
        let taken = self.view.as_ref().map_or(0, |v| v.taken_unix_ms);
        taken + self.now_unix_ms.saturating_sub(self.view_arrived_unix_ms)
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn filter(&self) -> &str {
        &self.filter
    }

    pub fn sort(&self) -> Sort {
        self.sort
    }

    /// The rows shown, as indexes into [`Matrix::rows`], in order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The position of the selection in [`App::order`].
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// The selected row, as an index into [`Matrix::rows`].
    pub fn selected_row(&self) -> Option<usize> {
        self.order.get(self.selected).copied()
    }

    /// The members the picker offers: those that advertise a feed.
    pub fn picker_entries(&self) -> Vec<&Member> {
        self.view.as_ref().map_or_else(Vec::new, |v| {
            v.members
                .iter()
                .filter(|m| m.info.as_ref().is_some_and(|i| i.feed.is_some()))
                .collect()
        })
    }

    fn set_view(&mut self, view: ClusterView) {
        let keep = self.selected_route();
        let matrix = Matrix::new(&view);
        let same_node = self.view.as_ref().is_some_and(|v| v.node == view.node);
        if same_node {
            self.history
                .record(&self.matrix, &matrix, view.taken_unix_ms);
        } else {
            self.history
                .record(&Matrix::default(), &matrix, view.taken_unix_ms);
        }
        self.matrix = matrix;
        self.view = Some(view);
        self.view_arrived_unix_ms = self.now_unix_ms;
        self.reorder(keep);
        if let Mode::Picker { selected } = self.mode {
            let last = self.picker_entries().len().saturating_sub(1);
            self.mode = Mode::Picker {
                selected: selected.min(last),
            };
        }
    }

    fn selected_route(&self) -> Option<String> {
        self.selected_row()
            .map(|row| self.matrix.rows()[row].name.clone())
    }

    /// Recomputes the rows shown and puts the selection back on `keep`
    /// when it is still shown.
    fn reorder(&mut self, keep: Option<String>) {
        self.order = self.matrix.order(&self.filter, self.sort);
        let kept = keep.and_then(|route| {
            let row = self.matrix.find(&route)?;
            self.order.iter().position(|&i| i == row)
        });
        self.selected = kept.unwrap_or(self.selected);
        self.clamp_selection();
    }

    fn clamp_selection(&mut self) {
        self.selected = self.selected.min(self.order.len().saturating_sub(1));
    }

    fn key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.quit = true;
            return;
        }
        match self.mode {
            Mode::Normal => self.key_normal(key.code),
            Mode::Filter => self.key_filter(key.code),
            Mode::Help => match key.code {
                KeyCode::Char('?') | KeyCode::Esc => self.mode = Mode::Normal,
                KeyCode::Char('q') => self.quit = true,
                _ => {}
            },
            Mode::Certificates => match key.code {
                KeyCode::Char('c') | KeyCode::Esc => self.mode = Mode::Normal,
                KeyCode::Char('q') => self.quit = true,
                _ => {}
            },
            Mode::Picker { selected } => self.key_picker(key.code, selected),
        }
    }

    fn key_normal(&mut self, code: KeyCode) {
        match code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('/') => self.mode = Mode::Filter,
            KeyCode::Esc if !self.filter.is_empty() => self.set_filter(String::new()),
            KeyCode::Char('s') => {
                self.sort = self.sort.toggled();
                self.reorder(self.selected_route());
            }
            KeyCode::Char('?') => self.mode = Mode::Help,
            KeyCode::Char('n') => self.mode = Mode::Picker { selected: 0 },
            KeyCode::Char('c') => self.mode = Mode::Certificates,
            code => self.move_selection(code),
        }
    }

    fn key_filter(&mut self, code: KeyCode) {
        match code {
            KeyCode::Enter => self.mode = Mode::Normal,
            KeyCode::Esc => {
                self.mode = Mode::Normal;
                self.set_filter(String::new());
            }
            KeyCode::Backspace => {
                let mut filter = self.filter.clone();
                filter.pop();
                self.set_filter(filter);
            }
            KeyCode::Char(c) => {
                let mut filter = self.filter.clone();
                filter.push(c);
                self.set_filter(filter);
            }
            KeyCode::Up | KeyCode::Down | KeyCode::PageUp | KeyCode::PageDown => {
                self.move_selection(code);
            }
            _ => {}
        }
    }

    fn key_picker(&mut self, code: KeyCode, selected: usize) {
        let count = self.picker_entries().len();
        match code {
            KeyCode::Esc | KeyCode::Char('n') => self.mode = Mode::Normal,
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Up | KeyCode::Char('k') => {
                self.mode = Mode::Picker {
                    selected: selected.saturating_sub(1),
                };
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.mode = Mode::Picker {
                    selected: (selected + 1).min(count.saturating_sub(1)),
                };
            }
            KeyCode::Enter => {
                let target = self.picker_entries().get(selected).and_then(|m| {
                    let info = m.info.as_ref()?;
                    Some(FeedTarget {
                        name: m.name.clone(),
                        addr: info.feed.clone()?,
                        fingerprint: info.feed_fingerprint.clone(),
                    })
                });
                if let Some(target) = target {
                    self.switch = Some(target);
                    self.mode = Mode::Normal;
                }
            }
            _ => {}
        }
    }

    fn set_filter(&mut self, filter: String) {
        let keep = self.selected_route();
        self.filter = filter;
        self.reorder(keep);
    }

    fn move_selection(&mut self, code: KeyCode) {
        let last = self.order.len().saturating_sub(1);
        self.selected = match code {
            KeyCode::Up | KeyCode::Char('k') => self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => (self.selected + 1).min(last),
            KeyCode::PageUp => self.selected.saturating_sub(PAGE),
            KeyCode::PageDown => (self.selected + PAGE).min(last),
            KeyCode::Home | KeyCode::Char('g') => 0,
            KeyCode::End | KeyCode::Char('G') => last,
            _ => self.selected,
        };
    }
}

#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod tests;
