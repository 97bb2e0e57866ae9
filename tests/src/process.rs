//! Gateway nodes as processes of their own (`picket run`), for figures that
//! must not include the harness: a node's own memory, its own log.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ports::free_port;

/// A `picket run` process on a configuration file of its own.
#[derive(Debug)]
pub struct NodeProcess {
    pub name: String,
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    pub gossip: SocketAddr,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl NodeProcess {
    /// Starts `binary` as node `name` with `cluster` lines (without
    /// `gossip`, which is chosen here) and `routes`, logging to a file in
    /// `dir`.
    pub fn start(
        binary: &Path,
        dir: &Path,
        name: &str,
        cluster: &str,
        routes: &str,
    ) -> NodeProcess {
        let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let gossip = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = dir.join(format!("{name}.toml"));
        let log = dir.join(format!("{name}.log"));
        let mut node = NodeProcess {
            name: name.to_string(),
            proxy,
            admin,
            gossip,
            config,
            log,
            child: None,
        };
        node.write_config(cluster, routes);
        let log = std::fs::File::create(&node.log).expect("a log file");
        node.child = Some(
            Command::new(binary)
                .args(["run", "--config"])
                .arg(&node.config)
                .env("RUST_LOG", "info")
                .env("PICKET_ACCESS_LOG", "off")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the log file"))
                .stderr(log)
                .spawn()
                .expect("picket starts"),
        );
        node
    }

    /// Starts `binary` as node `name`, in no cluster, on `body` (everything
    /// after `[node]`: runtime, global, routes), with `env` set, logging to
    /// a file in `dir`.
    pub fn start_alone(
        binary: &Path,
        dir: &Path,
        name: &str,
        body: &str,
        env: &[(&str, &str)],
    ) -> NodeProcess {
        let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let text = format!(
            "[node]\nname = \"{name}\"\nlisten = \"{proxy}\"\nadmin = \"{admin}\"\n\n{body}"
        );
        let gossip = SocketAddr::from(([127, 0, 0, 1], 0));
        NodeProcess::start_text(binary, dir, name, (proxy, admin, gossip), &text, env)
    }

    /// Starts `binary` as node `name` on the whole configuration `text`,
    /// which names `addrs` (proxy, admin, gossip) itself, with `env` set,
    /// logging to a file in `dir`.
    pub fn start_text(
        binary: &Path,
        dir: &Path,
        name: &str,
        addrs: (SocketAddr, SocketAddr, SocketAddr),
        text: &str,
        env: &[(&str, &str)],
    ) -> NodeProcess {
        let (proxy, admin, gossip) = addrs;
        let config = dir.join(format!("{name}.toml"));
        let log = dir.join(format!("{name}.log"));
        std::fs::write(&config, text).expect("write the configuration");
        let log_file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("a log file");
        let child = Command::new(binary)
            .args(["run", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .env("PICKET_ACCESS_LOG", "off")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("the log file"))
            .stderr(log_file)
            .spawn()
            .expect("picket starts");
        NodeProcess {
            name: name.to_string(),
            proxy,
            admin,
            gossip,
            config,
            log,
            child: Some(child),
        }
    }

    /// Kills the process (SIGKILL: no goodbye, nothing flushed) and waits
    /// for it to end.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The node's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Rewrites the node's configuration file (whole, by a rename); the
    /// node reloads it.
    pub fn write_config(&self, cluster: &str, routes: &str) {
        let text = format!(
            "[node]\nname = \"{}\"\nlisten = \"{}\"\nadmin = \"{}\"\n\n[cluster]\ngossip = \"{}\"\n{cluster}\n{routes}",
            self.name, self.proxy, self.admin, self.gossip
        );
        let partial = self.config.with_extension("toml.new");
        std::fs::write(&partial, text).expect("write the configuration");
        std::fs::rename(&partial, &self.config).expect("replace the configuration");
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The process's resident memory, in kB.
    pub fn rss_kb(&self) -> Option<u64> {
        crate::faults::rss_kb_of(&format!("/proc/{}/status", self.pid()?))
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Waits until the admin listener answers `/healthz`.
    pub async fn ready(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Ok(answer) = crate::client::get(self.admin, "admin", "/healthz").await
                && answer.status.is_success()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} never answered /healthz; its log: {}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of an unlabelled or labelled sample in `/metrics`.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let answer = crate::client::get(self.admin, "admin", "/metrics")
            .await
            .ok()?;
        answer
            .text()
            .lines()
            .find(|l| l.starts_with(sample) && l[sample.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|n| n.parse().ok())
    }

    /// Lines the node has logged so far.
    pub fn log_lines(&self) -> usize {
        std::fs::read_to_string(&self.log).map_or(0, |log| log.lines().count())
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
