//! Certificates for the whole cluster from ACME, against Pebble (the ACME
//! test server Let's Encrypt publishes): three `picket run` processes on
//! 127.0.0.1, .2 and .3, listening on the same ports, as machines would.
//! Pebble's DNS server resolves every name to the one node a test
//! chooses, so the CA's validation reaches the node the test means it to.
//!
//! - One certificate for the cluster, ordered once, validated at a node
//!   that did not order it, served by every node; a restarted node serves
//!   it from its cache at once, and a node that joins later gets it from
//!   its peers without ordering (`three_nodes_…`, `a_node_that_joins_…`).
//! - TLS-ALPN-01 the same way (`tls_alpn_01_…`).
//! - A node killed in the middle of its order hands the order over
//!   (`an_order_hands_over_…`).
//! - A renewal under 100 requests/s over TLS loses none
//!   (`a_renewal_under_load_…`).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use picket_tests::pebble::{self, Pebble, Setup};
use picket_tests::ports::free_port;
use picket_tests::process::NodeProcess;
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::{binaries, client, require};
use tokio::time::Instant;

/// The certificate's names; the first names it.
const NAMES: [&str; 2] = ["shop.test", "www.shop.test"];

/// What a node's `[acme]` says: the CA (its directory, and the roots of
/// the certificates it issues), the roots of the directory's own
/// certificate, and the certificates (each one's names, the first naming
/// it).
struct Acme<'a> {
    pebble: &'a Pebble,
    ca: &'a std::path::Path,
    certificates: &'a [&'a [&'a str]],
}

/// The cluster of a test: its nodes, Pebble, and the files they share.
struct Cluster {
    pebble: Pebble,
    dir: tempfile::TempDir,
    key: PathBuf,
    http_port: u16,
    tls_port: u16,
    challenge: &'static str,
    upstream: Upstream,
    /// Every node's gossip address, for the seeds.
    seeds: Vec<SocketAddr>,
    nodes: Vec<NodeProcess>,
    /// Each node's QUIC feed, by name.
    feeds: Vec<(String, SocketAddr)>,
}

/// The address node `i` (from 0) listens on: 127.0.0.(i+1).
fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, u8::try_from(i + 1).expect("a few nodes"))
}

/// The node names of a test, one per address.
fn names(test: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{test}-{}", i + 1)).collect()
}

/// The node that orders the certificate among `nodes`.
fn orderer(nodes: &[String]) -> usize {
    let picked = picket::acme::plan::orderer(NAMES[0], nodes.iter().map(String::as_str))
        .expect("an orderer");
    nodes.iter().position(|n| n == picked).expect("one of them")
}

impl Cluster {
    /// Pebble validating at `validate_at`, and nodes `names` (not started).
    async fn new(
        validate_at: usize,
        validity: Option<u64>,
        challenge: &'static str,
        nodes: usize,
    ) -> Cluster {
        let (http_port, tls_port) = (free_port(), free_port());
        let pebble = Pebble::start(Setup {
            listen: Ipv4Addr::LOCALHOST,
            http_port,
            tls_port,
            validate_at: ip(validate_at),
            validity,
        })
        .await;
        let dir = tempfile::tempdir().expect("a directory");
        let key = picket_tests::cluster::key_file(dir.path(), "cluster.key");
        Cluster {
            pebble,
            key,
            http_port,
            tls_port,
            challenge,
            upstream: Upstream::start("shop", Behaviour::Status(200)).await,
            seeds: (0..nodes)
                .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
                .collect(),
            nodes: Vec::new(),
            feeds: Vec::new(),
            dir,
        }
    }

    /// Starts node `name` on address `i`, with a cache of its own.
    fn start(&mut self, i: usize, name: &str) {
        let ca = self.pebble.ca_file.clone();
        self.start_trusting(i, name, &ca);
    }

    /// [`Cluster::start`], trusting `ca` for the CA's directory.
    fn start_trusting(&mut self, i: usize, name: &str, ca: &std::path::Path) {
        let addrs = self.addresses(i, name);
        let acme = Acme {
            pebble: &self.pebble,
            ca,
            certificates: &[&NAMES],
        };
        let text = self.text(i, name, addrs, &acme);
        self.launch(i, name, addrs, &text);
    }

    /// The admin, feed and gossip addresses of node `name` on address `i`.
    fn addresses(&mut self, i: usize, name: &str) -> (SocketAddr, SocketAddr, SocketAddr) {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let feed = SocketAddr::from(([127, 0, 0, 1], free_port()));
        self.feeds.push((name.to_string(), feed));
        let gossip = match self.seeds.get(i) {
            Some(gossip) => *gossip,
            None => SocketAddr::from(([127, 0, 0, 1], free_port())),
        };
        (admin, feed, gossip)
    }

    /// Starts node `name` on address `i` with the configuration `text`.
    fn launch(
        &mut self,
        i: usize,
        name: &str,
        addrs: (SocketAddr, SocketAddr, SocketAddr),
        text: &str,
    ) {
        let (admin, _, gossip) = addrs;
        let proxy = SocketAddr::from((ip(i), self.http_port));
        let node = NodeProcess::start_text(
            &binaries::picket(),
            self.dir.path(),
            name,
            (proxy, admin, gossip),
            text,
            &[],
        );
        self.nodes.push(node);
    }

    /// The configuration of node `name` on address `i` at `addrs` (admin,
    /// feed, gossip), of `acme`.
    fn text(
        &self,
        i: usize,
        name: &str,
        addrs: (SocketAddr, SocketAddr, SocketAddr),
        acme: &Acme<'_>,
    ) -> String {
        let (admin, feed, gossip) = addrs;
        let seeds: Vec<String> = self.seeds.iter().map(|s| format!("\"{s}\"")).collect();
        let certificates: String = acme
            .certificates
            .iter()
            .map(|names| {
                let names: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
                format!("[[certificate]]\nacme = [{}]\n\n", names.join(", "))
            })
            .collect();
        format!(
            "[node]\nname = \"{name}\"\nlisten = \"{ip}:{http}\"\nlisten_tls = \"{ip}:{tls}\"\nadmin = \"{admin}\"\nfeed = \"{feed}\"\n\n\
             [cluster]\nid = \"acme\"\ngossip = \"{gossip}\"\nseeds = [{seeds}]\nkey_file = {key:?}\ngossip_interval = \"200ms\"\n\n\
             [acme]\ndirectory = \"{directory}\"\nemail = \"ops@example.com\"\nca = {ca:?}\nissuers = {issuers:?}\ncache = {cache:?}\nchallenge = \"{challenge}\"\n\n\
             {certificates}\
             [[route]]\nname = \"shop\"\nreplicas = [\"{upstream}\"]\n",
            ip = ip(i),
            http = self.http_port,
            tls = self.tls_port,
            seeds = seeds.join(", "),
            key = self.key.display().to_string(),
            directory = acme.pebble.directory,
            ca = acme.ca.display().to_string(),
            issuers = acme.pebble.issuers_file.display().to_string(),
            cache = self
                .dir
                .path()
                .join(format!("cache-{name}"))
                .display()
                .to_string(),
            challenge = self.challenge,
            upstream = self.upstream.addr,
        )
    }

    /// Rewrites node `name`'s file (on address `i`) for `acme`, and tells
    /// it to reload (SIGHUP) at once.
    fn reconfigure(&self, i: usize, name: &str, acme: &Acme<'_>) {
        let node = self.node(name);
        let feed = self
            .feeds
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .expect("the node's feed");
        let text = self.text(i, name, (node.admin, feed, node.gossip), acme);
        let partial = node.config.with_extension("toml.new");
        std::fs::write(&partial, text).expect("write the configuration");
        std::fs::rename(&partial, &node.config).expect("replace the configuration");
        let pid = node.pid().expect("a running node").to_string();
        let status = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIGHUP to {name}");
    }

    fn node(&self, name: &str) -> &NodeProcess {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .expect("a node of the test")
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeProcess {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .expect("a node of the test")
    }

    /// Every node's log, and Pebble's, for a failure's message.
    fn logs(&self) -> String {
        let mut text = String::new();
        for node in &self.nodes {
            text.push_str(&format!("--- {} ---\n{}\n", node.name, node.log_text()));
        }
        text.push_str(&format!("--- pebble ---\n{}", self.pebble.log()));
        text
    }

    /// Waits until every node of `nodes` serves the same certificate
    /// (another than `not`); returns its serial and who ordered it.
    async fn serving(
        &self,
        nodes: &[&str],
        not: Option<&str>,
        within: Duration,
    ) -> (String, String) {
        let deadline = Instant::now() + within;
        loop {
            let mut states = Vec::new();
            for name in nodes {
                states.push(acme_state(self.node(name)).await);
            }
            let first = states[0].clone();
            let agreed = states.iter().all(|s| {
                s.as_ref().is_some_and(|s| {
                    s.phase == "serving"
                        && Some(&s.serial) == first.as_ref().map(|f| &f.serial)
                        && Some(s.serial.as_str()) != not
                })
            });
            if agreed && let Some(state) = first {
                return (state.serial, state.issued_by);
            }
            assert!(
                Instant::now() < deadline,
                "not every node serves a new certificate within {within:?}: {states:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The serial of the certificate node `i` shows for `name`, verified
    /// against Pebble's root, and the status of `GET /` through it.
    async fn shown(
        &self,
        i: usize,
        name: &str,
        roots: &Arc<rustls::ClientConfig>,
    ) -> anyhow::Result<(String, u16)> {
        let addr = SocketAddr::from((ip(i), self.tls_port));
        let (answer, leaf, _) = picket_tests::tls::get(addr, Arc::clone(roots), name, "/").await?;
        Ok((serial_of(leaf.as_ref()), answer.status.as_u16()))
    }
}

/// A node's state of the certificate, from its `/v1/node`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    phase: String,
    serial: String,
    issued_by: String,
    orderer: String,
}

/// A node's `/v1/node`; `Null` while it does not answer.
async fn node_json(node: &NodeProcess) -> serde_json::Value {
    let answer = client::get(node.admin, "admin", "/v1/node").await;
    answer
        .ok()
        .and_then(|a| serde_json::from_slice(&a.body).ok())
        .unwrap_or_default()
}

/// Waits until the node's state of the certificate is in `phase`, and
/// returns the whole `/v1/node`.
async fn node_in_phase(
    node: &NodeProcess,
    phase: &str,
    within: Duration,
    logs: impl Fn() -> String,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let json = node_json(node).await;
        if json["acme"][0]["phase"] == phase {
            return json;
        }
        assert!(
            Instant::now() < deadline,
            "not {phase} within {within:?}: {json}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn acme_state(node: &NodeProcess) -> Option<State> {
    let json = node_json(node).await;
    let state = json["acme"].as_array()?.first()?.clone();
    let text = |field: &str| state[field].as_str().unwrap_or_default().to_string();
    Some(State {
        phase: text("phase"),
        serial: text("serial"),
        issued_by: text("issued_by"),
        orderer: text("orderer"),
    })
}

/// The serial number of a DER certificate, lowercase hex (the content of
/// its INTEGER, as the node reports it).
fn serial_of(der: &[u8]) -> String {
    /// The tag, the content and what follows of the element at `at`.
    fn element(der: &[u8], at: usize) -> (u8, &[u8], usize) {
        let tag = der[at];
        let first = der[at + 1];
        let (len, start) = if first < 0x80 {
            (usize::from(first), at + 2)
        } else {
            let n = usize::from(first & 0x7f);
            let len = der[at + 2..at + 2 + n]
                .iter()
                .fold(0usize, |l, b| (l << 8) | usize::from(*b));
            (len, at + 2 + n)
        };
        (tag, &der[start..start + len], start + len)
    }
    let (_, certificate, _) = element(der, 0);
    let (_, tbs, _) = element(certificate, 0);
    let (tag, _, next) = element(tbs, 0);
    // An explicit version ([0]) comes first when present.
    let at = if tag == 0xa0 { next } else { 0 };
    let (_, serial, _) = element(tbs, at);
    serial.iter().map(|b| format!("{b:02x}")).collect()
}

/// The value of a sample in a node's `/metrics`, 0 when absent.
async fn metric(node: &NodeProcess, sample: &str) -> f64 {
    node.metric(sample).await.unwrap_or(0.0)
}

const ISSUED: &str = "picket_acme_orders_total{certificate=\"shop.test\",result=\"issued\"}";
const ORDERING: &str = "ordering an ACME certificate";

fn available() -> bool {
    require("Pebble (Debian's pebble package)", pebble::available())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_obtain_one_certificate_validated_at_a_node_that_did_not_order_it() {
    if !available() {
        return;
    }
    let names = names("one", 3);
    let ordering = orderer(&names);
    let validating = (ordering + 1) % 3;
    let mut cluster = Cluster::new(validating, None, "http-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let started = Instant::now();
    let (serial, issued_by) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    println!(
        "three nodes serve {serial}, {:?} after they started",
        started.elapsed()
    );
    assert_eq!(
        issued_by, names[ordering],
        "the rendezvous orderer ordered it"
    );
    assert_ne!(validating, ordering, "validated elsewhere");
    // The CA validated every name at the node that did not order.
    let log = cluster.pebble.log();
    assert!(
        log.contains("Attempting to validate w/ HTTP"),
        "Pebble validated over HTTP: {log}"
    );
    // One order in the whole cluster.
    let mut issued = 0.0;
    for node in &cluster.nodes {
        issued += metric(node, ISSUED).await;
    }
    assert_eq!(issued, 1.0, "one order for the cluster\n{}", cluster.logs());
    // /v1/node and /v1/cluster answer as the OpenAPI description says,
    // each node's state of the certificate in them.
    let spec = crate::status_api::openapi();
    for (path, documented) in [("/v1/node", "/v1/node"), ("/v1/cluster", "/v1/cluster")] {
        let answer = client::get(cluster.nodes[0].admin, "admin", path)
            .await
            .expect("the status API");
        let json: serde_json::Value = serde_json::from_slice(&answer.body).expect("JSON");
        crate::status_api::check(&spec, documented, "200", &json);
    }
    // picket-tui, attached to any node, shows every node serving it (once
    // the node has heard the others' states: a few gossip rounds).
    let feed = cluster.feeds[validating].1;
    let serving = format!("serving {}", &serial[..8]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let output = std::process::Command::new(binaries::picket_tui())
            .args(["--insecure", "--once", &feed.to_string()])
            .output()
            .expect("picket-tui runs");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let row = text
            .lines()
            .find(|l| l.contains("shop.test") && !l.contains("certificate"))
            .map(str::to_string);
        if row
            .as_ref()
            .is_some_and(|r| r.matches(&serving).count() == 3)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "picket-tui never showed every node serving, side by side: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every node serves it, for each of its names, verified against the
    // CA's root, and proxies through it.
    let roots = cluster.pebble.issued_roots().await;
    for i in 0..3 {
        for name in NAMES {
            let (shown, status) = cluster.shown(i, name, &roots).await.unwrap_or_else(|e| {
                panic!("node {i} over TLS for {name}: {e:#}\n{}", cluster.logs())
            });
            assert_eq!(shown, serial, "node {i} for {name}");
            assert_eq!(status, 200, "node {i} proxies over it");
        }
    }
    // A restarted node serves it from its cache at once, ordering nothing.
    let restarted = names[validating].clone();
    cluster.node_mut(&restarted).kill();
    cluster.nodes.retain(|n| n.name != restarted);
    let cache = cluster.dir.path().join(format!("cache-{restarted}"));
    assert!(cache.join("shop.test.pem").exists(), "kept in its cache");
    let back = Instant::now();
    cluster.start(validating, &restarted);
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        if let Ok((shown, _)) = cluster.shown(validating, NAMES[0], &roots).await {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node never served\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "a restarted node served the certificate {:?} after it started",
        back.elapsed()
    );
    assert_eq!(shown, serial, "from its cache");
    assert!(
        !cluster.node(&restarted).log_text().contains(ORDERING),
        "the restarted node ordered nothing"
    );
    assert_eq!(metric(cluster.node(&restarted), ISSUED).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_later_serves_the_certificate_without_ordering() {
    if !available() {
        return;
    }
    let names = names("late", 4);
    let first: Vec<String> = names[..3].to_vec();
    let ordering = orderer(&first);
    let mut cluster = Cluster::new((ordering + 1) % 3, None, "http-01", 3).await;
    for (i, name) in first.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = first.iter().map(String::as_str).collect();
    let (serial, _) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    let joined = Instant::now();
    cluster.start(3, &names[3]);
    let (late, _) = cluster
        .serving(&[names[3].as_str()], None, Duration::from_secs(30))
        .await;
    println!(
        "a node that joined later served the certificate {:?} after it started",
        joined.elapsed()
    );
    assert_eq!(late, serial, "the cluster's certificate");
    let roots = cluster.pebble.issued_roots().await;
    let (shown, status) = cluster.shown(3, NAMES[1], &roots).await.expect("over TLS");
    assert_eq!((shown.as_str(), status), (serial.as_str(), 200));
    let node = cluster.node(&names[3]);
    assert!(!node.log_text().contains(ORDERING), "it ordered nothing");
    assert_eq!(metric(node, ISSUED).await, 0.0);
    // Whoever orders for four nodes now, nothing was ordered again.
    let mut issued = 0.0;
    for node in &cluster.nodes {
        issued += metric(node, ISSUED).await;
    }
    assert_eq!(issued, 1.0, "one order for the cluster\n{}", cluster.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_alpn_01_is_answered_by_a_node_that_did_not_order() {
    if !available() {
        return;
    }
    let names = names("alpn", 3);
    let ordering = orderer(&names);
    let validating = (ordering + 2) % 3;
    let mut cluster = Cluster::new(validating, None, "tls-alpn-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (serial, issued_by) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    assert_eq!(issued_by, names[ordering]);
    // The CA's handshakes (no client has connected yet) reached the
    // validating node only.
    let handshakes = |i: usize| {
        let node = cluster.node(&names[i]);
        async move { metric(node, "picket_tls_handshakes_total{kind=\"full\"}").await }
    };
    assert!(
        handshakes(validating).await >= 2.0,
        "one per name at least\n{}",
        cluster.logs()
    );
    assert_eq!(handshakes(ordering).await, 0.0, "none at the orderer");
    let roots = cluster.pebble.issued_roots().await;
    for i in 0..3 {
        let (shown, _) = cluster.shown(i, NAMES[0], &roots).await.expect("over TLS");
        assert_eq!(shown, serial, "node {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_hands_over_when_its_node_is_killed_in_the_middle() {
    if !available() {
        return;
    }
    let names = names("handover", 3);
    let first = orderer(&names);
    let rest: Vec<String> = names
        .iter()
        .filter(|n| **n != names[first])
        .cloned()
        .collect();
    let second = names
        .iter()
        .position(|n| *n == rest[orderer(&rest)])
        .expect("a node");
    let third = (0..3)
        .find(|i| *i != first && *i != second)
        .expect("a node");
    // The CA validates at the node that neither orders.
    let mut cluster = Cluster::new(third, None, "http-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    // Killed once it says it is ordering.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = acme_state(cluster.node(&names[first])).await;
        if state.as_ref().is_some_and(|s| s.phase == "ordering") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} never ordered: {state:?}\n{}",
            names[first],
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = Instant::now();
    cluster.node_mut(&names[first]).kill();
    let survivors = [names[second].as_str(), names[third].as_str()];
    let (_, issued_by) = cluster
        .serving(&survivors, None, Duration::from_secs(60))
        .await;
    println!(
        "the order was handed over and served {:?} after its node was killed",
        killed.elapsed()
    );
    assert_eq!(
        issued_by, names[second],
        "the next node by rendezvous ordered it"
    );
    for name in survivors {
        let state = acme_state(cluster.node(name)).await.expect("a state");
        assert_eq!(
            state.orderer, names[second],
            "{name} reckons the new orderer"
        );
        let log = cluster.node(name).log_text();
        let handed: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ACME orders of the certificate pass to another node"))
            .collect();
        assert_eq!(handed.len(), 1, "{name} says it once: {handed:?}");
        assert!(
            handed[0].contains(&format!("to=\"{}\"", names[second])),
            "{}",
            handed[0]
        );
    }
    assert_eq!(metric(cluster.node(&names[second]), ISSUED).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_under_100_requests_a_second_over_tls_loses_none() {
    if !available() {
        return;
    }
    let names = names("renew", 3);
    let ordering = orderer(&names);
    // Certificates of 24 s: renewed at 16 s.
    let mut cluster = Cluster::new((ordering + 1) % 3, Some(24), "http-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (old, _) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    let roots = cluster.pebble.issued_roots().await;
    let cluster = Arc::new(cluster);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = {
        let cluster = Arc::clone(&cluster);
        let roots = Arc::clone(&roots);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(10));
            let mut sent = 0usize;
            let mut requests = tokio::task::JoinSet::new();
            while !*stopped.borrow() {
                ticks.tick().await;
                let (cluster, roots) = (Arc::clone(&cluster), Arc::clone(&roots));
                let i = sent % 3;
                sent += 1;
                requests.spawn(async move { cluster.shown(i, NAMES[sent % 2], &roots).await });
            }
            let mut outcomes = Vec::new();
            while let Some(outcome) = requests.join_next().await {
                outcomes.push(
                    outcome
                        .expect("a request task")
                        .map_err(|e| format!("{e:#}")),
                );
            }
            outcomes
        })
    };
    let (new, issued_by) = cluster
        .serving(&all, Some(&old), Duration::from_secs(60))
        .await;
    // Two seconds of requests on the new certificate.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    stop.send_replace(true);
    let outcomes = load.await.expect("the load");
    let failed: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    let answered: Vec<&(String, u16)> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    let on = |serial: &str| answered.iter().filter(|(s, _)| s == serial).count();
    println!(
        "renewal under load: {} requests over TLS, {} failed, {} on the old certificate, {} on the new",
        outcomes.len(),
        failed.len(),
        on(&old),
        on(&new)
    );
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert!(
        answered.iter().all(|(_, status)| *status == 200),
        "every answer 200"
    );
    assert!(outcomes.len() >= 500, "the load ran: {}", outcomes.len());
    assert!(on(&old) > 0 && on(&new) > 100, "both served under load");
    assert_eq!(issued_by, names[ordering], "renewed by its orderer");
    assert_eq!(metric(cluster.node(&names[ordering]), ISSUED).await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_order_shows_the_cas_error_and_waits_before_the_next() {
    if !available() {
        return;
    }
    let names = names("failing", 1);
    // The CA validates at an address where nothing listens.
    let mut cluster = Cluster::new(8, None, "http-01", 1).await;
    cluster.start(0, &names[0]);
    let node = cluster.node(&names[0]);
    let json = node_in_phase(node, "failing", Duration::from_secs(60), || cluster.logs()).await;
    crate::status_api::check(&crate::status_api::openapi(), "/v1/node", "200", &json);
    let state = json["acme"][0].clone();
    let error = state["error"].as_str().expect("the error");
    assert!(
        error.contains("acme-challenge") && error.contains("127.0.0.9"),
        "the CA's own words, naming where it looked: {error}"
    );
    let retry_at = state["retry_at_unix"].as_i64().expect("when it retries");
    let now = picket::clock::now_unix();
    assert!(
        retry_at > now,
        "it waits before ordering again: {retry_at} vs {now}"
    );
    assert!(state["serial"].is_null(), "nothing served");
    let failed = "picket_acme_orders_total{certificate=\"shop.test\",result=\"failed\"}";
    assert_eq!(metric(node, failed).await, 1.0);
    assert_eq!(
        metric(
            node,
            "picket_acme_certificate_phase{certificate=\"shop.test\",phase=\"failing\"}"
        )
        .await,
        1.0
    );
    let logged = node.log_text().matches("ACME order failed").count();
    assert_eq!(logged, 1, "one line per failed order");
    // Restarted, it keeps the failure and its time: no new order before.
    let name = names[0].clone();
    cluster.node_mut(&name).kill();
    cluster.nodes.clear();
    cluster.start(0, &name);
    let node = cluster.node(&name);
    let again = node_in_phase(node, "failing", Duration::from_secs(30), String::new).await;
    let again = &again["acme"][0];
    assert_eq!(
        again["retry_at_unix"], state["retry_at_unix"],
        "the same time to order again"
    );
    assert_eq!(again["error"], state["error"]);
    // Past its first gossip rounds, still no order.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        metric(node, failed).await,
        0.0,
        "no order since the restart"
    );
    // The log runs on across the restart: the first process's order only.
    let log = node.log_text();
    assert_eq!(log.matches(ORDERING).count(), 1, "{log}");
    assert!(
        log.contains("ACME certificate managed certificate=shop.test phase=\"failing\""),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_reach_the_ca_passes_its_orders_to_the_next() {
    if !available() {
        return;
    }
    let names = names("unreachable", 2);
    let stuck = orderer(&names);
    let other = 1 - stuck;
    let mut cluster = Cluster::new(other, None, "http-01", 2).await;
    // The ordering node trusts another CA than the directory's: every
    // order it places fails at the TLS handshake with the CA.
    let elsewhere = cluster.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("a directory");
    let wrong = picket_tests::tls::TestCa::new("another CA").write_pem(&elsewhere);
    cluster.start_trusting(stuck, &names[stuck], &wrong);
    cluster.start(other, &names[other]);
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (_, issued_by) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    assert_eq!(
        issued_by, names[other],
        "ordered by the node that reaches the CA"
    );
    let failed = "picket_acme_orders_total{certificate=\"shop.test\",result=\"failed\"}";
    let node = cluster.node(&names[stuck]);
    assert!(
        metric(node, failed).await >= 1.0,
        "it tried first\n{}",
        cluster.logs()
    );
    assert_eq!(metric(node, ISSUED).await, 0.0);
    let json = node_json(node).await;
    assert_eq!(json["acme"][0]["phase"], "serving");
    assert!(
        json["acme"][0]["error"].is_null(),
        "its failure is moot once served: {json}"
    );
    assert_eq!(
        json["acme"][0]["orderer"],
        names[stuck].as_str(),
        "its own again once well"
    );
}

/// Node `node`'s state of the certificate `name` (its `/v1/node`), once it
/// has one.
async fn state_of(node: &NodeProcess, name: &str) -> serde_json::Value {
    let json = node_json(node).await;
    json["acme"]
        .as_array()
        .and_then(|states| states.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or_default()
}

/// Waits until every node of `nodes` serves the certificate `name` with
/// one serial; returns it.
async fn all_serve(cluster: &Cluster, nodes: &[&str], name: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let mut serials = Vec::new();
        for node in nodes {
            let state = state_of(cluster.node(node), name).await;
            serials.push((state["phase"].clone(), state["serial"].clone()));
        }
        let first = serials[0].1.clone();
        if serials
            .iter()
            .all(|(phase, serial)| phase == "serving" && *serial == first && first.is_string())
        {
            return first.as_str().unwrap_or_default().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{name} not served by every node within {within:?}: {serials:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three nodes reloaded in the same 100 ms add a certificate, ten times
/// over: each time the CA receives exactly one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reloaded_together_add_a_certificate_and_the_ca_sees_one_order() {
    if !available() {
        return;
    }
    let names = names("reload", 3);
    let mut cluster = Cluster::new(1, None, "http-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    cluster.serving(&all, None, Duration::from_secs(60)).await;
    assert_eq!(cluster.pebble.orders(), 1, "{}", cluster.pebble.log());
    let added: Vec<String> = (0..10).map(|k| format!("blog{k}.test")).collect();
    for k in 0..added.len() {
        let mut certificates: Vec<&[&str]> = vec![&NAMES];
        let each: Vec<[&str; 1]> = added[..=k].iter().map(|n| [n.as_str()]).collect();
        certificates.extend(each.iter().map(|n| &n[..]));
        let before = cluster.pebble.orders();
        let acme = Acme {
            pebble: &cluster.pebble,
            ca: &cluster.pebble.ca_file,
            certificates: &certificates,
        };
        // Back to back: however close together (or far apart, on a
        // loaded machine) the reloads land, the CA sees one order.
        for (i, name) in names.iter().enumerate() {
            cluster.reconfigure(i, name, &acme);
        }
        all_serve(&cluster, &all, &added[k], Duration::from_secs(60)).await;
        // What any node could still order has settled by now.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            cluster.pebble.orders() - before,
            1,
            "round {k}: orders at the CA\n{}",
            cluster.logs()
        );
    }
    assert!(
        cluster.pebble.accounts() <= 3,
        "one account per node, reused by every order: {}",
        cluster.pebble.accounts()
    );
}

/// A node that starts with three certificates orders them at once, with
/// one account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_at_once_make_one_account() {
    if !available() {
        return;
    }
    let names = names("account", 1);
    let mut cluster = Cluster::new(0, None, "http-01", 1).await;
    let addrs = cluster.addresses(0, &names[0]);
    let acme = Acme {
        pebble: &cluster.pebble,
        ca: &cluster.pebble.ca_file,
        certificates: &[&NAMES, &["blog.test"], &["api.test"]],
    };
    let text = cluster.text(0, &names[0], addrs, &acme);
    cluster.launch(0, &names[0], addrs, &text);
    let node = [names[0].as_str()];
    for name in ["shop.test", "blog.test", "api.test"] {
        all_serve(&cluster, &node, name, Duration::from_secs(60)).await;
    }
    assert_eq!(cluster.pebble.orders(), 3);
    assert_eq!(cluster.pebble.accounts(), 1, "{}", cluster.pebble.log());
    let cache = cluster.dir.path().join(format!("cache-{}", names[0]));
    let files: Vec<String> = std::fs::read_dir(&cache)
        .expect("the cache")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files.iter().filter(|f| f.starts_with("account-")).count(),
        1,
        "{files:?}"
    );
    assert!(files.iter().all(|f| !f.ends_with(".partial")), "{files:?}");
}

/// A fourth node pointed at a second CA orders its own certificate there
/// and passes it on: the three nodes of the first CA refuse it (another
/// directory), count it, and keep serving, and keeping, their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_ca_replaces_no_certificate_anywhere() {
    if !available() {
        return;
    }
    let names = names("twoca", 4);
    let mut cluster = Cluster::new(0, None, "http-01", 4).await;
    for (i, name) in names.iter().enumerate().take(3) {
        cluster.start(i, name);
    }
    let first: Vec<&str> = names[..3].iter().map(String::as_str).collect();
    let (serial, _) = cluster.serving(&first, None, Duration::from_secs(60)).await;
    let dir = cluster.dir.path().to_path_buf();
    let cache = |name: &str| {
        std::fs::read(dir.join(format!("cache-{name}/shop.test.pem")))
            .expect("the cached certificate")
    };
    let kept: Vec<Vec<u8>> = first.iter().map(|n| cache(n)).collect();
    // The second CA validates at the fourth node.
    let second = Pebble::start(Setup {
        listen: Ipv4Addr::LOCALHOST,
        http_port: cluster.http_port,
        tls_port: cluster.tls_port,
        validate_at: ip(3),
        validity: None,
    })
    .await;
    let addrs = cluster.addresses(3, &names[3]);
    let acme = Acme {
        pebble: &second,
        ca: &second.ca_file,
        certificates: &[&NAMES],
    };
    let text = cluster.text(3, &names[3], addrs, &acme);
    cluster.launch(3, &names[3], addrs, &text);
    let theirs = node_in_phase(
        cluster.node(&names[3]),
        "serving",
        Duration::from_secs(60),
        || cluster.logs(),
    )
    .await;
    assert_ne!(theirs["acme"][0]["serial"], serial.as_str());
    assert_eq!(second.orders(), 1);
    let refused =
        "picket_acme_certificates_refused_total{certificate=\"shop.test\",reason=\"directory\"}";
    for name in &first {
        let node = cluster.node(name);
        let deadline = Instant::now() + Duration::from_secs(20);
        while metric(node, refused).await < 1.0 {
            assert!(
                Instant::now() < deadline,
                "{name} never refused the other CA's certificate\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // A few more rounds: counted once, nothing replaced.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let roots = cluster.pebble.issued_roots().await;
    for (i, name) in first.iter().enumerate() {
        assert_eq!(metric(cluster.node(name), refused).await, 1.0, "{name}");
        assert_eq!(
            state_of(cluster.node(name), "shop.test").await["serial"],
            serial.as_str()
        );
        let (shown, _) = cluster
            .shown(i, NAMES[0], &roots)
            .await
            .expect("its own CA's");
        assert_eq!(shown, serial, "{name} serves the first CA's");
        assert_eq!(cache(name), kept[i], "{name} keeps the first CA's");
    }
}

/// A name added to the certificate on three nodes, one after the other,
/// while 100 requests a second go over TLS to its first name on every
/// node: none fails; the old certificate serves its names until the new
/// one, ordered once, serves all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_added_node_by_node_under_load_loses_no_request() {
    if !available() {
        return;
    }
    let names = names("addname", 3);
    let mut cluster = Cluster::new(0, None, "http-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (old, _) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    let roots = cluster.pebble.issued_roots().await;
    let cluster = Arc::new(cluster);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = {
        let cluster = Arc::clone(&cluster);
        let roots = Arc::clone(&roots);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(10));
            let mut requests = tokio::task::JoinSet::new();
            let mut sent = 0usize;
            while !*stopped.borrow() {
                ticks.tick().await;
                let (cluster, roots) = (Arc::clone(&cluster), Arc::clone(&roots));
                let i = sent % 3;
                sent += 1;
                requests.spawn(async move { cluster.shown(i, NAMES[0], &roots).await });
            }
            let mut outcomes = Vec::new();
            while let Some(outcome) = requests.join_next().await {
                outcomes.push(
                    outcome
                        .expect("a request task")
                        .map_err(|e| format!("{e:#}")),
                );
            }
            outcomes
        })
    };
    let three = ["shop.test", "www.shop.test", "api.shop.test"];
    let acme = Acme {
        pebble: &cluster.pebble,
        ca: &cluster.pebble.ca_file,
        certificates: &[&three],
    };
    for (i, name) in names.iter().enumerate() {
        cluster.reconfigure(i, name, &acme);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        let new = all_serve(&cluster, &all, "shop.test", Duration::from_secs(60)).await;
        if new != old {
            break new;
        }
        assert!(
            Instant::now() < deadline,
            "never renewed for the new name\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for i in 0..3 {
        let (shown, _) = cluster
            .shown(i, "api.shop.test", &roots)
            .await
            .unwrap_or_else(|e| panic!("node {i} for the new name: {e:#}\n{}", cluster.logs()));
        assert_eq!(shown, new);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send_replace(true);
    let outcomes = load.await.expect("the load");
    let failed: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    println!(
        "a name added node by node under load: {} requests over TLS, {} failed",
        outcomes.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "failed: {failed:?}");
    assert!(outcomes.len() >= 900, "the load ran: {}", outcomes.len());
    assert_eq!(
        cluster.pebble.orders(),
        2,
        "the first certificate, then its successor"
    );
}

/// A node whose `[acme] directory` changes to another CA orders there at
/// once, serving the first CA's certificate until the new one comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_change_orders_at_the_new_ca() {
    if !available() {
        return;
    }
    let names = names("moved", 1);
    let mut cluster = Cluster::new(0, None, "http-01", 1).await;
    cluster.start(0, &names[0]);
    let (old, _) = cluster
        .serving(&[names[0].as_str()], None, Duration::from_secs(60))
        .await;
    let production = Pebble::start(Setup {
        listen: Ipv4Addr::LOCALHOST,
        http_port: cluster.http_port,
        tls_port: cluster.tls_port,
        validate_at: ip(0),
        validity: None,
    })
    .await;
    let acme = Acme {
        pebble: &production,
        ca: &production.ca_file,
        certificates: &[&NAMES],
    };
    cluster.reconfigure(0, &names[0], &acme);
    // Until the new one comes, the old one serves.
    let staging_roots = cluster.pebble.issued_roots().await;
    let (shown, _) = cluster
        .shown(0, NAMES[0], &staging_roots)
        .await
        .expect("still served");
    assert_eq!(shown, old);
    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        let state = state_of(cluster.node(&names[0]), "shop.test").await;
        if state["phase"] == "serving" && state["serial"] != old.as_str() {
            break state["serial"].as_str().unwrap_or_default().to_string();
        }
        assert!(
            production.orders() <= 1 && Instant::now() < deadline,
            "not ordered once at the new CA within 60 s: {state}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(production.orders(), 1);
    let roots = production.issued_roots().await;
    let (shown, status) = cluster
        .shown(0, NAMES[0], &roots)
        .await
        .expect("the new CA's");
    assert_eq!((shown, status), (new, 200));
}

/// A holder of the cluster key writes a self-signed certificate for the
/// managed name, valid until 9999, into gossip: every node refuses it,
/// counts it and logs it once, never serves it, never keeps it, never
/// passes it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_planted_with_the_cluster_key_is_refused_everywhere() {
    if !available() {
        return;
    }
    let names = names("planted", 3);
    let mut cluster = Cluster::new(0, None, "http-01", 3).await;
    for (i, name) in names.iter().enumerate() {
        cluster.start(i, name);
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (serial, _) = cluster.serving(&all, None, Duration::from_secs(60)).await;
    let rogue = Rogue::join(&cluster).await;
    let forged = picket_tests::tls::self_signed_pem(&NAMES, "9999-12-31");
    let issued = picket_proto::acme::Issued {
        serial: "ffff".into(),
        not_before_unix: 1_767_225_600,
        not_after_unix: 253_402_214_400,
        by: "rogue".into(),
        directory: cluster.pebble.directory.clone(),
        parts: 0,
        digest: String::new(),
    };
    let keys = picket::acme::shared::pass_on(NAMES[0], &issued, &forged).expect("it fits");
    let digest = picket::acme::shared::digest(&forged);
    for (key, value) in &keys {
        rogue.membership.set_own(key, value).await;
    }
    let refused =
        "picket_acme_certificates_refused_total{certificate=\"shop.test\",reason=\"lifetime\"}";
    for name in &all {
        let node = cluster.node(name);
        let deadline = Instant::now() + Duration::from_secs(20);
        while metric(node, refused).await < 1.0 {
            assert!(
                Instant::now() < deadline,
                "{name} never refused it\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let roots = cluster.pebble.issued_roots().await;
    for (i, name) in all.iter().enumerate() {
        let node = cluster.node(name);
        assert_eq!(metric(node, refused).await, 1.0, "{name}: counted once");
        let lines = node
            .log_text()
            .lines()
            .filter(|l| l.contains("is not the CA's"))
            .count();
        assert_eq!(lines, 1, "{name}: logged once");
        let (shown, _) = cluster.shown(i, NAMES[0], &roots).await.expect("the CA's");
        assert_eq!(shown, serial, "{name} serves the CA's");
        let cached = std::fs::read_to_string(
            cluster
                .dir
                .path()
                .join(format!("cache-{name}/shop.test.pem")),
        )
        .expect("the cache");
        assert_ne!(
            picket::acme::shared::digest(&cached),
            digest,
            "{name} keeps no forgery"
        );
    }
    // No honest node passes it on.
    let entries = rogue.membership.acme_entries().await;
    let passed = picket::acme::shared::read(&entries);
    assert!(
        passed
            .certificates
            .iter()
            .all(|c| c.node == "rogue" || c.issued.digest != digest),
        "passed on: {:?}",
        passed.certificates
    );
}

/// A directory URL that is not one, and a directory whose certificate
/// `[acme] ca` does not sign: each failure says what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_the_directory_say_what_to_change() {
    if !available() {
        return;
    }
    let names = names("wrongdir", 1);
    let mut cluster = Cluster::new(0, None, "http-01", 1).await;
    let addrs = cluster.addresses(0, &names[0]);
    let acme = Acme {
        pebble: &cluster.pebble,
        ca: &cluster.pebble.ca_file,
        certificates: &[&NAMES],
    };
    let text = cluster.text(0, &names[0], addrs, &acme).replace(
        &cluster.pebble.directory,
        &format!("{}ectory", cluster.pebble.directory),
    );
    cluster.launch(0, &names[0], addrs, &text);
    let json = node_in_phase(
        cluster.node(&names[0]),
        "failing",
        Duration::from_secs(60),
        || cluster.logs(),
    )
    .await;
    let error = json["acme"][0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("answers 404")
            && error.contains("is [acme] directory the CA's directory URL"),
        "{error}"
    );
    // Another CA's roots for the directory.
    let elsewhere = cluster.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("a directory");
    let wrong = picket_tests::tls::TestCa::new("another CA").write_pem(&elsewhere);
    let acme = Acme {
        pebble: &cluster.pebble,
        ca: &wrong,
        certificates: &[&NAMES, &["blog.test"]],
    };
    cluster.reconfigure(0, &names[0], &acme);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = state_of(cluster.node(&names[0]), "blog.test").await;
        let error = state["error"].as_str().unwrap_or_default();
        if state["phase"] == "failing" {
            assert!(error.contains("set [acme] ca"), "{error}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never failing: {state}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gossip member that holds the cluster key and writes what it likes.
struct Rogue {
    membership: Arc<picket::gossip::Membership>,
    _trigger: picket::shutdown::Trigger,
    _tasks: picket::shutdown::Tasks,
}

impl Rogue {
    async fn join(cluster: &Cluster) -> Rogue {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a gossip socket");
        let gossip = socket.local_addr().expect("its address");
        let settings = picket::config::ClusterSettings {
            id: "acme".into(),
            gossip,
            advertise: None,
            seeds: cluster.seeds.iter().map(ToString::to_string).collect(),
            key_file: Some(cluster.key.clone()),
            insecure: false,
            gossip_interval: Duration::from_millis(200),
        };
        let keys = picket::gossip::keys::load(&settings, None)
            .expect("the key")
            .expect("a key");
        let (trigger, shutdown) = picket::shutdown::channel();
        let mut tasks = picket::shutdown::Tasks::default();
        let membership = picket::gossip::start(
            picket::gossip::Joining {
                settings: Some(&settings),
                keys: Some(Arc::new(arc_swap::ArcSwap::from_pointee(keys))),
                wire: picket::gossip::Wire::Udp(Arc::new(std::sync::Mutex::new(Some(socket)))),
                me: picket::gossip::Me {
                    info: picket_proto::NodeInfo {
                        name: "rogue".into(),
                        version: "rogue".into(),
                        admin: "127.0.0.1:1".into(),
                        feed: None,
                        feed_fingerprint: None,
                        runtime: "none".into(),
                        started_unix_ms: 1,
                    },
                },
                verdicts: tokio::sync::watch::channel(Arc::default()).1,
                table: tokio::sync::watch::channel(None).1,
                certificates: tokio::sync::watch::channel(Arc::default()).1,
                metrics: Arc::new(picket::metrics::Metrics::new()),
            },
            shutdown,
            &mut tasks,
        )
        .await
        .expect("the rogue joins");
        Rogue {
            membership,
            _trigger: trigger,
            _tasks: tasks,
        }
    }
}

/// An order that waits for every node to answer its challenge (a member
/// that never says it does) is aborted by a reload that drops its
/// certificate: its challenge keys leave gossip at once, not at the
/// node's restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_aborted_by_a_reload_takes_its_challenges_out_of_gossip() {
    if !available() {
        return;
    }
    // A name that the rendezvous makes the orderer beside the rogue.
    let name = (0..)
        .map(|n| format!("aborted-{n}"))
        .find(|n| picket::acme::plan::orderer(NAMES[0], [n.as_str(), "rogue"]) == Some(n.as_str()))
        .expect("a name");
    let mut cluster = Cluster::new(0, None, "http-01", 1).await;
    let rogue = Rogue::join(&cluster).await;
    // The rogue manages the certificate too, and never answers.
    let state = picket_proto::acme::CertificateState {
        name: NAMES[0].into(),
        phase: picket_proto::acme::Phase::Waiting,
        serial: None,
        not_after_unix: None,
        renew_at_unix: None,
        orderer: None,
        issued_by: None,
        error: None,
        retry_at_unix: None,
    };
    rogue
        .membership
        .set_own(
            &format!("{}{}", picket_proto::acme::STATE_PREFIX, NAMES[0]),
            &picket_proto::gossip::encode_value(&state).expect("fits"),
        )
        .await;
    cluster.start(0, &name);
    let challenges = || async {
        let entries = rogue.membership.acme_entries().await;
        entries
            .into_iter()
            .filter(|e| e.node == name && e.key.starts_with(picket_proto::acme::HTTP_PREFIX))
            .map(|e| e.key)
            .collect::<Vec<String>>()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = loop {
        let written = challenges().await;
        if !written.is_empty() {
            break written;
        }
        assert!(
            Instant::now() < deadline,
            "no challenge written\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let acme = Acme {
        pebble: &cluster.pebble,
        ca: &cluster.pebble.ca_file,
        certificates: &[&["blog.test"]],
    };
    cluster.reconfigure(0, &name, &acme);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = challenges().await;
        if written.iter().all(|key| !now.contains(key)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the aborted order's challenges stay: {now:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
