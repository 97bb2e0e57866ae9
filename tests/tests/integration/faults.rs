//! The fault suite: a three-node cluster on loopback under a steady load
//! spread over its nodes, one fault at a time, each on a fresh cluster.
//! Every fault prints a `FAULT |` line: requests sent, failed by status,
//! latency, answers from a replica after it was gone, time to recover.
//!
//!   cargo test -p picket-tests --test integration -- --nocapture faults::
//!   cargo test -p picket-tests --test integration -- faults::under_load::gateway_node_partitioned
//!
//! Each fault is a test of its own (`under_load::<fault>`), so that one
//! failing hides none of the others; they take turns, so that they do not
//! compete for the machine's two cores.

// The /healthz prober measures wall time on a thread of its own.
#![allow(clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use picket::config::Config;
use picket_proto::Liveness;
use picket_proto::NodeInfo;
use picket_tests::client;
use picket_tests::cluster::{self, node_text_with};
use picket_tests::faults::{Load, Report, Sample, garbage_datagrams, malformed_requests, rss_kb};
use picket_tests::node::{Killable, TestNode, route};
use picket_tests::upstream::{Behaviour, Control, Upstream};
use picket_tui::app::{App, Msg};
use picket_tui::feed::{self, Trust};
use picket_tui::{theme, view};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep};

const INTERVAL: Duration = Duration::from_millis(200);
const RATE: u32 = 150;
const HOST: &str = "api.test";
const FEED: &str = "feed = \"127.0.0.1:0\"";
/// Suspect once a node's heartbeat is 5 intervals quiet (and the view,
/// rebuilt every interval, says so).
const SUSPECT_BOUND: Duration = Duration::from_millis(INTERVAL.as_millis() as u64 * 5 + 1000);
/// Dead once phi passes 8: about 18.4 mean heartbeat gaps, a gap being
/// an interval or less on a healthy cluster; twice that, plus a second.
const DEAD_BOUND: Duration = Duration::from_millis(INTERVAL.as_millis() as u64 * 37 + 1000);

fn api(replicas: &[SocketAddr]) -> String {
    route(
        "api",
        "/",
        replicas,
        "connect_timeout = \"1s\"\nfirst_answer_timeout = \"1s\"\ntries = 3",
    )
}

async fn three(dir: &std::path::Path, replicas: &[SocketAddr]) -> Vec<TestNode> {
    let routes = api(replicas);
    cluster::three(dir, FEED, [&routes, &routes, &routes], INTERVAL).await
}

fn proxies(nodes: &[TestNode]) -> Vec<SocketAddr> {
    nodes.iter().map(|n| n.proxy).collect()
}

async fn upstreams(names: &[&str]) -> Vec<Upstream> {
    let mut all = Vec::new();
    for name in names {
        all.push(Upstream::start(name, Behaviour::Echo).await);
    }
    all
}

fn after(samples: &[Sample], at: Instant, from: &str) -> usize {
    samples
        .iter()
        .filter(|s| s.sent >= at && s.upstream() == from)
        .count()
}

/// Waits until every node's verdict on `api` counts `ready` replicas;
/// returns how long after `since` that was. Panics after `within`.
async fn every_verdict(
    nodes: &[TestNode],
    ready: u32,
    since: Instant,
    within: Duration,
) -> Duration {
    for node in nodes {
        let left = within.saturating_sub(since.elapsed());
        node.verdict_until("api", "its verdict matches the replicas", left, |v| {
            v.ready == ready
        })
        .await;
    }
    since.elapsed()
}

async fn stop_all(nodes: Vec<TestNode>) {
    for node in nodes {
        node.stop().await;
    }
}

fn zero_failed(report: &Report) {
    report.print();
    assert_eq!(
        report.failed_total(),
        0,
        "{}: {:?}",
        report.fault,
        report.failed
    );
    assert!(report.sent > 100, "{}: a real load", report.fault);
}

/// A fresh cluster of three over `replicas`, a second of steady load, then
/// `fault` with the load still on; the load's samples and what `fault`
/// returned come back once the load and the nodes have stopped.
async fn under_load<T>(
    replicas: &[SocketAddr],
    fault: impl AsyncFnOnce(&[TestNode]) -> T,
) -> (Vec<Sample>, T) {
    let dir = tempfile::tempdir().unwrap();
    let nodes = three(dir.path(), replicas).await;
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    let out = fault(&nodes).await;
    let samples = load.stop().await;
    stop_all(nodes).await;
    (samples, out)
}

async fn replica_killed() {
    let mut replicas = upstreams(&["a", "b", "c"]).await;
    let addrs: Vec<SocketAddr> = replicas.iter().map(|u| u.addr).collect();
    let (samples, (killed, seen)) = under_load(&addrs, async |nodes| {
        let killed = Instant::now();
        replicas.remove(0).stop();
        let seen = every_verdict(nodes, 2, killed, Duration::from_secs(2)).await;
        sleep(Duration::from_secs(4)).await;
        (killed, seen)
    })
    .await;
    let mut report = Report::new("replica killed", &samples);
    report.after_gone = Some(after(&samples, killed + Duration::from_millis(50), "a"));
    report.recovered = Some(seen);
    zero_failed(&report);
    assert_eq!(report.after_gone, Some(0));
}

async fn replica_restarted_in_a_loop() {
    let mut replicas = upstreams(&["a", "b", "c"]).await;
    let addrs: Vec<SocketAddr> = replicas.iter().map(|u| u.addr).collect();
    let (samples, ()) = under_load(&addrs, async |_| {
        for _ in 0..5 {
            let addr = replicas.remove(0).stop();
            sleep(Duration::from_millis(600)).await;
            let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
            replicas.insert(0, Upstream::on(listener, "a", Behaviour::Echo));
            sleep(Duration::from_millis(600)).await;
        }
    })
    .await;
    zero_failed(&Report::new("replica restarted 5 times", &samples));
}

async fn replica_paused() {
    let control = Control::new(200);
    let paused = Upstream::start("a", Behaviour::Controlled(control.clone())).await;
    let rest = upstreams(&["b", "c"]).await;
    let (samples, seen) = under_load(&[paused.addr, rest[0].addr, rest[1].addr], async |nodes| {
        // Connections are still accepted; nothing answers.
        control.set_delay(Duration::from_secs(3600));
        let paused = Instant::now();
        // Ejected as silent on every node after its first bound.
        let seen = every_verdict(nodes, 2, paused, Duration::from_secs(3)).await;
        sleep(Duration::from_secs(4).saturating_sub(paused.elapsed())).await;
        control.set_delay(Duration::ZERO);
        sleep(Duration::from_secs(1)).await;
        seen
    })
    .await;
    let mut report = Report::new("replica paused 4 s", &samples);
    report.recovered = Some(seen);
    zero_failed(&report);
    // Only the requests sent to it before the first bound ran out waited.
    let waited = samples
        .iter()
        .filter(|s| s.latency >= Duration::from_millis(900))
        .count();
    eprintln!("FAULT | replica paused 4 s | {waited} requests waited one first-answer bound");
    assert!(
        waited <= RATE as usize / 2,
        "{waited} requests waited: the silent replica stayed in rotation"
    );
}

async fn replica_503_while_starting() {
    let control = Control::new(200);
    let starting = Upstream::start("a", Behaviour::Controlled(control.clone())).await;
    let other = Upstream::start("b", Behaviour::Echo).await;
    let (samples, ()) = under_load(&[starting.addr, other.addr], async |_| {
        control.set_status(503);
        sleep(Duration::from_secs(3)).await;
        control.set_status(200);
        sleep(Duration::from_secs(1)).await;
    })
    .await;
    zero_failed(&Report::new(
        "replica 503 while starting (2 replicas)",
        &samples,
    ));
}

async fn rolling_update() {
    let mut live = upstreams(&["v1-a", "v1-b", "v1-c"]).await;
    let addrs: Vec<SocketAddr> = live.iter().map(|u| u.addr).collect();
    let (samples, removed) = under_load(&addrs, async |nodes| {
        let apply = |replicas: &[SocketAddr]| {
            for (i, node) in nodes.iter().enumerate() {
                let text = node_text_with(&format!("n{}", i + 1), "", "", &api(replicas));
                node.node().apply(Config::parse("n.toml", &text).unwrap());
            }
        };
        let mut removed = Vec::new();
        for name in ["v2-a", "v2-b", "v2-c"] {
            let new = Upstream::start(name, Behaviour::Echo).await;
            live.push(new);
            apply(&live.iter().map(|u| u.addr).collect::<Vec<_>>());
            sleep(Duration::from_millis(400)).await;
            let old = live.remove(0);
            apply(&live.iter().map(|u| u.addr).collect::<Vec<_>>());
            removed.push((old.name.clone(), Instant::now()));
            sleep(Duration::from_millis(400)).await;
            old.stop();
        }
        sleep(Duration::from_secs(1)).await;
        removed
    })
    .await;
    let mut report = Report::new("rolling update of 3 replicas", &samples);
    report.after_gone = Some(
        removed
            .iter()
            .map(|(name, at)| after(&samples, *at + Duration::from_millis(50), name))
            .sum(),
    );
    zero_failed(&report);
    assert_eq!(report.after_gone, Some(0), "answers from removed replicas");
}

/// Real replicas: containers of the test upstream on the machine's Docker
/// engine, which every node follows through a relay the test can cut.
/// `docker kill`, `docker pause`, then the engine's connection cut, each
/// under its own load.
async fn docker_replicas_and_engine() {
    use picket_tests::docker::{self, Container, Network, Relay, Spec};
    if !picket_tests::require("a Docker engine", docker::available()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create();
    let spec = Spec {
        service: "api",
        project: None,
        version: "1",
        healthy: None,
        labels: &[],
    };
    let containers: Vec<Container> = (0..3).map(|_| Container::run(&network, &spec)).collect();
    let mut relay = Relay::start().await;
    let routes = format!(
        "[runtime]\nkind = \"docker\"\nnetwork = \"{}\"\nendpoint = \"{}\"\n{RUNTIME_BREAKER}\n\
         [[route]]\nname = \"api\"\nservice = \"{}/api\"\nport = 8080\n\
         connect_timeout = \"1s\"\nfirst_answer_timeout = \"1s\"\ntries = 3\n",
        network.name,
        relay.endpoint(),
        network.name
    );
    let nodes = cluster::three(dir.path(), FEED, [&routes, &routes, &routes], INTERVAL).await;
    let ready_on_all = async |ready: u32, what: &str| {
        for node in &nodes {
            node.verdict_until("api", what, Duration::from_secs(20), |v| {
                v.ready == ready && v.runtime_stale_since_unix_ms.is_none()
            })
            .await;
        }
    };
    ready_on_all(3, "3 of 3 ready").await;

    // docker kill: the engine's `die` event takes it out on every node.
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    let killed = Instant::now();
    containers[0].kill();
    // The container is dead once `docker kill` has returned, which can take
    // a while on a loaded machine: what it answered before then is no fault.
    let dead = Instant::now();
    ready_on_all(2, "the killed container out").await;
    let seen = killed.elapsed();
    sleep(Duration::from_secs(2)).await;
    let samples = load.stop().await;
    let mut report = Report::new("container killed (docker kill)", &samples);
    report.after_gone = Some(after(
        &samples,
        dead + Duration::from_millis(50),
        &containers[0].name,
    ));
    report.recovered = Some(seen);
    zero_failed(&report);
    assert_eq!(report.after_gone, Some(0));

    // docker pause: connections are taken by the kernel, nothing answers.
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    let paused = Instant::now();
    containers[1].pause();
    ready_on_all(1, "the paused container out").await;
    let seen = paused.elapsed();
    sleep(Duration::from_secs(3)).await;
    containers[1].unpause();
    let unpaused = Instant::now();
    ready_on_all(2, "the unpaused container back").await;
    eprintln!(
        "FAULT | container paused | back in every node's rotation {:.1?} after the unpause",
        unpaused.elapsed()
    );
    sleep(Duration::from_secs(1)).await;
    let samples = load.stop().await;
    let mut report = Report::new("container paused 4 s (docker pause)", &samples);
    report.recovered = Some(seen);
    zero_failed(&report);

    // The engine's connection cut: the last known replicas stay.
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    let cut = Instant::now();
    relay.cut();
    let (stale_after, health) = out_of_reach(&nodes, 2, cut, Duration::from_secs(5)).await;
    relay.restore().await;
    let back = Instant::now();
    ready_on_all(2, "fresh data again").await;
    let recovered = back.elapsed();
    let samples = load.stop().await;
    let mut report = Report::new("Docker engine connection cut for 5 s", &samples);
    report.recovered = Some(recovered);
    // The event stream ends with the connection: stale at once.
    back_in_reach(&report, stale_after, health, Duration::from_secs(1));
    stop_all(nodes).await;
}

/// `picket-tui` attached to a node's feed: its own feed client and App, a
/// frame drawn on a test terminal after every message. What each frame
/// shows of the nodes' liveness goes to a watch channel.
struct Tui {
    shown: watch::Receiver<BTreeMap<String, Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tui {
    fn attach(info: &NodeInfo) -> Tui {
        let addr = info.feed.clone().expect("a feed address");
        let pin = info.feed_fingerprint.clone().expect("a fingerprint");
        let (tx, shown) = watch::channel(BTreeMap::new());
        let task = tokio::spawn(async move {
            let (out, mut msgs) = mpsc::channel(1024);
            let (_switch, switches) = mpsc::channel(1);
            let follow = tokio::spawn(feed::follow(addr, Trust::Pin(pin), None, out, switches));
            let mut app = App::new();
            let mut terminal = Terminal::new(TestBackend::new(160, 40)).unwrap();
            while let Some(msg) = msgs.recv().await {
                app.update(Msg::Tick {
                    now_unix_ms: feed::now_unix_ms(),
                });
                app.update(msg);
                terminal.draw(|frame| view::render(frame, &app)).unwrap();
                let _ = tx.send(liveness_drawn(terminal.backend().buffer()));
            }
            follow.abort();
        });
        Tui { shown, task }
    }

    /// Waits until the TUI draws a column for `node` whose liveness
    /// symbol passes `check`; panics after `within`.
    async fn until(&mut self, node: &str, within: Duration, check: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + within;
        loop {
            if self
                .shown
                .borrow_and_update()
                .get(node)
                .is_some_and(|symbols| symbols.iter().any(|s| check(s)))
            {
                return;
            }
            let changed = tokio::time::timeout_at(deadline, self.shown.changed()).await;
            assert!(
                matches!(changed, Ok(Ok(()))),
                "the TUI did not draw {node} as expected within {within:?}: {:?}",
                self.shown.borrow()
            );
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every node column the frame draws: its name on one row, its liveness
/// symbol below the name's first letter.
fn liveness_drawn(buffer: &Buffer) -> BTreeMap<String, Vec<String>> {
    let symbols = [theme::ALIVE, theme::SUSPECT, theme::DEAD];
    let mut drawn: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let area = buffer.area;
    for y in 0..area.height.saturating_sub(1) {
        let mut x = 0;
        while x < area.width {
            if buffer[(x, y)].symbol().trim().is_empty() {
                x += 1;
                continue;
            }
            let start = x;
            let mut word = String::new();
            while x < area.width && !buffer[(x, y)].symbol().trim().is_empty() {
                word.push_str(buffer[(x, y)].symbol());
                x += 1;
            }
            let below = buffer[(start, y + 1)].symbol();
            if symbols.contains(&below) {
                drawn.entry(word).or_default().push(below.to_string());
            }
        }
    }
    drawn
}

/// `name`'s liveness in each of its entries in `node`'s `/v1/cluster`.
async fn liveness_served(node: &TestNode, name: &str) -> Vec<String> {
    let (_, json) = node.admin_json("/v1/cluster").await;
    json["members"]
        .as_array()
        .map(|members| {
            members
                .iter()
                .filter(|m| m["name"] == name)
                .filter_map(|m| m["liveness"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `node`'s `/v1/cluster` until an entry of `name` has a liveness
/// `check` accepts; returns how long after `since` that was.
async fn served_until(
    node: &TestNode,
    name: &str,
    since: Instant,
    within: Duration,
    check: impl Fn(&str) -> bool,
) -> Duration {
    loop {
        let served = liveness_served(node, name).await;
        if served.iter().any(|l| check(l)) {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < within,
            "/v1/cluster: {name} is {served:?} after {within:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// When a watcher saw a node leave: suspect (or already dead), then dead.
#[derive(Debug, Clone, Copy)]
struct Gone {
    suspect: Duration,
    dead: Duration,
}

/// When `node`'s `/v1/cluster` and a TUI attached to `node` saw `name`
/// suspect and dead, from `since`.
async fn seen_gone(node: &TestNode, tui: &mut Tui, name: &str, since: Instant) -> (Gone, Gone) {
    let within = DEAD_BOUND + Duration::from_secs(5);
    let served = async {
        let suspect = served_until(node, name, since, within, |l| l != "alive").await;
        let dead = served_until(node, name, since, within, |l| l == "dead").await;
        Gone { suspect, dead }
    };
    let drawn = async {
        tui.until(name, within, |s| s != theme::ALIVE).await;
        let suspect = since.elapsed();
        tui.until(name, within, |s| s == theme::DEAD).await;
        Gone {
            suspect,
            dead: since.elapsed(),
        }
    };
    tokio::join!(served, drawn)
}

/// Both watchers saw the node gone within the failure detector's bounds.
fn within_bounds(fault: &str, served: Gone, drawn: Gone) {
    eprintln!(
        "FAULT | {fault} | /v1/cluster: suspect {:.1?}, dead {:.1?} | TUI: suspect {:.1?}, dead {:.1?}",
        served.suspect, served.dead, drawn.suspect, drawn.dead
    );
    for (who, gone) in [("/v1/cluster", served), ("the TUI", drawn)] {
        assert!(
            gone.suspect <= SUSPECT_BOUND,
            "{fault}: {who} showed it suspect only after {:?}",
            gone.suspect
        );
        assert!(
            gone.dead <= DEAD_BOUND,
            "{fault}: {who} showed it dead only after {:?}",
            gone.dead
        );
    }
}

fn node_text(key: &std::path::Path, name: &str, seeds: &[SocketAddr], routes: &str) -> String {
    node_text_with(name, FEED, &cluster::section(key, seeds, INTERVAL), routes)
}

async fn gateway_node_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let replicas = upstreams(&["a", "b"]).await;
    let routes = api(&replicas.iter().map(|u| u.addr).collect::<Vec<_>>());
    let key = cluster::key_file(dir.path(), "key");
    let first = TestNode::start(&node_text(&key, "n1", &[], &routes));
    let seed = first.gossip_addr().await;
    let second = TestNode::start(&node_text(&key, "n2", &[seed], &routes));
    let doomed = Killable::start(node_text(&key, "n3", &[seed], &routes));
    let mut tui = Tui::attach(&first.membership().await.info);
    tui.until("n3", Duration::from_secs(10), |s| s == theme::ALIVE)
        .await;
    let load = Load::start(vec![first.proxy, second.proxy], HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    doomed.kill();
    let killed = Instant::now();
    let (served, drawn) = seen_gone(&first, &mut tui, "n3", killed).await;
    // Back with a new generation; the dead entry may linger beside it.
    let again = TestNode::start(&node_text(&key, "n3", &[seed], &routes));
    let restarted = Instant::now();
    let back = served_until(&first, "n3", restarted, Duration::from_secs(10), |l| {
        l == "alive"
    })
    .await;
    tui.until("n3", Duration::from_secs(10), |s| s == theme::ALIVE)
        .await;
    sleep(Duration::from_secs(1)).await;
    let samples = load.stop().await;
    let mut report = Report::new(
        "gateway node killed, restarted (load on the others)",
        &samples,
    );
    report.recovered = Some(back);
    zero_failed(&report);
    within_bounds("gateway node killed", served, drawn);
    stop_all(vec![first, second, again]).await;
}

async fn gateway_node_partitioned() {
    use picket_tests::netns::{Host, LoopbackUdpCut};
    if !picket_tests::require(
        "root and iptables to cut a node's gossip",
        Host::available(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let replicas = upstreams(&["a", "b"]).await;
    let nodes = three(dir.path(), &[replicas[0].addr, replicas[1].addr]).await;
    let mut tui = Tui::attach(&nodes[0].membership().await.info);
    tui.until("n3", Duration::from_secs(10), |s| s == theme::ALIVE)
        .await;
    // Every node takes load: the cut one serves on from what it knows.
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    let cut = LoopbackUdpCut::new(nodes[2].gossip_addr().await.port()).unwrap();
    let partitioned = Instant::now();
    let (served, drawn) = seen_gone(&nodes[0], &mut tui, "n3", partitioned).await;
    // The cut node, for its part, sees the others go.
    for other in ["n1", "n2"] {
        served_until(&nodes[2], other, partitioned, DEAD_BOUND, |l| l == "dead").await;
    }
    drop(cut);
    let healed = Instant::now();
    for node in &nodes {
        for name in ["n1", "n2", "n3"] {
            served_until(node, name, healed, Duration::from_secs(15), |l| {
                l == "alive"
            })
            .await;
        }
    }
    let back = healed.elapsed();
    tui.until("n3", Duration::from_secs(5), |s| s == theme::ALIVE)
        .await;
    sleep(Duration::from_secs(1)).await;
    let samples = load.stop().await;
    let mut report = Report::new("gateway node partitioned (load on all three)", &samples);
    report.recovered = Some(back);
    zero_failed(&report);
    within_bounds("gateway node partitioned", served, drawn);
    stop_all(nodes).await;
}

async fn bad_input_at_every_port() {
    let dir = tempfile::tempdir().unwrap();
    let replicas = upstreams(&["a", "b"]).await;
    let addrs: Vec<SocketAddr> = replicas.iter().map(|u| u.addr).collect();
    let nodes = three(dir.path(), &addrs).await;
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_millis(500)).await;
    let before = rss_kb();
    let target = &nodes[0];
    // Malformed requests and oversized headers, many times over.
    let garbage = malformed_requests();
    for _ in 0..20 {
        for bytes in &garbage {
            for addr in [target.proxy, target.admin] {
                if let Ok(mut stream) = TcpStream::connect(addr).await {
                    let _ = stream.write_all(bytes).await;
                    let _ = stream.shutdown().await;
                }
            }
        }
    }
    // Slowloris: 200 connections that send a header byte now and then.
    let mut slow = Vec::new();
    for _ in 0..200 {
        if let Ok(mut stream) = TcpStream::connect(target.proxy).await {
            let _ = stream.write_all(b"GET / HTTP/1.1\r\nX-A: ").await;
            slow.push(stream);
        }
    }
    // Garbage on the gossip and feed ports.
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let gossip = target.gossip_addr().await;
    let feed: SocketAddr = target
        .membership()
        .await
        .info
        .feed
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    for bytes in garbage_datagrams() {
        let _ = udp.send_to(&bytes, gossip).await;
        let _ = udp.send_to(&bytes, feed).await;
    }
    for stream in &mut slow {
        let _ = stream.write_all(b"a").await;
    }
    sleep(Duration::from_secs(2)).await;
    drop(slow);
    let samples = load.stop().await;
    let after_rss = rss_kb();
    zero_failed(&Report::new("bad input at every port", &samples));
    eprintln!(
        "FAULT | bad input | RSS of the test process {before:?} kB before, {after_rss:?} kB after"
    );
    if let (Some(before), Some(after)) = (before, after_rss) {
        assert!(
            after < before + 64 * 1024,
            "memory grew from {before} to {after} kB"
        );
    }
    // Every port still answers normal traffic.
    let answer = client::get(target.proxy, HOST, "/").await.unwrap();
    assert_eq!(answer.status, 200);
    let (status, _) = target.admin_json("/v1/cluster").await;
    assert_eq!(status, 200);
    let gossip_dropped = target.node().metrics().gossip().dropped_total();
    assert!(gossip_dropped > 0, "the gossip garbage was counted");
    cluster::view_until(target, "gossip still flows", Duration::from_secs(5), |v| {
        v.members.iter().all(|m| m.liveness == Liveness::Alive) && v.members.len() == 3
    })
    .await;
    stop_all(nodes).await;
}

/// Asks `admin` for `/healthz` every 20 ms for `during`, from a thread of
/// its own with blocking I/O, so that the test's busy runtime does not
/// count as the node's time. Every answer must be 200.
fn probe_health(admin: SocketAddr, during: Duration) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut health = Vec::new();
        let started = std::time::Instant::now();
        while started.elapsed() < during {
            let asked = std::time::Instant::now();
            let mut stream = std::net::TcpStream::connect(admin).unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            health.push(asked.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        health
    })
}

/// The runtime's API out of reach for `lasting` from `since`: every node's
/// verdict keeps the last known `ready` replicas throughout, and `/healthz`
/// is asked meanwhile. Returns when every node's verdict first said its
/// data is stale, and how long each `/healthz` took.
async fn out_of_reach(
    nodes: &[TestNode],
    ready: u32,
    since: Instant,
    lasting: Duration,
) -> (Option<Duration>, Vec<Duration>) {
    let prober = probe_health(nodes[0].admin, lasting);
    let mut stale_after = None;
    while since.elapsed() < lasting {
        for node in nodes {
            let kept = node.verdict("api").map(|v| v.ready);
            assert_eq!(kept, Some(ready), "the last known replicas are kept");
        }
        if stale_after.is_none()
            && nodes.iter().all(|n| {
                n.verdict("api")
                    .is_some_and(|v| v.runtime_stale_since_unix_ms.is_some())
            })
        {
            stale_after = Some(since.elapsed());
        }
        sleep(Duration::from_millis(20)).await;
    }
    (stale_after, prober.join().unwrap())
}

/// The report of a runtime fault: nothing failed, `/healthz` answered at
/// once throughout (its p99 printed), the verdicts stale-marked within `bound` (plus a second).
fn back_in_reach(
    report: &Report,
    stale_after: Option<Duration>,
    mut health: Vec<Duration>,
    bound: Duration,
) {
    zero_failed(report);
    let p99 = picket_tests::client::percentile(&mut health, 99.0);
    eprintln!(
        "FAULT | {} | verdicts stale-marked after {stale_after:.1?} | /healthz {} samples, p99 {p99:.2?} | fresh {:.1?} after it returned",
        report.fault,
        health.len(),
        report.recovered.unwrap_or_default(),
    );
    let max = health.iter().max().copied().unwrap_or_default();
    assert!(
        max < picket_tests::AT_ONCE,
        "a /healthz answer took {max:?} while the runtime was out of reach"
    );
    let stale_after = stale_after.expect("the verdicts said the data is stale");
    assert!(
        stale_after <= bound + Duration::from_secs(1),
        "stale-marked only after {stale_after:?}"
    );
}

/// The runtime breaker of these nodes: a cut runtime comes back after a
/// few seconds here, and the figures measure how soon the nodes see it
/// with a 1 s cool-down (with the default 30 s, a runtime whose breaker
/// opened is called again only 30 s later).
const RUNTIME_BREAKER: &str = "breaker = { cooldown = \"1s\" }";

/// A fake Kubernetes API serving service `api` over `replicas`, one ready
/// pod each (named as the replica, image `api:1`).
async fn kube_api(replicas: &[Upstream]) -> picket_tests::fake_kube::FakeKube {
    use picket_tests::fake_kube::{FakeKube, Kind, service};
    let kube = FakeKube::start("test").await;
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    for replica in replicas {
        kube.apply(Kind::Pods, &api_pod(replica, "api:1"));
    }
    kube
}

/// `replica` as a ready pod of service `api`.
fn api_pod(replica: &Upstream, image: &str) -> k8s_openapi::api::core::v1::Pod {
    picket_tests::fake_kube::pod(
        &replica.name,
        "api",
        Some("127.0.0.1"),
        replica.addr.port(),
        true,
        image,
    )
}

/// Route `api` on the service of `kube`.
fn kube_routes(kube: &picket_tests::fake_kube::FakeKube) -> String {
    format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n{RUNTIME_BREAKER}\n\
         [[route]]\nname = \"api\"\nservice = \"api\"\nport = \"http\"\nfirst_answer_timeout = \"1s\"\n",
        kube.url()
    )
}

/// How the Kubernetes API server goes away.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// Accepts connections and answers nothing; open watches go quiet.
    Hanging,
    /// Ends every watch and closes every connection as it comes.
    Gone,
}

async fn runtime_api_hanging() {
    runtime_api_lost(Loss::Hanging).await;
}

async fn runtime_api_gone() {
    runtime_api_lost(Loss::Gone).await;
}

async fn runtime_api_lost(loss: Loss) {
    let lose = |kube: &picket_tests::fake_kube::FakeKube, lost: bool| match loss {
        Loss::Hanging => kube.hang(lost),
        Loss::Gone => kube.gone(lost),
    };
    let dir = tempfile::tempdir().unwrap();
    let replicas = upstreams(&["api-1", "api-2"]).await;
    let kube = kube_api(&replicas).await;
    let routes = kube_routes(&kube);
    let nodes = cluster::three(dir.path(), "", [&routes, &routes, &routes], INTERVAL).await;
    for node in &nodes {
        node.verdict_until("api", "2 of 2 ready", Duration::from_secs(10), |v| {
            v.ready == 2
        })
        .await;
    }
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_secs(1)).await;
    let lost = Instant::now();
    lose(&kube, true);
    // Long enough for a hung server's probe to say so.
    let lasting = Duration::from_secs(8);
    let (stale_after, health) = out_of_reach(&nodes, 2, lost, lasting).await;
    lose(&kube, false);
    let back = Instant::now();
    for node in &nodes {
        node.verdict_until("api", "fresh data again", Duration::from_secs(20), |v| {
            v.runtime_stale_since_unix_ms.is_none()
        })
        .await;
    }
    let recovered = back.elapsed();
    let samples = load.stop().await;
    let fault = format!("Kubernetes API {loss:?} for {} s", lasting.as_secs()).to_lowercase();
    let mut report = Report::new(&fault, &samples);
    report.recovered = Some(recovered);
    // The watcher retries silently; the node's probe of the API tells,
    // once the API server has been quiet for a while.
    let bound = picket::targets::kube::PROBE_QUIET + picket::targets::kube::STALE_AFTER;
    back_in_reach(&report, stale_after, health, bound);
    stop_all(nodes).await;
}

async fn reload_storm_during_a_rollout() {
    use picket_tests::fake_kube::Kind;
    let dir = tempfile::tempdir().unwrap();
    let mut live = upstreams(&["v1-1", "v1-2", "v1-3"]).await;
    let kube = kube_api(&live).await;
    let routes = |extra: bool| {
        let mut text = kube_routes(&kube);
        if extra {
            text.push_str("[[route]]\nname = \"extra\"\npath_prefix = \"/extra\"\nreplicas = [\"127.0.0.1:9\"]\n");
        }
        text
    };
    let plain = routes(false);
    let nodes = cluster::three(dir.path(), "", [&plain, &plain, &plain], INTERVAL).await;
    for node in &nodes {
        node.verdict_until("api", "3 of 3 ready", Duration::from_secs(10), |v| {
            v.ready == 3
        })
        .await;
    }
    // Ten reloads a second on every node, each a real change.
    let configs: Vec<[Config; 2]> = (1..=3)
        .map(|i| {
            let name = format!("n{i}");
            [false, true].map(|extra| {
                Config::parse("n.toml", &node_text_with(&name, "", "", &routes(extra))).unwrap()
            })
        })
        .collect();
    let targets: Vec<std::sync::Arc<picket::node::Node>> = nodes
        .iter()
        .map(|n| std::sync::Arc::clone(n.node()))
        .collect();
    let storm = tokio::spawn(async move {
        for i in 0usize.. {
            for (node, configs) in targets.iter().zip(&configs) {
                node.apply(configs[i % 2].clone());
            }
            sleep(Duration::from_millis(100)).await;
        }
    });
    let load = Load::start(proxies(&nodes), HOST, "/", RATE);
    sleep(Duration::from_millis(500)).await;
    let mut removed = Vec::new();
    for name in ["v2-1", "v2-2", "v2-3"] {
        let new = Upstream::start(name, Behaviour::Echo).await;
        kube.apply(Kind::Pods, &api_pod(&new, "api:2"));
        live.push(new);
        sleep(Duration::from_millis(400)).await;
        let old = live.remove(0);
        kube.delete(Kind::Pods, &old.name);
        removed.push((old.name.clone(), Instant::now()));
        sleep(Duration::from_millis(400)).await;
        old.stop();
    }
    sleep(Duration::from_millis(500)).await;
    let samples = load.stop().await;
    storm.abort();
    let mut report = Report::new("rollout of 3 pods during 10 reloads/s per node", &samples);
    report.after_gone = Some(
        removed
            .iter()
            .map(|(name, at)| after(&samples, *at + Duration::from_millis(50), name))
            .sum(),
    );
    zero_failed(&report);
    assert_eq!(
        report.after_gone,
        Some(0),
        "requests to a removed pod more than 50 ms after its removal"
    );
    let applied = nodes[0].node().metrics().encode();
    let reloaded = applied
        .lines()
        .find(|l| l.starts_with("picket_config_reloads_total{result=\"applied\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0);
    eprintln!("FAULT | reload storm | node 1 applied {reloaded} reloads during the rollout");
    assert!(reloaded >= 20.0, "the storm reloaded ({reloaded})");
    stop_all(nodes).await;
}

async fn replica_dropping_packets() {
    use picket_tests::netns::Host;
    if !picket_tests::require("root, ip and iptables for a test host", Host::available()) {
        return;
    }
    let mut host = Host::create().unwrap();
    let dropping = host
        .upstream(&picket_tests::binaries::test_upstream(), 8080, "dropping")
        .await
        .unwrap();
    let rest = upstreams(&["b", "c"]).await;
    let (samples, (dropped, seen)) =
        under_load(&[dropping, rest[0].addr, rest[1].addr], async |nodes| {
            host.drop_packets(8080).unwrap();
            let dropped = Instant::now();
            // Ejected on every node once a connect outlives its 1 s bound.
            let seen = every_verdict(nodes, 2, dropped, Duration::from_secs(3)).await;
            sleep(Duration::from_secs(4)).await;
            host.heal(8080).unwrap();
            sleep(Duration::from_secs(1)).await;
            (dropped, seen)
        })
        .await;
    let mut report = Report::new("replica dropping packets for 4 s", &samples);
    report.recovered = Some(seen);
    // Requests sent after the drop began that the dropping replica still
    // answered: connections made before the drop, finishing.
    report.after_gone = Some(after(
        &samples,
        dropped + Duration::from_millis(50),
        "dropping",
    ));
    zero_failed(&report);
}

/// Runs one fault on a runtime of its own, after the fault before it has
/// ended (a failed one included).
fn take_turn(fault: impl std::future::Future<Output = ()>) {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the fault")
        .block_on(fault);
}

macro_rules! under_load {
    ($($name:ident),* $(,)?) => {
        /// Every fault under load loses nothing: a test each.
        mod under_load {$(
            #[test]
            fn $name() {
                super::take_turn(super::$name());
            }
        )*}
    };
}

under_load!(
    replica_killed,
    replica_restarted_in_a_loop,
    replica_paused,
    replica_503_while_starting,
    replica_dropping_packets,
    rolling_update,
    docker_replicas_and_engine,
    gateway_node_killed_and_restarted,
    gateway_node_partitioned,
    runtime_api_hanging,
    runtime_api_gone,
    reload_storm_during_a_rollout,
    bad_input_at_every_port,
);
