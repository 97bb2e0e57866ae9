//! `picket-tui`: shows a cluster view, routes × nodes.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use crossterm::event::{self, Event, KeyCode, KeyEventKind};
use picket_proto::NodeView;
use picket_tui::app::{App, Msg};
use picket_tui::view;

/// Every node's view of each route, side by side.
#[derive(Debug, Parser)]
#[command(name = "picket-tui", version)]
struct Cli {
    /// A cluster view saved as JSON: an array of node views, each with its
    /// node name and verdicts.
    #[arg(long)]
    snapshot: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let text = std::fs::read_to_string(&cli.snapshot)
        .with_context(|| format!("reading {}", cli.snapshot.display()))?;
    let views: Vec<NodeView> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a cluster view", cli.snapshot.display()))?;
    let mut app = App::default();
    app.update(Msg::View(views));

    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        while !app.quit {
            terminal.draw(|f| view::render(f, &app))?;
            if !event::poll(Duration::from_millis(250))? {
                continue;
            }
            if let Event::Key(key) = event::read()? {
                if key.kind != KeyEventKind::Press {
                    continue;
                }
                let msg = match key.code {
                    KeyCode::Char('q') | KeyCode::Esc => Msg::Quit,
                    KeyCode::Up | KeyCode::Char('k') => Msg::Up,
                    KeyCode::Down | KeyCode::Char('j') => Msg::Down,
                    _ => continue,
                };
                app.update(msg);
            }
        }
        Ok(())
    })();
    ratatui::restore();
    result
}
