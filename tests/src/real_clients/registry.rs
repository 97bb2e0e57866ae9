//! Debian's `docker-registry` (the Distribution registry, v2 API) as a
//! process of the test's own: a configuration file and storage in a
//! directory made for it, listening on a free loopback port, plain HTTP
//! (the engine treats 127.0.0.0/8 registries as insecure).
//!
//! ## Invariants
//! - It is ready when it says it listens, not when a poll gets through.
//! - Its access log is kept, so that a test can count the requests a
//!   client needed (a pull that had to retry a layer makes more).
//! - Dropping it kills the process and removes its directory, storage and
//!   all.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::ports::free_port;

/// The program, from Debian's `docker-registry` package.
pub const PROGRAM: &str = "docker-registry";

/// A registry of the test's own.
#[derive(Debug)]
pub struct Registry {
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
    access: Arc<Mutex<Vec<String>>>,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts one and waits until it listens (at most `within`).
    pub async fn start(within: Duration) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix(&super::unique("registry"))
            .tempdir()
            .expect("a directory for the registry");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\n\
                 log:\n  level: info\n  accesslog:\n    disabled: false\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n  \
                 maintenance:\n    uploadpurging:\n      enabled: false\n\
                 http:\n  addr: {addr}\n",
                dir.path().join("storage").display()
            ),
        )
        .expect("write the registry's configuration");
        let mut child = super::command(PROGRAM, ["serve".as_ref(), config.as_os_str()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker-registry starts");
        let log = Arc::new(Mutex::new(String::new()));
        let access = Arc::new(Mutex::new(Vec::new()));
        let (ready, listening) = tokio::sync::oneshot::channel();
        let stderr = child.stderr.take().expect("its stderr");
        let kept = Arc::clone(&log);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut ready = Some(ready);
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("listening on")
                    && let Some(ready) = ready.take()
                {
                    let _ = ready.send(());
                }
                let mut log = kept.lock().expect("log lock");
                log.push_str(&line);
                log.push('\n');
            }
        });
        // The access log (combined format) goes to stdout.
        let stdout = child.stdout.take().expect("its stdout");
        let kept = Arc::clone(&access);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().expect("access log lock").push(line);
            }
        });
        let listens = tokio::time::timeout(within, listening).await;
        let said = log.lock().expect("log lock").clone();
        assert!(
            matches!(listens, Ok(Ok(()))),
            "docker-registry did not listen on {addr} within {within:?}:\n{said}"
        );
        Registry {
            addr,
            log,
            access,
            _child: child,
            _dir: dir,
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").clone()
    }

    /// The requests it answered so far whose request line (`"GET /v2/…
    /// HTTP/1.1"`) starts with `start`, with their status.
    pub fn requests(&self, start: &str) -> Vec<String> {
        let needle = format!("\"{start}");
        self.access
            .lock()
            .expect("access log lock")
            .iter()
            .filter(|line| line.contains(&needle))
            .filter_map(|line| {
                let (_, rest) = line.split_once(&needle)?;
                let (request, after) = rest.split_once('"')?;
                let status = after.split_whitespace().next().unwrap_or("?");
                Some(format!("{start}{request} {status}"))
            })
            .collect()
    }
}
