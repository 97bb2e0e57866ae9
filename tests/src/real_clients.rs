//! The peers that real clients (git, pip, the Docker engine, Chromium)
//! meet in `tests/integration/real_clients.rs`, each run once straight at
//! its peer and once through a node: `git http-backend` as CGI
//! ([`cgi`]), a directory served as static files ([`files`], a PEP 503
//! index), Debian's `docker-registry` as a process of the test's own
//! ([`registry`]), and the page a browser loads with its assets, event
//! stream and WebSocket ([`page`]).
//!
//! ## Invariants
//! - Everything listens on 127.0.0.1 only, and nothing is fetched from
//!   anywhere else: the clients meet only these peers and the node.
//! - Every name a test creates (a directory, an image, a repository) comes
//!   from [`unique`], and is removed when the value that made it is
//!   dropped or at the end of the test.
//! - A program the tests run gets no proxy from the environment, so its
//!   traffic goes where the test sends it.

pub mod cgi;
pub mod files;
pub mod page;
pub mod registry;

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::process::Command;
use tokio::time::Instant;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name unique to this run (a lowercase Docker repository name too):
/// `picket-rc-<what>-<pid>-<n>-<random>`.
pub fn unique(what: &str) -> String {
    format!(
        "picket-rc-{what}-{}-{}-{:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    )
}

/// The proxy variables of the environment, which no program run here sees.
const PROXY_VARIABLES: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
];

/// `program args`, with no proxy from the environment, killed if dropped.
pub fn command<S: AsRef<OsStr>>(program: &str, args: impl IntoIterator<Item = S>) -> Command {
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(true);
    for name in PROXY_VARIABLES {
        command.env_remove(name);
    }
    command
}

/// What a program that ran to its end printed, and how long it took.
#[derive(Debug)]
pub struct Ran {
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs `command` to its end within `within`; what it printed, or why it
/// failed (its status and stderr).
pub async fn try_run(command: &mut Command, within: Duration) -> Result<Ran, String> {
    let what = format!("{:?}", command.as_std());
    command.stdin(std::process::Stdio::null());
    let start = Instant::now();
    let output = match tokio::time::timeout(within, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("{what}: {e}")),
        Err(_) => return Err(format!("{what}: still running after {within:?}")),
    };
    let ran = Ran {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: start.elapsed(),
    };
    if output.status.success() {
        Ok(ran)
    } else {
        Err(format!(
            "{what}: {} after {:?}\n{}{}",
            output.status, ran.elapsed, ran.stdout, ran.stderr
        ))
    }
}

/// Runs `command` to its end within `within`; panics if it fails.
pub async fn run(command: &mut Command, within: Duration) -> Ran {
    try_run(command, within)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
