//! The command line of `picket-tui`: every node's view of each route, side
//! by side, from any node's QUIC feed. The `picket` binary runs the same
//! command as `picket tui`, so that an image holding one binary has both.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::app::{App, Msg};
use crate::feed::{self, Session, Trust};
use crate::view;
use anyhow::Context;
use clap::{ArgGroup, Parser};
use crossterm::event::{Event, EventStream, KeyEventKind};
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

/// Every node's view of each route, side by side.
///
/// Attach to any node's feed. The node's certificate is pinned with
/// `--pin` (the fingerprint every node logs at start and publishes in its
/// node info), checked against a CA with `--ca`, or, for a loopback demo
/// only, not checked at all with `--insecure`.
#[derive(Debug, Parser)]
#[command(name = "picket-tui", version)]
#[command(group(ArgGroup::new("trust").required(true).args(["pin", "ca", "insecure"])))]
struct Cli {
    /// A node's feed address, `host:port` (its `[node] feed`).
    address: String,
    /// The SHA-256 fingerprint of the node's feed certificate (hex; colons
    /// and case do not matter).
    #[arg(long)]
    pin: Option<String>,
    /// A PEM file of the CA that signed the nodes' feed certificates.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Do not check the node's certificate at all. Refused unless the
    /// address is on loopback.
    #[arg(long)]
    insecure: bool,
    /// A PEM certificate chain to show a node whose feed asks for one
    /// (`[node] feed_client_ca`); with --key.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// The PEM key of --cert.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Print the cluster view the node holds, once, as a table, and exit.
    #[arg(long)]
    once: bool,
    /// With --once: as JSON, for scripts.
    #[arg(long, requires = "once")]
    json: bool,
}

/// Runs `picket-tui` with these arguments, the first being the program's
/// name, as `std::env::args_os` gives them. Bad arguments print the usage
/// and exit, as clap does.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("picket-tui: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("picket-tui: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let trust = trust(&cli).await?;
    let identity = match (&cli.cert, &cli.key) {
        (Some(cert), Some(key)) => Some(Arc::new(
            feed::ClientIdentity::read(cert, key).map_err(anyhow::Error::msg)?,
        )),
        _ => None,
    };
    if cli.once {
        return once(&cli.address, &trust, identity.as_deref(), cli.json).await;
    }
    watch(cli.address, trust, identity).await
}

async fn trust(cli: &Cli) -> anyhow::Result<Trust> {
    if let Some(pin) = &cli.pin {
        let pin = feed::normalise(pin);
        if pin.len() != 64 || !pin.chars().all(|c| c.is_ascii_hexdigit()) {
            anyhow::bail!("--pin {pin:?} is not a SHA-256 fingerprint (64 hex digits)");
        }
        return Ok(Trust::Pin(pin));
    }
    if let Some(path) = &cli.ca {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let certs = <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("{} is not PEM", path.display()))?;
        if certs.is_empty() {
            anyhow::bail!("{} holds no certificate", path.display());
        }
        return Ok(Trust::Ca(certs));
    }
    let addr = feed::resolve(&cli.address).await?;
    if !addr.ip().is_loopback() {
        anyhow::bail!(
            "--insecure is for a loopback demo only, and {} is not on loopback: pin the node's fingerprint with --pin",
            cli.address
        );
    }
    Ok(Trust::Insecure)
}

/// `--once`: the view the node holds, printed once: a table, or JSON.
async fn once(
    address: &str,
    trust: &Trust,
    identity: Option<&feed::ClientIdentity>,
    json: bool,
) -> anyhow::Result<()> {
    let mut session = Session::open_as(address, trust, identity).await?;
    let view = tokio::time::timeout(Duration::from_secs(10), session.next_view())
        .await
        .context("no view from the node in 10 s")??;
    session.close().await;
    // Buffered: stdout alone writes line by line. The JSON is compact, as
    // the status API's answers are (`jq .` indents it): indented, the view
    // of 100 nodes x 1,000 routes was two million lines.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    if json {
        serde_json::to_writer(&mut out, &view)?;
        writeln!(out)?;
    } else {
        out.write_all(crate::table::table(&view).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

async fn watch(
    address: String,
    trust: Trust,
    identity: Option<Arc<feed::ClientIdentity>>,
) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::channel(1024);
    let (switch_tx, switch_rx) = mpsc::channel(4);
    let follower = tokio::spawn(feed::follow(address, trust, identity, tx, switch_rx));
    let mut app = App::new();
    app.update(Msg::Tick {
        now_unix_ms: feed::now_unix_ms(),
    });
    let mut terminal = ratatui::init();
    let mut events = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let result = loop {
        tokio::select! {
            _ = tick.tick() => app.update(Msg::Tick { now_unix_ms: feed::now_unix_ms() }),
            Some(msg) = rx.recv() => {
                // Draw once for everything that is waiting; of several
                // views, only the newest counts.
                let mut newest = None;
                for msg in std::iter::once(msg).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                    match msg {
                        Msg::View(view) => newest = Some(view),
                        other => {
                            if let Some(view) = newest.take() {
                                app.update(Msg::View(view));
                            }
                            app.update(other);
                        }
                    }
                }
                if let Some(view) = newest {
                    app.update(Msg::View(view));
                }
            }
            event = events.next() => match event {
                Some(Ok(Event::Key(key))) if key.kind == KeyEventKind::Press => app.update(Msg::Key(key)),
                Some(Ok(Event::Resize(..))) => app.update(Msg::Resize),
                Some(Ok(_)) => {}
                Some(Err(error)) => break Err(error.into()),
                None => break Ok(()),
            },
        }
        if app.quit() {
            break Ok(());
        }
        if let Some(target) = app.take_switch() {
            let _ = switch_tx.try_send(target);
        }
        if let Err(error) = terminal.draw(|frame| view::render(frame, &app)) {
            break Err(error.into());
        }
    };
    ratatui::restore();
    follower.abort();
    result
}
