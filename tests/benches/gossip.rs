//! Gossip at scale: 32 nodes × 500 routes on chitchat's in-memory
//! transport, on tokio's paused clock (virtual seconds: what the gossip
//! protocol needs, not how fast this machine computes it; wall time is
//! reported beside). Run by hand:
//!
//!   cargo bench -p picket-tests --bench gossip [-- NODES ROUTES]
//!
//! Reports: rounds and seconds until every node holds every verdict; a
//! change on one node reaching all others; a new node joining the full
//! cluster; bytes per gossip round per node (before the 83 bytes each
//! datagram gains when sealed). Then ACME: every node serves 50
//! certificates (`PICKET_BENCH_CERTS`), each a 4 KiB chain and key in
//! parts; before, every node passes every one on, as releases up to
//! 2026-12-05 did; after, none does while every node serves them, and one
//! node per certificate passes it on to a node that joins and lacks it.

// Wall time is measured beside the paused clock, on purpose.
#![allow(clippy::disallowed_types)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant as Wall};

use picket::config::ClusterSettings;
use picket::gossip::{self, ChannelTransport, Joining, Me, Membership, Transport, Wire};
use picket::metrics::Metrics;
use picket::shutdown::Tasks;
use picket_proto::{BreakerState, Heart, ImageCount, NodeInfo, Verdict};
use tokio::sync::watch;
use tokio::time::Instant;

const INTERVAL: Duration = Duration::from_secs(1);

fn verdicts(node: usize, routes: usize, generation: u64) -> Arc<Vec<Verdict>> {
    Arc::new(
        (0..routes)
            .map(|r| Verdict {
                route: format!("route-{r:04}").into(),
                heart: Heart::Green,
                reason: format!("all {} ready", 2 + (r + node) % 3).into(),
                ready: 2,
                total: 2,
                images: vec![ImageCount {
                    image: format!("registry.example.com/team/service-{r}:1.{generation}"),
                    replicas: 2,
                }]
                .into(),
                circuit: BreakerState::Closed,
                since_unix_ms: 1_796_000_000_000 + generation,
                runtime_stale_since_unix_ms: None,
            })
            .collect(),
    )
}

struct BenchNode {
    membership: Arc<Membership>,
    verdicts: watch::Sender<Arc<Vec<Verdict>>>,
    _trigger: picket::shutdown::Trigger,
    _tasks: Tasks,
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, (i / 250) as u8, (i % 250) as u8 + 1], 7946))
}

async fn start(i: usize, routes: usize, transport: &Arc<dyn Transport>) -> BenchNode {
    let settings = ClusterSettings {
        id: "bench".into(),
        gossip: addr(i),
        advertise: None,
        seeds: vec![addr(0).to_string()],
        key_file: None,
        insecure: true,
        gossip_interval: INTERVAL,
    };
    let (tx, rx) = watch::channel(verdicts(i, routes, 0));
    let (trigger, shutdown) = picket::shutdown::channel();
    let me = Me {
        info: NodeInfo {
            name: format!("n{i:03}"),
            version: "bench".into(),
            admin: format!("{}:9900", addr(i).ip()),
            feed: None,
            feed_fingerprint: None,
            runtime: "kubernetes".into(),
            started_unix_ms: 1_796_000_000_000 + i as u64,
        },
    };
    let mut tasks = Tasks::default();
    let membership = gossip::start(
        Joining {
            settings: Some(&settings),
            keys: None,
            wire: Wire::Given(Arc::clone(transport)),
            me,
            verdicts: rx,
            // No route table: the bench's nodes say none.
            table: tokio::sync::watch::channel(None).1,
            // No ACME certificates either.
            certificates: tokio::sync::watch::channel(Arc::default()).1,
            metrics: Arc::new(Metrics::new()),
        },
        shutdown,
        &mut tasks,
    )
    .await
    .expect("a bench node starts");
    BenchNode {
        membership,
        verdicts: tx,
        _trigger: trigger,
        _tasks: tasks,
    }
}

/// Polls (in virtual time) until `done` holds on every node.
async fn until(
    nodes: &[BenchNode],
    mut done: impl FnMut(&picket_proto::ClusterView) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if nodes.iter().all(|n| done(&n.membership.view())) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "never converged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn full(view: &picket_proto::ClusterView, nodes: usize, routes: usize) -> bool {
    view.members.len() == nodes && view.members.iter().all(|m| m.verdicts.len() == routes)
}

fn main() {
    let (count, routes) = picket_tests::bench_size(32, 500);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let channel = ChannelTransport::default();
        let transport: Arc<dyn Transport> = Arc::new(channel.clone());
        let wall = Wall::now();
        let mut nodes = Vec::new();
        for i in 0..count {
            nodes.push(start(i, routes, &transport).await);
        }
        let took = until(&nodes, |v| full(v, count, routes)).await;
        println!(
            "{count} nodes x {routes} routes: every node holds every verdict after {:.1} s = {:.0} rounds (wall {:.1} s)",
            took.as_secs_f64(),
            took.as_secs_f64() / INTERVAL.as_secs_f64(),
            wall.elapsed().as_secs_f64()
        );

        // Steady state: heartbeats and digests only.
        let before = channel.statistics();
        tokio::time::sleep(INTERVAL * 10).await;
        let after = channel.statistics();
        let steady = (after.num_bytes_total - before.num_bytes_total) as f64 / 10.0 / count as f64;
        let steady_messages = (after.num_messages_total - before.num_messages_total) as f64 / 10.0 / count as f64;
        println!("steady state: {steady:.0} bytes and {steady_messages:.1} messages per gossip round per node");

        // One verdict changes on one node, ten times.
        let mut changes = Vec::new();
        let before = channel.statistics();
        for generation in 1..=10u64 {
            let mut changed = (*verdicts(0, routes, 0)).clone();
            changed[7].heart = Heart::Red;
            changed[7].reason = format!("none ready ({generation})").into();
            nodes[0].verdicts.send_replace(Arc::new(changed));
            let reason = format!("none ready ({generation})");
            let took = until(&nodes, |v| {
                v.members.iter().find(|m| m.name == "n000").is_some_and(|m| m.verdicts.get(7).is_some_and(|v| *v.reason == *reason))
            })
            .await;
            changes.push(took);
        }
        let after = channel.statistics();
        changes.sort();
        println!(
            "one verdict changed on one node, reaching all {count}: median {:.2} s, max {:.2} s (10 changes); {:.0} bytes per round per node meanwhile",
            changes[changes.len() / 2].as_secs_f64(),
            changes[changes.len() - 1].as_secs_f64(),
            (after.num_bytes_total - before.num_bytes_total) as f64
                / (changes.iter().sum::<Duration>().as_secs_f64() / INTERVAL.as_secs_f64()).max(1.0)
                / count as f64
        );

        // A new node joins the full cluster.
        let wall = Wall::now();
        nodes.push(start(count, routes, &transport).await);
        let took = until(&nodes, |v| full(v, count + 1, routes)).await;
        println!(
            "a new node joins: it and every other node hold all {} x {routes} verdicts after {:.1} s = {:.0} rounds (wall {:.1} s)",
            count + 1,
            took.as_secs_f64(),
            took.as_secs_f64() / INTERVAL.as_secs_f64(),
            wall.elapsed().as_secs_f64()
        );

        // ACME: CERTS certificates (`PICKET_BENCH_CERTS`, 50) that every
        // node serves. Every node writes its state of each (and its
        // directory), as `[acme]` does.
        let certs: usize = std::env::var("PICKET_BENCH_CERTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50);
        let pem = certificate_pem();
        let directory = "https://acme-v02.api.letsencrypt.org/directory";
        let names: Vec<String> = (0..certs).map(|c| format!("site{c:02}.example.com")).collect();
        let issued = picket_proto::acme::Issued {
            serial: "0a1b2c3d4e5f".into(),
            not_before_unix: 1_796_000_000,
            not_after_unix: 1_803_776_000,
            by: "n000".into(),
            directory: directory.into(),
            parts: 0,
            digest: String::new(),
        };
        let certificate_keys = |name: &str| {
            picket::acme::shared::pass_on(name, &issued, &pem).expect("a certificate fits")
        };
        for (i, node) in nodes.iter().enumerate() {
            for (key, value) in acme_keys(i, &names, directory, &issued) {
                node.membership.set_own(&key, &value).await;
            }
        }
        until_held(&nodes, 0, certs).await;

        // Before: every node passes on every certificate it serves.
        let before = channel.statistics();
        let passing = Instant::now();
        for node in &nodes {
            for name in &names {
                for (key, value) in certificate_keys(name) {
                    node.membership.set_own(&key, &value).await;
                }
            }
        }
        let copies = nodes.len() * certs;
        let took = until_held(&nodes, copies, certs).await;
        let after = channel.statistics();
        println!(
            "before (every node passes on every certificate, {certs} certificates of {} bytes of PEM): every node holds all {copies} copies after {:.1} s = {:.0} rounds; {:.0} bytes per round per node meanwhile",
            pem.len(),
            took.as_secs_f64(),
            took.as_secs_f64() / INTERVAL.as_secs_f64(),
            (after.num_bytes_total - before.num_bytes_total) as f64
                / (passing.elapsed().as_secs_f64() / INTERVAL.as_secs_f64()).max(1.0)
                / nodes.len() as f64
        );
        let steady_before = steady_bytes(&channel, nodes.len()).await;
        let held_before = acme_bytes(&nodes[1]).await;
        println!(
            "before, steady: {steady_before:.0} bytes per gossip round per node; {held_before} bytes of ACME values held by each node"
        );

        // After: steady, no node passes a certificate on.
        for node in &nodes {
            for name in &names {
                for (key, _) in certificate_keys(name) {
                    node.membership.delete_own(&key).await;
                }
            }
        }
        until_held(&nodes, 0, certs).await;
        tokio::time::sleep(INTERVAL * 5).await;
        let steady_after = steady_bytes(&channel, nodes.len()).await;
        let held_after = acme_bytes(&nodes[1]).await;
        println!(
            "after, steady: {steady_after:.0} bytes per gossip round per node; {held_after} bytes of ACME values held by each node"
        );

        // After: a node joins and lacks them all; for each certificate the
        // one node `plan::passer` picks among those that serve it passes
        // it on, until the newcomer serves it.
        let wall = Wall::now();
        let joined = Instant::now();
        let before = channel.statistics();
        let holders: Vec<String> = (0..nodes.len()).map(|i| format!("n{i:03}")).collect();
        nodes.push(start(nodes.len(), routes, &transport).await);
        for name in &names {
            let passer = picket::acme::plan::passer(
                name,
                &issued.serial,
                holders.iter().map(String::as_str),
            )
            .expect("a passer");
            let i = holders.iter().position(|h| h == passer).expect("a node");
            for (key, value) in certificate_keys(name) {
                nodes[i].membership.set_own(&key, &value).await;
            }
        }
        let late = nodes.last().expect("the new node");
        let all = until_held(std::slice::from_ref(late), certs, certs).await;
        let after = channel.statistics();
        println!(
            "after, a node joins: it holds all {certs} certificates after {:.1} s = {:.0} rounds (wall {:.1} s); {:.0} bytes per round per node meanwhile",
            all.as_secs_f64(),
            all.as_secs_f64() / INTERVAL.as_secs_f64(),
            wall.elapsed().as_secs_f64(),
            (after.num_bytes_total - before.num_bytes_total) as f64
                / (joined.elapsed().as_secs_f64() / INTERVAL.as_secs_f64()).max(1.0)
                / nodes.len() as f64
        );
        for node in &nodes {
            node.membership.leave().await;
        }
    });
}

/// The ACME keys node `i` writes while it serves `names`: its directory,
/// and its state of each.
fn acme_keys(
    i: usize,
    names: &[String],
    directory: &str,
    issued: &picket_proto::acme::Issued,
) -> Vec<(String, String)> {
    use picket_proto::acme::{AcmeNode, CertificateState, NODE_KEY, Phase, STATE_PREFIX};
    use picket_proto::gossip::encode_value;
    let mut keys = vec![(
        NODE_KEY.to_string(),
        encode_value(&AcmeNode {
            directory: directory.into(),
        })
        .expect("fits"),
    )];
    for name in names {
        let state = CertificateState {
            name: name.clone(),
            phase: Phase::Serving,
            serial: Some(issued.serial.clone()),
            not_after_unix: Some(issued.not_after_unix),
            renew_at_unix: Some(issued.not_after_unix - 30 * 86_400),
            orderer: Some(format!("n{:03}", i % 7)),
            issued_by: Some(issued.by.clone()),
            error: None,
            retry_at_unix: None,
        };
        keys.push((
            format!("{STATE_PREFIX}{name}"),
            encode_value(&state).expect("fits"),
        ));
    }
    keys
}

/// Bytes per gossip round per node over ten quiet rounds.
async fn steady_bytes(channel: &ChannelTransport, nodes: usize) -> f64 {
    let before = channel.statistics();
    tokio::time::sleep(INTERVAL * 10).await;
    let after = channel.statistics();
    (after.num_bytes_total - before.num_bytes_total) as f64 / 10.0 / nodes as f64
}

/// Bytes of every ACME value a node's view holds (every node's keys).
async fn acme_bytes(node: &BenchNode) -> usize {
    node.membership
        .acme_entries()
        .await
        .iter()
        .map(|e| e.key.len() + e.value.len())
        .sum()
}

/// Polls (in virtual time, every 100 ms) until the first, a middle and
/// the last node of `nodes` each hold `copies` whole certificates passed
/// on (exactly, when `copies` is 0) and states of `certs` certificates:
/// every node reads every other's keys, so the probes stand for all.
async fn until_held(nodes: &[BenchNode], copies: usize, certs: usize) -> Duration {
    let start = Instant::now();
    let probes: Vec<&BenchNode> = [0, nodes.len() / 2, nodes.len() - 1]
        .iter()
        .map(|i| &nodes[*i])
        .collect();
    loop {
        let mut held = Vec::with_capacity(probes.len());
        for node in &probes {
            let shared = picket::acme::shared::read(&node.membership.acme_entries().await);
            let states: usize = shared.states.values().map(|s| s.len()).sum();
            held.push((shared.certificates.len(), states));
        }
        let done = held.iter().all(|(n, states)| {
            (if copies == 0 { *n == 0 } else { *n >= copies }) && *states >= certs
        });
        if done {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "never converged: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A chain and key of the size Let's Encrypt issues (a leaf and an
/// intermediate, an ECDSA key): about 4 KiB of PEM.
fn certificate_pem() -> String {
    let body = |n: usize, seed: usize| -> String {
        let line: String = (0..64)
            .map(|i| char::from(b'A' + ((i * 7 + seed) % 26) as u8))
            .collect();
        std::iter::repeat_n(format!("{line}\n"), n).collect()
    };
    format!(
        "-----BEGIN CERTIFICATE-----\n{}-----END CERTIFICATE-----\n\
         -----BEGIN CERTIFICATE-----\n{}-----END CERTIFICATE-----\n\
         -----BEGIN PRIVATE KEY-----\n{}-----END PRIVATE KEY-----\n",
        body(21, 1),
        body(27, 2),
        body(3, 3)
    )
}
