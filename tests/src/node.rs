//! Gateway nodes started in the test's own runtime, on port 0.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use picket::config::{Config, Overrides};
use picket::node::{self, Listeners, Node, Options, Running};

/// A running node.
#[derive(Debug)]
pub struct TestNode {
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    running: Option<Running>,
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn options(config_path: Option<&Path>) -> Options {
    Options {
        config_path: config_path.map(Path::to_path_buf),
        overrides: Overrides::default(),
        tls: picket::tls::client_config(None).expect("TLS roots"),
        drain: Duration::from_secs(2),
        proxy_env: None,
    }
}

impl TestNode {
    /// A node on the configuration `text` (its listen addresses ignored).
    pub fn start(text: &str) -> TestNode {
        let config = Config::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"));
        TestNode::run(config, None)
    }

    /// A node on a configuration file, reloading it as `picket run` does.
    pub fn start_file(path: &Path) -> TestNode {
        let config = Config::load(path).unwrap_or_else(|e| panic!("{e}"));
        TestNode::run(config, Some(path))
    }

    fn run(config: Config, path: Option<&Path>) -> TestNode {
        let listeners = Listeners::bind(loopback(), loopback()).expect("bind node listeners");
        let running = node::start(listeners, config, options(path)).expect("start node");
        TestNode {
            proxy: running.proxy_addr,
            admin: running.admin_addr,
            running: Some(running),
        }
    }

    pub fn node(&self) -> &Arc<Node> {
        &self.running.as_ref().expect("running").node
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.expect("node stops cleanly");
        }
    }
}

/// A `[[route]]` with static replicas and extra settings (`key = value`
/// lines).
pub fn route(name: &str, path_prefix: &str, replicas: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = replicas.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[[route]]\nname = \"{name}\"\npath_prefix = \"{path_prefix}\"\nreplicas = [{}]\n{extra}\n",
        list.join(", ")
    )
}

impl TestNode {
    /// This node's verdict on `route`, as last judged.
    pub fn verdict(&self, route: &str) -> Option<picket_proto::Verdict> {
        self.node()
            .board()
            .snapshot()
            .iter()
            .find(|v| v.route == route)
            .cloned()
    }
}

/// Polls `check` every 5 ms until it holds; panics after `within`.
pub async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl TestNode {
    /// Polls this node's verdict on `route` until `check` holds; panics
    /// after `within`, showing the last verdict.
    pub async fn verdict_until(
        &self,
        route: &str,
        what: &str,
        within: Duration,
        mut check: impl FnMut(&picket_proto::Verdict) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let verdict = self.verdict(route);
            if verdict.as_ref().is_some_and(&mut check) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not within {within:?}: {what}; last verdict: {verdict:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
