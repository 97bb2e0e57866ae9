//! Reloading the configuration when its file changes or on SIGHUP.
//!
//! The directory is watched, not the file: editors replace files by
//! renaming, and Kubernetes swaps a ConfigMap's files through a symlinked
//! directory. Any event there (debounced) re-reads the file; the node then
//! does nothing if its text is what it last read.
//!
//! What a reading means is decided by [`judge`], pure: the same text as
//! last time is nothing new (a refused one is refused again, quietly); an
//! unreadable file, an empty one or an invalid one is refused, the
//! running configuration staying; a valid one is applied. The node
//! ([`crate::node::Node::reload_from_file`]) carries it out and logs the
//! one line [`log`] writes.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::{Config, ConfigError, Overrides, ReloadPlan};
use crate::shutdown::{Shutdown, Tasks};

/// Quiet time after a file event before the file is read.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// Whether a file event may mean a change: anything but an access. The
/// node's own reads of a watched file (opening it, closing it unwritten)
/// are events too; taken as changes, each reading would order the next,
/// ten times a second for as long as the node runs.
pub fn may_change(event: &notify::Event) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match event.kind {
        // A file closed after writing (inotify's IN_CLOSE_WRITE).
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

/// Follows `path` until `shutdown`, calling `reload` (on a blocking
/// thread: it reads files and builds tables) once the watch is in place,
/// before returning, then after each burst of changes, and on SIGHUP.
pub async fn start<R>(reload: R, path: PathBuf, mut shutdown: Shutdown, tasks: &mut Tasks)
where
    R: Fn() + Send + Sync + 'static,
{
    let reload = Arc::new(reload);
    let (tx, mut events) = mpsc::channel::<()>(1);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| may_change(&e)) {
            let _ = tx.try_send(());
        }
    })
    .and_then(|mut w| w.watch(&dir, RecursiveMode::NonRecursive).map(|()| w));
    let watcher = match watcher {
        Ok(w) => Some(w),
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "cannot watch the configuration; SIGHUP still reloads it");
            None
        }
    };
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    // A change between the node's first read and the watch would go
    // unseen: look once now that the watch is in place, before the node
    // serves.
    run(&reload).await;
    tasks.spawn("reload", async move {
        let _watcher = watcher;
        loop {
            let hup = async {
                match hangup.as_mut() {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(()) = events.recv() => {
                    tokio::time::sleep(DEBOUNCE).await;
                    while events.try_recv().is_ok() {}
                }
                Some(()) = hup => tracing::debug!("SIGHUP: reloading the configuration"),
                () = shutdown.wait() => return,
            }
            run(&reload).await;
        }
    });
}

/// Reloads off the proxy's workers: file reads and table builds block.
async fn run<R>(reload: &Arc<R>)
where
    R: Fn() + Send + Sync + 'static,
{
    let reload = Arc::clone(reload);
    let _ = tokio::task::spawn_blocking(move || reload()).await;
}

/// What the file held when it was last read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Last<'a> {
    /// Its text, applied or refused.
    pub text: Option<&'a str>,
    /// Why that text was refused, if it was.
    pub refused: Option<&'a str>,
}

/// What to do with a reading of the configuration file.
#[derive(Debug)]
pub enum Judged {
    /// Nothing: the text is what was applied last.
    Unchanged,
    /// The node is short of a resource (file descriptors, memory) to read
    /// it: its own problem, not the file's. The next change or SIGHUP
    /// reads it again.
    Short(io::Error),
    /// The text refused last time, refused again without a new line.
    RefusedAgain(String),
    /// Refuse it, the running configuration staying; `text` is kept so
    /// that the same text is not judged twice (`None`: read it again next
    /// time, as a file being written).
    Refuse { error: String, text: Option<String> },
    /// Apply it.
    Apply { config: Box<Config>, text: String },
}

/// What reading the file `file` gave (`read`) means, after `last`, with
/// the node's flag and environment `overrides` (which win over the file).
pub fn judge(
    file: &str,
    read: io::Result<String>,
    last: Last<'_>,
    overrides: &Overrides,
) -> Judged {
    let text = match read {
        Ok(text) => text,
        Err(source) if crate::resources::is_local(&source) => return Judged::Short(source),
        Err(source) => {
            let file = file.to_string();
            let error = ConfigError::Read { file, source }.to_string();
            return Judged::Refuse { error, text: None };
        }
    };
    if last.text == Some(text.as_str()) {
        // Read and judged already (by the watch or an earlier SIGHUP): the
        // same answer, logged and counted once.
        return match last.refused {
            Some(error) => Judged::RefusedAgain(error.to_string()),
            None => Judged::Unchanged,
        };
    }
    if text.trim().is_empty() {
        // Most likely a file being written in place (truncated, then
        // filled): its next change is read again. A node is never emptied
        // of its routes and certificates by an empty file.
        let error =
            format!("{file}: the file is empty; if it is being written, its next change is read");
        return Judged::Refuse { error, text: None };
    }
    match Config::parse(file, &text) {
        Ok(mut config) => {
            config.apply(overrides);
            match config.edge_problem() {
                Some(error) => Judged::Refuse {
                    error,
                    text: Some(text),
                },
                None => Judged::Apply {
                    config: Box::new(config),
                    text,
                },
            }
        }
        Err(error) => Judged::Refuse {
            error: error.to_string(),
            text: Some(text),
        },
    }
}

/// What a reload did with the cluster keys.
#[derive(Debug)]
pub enum KeyReload {
    /// Gossip is not sealed, or there is no key to read.
    Untouched,
    /// Read again; the new keys' labels when they differ.
    Read(Option<Vec<String>>),
    /// Not readable: the keys in use stay.
    Failed(String),
}

/// The one line a reload leaves: a warning when some of what changed
/// waits for a restart, naming each such setting, or when the cluster
/// keys could not be read.
pub fn log(plan: &ReloadPlan, keys: &KeyReload) {
    let joined = |names: &[&str]| (!names.is_empty()).then(|| names.join(", "));
    let settings = joined(&plan.applied);
    let needs_restart = joined(&plan.needs_restart);
    let warn = needs_restart.is_some() || matches!(keys, KeyReload::Failed(_));
    let keys = match keys {
        KeyReload::Untouched | KeyReload::Read(None) => None,
        KeyReload::Read(Some(labels)) => Some(format!("replaced: {}", labels.join(", "))),
        KeyReload::Failed(error) => Some(format!("not read, the keys in use stay: {error}")),
    };
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                added = plan.added.len(),
                removed = plan.removed.len(),
                changed = plan.changed.len(),
                unchanged = plan.unchanged,
                settings,
                needs_restart,
                cluster_keys = keys,
                "configuration reloaded"
            )
        };
    }
    if warn {
        line!(warn);
    } else {
        line!(info);
    }
}

/// How long ago a configuration file must have last changed before it is
/// read as whole, and how long the reader waits at most for that.
const SETTLE: Duration = Duration::from_millis(50);
const SETTLE_FOR: Duration = Duration::from_secs(2);

/// How long the reader waits before reading a file last modified `age`
/// ago (`None`: a modification time in the future, which says nothing).
fn settle_wait(age: Option<Duration>, waited: Duration) -> Option<Duration> {
    let age = age?;
    (age < SETTLE && waited < SETTLE_FOR).then(|| (SETTLE - age).min(SETTLE_FOR - waited))
}

/// Reads the configuration file once it has not changed for [`SETTLE`]
/// (waiting [`SETTLE_FOR`] at most), so that a file being written in place
/// is not read half-written. Blocking.
pub fn read_settled(path: &Path) -> io::Result<String> {
    let mut waited = Duration::ZERO;
    loop {
        let modified = std::fs::metadata(path)?.modified()?;
        let age = std::time::SystemTime::now().duration_since(modified).ok();
        match settle_wait(age, waited) {
            Some(wait) => {
                std::thread::sleep(wait);
                waited += wait;
            }
            None => return std::fs::read_to_string(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = "[[route]]\nname = \"api\"\nreplicas = [\"127.0.0.1:9000\"]\n";

    fn judged(read: io::Result<String>, last: Last<'_>) -> Judged {
        judge("picket.toml", read, last, &Overrides::default())
    }

    #[test]
    fn a_valid_file_is_applied_with_the_overrides() {
        let overrides = Overrides {
            workers: Some(3),
            ..Overrides::default()
        };
        match judge("picket.toml", Ok(ROUTE.into()), Last::default(), &overrides) {
            Judged::Apply { config, text } => {
                assert_eq!(text, ROUTE);
                assert_eq!(config.routes.len(), 1);
                assert_eq!(config.node.workers.value, 3, "the flag wins over the file");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_same_text_is_judged_once() {
        let applied = Last {
            text: Some(ROUTE),
            refused: None,
        };
        assert!(matches!(
            judged(Ok(ROUTE.into()), applied),
            Judged::Unchanged
        ));
        let refused = Last {
            text: Some("nonsense"),
            refused: Some("picket.toml:1:1: nonsense"),
        };
        match judged(Ok("nonsense".into()), refused) {
            Judged::RefusedAgain(error) => assert_eq!(error, "picket.toml:1:1: nonsense"),
            other => panic!("{other:?}"),
        }
        // Another text after a refusal is judged afresh.
        assert!(matches!(
            judged(Ok(ROUTE.into()), refused),
            Judged::Apply { .. }
        ));
    }

    #[test]
    fn an_invalid_file_is_refused_with_its_place_and_remembered() {
        let text = format!("{ROUTE}tries = 99\n");
        match judged(Ok(text.clone()), Last::default()) {
            Judged::Refuse { error, text: kept } => {
                assert!(error.starts_with("picket.toml:4:"), "{error}");
                assert!(
                    error.contains("tries = 99 is out of range: 1 to 10"),
                    "{error}"
                );
                assert_eq!(kept, Some(text));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_empty_or_unreadable_file_is_refused_and_read_again_next_time() {
        for empty in ["", " \n\t\n"] {
            match judged(Ok(empty.into()), Last::default()) {
                Judged::Refuse { error, text } => {
                    assert!(error.contains("the file is empty"), "{error}");
                    assert_eq!(text, None);
                }
                other => panic!("{other:?}"),
            }
        }
        let gone = io::Error::from(io::ErrorKind::NotFound);
        match judged(Err(gone), Last::default()) {
            Judged::Refuse { error, text } => {
                assert!(error.contains("picket.toml"), "{error}");
                assert_eq!(text, None);
            }
            other => panic!("{other:?}"),
        }
        // Out of file descriptors: the node's own shortage, not a refusal.
        let short = io::Error::from_raw_os_error(24);
        assert!(matches!(
            judged(Err(short), Last::default()),
            Judged::Short(_)
        ));
    }

    #[test]
    fn a_file_is_read_once_it_has_not_changed_for_the_settle_time() {
        let ms = Duration::from_millis;
        assert_eq!(settle_wait(Some(ms(10)), ms(0)), Some(ms(40)));
        assert_eq!(settle_wait(Some(ms(50)), ms(0)), None);
        assert_eq!(settle_wait(Some(ms(5_000)), ms(0)), None);
        // Written again meanwhile: wait again, never past the bound.
        assert_eq!(settle_wait(Some(ms(0)), ms(1_990)), Some(ms(10)));
        assert_eq!(settle_wait(Some(ms(0)), SETTLE_FOR), None);
        // A modification time in the future says nothing: no wait.
        assert_eq!(settle_wait(None, ms(0)), None);
    }

    /// Reads are no changes: the node reading its own files must not
    /// order another reading.
    #[test]
    fn only_what_may_change_a_file_wakes_a_reload() {
        use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
        use notify::{Event, EventKind};
        let reads = [
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
        ];
        for kind in reads {
            assert!(!may_change(&Event::new(kind)), "{kind:?}");
        }
        let changes = [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(notify::event::RemoveKind::File),
            EventKind::Any,
        ];
        for kind in changes {
            assert!(may_change(&Event::new(kind)), "{kind:?}");
        }
    }
}
