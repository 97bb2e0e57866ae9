//! Reloading the configuration when its file changes or on SIGHUP.
//!
//! The directory is watched, not the file: editors replace files by
//! renaming, and Kubernetes swaps a ConfigMap's files through a symlinked
//! directory. Any event there (debounced) re-reads the file; the node then
//! does nothing if its text is what it last read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::shutdown::{Shutdown, Tasks};

/// Quiet time after a file event before the file is read.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

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
        if event.is_ok() {
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
