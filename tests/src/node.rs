//! Gateway nodes started in the test's own runtime, on port 0.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use picket::config::{AccessLogTarget, Config, Origin, Overrides};
use picket::gossip::{Membership, Wire};
use picket::node::{self, Listeners, Node, Options, Running};
use picket_proto::ClusterView;

/// A running node.
#[derive(Debug)]
pub struct TestNode {
    pub proxy: SocketAddr,
    /// The HTTPS listener, when the configuration has `listen_tls` (give
    /// it port 0).
    pub tls: Option<SocketAddr>,
    pub admin: SocketAddr,
    running: Option<Running>,
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn options(config_path: Option<&Path>, gossip_transport: Option<Wire>) -> Options {
    Options {
        gossip_transport,
        ticket_clock: None,
        config_path: config_path.map(Path::to_path_buf),
        overrides: Overrides::default(),
        tls: picket::tls::client_config(None).expect("TLS roots"),
        drain: Duration::from_secs(2),
        proxy_env: None,
    }
}

/// Test nodes keep quiet: no access log unless the configuration asks
/// for one (the default, stdout, would fill the test's output).
fn quiet(config: &mut Config, options: &mut Options) {
    if config.node.access_log.from == Origin::Default {
        options.overrides.access_log = Some(AccessLogTarget::Off);
        config.apply(&options.overrides);
    }
}

impl TestNode {
    /// A node on the configuration `text` (its `listen` and `admin`
    /// ignored: port 0 on loopback).
    pub fn start(text: &str) -> TestNode {
        let config = Config::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"));
        TestNode::run(config, None, None)
    }

    /// A node on `text` whose options (TLS roots, forward proxies) the
    /// test sets: settings the node otherwise takes from its environment.
    pub fn start_with(text: &str, configure: impl FnOnce(&mut Options)) -> TestNode {
        let mut config = Config::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let listeners = Listeners::bind(loopback(), loopback()).expect("bind node listeners");
        let mut options = options(None, None);
        configure(&mut options);
        quiet(&mut config, &mut options);
        let running = node::start(listeners, config, options).expect("start node");
        TestNode {
            proxy: running.proxy_addr,
            tls: running.tls_addr,
            admin: running.admin_addr,
            running: Some(running),
        }
    }

    /// A node whose gossip goes over `transport` (chitchat's in-memory one)
    /// instead of UDP.
    pub fn start_on(text: &str, transport: Arc<dyn picket::gossip::Transport>) -> TestNode {
        let config = Config::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"));
        TestNode::run(config, None, Some(Wire::Given(transport)))
    }

    /// A node on a configuration file, reloading it as `picket run` does.
    pub fn start_file(path: &Path) -> TestNode {
        let config = Config::load(path).unwrap_or_else(|e| panic!("{e}"));
        TestNode::run(config, Some(path), None)
    }

    fn run(mut config: Config, path: Option<&Path>, wire: Option<Wire>) -> TestNode {
        let listeners = Listeners::bind(loopback(), loopback()).expect("bind node listeners");
        let mut options = options(path, wire);
        quiet(&mut config, &mut options);
        let running = node::start(listeners, config, options).expect("start node");
        TestNode {
            proxy: running.proxy_addr,
            tls: running.tls_addr,
            admin: running.admin_addr,
            running: Some(running),
        }
    }

    pub fn node(&self) -> &Arc<Node> {
        &self.running.as_ref().expect("running").node
    }

    /// The node's cluster membership, once it has joined.
    /// Reads the configuration file again, as a SIGHUP does, on a blocking
    /// thread: the read waits for the file to settle (up to seconds), and
    /// the test's runtime serves the node meanwhile.
    pub async fn reload(&self) -> picket::node::Reload {
        let node = Arc::clone(self.node());
        tokio::task::spawn_blocking(move || node.reload_from_file())
            .await
            .expect("the reload ran")
    }

    pub async fn membership(&self) -> Arc<Membership> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(membership) = self.node().membership() {
                return Arc::clone(membership);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the node never joined its cluster"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Where peers reach this node's gossip.
    pub async fn gossip_addr(&self) -> SocketAddr {
        self.membership()
            .await
            .advertise
            .expect("a node in a cluster")
    }

    /// The cluster as this node sees it now.
    pub async fn view(&self) -> Arc<ClusterView> {
        self.membership().await.view()
    }

    /// A status API answer, as JSON.
    pub async fn admin_json(&self, path: &str) -> (http::StatusCode, serde_json::Value) {
        let answer = crate::client::get(self.admin, "admin", path)
            .await
            .expect("the admin listener answers");
        let json = serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null);
        (answer.status, json)
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
            .find(|v| *v.route == *route)
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
    /// Calls `each` on this node's verdict on `route` now and on every
    /// snapshot the board publishes after, until `each` says it is done
    /// (`true`) or `within` has passed; returns whether it was done, and
    /// the last verdict seen.
    async fn follow_verdict(
        &self,
        route: &str,
        within: Duration,
        mut each: impl FnMut(Option<&picket_proto::Verdict>) -> bool,
    ) -> (bool, Option<picket_proto::Verdict>) {
        let deadline = tokio::time::Instant::now() + within;
        let mut snapshots = self.node().board().subscribe();
        loop {
            let verdict = snapshots
                .borrow_and_update()
                .iter()
                .find(|v| *v.route == *route)
                .cloned();
            if each(verdict.as_ref()) {
                return (true, verdict);
            }
            match tokio::time::timeout_at(deadline, snapshots.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => panic!("the node stopped; last verdict: {verdict:?}"),
                Err(_) => return (false, verdict),
            }
        }
    }

    /// Checks every verdict on `route` the board publishes for `during`,
    /// the current one first: `check` must hold on each (a flap between
    /// two samples cannot hide from it).
    pub async fn verdicts_hold_for(
        &self,
        route: &str,
        what: &str,
        during: Duration,
        mut check: impl FnMut(&picket_proto::Verdict) -> bool,
    ) {
        self.follow_verdict(route, during, |verdict| {
            assert!(verdict.is_some_and(&mut check), "{what}: {verdict:?}");
            false
        })
        .await;
    }

    /// Waits until this node's verdict on `route` satisfies `check`,
    /// looking at each snapshot the board publishes; panics after
    /// `within`, showing the last verdict.
    pub async fn verdict_until(
        &self,
        route: &str,
        what: &str,
        within: Duration,
        mut check: impl FnMut(&picket_proto::Verdict) -> bool,
    ) {
        let (done, last) = self
            .follow_verdict(route, within, |verdict| verdict.is_some_and(&mut check))
            .await;
        assert!(
            done,
            "not within {within:?}: {what}; last verdict: {last:?}"
        );
    }
}

/// A node in a runtime of its own, so that it can die without a word: its
/// runtime dropped, its sockets closed, no goodbye sent.
#[derive(Debug)]
pub struct Killable {
    pub proxy: SocketAddr,
    /// What the node publishes of itself: its feed and fingerprint.
    pub info: picket_proto::NodeInfo,
    kill: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Killable {
    /// Starts a node on `text` and waits until it has joined its cluster.
    pub fn start(text: String) -> Killable {
        let (ready, started) = std::sync::mpsc::channel();
        let (kill, killed) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime for the node");
            let node = runtime.block_on(async {
                let node = TestNode::start(&text);
                let info = node.membership().await.info.clone();
                ready
                    .send((node.proxy, info))
                    .expect("the test waits for the node");
                node
            });
            let _ = killed.recv();
            // No stop, no goodbye: the runtime and its sockets just go.
            std::mem::forget(node);
            runtime.shutdown_background();
        });
        let (proxy, info) = started.recv().expect("the node started");
        Killable {
            proxy,
            info,
            kill,
            thread,
        }
    }

    /// Kills the node and returns once its runtime is gone.
    pub fn kill(self) {
        let _ = self.kill.send(());
        self.thread.join().expect("the node's thread ends");
    }
}
