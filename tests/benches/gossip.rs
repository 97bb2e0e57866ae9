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
//! datagram gains when sealed). Then every node passes on an ACME
//! certificate (a 4 KiB chain and key, in parts, as `[acme]` does), and
//! another node joins: when it holds a whole certificate, and all of them.

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

        // Every node passes on the certificate it serves, as with `[acme]`.
        let pem = certificate_pem();
        let issued = picket_proto::acme::Issued {
            serial: "0a1b2c3d4e5f".into(),
            not_before_unix: 1_796_000_000,
            not_after_unix: 1_803_776_000,
            by: "n000".into(),
            parts: 0,
            digest: String::new(),
        };
        let keys = picket::acme::shared::pass_on("shop.example.com", &issued, &pem)
            .expect("a certificate fits");
        let before = channel.statistics();
        let passing = Instant::now();
        for node in &nodes {
            for (key, value) in &keys {
                node.membership.set_own(key, value).await;
            }
        }
        let copies = nodes.len();
        let took = until_certificates(&nodes, copies).await;
        let after = channel.statistics();
        println!(
            "every node passes on a certificate ({} bytes of PEM in {} keys): every node holds all {copies} copies after {:.1} s = {:.0} rounds; {:.0} bytes per round per node meanwhile",
            pem.len(),
            keys.len(),
            took.as_secs_f64(),
            took.as_secs_f64() / INTERVAL.as_secs_f64(),
            (after.num_bytes_total - before.num_bytes_total) as f64
                / (passing.elapsed().as_secs_f64() / INTERVAL.as_secs_f64()).max(1.0)
                / copies as f64
        );
        let before = channel.statistics();
        tokio::time::sleep(INTERVAL * 10).await;
        let after = channel.statistics();
        println!(
            "steady state with certificates: {:.0} bytes per gossip round per node",
            (after.num_bytes_total - before.num_bytes_total) as f64 / 10.0 / copies as f64
        );
        // A node that joins later: its first whole certificate, then all.
        let wall = Wall::now();
        let joined = Instant::now();
        nodes.push(start(copies, routes, &transport).await);
        let late = nodes.last().expect("the new node");
        let first = loop {
            let shared = picket::acme::shared::read(&late.membership.acme_entries().await);
            if !shared.certificates.is_empty() {
                break joined.elapsed();
            }
            assert!(joined.elapsed() < Duration::from_secs(3600), "never got one");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let all = until_certificates(std::slice::from_ref(late), copies).await + first;
        println!(
            "a node that joins later holds a whole certificate after {:.1} s = {:.0} rounds, all {copies} copies after {:.1} s (wall {:.1} s)",
            first.as_secs_f64(),
            first.as_secs_f64() / INTERVAL.as_secs_f64(),
            all.as_secs_f64(),
            wall.elapsed().as_secs_f64()
        );
        for node in &nodes {
            node.membership.leave().await;
        }
    });
}

/// Polls (in virtual time) until every node holds `copies` whole
/// certificates passed on.
async fn until_certificates(nodes: &[BenchNode], copies: usize) -> Duration {
    let start = Instant::now();
    loop {
        let mut held = Vec::with_capacity(nodes.len());
        for node in nodes {
            let entries = node.membership.acme_entries().await;
            held.push(picket::acme::shared::read(&entries).certificates.len());
        }
        if held.iter().all(|n| *n >= copies) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "never converged: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
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
